#include "ascent/train/optimizer.h"

#include <cmath>

#include "ascent/base/thread_pool.h"

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

void AdamW::step(ParamSet& params, double lr) {
  ++t_;
  // torch.optim.AdamW's arithmetic (single-tensor path), in f32 as its f32 tensors compute.
  const float b1 = static_cast<float>(o_.beta1), b2 = static_cast<float>(o_.beta2);
  const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(o_.eps);
  auto& ps = params.params();
  for (size_t k = 0; k < ps.size(); ++k) {
    Param& p = ps[k];
    float* w = p.data();
    const float* g = p.grad.data();
    float* m = m_[k].data();
    float* v = v_[k].data();
    const float decay = p.decay ? static_cast<float>(1.0 - lr * o_.weight_decay) : 1.0f;
    ThreadPool::global().parallel_for(p.numel(), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        w[i] *= decay;
        m[i] = m[i] * b1 + g[i] * (1.0f - b1);
        v[i] = v[i] * b2 + g[i] * g[i] * (1.0f - b2);
        const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
        w[i] -= step_size * (m[i] / denom);
      }
    });
  }
}

GradCheck scale_and_check(ParamSet& params, double scale) {
  GradCheck c;
  double sum = 0.0;
  const float s = static_cast<float>(scale);
  for (Param& p : params.params()) {
    double part = 0.0;
    bool finite = true;
    for (float& g : p.grad) {
      g *= s;
      finite = finite && std::isfinite(g);
      part += static_cast<double>(g) * g;
    }
    if (!finite && c.non_finite.empty()) c.non_finite = p.name;
    sum += part;
  }
  c.norm = std::sqrt(sum);
  return c;
}

void clip_grad_norm(ParamSet& params, double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return;
  const float f = static_cast<float>(max_norm / (norm + 1e-6));
  for (Param& p : params.params())
    for (float& g : p.grad) g *= f;
}

}  // namespace ascent::train
