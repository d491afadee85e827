// ascent train CONFIG.yaml [--resume]: trains a model as the config says (train/config.h, train/trainer.h).
#include <unistd.h>

#include <memory>
#include <string>

#include "ascent/cli/commands.h"
#include "ascent/train/config.h"
#include "ascent/train/trainer.h"

namespace ascent::cli {

void add_train(CLI::App& app) {
  struct Flags {
    std::string config;
    bool resume = false;
    int threads = -1;
  };
  auto f = std::make_shared<Flags>();
  auto* c = app.add_subcommand("train", "train or fine-tune a model as CONFIG.yaml says (docs/TRAINING.md)");
  c->add_option("config", f->config, "the run's YAML config")->required();
  c->add_flag("--resume", f->resume, "continue from the newest checkpoint in the config's output folder");
  c->add_option("-t,--threads", f->threads, "kernel threads (default: the config's threads, else all cores)");
  c->callback([f] {
    train::TrainConfig cfg = train::read_train_config(f->config);
    if (f->threads >= 0) cfg.threads = f->threads;
    train::RunOptions o;
    o.resume = f->resume;
    o.progress = ::isatty(STDERR_FILENO) == 1;
    train::run_training(cfg, o);
  });
}

}  // namespace ascent::cli
