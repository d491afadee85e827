#include "ascent/train/train_model.h"

#include "ascent/model/gguf.h"
#include "ascent/model/loaders.h"
#include "ascent/model/model.h"
#include "ascent/model/transformer.h"

namespace ascent::train {

TrainModel::TrainModel(model::ModelConfig c, ParamSet p, graph::Recompute recompute)
    : cfg_(std::move(c)), params_(std::move(p)), inv_freq_(model::rope_inv_freq(cfg_)) {
  graph_ = model::build_transformer(cfg_, params_.weights(), inv_freq_);
  autodiff_ = std::make_unique<graph::Autodiff>(
      graph_,
      [this](const Tensor* w, bool overwrites) -> graph::Autodiff::GradTarget {
        Param* p = params_.find(w->data);
        if (p == nullptr) return {};
        graph::Autodiff::GradTarget t;
        t.data = params_.take_grad(*p, overwrites, t.zero);
        return t;
      },
      recompute);
}

int64_t TrainModel::planned_peak_bytes(graph::Recompute r, int64_t batch, int64_t seq) {
  graph::Autodiff a(
      graph_, [](const Tensor*, bool) { return graph::Autodiff::GradTarget{}; }, r);
  return a.planned_peak_bytes(batch, seq);
}

model::WeightSet TrainModel::grads() {
  params_.zero_cleared();
  model::WeightSet g("gradients");
  for (Param& p : params_.params()) {
    Tensor t;
    t.dtype = DType::F32;
    t.shape = p.value.shape;
    t.data = p.grad.data();
    g.add(p.name, t, "");
  }
  if (cfg_.tied_embeddings) g.add("output.weight", *g.find("token_embd.weight"), "");
  return g;
}

std::unique_ptr<TrainModel> load_train_model(const std::string& path, graph::Recompute recompute) {
  model::Format format{};
  model::ModelConfig cfg;
  model::WeightSet w(path);
  std::unique_ptr<model::GgufFile> gguf;
  model::read_checkpoint(path, format, cfg, w, gguf);
  model::finalize_weights(cfg, w);
  ParamSet p = ParamSet::from_weights(cfg, w);
  return std::make_unique<TrainModel>(cfg, std::move(p), recompute);
}

}  // namespace ascent::train
