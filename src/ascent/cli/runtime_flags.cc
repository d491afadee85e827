#include "ascent/cli/runtime_flags.h"

#include <algorithm>
#include <utility>

#include "ascent/base/error.h"
#include "ascent/base/mapped_file.h"
#include "ascent/base/thread_pool.h"
#include "ascent/graph/passes.h"
#include "ascent/prof/roofline.h"

namespace ascent::cli {

void RuntimeFlags::add_to(CLI::App* c) {
  c->add_option("--passes", passes,
                "graph passes to switch off/on, e.g. -fuse,-plan (names: fuse, fuse-norm, "
                "fuse-attention, fuse-swiglu, fuse-residual, dce, cse, plan, inplace, all)");
  c->add_option(
      "--profile", profile,
      "write a Chrome trace (Perfetto, chrome://tracing) of every executed node, with each pool thread's matmul rows");
  c->add_option("--memory-csv", memory_csv, "write arena and resident memory over time as CSV");
  c->add_option("--warmup", warmup, "compile the plans of all shape buckets up to this many tokens at start");
  add_no_mmap_flag(c, no_mmap);
  add_no_repack_flag(c, no_repack);
  add_no_thread_layout_flag(c, no_thread_layout);
  c->add_option("--kv-type", kv_type,
                "the KV cache's element type: f32, or f16 (half the cache's memory and of what decode's attention "
                "reads, each K and V value rounded to f16 as stored; llama.cpp's default)")
      ->check(CLI::IsMember({"f32", "f16"}));
  add_check_tensors_flag(c, check_tensors);
}

void add_check_tensors_flag(CLI::App* c, bool& check_tensors) {
  c->add_flag("--check-tensors", check_tensors,
              "read every weight at load and fail, naming the tensor and position, on a NaN or infinite value or "
              "block scale (reads the whole file first)");
}

void add_no_thread_layout_flag(CLI::App* c, bool& no_thread_layout) {
  c->add_flag(
      "--no-thread-layout", no_thread_layout,
      "keep every matrix the load copies (repacked ones; with --no-mmap, all integer and GGUF ones) in one piece "
      "instead of placing each thread's decode rows of every matmul one after another");
}

void add_no_repack_flag(CLI::App* c, bool& no_repack) {
  c->add_flag("--no-repack", no_repack,
              "keep q8_0/q4_0/q4_k/q6_k matrices in the file's layout, used in place (no copy) with the slower "
              "kernels, instead of repacking them for the SIMD (AVX2, AVX-512) ones; f16/bf16 matrices off cache "
              "lines are used in place too");
}

void add_no_mmap_flag(CLI::App* c, bool& no_mmap) {
  c->add_flag(
      "--no-mmap", no_mmap,
      "read the model into memory (huge pages where allowed) instead of mapping it: slower load, faster decode");
}

void RuntimeFlags::before_load() const {
  ASCENT_CHECK(warmup >= 0, "--warmup: must be >= 0, got {}", warmup);  // before a load that may take minutes
  if (!passes.empty()) graph::set_default_passes(graph::parse_passes(passes, "--passes"));
  MappedFile::set_copy_files(no_mmap);
}

void RuntimeFlags::after_load(model::Session& s) {
  if (!profile.empty() || !memory_csv.empty()) {
    tracer = std::make_unique<prof::Tracer>();
    s.set_tracer(tracer.get());
  }
  if (warmup > 0) s.warm_up(warmup);
}

void RuntimeFlags::finish() const {
  if (!tracer) return;
  if (!profile.empty()) tracer->write_chrome_trace(profile);
  if (!memory_csv.empty()) tracer->write_memory_csv(memory_csv);
}

void RooflineFlags::add_to(CLI::App* c) {
  c->add_option("--roofline-gbps", gbps, "read bandwidth to judge against (default: measure now)");
  c->add_option("--roofline-gflops", gflops, "FP32 peak to judge against (default: measure now)");
  c->add_option("--roofline-int8-gops", int8_gops, "int8 dot-product peak to judge against (default: measure now)");
  c->add_option("--roofline-bf16-gflops", bf16_gflops, "bf16 dot-product peak to judge against (default: measure now)");
}

void RooflineFlags::resolve() {
  for (const auto& [flag, v] :
       {std::pair{"--roofline-gbps", gbps}, std::pair{"--roofline-gflops", gflops},
        std::pair{"--roofline-int8-gops", int8_gops}, std::pair{"--roofline-bf16-gflops", bf16_gflops}}) {
    ASCENT_CHECK(v >= 0, "{}: must be a positive figure, got {}", flag, v);
  }
  resolved_ = true;
  given_gbps_ = gbps > 0;
  given_gflops_ = gflops > 0;
  given_int8_ = int8_gops > 0;
  given_bf16_ = bf16_gflops > 0;
  remeasure();
}

void RooflineFlags::remeasure() {
  if (given_gbps_ && given_gflops_ && given_int8_ && given_bf16_) return;
  const auto r = prof::measure_roofline(ThreadPool::global().size(), int64_t{256} << 20);
  if (!given_gbps_) gbps = std::max(gbps, r.read_gbps_all);
  if (!given_gflops_) gflops = std::max(gflops, r.fp32_gflops_all);
  if (!given_int8_) int8_gops = std::max(int8_gops, r.int8_gops_all);
  if (!given_bf16_) bf16_gflops = std::max(bf16_gflops, r.bf16_gflops_all);
}

}  // namespace ascent::cli
