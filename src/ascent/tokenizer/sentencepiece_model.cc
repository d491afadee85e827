// Reads SentencePiece's tokenizer.model (a protobuf ModelProto) without libsentencepiece: the pieces with their
// scores and types, and the trainer/normalizer fields that change encoding. Only the wire format is decoded; fields
// we do not use are skipped by their wire type.
#include <cstring>

#include "ascent/base/error.h"
#include "ascent/base/mapped_file.h"
#include "ascent/tokenizer/vocab.h"

namespace ascent::tokenizer {
namespace {

class Proto {
 public:
  Proto(const std::string& path, const uint8_t* p, size_t n) : path_(path), p_(p), end_(p + n) {}
  bool done() const { return p_ >= end_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      ASCENT_CHECK(p_ < end_, "{}: truncated protobuf varint", path_);
      const uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    fail("{}: malformed protobuf varint", path_);
  }
  Proto sub() {
    const uint64_t n = varint();
    ASCENT_CHECK(n <= static_cast<uint64_t>(end_ - p_), "{}: truncated: protobuf field of {} bytes runs past the end",
                 path_, n);
    Proto s(path_, p_, n);
    p_ += n;
    return s;
  }
  std::string bytes() {
    Proto s = sub();
    return std::string(reinterpret_cast<const char*>(s.p_), static_cast<size_t>(s.end_ - s.p_));
  }
  float fixed32() {
    ASCENT_CHECK(end_ - p_ >= 4, "{}: truncated protobuf fixed32", path_);
    float f;
    std::memcpy(&f, p_, 4);
    p_ += 4;
    return f;
  }
  void skip(int wire) {
    switch (wire) {
      case 0:
        varint();
        return;
      case 1:
        ASCENT_CHECK(end_ - p_ >= 8, "{}: truncated protobuf", path_);
        p_ += 8;
        return;
      case 2:
        sub();
        return;
      case 5:
        fixed32();
        return;
      default:
        fail("{}: unsupported protobuf wire type {} (not a tokenizer.model?)", path_, wire);
    }
  }

 private:
  const std::string& path_;
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace

Vocab read_sentencepiece_model(const std::string& path) {
  MappedFile f(path);
  Proto model(path, f.bytes().data(), f.size());
  Vocab v;
  v.kind = VocabKind::Spm;
  v.add_bos = true;
  int model_type = 1;
  bool byte_fallback = false;
  int32_t unk = 0, bos = 1, eos = 2;
  bool remove_extra_spaces = true;  // proto2 default of remove_extra_whitespaces: a file that omits it asks for it
  while (!model.done()) {
    const uint64_t key = model.varint();
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 2) {  // SentencePiece
      Proto p = model.sub();
      std::string piece;
      float score = 0;
      int type = 1;
      while (!p.done()) {
        const uint64_t k = p.varint();
        const int pf = static_cast<int>(k >> 3), pw = static_cast<int>(k & 7);
        if (pf == 1 && pw == 2) {
          piece = p.bytes();
        } else if (pf == 2 && pw == 5) {
          score = p.fixed32();
        } else if (pf == 3 && pw == 0) {
          type = static_cast<int>(p.varint());
        } else {
          p.skip(pw);
        }
      }
      ASCENT_CHECK(type >= 1 && type <= 6, "{}: piece {} has unknown type {}", path, v.pieces.size(), type);
      v.pieces.push_back(std::move(piece));
      v.scores.push_back(score);
      v.types.push_back(static_cast<TokenType>(type));
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      Proto t = model.sub();
      while (!t.done()) {
        const uint64_t k = t.varint();
        const int tf = static_cast<int>(k >> 3), tw = static_cast<int>(k & 7);
        if (tw != 0) {
          t.skip(tw);
          continue;
        }
        const auto val = static_cast<int64_t>(t.varint());
        if (tf == 3) model_type = static_cast<int>(val);
        if (tf == 35) byte_fallback = val != 0;
        if (tf == 40) unk = static_cast<int32_t>(val);
        if (tf == 41) bos = static_cast<int32_t>(val);
        if (tf == 42) eos = static_cast<int32_t>(val);
      }
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      Proto n = model.sub();
      while (!n.done()) {
        const uint64_t k = n.varint();
        const int nf = static_cast<int>(k >> 3), nw = static_cast<int>(k & 7);
        if (nf == 3 && nw == 0) {
          v.add_space_prefix = n.varint() != 0;
        } else if (nf == 4 && nw == 0) {
          remove_extra_spaces = n.varint() != 0;
        } else {
          n.skip(nw);
        }
      }
    } else {
      model.skip(wire);
    }
  }
  ASCENT_CHECK(!v.pieces.empty(), "{}: no pieces (not a SentencePiece tokenizer.model?)", path);
  ASCENT_CHECK(model_type == 2, "{}: SentencePiece model type {} is not supported (BPE)", path, model_type);
  (void)byte_fallback;  // byte pieces are typed BYTE; fallback uses them when present
  auto valid = [&](int32_t id) { return id >= 0 && id < static_cast<int32_t>(v.pieces.size()) ? id : -1; };
  v.remove_extra_spaces = remove_extra_spaces;
  v.unk_id = valid(unk);
  v.bos_id = valid(bos);
  v.eos_id = valid(eos);
  return v;
}

}  // namespace ascent::tokenizer
