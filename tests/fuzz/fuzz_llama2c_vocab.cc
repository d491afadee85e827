// llama2.c tokenizer.bin (tokenizer/vocab_readers.cc's read_llama2c_vocab), read to its end as load_vocab does
// without a model (vocabulary size 0) and at the size of stories260K's vocabulary, then a Tokenizer that encodes.
#include "fuzz_common.h"

using namespace ascent;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("tokenizer.bin", std::span(data, size));
  for (const int64_t vocab_size : {0, 512}) {
    fuzz::refused(
        [&] { fuzz::exercise_tokenizer(tokenizer::Tokenizer(tokenizer::read_llama2c_vocab(path, vocab_size))); });
  }
  return 0;
}
