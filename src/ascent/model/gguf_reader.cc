#include <cstring>
#include <fstream>
#include <limits>

#include "ascent/base/error.h"
#include "ascent/model/gguf.h"

namespace ascent::model {
namespace {

constexpr uint64_t kMaxCount = uint64_t{1} << 32;  // more entries than this is a corrupt header, not a model

class Cursor {
 public:
  Cursor(const std::string& path, std::span<const uint8_t> b) : path_(path), b_(b) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return b_.size() - pos_; }
  const uint8_t* need(uint64_t n, const char* what) {
    if (n > b_.size() || pos_ > b_.size() - n) {
      fail("{}: truncated: file ends at byte {} while reading {} at offset {}", path_, b_.size(), what, pos_);
    }
    const uint8_t* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <class T>
  T read(const char* what) {
    T v;
    std::memcpy(&v, need(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string str(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    const uint8_t* p = need(n, what);
    return std::string(reinterpret_cast<const char*>(p), n);
  }

 private:
  const std::string& path_;
  std::span<const uint8_t> b_;
  uint64_t pos_ = 0;
};

bool is_int_type(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::U16:
    case GgufType::I16:
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::Bool:
      return true;
    default:
      return false;
  }
}

// The bytes of one integer, bool or float scalar in the file.
uint64_t int_or_float_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    default:
      return 8;
  }
}

int64_t read_int(Cursor& c, GgufType t) {
  switch (t) {
    case GgufType::U8:
      return c.read<uint8_t>("u8");
    case GgufType::I8:
      return c.read<int8_t>("i8");
    case GgufType::U16:
      return c.read<uint16_t>("u16");
    case GgufType::I16:
      return c.read<int16_t>("i16");
    case GgufType::U32:
      return c.read<uint32_t>("u32");
    case GgufType::I32:
      return c.read<int32_t>("i32");
    case GgufType::U64:
      return static_cast<int64_t>(c.read<uint64_t>("u64"));
    case GgufType::I64:
      return c.read<int64_t>("i64");
    case GgufType::Bool:
      return c.read<uint8_t>("bool") != 0;
    default:
      return 0;
  }
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& path, const std::string& key) {
  GgufValue v;
  v.type = t;
  if (is_int_type(t)) {
    v.i = read_int(c, t);
  } else if (t == GgufType::F32) {
    v.f = c.read<float>("f32");
  } else if (t == GgufType::F64) {
    v.f = c.read<double>("f64");
  } else if (t == GgufType::String) {
    v.s = c.str("string");
  } else if (t == GgufType::Array) {
    v.elem_type = static_cast<GgufType>(c.read<uint32_t>("array type"));
    const uint64_t n = c.read<uint64_t>("array length");
    ASCENT_CHECK(n < kMaxCount, "{}: metadata {}: array length {} is not plausible", path, key, n);
    const GgufType et = v.elem_type;
    const bool number = is_int_type(et) || et == GgufType::F32 || et == GgufType::F64;
    if (!number && et != GgufType::String) {
      fail("{}: metadata {}: unsupported array element type {}", path, key, static_cast<uint32_t>(et));
    }
    // Each element takes at least this many bytes of the file (a string its 8-byte length): a length past what is
    // left is refused before it sizes the vector (2^31 int32s reserved 16 GB and ended in std::bad_alloc).
    const uint64_t least = number ? int_or_float_bytes(et) : 8;
    ASCENT_CHECK(n <= c.left() / least, "{}: metadata {}: {} elements need {} bytes or more, the file has {} left",
                 path, key, n, n * least, c.left());
    if (is_int_type(et)) {
      v.ints.reserve(n);
      for (uint64_t i = 0; i < n; ++i) v.ints.push_back(read_int(c, et));
    } else if (et == GgufType::F32 || et == GgufType::F64) {
      v.floats.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        v.floats.push_back(et == GgufType::F32 ? c.read<float>("f32") : c.read<double>("f64"));
      }
    } else {
      v.strings.reserve(n);
      for (uint64_t i = 0; i < n; ++i) v.strings.push_back(c.str("string"));
    }
  } else {
    fail("{}: metadata {}: unknown value type {}", path, key, static_cast<uint32_t>(t));
  }
  return v;
}

DType ggml_dtype(uint32_t t, const std::string& path, const std::string& name) {
  switch (t) {
    case 0:
      return DType::F32;
    case 1:
      return DType::F16;
    case 2:
      return DType::Q4_0;
    case 8:
      return DType::Q8_0;
    case 12:
      return DType::Q4_K;
    case 14:
      return DType::Q6_K;
    case 30:
      return DType::BF16;
    default:
      fail("{}: tensor {}: unsupported ggml type {} (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)", path, name,
           t);
  }
}

}  // namespace

bool has_gguf_magic(const std::string& path) {
  char magic[4] = {};
  std::ifstream(path, std::ios::binary).read(magic, 4);
  return std::memcmp(magic, "GGUF", 4) == 0;
}

GgufFile::GgufFile(const std::string& path) : file_(std::make_shared<MappedFile>(path)) {
  Cursor c(path, file_->bytes());
  const uint8_t* magic = c.need(4, "magic");
  ASCENT_CHECK(std::memcmp(magic, "GGUF", 4) == 0, "{}: bad magic: not a GGUF file", path);
  version_ = c.read<uint32_t>("version");
  ASCENT_CHECK(version_ == 2 || version_ == 3, "{}: unsupported GGUF version {} (expected 2 or 3)", path, version_);
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  ASCENT_CHECK(n_tensors < kMaxCount && n_kv < kMaxCount, "{}: bad header: {} tensors, {} metadata entries", path,
               n_tensors, n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.str("metadata key");
    const auto t = static_cast<GgufType>(c.read<uint32_t>("metadata type"));
    kv_[key] = read_value(c, t, path, key);
  }
  const int64_t alignment = get_int("general.alignment", 32);
  ASCENT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "{}: general.alignment {} is not a power of 2",
               path, alignment);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo info;
    info.name = c.str("tensor name");
    const uint32_t n_dims = c.read<uint32_t>("tensor rank");
    ASCENT_CHECK(n_dims >= 1 && n_dims <= 4, "{}: tensor {}: rank {} out of range", path, info.name, n_dims);
    info.shape.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>("tensor dimension");
      ASCENT_CHECK(ne > 0 && ne < kMaxCount, "{}: tensor {}: dimension {} out of range", path, info.name, ne);
      info.shape[n_dims - 1 - d] = static_cast<int64_t>(ne);
    }
    info.dtype = ggml_dtype(c.read<uint32_t>("tensor type"), path, info.name);
    info.offset = c.read<uint64_t>("tensor offset");
    ASCENT_CHECK(info.offset % static_cast<uint64_t>(alignment) == 0, "{}: tensor {}: offset {} is not aligned to {}",
                 path, info.name, info.offset, alignment);
    ASCENT_CHECK(info.shape.back() % block_elems(info.dtype) == 0,
                 "{}: tensor {}: row of {} is not a whole number of {} blocks", path, info.name, info.shape.back(),
                 dtype_name(info.dtype));
    tensors_.push_back(std::move(info));
  }
  const uint64_t a = static_cast<uint64_t>(alignment);
  data_offset_ = (c.pos() + a - 1) / a * a;
  const uint64_t size = file_->size();
  for (const auto& t : tensors_) {
    // Four dimensions under 2^32 each can still multiply past int64: refused naming the file and tensor.
    const auto nbytes = static_cast<uint64_t>(with_context(fmt::format("{}: tensor {}", path, t.name),
                                                           [&] { return storage_bytes(t.dtype, numel(t.shape)); }));
    ASCENT_CHECK(data_offset_ <= size && t.offset <= size - data_offset_ && nbytes <= size - data_offset_ - t.offset,
                 "{}: tensor {}: data [{}, {}) lies outside the file ({} bytes)", path, t.name, data_offset_ + t.offset,
                 data_offset_ + t.offset + nbytes, size);
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  ASCENT_CHECK(v != nullptr, "{}: metadata {} is missing", path(), key);
  ASCENT_CHECK(v->type == GgufType::String, "{}: metadata {} is not a string", path(), key);
  return v->s;
}

std::string GgufFile::get_string(const std::string& key, const std::string& dflt) const {
  return find(key) ? get_string(key) : dflt;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  ASCENT_CHECK(v != nullptr, "{}: metadata {} is missing", path(), key);
  ASCENT_CHECK(is_int_type(v->type), "{}: metadata {} is not an integer", path(), key);
  return v->i;
}

int64_t GgufFile::get_int(const std::string& key, int64_t dflt) const {
  return find(key) ? get_int(key) : dflt;
}

double GgufFile::get_float(const std::string& key, double dflt) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return dflt;
  ASCENT_CHECK(v->type == GgufType::F32 || v->type == GgufType::F64, "{}: metadata {} is not a float", path(), key);
  return v->f;
}

Tensor GgufFile::tensor(const GgufTensorInfo& info) const {
  Tensor t;
  t.dtype = info.dtype;
  t.shape = info.shape;
  t.data = file_->bytes().data() + data_offset_ + info.offset;
  return t;
}

}  // namespace ascent::model
