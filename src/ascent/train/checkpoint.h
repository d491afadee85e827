// Training checkpoints: OUTPUT/checkpoints/step-NNNNNNNN/ holds a Hugging Face folder (model.safetensors, config.json,
// generation_config.json, the tokenizer's files) that every Ascent command loads as it is, plus optimizer.safetensors
// (AdamW's moments) and trainer_state.json (step, data position, loss scale, and a hash of both tensor files). A
// checkpoint is written into a hidden temporary folder that is renamed into place once complete, so a run killed
// while writing leaves the previous checkpoint as the newest one; restoring checks every hash, name and shape first and
// changes nothing in the run when a file is damaged.
#pragma once

#include <cstdint>
#include <string>

#include "ascent/model/config.h"
#include "ascent/train/optimizer.h"
#include "ascent/train/params.h"

namespace ascent::train {

struct TrainerState {
  int64_t step = 0;            // optimizer steps completed (skipped ones included)
  uint64_t data_position = 0;  // samples the data sampler has handed out
  double loss_scale = 1.0;     // fp16's dynamic loss scale (1 otherwise)
  int64_t clean_steps = 0;     // steps since the scale last changed
  uint64_t seed = 0;           // the run's data seed, checked on resume
};

// Writes checkpoint `state.step` under root (created if missing); returns its folder. tokenizer: a tokenizer file or
// a folder whose tokenizer files are copied along.
std::string write_checkpoint(const std::string& root, const model::ModelConfig& c, const ParamSet& params, AdamW& opt,
                             const TrainerState& state, const std::string& tokenizer);
// The newest complete checkpoint folder under root, or "" when there is none.
std::string latest_checkpoint(const std::string& root);
// Every complete checkpoint under root, oldest first.
std::vector<std::string> list_checkpoints(const std::string& root);
// Removes all but the newest `keep` checkpoints (and leftovers of interrupted writes).
void prune_checkpoints(const std::string& root, int64_t keep);
// Restores parameters and moments from a checkpoint folder; throws naming the file or tensor at fault, before
// anything is changed, when a file is missing, truncated, corrupted or of another model.
TrainerState restore_checkpoint(const std::string& dir, const model::ModelConfig& c, ParamSet& params, AdamW& opt);

}  // namespace ascent::train
