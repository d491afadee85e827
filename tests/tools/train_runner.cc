// train_runner: the training path (graph/autodiff.h, train/optimizer.h) on one batch, for tests/e2e/test_train_grads.py
// to check against PyTorch autograd and torch.optim.AdamW.
//   train_runner grads MODEL OUT.safetensors TOKENS.npy TARGETS.npy [recompute=none|selective|full]
//                [precision=O0|O1|O2|O3|O3-fp16] [loss_scale=S]
//     loss = mean over counted targets of the cross-entropy; writes every parameter's gradient (of S x loss) under
//     its Hugging Face name, and the loss in the metadata ("loss"); prints "loss L" (17 digits) and "peak_bytes N"
//     (measured and planned).
//   train_runner adamw MODEL OUT.safetensors TOKENS.npy TARGETS.npy steps=N lr=X [wd= b1= b2= eps= clip=]
//     N AdamW steps on the same batch; writes the parameters after them, and with grads=PREFIX each step's gradients
//     (after clipping) as PREFIX-K.safetensors, K = 0..N-1.
// TOKENS and TARGETS are int32 arrays (B, T); a negative target is not counted.
#include <cstdio>
#include <map>
#include <string>

#include "ascent/base/error.h"
#include "ascent/model/hf_writer.h"
#include "ascent/tensor/npy.h"
#include "ascent/train/optimizer.h"
#include "ascent/train/train_model.h"
#include "ascent/train/trainer.h"

using namespace ascent;

namespace {

graph::Numerics parse_precision(const std::string& s) {
  if (s == "O0") return train::numerics_for(train::Precision::O0, /*fp16=*/false);
  if (s == "O1") return train::numerics_for(train::Precision::O1, /*fp16=*/false);
  if (s == "O2") return train::numerics_for(train::Precision::O2, /*fp16=*/false);
  if (s == "O3") return train::numerics_for(train::Precision::O3, /*fp16=*/false);
  if (s == "O3-fp16") return train::numerics_for(train::Precision::O3, /*fp16=*/true);
  fail("precision={} (O0, O1, O2, O3, O3-fp16)", s);
}

graph::Recompute parse_recompute(const std::string& s) {
  if (s == "none") return graph::Recompute::None;
  if (s == "selective") return graph::Recompute::Selective;
  if (s == "full") return graph::Recompute::Full;
  fail("recompute={} (none, selective, full)", s);
}

int run(int argc, char** argv) {
  ASCENT_CHECK(argc >= 6, "usage: train_runner grads|adamw MODEL OUT.safetensors TOKENS.npy TARGETS.npy [k=v...]");
  const std::string mode = argv[1], model_path = argv[2], out = argv[3];
  std::map<std::string, std::string> kv;
  for (int i = 6; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    ASCENT_CHECK(eq != std::string::npos, "argument {} is not key=value", a);
    kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  auto num = [&](const std::string& k, double d) { return kv.count(k) ? std::stod(kv[k]) : d; };
  const Tensor tok = read_npy(argv[4]), tgt = read_npy(argv[5]);
  ASCENT_CHECK(tok.dtype == DType::I32 && tgt.dtype == DType::I32 && tok.shape.size() == 2 && tok.shape == tgt.shape,
               "tokens and targets must be int32 arrays of one shape (B, T)");
  const int64_t B = tok.shape[0];
  std::span<const int32_t> tokens(static_cast<const int32_t*>(tok.data), static_cast<size_t>(tok.numel()));
  std::span<const int32_t> targets(static_cast<const int32_t*>(tgt.data), static_cast<size_t>(tgt.numel()));
  int64_t counted = 0;
  for (int32_t t : targets) counted += t >= 0 ? 1 : 0;
  ASCENT_CHECK(counted > 0, "no target is counted");

  auto m = train::load_train_model(model_path, parse_recompute(kv.count("recompute") ? kv["recompute"] : "none"));
  if (mode == "grads") {
    if (kv.count("precision")) m->autodiff().set_numerics(parse_precision(kv["precision"]));
    const float scale = static_cast<float>(num("loss_scale", 1.0) / static_cast<double>(counted));
    const graph::LossSum l = m->autodiff().forward_backward(tokens, targets, B, scale);
    const int64_t measured = m->autodiff().peak_bytes();
    const int64_t planned = m->autodiff().planned_peak_bytes(B, tok.shape[1]);
    std::printf("loss %.17g\npeak_bytes %lld planned %lld\n", l.sum / static_cast<double>(l.count),
                static_cast<long long>(measured), static_cast<long long>(planned));
    const model::WeightSet g = m->grads();
    model::write_safetensors(out, model::hf_tensors(m->config(), g),
                             {{"loss", std::to_string(l.sum / static_cast<double>(l.count))}});
    return 0;
  }
  ASCENT_CHECK(mode == "adamw", "unknown mode {}", mode);
  train::AdamWOptions o;
  o.beta1 = num("b1", 0.9);
  o.beta2 = num("b2", 0.999);
  o.eps = num("eps", 1e-8);
  o.weight_decay = num("wd", 0.01);
  train::AdamW opt(m->params(), o);
  const int steps = static_cast<int>(num("steps", 3));
  for (int s = 0; s < steps; ++s) {
    m->params().zero_grad();
    const graph::LossSum l = m->autodiff().forward_backward(tokens, targets, B, 1.0f / static_cast<float>(counted));
    const train::GradCheck c = train::scale_and_check(m->params(), 1.0);
    train::clip_grad_norm(m->params(), c.norm, num("clip", 0.0));
    if (kv.count("grads")) {
      const model::WeightSet g = m->grads();
      model::write_safetensors(kv["grads"] + "-" + std::to_string(s) + ".safetensors",
                               model::hf_tensors(m->config(), g));
    }
    opt.step(m->params(), num("lr", 1e-3));
    std::printf("step %d loss %.9g grad_norm %.9g\n", s, l.sum / static_cast<double>(l.count), c.norm);
  }
  model::write_safetensors(out, model::hf_tensors(m->config(), m->params().weights()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_runner: %s\n", e.what());
    return 1;
  }
}
