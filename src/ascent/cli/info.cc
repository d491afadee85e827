// ascent info: what a model file holds (architecture, shapes, parameters, dtypes, sizes) and what loading it cost in
// resident memory. Weights are mapped, not copied, unless --no-mmap. Q8_0, Q4_0, Q4_K and Q6_K matrices are repacked
// where the AVX-512 or AVX2 kernels run, so they count as copies, unless --no-repack. It also says how many of the
// copied matrices the load placed by thread (model/weight_layout.h).
#include <cstdio>
#include <map>

#include "ascent/base/mapped_file.h"
#include "ascent/base/thread_pool.h"
#include "ascent/cli/commands.h"
#include "ascent/cli/runtime_flags.h"
#include "ascent/kernels/cpu/packed_weight.h"
#include "ascent/model/model.h"

namespace ascent::cli {
namespace {

struct InfoOptions {
  std::string path;
  bool no_mmap = false;
  bool no_repack = false;
  bool no_thread_layout = false;
  bool check_tensors = false;
  int threads = 0;
};

void run(const InfoOptions& o) {
  set_threads(o.threads);
  MappedFile::set_copy_files(o.no_mmap);
  const size_t rss_before = resident_bytes();
  auto m = model::Model::load(
      o.path, {.repack = !o.no_repack, .thread_layout = !o.no_thread_layout, .check_tensors = o.check_tensors});
  const size_t rss_after = resident_bytes();
  const auto& c = m->config();
  std::printf("format            %s\n", model::format_name(m->format()));
  std::printf("architecture      %s\n", model::arch_name(c.arch));
  std::printf("vocab             %lld\n", static_cast<long long>(c.vocab));
  std::printf("hidden            %lld\n", static_cast<long long>(c.dim));
  std::printf("layers            %lld\n", static_cast<long long>(c.n_layers));
  std::printf("heads             %lld (kv %lld, head dim %lld)\n", static_cast<long long>(c.n_heads),
              static_cast<long long>(c.n_kv_heads), static_cast<long long>(c.head_dim));
  std::printf("ffn               %lld\n", static_cast<long long>(c.ffn_dim));
  std::printf("context           %lld\n", static_cast<long long>(c.max_seq));
  if (c.uses_rope()) {
    std::printf("rope              theta %g, %s pairs%s\n", c.rope_theta,
                c.rope_style == RopeStyle::Half ? "rotate-half" : "interleaved",
                c.rope_scaling.enabled || !c.rope_freq_factors.empty() ? ", llama3 scaling" : "");
  }
  if (c.sliding_window > 0) {
    std::printf("sliding window    %lld", static_cast<long long>(c.sliding_window));
    if (c.sliding_from_layer > 0) std::printf(" (layers %lld on)", static_cast<long long>(c.sliding_from_layer));
    std::printf("\n");
  }
  std::printf("tied embeddings   %s\n", c.tied_embeddings ? "yes" : "no");
  std::printf("parameters        %lld\n", static_cast<long long>(m->parameter_count()));
  std::map<std::string, std::pair<int, int64_t>> by_type;
  for (const auto& [name, t] : m->weights().all()) {
    auto& e = by_type[std::string(dtype_name(t.dtype))];
    ++e.first;
    e.second += t.nbytes();
  }
  std::string types;
  for (const auto& [t, e] : by_type) {
    types += (types.empty() ? "" : ", ") + t + ": " + std::to_string(e.first) + " tensors";
  }
  std::printf("dtypes            %s\n", types.c_str());
  // What the CPU kernels read each matrix as: its file type, or the layout the load repacked it in.
  std::map<std::string, int> by_format;
  int split = 0;
  for (const auto& [name, t] : m->weights().all()) {
    if (t.shape.size() != 2 || t.dtype == DType::I32) continue;
    const kernels::CpuMatrix cm(t);
    ++by_format[std::string(kernels::format_name(cm.format()))];
    split += cm.by_thread() ? 1 : 0;
  }
  std::string formats;
  for (const auto& [f, n] : by_format) formats += (formats.empty() ? "" : ", ") + f + ": " + std::to_string(n);
  std::printf("kernel formats    %s matrices\n", formats.c_str());
  std::printf("thread layout     %d matrices placed by thread (%d threads)\n", split, ThreadPool::global().size());
  std::printf("file size         %.1f MiB\n", static_cast<double>(m->weights().file_bytes()) / (1 << 20));
  std::printf("rss after load    %.1f MiB (+%.1f MiB)\n", static_cast<double>(rss_after) / (1 << 20),
              (static_cast<double>(rss_after) - static_cast<double>(rss_before)) / (1 << 20));
}

}  // namespace

void add_info(CLI::App& app) {
  auto o = std::make_shared<InfoOptions>();
  auto* c = app.add_subcommand("info", "describe a model");
  c->add_option("-m,--model", o->path, kModelHelp)->required();
  add_no_mmap_flag(c, o->no_mmap);
  add_no_repack_flag(c, o->no_repack);
  add_no_thread_layout_flag(c, o->no_thread_layout);
  add_check_tensors_flag(c, o->check_tensors);
  c->add_option("-t,--threads", o->threads, "threads the weights are placed for (0: all cores)");
  c->callback([o] { run(*o); });
}

}  // namespace ascent::cli
