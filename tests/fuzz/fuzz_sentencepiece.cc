// SentencePiece tokenizer.model (tokenizer/sentencepiece_model.cc: the protobuf ModelProto read without
// libsentencepiece), then a Tokenizer built from it that encodes and decodes.
#include "fuzz_common.h"

using namespace ascent;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("tokenizer.model", std::span(data, size));
  fuzz::refused([&] { fuzz::exercise_tokenizer(tokenizer::Tokenizer(tokenizer::read_sentencepiece_model(path))); });
  return 0;
}
