#include "ascent/serve/choice_text.h"

#include <utility>

namespace ascent::serve {

ChoiceText::ChoiceText(const tokenizer::Tokenizer& tok, std::vector<std::string> stops, int32_t prev)
    : tok_(tok), stops_(std::move(stops)), prev_(prev) {}

StopPush ChoiceText::push(int32_t id) {
  const bool strip = prev_ == tok_.bos() && tok_.vocab().kind == tokenizer::VocabKind::Spm;
  prev_ = id;
  // An id past the tokenizer's pieces (a model whose embedding rows outnumber its vocabulary) has no text.
  const std::string piece = id >= 0 && id < tok_.size() ? tok_.decode_token(id, strip) : std::string();
  decoded_ += static_cast<int64_t>(piece.size());
  return stops_.push(utf8_.push(piece));
}

StopPush ChoiceText::finish() {
  StopPush p = stops_.push(utf8_.flush());
  p.text += stops_.flush();  // empty after a stop
  return p;
}

}  // namespace ascent::serve
