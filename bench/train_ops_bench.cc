// train_ops_bench: milliseconds per call of the training kernels other than sgemm (ops.h "Training") at the shapes
// of a GPT-2-124M-shaped model (768 wide, 3072 MLP, 12 heads of 64, vocab 50257) trained at 4 sequences of 64
// tokens (256 rows). Each op runs once to warm up, then --reps times; prints the median and best. The active ISA
// runs (ASCENT_ISA forces one).
//   train_ops_bench [--threads 0] [--reps 5] [--chunk 128] [--filter TEXT]
// --threads 0 means all cores; --chunk is lm_head_cross_entropy's rows per chunk; --filter runs only the ops whose
// name contains TEXT.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ascent/base/thread_pool.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/ops.h"
#include "bench_args.h"

namespace {

namespace k = ascent::kernels;

constexpr int64_t kBatch = 4, kSeq = 64, kRows = kBatch * kSeq, kWidth = 768, kMlp = 3072, kHeads = 12, kHeadDim = 64,
                  kVocab = 50257;

std::vector<float> random_vector(int64_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int usage() {
  std::fprintf(stderr, "usage: train_ops_bench [--threads N] [--reps N] [--chunk N] [--filter TEXT]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, reps = 5, chunk = 128;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--threads" || a == "--reps" || a == "--chunk" || a == "--filter") && i + 1 < argc) {
      const char* v = argv[++i];
      if (a == "--filter") {
        filter = v;
        continue;
      }
      if (!parse_count("train_ops_bench", a, v, /*allow_zero=*/a == "--threads",
                       a == "--threads" ? threads
                       : a == "--reps"  ? reps
                                        : chunk)) {
        return 2;
      }
    } else {
      return usage();
    }
  }
  threads = start_threads(threads);
  std::printf("ISA %s, %d threads, median (best) of %d runs, ms per call\n", k::isa_name(k::active_isa()), threads,
              reps);
  std::printf("| op | shape | ms |\n|---|---|---|\n");

  std::mt19937 rng(1);
  const int64_t n_mlp = kRows * kMlp, n_wide = kRows * kWidth, n_qkv = kRows * kHeads * kHeadDim;
  const std::vector<float> x_mlp = random_vector(n_mlp, 1.5f, rng), up = random_vector(n_mlp, 1.0f, rng),
                           dy_mlp = random_vector(n_mlp, 1.0f, rng);
  std::vector<float> out_mlp(static_cast<size_t>(n_mlp)), out2_mlp(static_cast<size_t>(n_mlp));
  const std::vector<float> q = random_vector(n_qkv, 1.0f, rng), kk = random_vector(n_qkv, 1.0f, rng),
                           v = random_vector(n_qkv, 1.0f, rng), dout = random_vector(n_qkv, 1.0f, rng);
  std::vector<float> att(static_cast<size_t>(n_qkv)), dq(att.size()), dk(att.size()), dv(att.size());
  const k::AttentionTrainDims ad{kBatch, kSeq, kHeads, kHeads, kHeadDim, 1.0f / std::sqrt(float{kHeadDim}), 0};
  k::attention_train_forward(q.data(), kk.data(), v.data(), ad, att.data());
  const std::vector<float> x_wide = random_vector(n_wide, 1.0f, rng), dy_wide = random_vector(n_wide, 1.0f, rng),
                           ln_w = random_vector(kWidth, 1.0f, rng);
  std::vector<float> dx_wide(static_cast<size_t>(n_wide)), ln_dw(kWidth), ln_db(kWidth);
  const std::vector<float> head_w = random_vector(kVocab * kWidth, 0.02f, rng);
  std::vector<float> head_dw(head_w.size());
  std::vector<int32_t> targets(kRows);
  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  for (int32_t& t : targets) t = token(rng);

  struct Op {
    const char* name;
    const char* shape;
    std::function<void()> run;
  };
  const std::vector<Op> ops = {
      {"gelu_tanh_forward", "256x3072", [&] { k::gelu_tanh_forward(x_mlp.data(), n_mlp, out_mlp.data()); }},
      {"gelu_tanh_backward", "256x3072",
       [&] { k::gelu_tanh_backward(x_mlp.data(), dy_mlp.data(), n_mlp, out_mlp.data()); }},
      {"swiglu_backward", "256x3072",
       [&] { k::swiglu_backward(x_mlp.data(), up.data(), dy_mlp.data(), n_mlp, out_mlp.data(), out2_mlp.data()); }},
      {"attention_train_forward", "B4 T64 H12 D64",
       [&] { k::attention_train_forward(q.data(), kk.data(), v.data(), ad, att.data()); }},
      {"attention_backward", "B4 T64 H12 D64",
       [&] {
         k::attention_backward(q.data(), kk.data(), v.data(), att.data(), dout.data(), ad, dq.data(), dk.data(),
                               dv.data());
       }},
      {"layer_norm_backward", "256x768",
       [&] {
         k::layer_norm_backward(x_wide.data(), kRows, kWidth, ln_w.data(), 1e-5f, dy_wide.data(), dx_wide.data(),
                                ln_dw.data(), ln_db.data());
       }},
      {"lm_head_cross_entropy", "R256 C768 V50257",
       [&] {
         k::lm_head_cross_entropy(x_wide.data(), kRows, kWidth, head_w.data(), kVocab, targets, 1.0f, dx_wide.data(),
                                  head_dw.data(), /*dw_zero=*/false, chunk);
       }},
  };
  for (const Op& op : ops) {
    if (!filter.empty() && std::strstr(op.name, filter.c_str()) == nullptr) continue;
    std::vector<double> ms;
    for (int r = 0; r <= reps; ++r) {
      const double t0 = seconds();
      op.run();
      if (r > 0) ms.push_back((seconds() - t0) * 1e3);
    }
    std::sort(ms.begin(), ms.end());
    std::string shape = op.shape;
    if (std::strcmp(op.name, "lm_head_cross_entropy") == 0) shape += " chunk " + std::to_string(chunk);
    std::printf("| %s | %s | %.3f (%.3f) |\n", op.name, shape.c_str(), ms[ms.size() / 2], ms.front());
    std::fflush(stdout);
  }
  return 0;
}
