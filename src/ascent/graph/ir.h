// The graph IR and its builder. A model is a function that builds a Graph: nodes in topological order (the
// builder only appends), each with an op, activation inputs, constant weights, attributes, an output width and a
// name such as "blk.3.attn_q" for profiles and errors. Every activation is f32 with shape (rows, cols) where rows
// is the token count T of the call (symbolic: fixed when the graph runs) or, past a LastRow node, the count of rows
// whose outputs the call asks for, so a single graph serves every sequence length and batch, and plans are compiled
// per shape bucket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ascent/kernels/op_attrs.h"
#include "ascent/tensor/tensor.h"

namespace ascent::graph {

enum class Op {
  Tokens,     // (T, 1) input token ids (i32)
  Positions,  // (T, 1) absolute positions n_past + t (i32)
  Embedding,  // weights[0] (V, C) gathered by inputs[0] (ids or positions)
  MatMul,     // inputs[0] (T, K) @ weights[0] (N, K)^T (+ weights[1] bias (N))
  RmsNorm,    // per `group` values, times weights[0] (group)
  LayerNorm,  // times weights[0] plus weights[1]
  Rope,       // inputs[0] (T, H*D) rotated at inputs[1] positions
  Attention,  // q, k, v (T, *) -> (T, Hq*D); stores k, v in the KV cache layer first
  Silu,
  GeluTanh,
  SwiGLU,  // silu(inputs[0]) * inputs[1]
  Add,
  Mul,
  Softmax,  // row-wise
  LastRow,  // (T, C) -> (n_out, C): each segment's last row, or all its rows (Segment::all_rows)
  MulVec,   // inputs[0] * weights[0] (P elements, repeated along the row): a norm's scale
  // Made by fusion passes, never by model builders:
  MatMulSwiGLU,    // silu(x @ weights[0]^T) * (x @ weights[1]^T)
  AttentionFused,  // h, positions -> Q/K/V as one merged matmul (weights Wq Wk Wv bq bk bv), q/k norm
                   // (weights[6..7] or null), RoPE (if inv_freq), KV-cache append and attention
};

const char* op_name(Op op);

class Graph;
// The weights of every matmul call a run of g makes, in the order it makes them, grouped as the executor hands them
// to the kernels (MatMul: its weight; MatMulSwiGLU: gate, up; AttentionFused: Wq, Wk, Wv): what a load needs to
// place each thread's rows in the order it reads them (model/weight_layout.h).
std::vector<std::vector<const Tensor*>> matmul_calls(const Graph& g);

struct Value {
  int id = -1;
};

struct Node {
  Op op = Op::Tokens;
  std::string name;
  std::vector<int> inputs;             // ids of earlier nodes (MatMul: x [, residual added to the result])
  std::vector<const Tensor*> weights;  // constants, owned by the model; may hold nullptr for an absent bias
  int64_t cols = 0;                    // output row width
  bool selected = false;  // past a LastRow: one row per output row the batch asks for (Batch::n_out), not T
  bool is_int = false;    // output holds i32 (tokens, positions)
  // Attributes; which are used depends on op.
  float eps = 0.0f;
  int64_t group = 0;  // RmsNorm group width
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0.0f;
  int64_t window = 0;
  int layer = -1;  // Attention: KV cache layer
  RopeStyle rope_style = RopeStyle::Half;
  const std::vector<float>* inv_freq = nullptr;  // Rope: (D/2,), owned by the model
  int64_t scratch_floats_per_row = 0;            // working memory a fused node needs besides its output
};

class Graph {
 public:
  Value tokens();
  Value positions();
  Value embedding(const Tensor& table, Value ids, std::string name);
  Value matmul(Value x, const Tensor& w, const Tensor* bias, std::string name);
  Value rms_norm(Value x, const Tensor& w, float eps, std::string name);
  // The normalisation alone, per `group` values; the scale follows as mul_vec (fusion folds the two).
  Value rms_norm_bare(Value x, float eps, int64_t group, std::string name);
  Value mul_vec(Value x, const Tensor& w, std::string name);
  // Qwen3-style norm of each head_dim-wide group of x with one weight vector (head_dim).
  Value rms_norm_grouped(Value x, const Tensor& w, float eps, int64_t group, std::string name);
  Value layer_norm(Value x, const Tensor& w, const Tensor* b, float eps, std::string name);
  Value rope(Value x, Value pos, int64_t heads, int64_t head_dim, const std::vector<float>& inv_freq, RopeStyle style,
             std::string name);
  Value attention(Value q, Value k, Value v, int layer, int64_t heads, int64_t kv_heads, int64_t head_dim, float scale,
                  int64_t window, std::string name);
  Value silu(Value x, std::string name);
  Value gelu_tanh(Value x, std::string name);
  Value swiglu(Value gate, Value up, std::string name);
  Value add(Value a, Value b, std::string name);
  Value mul(Value a, Value b, std::string name);
  Value softmax(Value x, std::string name);
  Value last_row(Value x, std::string name);

  void set_output(Value v);
  // Rebuilds a graph from nodes in topological order (what passes produce).
  static Graph from_nodes(std::vector<Node> nodes, int output);
  int output() const { return output_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(Value v) const { return nodes_.at(static_cast<size_t>(v.id)); }

 private:
  Value push(Node n);
  const Node& get(Value v, const std::string& user) const;

  std::vector<Node> nodes_;
  int output_ = -1;
};

}  // namespace ascent::graph
