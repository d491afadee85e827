#include "ascent/model/weights.h"

#include "ascent/base/error.h"

namespace ascent::model {

void WeightSet::add(const std::string& name, Tensor t, const std::string& file) {
  ASCENT_CHECK(!has(name), "{}: tensor {} appears twice", file, name);
  tensors_[name] = std::move(t);
  file_of_[name] = file;
}

const Tensor* WeightSet::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const std::string& WeightSet::file_of(const std::string& name) const {
  auto it = file_of_.find(name);
  return it == file_of_.end() ? source_ : it->second;
}

const Tensor& WeightSet::get(const std::string& name, const Shape& shape) const {
  const Tensor* t = find(name);
  if (t == nullptr) fail("{}: missing tensor {} (expected shape {})", source_, name, shape_str(shape));
  if (t->shape != shape) {
    fail("{}: tensor {} has shape {}, expected {}", file_of(name), name, shape_str(t->shape), shape_str(shape));
  }
  return *t;
}

void WeightSet::replace(const std::string& name, Tensor t) {
  tensors_[name] = std::move(t);
}

void WeightSet::remove(const std::string& name) {
  tensors_.erase(name);
  file_of_.erase(name);
}

const MappedFile* WeightSet::file_holding(const void* p) const {
  for (const auto& f : files_) {
    if (f->contains(p)) return f.get();
  }
  return nullptr;
}

int64_t WeightSet::file_bytes() const {
  int64_t n = 0;
  for (const auto& f : files_) n += static_cast<int64_t>(f->size());
  return n;
}

}  // namespace ascent::model
