// WeightSet: a model's tensors by canonical name (GGUF's naming: "blk.3.attn_q.weight"), each a view into a
// mapped file or an owned buffer, plus the files that back them. Readers for each format fill it; the graph
// builder takes tensors from it by name and shape, and a missing or mis-shaped tensor is an error that names the
// file and the tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ascent/base/mapped_file.h"
#include "ascent/tensor/tensor.h"

namespace ascent::model {

class WeightSet {
 public:
  explicit WeightSet(std::string source = {}) : source_(std::move(source)) {}

  void add(const std::string& name, Tensor t, const std::string& file);
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const Tensor* find(const std::string& name) const;
  // The tensor, checked against `shape`; throws "FILE: tensor NAME ..." when absent or mis-shaped.
  const Tensor& get(const std::string& name, const Shape& shape) const;
  // Replaces a tensor (same source file), e.g. with an f32 copy or a split view, in place: pointers to it (a built
  // graph's) then see the new one.
  void replace(const std::string& name, Tensor t);
  void remove(const std::string& name);
  void keep_file(std::shared_ptr<MappedFile> f) { files_.push_back(std::move(f)); }

  const std::string& source() const { return source_; }
  const std::string& file_of(const std::string& name) const;
  const std::map<std::string, Tensor>& all() const { return tensors_; }
  // The file whose bytes hold p, or null (an owned buffer).
  const MappedFile* file_holding(const void* p) const;
  int64_t file_bytes() const;

 private:
  std::string source_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> file_of_;
  std::vector<std::shared_ptr<MappedFile>> files_;
};

}  // namespace ascent::model
