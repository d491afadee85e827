#include "ascent/graph/ir.h"

#include "ascent/base/error.h"

namespace ascent::graph {

const char* op_name(Op op) {
  switch (op) {
    case Op::Tokens:
      return "tokens";
    case Op::Positions:
      return "positions";
    case Op::Embedding:
      return "embedding";
    case Op::MatMul:
      return "matmul";
    case Op::RmsNorm:
      return "rms_norm";
    case Op::LayerNorm:
      return "layer_norm";
    case Op::Rope:
      return "rope";
    case Op::Attention:
      return "attention";
    case Op::Silu:
      return "silu";
    case Op::GeluTanh:
      return "gelu_tanh";
    case Op::SwiGLU:
      return "swiglu";
    case Op::Add:
      return "add";
    case Op::Mul:
      return "mul";
    case Op::Softmax:
      return "softmax";
    case Op::LastRow:
      return "last_row";
    case Op::MulVec:
      return "mul_vec";
    case Op::MatMulSwiGLU:
      return "matmul_swiglu";
    case Op::AttentionFused:
      return "attention_fused";
  }
  return "?";
}

std::vector<std::vector<const Tensor*>> matmul_calls(const Graph& g) {
  std::vector<std::vector<const Tensor*>> calls;
  for (const Node& n : g.nodes()) {
    if (n.op == Op::MatMul) calls.push_back({n.weights[0]});
    if (n.op == Op::MatMulSwiGLU) calls.push_back({n.weights[0], n.weights[1]});
    if (n.op == Op::AttentionFused) calls.push_back({n.weights[0], n.weights[1], n.weights[2]});
  }
  return calls;
}

Value Graph::push(Node n) {
  nodes_.push_back(std::move(n));
  return Value{static_cast<int>(nodes_.size()) - 1};
}

const Node& Graph::get(Value v, const std::string& user) const {
  ASCENT_CHECK(v.id >= 0 && v.id < static_cast<int>(nodes_.size()), "graph: {} uses an undefined value", user);
  return nodes_[static_cast<size_t>(v.id)];
}

namespace {

void check_f32_vector(const Tensor& w, int64_t n, const std::string& name) {
  ASCENT_CHECK(w.dtype == DType::F32, "{}: weight must be f32, got {}", name, dtype_name(w.dtype));
  ASCENT_CHECK(w.numel() == n, "{}: weight has shape {}, expected ({},)", name, shape_str(w.shape), n);
}

}  // namespace

Value Graph::tokens() {
  Node n;
  n.op = Op::Tokens;
  n.name = "tokens";
  n.cols = 1;
  n.is_int = true;
  return push(std::move(n));
}

Value Graph::positions() {
  Node n;
  n.op = Op::Positions;
  n.name = "positions";
  n.cols = 1;
  n.is_int = true;
  return push(std::move(n));
}

Value Graph::embedding(const Tensor& table, Value ids, std::string name) {
  const Node& in = get(ids, name);
  ASCENT_CHECK(in.is_int, "{}: embedding input must be token ids or positions", name);
  ASCENT_CHECK(table.shape.size() == 2, "{}: table must be 2-D, got {}", name, shape_str(table.shape));
  Node n;
  n.op = Op::Embedding;
  n.name = std::move(name);
  n.inputs = {ids.id};
  n.weights = {&table};
  n.cols = table.shape[1];
  return push(std::move(n));
}

Value Graph::matmul(Value x, const Tensor& w, const Tensor* bias, std::string name) {
  const Node& in = get(x, name);
  ASCENT_CHECK(w.shape.size() == 2, "{}: weight must be 2-D, got {}", name, shape_str(w.shape));
  ASCENT_CHECK(w.shape[1] == in.cols, "{}: weight {} does not take inputs of width {}", name, shape_str(w.shape),
               in.cols);
  if (bias != nullptr) check_f32_vector(*bias, w.shape[0], name + " bias");
  Node n;
  n.op = Op::MatMul;
  n.name = std::move(name);
  n.inputs = {x.id};
  n.weights = {&w, bias};
  n.cols = w.shape[0];
  n.selected = in.selected;
  return push(std::move(n));
}

Value Graph::rms_norm(Value x, const Tensor& w, float eps, std::string name) {
  return rms_norm_grouped(x, w, eps, get(x, name).cols, std::move(name));
}

Value Graph::rms_norm_grouped(Value x, const Tensor& w, float eps, int64_t group, std::string name) {
  const Node& in = get(x, name);
  ASCENT_CHECK(group > 0 && in.cols % group == 0, "{}: width {} is not a multiple of group {}", name, in.cols, group);
  check_f32_vector(w, group, name);
  Node n;
  n.op = Op::RmsNorm;
  n.name = std::move(name);
  n.inputs = {x.id};
  n.weights = {&w};
  n.cols = in.cols;
  n.selected = in.selected;
  n.eps = eps;
  n.group = group;
  return push(std::move(n));
}

Value Graph::rms_norm_bare(Value x, float eps, int64_t group, std::string name) {
  const Node& in = get(x, name);
  ASCENT_CHECK(group > 0 && in.cols % group == 0, "{}: width {} is not a multiple of group {}", name, in.cols, group);
  Node n;
  n.op = Op::RmsNorm;
  n.name = std::move(name);
  n.inputs = {x.id};
  n.weights = {nullptr};
  n.cols = in.cols;
  n.selected = in.selected;
  n.eps = eps;
  n.group = group;
  return push(std::move(n));
}

Value Graph::mul_vec(Value x, const Tensor& w, std::string name) {
  const Node& in = get(x, name);
  ASCENT_CHECK(w.dtype == DType::F32 && w.shape.size() == 1 && w.shape[0] > 0 && in.cols % w.shape[0] == 0,
               "{}: weight {} {} does not scale rows of width {}", name, dtype_name(w.dtype), shape_str(w.shape),
               in.cols);
  Node n;
  n.op = Op::MulVec;
  n.name = std::move(name);
  n.inputs = {x.id};
  n.weights = {&w};
  n.cols = in.cols;
  n.selected = in.selected;
  return push(std::move(n));
}

Value Graph::layer_norm(Value x, const Tensor& w, const Tensor* b, float eps, std::string name) {
  const Node& in = get(x, name);
  check_f32_vector(w, in.cols, name);
  if (b != nullptr) check_f32_vector(*b, in.cols, name + " bias");
  Node n;
  n.op = Op::LayerNorm;
  n.name = std::move(name);
  n.inputs = {x.id};
  n.weights = {&w, b};
  n.cols = in.cols;
  n.selected = in.selected;
  n.eps = eps;
  return push(std::move(n));
}

Value Graph::rope(Value x, Value pos, int64_t heads, int64_t head_dim, const std::vector<float>& inv_freq,
                  RopeStyle style, std::string name) {
  const Node& in = get(x, name);
  ASCENT_CHECK(get(pos, name).is_int, "{}: positions input must be integer", name);
  ASCENT_CHECK(in.cols == heads * head_dim, "{}: width {} is not {} heads x {}", name, in.cols, heads, head_dim);
  ASCENT_CHECK(static_cast<int64_t>(inv_freq.size()) * 2 == head_dim, "{}: {} frequencies for head dim {}", name,
               inv_freq.size(), head_dim);
  Node n;
  n.op = Op::Rope;
  n.name = std::move(name);
  n.inputs = {x.id, pos.id};
  n.cols = in.cols;
  n.heads = heads;
  n.head_dim = head_dim;
  n.inv_freq = &inv_freq;
  n.rope_style = style;
  return push(std::move(n));
}

Value Graph::attention(Value q, Value k, Value v, int layer, int64_t heads, int64_t kv_heads, int64_t head_dim,
                       float scale, int64_t window, std::string name) {
  const Node &nq = get(q, name), &nk = get(k, name), &nv = get(v, name);
  ASCENT_CHECK(kv_heads > 0 && heads % kv_heads == 0, "{}: {} heads is not a multiple of {} kv heads", name, heads,
               kv_heads);
  ASCENT_CHECK(nq.cols == heads * head_dim, "{}: q width {} is not {} x {}", name, nq.cols, heads, head_dim);
  ASCENT_CHECK(nk.cols == kv_heads * head_dim && nv.cols == kv_heads * head_dim, "{}: k/v widths {}/{} are not {} x {}",
               name, nk.cols, nv.cols, kv_heads, head_dim);
  Node n;
  n.op = Op::Attention;
  n.name = std::move(name);
  n.inputs = {q.id, k.id, v.id};
  n.cols = nq.cols;
  n.heads = heads;
  n.kv_heads = kv_heads;
  n.head_dim = head_dim;
  n.scale = scale;
  n.window = window;
  n.layer = layer;
  return push(std::move(n));
}

namespace {

Node unary(Op op, const Node& in, int id, std::string name) {
  Node n;
  n.op = op;
  n.name = std::move(name);
  n.inputs = {id};
  n.cols = in.cols;
  n.selected = in.selected;
  return n;
}

}  // namespace

Value Graph::silu(Value x, std::string name) {
  return push(unary(Op::Silu, get(x, name), x.id, std::move(name)));
}
Value Graph::gelu_tanh(Value x, std::string name) {
  return push(unary(Op::GeluTanh, get(x, name), x.id, std::move(name)));
}
Value Graph::softmax(Value x, std::string name) {
  return push(unary(Op::Softmax, get(x, name), x.id, std::move(name)));
}

Value Graph::last_row(Value x, std::string name) {
  Node n = unary(Op::LastRow, get(x, name), x.id, std::move(name));
  n.selected = true;
  return push(std::move(n));
}

namespace {

Node binary(Op op, const Node& a, const Node& b, int ia, int ib, std::string name) {
  ASCENT_CHECK(a.cols == b.cols && a.selected == b.selected, "{}: operand shapes differ ({} vs {} columns)", name,
               a.cols, b.cols);
  Node n;
  n.op = op;
  n.name = std::move(name);
  n.inputs = {ia, ib};
  n.cols = a.cols;
  n.selected = a.selected;
  return n;
}

}  // namespace

Value Graph::swiglu(Value gate, Value up, std::string name) {
  return push(binary(Op::SwiGLU, get(gate, name), get(up, name), gate.id, up.id, std::move(name)));
}
Value Graph::add(Value a, Value b, std::string name) {
  return push(binary(Op::Add, get(a, name), get(b, name), a.id, b.id, std::move(name)));
}
Value Graph::mul(Value a, Value b, std::string name) {
  return push(binary(Op::Mul, get(a, name), get(b, name), a.id, b.id, std::move(name)));
}

Graph Graph::from_nodes(std::vector<Node> nodes, int output) {
  Graph g;
  g.nodes_ = std::move(nodes);
  for (size_t i = 0; i < g.nodes_.size(); ++i) {
    for (int in : g.nodes_[i].inputs) {
      ASCENT_CHECK(in >= 0 && static_cast<size_t>(in) < i, "graph: node {} ({}) reads a later node", i,
                   g.nodes_[i].name);
    }
  }
  ASCENT_CHECK(output >= 0 && static_cast<size_t>(output) < g.nodes_.size(), "graph: output {} out of range", output);
  g.output_ = output;
  return g;
}

void Graph::set_output(Value v) {
  get(v, "output");
  output_ = v.id;
}

}  // namespace ascent::graph
