// Reverse-mode differentiation of a model graph for training. The forward graph is the one model/transformer.h
// builds for inference (unfused: fusion passes are for inference plans; none of them is run here). From it this pass
// derives, per node, which values its backward step reads, and from those which forward values a step must keep:
// everything else is freed after its last forward use. Backward steps run in reverse node order, each calling its
// op's *_backward kernel (kernels/cpu/ops.h), with gradients of weights added to arrays the caller owns.
//
// Training graphs differ from generation in three places: Attention is causal self-attention within each sequence of
// the batch (no KV cache), LastRow keeps every row, and the output MatMul is replaced by the fused LM head and
// cross-entropy, so the (rows, vocab) logits are never held whole.

// Recompute (activation checkpointing): `Full` keeps only the values that cross a layer boundary (the residual
// stream) and recomputes the rest of a layer when its backward needs it; `Selective` keeps matmul and attention
// outputs and recomputes the cheap ones (norms, scales, RoPE, activations). A value that must be recomputed is rebuilt
// from its inputs on demand, recursively, and freed once its last backward reader has run.
//
// Refuses: fused nodes (MatMulSwiGLU, AttentionFused), a MatMul with a residual input, Softmax and Silu alone (no
// model builder emits them), and weights that are not f32 (train an f32 copy: train/params.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ascent/graph/ir.h"

namespace ascent::graph {

enum class Recompute { None, Selective, Full };
const char* recompute_name(Recompute r);

// Mixed precision as the AMP levels define it, carried out on f32 buffers: a value "in bf16" holds only
// bf16-representable numbers (each rounded to nearest even), so the arithmetic is what bf16 storage gives while every
// kernel stays the f32 one. Matmuls in bf16 multiply bf16-rounded operands with f32 accumulation (vdpbf16ps); in fp16,
// fp16-rounded operands with f32 FMAs (sgemm_f16).
enum class Half { None, Bf16, F16 };
struct Numerics {
  Half matmul = Half::None;            // O1 and up: matmul operands, weights included, in this type; not the LM head's
  Half activations = Half::None;       // O2: node outputs other than norms in bf16; O3: all of them, bf16 or fp16
  bool norms_too = false;              // O3: norm outputs rounded as well
  Half activation_grads = Half::None;  // O3: gradients of activations in the half type (fp16: where loss scaling acts)
};

struct LossSum {
  double sum = 0.0;   // sum over counted rows of -log p(target)
  int64_t count = 0;  // rows with a target (>= 0)
};

class Autodiff {
 public:
  // Where backward puts a weight's gradient (w's numel floats); data null for a weight left frozen. zero: nothing has
  // been added to the gradient yet, so this write may overwrite it (a GEMM with beta 0 reads no zeros from memory, and
  // 0 + x is x). grad_of(w, overwrites) is asked by each write: overwrites false (a write that adds) must get an
  // array that holds zeros when zero is set; overwrites true may get one that holds anything then, which the write
  // ignores. Handing out a target with zero set counts as that first write.
  struct GradTarget {
    float* data = nullptr;
    bool zero = false;
  };
  using GradOf = std::function<GradTarget(const Tensor* w, bool overwrites)>;
  Autodiff(const Graph& g, GradOf grad_of, Recompute recompute);
  void set_numerics(const Numerics& n) { numerics_ = n; }

  // One batch of `batch` sequences (tokens and targets: batch * seq each; a negative target is not counted). Adds
  // loss_scale * d(loss sum)/d(weight) to every weight's gradient array and returns the loss sum. When it throws (a
  // target outside the vocabulary), the gradients hold part of a pass: clear them before the next use.
  LossSum forward_backward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t batch,
                           float loss_scale);
  // The loss alone (validation): forward only, nothing kept for a backward pass.
  LossSum loss(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t batch);
  // The most bytes of activations and of their gradients a forward_backward of this shape holds at once: the same
  // bookkeeping, without computing.
  int64_t planned_peak_bytes(int64_t batch, int64_t seq);
  // Seconds spent per op ("matmul forward", "attention backward", "lm head"...) since construction: what a training
  // step's time goes to (ascent train prints it with ASCENT_LOG=debug).
  const std::map<std::string, double>& op_seconds() const { return op_seconds_; }
  // What the last forward_backward (or planned_peak_bytes) held at most.
  int64_t peak_bytes() const { return peak_bytes_; }

 private:
  struct Value {
    std::vector<float> f;
    std::vector<int32_t> i;
    bool live = false;
  };
  void run(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t batch, int64_t seq,
           float loss_scale, bool backward, bool dry, LossSum& loss);
  void compute(int id);  // node id's output from its (live) inputs
  void ensure(int id);   // id's output live, recomputing it (and what it needs) if it was dropped
  void release(int id);  // frees id's output
  void allocate(int id);
  float* grad_for_input(int id, bool& fresh);  // the gradient buffer of value id; fresh: just allocated (zero)
  void release_grad(int id);
  void count_bytes(int64_t delta);
  // Adds an input gradient that write() produces (kernels write, they do not add) to value id's gradient.
  void add_input_grad(int id, const std::function<void(float*)>& write);
  // Adds node from's gradient to value to's (an identity edge: Add, LastRow); last hands the buffer over.
  void pass_grad(int from, int to, bool last);
  void backward_node(int id);
  int64_t value_bytes(int id) const;

  const Graph& g_;
  GradOf grad_of_;
  Recompute recompute_;
  Numerics numerics_;
  // Buffers come from and go back to a pool of freed ones by size: a step frees what the next one allocates, and a
  // fresh allocation of that size would page-fault its memory in again each step.
  std::vector<float> take(size_t n);
  void give(std::vector<float>&& v);
  std::map<size_t, std::vector<std::vector<float>>> pool_;
  void round_value(int id);
  void round_grad(int id);
  void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool ta, const float* b, int64_t ldb, bool tb,
            float beta, float* c, int64_t ldc) const;
  int out_ = -1;                         // the output MatMul (LM head)
  int out_input_ = -1;                   // its input: the final norm's output
  std::vector<std::vector<int>> needs_;  // per node: the values its backward step reads
  std::vector<int> last_fwd_use_;        // per value: the last node that reads it in the forward pass
  std::vector<int> bwd_readers_;         // per value: how many backward steps read it
  std::vector<bool> keep_;               // per value: kept from the forward pass for backward (else recomputed)

  // Per step.
  std::vector<Value> vals_;
  std::vector<std::vector<float>> grads_;
  std::vector<bool> grad_live_;
  std::vector<int> readers_left_;
  std::span<const int32_t> tokens_, targets_;
  int64_t rows_ = 0, seq_ = 0, batch_ = 0;
  bool dry_ = false;
  std::map<std::string, double> op_seconds_;
  int64_t bytes_ = 0, peak_bytes_ = 0;
};

}  // namespace ascent::graph
