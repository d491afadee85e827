// llama2.c checkpoints (model/llama2c.cc): the 7-int header and the size it promises, then the whole of Model::load
// with one token run, as `ascent generate -m FILE.bin` does.
#include "fuzz_common.h"

using namespace ascent;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.bin", std::span(data, size));
  fuzz::refused([&] { fuzz::load_and_run(path, /*with_tokenizer=*/false); });
  return 0;
}
