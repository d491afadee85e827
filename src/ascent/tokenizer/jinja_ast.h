// The parsed form of a Jinja template, shared by the parser (jinja_parse.cc) and the evaluator (jinja_eval.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ascent/tokenizer/jinja.h"

namespace ascent::tokenizer::jinja {

struct Expr {
  enum class Kind { Literal, Name, Attr, Index, Slice, Call, Filter, Test, Unary, Binary, Ternary, ListLit, DictLit };
  Kind kind = Kind::Literal;
  Value literal;
  std::string name;                         // Name; Attr's attribute; Filter/Test name; Unary/Binary operator
  std::vector<std::unique_ptr<Expr>> args;  // operands, callee + arguments, slice parts (may hold nullptr)
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  bool negate = false;  // "is not"
  bool tuple = false;   // ListLit: a parenthesized tuple
  int line = 0;
};

struct Template::Node {
  enum class Kind { Text, Output, If, For, Set, Macro, Break, Continue };
  Kind kind = Kind::Text;
  int line = 0;
  std::string text;                                          // Text
  std::unique_ptr<Expr> expr;                                // Output, Set value, For iterable
  std::vector<std::unique_ptr<Expr>> conditions;             // If: one per branch (else has none)
  std::vector<std::vector<std::unique_ptr<Node>>> branches;  // If branches (+ else); For: body, else
  std::vector<std::string> targets;                          // For loop variables; Set: name [, attribute]
  std::unique_ptr<Expr> filter;                              // For ... if filter
  // For: whether the body may read `loop`: it names it, or calls a function (a macro sees its caller's variables).
  // Otherwise the loop runs without building it (~1 us an iteration: 10^7 steps took 10 s).
  bool needs_loop = true;
  std::string macro_name;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> params;  // Macro parameters with defaults
};

using NodeList = std::vector<std::unique_ptr<Template::Node>>;

// One level of the parser's or the evaluator's recursion for as long as it lives: both recurse once per level of a
// template's nesting, so a model's template nested without bound overflowed the stack. Past `limit` levels it fails
// with "template line LINE: WHAT more than LIMIT levels deep".
class DepthGuard {
 public:
  DepthGuard(int& depth, int limit, int line, const char* what);
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
  ~DepthGuard() { --depth_; }

 private:
  int& depth_;
};

NodeList parse_template(const std::string& source);
void render_nodes(const NodeList& nodes, const std::map<std::string, Value>& vars, std::string& out);

}  // namespace ascent::tokenizer::jinja
