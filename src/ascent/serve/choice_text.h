// One choice's text as its tokens arrive: each token's piece (SentencePiece's leading space dropped after BOS, as
// `ascent generate` prints), cut at whole UTF-8 characters, then held back while it may still begin a stop string.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ascent/serve/stop_strings.h"
#include "ascent/tokenizer/tokenizer.h"

namespace ascent::serve {

class ChoiceText {
 public:
  // prev: the prompt's last id (a BOS there makes the first piece lose its leading space).
  ChoiceText(const tokenizer::Tokenizer& tok, std::vector<std::string> stops, int32_t prev);
  // The text now safe to show, and whether a stop string ended it (its text then ends where the stop began).
  StopPush push(int32_t id);
  // Whatever is left once no more tokens come (a stop string may still complete in the last partial character).
  StopPush finish();
  // Bytes decoded so far, before any holding back: the offset of the next token's text.
  int64_t decoded_bytes() const { return decoded_; }

 private:
  const tokenizer::Tokenizer& tok_;
  tokenizer::Utf8Stream utf8_;
  StopMatcher stops_;
  int32_t prev_;
  int64_t decoded_ = 0;
};

}  // namespace ascent::serve
