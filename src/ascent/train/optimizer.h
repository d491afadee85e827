// AdamW over a ParamSet (decoupled weight decay, as torch.optim.AdamW), the learning-rate schedule, and the checks a
// step makes before it changes anything: global-norm gradient clipping and the refusal of a step whose gradients hold
// a NaN or an infinity (the step is skipped and the first tensor at fault is named).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ascent/train/params.h"

namespace ascent::train {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

enum class Decay { Cosine, Linear, Constant };

struct Schedule {
  double lr = 3e-4, min_lr = 3e-5;
  int64_t warmup_steps = 0, total_steps = 1;
  Decay decay = Decay::Cosine;
  // Step s (0-based): linear warm-up to lr over warmup_steps, then decay to min_lr at total_steps.
  double at(int64_t step) const;
};

class AdamW {
 public:
  AdamW(const ParamSet& params, AdamWOptions o);
  // Applies one update with learning rate lr to every parameter from its gradient times grad_scale (the clipping
  // factor, folded in here to spare a pass over the gradients). The gradients are left as they are: the next step's
  // ParamSet::zero_grad clears them without a pass over them.
  void step(ParamSet& params, double lr, double grad_scale = 1.0);
  int64_t steps() const { return t_; }
  // The moments, in the parameters' order (checkpoints save and restore them).
  std::vector<std::vector<float>>& m() { return m_; }
  std::vector<std::vector<float>>& v() { return v_; }
  void set_steps(int64_t t) { t_ = t; }

 private:
  AdamWOptions o_;
  std::vector<std::vector<float>> m_, v_;
  int64_t t_ = 0;
};

struct GradCheck {
  double norm = 0.0;       // global L2 norm of every gradient (tied ones once)
  std::string non_finite;  // the first parameter whose gradient holds a NaN or an infinity ("" when none)
};
// Multiplies every gradient by `scale` (loss-scale and accumulation undo), then measures them. Cleared gradients
// become zeros first (ParamSet::zero_cleared), so every array it reads holds what its name says.
GradCheck scale_and_check(ParamSet& params, double scale);
// The factor that brings a global norm down to max_norm, as torch.nn.utils.clip_grad_norm_ computes it (1: no clipping;
// max_norm <= 0: off).
double clip_factor(double norm, double max_norm);
// Scales the gradients by clip_factor.
void clip_grad_norm(ParamSet& params, double norm, double max_norm);

}  // namespace ascent::train
