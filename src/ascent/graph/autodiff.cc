#include "ascent/graph/autodiff.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "ascent/base/error.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/sgemm.h"
#include "ascent/tensor/dtype.h"

namespace ascent::graph {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  return "?";
}

namespace {

// The layer a node belongs to ("blk.3.attn_q" -> 3), or -1 outside the layers.
int layer_of(const Node& n) {
  if (n.name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(n.name.c_str() + 4);
}

const float* f32_weight(const Node& n, size_t k) {
  const Tensor* w = n.weights.at(k);
  if (w == nullptr) return nullptr;
  ASCENT_CHECK(w->dtype == DType::F32, "{}: training needs f32 weights, {} is {}", n.name, shape_str(w->shape),
               dtype_name(w->dtype));
  return w->f32();
}

void round_half(float* x, int64_t n, Half h) {
  if (h == Half::Bf16) {
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_rounded(x[i]);
  } else if (h == Half::F16) {
    for (int64_t i = 0; i < n; ++i) x[i] = f16_rounded(x[i]);
  }
}

void add_into(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

Autodiff::Autodiff(const Graph& g, GradOf grad_of, Recompute recompute)
    : g_(g), grad_of_(std::move(grad_of)), recompute_(recompute) {
  const auto& nodes = g.nodes();
  const int n = static_cast<int>(nodes.size());
  out_ = g.output();
  ASCENT_CHECK(out_ >= 0 && nodes[static_cast<size_t>(out_)].op == Op::MatMul,
               "training needs a graph whose output is the LM head's matmul");
  out_input_ = nodes[static_cast<size_t>(out_)].inputs.at(0);
  needs_.assign(static_cast<size_t>(n), {});
  last_fwd_use_.assign(static_cast<size_t>(n), -1);
  bwd_readers_.assign(static_cast<size_t>(n), 0);
  keep_.assign(static_cast<size_t>(n), false);
  for (int i = 0; i < n; ++i) {
    const Node& nd = nodes[static_cast<size_t>(i)];
    auto& need = needs_[static_cast<size_t>(i)];
    switch (nd.op) {
      case Op::Tokens:
      case Op::Positions:
      case Op::Add:
      case Op::LastRow:
        break;
      case Op::Embedding:
      case Op::RmsNorm:
      case Op::MulVec:
      case Op::LayerNorm:
      case Op::GeluTanh:
        need = {nd.inputs[0]};
        break;
      case Op::MatMul:
        ASCENT_CHECK(nd.inputs.size() == 1, "{}: training does not take a matmul with a fused residual", nd.name);
        need = {nd.inputs[0]};
        break;
      case Op::Rope:
        need = {nd.inputs[1]};
        break;
      case Op::Attention:
        need = {nd.inputs[0], nd.inputs[1], nd.inputs[2], i};
        break;
      case Op::SwiGLU:
      case Op::Mul:
        need = {nd.inputs[0], nd.inputs[1]};
        break;
      default:
        fail("{}: op {} has no backward (training runs unfused graphs)", nd.name, op_name(nd.op));
    }
    for (int in : nd.inputs) last_fwd_use_[static_cast<size_t>(in)] = i;
    for (int v : need) ++bwd_readers_[static_cast<size_t>(v)];
  }
  // Which values the forward pass keeps for backward; the others a backward reader gets by recomputation.
  for (int i = 0; i < n; ++i) {
    const Node& nd = nodes[static_cast<size_t>(i)];
    if (bwd_readers_[static_cast<size_t>(i)] == 0) continue;
    bool keep = true;
    if (nd.is_int) {
      keep = true;
    } else if (recompute_ == Recompute::Full) {
      // Kept: values outside the layers, and a layer's values that a later layer (or the head) reads.
      const int l = layer_of(nd);
      keep = l < 0;
      for (int j = i + 1; j < n && !keep; ++j) {
        const Node& user = nodes[static_cast<size_t>(j)];
        if (std::find(user.inputs.begin(), user.inputs.end(), i) != user.inputs.end() && layer_of(user) != l)
          keep = true;
      }
    } else if (recompute_ == Recompute::Selective) {
      keep = nd.op == Op::MatMul || nd.op == Op::Attention || nd.op == Op::Embedding || nd.op == Op::Add ||
             nd.op == Op::LastRow;
    }
    keep_[static_cast<size_t>(i)] = keep;
  }
}

void Autodiff::gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool ta, const float* b, int64_t ldb,
                    bool tb, float beta, float* c, int64_t ldc) const {
  switch (numerics_.matmul) {
    case Half::None:
      return kernels::sgemm(M, N, K, {a, lda, ta}, {b, ldb, tb}, beta, c, ldc);
    case Half::Bf16:
      return kernels::sgemm_bf16(M, N, K, {a, lda, ta}, {b, ldb, tb}, beta, c, ldc);
    case Half::F16:
      return kernels::sgemm_f16(M, N, K, {a, lda, ta}, {b, ldb, tb}, beta, c, ldc);
  }
}

std::vector<float> Autodiff::take(size_t n) {
  auto it = pool_.find(n);
  if (it == pool_.end() || it->second.empty()) return std::vector<float>(n);
  std::vector<float> v = std::move(it->second.back());
  it->second.pop_back();
  return v;
}

void Autodiff::give(std::vector<float>&& v) {
  if (v.empty()) return;
  const size_t n = v.size();
  pool_[n].push_back(std::move(v));
  v = {};
}

void Autodiff::round_value(int id) {
  const Node& nd = g_.nodes()[static_cast<size_t>(id)];
  if (dry_ || nd.is_int || numerics_.activations == Half::None) return;
  const bool norm = nd.op == Op::RmsNorm || nd.op == Op::LayerNorm || nd.op == Op::MulVec;
  if (norm && !numerics_.norms_too) return;
  auto& v = vals_[static_cast<size_t>(id)].f;
  round_half(v.data(), static_cast<int64_t>(v.size()), numerics_.activations);
}

void Autodiff::round_grad(int id) {
  if (dry_ || numerics_.activation_grads == Half::None || !grad_live_[static_cast<size_t>(id)]) return;
  auto& g = grads_[static_cast<size_t>(id)];
  round_half(g.data(), static_cast<int64_t>(g.size()), numerics_.activation_grads);
}

int64_t Autodiff::value_bytes(int id) const {
  const Node& nd = g_.nodes()[static_cast<size_t>(id)];
  return rows_ * nd.cols * 4;
}

void Autodiff::allocate(int id) {
  Value& v = vals_[static_cast<size_t>(id)];
  if (v.live) return;
  v.live = true;
  const Node& nd = g_.nodes()[static_cast<size_t>(id)];
  bytes_ += value_bytes(id);
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  if (dry_) return;
  if (nd.is_int) {
    v.i.resize(static_cast<size_t>(rows_ * nd.cols));
  } else {
    v.f = take(static_cast<size_t>(rows_ * nd.cols));  // every op writes all of its output
  }
}

void Autodiff::release(int id) {
  Value& v = vals_[static_cast<size_t>(id)];
  if (!v.live) return;
  v.live = false;
  bytes_ -= value_bytes(id);
  give(std::move(v.f));
  v.i = {};
}

void Autodiff::compute(int id) {
  const Node& nd = g_.nodes()[static_cast<size_t>(id)];
  allocate(id);
  if (dry_) return;
  const int64_t R = rows_;
  Value& out = vals_[static_cast<size_t>(id)];
  auto in = [&](size_t k) { return vals_[static_cast<size_t>(nd.inputs[k])].f.data(); };
  auto in_node = [&](size_t k) -> const Node& { return g_.nodes()[static_cast<size_t>(nd.inputs[k])]; };
  float* y = out.f.data();
  switch (nd.op) {
    case Op::Tokens:
      std::copy(tokens_.begin(), tokens_.end(), out.i.begin());
      break;
    case Op::Positions:
      for (int64_t r = 0; r < R; ++r) out.i[static_cast<size_t>(r)] = static_cast<int32_t>(r % seq_);
      break;
    case Op::Embedding:
      kernels::embedding_forward(*nd.weights[0], vals_[static_cast<size_t>(nd.inputs[0])].i, y);
      break;
    case Op::MatMul: {
      const Tensor& w = *nd.weights[0];
      const int64_t N = nd.cols, K = in_node(0).cols;
      gemm(R, N, K, in(0), K, false, f32_weight(nd, 0), K, true, 0.0f, y, N);
      if (const float* b = nd.weights.size() > 1 ? f32_weight(nd, 1) : nullptr) {
        for (int64_t r = 0; r < R; ++r) add_into(y + r * N, b, N);
      }
      (void)w;
      break;
    }
    case Op::RmsNorm:
      kernels::rms_norm_forward(in(0), R, nd.cols, f32_weight(nd, 0), nd.eps, nd.group, y);
      break;
    case Op::MulVec:
      kernels::mul_vec_forward(in(0), R, nd.cols, f32_weight(nd, 0), nd.weights[0]->numel(), y);
      break;
    case Op::LayerNorm:
      kernels::layer_norm_forward(in(0), R, nd.cols, f32_weight(nd, 0), f32_weight(nd, 1), nd.eps, y);
      break;
    case Op::Rope:
      std::copy(in(0), in(0) + R * nd.cols, y);
      kernels::rope_forward(y, R, nd.heads, nd.head_dim, vals_[static_cast<size_t>(nd.inputs[1])].i, *nd.inv_freq,
                            nd.rope_style);
      break;
    case Op::Attention: {
      const kernels::AttentionTrainDims d{batch_, seq_, nd.heads, nd.kv_heads, nd.head_dim, nd.scale, nd.window};
      kernels::attention_train_forward(in(0), in(1), in(2), d, y);
      break;
    }
    case Op::GeluTanh:
      kernels::gelu_tanh_forward(in(0), R * nd.cols, y);
      break;
    case Op::SwiGLU:
      kernels::swiglu_forward(in(0), in(1), R * nd.cols, y);
      break;
    case Op::Add:
      kernels::add_forward(in(0), in(1), R * nd.cols, y);
      break;
    case Op::Mul:
      kernels::mul_forward(in(0), in(1), R * nd.cols, y);
      break;
    case Op::LastRow:
      std::copy(in(0), in(0) + R * nd.cols, y);
      break;
    default:
      fail("{}: op {} has no training forward", nd.name, op_name(nd.op));
  }
  round_value(id);
}

void Autodiff::ensure(int id) {
  if (vals_[static_cast<size_t>(id)].live) return;
  const Node& nd = g_.nodes()[static_cast<size_t>(id)];
  for (int in : nd.inputs) ensure(in);
  compute(id);
  // Inputs rebuilt only for this value (no backward step of their own left to read them) go at once.
  for (int in : nd.inputs) {
    if (!keep_[static_cast<size_t>(in)] && readers_left_[static_cast<size_t>(in)] == 0) release(in);
  }
}

float* Autodiff::grad_for_input(int id, bool& fresh) {
  fresh = !grad_live_[static_cast<size_t>(id)];
  if (fresh) {
    grad_live_[static_cast<size_t>(id)] = true;
    count_bytes(value_bytes(id));
    if (dry_) return nullptr;
    // Whoever takes a fresh gradient writes all of it (add_input_grad, pass_grad, the loss's dx).
    grads_[static_cast<size_t>(id)] = take(static_cast<size_t>(value_bytes(id) / 4));
  }
  return dry_ ? nullptr : grads_[static_cast<size_t>(id)].data();
}

void Autodiff::release_grad(int id) {
  if (!grad_live_[static_cast<size_t>(id)]) return;
  grad_live_[static_cast<size_t>(id)] = false;
  count_bytes(-value_bytes(id));
  give(std::move(grads_[static_cast<size_t>(id)]));
}

void Autodiff::count_bytes(int64_t delta) {
  bytes_ += delta;
  peak_bytes_ = std::max(peak_bytes_, bytes_);
}

void Autodiff::add_input_grad(int id, const std::function<void(float*)>& write) {
  bool fresh = false;
  float* g = grad_for_input(id, fresh);
  if (fresh) {
    if (!dry_) write(g);
    return;
  }
  // The kernels write input gradients; a value read by several nodes sums theirs.
  count_bytes(value_bytes(id));
  if (!dry_) {
    std::vector<float> tmp = take(static_cast<size_t>(value_bytes(id) / 4));
    write(tmp.data());
    add_into(g, tmp.data(), static_cast<int64_t>(tmp.size()));
    give(std::move(tmp));
  }
  count_bytes(-value_bytes(id));
}

void Autodiff::pass_grad(int from, int to, bool last) {
  const size_t f = static_cast<size_t>(from), t = static_cast<size_t>(to);
  if (grad_live_[t]) {
    if (!dry_) add_into(grads_[t].data(), grads_[f].data(), static_cast<int64_t>(grads_[t].size()));
    return;
  }
  grad_live_[t] = true;
  count_bytes(value_bytes(to));
  if (!last) {
    grads_[t] = take(grads_[f].size());
    std::copy(grads_[f].begin(), grads_[f].end(), grads_[t].begin());
    return;
  }
  // from's last use: its buffer is handed over, not copied.
  grads_[t] = std::move(grads_[f]);
  grads_[f] = {};
  grad_live_[f] = false;
  count_bytes(-value_bytes(from));
}

void Autodiff::backward_node(int id) {
  const Node& nd = g_.nodes()[static_cast<size_t>(id)];
  const int64_t R = rows_;
  const float* dy = dry_ ? nullptr : grads_[static_cast<size_t>(id)].data();
  auto in = [&](size_t k) -> const float* {
    return dry_ ? nullptr : vals_[static_cast<size_t>(nd.inputs[k])].f.data();
  };
  auto in_cols = [&](size_t k) { return g_.nodes()[static_cast<size_t>(nd.inputs[k])].cols; };
  // A dry run computes nothing, so it takes no target (taking one spends its zero).
  auto wtarget = [&](size_t k, bool overwrites) -> GradTarget {
    return !dry_ && k < nd.weights.size() && nd.weights[k] != nullptr ? grad_of_(nd.weights[k], overwrites)
                                                                      : GradTarget{};
  };
  auto wgrad = [&](size_t k) -> float* { return wtarget(k, /*overwrites=*/false).data; };
  switch (nd.op) {
    case Op::Tokens:
    case Op::Positions:
      break;
    case Op::Embedding:
      if (float* dw = wgrad(0); dw != nullptr) {
        kernels::embedding_backward(vals_[static_cast<size_t>(nd.inputs[0])].i, dy, nd.cols, dw,
                                    nd.weights[0]->shape[0]);
      }
      break;
    case Op::MatMul: {
      const int64_t N = nd.cols, K = in_cols(0);
      const float* w = f32_weight(nd, 0);
      if (const GradTarget dw = wtarget(0, /*overwrites=*/true); dw.data != nullptr) {
        gemm(N, K, R, dy, N, true, in(0), K, false, dw.zero ? 0.0f : 1.0f, dw.data, K);
      }
      if (float* db = wgrad(1); db != nullptr) {
        for (int64_t r = 0; r < R; ++r) add_into(db, dy + r * N, N);
      }
      add_input_grad(nd.inputs[0], [&](float* dx) { gemm(R, K, N, dy, N, false, w, K, false, 0.0f, dx, K); });
      break;
    }
    case Op::RmsNorm:
      add_input_grad(nd.inputs[0], [&](float* dx) {
        kernels::rms_norm_backward(in(0), R, nd.cols, f32_weight(nd, 0), nd.eps, nd.group, dy, dx, wgrad(0));
      });
      break;
    case Op::MulVec:
      add_input_grad(nd.inputs[0], [&](float* dx) {
        kernels::mul_vec_backward(in(0), R, nd.cols, f32_weight(nd, 0), nd.weights[0]->numel(), dy, dx, wgrad(0));
      });
      break;
    case Op::LayerNorm:
      add_input_grad(nd.inputs[0], [&](float* dx) {
        kernels::layer_norm_backward(in(0), R, nd.cols, f32_weight(nd, 0), nd.eps, dy, dx, wgrad(0), wgrad(1));
      });
      break;
    case Op::Rope:
      add_input_grad(nd.inputs[0], [&](float* dx) {
        std::copy(dy, dy + R * nd.cols, dx);
        kernels::rope_backward(dx, R, nd.heads, nd.head_dim, vals_[static_cast<size_t>(nd.inputs[1])].i, *nd.inv_freq,
                               nd.rope_style);
      });
      break;
    case Op::Attention: {
      const kernels::AttentionTrainDims d{batch_, seq_, nd.heads, nd.kv_heads, nd.head_dim, nd.scale, nd.window};
      const size_t nq = static_cast<size_t>(R * in_cols(0)), nk = static_cast<size_t>(R * in_cols(1));
      const int64_t scratch = static_cast<int64_t>(nq + 2 * nk) * 4;
      count_bytes(scratch);
      std::vector<float> dq, dk, dv;
      if (!dry_) {
        dq = take(nq);
        dk = take(nk);
        dv = take(nk);
        kernels::attention_backward(in(0), in(1), in(2), vals_[static_cast<size_t>(id)].f.data(), dy, d, dq.data(),
                                    dk.data(), dv.data());
      }
      add_input_grad(nd.inputs[0], [&](float* g) { std::copy(dq.begin(), dq.end(), g); });
      add_input_grad(nd.inputs[1], [&](float* g) { std::copy(dk.begin(), dk.end(), g); });
      add_input_grad(nd.inputs[2], [&](float* g) { std::copy(dv.begin(), dv.end(), g); });
      give(std::move(dq));
      give(std::move(dk));
      give(std::move(dv));
      count_bytes(-scratch);
      break;
    }
    case Op::GeluTanh:
      add_input_grad(nd.inputs[0], [&](float* dx) { kernels::gelu_tanh_backward(in(0), dy, R * nd.cols, dx); });
      break;
    case Op::SwiGLU: {
      // Both gradients at once; the up one goes through a temporary when the gate's buffer is taken.
      const int64_t n = R * nd.cols;
      count_bytes(n * 4);
      std::vector<float> dup;
      if (!dry_) dup = take(static_cast<size_t>(n));
      add_input_grad(nd.inputs[0],
                     [&](float* dgate) { kernels::swiglu_backward(in(0), in(1), dy, n, dgate, dup.data()); });
      add_input_grad(nd.inputs[1], [&](float* g) { std::copy(dup.begin(), dup.end(), g); });
      give(std::move(dup));
      count_bytes(-n * 4);
      break;
    }
    case Op::Mul: {
      const int64_t n = R * nd.cols;
      add_input_grad(nd.inputs[0], [&](float* g) {
        for (int64_t i = 0; i < n; ++i) g[i] = dy[i] * in(1)[i];
      });
      add_input_grad(nd.inputs[1], [&](float* g) {
        for (int64_t i = 0; i < n; ++i) g[i] = dy[i] * in(0)[i];
      });
      break;
    }
    case Op::Add:
      pass_grad(id, nd.inputs[0], /*last=*/false);
      pass_grad(id, nd.inputs[1], /*last=*/true);
      break;
    case Op::LastRow:
      pass_grad(id, nd.inputs[0], /*last=*/true);
      break;
    default:
      fail("{}: op {} has no backward", nd.name, op_name(nd.op));
  }
}

void Autodiff::run(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t batch, int64_t seq,
                   float loss_scale, bool backward, bool dry, LossSum& loss) {
  const auto& nodes = g_.nodes();
  const int n = static_cast<int>(nodes.size());
  ASCENT_CHECK(batch > 0 && seq > 0, "training batch {} x {} is empty", batch, seq);
  rows_ = batch * seq;
  batch_ = batch;
  seq_ = seq;
  dry_ = dry;
  tokens_ = tokens;
  targets_ = targets;
  if (!dry) {
    ASCENT_CHECK(static_cast<int64_t>(tokens.size()) == rows_ && static_cast<int64_t>(targets.size()) == rows_,
                 "training batch: {} tokens and {} targets for {} x {}", tokens.size(), targets.size(), batch, seq);
  }
  for (Value& v : vals_) give(std::move(v.f));
  for (auto& g : grads_) give(std::move(g));
  vals_.assign(static_cast<size_t>(n), {});
  grads_.assign(static_cast<size_t>(n), {});
  grad_live_.assign(static_cast<size_t>(n), false);
  readers_left_ = bwd_readers_;
  bytes_ = peak_bytes_ = 0;

  const Node& head = nodes[static_cast<size_t>(out_)];
  for (int i = 0; i < n; ++i) {
    const Node& nd = nodes[static_cast<size_t>(i)];
    if (i == out_) {
      // The LM head and the loss, with the head's input gradient when training.
      const int64_t C = nodes[static_cast<size_t>(out_input_)].cols, V = head.cols;
      float* dx = nullptr;
      if (backward) {
        bool fresh = false;
        dx = grad_for_input(out_input_, fresh);
      }
      if (!dry) {
        const auto t0 = std::chrono::steady_clock::now();
        const float* x = vals_[static_cast<size_t>(out_input_)].f.data();
        const GradTarget dw = backward ? grad_of_(head.weights[0], /*overwrites=*/true) : GradTarget{};
        const double s = kernels::lm_head_cross_entropy(x, rows_, C, f32_weight(head, 0), V, targets, loss_scale, dx,
                                                        dw.data, /*dw_zero=*/dw.zero);
        loss.sum += s;
        for (int32_t t : targets) loss.count += t >= 0 ? 1 : 0;
        op_seconds_[backward ? "lm head + loss, forward and backward" : "lm head + loss"] +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      if (backward) --readers_left_[static_cast<size_t>(out_input_)];
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      compute(i);
      if (!dry) {
        op_seconds_[std::string(op_name(nd.op)) + " forward"] +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
    for (int in : nd.inputs) {
      const size_t k = static_cast<size_t>(in);
      if (last_fwd_use_[k] == i && (!backward || !keep_[k] || readers_left_[k] == 0)) release(in);
    }
    if (last_fwd_use_[static_cast<size_t>(i)] < 0 && i != out_) release(i);
  }
  if (!backward) return;
  for (int i = n - 1; i >= 0; --i) {
    if (i == out_) continue;
    const size_t k = static_cast<size_t>(i);
    if (grad_live_[k]) {
      round_grad(i);
      const auto t0 = std::chrono::steady_clock::now();
      for (int v : needs_[k]) ensure(v);
      backward_node(i);
      if (!dry) {
        op_seconds_[std::string(op_name(nodes[k].op)) + " backward"] +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      release_grad(i);
    }
    for (int v : needs_[k]) {
      if (--readers_left_[static_cast<size_t>(v)] == 0) release(v);
    }
    if (readers_left_[k] == 0) release(i);
  }
}

LossSum Autodiff::forward_backward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t batch,
                                   float loss_scale) {
  LossSum l;
  run(tokens, targets, batch, static_cast<int64_t>(tokens.size()) / batch, loss_scale, /*backward=*/true,
      /*dry=*/false, l);
  return l;
}

LossSum Autodiff::loss(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t batch) {
  LossSum l;
  run(tokens, targets, batch, static_cast<int64_t>(tokens.size()) / batch, 1.0f, /*backward=*/false, /*dry=*/false, l);
  return l;
}

int64_t Autodiff::planned_peak_bytes(int64_t batch, int64_t seq) {
  LossSum l;
  run({}, {}, batch, seq, 1.0f, /*backward=*/true, /*dry=*/true, l);
  return peak_bytes_;
}

}  // namespace ascent::graph
