// matmul_forward and its fused forms over the matmul engine (gemm.h). Activations are prepared once per input. Output
// columns are then split over the thread pool in groups of four rows (I4: its blocks of 16), so decode (T = 1)
// streams the weights from every core. A matrix placed by thread (CpuMatrix, model/weight_layout.h) is read part by
// part. Also the embedding lookup and its backward, and the fixed-order f32 dot product.
#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/gemm.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/packed_weight.h"
#include "ascent/kernels/cpu/row_ops.h"
#include "ascent/prof/tracer.h"

namespace ascent::kernels {

float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

namespace {

// Rows per unit of thread work: the tile height, or I4's block of 16 rows (dtype.h), which a split would make two
// threads compute both.
int64_t row_group(DType t) {
  return t == DType::I4 ? kInt4Rows : 4;
}

// Chunk size, in row groups, of a loop over `groups` groups on `threads` threads: about 1/16 of a thread's share, at
// least 64 rows (16 groups of 4; I4's blocks of 16 take 4).
int64_t row_grain(int64_t groups, int64_t group, int threads) {
  return std::max<int64_t>(64 / group, groups / (16 * threads));
}

// True when parallel_rows runs its `groups` groups on the calling thread alone: one thread, or a loop of one grain or
// less, which parallel_for_stealing does not split.
bool rows_on_caller_alone(int64_t groups, int64_t group, int threads) {
  return threads == 1 || groups <= row_grain(groups, group, threads);
}

// Runs fn(n0, n1) over [0, N) in whole groups of `group` rows. Each thread walks its own contiguous share in chunks
// of about 1/16 of it (at least 64 rows). A thread done early steals the back half of the largest share left, so a
// thread slowed down by a busy neighbour does less of the work. Contiguous shares keep each thread's weights one
// stream for the hardware prefetchers; chunks handed out round-robin would each start a new one. A row's result
// does not depend on which thread computes it. decode_row_shares says which rows each thread owns here.
// Under a tracer (prof::current_tracer: `ascent profile`, `--profile`), it also files the call with each thread's
// first-to-last chunk time, rows and weight bytes (bytes_of(n0, n1): what rows [n0, n1) read). A profile then
// shows how the threads shared the rows and how long each waited.
template <class Fn, class Bytes>
void parallel_rows(int64_t N, int64_t group, Fn&& fn, Bytes&& bytes_of) {
  ThreadPool& pool = ThreadPool::global();
  const int64_t groups = (N + group - 1) / group;
  const int64_t grain = row_grain(groups, group, pool.size());
  prof::Tracer* tracer = prof::current_tracer();
  if (tracer == nullptr) {
    pool.parallel_for_stealing(groups, grain, [&](int64_t g0, int64_t g1) { fn(g0 * group, std::min(N, g1 * group)); });
    return;
  }
  struct alignas(64) Slot {  // one thread's record, a cache line each
    double t0 = -1, t1 = 0;
    int64_t rows = 0, bytes = 0;
  };
  std::vector<Slot> slots(static_cast<size_t>(pool.size()));
  prof::PoolCall call{tracer->node(), tracer->now_us(), 0, N, {}};
  pool.parallel_for_stealing(groups, grain, [&](int64_t g0, int64_t g1) {
    Slot& s = slots[static_cast<size_t>(ThreadPool::current_index())];
    const int64_t n0 = g0 * group, n1 = std::min(N, g1 * group);
    if (s.t0 < 0) s.t0 = tracer->now_us();
    fn(n0, n1);
    s.t1 = tracer->now_us();
    s.rows += n1 - n0;
    s.bytes += bytes_of(n0, n1);
  });
  call.dur_us = tracer->now_us() - call.ts_us;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slot& s = slots[i];
    if (s.rows > 0) call.threads.push_back({static_cast<int>(i), s.t0, s.t1 - s.t0, s.rows, s.bytes});
  }
  tracer->add_call(std::move(call));
}

// Weight bytes a row of w reads, as the profile counts them (no int8/int4 scales).
int64_t weight_row_bytes(const CpuMatrix& w) {
  return w.any_view().row_bytes();
}

// Several weights' rows as one range of output columns (matmul_multi_forward): each weight starts at a whole row
// group, first[i] its first column, first.back() the end.
struct RowSpace {
  int64_t group = 1;
  std::vector<int64_t> first;
};

RowSpace row_space(std::span<const Tensor* const> ws) {
  RowSpace r;
  for (const Tensor* w : ws) r.group = std::max(r.group, row_group(w->dtype));
  r.first.assign(ws.size() + 1, 0);
  for (size_t i = 0; i < ws.size(); ++i) {
    r.first[i + 1] = r.first[i] + (ws[i]->shape[0] + r.group - 1) / r.group * r.group;
  }
  return r;
}

// How much of each thread's next weights a decode call names for warming (ThreadPool::warm_after_next_call): most of
// a 1 MiB L2 (Zen 4 and 5), leaving room for the activations, KV rows and code the steps between matmuls touch.
// Half or all of L2 decodes about as fast (measured with bench/ab_decode.py).
constexpr size_t kWarmBytes = size_t{768} << 10;

// Decode (T = 1) over weights placed by thread (CpuMatrix::by_thread, model/weight_layout.h). Tells the pool, for
// each worker, the bytes its run continues with after this call: RowPart::next of the part holding the last row of
// its share. The worker pulls them into its cache during the steps the caller runs alone before the next matmul
// (norms, RoPE, the KV append, input quantization), when its core's stream would otherwise stand idle.
void warm_next_weights(std::span<const CpuMatrix> ws, const RowSpace& space) {
  ThreadPool& pool = ThreadPool::global();
  const int threads = pool.size();
  const int64_t groups = space.first.back() / space.group;
  if (rows_on_caller_alone(groups, space.group, threads)) return;
  for (int t = 1; t < threads; ++t) {
    const auto [g0, g1] = ThreadPool::share(groups, threads, t);
    if (g0 == g1) continue;
    const int64_t last = g1 * space.group - 1;  // the share's last row
    size_t i = 0;
    while (i + 1 < ws.size() && space.first[i + 1] <= last) ++i;
    const RowPart& part = ws[i].part_of(std::min(last - space.first[i], ws[i].rows() - 1));
    if (part.next.empty()) continue;
    pool.warm_after_next_call(t, part.next.first(std::min(part.next.size(), kWarmBytes)));
  }
}

// gemm_rows over rows [n0, n1) of w, from each of its parts in turn. Parts begin at whole row groups, so every row
// still runs the same instructions (the tiles never depend on a row's neighbours' bits).
void gemm_any(const GemmInput& in, const CpuMatrix& w, int64_t n0, int64_t n1, const GemmOut& out) {
  for (const RowPart& p : w.parts()) {
    const int64_t lo = std::max(n0, p.row0), hi = std::min(n1, p.row0 + p.rows.rows);
    if (lo >= hi) continue;
    const GemmOut o{out.y, out.ldy, out.bias != nullptr ? out.bias + p.row0 : nullptr, out.residual,
                    out.n_base - p.row0};
    gemm_rows(in, p.rows, lo - p.row0, hi - p.row0, o);
  }
}

// Activation buffers kept per calling thread across matmuls (slot 0 for matmul_forward, 0-1 for swiglu, 0..n for
// matmul_multi): a fresh prefill-sized buffer per matmul cost ~10% of prefill in page faults and clearing.
GemmInput& scratch_input(size_t slot) {
  thread_local std::vector<std::unique_ptr<GemmInput>> inputs;
  while (inputs.size() <= slot) inputs.push_back(std::make_unique<GemmInput>());
  return *inputs[slot];
}

void check_weight(const Tensor& w, int64_t K, const char* what) {
  ASCENT_CHECK(w.shape.size() == 2 && w.shape[1] == K, "{}: weight has shape {}, expected (N, {})", what,
               shape_str(w.shape), K);
}

}  // namespace

void matmul_forward(const float* x, int64_t T, const Tensor& w, const float* bias, float* y, const float* residual) {
  const CpuMatrix m(w);  // checks that w is 2-D
  GemmInput& in = scratch_input(0);
  prepare_gemm_input(x, T, m.any_view(), in);
  const int64_t N = m.rows();
  const GemmOut out{y, N, bias, residual, 0};
  if (T == 1 && m.by_thread()) {
    const Tensor* ws[1] = {&w};
    warm_next_weights(std::span<const CpuMatrix>(&m, 1), row_space(ws));
  }
  const int64_t row_bytes_w = weight_row_bytes(m);
  parallel_rows(
      N, row_group(w.dtype), [&](int64_t n0, int64_t n1) { gemm_any(in, m, n0, n1, out); },
      [&](int64_t n0, int64_t n1) { return (n1 - n0) * row_bytes_w; });
}

void matmul_multi_forward(const float* x, int64_t T, std::span<const Tensor* const> ws,
                          std::span<const float* const> biases, std::span<float* const> outs) {
  ASCENT_CHECK(ws.size() == biases.size() && ws.size() == outs.size(),
               "matmul_multi: {} weights, {} biases, {} outputs", ws.size(), biases.size(), outs.size());
  const int64_t K = ws[0]->shape.size() == 2 ? ws[0]->shape[1] : -1;
  std::vector<CpuMatrix> ms;
  ms.reserve(ws.size());
  std::vector<GemmInput*> inputs;
  std::vector<size_t> input_of(ws.size());
  for (size_t i = 0; i < ws.size(); ++i) {
    check_weight(*ws[i], K, "matmul_multi");
    ms.emplace_back(*ws[i]);
    size_t j = 0;
    while (j < inputs.size() && !gemm_input_fits(*inputs[j], ms[i].any_view())) ++j;
    if (j == inputs.size()) {
      inputs.push_back(&scratch_input(j));
      prepare_gemm_input(x, T, ms[i].any_view(), *inputs.back());
    }
    input_of[i] = j;
  }
  const RowSpace space = row_space(ws);
  const std::vector<int64_t>& first = space.first;
  if (T == 1) warm_next_weights(ms, space);
  // Weight i's rows [lo, hi) within the merged range [g0, g1) (none when lo >= hi).
  auto rows_of = [&](size_t i, int64_t g0, int64_t g1) {
    return std::pair{std::max(g0, first[i]) - first[i],
                     std::min({g1, first[i + 1], first[i] + ws[i]->shape[0]}) - first[i]};
  };
  auto rows = [&](int64_t g0, int64_t g1) {
    for (size_t i = 0; i < ws.size(); ++i) {
      const auto [lo, hi] = rows_of(i, g0, g1);
      if (lo >= hi) continue;
      const GemmOut out{outs[i], ws[i]->shape[0], biases[i], nullptr, 0};
      gemm_any(*inputs[input_of[i]], ms[i], lo, hi, out);
    }
  };
  auto bytes_of = [&](int64_t g0, int64_t g1) {
    int64_t bytes = 0;
    for (size_t i = 0; i < ws.size(); ++i) {
      const auto [lo, hi] = rows_of(i, g0, g1);
      if (lo < hi) bytes += (hi - lo) * weight_row_bytes(ms[i]);
    }
    return bytes;
  };
  parallel_rows(first.back(), space.group, rows, bytes_of);
}

void matmul_swiglu_forward(const float* x, int64_t T, const Tensor& wg, const Tensor& wu, float* y) {
  ASCENT_CHECK(wg.shape == wu.shape && wg.shape.size() == 2, "matmul_swiglu: gate {} and up {} differ",
               shape_str(wg.shape), shape_str(wu.shape));
  const int64_t N = wg.shape[0];
  if (T == 1) {
    // Decode: gate's rows, then up's, as one range split over the threads (matmul_multi_forward). With two threads,
    // one streams the gate matrix and the other the up matrix, each one run from start to end; the SwiGLU follows
    // over the whole row. Every switch between weight streams, and every matrix shared between threads, costs stream
    // bandwidth: a switch leaves the next rows unprefetched (measured with bench/ab_decode.py).
    thread_local AlignedVector<float> gu;  // (2, N): gate's results, then up's
    gu.resize(static_cast<size_t>(2 * N));
    const Tensor* ws[2] = {&wg, &wu};
    const float* bs[2] = {nullptr, nullptr};
    float* os[2] = {gu.data(), gu.data() + N};
    matmul_multi_forward(x, 1, ws, bs, os);
    prefetch_span(gu.data() + N, N * static_cast<int64_t>(sizeof(float)));  // up's results: the other thread's
    swiglu_row(gu.data(), gu.data() + N, N, y);  // the row function of swiglu_forward: fusion changes no bits
    return;
  }
  const CpuMatrix mg(wg), mu(wu);
  GemmInput& gin = scratch_input(0);
  GemmInput& uin = scratch_input(1);
  prepare_gemm_input(x, T, mg.any_view(), gin);
  const bool shared = gemm_input_fits(gin, mu.any_view());
  if (!shared) prepare_gemm_input(x, T, mu.any_view(), uin);
  // Prefill: columns per pass, gate then up, so that the (T, slice) results of both stay in cache for the SwiGLU.
  const int64_t kSlice = 64;  // whole I4 blocks
  auto rows = [&](int64_t n0, int64_t n1) {
    // (T, kSlice) gate and up results; per thread, kept across calls (this runs for every chunk of every layer).
    thread_local AlignedVector<float> g, u;
    g.resize(static_cast<size_t>(T * kSlice));
    u.resize(static_cast<size_t>(T * kSlice));
    for (int64_t s0 = n0; s0 < n1; s0 += kSlice) {
      const int64_t s1 = std::min(n1, s0 + kSlice), width = s1 - s0;
      gemm_any(gin, mg, s0, s1, GemmOut{g.data(), width, nullptr, nullptr, s0});
      gemm_any(shared ? gin : uin, mu, s0, s1, GemmOut{u.data(), width, nullptr, nullptr, s0});
      for (int64_t t = 0; t < T; ++t) {  // the same row function as swiglu_forward: fusion changes no bits
        swiglu_row(g.data() + t * width, u.data() + t * width, width, y + t * N + s0);
      }
    }
  };
  const int64_t row_bytes_gu = weight_row_bytes(mg) + weight_row_bytes(mu);  // a gate row and an up row
  parallel_rows(N, std::max(row_group(wg.dtype), row_group(wu.dtype)), rows,
                [&](int64_t n0, int64_t n1) { return (n1 - n0) * row_bytes_gu; });
}

std::vector<std::vector<int64_t>> decode_row_shares(std::span<const Tensor* const> ws, int threads) {
  ASCENT_CHECK(!ws.empty() && threads >= 1, "decode_row_shares: {} weights on {} threads", ws.size(), threads);
  const RowSpace space = row_space(ws);
  const int64_t groups = space.first.back() / space.group;
  const bool one = rows_on_caller_alone(groups, space.group, threads);
  std::vector<std::vector<int64_t>> cuts(ws.size(), std::vector<int64_t>(static_cast<size_t>(threads) + 1));
  for (int t = 0; t <= threads; ++t) {
    const int64_t g = t == threads ? groups : one ? (t == 0 ? 0 : groups) : ThreadPool::share(groups, threads, t).first;
    for (size_t i = 0; i < ws.size(); ++i) {
      cuts[i][static_cast<size_t>(t)] = std::clamp(g * space.group - space.first[i], int64_t{0}, ws[i]->shape[0]);
    }
  }
  return cuts;
}

void embedding_forward(const Tensor& table, std::span<const int32_t> ids, float* out) {
  const int64_t V = table.rows(), C = table.cols();
  for (size_t t = 0; t < ids.size(); ++t) {
    ASCENT_CHECK(ids[t] >= 0 && ids[t] < V, "token id {} at position {} is outside the vocabulary (size {})", ids[t], t,
                 V);
  }
  ThreadPool::global().parallel_for(static_cast<int64_t>(ids.size()), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (is_int_weight(table.dtype)) {
        row_to_f32(table, ids[t], out + t * C);
      } else {
        widen_row(table.dtype, table.row_ptr(ids[t]), out + t * C, C);
      }
    }
  });
}

void embedding_backward(std::span<const int32_t> ids, const float* dy, int64_t C, float* dtable, int64_t V) {
  for (size_t t = 0; t < ids.size(); ++t) {
    ASCENT_CHECK(ids[t] >= 0 && ids[t] < V,
                 "embedding_backward: token id {} at position {} is outside the vocabulary "
                 "(size {})",
                 ids[t], t, V);
  }
  // Threads split the columns, not the rows: a repeated id's rows then add up on one thread, in row order.
  const auto T = static_cast<int64_t>(ids.size());
  ThreadPool::global().parallel_for(C, [&](int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < T; ++t) {
      float* row = dtable + ids[static_cast<size_t>(t)] * C;
      for (int64_t c = c0; c < c1; ++c) row[c] += dy[t * C + c];
    }
  });
}

}  // namespace ascent::kernels
