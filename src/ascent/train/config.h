// ascent train's CONFIG.yaml, read strictly: an unknown key, a value of the wrong type or an impossible shape is an
// error naming the file and the key ("run.yaml: train.batch_size: expected a positive integer, got 'eight'").
// docs/TRAINING.md lists every key with its default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ascent/graph/autodiff.h"
#include "ascent/model/config.h"
#include "ascent/train/optimizer.h"

namespace ascent::train {

// The arithmetic of a run (AMP levels as Apex defines them). Master weights, moments and the loss stay f32 in all.
enum class Precision {
  O0,  // fp32
  O1,  // matmuls in bf16 (inputs rounded to bf16, f32 accumulation)
  O2,  // O1, and every activation rounded to bf16, except norms, softmax and the loss
  O3,  // everything in bf16 or fp16 (half_type); fp16 with dynamic loss scaling
};
const char* precision_name(Precision p);

struct TrainConfig {
  std::string path;  // the config file, for messages

  // model: either init_from (a checkpoint to fine-tune) or an architecture and shape.
  std::string init_from;
  model::ModelConfig model;  // arch and shape when init_from is empty; vocab comes from the tokenizer
  uint64_t init_seed = 1;
  std::string tokenizer;  // a tokenizer file or model folder; default: init_from

  std::string data_dir;
  int num_shards = 1, shard_id = 0;

  int64_t batch_size = 8, seq_len = 128, grad_accum = 1, steps = 1000;
  uint64_t seed = 1;

  Schedule schedule;
  AdamWOptions adamw;
  double grad_clip = 1.0;

  Precision precision = Precision::O0;
  bool fp16 = false;                  // O3's half type: fp16 (with loss scaling) instead of bf16
  double loss_scale_init = 65536.0;   // fp16 only
  int64_t loss_scale_window = 200;    // clean steps before the scale doubles
  int64_t inject_overflow_step = -1;  // testing: step N (1-based, as logged) gets an infinite gradient

  graph::Recompute recompute = graph::Recompute::None;

  int64_t eval_interval = 100, eval_batches = 8;
  int64_t checkpoint_interval = 200, keep_checkpoints = 3;
  std::string output;
  int threads = 0;  // 0: the machine's
  int64_t log_interval = 1;
};

// Reads and checks `path`; throws naming the file and the key at fault.
TrainConfig read_train_config(const std::string& path);

}  // namespace ascent::train
