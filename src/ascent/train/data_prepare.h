// `ascent data prepare`: text files -> a data folder that TokenData (train/dataset.h) reads. Each file is split into
// documents at blank lines, documents go to train or val by a seeded draw, and worker threads encode them.
//
// The folder holds, per split, SPLIT.bin and SPLIT.idx. The .bin holds token ids, little-endian: uint16 when the
// vocabulary has at most 65536 pieces, else int32. The .idx holds int64 offsets of each document's first token, then
// the split's token count. index.json gives the format, version, dtype, the tokenizer's fingerprint and ids, each
// split's tokens and documents, and the inputs. Each file is written whole or not at all, index.json last. An old
// index.json is removed before the first token file is opened, so a folder whose prepare stopped midway has no
// index.json and is refused.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ascent::train {

struct PrepareOptions {
  std::vector<std::string> inputs;  // UTF-8 text files
  std::string tokenizer;            // a vocabulary file or a folder holding one (model/model_tokenizer.h load_vocab)
  std::string out;                  // the data folder, made if missing
  double val_fraction = 0.05;       // in [0, 1)
  int workers = 1;
  uint64_t seed = 1;
};

struct PrepareProgress {
  uint64_t bytes_done = 0, bytes_total = 0;  // input text encoded and written so far
  int64_t tokens = 0;
  double seconds = 0;
};

struct PrepareResult {
  int64_t tokens[2] = {0, 0}, documents[2] = {0, 0};  // train, val
  int64_t vocab_size = 0;
  std::string dtype;
  uint64_t bytes = 0;  // of input text
  double seconds = 0;
};

// A document: a run of lines none of which is blank (empty or only spaces, tabs and carriage returns). Its text runs
// from its first line's start to its last line's end, without that line's "\n" or "\r\n".
struct TextSpan {
  std::string_view text;
  int64_t line = 0;  // 1-based line of its first character, for messages
};
std::vector<TextSpan> split_documents(std::string_view text);

// Writes the folder. `progress`, when given, is called from the calling thread a few times a second.
PrepareResult prepare_data(const PrepareOptions& o, const std::function<void(const PrepareProgress&)>& progress = {});

}  // namespace ascent::train
