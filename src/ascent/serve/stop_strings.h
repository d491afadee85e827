// OpenAI's `stop` at the text level: generated text passes through a StopMatcher, which emits only what can no
// longer be part of a stop string and reports the first one that occurs. The text arrives in pieces of whole code
// points (a Utf8Stream's output), and a stop string may span any number of them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ascent::serve {

struct StopPush {
  std::string text;      // safe to send now
  bool stopped = false;  // a stop string matched: text ends where it began, and nothing more comes
};

class StopMatcher {
 public:
  static constexpr size_t kMaxStops = 4;  // as OpenAI allows

  // Throws Error naming `stop` for more than kMaxStops strings or an empty one (it would match before any text).
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends piece to the text. A stop string that now occurs ends the text where it starts; when several occur, the
  // earliest start wins. The match is decided at the first piece that completes one: a longer stop string that began
  // earlier but is still unfinished is not waited for. Otherwise the text is returned up to the longest tail that
  // is a proper prefix of some stop string, which is held back. After a stop, pieces are ignored.
  StopPush push(std::string_view piece);

  // The held-back text, once no more pieces come (empty after a stop).
  std::string flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace ascent::serve
