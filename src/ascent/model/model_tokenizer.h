// Finds and loads the tokenizer that goes with a model: an explicit --tokenizer path (tokenizer.bin,
// tokenizer.json, a .gguf, or a folder holding tokenizer.json), else the model's own (the HF folder's
// tokenizer.json, the GGUF file's vocabulary).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ascent/model/gguf.h"
#include "ascent/model/model.h"
#include "ascent/tokenizer/tokenizer.h"

namespace ascent::model {

tokenizer::Vocab vocab_from_gguf(const GgufFile& f);
// Loads a vocabulary from a file or folder by its kind; vocab_size is needed for llama2.c tokenizer.bin files.
tokenizer::Vocab load_vocab(const std::string& path, int64_t vocab_size);
std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const Model& m, const std::string& explicit_path);

// Where a model's vocabulary may be: read_checkpoint's results (Model has the same).
struct VocabPlace {
  Format format = Format::HuggingFace;
  std::string path;    // the model as named
  std::string source;  // the folder or file its tensors came from (an HF folder)
  int64_t vocab_size = 0;
  const GgufFile* gguf = nullptr;
  const EmbeddedTokenizer* embedded = nullptr;
};

// A vocabulary as found: explicit_path, else the model's own (an HF folder's tokenizer.json, tokenizer.model or
// encoder.json + vocab.bpe; a GGUF's metadata; an Ascent file's embedded one; llama2.c's tokenizer.bin beside it).
struct FoundVocab {
  tokenizer::Vocab vocab;
  std::string from;     // the file or folder read; empty when the model has none
  std::string missing;  // then why, in one line that ends "; pass --tokenizer" where one would do
  // A GGUF source's tokenizer.* keys as stored: a GGUF written from it carries them over unchanged.
  std::vector<std::pair<std::string, GgufValue>> gguf_keys;
};
// parse_gguf false: a GGUF source gives only its keys, so one whose vocabulary Ascent's encoder does not run (another
// tokenizer.ggml.pre) still converts.
FoundVocab find_vocab(const VocabPlace& place, const std::string& explicit_path, bool parse_gguf = true);

// Adds the vocabulary to a GGUF being written, in the keys llama.cpp reads (tokenizer.ggml.*), padded with unused
// tokens to n_vocab as llama.cpp's converter pads. `path` is the file written, for messages. A vocabulary whose
// encoding those keys cannot describe is refused by name (or warned about where only rare text differs): the file
// would tokenize otherwise in llama.cpp and in Ascent.
void add_gguf_vocab(GgufWriter& out, const FoundVocab& found, int64_t n_vocab, const std::string& path);

}  // namespace ascent::model
