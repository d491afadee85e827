#include "ascent/model/model_tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/ranges.h>

#include <unordered_map>

#include "ascent/base/error.h"
#include "ascent/base/log.h"

namespace ascent::model {

namespace fs = std::filesystem;

namespace {

// The byte-level pre-tokenizers named in tokenizer.ggml.pre that the encoder carries out: each name's split regex as
// tokenizer.json spells it (empty: GPT-2's own) and whether a word found whole in the vocabulary is one token. The
// writer names a vocabulary by the first entry that matches it.
struct GgufPreTokenizer {
  const char* name;
  const char* pattern;
  bool ignore_merges;
};
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr GgufPreTokenizer kGgufPreTokenizers[] = {
    {"gpt-2", "", false},
    {"default", "", false},
    {"llama-bpe", kLlama3Pattern, true},
    {"llama3", kLlama3Pattern, true},
    {"qwen2", kQwen2Pattern, false},
};

}  // namespace

tokenizer::Vocab vocab_from_gguf(const GgufFile& f) {
  using tokenizer::TokenType;
  tokenizer::Vocab v;
  const std::string kind = f.get_string("tokenizer.ggml.model");
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  ASCENT_CHECK(tokens != nullptr && tokens->type == GgufType::Array && tokens->elem_type == GgufType::String,
               "{}: metadata tokenizer.ggml.tokens is missing or not a string array", f.path());
  v.pieces = tokens->strings;
  const size_t n = v.pieces.size();
  if (const GgufValue* types = f.find("tokenizer.ggml.token_type")) {
    ASCENT_CHECK(types->ints.size() == n, "{}: metadata tokenizer.ggml.token_type has {} entries for {} tokens",
                 f.path(), types->ints.size(), n);
    for (size_t i = 0; i < n; ++i) {
      // llama.cpp's types: 0 undefined, then Normal .. Byte (1-6). Another value would be kept as a type no code
      // expects.
      const int64_t t = types->ints[i];
      ASCENT_CHECK(t >= 0 && t <= static_cast<int64_t>(TokenType::Byte),
                   "{}: metadata tokenizer.ggml.token_type: token {} has type {} (expected 0-6)", f.path(), i, t);
      v.types.push_back(static_cast<TokenType>(t));
    }
  } else {
    v.types.assign(n, TokenType::Normal);
  }
  if (const GgufValue* scores = f.find("tokenizer.ggml.scores")) {
    ASCENT_CHECK(scores->floats.size() == n, "{}: metadata tokenizer.ggml.scores has {} entries for {} tokens",
                 f.path(), scores->floats.size(), n);
    for (size_t i = 0; i < n; ++i) {
      // SentencePiece-style merges rank by score: a NaN breaks the ordering the merge queue relies on.
      const double sc = scores->floats[i];
      ASCENT_CHECK(std::isfinite(sc), "{}: metadata tokenizer.ggml.scores: token {} has score {}", f.path(), i, sc);
      v.scores.push_back(static_cast<float>(sc));
    }
  } else {
    v.scores.assign(n, 0.0f);
  }
  if (kind == "llama") {
    v.kind = tokenizer::VocabKind::Spm;
    v.add_space_prefix = f.get_int("tokenizer.ggml.add_space_prefix", 1) != 0;
  } else if (kind == "gpt2") {
    v.kind = tokenizer::VocabKind::ByteLevel;
    const GgufValue* merges = f.find("tokenizer.ggml.merges");
    ASCENT_CHECK(merges != nullptr && merges->elem_type == GgufType::String,
                 "{}: metadata tokenizer.ggml.merges is missing", f.path());
    for (const auto& m : merges->strings) {
      const size_t sp = m.find(' ', 1);
      ASCENT_CHECK(sp != std::string::npos, "{}: merge '{}' is not 'a b'", f.path(), m);
      v.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
    tokenizer::check_merges(v, f.path(), "tokenizer.ggml.merges");
    const GgufValue* pre = f.find("tokenizer.ggml.pre");
    const std::string p = pre ? pre->s : "default";
    const GgufPreTokenizer* named = nullptr;
    for (const auto& n : kGgufPreTokenizers) {
      if (p == n.name) named = &n;
    }
    // Each other name is its own split (llama.cpp's list): encoding by GPT-2's instead gave other ids silently.
    ASCENT_CHECK(named != nullptr,
                 "{}: metadata tokenizer.ggml.pre '{}' is not supported (default, gpt-2, llama-bpe, llama3, qwen2)",
                 f.path(), p);
    v.pre_pattern = named->pattern;
    v.ignore_merges = named->ignore_merges;
  } else {
    fail("{}: tokenizer.ggml.model '{}' is not supported (llama, gpt2)", f.path(), kind);
  }
  v.bos_id = static_cast<int32_t>(f.get_int("tokenizer.ggml.bos_token_id", -1));
  v.eos_id = static_cast<int32_t>(f.get_int("tokenizer.ggml.eos_token_id", -1));
  v.unk_id = static_cast<int32_t>(f.get_int("tokenizer.ggml.unknown_token_id", -1));
  v.add_bos = f.get_int("tokenizer.ggml.add_bos_token", kind == "llama" ? 1 : 0) != 0;
  // As llama.cpp: EOS after the text with the special tokens (unread, such files would encode without it).
  if (f.get_int("tokenizer.ggml.add_eos_token", 0) != 0) {
    ASCENT_CHECK(v.eos_id >= 0, "{}: tokenizer.ggml.add_eos_token is set but there is no tokenizer.ggml.eos_token_id",
                 f.path());
    v.suffix_ids = {v.eos_id};
  }
  return v;
}

tokenizer::Vocab load_vocab(const std::string& path, int64_t vocab_size) {
  std::error_code ec;
  ASCENT_CHECK(fs::exists(path, ec), "{}: no such file or directory", path);
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "tokenizer.json")) return tokenizer::read_tokenizer_json((dir / "tokenizer.json").string());
    if (fs::exists(dir / "tokenizer.model")) {
      return tokenizer::read_sentencepiece_model((dir / "tokenizer.model").string());
    }
    if (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe")) {
      return tokenizer::read_gpt2_vocab((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
    }
    fail("{}: no tokenizer.json, tokenizer.model or encoder.json + vocab.bpe in this folder", path);
  }
  if (fs::path(path).extension() == ".json") return tokenizer::read_tokenizer_json(path);
  if (fs::path(path).extension() == ".model") return tokenizer::read_sentencepiece_model(path);
  if (has_gguf_magic(path)) return vocab_from_gguf(GgufFile(path));
  return tokenizer::read_llama2c_vocab(path, vocab_size);
}

namespace {

// Reads a vocabulary file or folder into out; a GGUF's tokenizer.* keys are kept as stored too (and, unless
// parse_gguf, only they).
void read_vocab_into(const std::string& path, int64_t vocab_size, bool parse_gguf, FoundVocab& out) {
  out.from = path;
  std::error_code ec;
  if (!fs::is_directory(path, ec) && has_gguf_magic(path)) {
    const GgufFile f(path);
    if (parse_gguf) out.vocab = vocab_from_gguf(f);
    for (const auto& [key, v] : f.metadata()) {
      if (key.starts_with("tokenizer.")) out.gguf_keys.emplace_back(key, v);
    }
    return;
  }
  out.vocab = load_vocab(path, vocab_size);
}

}  // namespace

FoundVocab find_vocab(const VocabPlace& m, const std::string& explicit_path, bool parse_gguf) {
  FoundVocab found;
  if (!explicit_path.empty()) {
    read_vocab_into(explicit_path, m.vocab_size, parse_gguf, found);
  } else if (m.gguf != nullptr) {
    if (m.gguf->find("tokenizer.ggml.model") == nullptr) {
      found.missing = fmt::format("{}: the file holds no vocabulary; pass --tokenizer", m.path);
    } else {
      read_vocab_into(m.path, m.vocab_size, parse_gguf, found);
    }
  } else if (m.format == Format::Ascent) {
    if (m.embedded == nullptr || m.embedded->bytes.empty()) {
      found.missing = fmt::format("{}: the file holds no tokenizer; pass --tokenizer", m.path);
      return found;
    }
    const EmbeddedTokenizer& e = *m.embedded;
    // The readers take paths; the embedded file is written out under its own kind of name for them.
    const char* ext = e.kind == "tokenizer.json" ? ".json" : e.kind == "gguf" ? ".gguf" : ".bin";
    // A fresh name made with O_EXCL (mkstemps): the name from the pid it replaced could be planted in a shared /tmp
    // beforehand as a link, which the write would then follow to another file.
    std::string name = (fs::temp_directory_path() / ("ascent-tokenizer-XXXXXX" + std::string(ext))).string();
    const int fd = ::mkstemps(name.data(), static_cast<int>(std::strlen(ext)));
    ASCENT_CHECK(fd >= 0, "{}: cannot create a temporary file for its tokenizer: {}", m.path, std::strerror(errno));
    const fs::path tmp = name;
    size_t done = 0;
    while (done < e.bytes.size()) {
      const ssize_t n = ::write(fd, e.bytes.data() + done, e.bytes.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    const bool closed = ::close(fd) == 0;
    if (done != e.bytes.size() || !closed) {
      fs::remove(tmp);
      fail("{}: cannot write its tokenizer to {}", m.path, tmp.string());
    }
    try {
      read_vocab_into(tmp.string(), m.vocab_size, parse_gguf, found);
    } catch (...) {
      fs::remove(tmp);
      throw;
    }
    fs::remove(tmp);
    found.from = m.path;
  } else if (m.format == Format::HuggingFace) {
    const fs::path dir(m.source);
    if (fs::exists(dir / "tokenizer.json") || fs::exists(dir / "tokenizer.model") ||
        (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe"))) {
      found.from = m.source;
      found.vocab = load_vocab(m.source, 0);
    } else {
      found.missing =
          fmt::format("{}: no tokenizer.json, tokenizer.model or encoder.json + vocab.bpe in this folder", m.source);
    }
  } else {
    const fs::path guess = fs::path(m.path).parent_path() / "tokenizer.bin";
    if (fs::exists(guess)) {
      read_vocab_into(guess.string(), m.vocab_size, parse_gguf, found);
    } else {
      found.missing = fmt::format("{}: no tokenizer found next to the model; pass --tokenizer", m.path);
    }
  }
  return found;
}

std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const Model& m, const std::string& explicit_path) {
  FoundVocab found = find_vocab({.format = m.format(),
                                 .path = m.path(),
                                 .source = m.weights().source(),
                                 .vocab_size = m.config().vocab,
                                 .gguf = m.gguf(),
                                 .embedded = &m.embedded_tokenizer()},
                                explicit_path);
  ASCENT_CHECK(!found.from.empty(), "{}", found.missing);
  tokenizer::Vocab v = std::move(found.vocab);
  const std::string& from = found.from;  // where the tokenizer came from, for the size check's error
  ASCENT_CHECK(static_cast<int64_t>(v.pieces.size()) <= m.config().vocab,
               "{}: the tokenizer has {} tokens but the model {} has a vocabulary of {}", from, v.pieces.size(),
               m.path(), m.config().vocab);
  if (v.bos_id < 0) v.bos_id = m.config().bos_id;
  if (v.eos_id < 0) v.eos_id = m.config().eos_id;
  // The tokenizer's own checks (its pre-tokenizer regex compiles) name the file they came from.
  return with_context(from, [&] { return std::make_unique<tokenizer::Tokenizer>(std::move(v)); });
}

namespace {

constexpr std::string_view kSpace = "\u2581";  // SentencePiece's space, as llama.cpp's "llama" tokenizer reads pieces

// Scores for llama.cpp's "llama" tokenizer, which merges the adjacent pair whose joined piece scores highest, from a
// vocabulary that ranks merges instead (tokenizer.json): a piece scores minus the rank of the first merge making it,
// so merges happen in rank order. Pieces no merge makes score below every merge; special, unknown and byte pieces
// score 0, as in SentencePiece's own files.
std::vector<float> scores_from_merges(const tokenizer::Vocab& v, const std::string& from) {
  using tokenizer::TokenType;
  // A float holds every integer rank below 2^24 exactly; past that two ranks could tie.
  ASCENT_CHECK(v.merges.size() < (size_t{1} << 24), "{}: {} merges: a score cannot rank more than 2^24", from,
               v.merges.size());
  std::unordered_map<std::string, size_t> first;
  for (size_t r = 0; r < v.merges.size(); ++r) first.emplace(v.merges[r].first + v.merges[r].second, r);
  std::vector<float> scores(v.pieces.size(), 0.0f);
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    const TokenType t = i < v.types.size() ? v.types[i] : TokenType::Normal;
    if (t != TokenType::Normal && t != TokenType::UserDefined && t != TokenType::Unused) continue;
    const auto it = first.find(v.pieces[i]);
    scores[i] = -static_cast<float>(it != first.end() ? it->second : v.merges.size());
  }
  return scores;
}

// Whether a piece (not special) holds a space after its first character: then splitting the text at each space, as a
// Metaspace pre-tokenizer with split true does, changes which pieces can form.
bool spans_spaces(const tokenizer::Vocab& v) {
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    if (i < v.types.size() && v.types[i] == tokenizer::TokenType::Control) continue;
    if (v.pieces[i].find(v.space, 1) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

void add_gguf_vocab(GgufWriter& out, const FoundVocab& found, int64_t n_vocab, const std::string& path) {
  using tokenizer::TokenType;
  using tokenizer::VocabKind;
  const std::string& from = found.from;
  if (!found.gguf_keys.empty()) {
    // Copied as stored, which llama.cpp read as written; the vocabulary need not be one Ascent's encoder runs.
    for (const auto& [key, v] : found.gguf_keys) {
      if (key == "tokenizer.ggml.tokens") {
        ASCENT_CHECK(static_cast<int64_t>(v.strings.size()) <= n_vocab,
                     "{}: the tokenizer has {} tokens but the model has a vocabulary of {}", from, v.strings.size(),
                     n_vocab);
      }
      out.set_value(key, v);
    }
    return;
  }
  const tokenizer::Vocab& v = found.vocab;
  const size_t n = v.pieces.size();
  ASCENT_CHECK(static_cast<int64_t>(n) <= n_vocab,
               "{}: the tokenizer has {} tokens but the model has a vocabulary of {}", from, n, n_vocab);
  // What llama.cpp's keys cannot say splits two ways. Where ordinary text (single spaces, NFC, no special tokens)
  // would get other ids, the file is refused: a llama.cpp user would get a model that reads its prompts wrongly,
  // and nothing to tell them so. Where only rarer text differs, the file is written and each difference named once.
  std::vector<std::string> refused, rare;
  if (v.normalization != tokenizer::Normalization::None) {
    (v.normalization == tokenizer::Normalization::NFC ? rare : refused).push_back("Unicode normalization");
  }
  if (!v.suffix_ids.empty() && (v.suffix_ids.size() != 1 || v.suffix_ids[0] != v.eos_id)) {
    refused.push_back("tokens added after the text other than EOS");
  }
  if (v.kind == VocabKind::Spm) {
    if (v.split_at_space && spans_spaces(v)) refused.push_back("splitting at each space (Metaspace split)");
    if (v.add_space_prefix && v.space_prefix != tokenizer::SpacePrefix::EveryRun) {
      rare.push_back("a Metaspace prefix scheme (text that starts with a space, or follows a special token)");
    }
    if (v.remove_extra_spaces) rare.push_back("removing extra whitespace (text with runs of spaces)");
    // Those rules apply only to a character whose bytes do not all have a byte piece.
    std::vector<bool> bytes(256, false);
    for (size_t i = 0; i < n && i < v.types.size(); ++i) {
      const int b = tokenizer::byte_piece_value(v.pieces[i]);
      if (b >= 0 && v.types[i] == TokenType::Byte) bytes[static_cast<size_t>(b)] = true;
    }
    const bool all_bytes = std::find(bytes.begin(), bytes.end(), false) == bytes.end();
    if ((v.unk_per_char || v.fuse_unk) && !all_bytes) {
      rare.push_back("unknown-token rules (characters with no piece)");
    }
  }
  if (v.match_normalized || !v.added_rules.empty())
    rare.push_back("added-token matching rules (special tokens in text)");
  const char* pre = nullptr;
  if (v.kind == VocabKind::ByteLevel) {
    for (const auto& p : kGgufPreTokenizers) {
      if (pre == nullptr && v.pre_pattern == p.pattern && v.ignore_merges == p.ignore_merges) pre = p.name;
    }
    // Refused rather than written with a guessed name: llama.cpp would split the text by another regex without a
    // word, and Ascent reads the file back only by a name it knows.
    if (pre == nullptr) {
      refused.push_back(fmt::format("a pre-tokenizer split that tokenizer.ggml.pre has no name for ({}{})",
                                    v.pre_pattern.empty() ? "GPT-2's" : "'" + v.pre_pattern + "'",
                                    v.ignore_merges ? ", ignore_merges" : ""));
    }
  }
  ASCENT_CHECK(refused.empty(),
               "{}: llama.cpp's GGUF vocabulary keys cannot describe {}, so {} would tokenize text otherwise; convert "
               "with --tokenizer naming another vocabulary",
               from, fmt::join(refused, "; "), path);
  if (!rare.empty()) {
    log::warn("{}: may tokenize some text otherwise than {}: GGUF's vocabulary keys cannot describe {}", path, from,
              fmt::join(rare, "; "));
  }

  std::vector<std::string> tokens(v.pieces);
  std::vector<int32_t> types;
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = i < v.types.size() ? v.types[i] : TokenType::Normal;
    types.push_back(static_cast<int32_t>(t));
    if (v.kind != VocabKind::Spm || v.space == kSpace) continue;
    std::string& piece = tokens[i];
    // llama2.c's tokenizer.bin writes SentencePiece's space as ' ' (v.space), and BOS and EOS as "\n<s>\n" and
    // "\n</s>\n" for its printing; llama.cpp finds pieces by SentencePiece's own spelling.
    if (t == TokenType::Control) {
      const size_t b = piece.find_first_not_of('\n'), e = piece.find_last_not_of('\n');
      piece = b == std::string::npos ? std::string() : piece.substr(b, e - b + 1);
      continue;
    }
    std::string spelled;
    for (size_t at = 0; at < piece.size();) {
      if (piece.compare(at, v.space.size(), v.space) == 0) {
        spelled += kSpace;
        at += v.space.size();
      } else {
        spelled += piece[at++];
      }
    }
    piece = std::move(spelled);
  }
  std::vector<float> scores;
  if (v.kind == VocabKind::Spm) {
    scores = v.merges.empty() ? v.scores : scores_from_merges(v, from);
    scores.resize(n, 0.0f);
  }
  // As llama.cpp's converter pads a vocabulary smaller than the embedding: llama.cpp takes its vocabulary size from
  // the token list and refuses an embedding of another size.
  for (size_t i = n; i < static_cast<size_t>(n_vocab); ++i) {
    tokens.push_back(fmt::format("[PAD{}]", i));
    types.push_back(static_cast<int32_t>(TokenType::Unused));
    if (v.kind == VocabKind::Spm) scores.push_back(-1000.0f);
  }

  out.set_string("tokenizer.ggml.model", v.kind == VocabKind::Spm ? "llama" : "gpt2");
  if (pre != nullptr) out.set_string("tokenizer.ggml.pre", pre);
  out.set_strings("tokenizer.ggml.tokens", tokens);
  if (v.kind == VocabKind::Spm) out.set_f32s("tokenizer.ggml.scores", scores);
  out.set_i32s("tokenizer.ggml.token_type", types);
  if (v.kind == VocabKind::ByteLevel) {
    std::vector<std::string> merges;
    merges.reserve(v.merges.size());
    for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
    out.set_strings("tokenizer.ggml.merges", merges);
  }
  if (v.bos_id >= 0) out.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos_id));
  if (v.eos_id >= 0) out.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos_id));
  if (v.unk_id >= 0) out.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.unk_id));
  out.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  out.set_bool("tokenizer.ggml.add_eos_token", !v.suffix_ids.empty());
  if (v.kind == VocabKind::Spm) out.set_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
}

}  // namespace ascent::model
