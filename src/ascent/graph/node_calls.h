// How each op of the IR runs on the CPU kernels: one function per op, called by Executor::run_batch with the node's
// buffers in the run's arena and the batch it runs on. The executor plans memory and traces; these functions only
// call kernels.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ascent/graph/ir.h"
#include "ascent/graph/kv_cache.h"

namespace ascent::graph {

// One sequence's part of a batch: its new tokens, the positions already in its cache, the cache, where in the cache
// its positions lie, and which of its rows' outputs the run returns.
struct Segment {
  std::span<const int32_t> tokens;
  int64_t n_past = 0;
  KvCache* kv = nullptr;
  // Position j lies in cache block blocks[j / kv->block()]; empty: block j / kv->block() (the cache is the sequence's).
  std::span<const int32_t> blocks;
  // Every row's output (prompt scoring, perplexity) rather than the last row's alone (generation). Output rows past a
  // LastRow node exist only for the rows asked for, stacked in segment order (llama.cpp's per-token logits flags).
  bool all_rows = false;
};

// The rows one run computes: every segment's tokens stacked, in segment order.
struct Batch {
  std::span<const Segment> segments;
  std::span<const int64_t> first_row;  // (segments + 1,): segment s has rows first_row[s] .. first_row[s + 1]
  std::span<const int32_t> tokens;     // (T,)
  std::span<const int32_t> positions;  // (T,): n_past + t within each segment
  int64_t T = 0;
  std::span<const int64_t> out_rows;  // (n_out,): the rows whose outputs the run returns, ascending
  int64_t n_out = 0;
  // Every segment runs one token (a decode step). Attention then runs each kv head's RoPE and KV append inside the
  // attention call, on the thread that attends over that head, instead of on the calling thread before it.
  bool decode = false;
};

// Called with each matmul's weight and input rows x (rows, K) before it runs: calibration for quantization.
using MatmulObserver = std::function<void(const Tensor& w, const float* x, int64_t rows)>;

// One node's call: its output and inputs in the arena, its row count and the batch.
struct NodeCall {
  static constexpr size_t kMaxInputs = 3;
  const Node& node;
  const std::vector<Node>& nodes;  // the graph's, to tell token ids from positions among the inputs
  const Batch& batch;
  float* out = nullptr;                      // (rows, node.cols), then the node's scratch
  std::array<float*, kMaxInputs> in{};       // inputs' rows, in node.inputs order
  int64_t rows = 0;                          // T, or n_out for a node past LastRow
  const MatmulObserver* observer = nullptr;  // null when none is set

  int64_t count() const { return rows * node.cols; }
  // Input k as integers: the batch's token ids or positions, by the input node's op.
  std::span<const int32_t> ints(size_t k) const;
  void observe(const Tensor& w, const float* x) const {
    if (observer != nullptr && *observer) (*observer)(w, x, rows);
  }
};

void embedding_call(const NodeCall& c);
void matmul_call(const NodeCall& c);
void matmul_swiglu_call(const NodeCall& c);
void rms_norm_call(const NodeCall& c);
void layer_norm_call(const NodeCall& c);
void mul_vec_call(const NodeCall& c);
void rope_call(const NodeCall& c);
// Attention (q, k, v inputs) and AttentionFused (the Q/K/V projection, q/k norm and RoPE first): each segment
// appends its new K and V rows to its own cache and attends over it.
void attention_call(const NodeCall& c);
void silu_call(const NodeCall& c);
void gelu_tanh_call(const NodeCall& c);
void swiglu_call(const NodeCall& c);
void add_call(const NodeCall& c);
void mul_call(const NodeCall& c);
void softmax_call(const NodeCall& c);
void last_row_call(const NodeCall& c);

}  // namespace ascent::graph
