// A vocabulary as every tokenizer source describes it: pieces, scores, token types, merges, special ids and the
// flags that change how text is split. Readers for tokenizer.bin and tokenizer.json live here; the GGUF reader
// lives with the model formats (model/) and fills the same struct.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ascent::tokenizer {

enum class VocabKind {
  Spm,        // SentencePiece-style BPE over characters with byte fallback (Llama-2, llama2.c, story-656K)
  ByteLevel,  // GPT-2-style BPE over bytes mapped to printable characters (GPT-2, Llama-3, Qwen)
};

// Token types as GGUF numbers them.
enum class TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// Unicode normalisation applied to text before encoding (tokenizer.json's "normalizer").
enum class Normalization { None, NFC, NFKC, NFD, NFKD };

// The byte a SentencePiece byte-fallback piece "<0xAB>" stands for, or -1 when `piece` has another form.
int byte_piece_value(std::string_view piece);

// Spm: which runs of text (the text between special tokens) encode prefixes with a space.
// - EveryRun: SentencePiece prefixes every run, even one that starts with a space. So does Hugging Face's Prepend
//   normalizer between added tokens it matches before normalizing ("normalized": false; see match_normalized for the
//   others).
// - MetaspaceAlways: HF's Metaspace pre-tokenizer prefixes every run but one that already starts with a space (" " or
//   "▁").
// - MetaspaceFirst: Metaspace with prepend_scheme "first" prefixes only a run at the start of the text, on the same
//   condition.
enum class SpacePrefix : uint8_t { EveryRun, MetaspaceAlways, MetaspaceFirst };

// How a tokenizer.json added token matches when special tokens are parsed (Hugging Face's AddedToken):
// - lstrip and rstrip take the whitespace on that side into the match (so out of the text around it);
// - single_word matches only where no word character touches it;
// - normalized matches its normalized text in the normalized text, not itself in the raw text (where
//   Vocab::match_normalized says the normalizer changes it).
struct AddedTokenRule {
  bool lstrip = false, rstrip = false, single_word = false, normalized = false;
};

struct Vocab {
  VocabKind kind = VocabKind::Spm;
  std::vector<std::string> pieces;
  std::vector<float> scores;  // Spm: merge priority of each piece (higher first)
  std::vector<TokenType> types;
  std::vector<std::pair<std::string, std::string>> merges;  // ranked merges (tokenizer.json, GGUF gpt2)
  int32_t bos_id = -1, eos_id = -1, unk_id = -1;
  bool add_bos = true;
  // Added after the text with the special tokens: a tokenizer.json template's tokens after $A, a GGUF's EOS
  // (tokenizer.ggml.add_eos_token).
  std::vector<int32_t> suffix_ids;
  bool add_space_prefix = true;  // Spm: prepend a space before encoding
  // Spm: SentencePiece's remove_extra_whitespaces (a tokenizer.model's normalizer spec): leading and trailing spaces
  // dropped and each run of spaces inside made one, before the prefix. llama2.c's tokenizer.bin cannot say so.
  bool remove_extra_spaces = false;
  SpacePrefix space_prefix = SpacePrefix::EveryRun;  // Spm, with add_space_prefix: before which runs
  bool split_at_space = false;         // Spm: each space starts a word that no merge crosses (HF Metaspace, split true)
  std::string space = "\xe2\x96\x81";  // Spm: what a space becomes ("▁", or " " in llama2.c files)
  std::string pre_pattern;             // ByteLevel: pre-tokenizer regex (empty: GPT-2's)
  Normalization normalization = Normalization::None;
  bool ignore_merges = false;  // a pre-split word found whole in the vocabulary is one token (Llama-3)
  std::unordered_map<int32_t, AddedTokenRule> added_rules;  // by id; only tokens with a flag set
  // Spm tokenizer.json whose normalizer writes spaces as "▁" (Replace) and maybe prefixes one (Prepend): added
  // tokens with normalized true are matched as HF does, in each run's normalized text (see Tokenizer::encode).
  bool match_normalized = false;
  bool decode_byte_pieces = false;  // Spm: every "<0xNN>" piece decodes to its byte (a ByteFallback decoder step)
  // Spm: a character with no piece becomes its bytes' pieces only when all of them exist, else one unknown token (HF's
  // BPE). Otherwise each byte becomes its piece or the unknown token (SentencePiece, llama.cpp). fuse_unk: one unknown
  // token for a run of such characters.
  bool unk_per_char = false, fuse_unk = false;
};

// llama2.c tokenizer.bin: max_token_length, then per token {f32 score, i32 length, bytes}. vocab_size comes from
// the model header (the file does not store it); 0 reads entries to the end of the file.
Vocab read_llama2c_vocab(const std::string& path, int64_t vocab_size);
// SentencePiece tokenizer.model (protobuf) of BPE type, read without libsentencepiece.
Vocab read_sentencepiece_model(const std::string& path);
// GPT-2's encoder.json (piece -> id) and vocab.bpe (ranked merges) in one folder.
Vocab read_gpt2_vocab(const std::string& encoder_json, const std::string& vocab_bpe);
// Hugging Face tokenizer.json with a BPE model (byte-level or SentencePiece-style with byte fallback).
Vocab read_tokenizer_json(const std::string& path);

// Throws ascent::Error naming `source` and `field` when a merge's sides or its result are not vocabulary pieces, as
// HF's BPE refuses such a file at load. Otherwise the encoder would skip a merge with an unknown side and give <unk>
// for a result it cannot find. The readers of tokenizer.json, vocab.bpe and GGUF merges call it.
void check_merges(const Vocab& v, const std::string& source, const char* field);

}  // namespace ascent::tokenizer
