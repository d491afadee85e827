// Text <-> token ids for a Vocab. One BPE engine serves both families: symbols in a linked list, the best
// adjacent pair merged first (highest piece score for SentencePiece-style vocabularies, lowest merge rank for
// ranked merges), ties broken leftmost. Byte-level vocabularies are pre-split by their family's regex (PCRE2,
// UTF-8 + Unicode properties) and encoded per word with a cache.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ascent/tokenizer/vocab.h"

namespace ascent::tokenizer {

// Not thread-safe: encode() fills a per-word cache. Give each thread its own Tokenizer (or a lock) — the serving
// engine will need one per worker.
class Tokenizer {
 public:
  explicit Tokenizer(Vocab v);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special adds the vocabulary's special tokens: its BOS where it adds one (Vocab::add_bos) and its suffix_ids;
  // parse_special turns special-token text such as "<|im_start|>" into its id (otherwise it is encoded as plain text).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;
  // The bytes token `id` stands for; control tokens give "". strip_space drops one leading space (the first
  // token after BOS in SentencePiece vocabularies).
  std::string decode_token(int32_t id, bool strip_space = false) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  const std::string& piece(int32_t id) const;

  const Vocab& vocab() const { return v_; }
  int32_t size() const { return static_cast<int32_t>(v_.pieces.size()); }
  int32_t bos() const { return v_.bos_id; }
  int32_t eos() const { return v_.eos_id; }

 private:
  void encode_text(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;  // encode's body
  // text_start: the run begins the text (no special token before it; see SpacePrefix).
  void encode_spm(std::string_view text, bool text_start, std::vector<int32_t>& out) const;
  // The run with the space prefix where it gets one and "▁" for " " (the Unicode normalization done before).
  std::string spm_prefixed(std::string_view text, bool text_start) const;
  void append_spm_spaces(std::string_view text, std::string& out) const;  // "▁" (Vocab::space) for each " "
  // encode_spm of text already so.
  void encode_spm_normalized(std::string_view norm, std::vector<int32_t>& out) const;
  void encode_byte_level(std::string_view text, std::vector<int32_t>& out) const;
  // BPE over the UTF-8 characters of `word`, appending the resulting pieces: their place in `word` and their
  // vocabulary id (-1 for a character the vocabulary lacks).
  struct Piece {
    uint32_t start, len;
    int32_t id;
  };
  void bpe(std::string_view word, std::vector<Piece>& out) const;
  int32_t lookup(std::string_view piece) const;

  // Lets maps keyed by std::string be searched with a string_view, without building a string per lookup.
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  template <class V>
  using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

  Vocab v_;
  StringMap<int32_t> ids_;
  std::unordered_map<uint64_t, int32_t> merge_rank_;  // (id of a) << 32 | (id of b) -> rank
  std::vector<int32_t> byte_ids_;                     // Spm byte fallback: byte -> id of "<0xXX>"
  struct Special {
    std::string text;  // what is matched: the token's content, or for normalized_specials_ its normalized content
    int32_t id;
    AddedTokenRule rule;
  };
  // Specials matched in one text, longest first (one per text: its first id), indexed by their first byte. A scan looks
  // only where one can start, and there only at those: trying every special at every position would make a text with
  // Llama-3's 256 specials parsed encode several times slower than without them.
  struct SpecialSet {
    std::vector<Special> list;
    std::array<std::vector<uint32_t>, 256> by_first;  // indexes into list, longest first
    bool empty() const { return list.empty(); }
    void index();  // sorts list and fills by_first
  };
  // Matched when parse_special: in the raw text, and (match_normalized) in each raw run's normalized text.
  SpecialSet specials_, normalized_specials_;
  struct Regex;
  std::unique_ptr<Regex> regex_;
  bool spm_split_words_ = false;          // Spm: encode word by word (see encode_spm)
  std::array<bool, 128> spm_isolated_{};  // Spm: ASCII characters no merge can involve
  mutable StringMap<std::vector<int32_t>> word_cache_;
  StringMap<std::vector<int32_t>>::iterator cache_word(std::string_view word, std::vector<int32_t> ids) const;
};

// Emits decoded bytes only as complete UTF-8 sequences, so streamed output never shows a broken character.
class Utf8Stream {
 public:
  std::string push(const std::string& bytes);
  std::string flush();  // whatever is left, even if incomplete

 private:
  std::string pending_;
};

}  // namespace ascent::tokenizer
