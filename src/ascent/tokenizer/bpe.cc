#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <queue>

#include "ascent/base/error.h"
#include "ascent/tokenizer/tokenizer.h"
#include "ascent/tokenizer/utf8.h"

namespace ascent::tokenizer {
namespace {

constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

size_t utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xe) return 3;
  if ((c >> 3) == 0x1e) return 4;
  return 1;  // invalid lead byte: treat as a single byte so we always advance
}

std::string normalize(std::string_view s, Normalization form);  // below

// Splits text at the specials (at each position the longest, as Hugging Face's leftmost-longest scan), with their
// rules (AddedTokenRule): on_run(run, begins_text) for the text before, between and after the matches, each match's
// id to out.
template <class Specials, class OnRun>
void split_at_specials(std::string_view text, const Specials& specials, std::vector<int32_t>& out, OnRun&& on_run);

// Where the UTF-8 character ending at s[end - 1] starts.
size_t char_start_before(std::string_view s, size_t end) {
  size_t at = end - 1;
  while (at > 0 && end - at < 4 && (static_cast<unsigned char>(s[at]) & 0xc0) == 0x80) --at;
  return at;
}
// Unicode White_Space (Rust's char::is_whitespace, regex \s): the space separators, line and paragraph
// separators, and U+0009-000D, U+0085.
bool is_space_cp(utf8proc_int32_t cp) {
  if (cp < 0) return false;
  if ((cp >= 0x09 && cp <= 0x0d) || cp == 0x85) return true;
  const auto c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}
// A word character (regex \w, as Hugging Face's added tokens test it): letters, marks, decimal digits, letter
// numbers, connector punctuation (such as '_'), and the joiners U+200C, U+200D.
bool is_word_cp(utf8proc_int32_t cp) {
  if (cp < 0) return false;
  if (cp == 0x200c || cp == 0x200d) return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}
bool word_char_at(std::string_view s, size_t at) {
  return at < s.size() && is_word_cp(char_at(s, at).first);
}
bool word_char_before(std::string_view s, size_t end) {
  return end > 0 && is_word_cp(char_at(s, char_start_before(s, end)).first);
}
// The length of the whitespace run s starts with.
size_t space_run_at(std::string_view s) {
  size_t at = 0;
  while (at < s.size()) {
    const auto [cp, n] = char_at(s, at);
    if (!is_space_cp(cp)) break;
    at += n;
  }
  return at;
}
// Where the whitespace run s ends with starts (s.size() when none).
size_t space_run_before(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    const size_t at = char_start_before(s, end);
    if (!is_space_cp(char_at(s.substr(0, end), at).first)) break;
    end = at;
  }
  return end;
}

// GPT-2's reversible map from bytes to printable code points, as UTF-8 strings.
const std::vector<std::string>& byte_to_unicode() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const int cp = printable ? b : 256 + n++;
      std::string s;
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else {
        s += static_cast<char>(0xc0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3f));
      }
      t[static_cast<size_t>(b)] = s;
    }
    return t;
  }();
  return table;
}

const std::unordered_map<std::string, uint8_t>& unicode_to_byte() {
  static const auto m = [] {
    std::unordered_map<std::string, uint8_t> r;
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) r[t[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);
    return r;
  }();
  return m;
}

}  // namespace

struct Tokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

Tokenizer::Tokenizer(Vocab v) : v_(std::move(v)) {
  ASCENT_CHECK(!v_.pieces.empty(), "tokenizer: empty vocabulary");
  for (size_t i = 0; i < v_.pieces.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const TokenType type = i < v_.types.size() ? v_.types[i] : TokenType::Normal;
    // The first id wins for duplicate pieces, as in SentencePiece.
    // Control pieces are reached only as special tokens; byte pieces ("<0x0A>") only by byte fallback, never by
    // merging text that happens to spell them.
    const bool byte_piece = type == TokenType::Byte && v_.kind == VocabKind::Spm;
    if (type != TokenType::Control && !byte_piece) ids_.emplace(v_.pieces[i], id);
    if ((type == TokenType::Control || type == TokenType::UserDefined) && !v_.pieces[i].empty()) {
      const auto found = v_.added_rules.find(id);
      const AddedTokenRule rule = found == v_.added_rules.end() ? AddedTokenRule{} : found->second;
      if (v_.match_normalized && rule.normalized) {
        normalized_specials_.list.push_back({spm_prefixed(normalize(v_.pieces[i], v_.normalization), true), id, rule});
      } else {
        specials_.list.push_back({v_.pieces[i], id, rule});
      }
    }
  }
  specials_.index();
  normalized_specials_.index();
  for (size_t r = 0; r < v_.merges.size(); ++r) {
    // Symbols being merged are always vocabulary pieces, so a merge is keyed by the ids of its two sides.
    const int32_t a = lookup(v_.merges[r].first), b = lookup(v_.merges[r].second);
    if (a < 0 || b < 0) continue;
    merge_rank_.emplace((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b), static_cast<int32_t>(r));
  }
  if (v_.kind == VocabKind::Spm) {
    spm_split_words_ = !v_.space.empty();
    for (const auto& p : v_.pieces) {
      for (size_t at = p.find(v_.space, 1); spm_split_words_ && at != std::string::npos;
           at = p.find(v_.space, at + 1)) {
        if (at < v_.space.size() || p.compare(at - v_.space.size(), v_.space.size(), v_.space) != 0) {
          spm_split_words_ = false;  // a piece such as "a▁" or "a▁b" spans a word boundary
        }
      }
    }
    byte_ids_.assign(256, -1);
    for (size_t i = 0; i < v_.pieces.size(); ++i) {
      const std::string& p = v_.pieces[i];
      const TokenType type = i < v_.types.size() ? v_.types[i] : TokenType::Normal;
      const int b = byte_piece_value(p);
      if (b >= 0 && type == TokenType::Byte) {
        if (byte_ids_[static_cast<size_t>(b)] < 0) byte_ids_[static_cast<size_t>(b)] = static_cast<int32_t>(i);
      }
    }
    // An ASCII character that no multi-character piece contains can never be merged with a neighbour, so text
    // may be cut on both sides of it (Llama-2's newline, which only byte fallback encodes).
    spm_isolated_.fill(true);
    for (size_t i = 0; i < v_.pieces.size(); ++i) {
      const TokenType type = i < v_.types.size() ? v_.types[i] : TokenType::Normal;
      if (type == TokenType::Byte || type == TokenType::Control || v_.pieces[i].size() < 2) continue;
      for (unsigned char c : v_.pieces[i]) {
        if (c < 128) spm_isolated_[c] = false;
      }
    }
    for (unsigned char c : v_.space) {
      if (c < 128) spm_isolated_[c] = false;
    }
  } else {
    regex_ = std::make_unique<Regex>();
    const std::string pattern = v_.pre_pattern.empty() ? kGpt2Pattern : v_.pre_pattern;
    int err = 0;
    PCRE2_SIZE off = 0;
    regex_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
    if (regex_->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      fail("tokenizer: pre-tokenizer regex does not compile at offset {}: {}", off, reinterpret_cast<char*>(msg));
    }
    // JIT matching is several times faster; where the JIT is unavailable the interpreter gives the same matches.
    pcre2_jit_compile(regex_->code, PCRE2_JIT_COMPLETE);
  }
}

Tokenizer::~Tokenizer() = default;

Tokenizer::StringMap<std::vector<int32_t>>::iterator Tokenizer::cache_word(std::string_view word,
                                                                           std::vector<int32_t> ids) const {
  if (word_cache_.size() > 200000) word_cache_.clear();  // bounded: a long text of unique words cannot grow it
  return word_cache_.emplace(std::string(word), std::move(ids)).first;
}

int32_t Tokenizer::lookup(std::string_view piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

const std::string& Tokenizer::piece(int32_t id) const {
  ASCENT_CHECK(id >= 0 && id < size(), "token id {} is outside the vocabulary (size {})", id, size());
  return v_.pieces[static_cast<size_t>(id)];
}

void Tokenizer::bpe(std::string_view word, std::vector<Piece>& out) const {
  struct Sym {
    size_t start, len;
    int prev, next;
    int32_t id;  // vocabulary id of the symbol's text, -1 if none
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_len(static_cast<unsigned char>(word[i])), word.size() - i);
    syms.push_back(
        {i, n, static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1, lookup(word.substr(i, n))});
    i += n;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Cand {
    double priority;  // higher merges first
    int left, right;
    size_t left_len, right_len;  // the pair as it was when pushed; stale once either side changed
  };
  auto worse = [](const Cand& a, const Cand& b) {
    return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
  };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> queue(worse);
  const bool ranked = !v_.merges.empty();
  auto try_pair = [&](int l) {
    if (l < 0 || syms[static_cast<size_t>(l)].next < 0) return;
    const Sym& a = syms[static_cast<size_t>(l)];
    const Sym& b = syms[static_cast<size_t>(a.next)];
    double priority;
    if (ranked) {
      if (a.id < 0 || b.id < 0) return;
      auto it = merge_rank_.find((static_cast<uint64_t>(a.id) << 32) | static_cast<uint32_t>(b.id));
      if (it == merge_rank_.end()) return;
      priority = -static_cast<double>(it->second);
    } else {
      const int32_t id = lookup(word.substr(a.start, a.len + b.len));
      if (id < 0) return;
      priority = v_.scores[static_cast<size_t>(id)];
    }
    queue.push({priority, l, a.next, a.len, b.len});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) try_pair(i);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    Sym& a = syms[static_cast<size_t>(c.left)];
    if (a.len != c.left_len || a.next != c.right) continue;
    Sym& b = syms[static_cast<size_t>(c.right)];
    if (b.len != c.right_len) continue;
    a.len += b.len;
    a.id = lookup(word.substr(a.start, a.len));
    b.len = 0;
    a.next = b.next;
    if (a.next >= 0) syms[static_cast<size_t>(a.next)].prev = c.left;
    try_pair(a.prev);
    try_pair(c.left);
  }
  for (int i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const Sym& sym = syms[static_cast<size_t>(i)];
    out.push_back({static_cast<uint32_t>(sym.start), static_cast<uint32_t>(sym.len), sym.id});
  }
}

void Tokenizer::encode_spm(std::string_view text, bool text_start, std::vector<int32_t>& out) const {
  encode_spm_normalized(spm_prefixed(text, text_start), out);
}

std::string Tokenizer::spm_prefixed(std::string_view text, bool text_start) const {
  std::string norm;
  if (text.empty()) return norm;
  bool prefix = v_.add_space_prefix;
  if (v_.space_prefix != SpacePrefix::EveryRun) {
    prefix = prefix && !text.starts_with(' ') && !text.starts_with(v_.space) &&
             (v_.space_prefix == SpacePrefix::MetaspaceAlways || text_start);
  }
  if (prefix) norm += v_.space;
  append_spm_spaces(text, norm);
  return norm;
}

void Tokenizer::append_spm_spaces(std::string_view text, std::string& out) const {
  for (char ch : text) {
    if (ch == ' ') {
      out += v_.space;
    } else {
      out += ch;
    }
  }
}

void Tokenizer::encode_spm_normalized(std::string_view norm, std::vector<int32_t>& out) const {
  if (norm.empty()) return;
  const size_t words_start = out.size();  // the ids before are not this text's
  // When no piece joins a non-space character to a following space, no merge can cross the start of a space
  // run, so each such word is encoded alone (and cached): the same ids, in linear time for long texts.
  std::vector<Piece> pieces;
  auto emit = [&](std::string_view word) {
    auto hit = word_cache_.find(word);
    if (hit == word_cache_.end()) {
      pieces.clear();
      bpe(word, pieces);
      std::vector<int32_t> ids;
      for (const auto& p : pieces) {
        if (p.id >= 0) {
          ids.push_back(p.id);
          continue;
        }
        const std::string_view ch = word.substr(p.start, p.len);  // a character no piece holds
        auto has_piece = [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; };
        if (v_.unk_per_char && !std::all_of(ch.begin(), ch.end(), has_piece)) {
          ASCENT_CHECK(v_.unk_id >= 0, "tokenizer: character '{}' has no token and there is no unknown token", ch);
          if (!(v_.fuse_unk && !ids.empty() && ids.back() == v_.unk_id)) ids.push_back(v_.unk_id);
          continue;
        }
        for (unsigned char byte : ch) {
          const int32_t b = byte_ids_[byte];
          ASCENT_CHECK(b >= 0 || v_.unk_id >= 0, "tokenizer: byte 0x{:02x} has no token and there is no unknown token",
                       byte);
          ids.push_back(b >= 0 ? b : v_.unk_id);
        }
      }
      hit = cache_word(word, std::move(ids));
    }
    // fuse_unk across words too: the unknown token ends only unknown characters (its piece is a control token).
    const bool fuse = v_.fuse_unk && !hit->second.empty() && hit->second.front() == v_.unk_id &&
                      out.size() > words_start && out.back() == v_.unk_id;
    out.insert(out.end(), hit->second.begin() + (fuse ? 1 : 0), hit->second.end());
  };
  const std::string& sp = v_.space;
  auto isolated = [&](size_t i) {
    const auto c = static_cast<unsigned char>(norm[i]);
    return c < 128 && spm_isolated_[c];
  };
  size_t start = 0;
  for (size_t i = 1; i < norm.size(); ++i) {
    // A word starts at each space (split_at_space), or else, where no merge can cross one, at each run of spaces.
    const bool at_space = norm.compare(i, sp.size(), sp) == 0;
    const bool word_starts =
        at_space &&
        (v_.split_at_space || (spm_split_words_ && (i < sp.size() || norm.compare(i - sp.size(), sp.size(), sp) != 0)));
    if (word_starts || isolated(i) || isolated(i - 1)) {
      emit(std::string_view(norm).substr(start, i - start));
      start = i;
    }
  }
  emit(std::string_view(norm).substr(start));
}

void Tokenizer::encode_byte_level(std::string_view text, std::vector<int32_t>& out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  const auto& b2u = byte_to_unicode();
  size_t pos = 0;
  while (pos < text.size()) {
    // PCRE2 validates the whole subject on the first call only; later calls skip the check.
    const int rc = pcre2_match(regex_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                               pos == 0 ? 0 : PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
      pcre2_match_data_free(md);
      fail("tokenizer: input is not valid UTF-8");
    }
    size_t start, end;
    if (rc < 0) {
      start = pos;
      end = text.size();
    } else {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      start = ov[0];
      end = ov[1];
      if (end == start) end = start + utf8_len(static_cast<unsigned char>(text[start]));
    }
    // Text the pattern skipped is still encoded, so no input is silently lost.
    for (auto [s, e] : {std::pair{pos, start}, std::pair{start, end}}) {
      if (s >= e) continue;
      const std::string_view word = text.substr(s, e - s);
      auto hit = word_cache_.find(word);
      if (hit == word_cache_.end()) {
        std::string mapped;
        for (unsigned char ch : word) mapped += b2u[ch];
        std::vector<Piece> pieces;
        const int32_t whole = v_.ignore_merges ? lookup(mapped) : -1;
        if (whole >= 0) {
          pieces.push_back({0, static_cast<uint32_t>(mapped.size()), whole});
        } else {
          bpe(mapped, pieces);
        }
        std::vector<int32_t> ids;
        for (const auto& p : pieces) {
          ASCENT_CHECK(p.id >= 0 || v_.unk_id >= 0, "tokenizer: piece '{}' is not in the vocabulary",
                       mapped.substr(p.start, p.len));
          ids.push_back(p.id >= 0 ? p.id : v_.unk_id);
        }
        hit = cache_word(word, std::move(ids));
      }
      out.insert(out.end(), hit->second.begin(), hit->second.end());
    }
    pos = end;
  }
  pcre2_match_data_free(md);
}

namespace {

std::string normalize(std::string_view s, Normalization form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Normalization::None:
      return std::string(s);
    case Normalization::NFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case Normalization::NFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case Normalization::NFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case Normalization::NFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(options));
  if (n < 0) fail("tokenizer: input is not valid UTF-8 ({})", utf8proc_errmsg(n));
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && v_.add_bos && v_.bos_id >= 0) out.push_back(v_.bos_id);
  encode_text(text, parse_special, out);
  if (add_special) out.insert(out.end(), v_.suffix_ids.begin(), v_.suffix_ids.end());
  return out;
}

void Tokenizer::encode_text(std::string_view text, bool parse_special, std::vector<int32_t>& out) const {
  auto encode_plain = [&](std::string_view raw, bool text_start) {
    std::string normalized;
    std::string_view s = raw;
    if (v_.normalization != Normalization::None && !raw.empty()) {
      normalized = normalize(raw, v_.normalization);
      s = normalized;
    }
    if (v_.kind == VocabKind::Spm) {
      if (v_.remove_extra_spaces) {
        std::string collapsed;
        for (char c : s) {
          if (c != ' ' || (!collapsed.empty() && collapsed.back() != ' ')) collapsed += c;
        }
        while (!collapsed.empty() && collapsed.back() == ' ') collapsed.pop_back();
        return encode_spm(collapsed, text_start, out);
      }
      encode_spm(s, text_start, out);
    } else {
      encode_byte_level(s, out);
    }
  };
  if (!parse_special || (specials_.empty() && normalized_specials_.empty()))
    return encode_plain(text, /*text_start=*/true);
  split_at_specials(text, specials_, out, [&](std::string_view run, bool begins_text) {
    if (normalized_specials_.empty() || run.empty()) return encode_plain(run, begins_text);
    // As Hugging Face: the run normalized whole, the normalized tokens found in that, and the text around them
    // encoded as it stands. A Prepend normalizer's prefix is then added once, at the run's start; a Metaspace
    // pre-tokenizer's comes after, to each piece by its rule (encode_spm).
    const std::string nfx = normalize(run, v_.normalization);
    const bool prepend = v_.space_prefix == SpacePrefix::EveryRun;
    std::string norm;
    if (prepend) {
      norm = spm_prefixed(nfx, begins_text);
    } else {
      append_spm_spaces(nfx, norm);
    }
    split_at_specials(std::string_view(norm), normalized_specials_, out, [&](std::string_view piece, bool first) {
      if (prepend) return encode_spm_normalized(piece, out);
      encode_spm(piece, begins_text && first, out);
    });
  });
}

namespace {

template <class Specials, class OnRun>
void split_at_specials(std::string_view text, const Specials& specials, std::vector<int32_t>& out, OnRun&& on_run) {
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const auto& candidates = specials.by_first[static_cast<unsigned char>(text[i])];
    if (candidates.empty()) {
      ++i;
      continue;
    }
    const typename decltype(specials.list)::value_type* hit = nullptr;
    for (const uint32_t c : candidates) {
      const auto& s = specials.list[c];
      if (text.compare(i, s.text.size(), s.text) == 0) {
        hit = &s;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t b = i, e = i + hit->text.size();
    if (hit->rule.single_word && (word_char_before(text, b) || word_char_at(text, e))) {
      i = e;  // as Hugging Face's leftmost-longest scan, the search goes on after the refused match, not inside it
      continue;
    }
    if (hit->rule.lstrip) b = start + space_run_before(text.substr(start, b - start));
    if (hit->rule.rstrip) e += space_run_at(text.substr(e));
    on_run(text.substr(start, b - start), start == 0);
    out.push_back(hit->id);
    i = start = e;
  }
  on_run(text.substr(start), start == 0);
}

}  // namespace

void Tokenizer::SpecialSet::index() {
  // Longest first; of equal texts the first id, which split_at_specials meets first.
  std::stable_sort(list.begin(), list.end(),
                   [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
  for (size_t i = 0; i < list.size(); ++i) {
    by_first[static_cast<unsigned char>(list[i].text[0])].push_back(static_cast<uint32_t>(i));
  }
}

std::string Tokenizer::decode_token(int32_t id, bool strip_space) const {
  const std::string& p = piece(id);
  const TokenType type =
      static_cast<size_t>(id) < v_.types.size() ? v_.types[static_cast<size_t>(id)] : TokenType::Normal;
  if (type == TokenType::Control || type == TokenType::Unknown) return "";
  std::string out;
  if (v_.kind == VocabKind::ByteLevel) {
    const auto& u2b = unicode_to_byte();
    for (size_t i = 0; i < p.size();) {
      const size_t n = std::min(utf8_len(static_cast<unsigned char>(p[i])), p.size() - i);
      auto it = u2b.find(p.substr(i, n));
      if (it != u2b.end()) {
        out += static_cast<char>(it->second);
      } else {
        out.append(p, i, n);  // added tokens are stored as plain text
      }
      i += n;
    }
    return out;
  }
  if (type == TokenType::Byte || v_.decode_byte_pieces) {
    const int b = byte_piece_value(p);
    if (b >= 0) return std::string(1, static_cast<char>(b));
  }
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, v_.space.size(), v_.space) == 0) {
      out += ' ';
      i += v_.space.size();
    } else {
      out += p[i++];
    }
  }
  if (strip_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool first = i == 0 || (i == 1 && ids[0] == v_.bos_id);
    out += decode_token(ids[i], /*strip_space=*/first && v_.kind == VocabKind::Spm && v_.add_space_prefix);
  }
  return out;
}

std::string Utf8Stream::push(const std::string& bytes) {
  pending_ += bytes;
  // Find the end of the last complete sequence.
  size_t i = 0, complete = 0;
  while (i < pending_.size()) {
    const size_t n = utf8_len(static_cast<unsigned char>(pending_[i]));
    if (i + n > pending_.size()) break;
    i += n;
    complete = i;
  }
  std::string out = pending_.substr(0, complete);
  pending_.erase(0, complete);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace ascent::tokenizer
