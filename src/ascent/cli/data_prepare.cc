// ascent data prepare: text files -> a tokenized data folder for training (train/data_prepare.h).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "ascent/cli/commands.h"
#include "ascent/train/data_prepare.h"

namespace ascent::cli {
namespace {

std::string megabytes(uint64_t bytes) {
  return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6);
}

void run(const train::PrepareOptions& o) {
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  auto bar = [](const train::PrepareProgress& p) {
    const double frac = p.bytes_total > 0 ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1;
    constexpr int kWidth = 30;
    const int filled = std::clamp(static_cast<int>(frac * kWidth), 0, kWidth);
    std::fprintf(stderr, "\rdata prepare [%s%s] %3.0f%% %s / %s, %.0f tokens/s\x1b[K",
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kWidth - filled), ' ').c_str(), 100 * frac,
                 megabytes(p.bytes_done).c_str(), megabytes(p.bytes_total).c_str(),
                 p.seconds > 0 ? static_cast<double>(p.tokens) / p.seconds : 0.0);
    std::fflush(stderr);
  };
  const train::PrepareResult r =
      train::prepare_data(o, tty ? bar : std::function<void(const train::PrepareProgress&)>());
  if (tty) std::fputc('\n', stderr);
  const int64_t tokens = r.tokens[0] + r.tokens[1];
  std::printf(
      "%s: train %lld tokens in %lld documents, val %lld tokens in %lld documents (%s, vocab %lld); %s in "
      "%.2f s, %.0f tokens/s\n",
      o.out.c_str(), static_cast<long long>(r.tokens[0]), static_cast<long long>(r.documents[0]),
      static_cast<long long>(r.tokens[1]), static_cast<long long>(r.documents[1]), r.dtype.c_str(),
      static_cast<long long>(r.vocab_size), megabytes(r.bytes).c_str(), r.seconds,
      r.seconds > 0 ? static_cast<double>(tokens) / r.seconds : 0.0);
}

}  // namespace

void add_data(CLI::App& app) {
  auto* data = app.add_subcommand("data", "training data: `data prepare` tokenizes text files into a data folder");
  data->require_subcommand(1);
  auto o = std::make_shared<train::PrepareOptions>();
  o->workers = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 256u));
  auto* c = data->add_subcommand("prepare", "split text files into documents, tokenize them, write train/val files");
  c->add_option("--input", o->inputs, "UTF-8 text files; blank lines separate documents")->required();
  c->add_option("--tokenizer", o->tokenizer, "tokenizer.json, tokenizer.model, .gguf, tokenizer.bin or a folder")
      ->required();
  c->add_option("--out", o->out, "the data folder to write (made if missing)")->required();
  c->add_option("--val-fraction", o->val_fraction, "share of documents held out for validation, in [0, 1)")
      ->capture_default_str();
  c->add_option("--workers", o->workers, "tokenizer threads")->capture_default_str();
  c->add_option("--seed", o->seed, "seed of the train/val draw")->capture_default_str();
  c->callback([o] { run(*o); });
}

}  // namespace ascent::cli
