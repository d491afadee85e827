#include "ascent/base/atomic_write.h"
#include "ascent/base/error.h"
#include "ascent/model/gguf.h"

namespace ascent::model {
namespace {

constexpr uint64_t kAlign = 32;

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_str(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

uint32_t ggml_type(DType t) {
  switch (t) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q8_0:
      return 8;
    case DType::BF16:
      return 30;
    case DType::I32:
    case DType::I8:
    case DType::I4:
    case DType::Q4_K:
    case DType::Q6_K:
      break;
  }
  fail("GGUF cannot store {} tensors", dtype_name(t));
}

}  // namespace

void GgufWriter::put_kv(const std::string& key, std::string encoded) {
  for (auto& [k, e] : kv_) {
    if (k == key) {
      e = std::move(encoded);
      return;
    }
  }
  kv_.emplace_back(key, std::move(encoded));
}

void GgufWriter::set_string(const std::string& key, const std::string& v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::String));
  put_str(e, v);
  put_kv(key, std::move(e));
}
void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::U32));
  put<uint32_t>(e, v);
  put_kv(key, std::move(e));
}
void GgufWriter::set_i32(const std::string& key, int32_t v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::I32));
  put<int32_t>(e, v);
  put_kv(key, std::move(e));
}
void GgufWriter::set_f32(const std::string& key, float v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::F32));
  put<float>(e, v);
  put_kv(key, std::move(e));
}
void GgufWriter::set_bool(const std::string& key, bool v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::Bool));
  put<uint8_t>(e, v ? 1 : 0);
  put_kv(key, std::move(e));
}
void GgufWriter::set_strings(const std::string& key, const std::vector<std::string>& v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::Array));
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::String));
  put<uint64_t>(e, v.size());
  for (const auto& s : v) put_str(e, s);
  put_kv(key, std::move(e));
}
void GgufWriter::set_f32s(const std::string& key, const std::vector<float>& v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::Array));
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::F32));
  put<uint64_t>(e, v.size());
  for (float f : v) put<float>(e, f);
  put_kv(key, std::move(e));
}
void GgufWriter::set_i32s(const std::string& key, const std::vector<int32_t>& v) {
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::Array));
  put<uint32_t>(e, static_cast<uint32_t>(GgufType::I32));
  put<uint64_t>(e, v.size());
  for (int32_t i : v) put<int32_t>(e, i);
  put_kv(key, std::move(e));
}

void GgufWriter::set_value(const std::string& key, const GgufValue& v) {
  // One element (or scalar) in type t; integers and bools come as v.ints / v.i, floats as v.floats / v.f.
  auto number = [](std::string& e, GgufType t, int64_t i, double f) {
    switch (t) {
      case GgufType::U8:
      case GgufType::Bool:
        return put<uint8_t>(e, static_cast<uint8_t>(i));
      case GgufType::I8:
        return put<int8_t>(e, static_cast<int8_t>(i));
      case GgufType::U16:
        return put<uint16_t>(e, static_cast<uint16_t>(i));
      case GgufType::I16:
        return put<int16_t>(e, static_cast<int16_t>(i));
      case GgufType::U32:
        return put<uint32_t>(e, static_cast<uint32_t>(i));
      case GgufType::I32:
        return put<int32_t>(e, static_cast<int32_t>(i));
      case GgufType::U64:
        return put<uint64_t>(e, static_cast<uint64_t>(i));
      case GgufType::I64:
        return put<int64_t>(e, i);
      case GgufType::F32:
        return put<float>(e, static_cast<float>(f));
      case GgufType::F64:
        return put<double>(e, f);
      case GgufType::String:
      case GgufType::Array:
        break;
    }
    fail("GGUF metadata: value type {} is not a number", static_cast<uint32_t>(t));
  };
  std::string e;
  put<uint32_t>(e, static_cast<uint32_t>(v.type));
  if (v.type == GgufType::String) {
    put_str(e, v.s);
  } else if (v.type != GgufType::Array) {
    number(e, v.type, v.i, v.f);
  } else {
    put<uint32_t>(e, static_cast<uint32_t>(v.elem_type));
    if (v.elem_type == GgufType::String) {
      put<uint64_t>(e, v.strings.size());
      for (const auto& s : v.strings) put_str(e, s);
    } else if (v.elem_type == GgufType::F32 || v.elem_type == GgufType::F64) {
      put<uint64_t>(e, v.floats.size());
      for (double f : v.floats) number(e, v.elem_type, 0, f);
    } else {
      put<uint64_t>(e, v.ints.size());
      for (int64_t i : v.ints) number(e, v.elem_type, i, 0.0);
    }
  }
  put_kv(key, std::move(e));
}

void GgufWriter::add_tensor(const std::string& name, const Tensor& t) {
  ggml_type(t.dtype);
  ASCENT_CHECK(!t.shape.empty() && t.shape.size() <= 4, "GGUF tensor {}: rank {} unsupported", name, t.shape.size());
  tensors_.emplace_back(name, t);
}

void GgufWriter::write(const std::string& path) const {
  std::string head = "GGUF";
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_.size());
  for (const auto& [k, e] : kv_) {
    put_str(head, k);
    head += e;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    put_str(head, name);
    put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) put<uint64_t>(head, static_cast<uint64_t>(t.shape[d]));
    put<uint32_t>(head, ggml_type(t.dtype));
    put<uint64_t>(head, offset);
    offset = (offset + static_cast<uint64_t>(t.nbytes()) + kAlign - 1) / kAlign * kAlign;
  }
  head.resize((head.size() + kAlign - 1) / kAlign * kAlign, '\0');

  AtomicFile f(path);
  f.write(head);
  static const char zeros[kAlign] = {};
  for (const auto& [name, t] : tensors_) {
    const size_t n = static_cast<size_t>(t.nbytes());
    f.write({static_cast<const char*>(t.data), n});
    f.write({zeros, (kAlign - n % kAlign) % kAlign});
  }
  f.commit();
}

}  // namespace ascent::model
