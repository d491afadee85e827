// ascent train's loop: data in, optimizer steps, validation, logs and checkpoints out. One process, one shard of the
// data (the config's num_shards and shard_id prepare data parallelism; gradients are not yet averaged across ranks).
//
// A run's folder (the config's output): checkpoints/step-N/ (train/checkpoint.h), log.jsonl (one JSON object per
// step, and one per validation), loss.svg (the train and validation curves) and config.yaml (the config it ran).
// Every step's result depends only on the config, the data and the step: a run resumed from a checkpoint (--resume)
// computes bit for bit what the uninterrupted run computed.
#pragma once

#include <string>

#include "ascent/graph/autodiff.h"
#include "ascent/train/config.h"

namespace ascent::train {

struct RunOptions {
  bool resume = false;    // continue from the newest checkpoint in the output folder (or start there if none)
  bool progress = false;  // a live progress line (a terminal), else a plain line per log interval
};

void run_training(const TrainConfig& c, const RunOptions& o);

// What a precision level (with fp16 for O3's half type) rounds, and where: the run's Autodiff numerics.
graph::Numerics numerics_for(Precision p, bool fp16);

}  // namespace ascent::train
