// Training data as `ascent data prepare` writes it (train/data_prepare.h): per split a token file and a document
// index, described by DIR/index.json. TokenData maps a split's token file; BatchSampler deals out windows of it in a
// seeded order that a resumed run reproduces from a position alone.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ascent/tokenizer/vocab.h"

namespace ascent {
class MappedFile;
}

namespace ascent::train {

// index.json's "format" and "version": a reader refuses other values rather than guess at a layout.
inline constexpr const char* kTokenDataFormat = "ascent-tokens";
inline constexpr int kTokenDataVersion = 1;

// 16 hex digits: FNV-1a 64 over every piece in id order (each with its length), then the BOS and EOS ids. Two
// vocabularies with the same fingerprint give each id the same meaning, which is what a model trained on the data
// needs; merges and scores, which only change how text is split, are left out.
std::string tokenizer_fingerprint(const tokenizer::Vocab& v);

// A uniform draw in [0, n), n > 0, by rejection: std::uniform_int_distribution's output differs between standard
// libraries, and a data order must not. mt19937_64's own output is fixed by the standard.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n);

// One split ("train" or "val") of a prepared data folder, its token file memory-mapped.
class TokenData {
 public:
  // Reads DIR/index.json and maps DIR/<split>.bin and DIR/<split>.idx. Fails naming the file when the index is
  // missing or malformed, or a file's size disagrees with it (a truncated or foreign token file).
  static TokenData open(const std::string& dir, const std::string& split);
  TokenData(TokenData&&) noexcept;
  TokenData& operator=(TokenData&&) noexcept;
  ~TokenData();

  const std::string& dir() const { return dir_; }
  const std::string& split() const { return split_; }
  const std::string& path() const { return path_; }  // the token file
  int64_t size() const { return n_tokens_; }         // tokens in the split
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& fingerprint() const { return fingerprint_; }
  int32_t bos_id() const { return bos_id_; }  // -1 where the vocabulary has none
  int32_t eos_id() const { return eos_id_; }
  // Document d is tokens [doc_starts()[d], doc_starts()[d + 1]): one entry per document and a last one, size().
  std::span<const int64_t> doc_starts() const { return doc_starts_; }

  // Copies tokens [start, start + out.size()) into out. An id at or past vocab_size() fails naming the file and its
  // position: a damaged file would otherwise index past the model's embedding.
  void read(int64_t start, std::span<int32_t> out) const;

  // Windows of seq_len + 1 tokens at stride seq_len; the last partial one is dropped. Window w starts at token
  // w * seq_len. Windows run across document boundaries (each document ends with EOS).
  int64_t windows(int64_t seq_len) const;
  // Fills rows of inputs (a window's tokens 0..seq_len-1) and targets (1..seq_len) from windows first, first + 1, ...
  // in order, as many as inputs holds (inputs.size() / seq_len rows) or as remain. Returns the rows filled. For
  // validation: the same windows in the same order on every call.
  int64_t read_windows(int64_t first, int64_t seq_len, std::span<int32_t> inputs, std::span<int32_t> targets) const;

  // Fails naming the folder and both fingerprints and vocabulary sizes when `vocab` is not the tokenizer the data
  // was made with. `whose` names the vocabulary's owner (a model path) in that message.
  void check_tokenizer(const tokenizer::Vocab& vocab, const std::string& whose) const;

 private:
  TokenData() = default;

  std::string dir_, split_, path_, fingerprint_;
  int64_t n_tokens_ = 0, vocab_size_ = 0;
  int32_t bos_id_ = -1, eos_id_ = -1;
  int elem_bytes_ = 4;                          // 2: uint16, 4: int32
  std::unique_ptr<MappedFile> tokens_, index_;  // tokens_ is null for an empty split
  std::span<const int64_t> doc_starts_;
};

// Training batches from one split: windows (TokenData::windows) in an order shuffled afresh each epoch from the seed,
// dealt round-robin over shards (sample i of an epoch's order goes to shard i % num_shards). Each epoch uses the first
// windows() / num_shards * num_shards samples of its order, so every shard takes the same number of steps; the few
// left over differ epoch to epoch. The state is one number, position(), so seek() resumes a run exactly.
class BatchSampler {
 public:
  // Fails naming the folder and split when it holds fewer windows than shards (at least one window each). `data` is
  // held by reference: it must outlive the sampler and not move.
  BatchSampler(const TokenData& data, int64_t seq_len, uint64_t seed, int num_shards = 1, int shard_id = 0);

  // Fills B = inputs.size() / seq_len rows (inputs and targets each hold B * seq_len ids), one sample per row.
  void next(std::span<int32_t> inputs, std::span<int32_t> targets);

  uint64_t position() const { return position_; }  // samples this shard has taken, across epochs
  void seek(uint64_t position) { position_ = position; }
  uint64_t epoch() const { return position_ / per_shard_; }  // the epoch of the next sample
  int64_t samples_per_epoch() const { return per_shard_; }   // this shard's
  // The window this shard's sample at `position` reads.
  int64_t window_at(uint64_t position);

 private:
  const std::vector<int64_t>& order(uint64_t epoch);  // the epoch's shuffled windows, cached

  const TokenData& data_;
  int64_t seq_len_, windows_, per_shard_;
  uint64_t seed_;
  int num_shards_, shard_id_;
  uint64_t position_ = 0;
  uint64_t cached_epoch_ = UINT64_MAX;
  std::vector<int64_t> order_;
};

}  // namespace ascent::train
