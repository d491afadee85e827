// Rendering a parsed template: statements (if, for with its loop variable, set, macro, break, continue),
// expressions and operators with Python's semantics, and the global functions Hugging Face's environment gives
// (namespace, range, dict, raise_exception, strftime_now). Jinja scoping holds: a for-loop body is its own scope,
// and namespace() objects are shared. Filters, tests and methods are dispatched to their tables by name.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <optional>
#include <utility>

#include "ascent/base/error.h"
#include "ascent/tokenizer/jinja_ast.h"
#include "ascent/tokenizer/jinja_internal.h"
#include "ascent/tokenizer/utf8.h"

namespace ascent::tokenizer::jinja {
namespace {

using Node = Template::Node;
using K = Value::Kind;

// How deep rendering may nest (a recursive macro). Each level costs up to ~20 KiB of stack under AddressSanitizer (a
// macro call's chain), so 200 stay within 4 MiB.
constexpr int kMaxDepth = 200;
// Loop iterations in one rendering: nested loops each within range's limit could run 10^10 steps (hours).
constexpr int64_t kMaxLoopSteps = 10'000'000;

// l + r for two strings, or two lists or two tuples; nothing where + adds numbers. Other mixes with a string or
// an undefined value fail.
std::optional<Value> add_sequences(const Value& l, const Value& r, int line) {
  if (l.kind == K::String && r.kind == K::String) {
    check_built(l.s.size() + r.s.size(), "+", line);
    return Value::string(l.s + r.s);
  }
  if (l.kind == K::List && r.kind == K::List) {
    if (l.tuple != r.tuple) fail("template line {}: cannot add {} and {} (a tuple and a list)", line, repr(l), repr(r));
    check_built(list_bytes(*l.list) + list_bytes(*r.list), "+", line);
    List c = *l.list;
    c.insert(c.end(), r.list->begin(), r.list->end());
    return list_like(l, std::move(c));
  }
  if (l.kind == K::String || r.kind == K::String || l.kind == K::Undefined || r.kind == K::Undefined) {
    fail("template line {}: cannot add '{}' and '{}'", line, to_string(l), to_string(r));
  }
  return std::nullopt;
}

// seq * times for a string, list or tuple (none when times <= 0). Python would go on until memory runs out; a
// model's template may not take the process down with it.
Value repeat(const Value& seq, int64_t times, int line) {
  const auto size = static_cast<int64_t>(seq.kind == K::String ? seq.s.size() : seq.list->size());
  times = size == 0 ? 0 : std::max<int64_t>(0, times);  // an empty one stays empty, however many times
  const auto bytes = static_cast<int64_t>(seq.kind == K::String ? seq.s.size() : list_bytes(*seq.list));
  if (bytes > 0 && times > kMaxRepeat / bytes)
    fail("template line {}: repeating {} items {} times makes more than {} bytes", line, size, times, kMaxRepeat);
  if (seq.kind == K::String) {
    std::string out;
    out.reserve(static_cast<size_t>(size * times));
    for (int64_t k = 0; k < times; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  List out;
  for (int64_t k = 0; k < times; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return list_like(seq, std::move(out));
}

// x op y on integers (op is not /): exact, failing past 64 bits; // and % floor as Python's do.
Value int_arithmetic(const std::string& op, int64_t x, int64_t y, int line) {
  if (op == "+") return Value::integer(checked(x, y, '+', line));
  if (op == "-") return Value::integer(checked(x, y, '-', line));
  if (op == "*") return Value::integer(checked(x, y, '*', line));
  if (op == "**") {
    if (y < 0 && x == 0) fail("template line {}: 0 cannot be raised to a negative power", line);
    if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
    int64_t p = 1, b = x;  // by squaring, every product checked
    for (int64_t k = y; k > 0; k >>= 1) {
      if (k & 1) p = checked(p, b, '*', line);
      if (k > 1) b = checked(b, b, '*', line);
    }
    return Value::integer(p);
  }
  if (y == 0) fail("template line {}: division by zero", line);
  if (x == INT64_MIN && y == -1) checked(0, x, '-', line);  // the one quotient past int64's range
  // Python floors: a remainder of the other sign than y moves one y over (x - q * y could overflow, as for 3 % -2^63).
  const int64_t r = x % y;
  const bool floor_down = r != 0 && ((r < 0) != (y < 0));
  if (op == "//") return Value::integer(x / y - (floor_down ? 1 : 0));
  if (op == "%") return Value::integer(floor_down ? r + y : r);
  fail("template line {}: unknown operator '{}'", line, op);
}

// Python's divmod of two floats (CPython's float_divmod): the remainder from fmod, given the divisor's sign, and the
// quotient (x - mod) / y, which is an integer but for the division's rounding, snapped to the nearest one.
std::pair<double, double> float_divmod(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv = std::copysign(0.0, x / y);
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  }
  return {floordiv, mod};
}

// l op r on numbers, as floats.
Value float_arithmetic(const std::string& op, const Value& l, const Value& r, int line) {
  const double x = as_number(l, line), y = as_number(r, line);
  if (op == "**" && x == 0 && y < 0) fail("template line {}: 0 cannot be raised to a negative power", line);
  // Python's result is a complex number, which templates here have no value for.
  if (op == "**" && x < 0 && std::isfinite(y) && std::trunc(y) != y)
    fail("template line {}: {} ** {} is a complex number", line, to_string(l), to_string(r));
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "**") return Value::number(std::pow(x, y));
  if (y == 0) fail("template line {}: division by zero", line);
  if (op == "/") return Value::number(x / y);
  if (op == "//") return Value::number(float_divmod(x, y).first);
  if (op == "%") return Value::number(float_divmod(x, y).second);
  fail("template line {}: unknown operator '{}'", line, op);
}

// l op r for every binary operator but and and or.
Value operate(const std::string& op, const Value& l, const Value& r, int line) {
  if (op == "~") {
    std::string a = to_string(l), b = to_string(r);
    check_built(a.size() + b.size(), "~", line);
    return Value::string(a + b);
  }
  if (op == "==") return Value::boolean(equal(l, r));
  if (op == "!=") return Value::boolean(!equal(l, r));
  if (op == "in") return Value::boolean(contains(r, l, line));
  if (op == "not in") return Value::boolean(!contains(r, l, line));
  if (op == "<" || op == ">" || op == "<=" || op == ">=") return Value::boolean(apply_test(op, l, {r}, line));
  if (op == "+") {
    if (auto sum = add_sequences(l, r, line)) return *sum;
  }
  const auto is_seq = [](const Value& v) { return v.kind == K::String || v.kind == K::List; };
  const auto is_int = [](const Value& v) { return v.kind == K::Int || v.kind == K::Bool; };  // a bool is one in Python
  if (op == "*" && is_seq(l) && is_int(r)) return repeat(l, as_int(r, line), line);
  if (op == "*" && is_int(l) && is_seq(r)) return repeat(r, as_int(l, line), line);
  const bool ints = is_int(l) && is_int(r);
  if (ints && op != "/") return int_arithmetic(op, as_int(l, line), as_int(r, line), line);
  if (op == "%" && l.kind == K::String) return Value::string(percent_format(l.s, r, line));
  return float_arithmetic(op, l, r, line);
}

class Evaluator {
 public:
  explicit Evaluator(std::string& out) : out_(out) {}

  std::vector<std::map<std::string, Value>> frames;

  enum class Flow { Normal, Break, Continue };

  // Block bodies and expressions each open one level of rendering (DepthGuard). The parser bounds how deep one
  // template nests; a macro that calls itself (or two that call each other) is bounded here, before the stack
  // overflows (Python's jinja2 stops it with a RecursionError).
  static constexpr const char* kRecursion = "rendering nested";

  Flow exec(const NodeList& nodes) {
    const DepthGuard level(depth_, kMaxDepth, nodes.empty() ? 0 : nodes.front()->line, kRecursion);
    for (const auto& n : nodes) {
      const Flow f = exec(*n);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Value eval(const Expr& e) {
    const DepthGuard level(depth_, kMaxDepth, e.line, kRecursion);
    return eval_inner(e);
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.literal;
      case Expr::Kind::Name:
        return lookup(e.name);
      case Expr::Kind::ListLit: {
        List l;
        for (const auto& a : e.args) l.push_back(eval(*a));
        return e.tuple ? Value::make_tuple(std::move(l)) : Value::make_list(std::move(l));
      }
      case Expr::Kind::DictLit: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          d.set(as_str(eval(*e.args[k]), e.line, "a dict key"), eval(*e.args[k + 1]));
        }
        return d;
      }
      case Expr::Kind::Attr:
        return attribute(eval(*e.args[0]), e.name, e.line);
      case Expr::Kind::Index:
        return index(eval(*e.args[0]), eval(*e.args[1]), e.line);
      case Expr::Kind::Slice:
        return slice(e);
      case Expr::Kind::Call:
        return call(e);
      case Expr::Kind::Filter:
        return filter(e);
      case Expr::Kind::Test:
        return Value::boolean(test(e) != e.negate);
      case Expr::Kind::Unary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!v.truthy());
        // - and + on a number; a bool counts as the integer it is in Python.
        if (v.kind == K::Int || v.kind == K::Bool) {
          const int64_t x = as_int(v, e.line);
          return Value::integer(e.name == "-" ? checked(0, x, '-', e.line) : x);
        }
        const double x = as_number(v, e.line);
        return Value::number(e.name == "-" ? -x : x);
      }
      case Expr::Kind::Binary:
        return binary(e);
      case Expr::Kind::Ternary:
        if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value{};
    }
    return {};
  }

 private:
  Value lookup(const std::string& name) {
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return {};
  }

  Flow exec(const Node& n) {
    switch (n.kind) {
      case Node::Kind::Text:
        out_ += n.text;
        break;
      case Node::Kind::Output: {
        const Value v = eval(*n.expr);
        out_ += to_string(v);
        break;
      }
      case Node::Kind::If:
        for (size_t b = 0; b < n.branches.size(); ++b) {
          if (b >= n.conditions.size() || eval(*n.conditions[b]).truthy()) return exec(n.branches[b]);
        }
        break;
      case Node::Kind::For:
        return exec_for(n);
      case Node::Kind::Set: {
        Value v;
        if (n.expr) {
          v = eval(*n.expr);
        } else {
          std::string captured;
          std::swap(captured, out_);
          exec(n.branches[0]);
          std::swap(captured, out_);
          v = Value::string(captured);
        }
        if (n.targets.size() == 2) {
          Value ns = lookup(n.targets[0]);
          if (!ns.is_namespace) fail("template line {}: cannot set an attribute of '{}'", n.line, n.targets[0]);
          check_namespace_value(v, 0, n.line);
          ns.set(n.targets[1], std::move(v));
        } else {
          frames.back()[n.targets[0]] = std::move(v);
        }
        break;
      }
      case Node::Kind::Macro:
        frames.back()[n.macro_name] = make_macro(n);
        break;
      case Node::Kind::Break:
        return Flow::Break;
      case Node::Kind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

  Flow exec_for(const Node& n) {
    std::vector<Value> items = iterate(eval(*n.expr), n.line);
    if (n.filter) {
      std::vector<Value> kept;
      for (auto& it : items) {
        frames.emplace_back();
        bind_targets(n, it);
        if (eval(*n.filter).truthy()) kept.push_back(it);
        frames.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.branches.size() > 1) return exec(n.branches[1]);
      return Flow::Normal;
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      if (++loop_steps_ > kMaxLoopSteps)
        fail("template line {}: loops ran more than {} iterations in one rendering", n.line, kMaxLoopSteps);
      frames.emplace_back();
      if (n.needs_loop) {
        Value loop = Value::make_dict();
        loop.set("index0", Value::integer(k));
        loop.set("index", Value::integer(k + 1));
        loop.set("revindex0", Value::integer(len - k - 1));
        loop.set("revindex", Value::integer(len - k));
        loop.set("first", Value::boolean(k == 0));
        loop.set("last", Value::boolean(k == len - 1));
        loop.set("length", Value::integer(len));
        loop.set("previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value{});
        loop.set("nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value{});
        frames.back()["loop"] = loop;
      }
      bind_targets(n, items[static_cast<size_t>(k)]);
      const Flow f = exec(n.branches[0]);
      frames.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void bind_targets(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      frames.back()[n.targets[0]] = item;
      return;
    }
    // Python unpacks what iterating gives: a list's items, a dict's keys, a string's characters.
    const bool iterable = item.kind == K::List || item.kind == K::Dict || item.kind == K::String;
    const List parts = iterable ? iterate(item, n.line) : List{};
    if (!iterable || parts.size() != n.targets.size()) {
      fail("template line {}: cannot unpack '{}' into {} names", n.line, to_string(item), n.targets.size());
    }
    for (size_t k = 0; k < n.targets.size(); ++k) frames.back()[n.targets[k]] = parts[k];
  }

  // A namespace is the only value a template can change, so the only way to nest a value deeper from one loop
  // iteration to the next, or to make one contain itself: what it is given must hold no namespace (none can then
  // reach itself) and nest at most kMaxValueDepth levels. jinja2 accepts both and fails on printing them.
  static void check_namespace_value(const Value& v, int depth, int line) {
    if (v.kind != K::List && v.kind != K::Dict) return;
    if (v.is_namespace) fail("template line {}: a namespace cannot hold a namespace", line);
    if (depth >= kMaxValueDepth)
      fail("template line {}: a namespace attribute nested more than {} levels deep", line, kMaxValueDepth);
    if (v.kind == K::List) {
      for (const Value& e : *v.list) check_namespace_value(e, depth + 1, line);
    } else {
      for (const auto& kv : *v.dict) check_namespace_value(kv.second, depth + 1, line);
    }
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value::function([this, node](const Args& args, const Kwargs& kwargs) {
      std::string captured;
      std::swap(captured, out_);
      frames.emplace_back();
      for (size_t k = 0; k < node->params.size(); ++k) {
        const auto& [name, dflt] = node->params[k];
        Value v = k < args.size() ? args[k] : (dflt ? eval(*dflt) : Value{});
        for (const auto& [kw, kv] : kwargs) {
          if (kw == name) v = kv;
        }
        frames.back()[name] = v;
      }
      exec(node->branches[0]);
      frames.pop_back();
      std::swap(captured, out_);
      return Value::string(captured);
    });
  }

  Value index(const Value& obj, const Value& key, int line) {
    if (obj.kind == K::Dict) {
      if (key.kind != K::String) return {};
      const Value* v = obj.get(key.s);
      return v ? *v : Value{};
    }
    if (obj.kind == K::List || obj.kind == K::String) {
      const int64_t n = obj.kind == K::List ? static_cast<int64_t>(obj.list->size()) : chars_in(obj.s);
      const int64_t k = normalize_index(as_int(key, line), n);
      if (k < 0 || k >= n) return {};
      if (obj.kind == K::List) return (*obj.list)[static_cast<size_t>(k)];
      // A string's k-th character, as Python indexes: "aé"[1] is all of the é.
      const size_t at = byte_offset(obj.s, static_cast<size_t>(k));
      return Value::string(obj.s.substr(at, char_at(obj.s, at).second));
    }
    if (obj.kind == K::Undefined) fail("template line {}: indexing an undefined value", line);
    return {};
  }

  Value slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    if (obj.kind == K::Undefined) fail("template line {}: cannot slice '{}'", e.line, to_string(obj));
    // jinja2 gives Undefined where Python refuses the slice (a number, None, a dict).
    if (obj.kind != K::List && obj.kind != K::String) return {};
    const int64_t n = obj.kind == K::List ? static_cast<int64_t>(obj.list->size()) : chars_in(obj.s);
    const int64_t step = e.args[3] ? as_int(eval(*e.args[3]), e.line) : 1;
    if (step == 0) fail("template line {}: slice step cannot be zero", e.line);
    auto bound = [&](const std::unique_ptr<Expr>& x, int64_t dflt) {
      if (!x) return dflt;
      int64_t v = as_int(eval(*x), e.line);
      if (v < 0) v += n;
      return step > 0 ? std::clamp<int64_t>(v, 0, n) : std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t start = bound(e.args[1], step > 0 ? 0 : n - 1);
    const int64_t stop = bound(e.args[2], step > 0 ? n : -1);
    if (obj.kind == K::String) {
      // By characters, as Python slices: one walk over the string, forward or back, keeping each step-th character
      // from start on.
      std::string out;
      const std::string& str = obj.s;
      if (step > 0) {
        size_t at = 0;
        for (int64_t c = 0; c < stop; ++c) {
          const size_t len = char_at(str, at).second;
          if (c >= start && (c - start) % step == 0) out.append(str, at, len);
          at += len;
        }
      } else {
        size_t end = str.size();
        for (int64_t c = n - 1; c > stop; --c) {
          const size_t b = prev_char(str, end);
          if (c <= start && (start - c) % step == 0) out.append(str, b, end - b);
          end = b;
        }
      }
      return Value::string(out);
    }
    List l;
    // k in 128 bits: a step near int64's limits would overflow it on the way past `stop`.
    for (__int128 k = start; step > 0 ? k < stop : k > stop; k += step)
      l.push_back((*obj.list)[static_cast<size_t>(k)]);
    return list_like(obj, std::move(l));
  }

  // The values of a Call's, Filter's or Test's arguments: args[0] is the callee or the value filtered or tested.
  Args eval_args(const Expr& e) {
    Args a;
    for (size_t k = 1; k < e.args.size(); ++k) a.push_back(eval(*e.args[k]));
    return a;
  }
  Kwargs eval_kwargs(const Expr& e) {
    Kwargs kw;
    for (const auto& [k, x] : e.kwargs) kw.emplace_back(k, eval(*x));
    return kw;
  }

  Value call(const Expr& e) {
    const Value f = eval(*e.args[0]);
    const Args args = eval_args(e);
    const Kwargs kwargs = eval_kwargs(e);
    if (f.kind != K::Function) {
      const Expr& callee = *e.args[0];
      const bool named = callee.kind == Expr::Kind::Name || callee.kind == Expr::Kind::Attr;
      if (f.kind == K::Undefined && named) fail("template line {}: '{}' is undefined", e.line, callee.name);
      fail("template line {}: calling something that is not a function", e.line);
    }
    return (*f.fn)(args, kwargs);
  }

  Value filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const Args a = eval_args(e);
    const Kwargs kw = eval_kwargs(e);
    return apply_filter(e.name, v, a, kw, e.line);
  }

  bool test(const Expr& e) {
    const Value v = eval(*e.args[0]);
    return apply_test(e.name, v, eval_args(e), e.line);
  }

  // and, or (which short-circuit), then the operators on two values.
  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value l = eval(*e.args[0]);
      return l.truthy() ? eval(*e.args[1]) : l;
    }
    if (op == "or") {
      Value l = eval(*e.args[0]);
      return l.truthy() ? l : eval(*e.args[1]);
    }
    const Value l = eval(*e.args[0]);
    const Value r = eval(*e.args[1]);
    return operate(op, l, r, e.line);
  }

  std::string& out_;
  int depth_ = 0;           // block bodies and expressions open now (DepthGuard)
  int64_t loop_steps_ = 0;  // for-loop iterations so far in this rendering
};

// namespace(dict, **attributes): the one mutable value, shared by reference.
Value global_namespace(const Args& a, const Kwargs& kw) {
  Value ns = Value::make_dict();
  ns.is_namespace = true;
  if (!a.empty() && a[0].kind == K::Dict) {
    for (const auto& [k, v] : *a[0].dict) ns.set(k, v);
  }
  for (const auto& [k, v] : kw) ns.set(k, v);
  return ns;
}

Value global_raise_exception(const Args& a, const Kwargs&) {
  fail("template raised: {}", a.empty() ? std::string("error") : to_string(a[0]));
}

// Python's datetime.now().strftime(format) in local time. Llama 3.2's, Mistral Small 3's and gpt-oss's templates
// write today's date with it.
Value global_strftime_now(const Args& a, const Kwargs& kw) {
  if (a.size() != 1 || !kw.empty()) fail("strftime_now takes one format string");
  const std::string& format = as_str(a[0], 0, "strftime_now");
  if (format.find('\0') != std::string::npos) fail("strftime_now: the format holds a NUL character");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  // strftime returns 0 both for an empty result and for a buffer too small: a marker after the format parts them.
  const std::string marked = format + "\x01";
  for (size_t cap = 256; cap <= (size_t{1} << 20); cap *= 4) {
    std::string buf(cap, '\0');
    const size_t n = std::strftime(buf.data(), cap, marked.c_str(), &local);
    if (n > 0) return Value::string(buf.substr(0, n - 1));
  }
  fail("strftime_now: format '{}' writes more than 1 MiB", format);
}

// range(stop) or range(start, stop[, step]), at most kMaxRange items as in jinja2's sandbox.
Value global_range(const Args& a, const Kwargs&) {
  int64_t start = 0, stop = 0, step = 1;
  if (a.size() == 1) {
    stop = as_int(a[0], 0);
  } else if (a.size() >= 2) {
    start = as_int(a[0], 0);
    stop = as_int(a[1], 0);
    if (a.size() > 2) step = as_int(a[2], 0);
  }
  if (step == 0) fail("range() step must not be zero");
  // The count in 128 bits: no step can overflow it.
  const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 mag = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
  const __int128 count = span <= 0 ? 0 : (span + mag - 1) / mag;
  if (count > kMaxRange)
    fail("range({}, {}, {}) has more than {} items, the limit of jinja2's sandbox", start, stop, step, kMaxRange);
  List l;
  for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) l.push_back(Value::integer(start + k * step));
  return Value::make_list(std::move(l));
}

Value global_dict(const Args&, const Kwargs& kw) {
  return Value::make_dict(Dict(kw.begin(), kw.end()));
}

std::map<std::string, Value> builtins() {
  return {{"namespace", Value::function(global_namespace)},
          {"raise_exception", Value::function(global_raise_exception)},
          {"strftime_now", Value::function(global_strftime_now)},
          {"range", Value::function(global_range)},
          {"dict", Value::function(global_dict)}};
}

}  // namespace

void render_nodes(const NodeList& nodes, const std::map<std::string, Value>& vars, std::string& out) {
  Evaluator ev(out);
  ev.frames.push_back(builtins());
  ev.frames.push_back(vars);
  ev.frames.emplace_back();
  ev.exec(nodes);
}

Template::Template(const std::string& source) : body_(parse_template(source)) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

std::string Template::render(const std::map<std::string, Value>& vars) const {
  std::string out;
  render_nodes(body_, vars, out);
  return out;
}

}  // namespace ascent::tokenizer::jinja
