// op_runner: runs one CPU kernel on .npy inputs and writes its output as .npy, so tests/e2e/test_ops.py can check
// every op against PyTorch over odd shapes and dtypes.
//   op_runner OP OUT.npy IN.npy... [key=value...]
// Activation inputs given as f16/bf16 arrays are widened to f32 (the kernels' activation type); matmul and
// embedding weights are used in their storage type, and wtype=q8_0|q8_0r|q4_0|q4_0r|int8|int4 (group=G, input_scale=1)
// quantizes an f32 weight first. wtype=q4_k|q6_k takes the weight as GGUF super-blocks instead (we have no K-quant
// quantizer): a uint16 array (N, row bytes / 2) holding each row's blocks, for K = x's columns (an embedding's: k=K);
// wtype=q4_kr (q6_kr) takes Q4_K (Q6_K) blocks and repacks them as models load them for the AVX-512 kernel.
// attention's k and v are rows (positions, Hkv*D); kv_block=B (k_tiles=1) copies them into that cache layout first
// (ops.h), kv_f16=1 (with k_tiles=1) into f16 caches, each value rounded as kv_store's f16 form does.
// act_quant writes the matmul engine's int8 activations for x (codes, then scales; blocks=1: per 32 columns), so
// test_kernels.py can check each ISA's quantizer bitwise.
// awq W.npy X.npy group=G: activation-aware int4 (quant/awq.h) of weight W (N, K) calibrated on the rows of X (R, K);
// writes (N + 1, K + G) values: per row its K codes (-8..7) then its G group scales, then the input_scale (K; 1s when
// none was chosen) padded with zeros; prints the chosen alpha and the three relative output errors.
// sample LOGITS.npy [key=value...]: the sampler (engine/sampler.h) over rows of logits, for tests/e2e/test_sampling.py.
// Training kernels (ops.h "Training"), for tests/e2e/test_backward_ops.py. Each writes its outputs flattened and
// concatenated in the order listed, one 1-D array; a parameter gradient's input (DW0...) is its value before the +=.
//   embedding_backward DY (T, C) IDS DTABLE0 (V, C): dtable
//   mul_vec_backward X (T, C) W (P) DY DW0: dx, dw
//   rms_norm_backward X W DY DW0 group=G eps=E (bare=1: X DY only, no weight): dx, dw
//   layer_norm_backward X W DY DW0 DB0 eps=E: dx, dw, db
//   rope_backward DY POS dim= theta= style=: dx
//   attention_train_forward Q K V batch= heads= kv_heads= window=: out
//   attention_backward Q K V DOUT batch= heads= kv_heads= window=: dq, dk, dv (out from attention_train_forward)
//   gelu_tanh_backward X DY: dx; swiglu_backward GATE UP DY: dgate, dup
//   lm_head_cross_entropy X (R, C) W (V, C) TARGETS DW0 loss_scale= chunk= (grad=0: the loss alone): dx, dw; prints
//   "loss L" (the returned double).
// alias=1 has dx written over dy's buffer (swiglu_backward: alias=gate|up names the output); threads=N runs on a pool
// of N threads.
// sgemm A.npy B.npy [C.npy] ta=0|1 tb=0|1 beta=B [threads=N] [bf16=1]: C = op(A) op(B) + beta C (kernels/cpu/sgemm.h;
// C zeros when not given), A and B f32 as stored (transposed when ta/tb); threads=N runs it on an N-thread pool.
// Prints "variant NAME": the kernel variant that ran (a matmul's: the one gemm_rows dispatched for its weight type),
// so a test knows what it checked, not only what it asked for.
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "ascent/base/cpu_features.h"
#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/engine/sampler.h"
#include "ascent/kernels/cpu/gemm.h"
#include "ascent/kernels/cpu/isa.h"
#include "ascent/kernels/cpu/ops.h"
#include "ascent/kernels/cpu/packed_weight.h"
#include "ascent/kernels/cpu/sgemm.h"
#include "ascent/quant/awq.h"
#include "ascent/tensor/npy.h"
#include "ascent/tensor/quantize.h"

using namespace ascent;

namespace {

std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  dequantize_row(t.dtype, t.data, v.data(), t.numel());
  return v;
}

std::vector<int32_t> as_i32(const Tensor& t) {
  ASCENT_CHECK(t.dtype == DType::I32, "expected an int32 array");
  const auto* p = static_cast<const int32_t*>(t.data);
  return {p, p + t.numel()};
}

Tensor f32_tensor(std::vector<float> v, Shape s) {
  Tensor t = make_owned(DType::F32, std::move(s));
  std::copy(v.begin(), v.end(), static_cast<float*>(const_cast<void*>(t.data)));
  return t;
}

// The arrays concatenated, flattened.
std::vector<float> concat(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<float> all;
  for (const auto* p : parts) all.insert(all.end(), p->begin(), p->end());
  return all;
}

int run(int argc, char** argv) {
  ASCENT_CHECK(argc >= 3, "usage: op_runner OP OUT.npy IN.npy... [key=value...]");
  const std::string op = argv[1], out_path = argv[2];
  std::vector<Tensor> in;
  std::map<std::string, std::string> attr;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (eq != std::string::npos && a.find(".npy") == std::string::npos) {
      attr[a.substr(0, eq)] = a.substr(eq + 1);
    } else {
      in.push_back(read_npy(a));
    }
  }
  auto num = [&](const char* k) { return std::stod(attr.at(k)); };
  auto inum = [&](const char* k) { return static_cast<int64_t>(std::stoll(attr.at(k))); };
  // RoPE's inverse frequencies for head width D at theta= (rope and rope_backward), as Hugging Face computes them.
  auto rope_table = [&](int64_t D) {
    std::vector<float> inv(static_cast<size_t>(D / 2));
    const auto theta = static_cast<float>(num("theta"));
    for (int64_t i = 0; i < D / 2; ++i) {
      inv[static_cast<size_t>(i)] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(D));
    }
    return inv;
  };
  if (attr.count("threads") != 0) ThreadPool::set_global_threads(static_cast<int>(inum("threads")));
  const bool alias = attr.count("alias") != 0;
  const Tensor& x = in.at(0);
  const int64_t rows = x.rows(), cols = x.cols();
  std::vector<float> y;
  Shape yshape = x.shape;
  kernels::Isa variant = kernels::active_isa();

  if (op == "matmul" || op == "embedding") {
    Tensor w = op == "matmul" ? in.at(1) : in.at(0);
    // With input_scale=1 the third input is the int weight's input_scale (K,) instead of a bias.
    const bool has_input_scale = attr.count("input_scale") != 0;
    std::vector<float> input_scale;
    if (has_input_scale) input_scale = as_f32(in.at(2));
    if (attr.count("wtype")) {
      const std::string wt = attr["wtype"];
      if (wt == "q4_k" || wt == "q6_k" || wt == "q4_kr" || wt == "q6_kr") {
        const DType kt = wt == "q6_k" || wt == "q6_kr" ? DType::Q6_K : DType::Q4_K;
        const Shape shape{w.shape.at(0), attr.count("k") != 0 ? inum("k") : cols};  // k=K: an embedding's width
        ASCENT_CHECK(w.nbytes() == shape[0] * row_bytes(kt, shape[1]), "matmul: {} blocks of {} bytes for {} weight {}",
                     w.shape[0], w.nbytes(), wt, shape_str(shape));
        w.dtype = kt;
        w.shape = shape;
        if (wt == "q4_kr" || wt == "q6_kr") {  // as a model load repacks them for the SIMD kernels
          w = kernels::with_packed_copy(w, kernels::repacked_format(kernels::format_of(kt)));
        }
      } else if (wt == "q4_0r" || wt == "q8_0r") {  // as a model load repacks them for the SIMD kernels
        w = convert(w, wt == "q4_0r" ? DType::Q4_0 : DType::Q8_0);
        w = kernels::with_packed_copy(w, kernels::repacked_format(kernels::format_of(w.dtype)));
      } else if (wt == "int8") {
        w = quantize_int8(w, input_scale);
      } else if (wt == "int4") {
        w = quantize_int4(w, static_cast<int>(inum("group")), input_scale);
      } else {
        w = convert(w, parse_dtype(wt));
      }
    }
    if (op == "matmul") {
      variant = kernels::matmul_isa(kernels::CpuMatrix(w).format());
      const auto xv = as_f32(x);
      std::vector<float> bias;
      if (in.size() > 2 && !has_input_scale) bias = as_f32(in[2]);
      y.resize(static_cast<size_t>(rows * w.shape[0]));
      kernels::matmul_forward(xv.data(), rows, w, bias.empty() ? nullptr : bias.data(), y.data());
      yshape = {rows, w.shape[0]};
    } else {
      const auto ids = as_i32(in.at(1));
      y.resize(ids.size() * static_cast<size_t>(w.shape[1]));
      if (w.packed != nullptr) {  // the rows of the backend's copy, decoded from its layout
        const kernels::CpuMatrix m(w);
        for (size_t i = 0; i < ids.size(); ++i) {
          const kernels::RowPart& p = m.part_of(ids[i]);
          kernels::row_to_f32(p.rows, ids[i] - p.row0, y.data() + i * static_cast<size_t>(w.shape[1]));
        }
      } else {
        kernels::embedding_forward(w, ids, y.data());
      }
      yshape = {static_cast<int64_t>(ids.size()), w.shape[1]};
    }
  } else if (op == "sgemm") {
    const bool ta = inum("ta") != 0, tb = inum("tb") != 0;
    const Tensor& b = in.at(1);
    ASCENT_CHECK(x.dtype == DType::F32 && b.dtype == DType::F32, "sgemm: A and B must be f32 arrays");
    ASCENT_CHECK(x.shape.size() == 2 && b.shape.size() == 2, "sgemm: A and B must be 2-D");
    const int64_t M = ta ? cols : rows, K = ta ? rows : cols, N = tb ? b.rows() : b.cols();
    ASCENT_CHECK((tb ? b.cols() : b.rows()) == K, "sgemm: op(A) is {}x{} but op(B) is {}x{}", M, K,
                 tb ? b.cols() : b.rows(), N);
    if (in.size() > 2) {
      ASCENT_CHECK(in[2].numel() == M * N, "sgemm: C has {} elements, expected {}x{}", in[2].numel(), M, N);
      y = as_f32(in[2]);
    } else {
      y.assign(static_cast<size_t>(M * N), 0.0f);
    }
    if (attr.count("threads") != 0) ThreadPool::set_global_threads(static_cast<int>(inum("threads")));
    const kernels::GemmOperand a_op{static_cast<const float*>(x.data), cols, ta};
    const kernels::GemmOperand b_op{static_cast<const float*>(b.data), b.cols(), tb};
    const bool bf16 = attr.count("bf16") != 0 && inum("bf16") != 0, f16 = attr.count("f16") != 0 && inum("f16") != 0;
    ASCENT_CHECK(!(bf16 && f16), "sgemm: bf16=1 and f16=1 exclude each other");
    (bf16  ? kernels::sgemm_bf16
     : f16 ? kernels::sgemm_f16
           : kernels::sgemm)(M, N, K, a_op, b_op, static_cast<float>(num("beta")), y.data(), N);
    yshape = {M, N};
  } else if (op == "awq") {
    const Tensor w32 = to_f32(x);
    const auto calib = as_f32(in.at(1));
    const int64_t K = w32.shape[1];
    quant::CalibRows c;
    c.add(calib.data(), in[1].rows(), in[1].cols());
    const quant::AwqResult a = quant::awq_int4(w32, static_cast<int>(inum("group")), c);
    const int64_t N = w32.shape[0], Kp = padded_cols(DType::I4, K), G = Kp / a.q.group, width = K + G;
    const auto* data = static_cast<const uint8_t*>(a.q.data);
    y.assign(static_cast<size_t>((N + 1) * width), 0.0f);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < K; ++k) y[static_cast<size_t>(n * width + k)] = int4_code(data, Kp, n, k) - 8;
      for (int64_t g = 0; g < G; ++g) y[static_cast<size_t>(n * width + K + g)] = a.q.scales[int4_scale_index(G, n, g)];
    }
    for (int64_t k = 0; k < K; ++k) y[static_cast<size_t>(N * width + k)] = a.q.input_scale ? a.q.input_scale[k] : 1.0f;
    yshape = {N + 1, width};
    std::printf("alpha %.9g err_rtn %.17g err_scaled %.17g err_final %.17g\n", a.alpha, a.err_rtn, a.err_scaled,
                a.err_final);
  } else if (op == "act_quant") {
    // The matmul engine's int8 activations for x: per token (an int8 weight's; input_scale=1 takes the second input
    // as its input_scale) or, with blocks=1, per 32 columns (a GGUF weight's). Row t holds its K codes, then its
    // scale(s) d: one per token, or K / 32.
    const bool blocks = attr.count("blocks") != 0;
    std::vector<float> input_scale;
    if (attr.count("input_scale") != 0) input_scale = as_f32(in.at(1));
    Tensor w;  // only its type, shape and input_scale are read
    w.dtype = blocks ? DType::Q8_0 : DType::I8;
    w.shape = {1, cols};
    w.input_scale = input_scale.empty() ? nullptr : input_scale.data();
    const auto xv = as_f32(x);
    kernels::GemmInput gi;
    kernels::prepare_gemm_input(xv.data(), rows, kernels::view_of(w), gi);
    const int64_t m = blocks ? cols / 32 : 1, width = cols + m;
    y.resize(static_cast<size_t>(rows * width));
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t k = 0; k < cols; ++k)
        y[static_cast<size_t>(t * width + k)] = gi.q[static_cast<size_t>(t * gi.Kp + k)];
      for (int64_t b = 0; b < m; ++b) {
        y[static_cast<size_t>(t * width + cols + b)] = gi.d[static_cast<size_t>(blocks ? t * gi.Kp / 32 + b : t)];
      }
    }
    yshape = {rows, width};
  } else if (op == "rms_norm") {
    const auto xv = as_f32(x), w = as_f32(in.at(1));
    y.resize(xv.size());
    kernels::rms_norm_forward(xv.data(), rows, cols, w.data(), static_cast<float>(num("eps")), inum("group"), y.data());
  } else if (op == "layer_norm") {
    const auto xv = as_f32(x), w = as_f32(in.at(1)), b = as_f32(in.at(2));
    y.resize(xv.size());
    kernels::layer_norm_forward(xv.data(), rows, cols, w.data(), b.data(), static_cast<float>(num("eps")), y.data());
  } else if (op == "rope") {
    y = as_f32(x);
    const auto pos = as_i32(in.at(1));
    const int64_t D = inum("dim");
    const auto inv = rope_table(D);
    const auto style = attr.at("style") == "half" ? RopeStyle::Half : RopeStyle::Interleaved;
    kernels::rope_forward(y.data(), rows, cols / D, D, pos, inv, style);
  } else if (op == "attention") {
    const auto q = as_f32(x), k = as_f32(in.at(1)), v = as_f32(in.at(2));
    const int64_t H = inum("heads"), D = cols / H;
    const kernels::AttentionDims d{rows,
                                   inum("n_past"),
                                   H,
                                   inum("kv_heads"),
                                   D,
                                   1.0f / std::sqrt(static_cast<float>(D)),
                                   inum("window"),
                                   attr.count("kv_block") != 0 ? inum("kv_block") : 0,
                                   attr.count("k_tiles") != 0 && inum("k_tiles") != 0};
    ASCENT_CHECK(in[1].rows() == d.n_past + rows, "k must have n_past + T rows");
    const bool kv_f16 = attr.count("kv_f16") != 0 && inum("kv_f16") != 0;
    // An f16 cache is built in kv_block's layout; without one the f32 rows would run and a test would pass unknowingly.
    ASCENT_CHECK(!kv_f16 || d.kv_block > 0, "attention: kv_f16=1 needs kv_block=B");
    y.resize(q.size());
    if (d.kv_block == 0) {
      kernels::attention_forward(q.data(), k.data(), v.data(), d, y.data());
    } else {
      // k and v come as rows (positions, Hkv*D); the kernel reads them from caches in kv_block's layout.
      const int64_t S = in[1].rows(), kvw = d.n_kv_heads * D;
      const int64_t padded = (S + d.kv_block - 1) / d.kv_block * d.kv_block;
      // NaN past the last position: V never reads it, K in key tiles reads it into masked lanes only.
      auto store_and_attend = [&](auto nan) {
        std::vector<decltype(nan)> kb(static_cast<size_t>(padded * kvw), nan), vb(kb.size(), nan);
        for (int64_t j = 0; j < S; ++j) {
          for (int64_t h = 0; h < d.n_kv_heads; ++h) {
            const size_t src = static_cast<size_t>(j * kvw + h * D);
            kernels::kv_store(d, kb.data(), vb.data(), j, h, k.data() + src, v.data() + src);
          }
        }
        kernels::attention_forward(q.data(), kb.data(), vb.data(), d, y.data());
      };
      if (kv_f16) {
        store_and_attend(uint16_t{0x7e00});  // f16 NaN
      } else {
        store_and_attend(float{NAN});
      }
    }
  } else if (op == "f16_round") {  // narrow_row_f16, widened back exactly: x as an f16 KV cache stores it
    const auto xv = as_f32(x);
    std::vector<uint16_t> h(xv.size());
    kernels::narrow_row_f16(xv.data(), static_cast<int64_t>(xv.size()), h.data());
    y.resize(xv.size());
    for (size_t i = 0; i < h.size(); ++i) y[i] = f16_to_f32(h[i]);
  } else if (op == "softmax" || op == "silu" || op == "gelu_tanh") {
    const auto xv = as_f32(x);
    y.resize(xv.size());
    if (op == "softmax") kernels::softmax_forward(xv.data(), rows, cols, y.data());
    if (op == "silu") kernels::silu_forward(xv.data(), x.numel(), y.data());
    if (op == "gelu_tanh") kernels::gelu_tanh_forward(xv.data(), x.numel(), y.data());
  } else if (op == "swiglu" || op == "add" || op == "mul") {
    const auto a = as_f32(x), b = as_f32(in.at(1));
    ASCENT_CHECK(a.size() == b.size(), "operands differ in size");
    y.resize(a.size());
    if (op == "swiglu") kernels::swiglu_forward(a.data(), b.data(), x.numel(), y.data());
    if (op == "add") kernels::add_forward(a.data(), b.data(), x.numel(), y.data());
    if (op == "mul") kernels::mul_forward(a.data(), b.data(), x.numel(), y.data());
  } else if (op == "embedding_backward") {
    const auto dy = as_f32(x);
    const auto ids = as_i32(in.at(1));
    y = as_f32(in.at(2));
    kernels::embedding_backward(ids, dy.data(), cols, y.data(), in[2].rows());
  } else if (op == "mul_vec_backward") {
    const auto xv = as_f32(x), w = as_f32(in.at(1));
    auto dy = as_f32(in.at(2)), dw = as_f32(in.at(3));
    std::vector<float> dx(xv.size());
    float* dxp = alias ? dy.data() : dx.data();
    kernels::mul_vec_backward(xv.data(), rows, cols, w.data(), static_cast<int64_t>(w.size()), dy.data(), dxp,
                              dw.data());
    if (alias) dx = dy;
    y = concat({&dx, &dw});
  } else if (op == "rms_norm_backward") {
    const bool bare = attr.count("bare") != 0;
    const auto xv = as_f32(x);
    std::vector<float> w, dw;
    if (!bare) w = as_f32(in.at(1)), dw = as_f32(in.at(3));
    auto dy = as_f32(in.at(bare ? 1 : 2));
    std::vector<float> dx(xv.size());
    float* dxp = alias ? dy.data() : dx.data();
    kernels::rms_norm_backward(xv.data(), rows, cols, bare ? nullptr : w.data(), static_cast<float>(num("eps")),
                               inum("group"), dy.data(), dxp, bare ? nullptr : dw.data());
    if (alias) dx = dy;
    y = concat({&dx, &dw});
  } else if (op == "layer_norm_backward") {
    const auto xv = as_f32(x), w = as_f32(in.at(1));
    auto dy = as_f32(in.at(2)), dw = as_f32(in.at(3)), db = as_f32(in.at(4));
    std::vector<float> dx(xv.size());
    float* dxp = alias ? dy.data() : dx.data();
    kernels::layer_norm_backward(xv.data(), rows, cols, w.data(), static_cast<float>(num("eps")), dy.data(), dxp,
                                 dw.data(), db.data());
    if (alias) dx = dy;
    y = concat({&dx, &dw, &db});
  } else if (op == "rope_backward") {
    y = as_f32(x);
    const auto pos = as_i32(in.at(1));
    const int64_t D = inum("dim");
    const auto inv = rope_table(D);
    const auto style = attr.at("style") == "half" ? RopeStyle::Half : RopeStyle::Interleaved;
    kernels::rope_backward(y.data(), rows, cols / D, D, pos, inv, style);
  } else if (op == "attention_train_forward" || op == "attention_backward") {
    const auto q = as_f32(x), k = as_f32(in.at(1)), v = as_f32(in.at(2));
    const int64_t H = inum("heads"), D = cols / H, B = inum("batch");
    ASCENT_CHECK(B > 0 && rows % B == 0, "attention: {} rows do not split into batch {}", rows, B);
    const kernels::AttentionTrainDims d{
        B, rows / B, H, inum("kv_heads"), D, 1.0f / std::sqrt(static_cast<float>(D)), inum("window")};
    ASCENT_CHECK(in[1].rows() == rows && in[1].cols() == d.n_kv_heads * D && v.size() == k.size(),
                 "attention: k and v must be ({}, {})", rows, d.n_kv_heads * D);
    std::vector<float> out(q.size());
    kernels::attention_train_forward(q.data(), k.data(), v.data(), d, out.data());
    if (op == "attention_backward") {
      const auto dout = as_f32(in.at(3));
      ASCENT_CHECK(dout.size() == q.size(), "attention_backward: dout must have q's shape");
      std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
      kernels::attention_backward(q.data(), k.data(), v.data(), out.data(), dout.data(), d, dq.data(), dk.data(),
                                  dv.data());
      y = concat({&dq, &dk, &dv});
    } else {
      y = std::move(out);
    }
  } else if (op == "gelu_tanh_backward") {
    const auto xv = as_f32(x);
    auto dy = as_f32(in.at(1));
    std::vector<float> dx(xv.size());
    kernels::gelu_tanh_backward(xv.data(), dy.data(), x.numel(), alias ? dy.data() : dx.data());
    y = alias ? dy : dx;
  } else if (op == "swiglu_backward") {
    const auto gate = as_f32(x), up = as_f32(in.at(1));
    auto dy = as_f32(in.at(2));
    std::vector<float> dgate(gate.size()), dup(gate.size());
    const std::string to = attr.count("alias") != 0 ? attr.at("alias") : "";
    float* dg = to == "gate" ? dy.data() : dgate.data();
    float* du = to == "up" ? dy.data() : dup.data();
    kernels::swiglu_backward(gate.data(), up.data(), dy.data(), x.numel(), dg, du);
    if (to == "gate") dgate = dy;
    if (to == "up") dup = dy;
    y = concat({&dgate, &dup});
  } else if (op == "lm_head_cross_entropy") {
    const auto xv = as_f32(x), w = as_f32(in.at(1));
    const auto targets = as_i32(in.at(2));
    const int64_t V = in[1].rows();
    ASCENT_CHECK(in[1].cols() == cols, "lm_head_cross_entropy: w must have {} columns", cols);
    const bool grad = attr.count("grad") == 0 || inum("grad") != 0;
    std::vector<float> dx(grad ? xv.size() : 0), dw;
    if (grad) dw = as_f32(in.at(3));
    const bool dw_zero = attr.count("dw_zero") != 0 && inum("dw_zero") != 0;
    const double loss = kernels::lm_head_cross_entropy(
        xv.data(), rows, cols, w.data(), V, targets, static_cast<float>(num("loss_scale")), grad ? dx.data() : nullptr,
        grad ? dw.data() : nullptr, dw_zero, inum("chunk"));
    std::printf("loss %.17g\n", loss);
    y = grad ? concat({&dx, &dw}) : std::vector<float>{static_cast<float>(loss)};
  } else if (op == "sample") {
    // Row t of x is step t's logits: one Sampler draws a token per row, and each drawn id joins the history, as in
    // generation. history=ID,ID (the prompt), generated_from=N (default: the prompt's length), logit_bias=ID:B,ID:B,
    // top_logprobs=N, and the sampling fields by their SamplingParams names. Row t of the output: the id, its
    // logprob, then N top ids and their N logprobs.
    auto ints = [&](const char* k) {
      std::vector<int32_t> v;
      std::string text = attr.count(k) != 0 ? attr.at(k) : "";
      for (size_t pos = 0; pos < text.size();) {
        size_t used = 0;
        v.push_back(std::stoi(text.substr(pos), &used));
        pos += used + 1;  // the comma
      }
      return v;
    };
    auto get = [&](const char* k, double fallback) { return attr.count(k) != 0 ? num(k) : fallback; };
    engine::SamplingParams p;
    p.temperature = static_cast<float>(get("temperature", p.temperature));
    p.top_k = static_cast<int>(get("top_k", p.top_k));
    p.top_p = static_cast<float>(get("top_p", p.top_p));
    p.min_p = static_cast<float>(get("min_p", p.min_p));
    p.repeat_penalty = static_cast<float>(get("repeat_penalty", p.repeat_penalty));
    p.repeat_last_n = static_cast<int>(get("repeat_last_n", p.repeat_last_n));
    p.seed = attr.count("seed") != 0 ? std::stoull(attr.at("seed")) : 0;
    p.presence_penalty = static_cast<float>(get("presence_penalty", 0));
    p.frequency_penalty = static_cast<float>(get("frequency_penalty", 0));
    if (attr.count("logit_bias") != 0) {
      const std::string text = attr.at("logit_bias");
      for (size_t pos = 0; pos < text.size();) {
        size_t used = 0, colon = text.find(':', pos);
        const int32_t id = std::stoi(text.substr(pos, colon - pos));
        p.logit_bias.emplace_back(id, std::stof(text.substr(colon + 1), &used));
        pos = colon + 1 + used + 1;
      }
    }
    engine::check_sampling(p, cols);
    std::vector<int32_t> history = ints("history");
    const auto generated_from = static_cast<size_t>(get("generated_from", static_cast<double>(history.size())));
    const int n_top = static_cast<int>(get("top_logprobs", -1));
    const auto logits = as_f32(x);
    const int64_t width = 2 + 2 * std::max(n_top, 0);
    y.assign(static_cast<size_t>(rows * width), 0.0f);
    engine::Sampler sampler(p);
    for (int64_t t = 0; t < rows; ++t) {
      const std::span<const float> row(logits.data() + t * cols, static_cast<size_t>(cols));
      const engine::SampledToken s = sampler.sample(row, history, generated_from, n_top);
      float* out = y.data() + t * width;
      out[0] = static_cast<float>(s.id);
      out[1] = s.logprob;
      for (size_t i = 0; i < s.top.size(); ++i) {
        out[2 + i] = static_cast<float>(s.top[i].id);
        out[2 + static_cast<size_t>(n_top) + i] = s.top[i].logprob;
      }
      history.push_back(s.id);
    }
    yshape = {rows, width};
  } else {
    fail("unknown op {}", op);
  }
  if (op.ends_with("_backward") || op == "lm_head_cross_entropy" || op == "attention_train_forward")
    yshape = {static_cast<int64_t>(y.size())};
  write_npy(out_path, f32_tensor(std::move(y), yshape));
  std::printf("variant %s", kernels::isa_name(variant));
  if (variant != kernels::active_isa()) {
    std::printf(" (the %s kernel needs instructions this CPU lacks; it has: %s)",
                kernels::isa_name(kernels::active_isa()), feature_list(cpu_features()).c_str());
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "op_runner: error: %s\n", e.what());
    return 1;
  }
}
