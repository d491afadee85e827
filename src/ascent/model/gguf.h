// GGUF v2/v3 files: the reader parses the header, metadata and tensor table with every length and offset checked
// against the file, and exposes F32/F16/BF16/Q8_0/Q4_0 tensors as views into the mapping (used in place). The
// writer produces files llama.cpp loads: metadata, tensor infos, data aligned to general.alignment.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ascent/base/mapped_file.h"
#include "ascent/tensor/tensor.h"

namespace ascent::model {

enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

// True when the file at `path` starts with GGUF's magic (false if it cannot be read).
bool has_gguf_magic(const std::string& path);

struct GgufValue {
  GgufType type = GgufType::U32;
  GgufType elem_type = GgufType::U32;  // for arrays
  int64_t i = 0;                       // integer and bool scalars
  double f = 0.0;                      // float scalars
  std::string s;                       // string scalar
  std::vector<int64_t> ints;           // integer/bool arrays
  std::vector<double> floats;          // float arrays
  std::vector<std::string> strings;    // string arrays
};

struct GgufTensorInfo {
  std::string name;
  Shape shape;  // outermost first (GGUF stores ne[0] innermost; reversed here)
  DType dtype;
  uint64_t offset;
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  // Typed getters: throw "PATH: metadata KEY: missing / wrong type" when absent and no default is given.
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& dflt) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t dflt) const;
  double get_float(const std::string& key, double dflt) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  Tensor tensor(const GgufTensorInfo& info) const;  // view into the mapping
  std::shared_ptr<MappedFile> file() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  uint64_t data_offset_ = 0;
};

class GgufWriter {
 public:
  void set_string(const std::string& key, const std::string& v);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_strings(const std::string& key, const std::vector<std::string>& v);
  void set_f32s(const std::string& key, const std::vector<float>& v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);
  // A value as a GgufFile read it, in its own type (a copied key is stored as it was).
  void set_value(const std::string& key, const GgufValue& v);
  // The tensor is written as stored (dtype and bytes); shape is outermost first.
  void add_tensor(const std::string& name, const Tensor& t);
  // Writes PATH.tmp then renames it to PATH, so a failed write never leaves a half-written model behind.
  void write(const std::string& path) const;

 private:
  // Setting a key again replaces its value in place: GGUF readers refuse a file that names a key twice.
  void put_kv(const std::string& key, std::string encoded);

  std::vector<std::pair<std::string, std::string>> kv_;  // key -> encoded type + value
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

}  // namespace ascent::model
