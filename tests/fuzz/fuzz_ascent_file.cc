// Ascent's quantized files (model/ascent_file.cc, a safetensors container): the header, the metadata (version,
// config, quant, tensor table, tokenizer kind), the int8/int4 matrices and their scales, and the embedded tokenizer,
// through Model::load and load_tokenizer with one token run, as `ascent generate -m FILE.safetensors` does.
#include "fuzz_common.h"

#include "ascent/model/ascent_file.h"

using namespace ascent;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // No config.json beside it: a file that is not an Ascent one is refused as a safetensors file outside a model
  // folder, as the command line refuses it.
  const std::string path = fuzz::write_scratch("model.safetensors", std::span(data, size));
  fuzz::refused([&] { fuzz::load_and_run(path, /*with_tokenizer=*/true); });
  return 0;
}
