// Placing matrices by thread (model/weight_layout.h) changes no result, for every integer and GGUF format (float
// matrices stay whole):
// - the matmuls over the split matrices give the same bits as over the matrices they were copied from (whose kernels
//   test_kernels checks against PyTorch): decode and prefill, alone, merged (matmul_multi) and with SwiGLU;
// - row_to_f32 and the embedding lookup read the same values;
// - each thread's rows of the calls lie one after another in call order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/packed_formats.h"
#include "ascent/kernels/cpu/packed_weight.h"
#include "ascent/model/weight_layout.h"
#include "ascent/tensor/quantize.h"

namespace ascent::model {
namespace {

using kernels::RowPart;

constexpr int64_t kK = 512;  // whole K-quant super-blocks and q4_0r/q8_0r groups

Tensor random_f32(int64_t rows, int64_t cols, std::mt19937& rng) {
  Tensor f = make_owned(DType::F32, {rows, cols});
  std::normal_distribution<float> nd(0.0f, 0.5f);
  auto* p = static_cast<float*>(const_cast<void*>(f.data));
  for (int64_t i = 0; i < f.numel(); ++i) p[i] = nd(rng);
  return f;
}

Tensor make_weight(const std::string& format, int64_t rows, std::mt19937& rng) {
  const Tensor f = random_f32(rows, kK, rng);
  if (format == "f32") return f;
  if (format == "f16") return convert(f, DType::F16);
  if (format == "bf16") return convert(f, DType::BF16);
  if (format == "q8_0") return convert(f, DType::Q8_0);
  if (format == "q4_0") return convert(f, DType::Q4_0);
  if (format == "int8") return quantize_int8(f);
  if (format == "int4") return quantize_int4(f, 32);
  if (format == "int4-awq") {  // an input scale beside the codes
    std::vector<float> s(static_cast<size_t>(kK));
    for (size_t i = 0; i < s.size(); ++i) s[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
    return quantize_int4(f, 128, s);
  }
  // q4_k, q6_k: random super-blocks, d (and dmin) fixed so values stay finite.
  const bool q4k = format == "q4_k";
  Tensor q = make_owned(q4k ? DType::Q4_K : DType::Q6_K, {rows, kK});
  auto* bytes = static_cast<uint8_t*>(const_cast<void*>(q.data));
  for (int64_t i = 0; i < q.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
  const int64_t blocks = q.nbytes() / static_cast<int64_t>(q4k ? sizeof(BlockQ4_K) : sizeof(BlockQ6_K));
  for (int64_t i = 0; i < blocks; ++i) {
    if (q4k) {
      reinterpret_cast<BlockQ4_K*>(bytes)[i].d = 0x1800;
      reinterpret_cast<BlockQ4_K*>(bytes)[i].dmin = 0x1400;
    } else {
      reinterpret_cast<BlockQ6_K*>(bytes)[i].d = 0x1800;
    }
  }
  return q;
}

// What the load would run for w without placement: repacked where the SIMD kernels take the repacked layout.
Tensor as_loaded(const Tensor& w) {
  const kernels::WeightFormat f = kernels::format_of(w.dtype), to = kernels::repacked_format(f);
  return to != f && kernels::repacked_kernel_runs(to) ? kernels::with_packed_copy(w, to) : w;
}

std::vector<float> matmul(const Tensor& w, const std::vector<float>& x, int64_t T, const std::vector<float>& bias) {
  std::vector<float> y(static_cast<size_t>(T * w.shape[0]), 0.25f), residual = y;
  kernels::matmul_forward(x.data(), T, w, bias.data(), y.data(), residual.data());
  return y;
}

class WeightLayout : public ::testing::TestWithParam<std::string> {};

TEST_P(WeightLayout, SplitMatricesComputeTheSameBits) {
  std::mt19937 rng(7);
  // Shapes with odd tails: 100 and 37 rows end mid-I4-block and mid-tile.
  const Tensor a = make_weight(GetParam(), 100, rng), b = make_weight(GetParam(), 37, rng);
  const Tensor g = make_weight(GetParam(), 200, rng), u = make_weight(GetParam(), 200, rng);
  for (int threads : {2, 3}) {
    WeightSet w;
    w.add("a", a, "");
    w.add("b", b, "");
    w.add("g", g, "");
    w.add("u", u, "");
    const std::vector<std::vector<const Tensor*>> calls = {{w.find("a"), w.find("b")}, {w.find("g"), w.find("u")}};
    place_weights(w, calls, {.repack = true, .copied = true, .by_thread = true, .threads = threads});
    if (GetParam() == "f32" || GetParam() == "f16" || GetParam() == "bf16") {  // float matrices stay whole, in place
      for (const auto& [name, t] : w.all()) {
        EXPECT_EQ(t.packed, nullptr) << name;
        EXPECT_TRUE(t.data == a.data || t.data == b.data || t.data == g.data || t.data == u.data) << name;
      }
      continue;
    }
    const std::map<std::string, const Tensor*> sources = {{"a", &a}, {"b", &b}, {"g", &g}, {"u", &u}};
    for (const char* name : {"a", "g", "u"}) {
      const Tensor& t = *w.find(name);
      const kernels::CpuMatrix m(t);
      ASSERT_TRUE(m.by_thread()) << name;
      EXPECT_EQ(t.data, sources.at(name)->data) << name;  // the tensor's own bytes stay for other readers
      EXPECT_EQ(m.parts().front().row0, 0) << name;
      int64_t next = 0;
      for (const RowPart& p : m.parts()) {
        EXPECT_EQ(p.row0, next) << name;
        next += p.rows.rows;
      }
      EXPECT_EQ(next, t.rows()) << name;
    }
    // Each part holds one thread's share of its call's rows (decode_row_shares), and the parts lie region by region
    // (thread 0's, then thread 1's, ...), in call order within a region.
    struct Placed {
      int thread, seq;
      const void* at;
      const RowPart* part;
    };
    std::vector<Placed> order;
    int seq = 0;
    const std::vector<std::vector<std::string>> names = {{"a", "b"}, {"g", "u"}};
    const std::vector<std::vector<const Tensor*>> originals = {{&a, &b}, {&g, &u}};
    for (size_t c = 0; c < names.size(); ++c) {
      const auto cuts = kernels::decode_row_shares(originals[c], threads);
      for (size_t i = 0; i < names[c].size(); ++i, ++seq) {
        const kernels::CpuMatrix m(*w.find(names[c][i]));
        ASSERT_TRUE(m.by_thread()) << names[c][i];
        size_t found = 0;
        for (int th = 0; th < threads; ++th) {
          const int64_t r0 = cuts[i][static_cast<size_t>(th)], r1 = cuts[i][static_cast<size_t>(th) + 1];
          if (r0 == r1) continue;
          for (const RowPart& p : m.parts()) {
            if (p.row0 != r0) continue;
            EXPECT_EQ(p.rows.rows, r1 - r0) << names[c][i];
            order.push_back({th, seq, p.rows.data, &p});
            ++found;
          }
        }
        EXPECT_EQ(found, m.parts().size()) << names[c][i];
      }
    }
    std::sort(order.begin(), order.end(), [](const Placed& x, const Placed& y) {
      return x.thread != y.thread ? x.thread < y.thread : x.seq < y.seq;
    });
    for (size_t i = 1; i < order.size(); ++i) EXPECT_LT(order[i - 1].at, order[i].at) << "part " << i;
    // Each part names what its thread streams next (RowPart::next, the pool's warming): the same thread's next part
    // on to the end of its run; the run's last part, the whole run from its first part (the next token).
    for (size_t i = 0; i < order.size(); ++i) {
      const bool last = i + 1 == order.size() || order[i + 1].thread != order[i].thread;
      size_t first = i;
      while (first > 0 && order[first - 1].thread == order[i].thread) --first;
      const std::span<const uint8_t> next = order[i].part->next;
      EXPECT_EQ(static_cast<const void*>(next.data()), last ? order[first].at : order[i + 1].at) << "part " << i;
      const std::span<const uint8_t> run = order[first].part->next;  // ends where every part's of this run ends
      EXPECT_EQ(next.data() + next.size(), run.data() + run.size()) << "part " << i;
      EXPECT_GE(static_cast<const void*>(next.data() + next.size()), order[last ? i : i + 1].at) << "part " << i;
    }
    const Tensor a0 = as_loaded(a), b0 = as_loaded(b), g0 = as_loaded(g), u0 = as_loaded(u);
    for (int64_t T : {1, 3, 9}) {
      const Tensor xt = random_f32(T, kK, rng);
      const std::vector<float> x(xt.f32(), xt.f32() + T * kK);
      std::vector<float> bias(200);
      for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.01f * static_cast<float>(i);
      EXPECT_EQ(matmul(*w.find("a"), x, T, bias), matmul(a0, x, T, bias)) << "T " << T << " threads " << threads;
      EXPECT_EQ(matmul(*w.find("g"), x, T, bias), matmul(g0, x, T, bias)) << "T " << T << " threads " << threads;

      std::vector<float> ya(static_cast<size_t>(T * 100)), yb(static_cast<size_t>(T * 37));
      std::vector<float> za = ya, zb = yb;
      const Tensor* split_ab[2] = {w.find("a"), w.find("b")};
      const Tensor* plain_ab[2] = {&a0, &b0};
      const float* biases[2] = {bias.data(), nullptr};
      float* outs_y[2] = {ya.data(), yb.data()};
      float* outs_z[2] = {za.data(), zb.data()};
      kernels::matmul_multi_forward(x.data(), T, split_ab, biases, outs_y);
      kernels::matmul_multi_forward(x.data(), T, plain_ab, biases, outs_z);
      EXPECT_EQ(ya, za) << "multi, T " << T;
      EXPECT_EQ(yb, zb) << "multi, T " << T;

      std::vector<float> sy(static_cast<size_t>(T * 200)), sz = sy;
      kernels::matmul_swiglu_forward(x.data(), T, *w.find("g"), *w.find("u"), sy.data());
      kernels::matmul_swiglu_forward(x.data(), T, g0, u0, sz.data());
      EXPECT_EQ(sy, sz) << "swiglu, T " << T;
    }
    // The backend copy's rows decode to the tensor's own values, part by part (kernels::row_to_f32).
    std::vector<float> r1(kK), r0(kK);
    const kernels::CpuMatrix m(*w.find("a"));
    for (int64_t r : {int64_t{0}, int64_t{47}, int64_t{99}}) {
      const RowPart& p = m.part_of(r);
      kernels::row_to_f32(p.rows, r - p.row0, r1.data());
      row_to_f32(a, r, r0.data());
      EXPECT_EQ(r1, r0) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, WeightLayout,
                         ::testing::Values("f32", "f16", "bf16", "int8", "int4", "int4-awq", "q8_0", "q4_0", "q4_k",
                                           "q6_k"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// The thread shares the layout follows are those the matmuls run: every row once, in whole row groups, thread t's
// before thread t + 1's across the weights of a call. A call too small to split stays on the first thread.
TEST(WeightLayout, DecodeRowShares) {
  const Tensor q = make_owned(DType::F32, {2048, 64}), k = make_owned(DType::F32, {512, 64});
  const Tensor* call[2] = {&q, &k};
  const auto cuts = kernels::decode_row_shares(call, 2);
  ASSERT_EQ(cuts.size(), 2u);
  EXPECT_EQ(cuts[0], (std::vector<int64_t>{0, 1280, 2048}));  // 2560 rows in two shares of 1280
  EXPECT_EQ(cuts[1], (std::vector<int64_t>{0, 0, 512}));
  const Tensor small = make_owned(DType::F32, {64, 64});
  const Tensor* one[1] = {&small};
  EXPECT_EQ(kernels::decode_row_shares(one, 2)[0], (std::vector<int64_t>{0, 64, 64}));
  const Tensor i4 = quantize_int4(make_owned(DType::F32, {1000, 128}), 32);
  const Tensor* blocks[1] = {&i4};
  const auto i4_cuts = kernels::decode_row_shares(blocks, 3);
  for (int64_t c : i4_cuts[0]) EXPECT_TRUE(c % kInt4Rows == 0 || c == 1000) << c;
  EXPECT_EQ(i4_cuts[0].front(), 0);
  EXPECT_EQ(i4_cuts[0].back(), 1000);
}

// A matrix stored once under two names (tied embeddings) and one read by no matmul stay whole and in place.
TEST(WeightLayout, SharedAndUnreadMatricesStayWhole) {
  std::mt19937 rng(3);
  const Tensor e = make_weight("int8", 300, rng), o = make_weight("int8", 300, rng);
  WeightSet w;
  w.add("emb", e, "");
  w.add("out", e, "");
  w.add("other", o, "");
  const std::vector<std::vector<const Tensor*>> calls = {{w.find("out")}};
  place_weights(w, calls, {.repack = true, .copied = true, .by_thread = true, .threads = 2});
  EXPECT_EQ(w.find("emb")->data, e.data);
  EXPECT_EQ(w.find("out")->data, e.data);
  EXPECT_EQ(w.find("other")->data, o.data);
  EXPECT_EQ(w.find("out")->packed, nullptr);
}

}  // namespace
}  // namespace ascent::model
