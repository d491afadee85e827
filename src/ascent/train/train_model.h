// A model being trained: its config, its parameters (train/params.h), the graph model/transformer.h builds over them
// and the autodiff pass over that graph. Held by unique_ptr (the graph points into the parameters and the RoPE table).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ascent/graph/autodiff.h"
#include "ascent/graph/ir.h"
#include "ascent/model/config.h"
#include "ascent/train/params.h"

namespace ascent::train {

class TrainModel {
 public:
  TrainModel(model::ModelConfig c, ParamSet p, graph::Recompute recompute);
  TrainModel(const TrainModel&) = delete;
  TrainModel& operator=(const TrainModel&) = delete;

  const model::ModelConfig& config() const { return cfg_; }
  ParamSet& params() { return params_; }
  graph::Autodiff& autodiff() { return *autodiff_; }
  // The peak activation memory a step of batch x seq would plan under another recompute setting.
  int64_t planned_peak_bytes(graph::Recompute r, int64_t batch, int64_t seq);
  // The gradients as f32 views under the parameters' names (for writers: model/hf_writer.h).
  model::WeightSet grads();

 private:
  model::ModelConfig cfg_;
  ParamSet params_;
  std::vector<float> inv_freq_;
  graph::Graph graph_;
  std::unique_ptr<graph::Autodiff> autodiff_;
};

// Reads a checkpoint of any supported format (HF folder, GGUF, Ascent file, llama2.c) into f32 parameters.
std::unique_ptr<TrainModel> load_train_model(const std::string& path, graph::Recompute recompute);

}  // namespace ascent::train
