// Finds and loads the tokenizer that goes with a model: an explicit --tokenizer path (tokenizer.bin,
// tokenizer.json, a .gguf, or a folder holding tokenizer.json), else the model's own (the HF folder's
// tokenizer.json, the GGUF file's vocabulary).
#pragma once

#include <memory>
#include <string>

#include "ascent/model/gguf.h"
#include "ascent/model/model.h"
#include "ascent/tokenizer/tokenizer.h"

namespace ascent::model {

tokenizer::Vocab vocab_from_gguf(const GgufFile& f);
// Loads a vocabulary from a file or folder by its kind; vocab_size is needed for llama2.c tokenizer.bin files.
tokenizer::Vocab load_vocab(const std::string& path, int64_t vocab_size);
std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const Model& m, const std::string& explicit_path);

}  // namespace ascent::model
