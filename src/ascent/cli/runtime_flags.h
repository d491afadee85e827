// Flags shared by the commands that run a model: --passes, --profile, --memory-csv, --warmup, --no-mmap, --no-repack,
// --no-thread-layout, --kv-type, --check-tensors.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "ascent/model/model.h"
#include "ascent/model/session.h"
#include "ascent/prof/tracer.h"

namespace ascent::cli {

struct RuntimeFlags {
  std::string passes;             // "-fuse,-plan"; empty keeps ASCENT_PASSES / defaults
  std::string profile;            // Chrome trace output
  std::string memory_csv;         // arena and resident memory over time
  int64_t warmup = 0;             // compile plans for buckets up to this many tokens at start
  bool no_mmap = false;           // read model files into memory instead of mapping them
  bool no_repack = false;         // keep the file's weight layouts (LoadOptions::repack)
  bool no_thread_layout = false;  // keep each copied matrix in one piece (LoadOptions::thread_layout)
  std::string kv_type = "f32";    // the KV cache's element type, f32 or f16 (LoadOptions::kv_type)
  bool check_tensors = false;     // read every weight's values at load (LoadOptions::check_tensors)

  void add_to(CLI::App* c);
  // Before Model::load: applies --passes and --no-mmap.
  void before_load() const;
  // What Model::load takes from the flags (--no-repack, --no-thread-layout).
  model::LoadOptions load_options() const {
    return {.repack = !no_repack,
            .thread_layout = !no_thread_layout,
            .kv_type = parse_dtype(kv_type),
            .check_tensors = check_tensors};
  }
  // After load: attaches the tracer when a profile is asked for, and warms up.
  void after_load(model::Session& s);
  // At the end: writes the requested files.
  void finish() const;

  std::unique_ptr<prof::Tracer> tracer;
};

// --no-mmap, --no-repack, --no-thread-layout and --check-tensors alone, for commands that load a model but take none of
// RuntimeFlags' other flags (info). The caller applies them: MappedFile::set_copy_files before Model::load, and
// LoadOptions.
void add_no_mmap_flag(CLI::App* c, bool& no_mmap);
void add_no_repack_flag(CLI::App* c, bool& no_repack);
void add_no_thread_layout_flag(CLI::App* c, bool& no_thread_layout);
void add_check_tensors_flag(CLI::App* c, bool& check_tensors);

// --roofline-gbps / -gflops / -int8-gops / -bf16-gflops for the commands that judge speed against the roofline
// (profile, bench): each either given, or measured by resolve() (and again by remeasure()).
struct RooflineFlags {
  double gbps = 0, gflops = 0;            // given by flag, else measured
  double int8_gops = 0, bf16_gflops = 0;  // likewise (0 after measuring: the CPU lacks the instruction)

  void add_to(CLI::App* c);
  // Measures what no flag gave.
  void resolve();
  // Measures again and keeps the higher of each measured figure: a peak is only ever underestimated by a busy
  // neighbour, so two measurements seconds apart (before and after a benchmark) are a steadier estimate.
  void remeasure();
  // Whether the read bandwidth came from --roofline-gbps (else it is measured); valid before resolve() too.
  bool gbps_given() const { return resolved_ ? given_gbps_ : gbps > 0; }

 private:
  bool resolved_ = false;
  bool given_gbps_ = false, given_gflops_ = false, given_int8_ = false, given_bf16_ = false;
};

}  // namespace ascent::cli
