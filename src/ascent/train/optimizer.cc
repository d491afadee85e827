#include "ascent/train/optimizer.h"

#include <cmath>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/adamw.h"

namespace ascent::train {

double Schedule::at(int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps)
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (decay == Decay::Constant || total_steps <= warmup_steps) return lr;
  const double p =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps));
  const double f = decay == Decay::Cosine ? 0.5 * (1.0 + std::cos(M_PI * p)) : 1.0 - p;
  return min_lr + (lr - min_lr) * f;
}

AdamW::AdamW(const ParamSet& params, AdamWOptions o) : o_(o) {
  for (const Param& p : params.params()) {
    m_.emplace_back(static_cast<size_t>(p.numel()), 0.0f);
    v_.emplace_back(static_cast<size_t>(p.numel()), 0.0f);
  }
}

void AdamW::step(ParamSet& params, double lr, double grad_scale) {
  params.zero_cleared();  // a gradient no product wrote this step reads as zeros
  ++t_;
  // torch.optim.AdamW's arithmetic (single-tensor path), in f32 as its f32 tensors compute: kernels/cpu/adamw.h.
  const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
  kernels::AdamWStep s{};
  s.b1 = static_cast<float>(o_.beta1);
  s.b2 = static_cast<float>(o_.beta2);
  s.step_size = static_cast<float>(lr / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.eps = static_cast<float>(o_.eps);
  // grad_scale 1 leaves each gradient as it is (x * 1 is exact), so unclipped steps match torch bit for bit.
  s.grad_scale = static_cast<float>(grad_scale);
  auto& ps = params.params();
  for (size_t k = 0; k < ps.size(); ++k) {
    Param& p = ps[k];
    s.decay = p.decay ? static_cast<float>(1.0 - lr * o_.weight_decay) : 1.0f;
    kernels::adamw_update(p.data(), p.grad.data(), m_[k].data(), v_[k].data(), p.numel(), s);
  }
}

GradCheck scale_and_check(ParamSet& params, double scale) {
  params.zero_cleared();
  GradCheck c;
  double sum = 0.0;
  const float s = static_cast<float>(scale);
  constexpr int64_t kChunk = 1 << 16;  // partial sums per fixed chunk, added in order: the same norm on any threads
  for (Param& p : params.params()) {
    const int64_t n = p.numel(), chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> part(static_cast<size_t>(chunks));
    std::vector<char> finite(static_cast<size_t>(chunks));
    float* __restrict g = p.grad.data();
    ThreadPool::global().parallel_for(chunks, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        const int64_t i0 = ch * kChunk, i1 = std::min(n, i0 + kChunk);
        float acc[16] = {};
        if (s != 1.0f)
          for (int64_t i = i0; i < i1; ++i) g[i] *= s;
        bool ok = true;
        int64_t i = i0;
        for (; i + 16 <= i1; i += 16)
          for (int j = 0; j < 16; ++j) acc[j] += g[i + j] * g[i + j];
        for (; i < i1; ++i) acc[0] += g[i] * g[i];
        double t = 0.0;
        for (float a : acc) t += a;
        ok = std::isfinite(t);
        part[static_cast<size_t>(ch)] = t;
        finite[static_cast<size_t>(ch)] = ok;
      }
    });
    for (int64_t ch = 0; ch < chunks; ++ch) {
      sum += part[static_cast<size_t>(ch)];
      if (!finite[static_cast<size_t>(ch)] && c.non_finite.empty()) c.non_finite = p.name;
    }
  }
  c.norm = c.non_finite.empty() ? std::sqrt(sum) : INFINITY;
  return c;
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0;
  return max_norm / (norm + 1e-6);
}

void clip_grad_norm(ParamSet& params, double norm, double max_norm) {
  const double f = clip_factor(norm, max_norm);
  if (f == 1.0) return;
  const float ff = static_cast<float>(f);
  for (Param& p : params.params())
    for (float& g : p.grad) g *= ff;
}

}  // namespace ascent::train
