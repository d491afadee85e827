// GGUF files (model/gguf_reader.cc, gguf_model.cc): the header, metadata and tensor table; the vocabulary a file
// carries (model_tokenizer.cc's vocab_from_gguf, then a Tokenizer that encodes); and the whole of Model::load with
// one token run, as `ascent generate -m FILE.gguf` does.
#include "fuzz_common.h"

#include "ascent/model/gguf.h"

using namespace ascent;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.gguf", std::span(data, size));
  fuzz::refused([&] {
    const model::GgufFile f(path);
    if (f.find("tokenizer.ggml.model") != nullptr) {
      fuzz::refused([&] { fuzz::exercise_tokenizer(tokenizer::Tokenizer(model::vocab_from_gguf(f))); });
    }
  });
  fuzz::refused([&] { fuzz::load_and_run(path, /*with_tokenizer=*/true); });
  return 0;
}
