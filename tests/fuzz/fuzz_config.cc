// The JSON configuration readers: config.json and generation_config.json (model/hf.cc's read_hf_config) and
// tokenizer_config.json (tokenizer/chat_template.cc's from_tokenizer_config, then its template rendered). The
// input's first byte picks the file (modulo 3) and the rest is its text; the other file of a model folder is a fixed
// valid one.
#include "fuzz_common.h"

#include "ascent/model/loaders.h"
#include "ascent/tokenizer/chat_template.h"

using namespace ascent;

namespace {

constexpr const char* kConfig = R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 32,
  "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2, "vocab_size": 64,
  "bos_token_id": 1, "eos_token_id": 2})";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  for (const char* dir : {"/config", "/generation"}) std::filesystem::create_directories(fuzz::scratch_dir() + dir);
  fuzz::write_scratch("generation/config.json", std::string(kConfig));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> text(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      fuzz::write_scratch("config/config.json", text);
      model::ModelConfig cfg;
      fuzz::refused([&] { model::read_hf_config(fuzz::scratch_dir() + "/config", cfg); });
      break;
    }
    case 1: {
      fuzz::write_scratch("generation/generation_config.json", text);
      model::ModelConfig cfg;
      fuzz::refused([&] { model::read_hf_config(fuzz::scratch_dir() + "/generation", cfg); });
      break;
    }
    default: {
      const std::string path = fuzz::write_scratch("tokenizer_config.json", text);
      static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(
          R"({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
              {"role": "assistant", "content": "hello"}], "add_generation_prompt": true})");
      fuzz::refused([&] { (void)tokenizer::ChatTemplate::from_tokenizer_config(path).render(context); });
      break;
    }
  }
  return 0;
}
