#include "ascent/model/model_tokenizer.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "ascent/base/error.h"

namespace ascent::model {

namespace fs = std::filesystem;

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
    if (p == "llama-bpe" || p == "llama3") {
      v.ignore_merges = true;
      v.pre_pattern =
          R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    } else if (p == "qwen2") {
      v.pre_pattern =
          R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    } else {
      // Each other name is its own split (llama.cpp's list): encoding by GPT-2's instead gave other ids silently.
      ASCENT_CHECK(p == "default" || p == "gpt-2",
                   "{}: metadata tokenizer.ggml.pre '{}' is not supported (default, gpt-2, "
                   "llama-bpe, llama3, qwen2)",
                   f.path(), p);
    }
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

std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const Model& m, const std::string& explicit_path) {
  tokenizer::Vocab v;
  std::string from = m.path();  // where the tokenizer came from, for the size check's error
  if (!explicit_path.empty()) {
    from = explicit_path;
    v = load_vocab(explicit_path, m.config().vocab);
  } else if (m.gguf() != nullptr) {
    ASCENT_CHECK(m.gguf()->find("tokenizer.ggml.model") != nullptr,
                 "{}: the file holds no vocabulary; pass --tokenizer", m.path());
    v = vocab_from_gguf(*m.gguf());
  } else if (m.format() == Format::Ascent) {
    const EmbeddedTokenizer& e = m.embedded_tokenizer();
    ASCENT_CHECK(!e.bytes.empty(), "{}: the file holds no tokenizer; pass --tokenizer", m.path());
    // The readers take paths; the embedded file is written out under its own kind of name for them.
    const char* ext = e.kind == "tokenizer.json" ? ".json" : e.kind == "gguf" ? ".gguf" : ".bin";
    // A fresh name made with O_EXCL (mkstemps): the name from the pid it replaced could be planted in a shared /tmp
    // beforehand as a link, which the write would then follow to another file.
    std::string name = (fs::temp_directory_path() / ("ascent-tokenizer-XXXXXX" + std::string(ext))).string();
    const int fd = ::mkstemps(name.data(), static_cast<int>(std::strlen(ext)));
    ASCENT_CHECK(fd >= 0, "{}: cannot create a temporary file for its tokenizer: {}", m.path(), std::strerror(errno));
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
      fail("{}: cannot write its tokenizer to {}", m.path(), tmp.string());
    }
    try {
      v = load_vocab(tmp.string(), m.config().vocab);
    } catch (...) {
      fs::remove(tmp);
      throw;
    }
    fs::remove(tmp);
  } else if (m.format() == Format::HuggingFace) {
    from = m.weights().source();
    v = load_vocab(m.weights().source(), 0);
  } else {
    const fs::path guess = fs::path(m.path()).parent_path() / "tokenizer.bin";
    ASCENT_CHECK(fs::exists(guess), "{}: no tokenizer found next to the model; pass --tokenizer", m.path());
    from = guess.string();
    v = load_vocab(guess.string(), m.config().vocab);
  }
  ASCENT_CHECK(static_cast<int64_t>(v.pieces.size()) <= m.config().vocab,
               "{}: the tokenizer has {} tokens but the model {} has a vocabulary of {}", from, v.pieces.size(),
               m.path(), m.config().vocab);
  if (v.bos_id < 0) v.bos_id = m.config().bos_id;
  if (v.eos_id < 0) v.eos_id = m.config().eos_id;
  // The tokenizer's own checks (its pre-tokenizer regex compiles) name the file they came from.
  return with_context(from, [&] { return std::make_unique<tokenizer::Tokenizer>(std::move(v)); });
}

}  // namespace ascent::model
