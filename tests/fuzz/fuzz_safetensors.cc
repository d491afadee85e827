// safetensors files (model/safetensors.cc) as a Hugging Face folder holds them: the header-only reader
// (read_safetensors_header, which tells Ascent files apart), then Model::load of a folder with a fixed config.json
// and the input as model.safetensors, with one token run. The config is the shape scripts/fuzz_corpus.py cuts
// story-656K down to for the seeds, so that a seed loads whole and mutations start from a model that runs.
#include "fuzz_common.h"

#include "ascent/model/safetensors.h"

using namespace ascent;

namespace {

constexpr const char* kConfig = R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 32,
  "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2, "vocab_size": 64,
  "max_position_embeddings": 64, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "tie_word_embeddings": true,
  "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"})";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  std::filesystem::create_directories(fuzz::scratch_dir() + "/hf");
  fuzz::write_scratch("hf/config.json", std::string(kConfig));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("hf/model.safetensors", std::span(data, size));
  fuzz::refused([&] { (void)model::read_safetensors_header(path); });
  fuzz::refused([&] { fuzz::load_and_run(fuzz::scratch_dir() + "/hf", /*with_tokenizer=*/false); });
  return 0;
}
