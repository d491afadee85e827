// Hugging Face tokenizer.json (tokenizer/vocab_readers.cc's read_tokenizer_json): model, added tokens, normalizer,
// pre-tokenizer, decoder and post-processor, then a Tokenizer built from it that encodes and decodes.
#include "fuzz_common.h"

using namespace ascent;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("tokenizer.json", std::span(data, size));
  fuzz::refused([&] { fuzz::exercise_tokenizer(tokenizer::Tokenizer(tokenizer::read_tokenizer_json(path))); });
  return 0;
}
