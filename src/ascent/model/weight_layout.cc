#include "ascent/model/weight_layout.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "ascent/base/aligned.h"
#include "ascent/base/error.h"
#include "ascent/base/mapped_file.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/packed_formats.h"
#include "ascent/kernels/cpu/packed_weight.h"
#include "ascent/tensor/quantize.h"

namespace ascent::model {
namespace {

using kernels::MatrixView;
using kernels::RowPart;
using kernels::WeightFormat;

// One matrix the load copies.
struct Placed {
  std::vector<std::string> names;  // the first name, then its aliases (the same data under other names)
  Tensor src;
  WeightFormat to = WeightFormat::F32;
  bool split = false;
  std::vector<int64_t> cuts;    // part p holds rows cuts[p] .. cuts[p + 1] (split: one part per thread)
  std::vector<size_t> offsets;  // of each part in the buffer
  size_t input_scale_offset = 0;
};

size_t scale_bytes(DType t, int64_t rows, int64_t cols, int group) {
  return is_int_weight(t) ? static_cast<size_t>(int_weight_scale_count(t, rows, cols, group)) * sizeof(float) : 0;
}

size_t code_bytes(WeightFormat f, int64_t rows, int64_t cols) {
  return static_cast<size_t>(MatrixView{f, rows, cols}.nbytes());
}

// What a part of `rows` rows takes in the buffer: its codes, then (I8, I4) its scales, each 64-byte aligned.
size_t part_bytes(const Placed& m, int64_t rows) {
  return align_up(code_bytes(m.to, rows, m.src.cols()), kAlignment) +
         align_up(scale_bytes(m.src.dtype, rows, m.src.cols(), m.src.group), kAlignment);
}

// The part of m at p in the buffer, `rows` rows.
MatrixView part_view(const Placed& m, int64_t rows, uint8_t* p, const float* input_scale) {
  MatrixView v{m.to, rows, m.src.cols(), p, nullptr, input_scale, m.src.group};
  if (is_int_weight(m.src.dtype))
    v.scales = reinterpret_cast<const float*>(p + align_up(code_bytes(m.to, rows, v.cols), kAlignment));
  return v;
}

// src's rows into dst, a view of as many rows: repacked where the format changes, else the same bytes.
void copy_rows(const MatrixView& src, const MatrixView& dst) {
  if (src.format != dst.format) return kernels::repack(src, dst);
  std::memcpy(const_cast<uint8_t*>(dst.data), src.data, static_cast<size_t>(src.nbytes()));
  const size_t sb = scale_bytes(kernels::values_type(src.format), src.rows, src.cols, src.group);
  if (sb > 0) std::memcpy(const_cast<float*>(dst.scales), src.scales, sb);
}

// The tensor with its backend copy attached. Its own bytes stay readable after the source's pages are given back: a
// --no-mmap copy's tensor is pointed at the file's mapping (MappedFile::reloadable).
Tensor with_packed(const WeightSet& w, Tensor t, std::shared_ptr<const kernels::PackedWeight> packed) {
  t.packed = std::move(packed);
  if (const MappedFile* f = w.file_holding(t.data)) {
    const uint8_t* data = f->reloadable(t.data);
    ASCENT_CHECK(data != nullptr, "{}: cannot map the file to read its weights back", f->path());
    auto moved = [&](const float* p) { return p != nullptr ? reinterpret_cast<const float*>(f->reloadable(p)) : p; };
    t.data = data;
    t.scales = moved(t.scales);
    t.input_scale = moved(t.input_scale);
  }
  return t;
}

}  // namespace

void place_weights(WeightSet& w, std::span<const std::vector<const Tensor*>> calls, const PlaceOptions& o) {
  // Which call (and how many) reads each matrix, and the names sharing each matrix's bytes.
  std::map<const Tensor*, std::string> name_of;
  std::map<const void*, std::vector<std::string>> names_of_data;
  for (const auto& [name, t] : w.all()) {
    name_of[&t] = name;
    if (t.data != nullptr) names_of_data[t.data].push_back(name);
  }
  std::map<std::string, int> uses;
  for (const auto& call : calls) {
    for (const Tensor* t : call) {
      ASCENT_CHECK(name_of.count(t) != 0, "place_weights: a matmul's weight is not among the model's tensors");
      ++uses[name_of[t]];
    }
  }
  const bool by_thread = o.by_thread && o.threads > 1;
  auto repacks = [&](const Tensor& t) {
    if (!o.repack || t.shape.size() != 2 || t.dtype == DType::I32) return false;
    const WeightFormat f = kernels::format_of(t.dtype), to = kernels::repacked_format(f);
    return to != f && kernels::repacked_kernel_runs(to);
  };
  // A 16-bit float matrix (f16, bf16) whose rows are whole cache lines but start off them is copied as it is, onto
  // lines: GGUF aligns tensors to 32 bytes only, and decode then streams such a matrix markedly slower than the same
  // bytes aligned (bench/RESULTS.md, decode table). Rows of another length would stay off lines in the copy too.
  auto realigns = [&](const Tensor& t) {
    if (!o.repack || (t.dtype != DType::F16 && t.dtype != DType::BF16) || t.shape.size() != 2 || t.data == nullptr)
      return false;
    const int64_t row = kernels::row_bytes(kernels::format_of(t.dtype), t.shape[1]);
    return reinterpret_cast<uintptr_t>(t.data) % kAlignment != 0 && row % static_cast<int64_t>(kAlignment) == 0;
  };
  // Float matrices (f32, f16, bf16) stay whole: placed, bf16 decode read less of the bandwidth, where the integer and
  // GGUF formats gained or measured the same.
  auto splits = [&](const std::string& name, const Tensor& t) {
    const bool float_weight = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16;
    return by_thread && !float_weight && t.shape.size() == 2 && t.data != nullptr && uses[name] == 1 &&
           names_of_data[t.data].size() == 1;
  };

  // The matrices to place: in call order first (the order decode reads them), then the rest.
  std::vector<Placed> placed;
  std::map<std::string, size_t> index;
  auto add = [&](const std::string& name, std::vector<int64_t> cuts, bool split) {
    const Tensor& t = *w.find(name);
    Placed m;
    m.names = t.data != nullptr ? names_of_data[t.data] : std::vector<std::string>{name};
    m.src = t;
    m.to = kernels::format_of(t.dtype);
    if (repacks(t)) m.to = kernels::repacked_format(m.to);
    m.split = split;
    m.cuts = std::move(cuts);
    for (const std::string& n : m.names) index[n] = placed.size();
    placed.push_back(std::move(m));
  };
  for (const auto& call : calls) {
    const auto shares = kernels::decode_row_shares(call, by_thread ? o.threads : 1);
    for (size_t i = 0; i < call.size(); ++i) {
      const std::string& name = name_of[call[i]];
      if (index.count(name) != 0) continue;
      const Tensor& t = *call[i];
      if (splits(name, t) && (repacks(t) || o.copied)) {
        add(name, shares[i], /*split=*/true);
      } else if (repacks(t) || realigns(t)) {
        add(name, {0, t.rows()}, /*split=*/false);
      }
    }
  }
  for (const auto& [name, t] : w.all()) {
    if (index.count(name) == 0 && repacks(t)) add(name, {0, t.rows()}, /*split=*/false);
  }
  if (placed.empty()) return;

  // Offsets: thread t's parts of every split matrix one after another (region t), then the whole matrices and the
  // input scales. Regions start on 4 KiB pages.
  const int regions = by_thread ? o.threads : 0;
  for (Placed& m : placed) m.offsets.assign(m.cuts.size() - 1, 0);
  size_t total = 0;
  std::vector<size_t> region_begin, region_end;  // each region's bytes, without its page padding
  for (int r = 0; r < regions; ++r) {
    region_begin.push_back(total);
    for (Placed& m : placed) {
      if (!m.split) continue;
      m.offsets[static_cast<size_t>(r)] = total;
      total += part_bytes(m, m.cuts[static_cast<size_t>(r) + 1] - m.cuts[static_cast<size_t>(r)]);
    }
    region_end.push_back(total);
    total = align_up(total, 4096);
  }
  for (Placed& m : placed) {
    if (!m.split) {
      m.offsets[0] = total;
      total += part_bytes(m, m.src.rows());
    }
    if (m.src.input_scale != nullptr) {
      m.input_scale_offset = total;
      total += align_up(static_cast<size_t>(m.src.cols()) * sizeof(float), kAlignment);
    }
  }
  // The decode workers warm these bytes (RowPart::next): none may still be reading them once they are freed.
  std::shared_ptr<uint8_t> buf(huge_alloc_bytes(total, /*zero=*/false).release(), [](uint8_t* p) {
    ThreadPool::forget_warm_global();
    AlignedDeleter{}(p);
  });
  const std::shared_ptr<const void> owner = buf;

  // Copy matrix by matrix, each one's rows in chunks over the pool, then give back its source's pages, so that the
  // load holds little more than one copy of the weights at any time.
  constexpr int64_t kChunkRows = 256;  // whole I4 blocks
  for (Placed& m : placed) {
    const float* input_scale = nullptr;
    if (m.src.input_scale != nullptr) {
      auto* dst = reinterpret_cast<float*>(buf.get() + m.input_scale_offset);
      std::memcpy(dst, m.src.input_scale, static_cast<size_t>(m.src.cols()) * sizeof(float));
      input_scale = dst;
    }
    std::vector<RowPart> parts;
    struct Chunk {
      size_t part;
      int64_t r0, r1;
    };
    std::vector<Chunk> chunks;
    for (size_t p = 0; p + 1 < m.cuts.size(); ++p) {
      const int64_t a = m.cuts[p], b = m.cuts[p + 1];
      if (a >= b) continue;
      parts.push_back({a, part_view(m, b - a, buf.get() + m.offsets[p], input_scale), {}});
      if (m.split) {  // part p is region p's: its thread streams on from the end of this part, or wraps
        const size_t after = m.offsets[p] + part_bytes(m, b - a), run0 = region_begin[p], run1 = region_end[p];
        const size_t from = after < run1 ? after : run0;
        parts.back().next = {buf.get() + from, run1 - from};
      }
      for (int64_t r = a; r < b; r += kChunkRows) chunks.push_back({parts.size() - 1, r, std::min(b, r + kChunkRows)});
    }
    ThreadPool::global().parallel_for(static_cast<int64_t>(chunks.size()), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const Chunk& k = chunks[static_cast<size_t>(c)];
        const RowPart& p = parts[k.part];
        copy_rows(kernels::row_slice(kernels::view_of(m.src), k.r0, k.r1),
                  kernels::row_slice(p.rows, k.r0 - p.row0, k.r1 - p.row0));
      }
    });
    auto packed = std::make_shared<kernels::PackedWeight>();
    packed->format = m.to;
    packed->rows = m.src.rows();
    packed->cols = m.src.cols();
    packed->input_scale = input_scale;
    packed->group = m.src.group;
    packed->parts = std::move(parts);
    packed->by_thread = m.split;
    packed->owner = owner;
    for (const std::string& n : m.names) w.replace(n, with_packed(w, *w.find(n), packed));
    const MappedFile* file = w.file_holding(m.src.data);
    if (file != nullptr && file->releasable()) {  // the kernels read the copy: the file's pages can go
      release_pages(m.src.data, static_cast<size_t>(m.src.nbytes()));
      const size_t sb = scale_bytes(m.src.dtype, m.src.rows(), m.src.cols(), m.src.group);
      if (sb > 0) release_pages(m.src.scales, sb);
    }
  }
}

}  // namespace ascent::model
