#include "ascent/graph/executor.h"

#include <algorithm>
#include <cstring>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/graph/node_cost.h"

namespace ascent::graph {

int64_t shape_bucket(int64_t n_tokens) {
  int64_t b = 1;
  while (b < n_tokens) b *= 2;
  return b;
}

const MemoryPlan& Executor::plan_for(int64_t n_tokens, int64_t n_out) {
  const ShapeBucket bucket(shape_bucket(n_tokens), std::min(shape_bucket(n_out), shape_bucket(n_tokens)));
  auto it = plans_.find(bucket);
  if (it == plans_.end()) {
    it = plans_.emplace(bucket, plan_memory(graph_, bucket, options_.plan, options_.plan && options_.inplace)).first;
    ++plans_compiled_;
    if (tracer_ != nullptr) tracer_->count_plan_compiled();
  }
  return it->second;
}

void Executor::warm_up(int64_t max_tokens, int64_t max_out) {
  for (int64_t b = 1; b <= shape_bucket(max_tokens); b *= 2) {
    for (int64_t o = 1; o <= std::min(b, shape_bucket(max_out)); o *= 2) plan_for(b, o);
  }
  std::size_t largest = 0;
  for (const auto& [b, p] : plans_) largest = std::max(largest, static_cast<size_t>(p.arena_bytes));
  arena_.reserve(largest);
}

std::span<const float> Executor::run(std::span<const int32_t> tokens, int64_t n_past, KvCache& kv, bool all_rows) {
  const Segment one{tokens, n_past, &kv, {}, all_rows};
  return run_batch(std::span<const Segment>(&one, 1));
}

Batch Executor::describe(std::span<const Segment> segments) {
  ASCENT_CHECK(!segments.empty(), "nothing to run: no sequences");
  Batch b;
  b.segments = segments;
  b.tokens = segments[0].tokens;
  if (segments.size() > 1) {
    tokens_.clear();
    for (const Segment& s : segments) tokens_.insert(tokens_.end(), s.tokens.begin(), s.tokens.end());
    b.tokens = tokens_;
  }
  b.T = static_cast<int64_t>(b.tokens.size());
  positions_.resize(static_cast<size_t>(b.T));
  rows_.assign(segments.size() + 1, 0);
  out_rows_.clear();
  b.decode = true;
  for (size_t s = 0; s < segments.size(); ++s) {
    const Segment& g = segments[s];
    const auto n = static_cast<int64_t>(g.tokens.size());
    ASCENT_CHECK(n > 0, "nothing to run: sequence {} has no tokens", s);
    ASCENT_CHECK(g.kv != nullptr, "sequence {} has no KV cache", s);
    const int64_t room = g.blocks.empty() ? g.kv->capacity() : static_cast<int64_t>(g.blocks.size()) * g.kv->block();
    ASCENT_CHECK(g.n_past >= 0 && g.n_past + n <= room,
                 "sequence of {} tokens exceeds the {} positions of its KV cache", g.n_past + n, room);
    for (const int32_t blk : g.blocks) {
      ASCENT_CHECK(blk >= 0 && blk < g.kv->n_blocks(), "sequence {}: block {} is outside the cache's {} blocks", s, blk,
                   g.kv->n_blocks());
    }
    rows_[s + 1] = rows_[s] + n;
    for (int64_t r = g.all_rows ? rows_[s] : rows_[s + 1] - 1; r < rows_[s + 1]; ++r) out_rows_.push_back(r);
    for (int64_t t = 0; t < n; ++t) positions_[static_cast<size_t>(rows_[s] + t)] = static_cast<int32_t>(g.n_past + t);
    b.decode = b.decode && n == 1;
  }
  b.positions = positions_;
  b.first_row = rows_;
  b.out_rows = out_rows_;
  b.n_out = static_cast<int64_t>(out_rows_.size());
  return b;
}

void Executor::run_node(size_t i, const Batch& b, const MemoryPlan& plan) {
  const auto& nodes = graph_.nodes();
  const Node& n = nodes[i];
  auto buf = [&](int id) { return reinterpret_cast<float*>(arena_.data() + plan.offsets[static_cast<size_t>(id)]); };
  NodeCall c{n, nodes, b};
  c.out = buf(static_cast<int>(i));
  ASCENT_CHECK(n.inputs.size() <= NodeCall::kMaxInputs, "{}: {} inputs", n.name, n.inputs.size());
  for (size_t k = 0; k < n.inputs.size(); ++k) c.in[k] = buf(n.inputs[k]);
  c.rows = n.selected ? b.n_out : b.T;
  c.observer = &observer_;
  switch (n.op) {
    case Op::Tokens:
    case Op::Positions:
      return;  // read from the batch's spans by the nodes that take them
    case Op::Embedding:
      return embedding_call(c);
    case Op::MatMul:
      return matmul_call(c);
    case Op::MatMulSwiGLU:
      return matmul_swiglu_call(c);
    case Op::RmsNorm:
      return rms_norm_call(c);
    case Op::LayerNorm:
      return layer_norm_call(c);
    case Op::MulVec:
      return mul_vec_call(c);
    case Op::Rope:
      return rope_call(c);
    case Op::Attention:
    case Op::AttentionFused:
      return attention_call(c);
    case Op::Silu:
      return silu_call(c);
    case Op::GeluTanh:
      return gelu_tanh_call(c);
    case Op::SwiGLU:
      return swiglu_call(c);
    case Op::Add:
      return add_call(c);
    case Op::Mul:
      return mul_call(c);
    case Op::Softmax:
      return softmax_call(c);
    case Op::LastRow:
      return last_row_call(c);
  }
}

std::span<const float> Executor::run_batch(std::span<const Segment> segments) {
  const Batch b = describe(segments);
  const MemoryPlan& plan = plan_for(b.T, b.n_out);
  if (static_cast<size_t>(plan.arena_bytes) > arena_.capacity()) arena_.reserve(static_cast<size_t>(plan.arena_bytes));
  // Per cached K or V value, for the profile (a segment without a cache runs no attention).
  const int64_t kv_bytes = segments[0].kv != nullptr ? block_bytes(segments[0].kv->dtype()) : 4;
  const auto& nodes = graph_.nodes();
  const prof::TracerScope tracing(tracer_);  // the matmul kernels file their pool calls under the node running
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (tracer_ != nullptr) tracer_->set_node(n.name);
    const double t0 = tracer_ != nullptr ? tracer_->now_us() : 0.0;
    try {
      run_node(i, b, plan);
    } catch (const Error& e) {
      throw Error(n.name + ": " + e.what());
    }
    if (tracer_ != nullptr && n.op != Op::Tokens && n.op != Op::Positions) {
      prof::TraceEvent e;
      e.name = n.name;
      e.op = op_name(n.op);
      e.shapes = node_shapes(n, nodes, b.T, b.n_out);
      const NodeCost cost = node_cost(n, nodes, b.T, b.n_out, segments[0].n_past, kv_bytes);
      e.bytes = cost.bytes;
      e.flops = cost.flops;
      e.ts_us = t0;
      e.dur_us = tracer_->now_us() - t0;
      e.threads = ThreadPool::global().size();
      tracer_->add(std::move(e));
    }
  }
  if (tracer_ != nullptr) tracer_->sample_memory(plan.arena_bytes);
  const Node& o = nodes[static_cast<size_t>(graph_.output())];
  const float* out = reinterpret_cast<const float*>(arena_.data() + plan.offsets[static_cast<size_t>(graph_.output())]);
  return {out, static_cast<size_t>((o.selected ? b.n_out : b.T) * o.cols)};
}

}  // namespace ascent::graph
