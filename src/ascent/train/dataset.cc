#include "ascent/train/dataset.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <utility>

#include "ascent/base/error.h"
#include "ascent/base/json_file.h"
#include "ascent/base/json_number.h"
#include "ascent/base/mapped_file.h"

namespace ascent::train {

namespace fs = std::filesystem;

// Token and offset files are little-endian and read in place.
static_assert(std::endian::native == std::endian::little, "the token files are read in place as little-endian");

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

void fnv_bytes(uint64_t& h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
}

void fnv_u32(uint64_t& h, uint32_t v) {
  unsigned char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  fnv_bytes(h, b, 4);
}

// j[key] when it is a string, else "" (nlohmann's value() throws its own error for another type).
std::string string_field(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// splitmix64's finalizer: turns (seed, epoch) into well-spread mt19937_64 seeds.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::string tokenizer_fingerprint(const tokenizer::Vocab& v) {
  uint64_t h = kFnvOffset;
  fnv_u32(h, static_cast<uint32_t>(v.pieces.size()));
  for (const std::string& p : v.pieces) {
    fnv_u32(h, static_cast<uint32_t>(p.size()));  // so that ("ab", "c") and ("a", "bc") differ
    fnv_bytes(h, p.data(), p.size());
  }
  fnv_u32(h, static_cast<uint32_t>(v.bos_id));
  fnv_u32(h, static_cast<uint32_t>(v.eos_id));
  return fmt::format("{:016x}", h);
}

uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  // 2^64 mod n values at the top of the generator's range would favour the low results; they are drawn again.
  const uint64_t rem = (UINT64_MAX % n + 1) % n;
  for (;;) {
    const uint64_t x = rng();
    if (rem == 0 || x < 0 - rem) return x % n;
  }
}

TokenData::TokenData(TokenData&&) noexcept = default;
TokenData& TokenData::operator=(TokenData&&) noexcept = default;
TokenData::~TokenData() = default;

TokenData TokenData::open(const std::string& dir, const std::string& split) {
  ASCENT_CHECK(split == "train" || split == "val", "{}: no split '{}' (train or val)", dir, split);
  const std::string index_path = (fs::path(dir) / "index.json").string();
  std::error_code ec;
  ASCENT_CHECK(fs::exists(index_path, ec),
               "{}: no index.json (not a folder `ascent data prepare` wrote, or one it did not finish)", dir);
  const nlohmann::json j = read_json_file(index_path);
  TokenData d;
  d.dir_ = dir;
  d.split_ = split;
  d.path_ = (fs::path(dir) / (split + ".bin")).string();
  with_context(index_path, [&] {
    ASCENT_CHECK(j.is_object() && string_field(j, "format") == kTokenDataFormat, "field format must be \"{}\"",
                 kTokenDataFormat);
    ASCENT_CHECK(j.contains("version"), "no field version");
    ASCENT_CHECK(json_int(j["version"], "version") == kTokenDataVersion,
                 "version {} is not supported (this build reads version {})", j["version"].dump(), kTokenDataVersion);
    const std::string dtype = string_field(j, "dtype");
    ASCENT_CHECK(dtype == "uint16" || dtype == "int32", "field dtype must be uint16 or int32, got \"{}\"", dtype);
    d.elem_bytes_ = dtype == "uint16" ? 2 : 4;
    ASCENT_CHECK(j.contains("tokenizer"), "no field tokenizer");
    const nlohmann::json& tok = j["tokenizer"];
    ASCENT_CHECK(tok.is_object() && tok.contains("vocab_size") && tok.contains("fingerprint"),
                 "field tokenizer must hold vocab_size and fingerprint");
    d.vocab_size_ = json_int(tok["vocab_size"], "tokenizer.vocab_size");
    ASCENT_CHECK(d.vocab_size_ > 0 && (d.elem_bytes_ == 4 || d.vocab_size_ <= 65536),
                 "tokenizer.vocab_size {} does not fit dtype {}", d.vocab_size_, dtype);
    ASCENT_CHECK(tok["fingerprint"].is_string(), "tokenizer.fingerprint must be a string");
    d.fingerprint_ = tok["fingerprint"].get<std::string>();
    d.bos_id_ = tok.contains("bos_id") ? json_int32(tok["bos_id"], "tokenizer.bos_id") : -1;
    d.eos_id_ = tok.contains("eos_id") ? json_int32(tok["eos_id"], "tokenizer.eos_id") : -1;
    ASCENT_CHECK(j.contains("splits") && j["splits"].is_object() && j["splits"].contains(split), "no entry splits.{}",
                 split);
    const nlohmann::json& s = j["splits"][split];
    ASCENT_CHECK(s.is_object() && s.contains("tokens") && s.contains("documents"),
                 "splits.{} must hold tokens and documents", split);
    d.n_tokens_ = json_int(s["tokens"], "splits." + split + ".tokens");
    const int64_t docs = json_int(s["documents"], "splits." + split + ".documents");
    ASCENT_CHECK(d.n_tokens_ >= 0 && docs >= 0 && docs <= d.n_tokens_, "splits.{}: {} documents in {} tokens", split,
                 docs, d.n_tokens_);
    // The document index: docs + 1 int64 offsets.
    const std::string idx_path = (fs::path(dir) / (split + ".idx")).string();
    d.index_ = std::make_unique<MappedFile>(idx_path);
    const uint64_t idx_bytes = static_cast<uint64_t>(docs + 1) * 8;
    ASCENT_CHECK(d.index_->size() == idx_bytes,
                 "{}: holds {} bytes, but index.json's {} documents need {} (truncated, or not from this index)",
                 idx_path, d.index_->size(), docs, idx_bytes);
    d.doc_starts_ = {reinterpret_cast<const int64_t*>(d.index_->bytes().data()), static_cast<size_t>(docs + 1)};
    ASCENT_CHECK(d.doc_starts_.front() == 0 && d.doc_starts_.back() == d.n_tokens_,
                 "{}: offsets run from {} to {}, expected 0 to {}", idx_path, d.doc_starts_.front(),
                 d.doc_starts_.back(), d.n_tokens_);
    for (size_t i = 1; i < d.doc_starts_.size(); ++i) {
      ASCENT_CHECK(d.doc_starts_[i] > d.doc_starts_[i - 1], "{}: document {} is empty or its offsets go backwards",
                   idx_path, i - 1);
    }
  });
  const uint64_t want = static_cast<uint64_t>(d.n_tokens_) * static_cast<uint64_t>(d.elem_bytes_);
  if (d.n_tokens_ == 0) {
    // MappedFile refuses an empty file; an empty split (no validation documents) is a valid one.
    ASCENT_CHECK(fs::is_regular_file(d.path_, ec) && fs::file_size(d.path_, ec) == 0 && !ec,
                 "{}: missing, or not empty as index.json says", d.path_);
  } else {
    d.tokens_ = std::make_unique<MappedFile>(d.path_);
    ASCENT_CHECK(d.tokens_->size() == want,
                 "{}: holds {} bytes, but index.json says {} tokens of {} bytes ({} bytes): truncated, or not from "
                 "this index",
                 d.path_, d.tokens_->size(), d.n_tokens_, d.elem_bytes_, want);
  }
  return d;
}

void TokenData::read(int64_t start, std::span<int32_t> out) const {
  const auto n = static_cast<int64_t>(out.size());
  ASCENT_CHECK(start >= 0 && start + n <= n_tokens_, "{}: tokens [{}, {}) are past its {} tokens", path_, start,
               start + n, n_tokens_);
  if (n == 0) return;
  const uint8_t* base = tokens_->bytes().data() + static_cast<size_t>(start) * static_cast<size_t>(elem_bytes_);
  if (elem_bytes_ == 2) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, base + 2 * i, 2);
      out[static_cast<size_t>(i)] = v;
    }
  } else {
    std::memcpy(out.data(), base, static_cast<size_t>(n) * 4);
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = out[static_cast<size_t>(i)];
    ASCENT_CHECK(id >= 0 && id < vocab_size_, "{}: token {} is id {}, outside the vocabulary (size {})", path_,
                 start + i, id, vocab_size_);
  }
}

int64_t TokenData::windows(int64_t seq_len) const {
  ASCENT_CHECK(seq_len > 0, "sequence length must be positive, got {}", seq_len);
  return n_tokens_ > seq_len ? (n_tokens_ - 1) / seq_len : 0;
}

int64_t TokenData::read_windows(int64_t first, int64_t seq_len, std::span<int32_t> inputs,
                                std::span<int32_t> targets) const {
  const int64_t total = windows(seq_len);
  ASCENT_CHECK(inputs.size() == targets.size() && inputs.size() % static_cast<size_t>(seq_len) == 0,
               "read_windows: {} inputs and {} targets are not rows of {}", inputs.size(), targets.size(), seq_len);
  ASCENT_CHECK(first >= 0 && first <= total, "{}: window {} is past its {} windows of {} tokens", path_, first, total,
               seq_len);
  const int64_t rows = std::min(static_cast<int64_t>(inputs.size()) / seq_len, total - first);
  const auto t = static_cast<size_t>(seq_len);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = (first + r) * seq_len;
    read(start, inputs.subspan(static_cast<size_t>(r) * t, t));
    read(start + 1, targets.subspan(static_cast<size_t>(r) * t, t));
  }
  return rows;
}

void TokenData::check_tokenizer(const tokenizer::Vocab& vocab, const std::string& whose) const {
  const std::string fp = tokenizer_fingerprint(vocab);
  ASCENT_CHECK(fp == fingerprint_ && static_cast<int64_t>(vocab.pieces.size()) == vocab_size_,
               "{}: the data was made with another tokenizer (fingerprint {}, vocab {}) than {}'s (fingerprint {}, "
               "vocab {}); prepare it again with that tokenizer",
               dir_, fingerprint_, vocab_size_, whose, fp, vocab.pieces.size());
}

BatchSampler::BatchSampler(const TokenData& data, int64_t seq_len, uint64_t seed, int num_shards, int shard_id)
    : data_(data), seq_len_(seq_len), seed_(seed), num_shards_(num_shards), shard_id_(shard_id) {
  ASCENT_CHECK(seq_len > 0, "sequence length must be positive, got {}", seq_len);
  ASCENT_CHECK(num_shards > 0 && shard_id >= 0 && shard_id < num_shards, "shard {} of {} does not exist", shard_id,
               num_shards);
  windows_ = data.windows(seq_len);
  ASCENT_CHECK(windows_ >= num_shards,
               "{}: split {} holds {} tokens, {} windows of {} + 1 tokens; {} shards need at least one each",
               data.dir(), data.split(), data.size(), windows_, seq_len, num_shards);
  per_shard_ = windows_ / num_shards;
}

const std::vector<int64_t>& BatchSampler::order(uint64_t epoch) {
  if (epoch == cached_epoch_) return order_;
  order_.resize(static_cast<size_t>(windows_));
  for (int64_t i = 0; i < windows_; ++i) order_[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(mix64(seed_ ^ mix64(epoch)));
  // Fisher-Yates, written out: std::shuffle's sequence of swaps is the library's choice.
  for (uint64_t i = order_.size() - 1; i > 0; --i) {
    std::swap(order_[i], order_[uniform_below(rng, i + 1)]);
  }
  cached_epoch_ = epoch;
  return order_;
}

int64_t BatchSampler::window_at(uint64_t position) {
  const uint64_t per = static_cast<uint64_t>(per_shard_);
  const uint64_t k = position % per;
  return order(position / per)[k * static_cast<uint64_t>(num_shards_) + static_cast<uint64_t>(shard_id_)];
}

void BatchSampler::next(std::span<int32_t> inputs, std::span<int32_t> targets) {
  const auto t = static_cast<size_t>(seq_len_);
  ASCENT_CHECK(inputs.size() == targets.size() && !inputs.empty() && inputs.size() % t == 0,
               "BatchSampler::next: {} inputs and {} targets are not whole rows of {}", inputs.size(), targets.size(),
               seq_len_);
  const size_t rows = inputs.size() / t;
  for (size_t r = 0; r < rows; ++r) {
    const int64_t w = window_at(position_);
    data_.read_windows(w, seq_len_, inputs.subspan(r * t, t), targets.subspan(r * t, t));
    ++position_;
  }
}

}  // namespace ascent::train
