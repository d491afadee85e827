#include "ascent/serve/stop_strings.h"

#include <algorithm>
#include <utility>

#include "ascent/base/error.h"

namespace ascent::serve {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  ASCENT_CHECK(stops_.size() <= kMaxStops, "stop: at most {} strings, got {}", kMaxStops, stops_.size());
  for (size_t i = 0; i < stops_.size(); ++i) {
    ASCENT_CHECK(!stops_[i].empty(), "stop: string {} is empty, and an empty string would match before any text", i);
  }
}

// Text already emitted holds no stop string and ends with no proper prefix of one, so a match can only start in
// held_. Searching held_ alone finds every match, and held_ stays shorter than the longest stop string plus a piece.
StopPush StopMatcher::push(std::string_view piece) {
  if (stopped_) return {"", true};
  held_.append(piece);
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string text = held_.substr(0, first);
    held_.clear();
    return {std::move(text), true};
  }
  size_t hold = 0;  // the longest tail of held_ that a stop string starts with
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > hold; --n) {
      if (std::string_view(held_).substr(held_.size() - n) == std::string_view(s).substr(0, n)) {
        hold = n;
        break;
      }
    }
  }
  std::string text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return {std::move(text), false};
}

std::string StopMatcher::flush() {
  std::string text = std::move(held_);
  held_.clear();
  return text;
}

}  // namespace ascent::serve
