#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/json_file.h"
#include "ascent/base/json_number.h"
#include "ascent/base/mapped_file.h"
#include "ascent/base/read_file.h"
#include "ascent/tokenizer/vocab.h"

namespace ascent::tokenizer {

int byte_piece_value(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(piece[3]), lo = hex(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

Vocab read_llama2c_vocab(const std::string& path, int64_t vocab_size) {
  MappedFile f(path);
  const auto b = f.bytes();
  size_t pos = 0;
  auto need = [&](size_t n, const char* what) {
    if (n > b.size() - pos) fail("{}: truncated while reading {} at offset {}", path, what, pos);
    const uint8_t* p = b.data() + pos;
    pos += n;
    return p;
  };
  Vocab v;
  v.kind = VocabKind::Spm;
  v.space = " ";  // llama2.c's exporter already turned "▁" into spaces
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  int32_t max_len = 0;
  std::memcpy(&max_len, need(4, "max_token_length"), 4);
  ASCENT_CHECK(max_len > 0 && max_len < 4096, "{}: bad header: max_token_length {}", path, max_len);
  // vocab_size 0: the file alone does not say, so read entries to its end.
  for (int64_t i = 0; vocab_size > 0 ? i < vocab_size : pos < b.size(); ++i) {
    float score;
    int32_t len;
    std::memcpy(&score, need(4, "score"), 4);
    std::memcpy(&len, need(4, "token length"), 4);
    ASCENT_CHECK(len >= 0 && len <= max_len, "{}: token {} has length {} (max {})", path, i, len, max_len);
    const uint8_t* p = need(static_cast<size_t>(len), "token bytes");
    std::string piece(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
    TokenType type = TokenType::Normal;
    if (i < 3) type = i == 0 ? TokenType::Unknown : TokenType::Control;
    if (byte_piece_value(piece) >= 0) type = TokenType::Byte;
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(score);
    v.types.push_back(type);
  }
  return v;
}

Vocab read_gpt2_vocab(const std::string& encoder_json, const std::string& vocab_bpe) {
  using nlohmann::json;
  const json j = read_json_file(encoder_json);
  ASCENT_CHECK(j.is_object(), "{}: expected an object of piece -> id", encoder_json);
  Vocab v;
  v.kind = VocabKind::ByteLevel;
  v.add_bos = false;
  int64_t n = 0;
  for (const auto& [piece, id] : j.items()) {
    ASCENT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0, "{}: id of '{}' is not a non-negative integer",
                 encoder_json, piece);
    n = std::max<int64_t>(n, id.get<int64_t>() + 1);
  }
  ASCENT_CHECK(n > 0 && n < (1 << 24), "{}: vocabulary size {} out of range", encoder_json, n);
  v.pieces.assign(static_cast<size_t>(n), std::string());
  v.types.assign(static_cast<size_t>(n), TokenType::Normal);
  for (const auto& [piece, id] : j.items()) v.pieces[id.get<size_t>()] = piece;
  std::istringstream merges(read_file(vocab_bpe));
  std::string line;
  int line_no = 0;
  while (std::getline(merges, line)) {
    ++line_no;
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t sp = line.find(' ', 1);
    ASCENT_CHECK(sp != std::string::npos, "{}:{}: merge '{}' is not 'a b'", vocab_bpe, line_no, line);
    v.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  check_merges(v, vocab_bpe, "merge");
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    if (v.pieces[i] == "<|endoftext|>") {
      v.types[i] = TokenType::Control;
      v.bos_id = v.eos_id = static_cast<int32_t>(i);
    }
  }
  return v;
}

namespace {

// A token id from tokenizer.json, checked to be an integer of int32's range before it is used: nlohmann's get would
// truncate 3.5 to 3 (then another token's id, or a silent one) and wrap 2^63.
int64_t token_id(const nlohmann::json& id, const std::string& path, const char* field, const std::string& piece) {
  ASCENT_CHECK(json_integer_in<int32_t>(id), "{}: {} '{}' has id {}, not a token id", path, field, piece, id.dump());
  return id.get<int64_t>();
}

// What the normalizer and pre-tokenizer ask of the encoder, read in one walk of each.
struct Pipeline {
  bool byte_level = false;         // a ByteLevel step
  std::string split_pattern;       // the Split step's regex, if any
  bool has_normalization = false;  // a Unicode normalization step (one form; two are refused)
  Normalization normalization = Normalization::None;
  bool prepend = false;        // a Prepend step (SentencePiece-style files: Prepend("▁") + Replace(" ", "▁"))
  bool replace_space = false;  // a Replace(" ", "▁") normalizer step
  // A Metaspace pre-tokenizer step, at any depth of the walk: its prepend scheme (metaspace_scheme: "always", "first"
  // or "never"; "" for no step) and whether each space starts a word (split).
  std::string metaspace;
  bool metaspace_split = false;
};

// The walk of a tokenizer.json pipeline (normalizer, pre_tokenizer, decoder), one step object at a time.
constexpr std::string_view kSpace = "\u2581";  // SentencePiece's space
// A step's string field, or "(missing)" for the error messages.
std::string string_field(const nlohmann::json& p, const char* key) {
  return p.contains(key) && p[key].is_string() ? p[key].get<std::string>() : std::string("(missing)");
}
// A step's type, after checking it is an object (`what`: which pipeline).
std::string step_type(const nlohmann::json& p, const char* what, const std::string& path) {
  ASCENT_CHECK(p.is_object(), "{}: {}: expected an object, got {}", path, what, p.type_name());
  return string_field(p, "type");
}
// A Sequence's steps (its list under `list`) to fn, in order.
template <class Fn>
void each_step(const nlohmann::json& p, const char* what, const char* list, const std::string& path, Fn&& fn) {
  ASCENT_CHECK(p.contains(list) && p[list].is_array(), "{}: {} Sequence: {} must be a list", path, what, list);
  for (const auto& q : p[list]) fn(q);
}
// A Replace step's pattern: its plain string, or "(regex)".
std::string replaced(const nlohmann::json& p) {
  return p.contains("pattern") && p["pattern"].is_object() ? string_field(p["pattern"], "String")
                                                           : std::string("(regex)");
}

// A Metaspace step's (pre-tokenizer or decoder) prepend_scheme: "always", "first" or "never", or in files older than
// prepend_scheme its add_prefix_space ("always" or "never"); another value is refused, naming it.
std::string metaspace_scheme(const nlohmann::json& p, const char* what, const std::string& path) {
  if (!p.contains("prepend_scheme")) return p.value("add_prefix_space", true) ? "always" : "never";
  const std::string scheme = string_field(p, "prepend_scheme");
  ASCENT_CHECK(scheme == "always" || scheme == "first" || scheme == "never",
               "{}: {} Metaspace prepend_scheme '{}' is not supported (always, first, never)", path, what, scheme);
  return scheme;
}

// Reads the pipeline, refusing by name a step the encoder does not carry out. Skipping an unknown step would encode the
// text as if it were absent, so the ids would differ from the tokenizer's own without a word.
// What the encoder does: Unicode normalization (NFC, NFKC, NFD, NFKD); SentencePiece-style space handling (Prepend "▁",
// Replace " " -> "▁", Metaspace "▁"); one regex Split (Isolated, not inverted) before a ByteLevel. That ByteLevel adds
// no prefix space and splits by that regex only (or, without a Split, by GPT-2's).
Pipeline read_pipeline(const nlohmann::json& j, const std::string& path) {
  using nlohmann::json;
  Pipeline out;
  auto normalizer = [&](const json& p, auto& self) -> void {
    const std::string t = step_type(p, "normalizer", path);
    const std::pair<const char*, Normalization> forms[] = {{"NFC", Normalization::NFC},
                                                           {"NFKC", Normalization::NFKC},
                                                           {"NFD", Normalization::NFD},
                                                           {"NFKD", Normalization::NFKD}};
    for (const auto& [name, form] : forms) {
      if (t == name) {
        // HF applies each in turn, and two differ from either alone (NFC after NFKD is NFKC).
        ASCENT_CHECK(!out.has_normalization || out.normalization == form,
                     "{}: normalizer has two Unicode normalizations (the second {}); one is supported", path, name);
        // The encoder normalizes first: after Replace, a compatibility form's new spaces (from U+00A0 ...) would
        // stay spaces in HF.
        ASCENT_CHECK(!out.replace_space || (form != Normalization::NFKC && form != Normalization::NFKD),
                     "{}: normalizer {} after Replace is not supported ({} first)", path, name, name);
        out.has_normalization = true;
        out.normalization = form;
        return;
      }
    }
    if (t == "Sequence") return each_step(p, "normalizer", "normalizers", path, [&](const json& q) { self(q, self); });
    if (t == "Prepend") {
      ASCENT_CHECK(string_field(p, "prepend") == kSpace, "{}: normalizer Prepend '{}' is not supported (only '{}')",
                   path, string_field(p, "prepend"), kSpace);
      // HF prepends twice; read as once, the ids would differ.
      ASCENT_CHECK(!out.prepend, "{}: normalizer has two Prepend steps; one is supported", path);
      out.prepend = true;
      return;
    }
    if (t == "Replace") {
      const std::string from = replaced(p);
      ASCENT_CHECK(from == " " && string_field(p, "content") == kSpace,
                   "{}: normalizer Replace '{}' -> '{}' is not supported (only ' ' -> '{}')", path, from,
                   string_field(p, "content"), kSpace);
      out.replace_space = true;
      return;
    }
    fail("{}: normalizer type '{}' is not supported (NFC, NFKC, NFD, NFKD, Prepend, Replace, Sequence)", path, t);
  };
  if (j.contains("normalizer") && !j["normalizer"].is_null()) normalizer(j["normalizer"], normalizer);

  int splits = 0;
  bool byte_level_regex = false;
  auto pre = [&](const json& p, auto& self) -> void {
    const std::string t = step_type(p, "pre_tokenizer", path);
    if (t == "Sequence") {
      return each_step(p, "pre_tokenizer", "pretokenizers", path, [&](const json& q) { self(q, self); });
    }
    if (t == "Split") {
      ASCENT_CHECK(p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex"),
                   "{}: pre_tokenizer Split on a plain string is not supported (only a Regex)", path);
      ASCENT_CHECK(string_field(p, "behavior") == "Isolated" && !p.value("invert", false),
                   "{}: pre_tokenizer Split with behavior {}{} is not supported (only Isolated)", path,
                   string_field(p, "behavior"), p.value("invert", false) ? ", inverted" : "");
      // HF's Split after ByteLevel sees the mapped text ("Ġ", not spaces); the encoder splits the text itself.
      ASCENT_CHECK(!out.byte_level, "{}: pre_tokenizer Split after ByteLevel is not supported (Split, then ByteLevel)",
                   path);
      out.split_pattern = p["pattern"]["Regex"].get<std::string>();
      ++splits;
      return;
    }
    if (t == "ByteLevel") {
      ASCENT_CHECK(!p.value("add_prefix_space", false),
                   "{}: pre_tokenizer ByteLevel with add_prefix_space true is not supported", path);
      // A second ByteLevel maps the already mapped characters again in HF; read as one, the ids would differ.
      ASCENT_CHECK(!out.byte_level, "{}: pre_tokenizer has two ByteLevel steps; one is supported", path);
      out.byte_level = true;
      byte_level_regex = p.value("use_regex", true);
      return;
    }
    if (t == "Metaspace") {
      ASCENT_CHECK(string_field(p, "replacement") == kSpace,
                   "{}: pre_tokenizer Metaspace replacement '{}' is not supported", path,
                   string_field(p, "replacement"));
      ASCENT_CHECK(out.metaspace.empty(), "{}: pre_tokenizer has two Metaspace steps; one is supported", path);
      out.metaspace = metaspace_scheme(p, "pre_tokenizer", path);
      out.metaspace_split = p.value("split", true);
      return;
    }
    fail("{}: pre_tokenizer type '{}' is not supported (ByteLevel, Split, Metaspace, Sequence)", path, t);
  };
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) pre(j["pre_tokenizer"], pre);
  ASCENT_CHECK(splits <= 1, "{}: pre_tokenizer has {} Split steps; one is supported", path, splits);
  // HF splits by each in turn; the encoder splits once, by the Split's regex or else by GPT-2's.
  ASCENT_CHECK(
      splits == 0 || !byte_level_regex,
      "{}: pre_tokenizer Split followed by a ByteLevel with use_regex true (two regex splits) is not supported", path);
  // Without either regex HF does not pre-split at all; the encoder split by GPT-2's regex.
  ASCENT_CHECK(!out.byte_level || splits == 1 || byte_level_regex,
               "{}: pre_tokenizer ByteLevel with use_regex false and no Split step (no pre-split) is not supported",
               path);
  // The SentencePiece-style encoder splits words only at spaces, and the byte-level one knows no "▁": either would
  // silently encode without the step.
  ASCENT_CHECK(splits == 0 || out.byte_level,
               "{}: pre_tokenizer Split without a ByteLevel step is not supported (SentencePiece-style files split "
               "only at spaces)",
               path);
  ASCENT_CHECK(out.metaspace.empty() || !out.byte_level,
               "{}: pre_tokenizer Metaspace beside ByteLevel is not supported", path);
  // The SentencePiece-style encoder writes every space as "▁", which HF does only by one of these two steps.
  ASCENT_CHECK(out.byte_level || out.replace_space || !out.metaspace.empty(),
               "{}: spaces stay spaces here (no normalizer Replace ' ' -> '{}', no Metaspace, no ByteLevel); not "
               "supported",
               path, kSpace);
  return out;
}

// Checks the decoder against what Tokenizer::decode does for this vocabulary, refusing by name a step it does not carry
// out. Otherwise a file whose decoder differs would decode to other text than the tokenizer's own, without a word.
// What decode does: byte-level vocabularies map each piece's characters back to bytes (HF's ByteLevel decoder). The
// others turn "▁" into a space (Replace, or Metaspace) and pieces <0xNN> into their byte (ByteFallback, with or without
// the model's byte_fallback). They join the pieces (Fuse) and drop the first space exactly where the encoder prefixes
// one (Strip of one leading space, or Metaspace with a prepend scheme). A file with no decoder is taken as decoding so.
// Returns whether the decoder has a ByteFallback step.
bool check_decoder(const nlohmann::json& j, const std::string& path, bool byte_level, bool byte_fallback,
                   bool space_prefix) {
  using nlohmann::json;
  if (!j.contains("decoder") || j["decoder"].is_null()) return byte_fallback && !byte_level;
  bool replaces = false, bytes = false, strips = false;
  auto step = [&](const json& p, auto& self) -> void {
    const std::string t = step_type(p, "decoder", path);
    if (t == "Sequence") return each_step(p, "decoder", "decoders", path, [&](const json& q) { self(q, self); });
    if (byte_level) {
      ASCENT_CHECK(t == "ByteLevel",
                   "{}: decoder type '{}' is not supported with a ByteLevel pre_tokenizer (ByteLevel)", path, t);
      return;
    }
    if (t == "Replace") {
      const std::string from = replaced(p);
      ASCENT_CHECK(from == kSpace && string_field(p, "content") == " ",
                   "{}: decoder Replace '{}' -> '{}' is not supported (only '{}' -> ' ')", path, from,
                   string_field(p, "content"), kSpace);
      replaces = true;
    } else if (t == "ByteFallback") {
      bytes = true;
    } else if (t == "Fuse") {
      return;  // decode joins the pieces' text as it goes
    } else if (t == "Strip") {
      ASCENT_CHECK(string_field(p, "content") == " " && p.value("stop", 0) == 0 && p.value("start", 0) <= 1,
                   "{}: decoder Strip '{}' start {} stop {} is not supported (only ' ', start 0 or 1, stop 0)", path,
                   string_field(p, "content"), p.value("start", 0), p.value("stop", 0));
      strips = strips || p.value("start", 0) == 1;
    } else if (t == "Metaspace") {
      ASCENT_CHECK(string_field(p, "replacement") == kSpace, "{}: decoder Metaspace replacement '{}' is not supported",
                   path, string_field(p, "replacement"));
      replaces = true;
      strips = strips || metaspace_scheme(p, "decoder", path) != "never";
    } else {
      fail("{}: decoder type '{}' is not supported (Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence)", path, t);
    }
  };
  step(j["decoder"], step);
  if (byte_level) return false;
  ASCENT_CHECK(replaces, "{}: decoder leaves '{}' in the text (no Replace '{}' -> ' ' or Metaspace); not supported",
               path, kSpace, kSpace);
  // (A ByteFallback step without model.byte_fallback turns pieces <0xNN> into their bytes too: the caller marks the
  // vocabulary so.)
  ASCENT_CHECK(bytes || !byte_fallback,
               "{}: decoder has no ByteFallback but model.byte_fallback is true; not supported", path);
  ASCENT_CHECK(strips == space_prefix, "{}: decoder {} the leading space but the encoder {} one; not supported", path,
               strips ? "strips" : "keeps", space_prefix ? "prefixes" : "does not prefix");
  return bytes;
}

// The special tokens the post-processor puts around the text: TemplateProcessing's "single", at most one SpecialToken,
// then $A, then any. The template is also read inside a Sequence (Llama-3.1's files: ByteLevel, then the template);
// read only at the top, those would encode without their BOS. A ByteLevel step changes only offsets. Anything else that
// adds tokens (a second token before the text, Bert/RobertaProcessing) is refused by name: encode adds one BOS. As in
// HF, a SpecialToken names an entry of the template's special_tokens, whose ids are what is added (not the vocabulary's
// ids for that name).
struct Template {
  std::string before_name;             // the SpecialToken before the text, for errors
  std::vector<int64_t> before, after;  // the ids added before and after the text
};
Template read_template(const nlohmann::json& pp, const std::string& path) {
  Template out;
  bool templates = false;
  auto step = [&](const nlohmann::json& p, auto& self) -> void {
    const std::string t = step_type(p, "post_processor", path);
    if (t == "Sequence")
      return each_step(p, "post_processor", "processors", path, [&](const auto& q) { self(q, self); });
    if (t == "ByteLevel") return;
    ASCENT_CHECK(t == "TemplateProcessing",
                 "{}: post_processor type '{}' is not supported (TemplateProcessing, ByteLevel, Sequence)", path, t);
    ASCENT_CHECK(!templates, "{}: post_processor has two TemplateProcessing steps; one is supported", path);
    templates = true;
    ASCENT_CHECK(p.contains("single") && p["single"].is_array(),
                 "{}: post_processor TemplateProcessing: single must be a list", path);
    const nlohmann::json* specials = p.contains("special_tokens") ? &p["special_tokens"] : nullptr;
    auto ids_of = [&](const std::string& name) {
      ASCENT_CHECK(specials != nullptr && specials->is_object() && specials->contains(name),
                   "{}: post_processor TemplateProcessing: SpecialToken '{}' is not in its special_tokens", path, name);
      const nlohmann::json& e = (*specials)[name];
      ASCENT_CHECK(e.is_object() && e.contains("ids") && e["ids"].is_array() && !e["ids"].empty(),
                   "{}: post_processor TemplateProcessing: special_tokens '{}' has no list of ids", path, name);
      std::vector<int64_t> ids;
      for (const auto& id : e["ids"]) ids.push_back(token_id(id, path, "post_processor special token", name));
      return ids;
    };
    bool text_seen = false;
    for (const auto& item : p["single"]) {
      ASCENT_CHECK(item.is_object() && (item.contains("SpecialToken") || item.contains("Sequence")),
                   "{}: post_processor TemplateProcessing: single holds {}, not a SpecialToken or Sequence", path,
                   item.dump());
      if (item.contains("Sequence")) {
        text_seen = true;
        continue;
      }
      const std::string name = string_field(item["SpecialToken"], "id");
      const std::vector<int64_t> ids = ids_of(name);
      if (text_seen) {
        out.after.insert(out.after.end(), ids.begin(), ids.end());
        continue;
      }
      ASCENT_CHECK(out.before.empty(), "{}: post_processor adds '{}' and '{}' before the text; not supported (one)",
                   path, out.before_name, name);
      ASCENT_CHECK(ids.size() == 1, "{}: post_processor adds {} tokens before the text ('{}'); not supported (one)",
                   path, ids.size(), name);
      out.before = ids;
      out.before_name = name;
    }
  };
  step(pp, step);
  return out;
}

}  // namespace

void check_merges(const Vocab& v, const std::string& source, const char* field) {
  if (v.merges.empty()) return;
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(v.pieces.size());
  for (size_t i = 0; i < v.pieces.size(); ++i) ids.emplace(v.pieces[i], static_cast<int32_t>(i));
  std::string joined;
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const auto& [a, b] = v.merges[r];
    for (const std::string* side : {&a, &b}) {
      ASCENT_CHECK(ids.contains(*side), "{}: {} {} '{} {}': '{}' is not in the vocabulary", source, field, r, a, b,
                   *side);
    }
    joined.assign(a).append(b);
    ASCENT_CHECK(ids.contains(joined), "{}: {} {} '{} {}': its result '{}' is not in the vocabulary", source, field, r,
                 a, b, joined);
  }
}

Vocab read_tokenizer_json(const std::string& path) {
  using nlohmann::json;
  const json j = read_json_file(path);
  try {
    ASCENT_CHECK(j.contains("model") && j["model"].is_object(), "{}: missing field model", path);
    const json& m = j["model"];
    const std::string type = m.value("type", std::string("BPE"));
    ASCENT_CHECK(type == "BPE", "{}: model.type '{}' is not supported (BPE)", path, type);
    Vocab v;
    const bool byte_fallback = m.value("byte_fallback", false);
    v.ignore_merges = m.value("ignore_merges", false);
    v.unk_per_char = true;
    v.fuse_unk = m.value("fuse_unk", false);
    // What the encoder does not do, refused by name (ignored, the ids differed from the tokenizer's own).
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      ASCENT_CHECK(string_field(m, key) == "(missing)" || string_field(m, key).empty(),
                   "{}: model.{} '{}' is not supported", path, key, string_field(m, key));
    }
    ASCENT_CHECK(!m.contains("dropout") || m["dropout"].is_null() ||
                     (m["dropout"].is_number() && m["dropout"].get<double>() == 0.0),
                 "{}: model.dropout {} is not supported (BPE dropout makes encoding random)", path,
                 m["dropout"].dump());
    const Pipeline pipe = read_pipeline(j, path);
    const bool byte_level = pipe.byte_level;
    v.kind = byte_level ? VocabKind::ByteLevel : VocabKind::Spm;
    v.pre_pattern = pipe.split_pattern;
    ASCENT_CHECK(byte_level || byte_fallback || j["normalizer"].is_object(),
                 "{}: BPE without byte-level pre-tokenizer or byte_fallback is not supported", path);

    const json& vocab = m.at("vocab");
    ASCENT_CHECK(vocab.is_object(), "{}: model.vocab must be an object", path);
    int64_t n = 0;
    for (const auto& [piece, id] : vocab.items())
      n = std::max<int64_t>(n, token_id(id, path, "model.vocab", piece) + 1);
    if (j.contains("added_tokens")) {
      for (const auto& t : j["added_tokens"]) {
        const json& content = t.at("content");
        const std::string name = content.is_string() ? content.get<std::string>() : content.dump();
        n = std::max<int64_t>(n, token_id(t.at("id"), path, "added token", name) + 1);
      }
    }
    ASCENT_CHECK(n > 0 && n < (1 << 24), "{}: vocabulary size {} out of range", path, n);
    v.pieces.assign(static_cast<size_t>(n), std::string());
    v.types.assign(static_cast<size_t>(n), TokenType::Unused);
    std::vector<bool> taken(static_cast<size_t>(n), false);
    for (const auto& [piece, id] : vocab.items()) {
      const int64_t i = id.get<int64_t>();  // an integer in range: token_id above
      ASCENT_CHECK(i >= 0, "{}: token '{}' has negative id", path, piece);
      // One id for two pieces left the first unreachable by decoding, without a word.
      ASCENT_CHECK(!taken[static_cast<size_t>(i)], "{}: model.vocab: tokens '{}' and '{}' share id {}", path,
                   v.pieces[static_cast<size_t>(i)], piece, i);
      taken[static_cast<size_t>(i)] = true;
      v.pieces[static_cast<size_t>(i)] = piece;
      const bool is_byte = byte_piece_value(piece) >= 0;
      v.types[static_cast<size_t>(i)] = is_byte && byte_fallback ? TokenType::Byte : TokenType::Normal;
    }
    if (j.contains("added_tokens")) {
      for (const auto& t : j["added_tokens"]) {
        const int64_t id = t.at("id").get<int64_t>();  // an integer in range: token_id above
        // A negative id would be used as an index (a write before the vocabulary's first piece).
        ASCENT_CHECK(id >= 0, "{}: added token '{}' has negative id {}", path, t.at("content").get<std::string>(), id);
        const auto i = static_cast<size_t>(id);
        v.pieces[i] = t.at("content").get<std::string>();
        v.types[i] = t.value("special", false) ? TokenType::Control : TokenType::UserDefined;
        // Its matching flags (AddedTokenRule); unread, the whitespace they strip stayed in the text around it.
        const AddedTokenRule rule{t.value("lstrip", false), t.value("rstrip", false), t.value("single_word", false),
                                  t.value("normalized", !t.value("special", false))};
        if (rule.lstrip || rule.rstrip || rule.single_word || rule.normalized) {
          v.added_rules[static_cast<int32_t>(id)] = rule;
        }
      }
    }
    for (const auto& mg : m.at("merges")) {
      std::string a, b;
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ', 1);
        ASCENT_CHECK(sp != std::string::npos, "{}: merge '{}' is not 'a b'", path, s);
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        a = mg.at(0).get<std::string>();
        b = mg.at(1).get<std::string>();
      }
      v.merges.emplace_back(std::move(a), std::move(b));
    }
    check_merges(v, path, "model.merges");
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      const std::string u = m["unk_token"].get<std::string>();
      for (size_t i = 0; i < v.pieces.size(); ++i) {
        if (v.pieces[i] == u) v.unk_id = static_cast<int32_t>(i);
      }
    }
    if (pipe.has_normalization) v.normalization = pipe.normalization;
    // SentencePiece-style files normalise by Prepend("▁") + Replace(" ", "▁"), or pre-tokenize by Metaspace (also
    // inside a Sequence); with neither there is no prefix. A Prepend step prefixes every run before Metaspace sees it,
    // so Metaspace's rule applies only without one.
    const bool metaspace_prefix = !pipe.metaspace.empty() && pipe.metaspace != "never";
    v.add_space_prefix = !byte_level && (pipe.prepend || metaspace_prefix);
    if (!byte_level && !pipe.prepend && metaspace_prefix) {
      v.space_prefix = pipe.metaspace == "first" ? SpacePrefix::MetaspaceFirst : SpacePrefix::MetaspaceAlways;
    }
    v.split_at_space = pipe.metaspace_split;
    v.match_normalized = !byte_level && (pipe.replace_space || pipe.prepend);
    // Without model.byte_fallback its <0xNN> pieces are text to the encoder, but HF's ByteFallback decoder still
    // writes their bytes (decode wrote the six characters).
    v.decode_byte_pieces = check_decoder(j, path, byte_level, byte_fallback, v.add_space_prefix);
    // BOS from the post-processor's template when there is one; EOS by the usual names.
    v.add_bos = false;
    if (j.contains("post_processor") && !j["post_processor"].is_null()) {
      const Template tpl = read_template(j["post_processor"], path);
      auto checked = [&](int64_t id) {
        ASCENT_CHECK(id >= 0 && id < static_cast<int64_t>(v.pieces.size()),
                     "{}: post_processor adds id {}, which is not in the vocabulary ({} tokens)", path, id,
                     v.pieces.size());
        return static_cast<int32_t>(id);
      };
      if (!tpl.before.empty()) v.bos_id = checked(tpl.before[0]);
      v.add_bos = !tpl.before.empty();
      for (int64_t id : tpl.after) v.suffix_ids.push_back(checked(id));
    }
    for (size_t i = 0; i < v.pieces.size(); ++i) {
      const std::string& p = v.pieces[i];
      if (v.types[i] != TokenType::Control) continue;
      if (v.bos_id < 0 && (p == "<s>" || p == "<|begin_of_text|>")) v.bos_id = static_cast<int32_t>(i);
      if (v.eos_id < 0 && (p == "</s>" || p == "<|end_of_text|>" || p == "<|endoftext|>" || p == "<|end_story|>")) {
        v.eos_id = static_cast<int32_t>(i);
      }
    }
    return v;
  } catch (const json::exception& e) {
    fail("{}: bad tokenizer JSON: {}", path, e.what());
  }
}

}  // namespace ascent::tokenizer
