// A Jinja2 interpreter for chat templates: the subset real templates (Llama-3, Qwen, Mistral, ...) use — text,
// {{ }}, {% if/elif/else %}, {% for %} with loop variables and else, {% set %} (namespaces too), {% macro %},
// break/continue, filters, tests, Python-style string/list/dict methods, raise_exception, strftime_now. It renders
// like Hugging Face's environment: trim_blocks and lstrip_blocks on, tojson as json.dumps(ensure_ascii=False).
// It refuses what chat templates never need: template inheritance, includes, autoescaping, custom extensions.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ascent::tokenizer::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, like Python dicts
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(const Args&, const Kwargs&)>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::shared_ptr<List> list;  // shared: Python reference semantics
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> fn;
  bool is_namespace = false;
  // A List standing for what jinja2 returns as a generator (select, reject, selectattr, rejectattr, map, unique;
  // reverse's iterator): true in a test even when empty, as a generator object is. It iterates, prints and measures as
  // its list.
  bool generator = false;
  // A List that is a Python tuple ((a, b) literals, items() and dictsort pairs): prints as (a, b), equals no list,
  // adds only to a tuple.
  bool tuple = false;
  // A tuple from groupby (jinja2's _GroupTuple): (grouper, list), whose items are also its attributes .grouper and
  // .list.
  bool group = false;
  // A String that is markupsafe's Markup (from |safe, |e, |escape, |forceescape): |e leaves it as it is, and inside a
  // printed container it shows as Markup('...'). Markup's own arithmetic (+ and % escaping the other operand) is not
  // modelled: any other operation gives a plain string.
  bool markup = false;

  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List v = {});
  static Value make_tuple(List v);
  static Value make_dict(Dict v = {});
  static Value function(Function f);
  static Value from_json(const nlohmann::ordered_json& j);

  bool defined() const { return kind != Kind::Undefined; }
  bool truthy() const;
  const Value* get(const std::string& key) const;  // dict lookup; null when absent
  void set(const std::string& key, Value v);       // dict insert or replace
};

// Python's str() of a value (what {{ }} prints).
std::string to_string(const Value& v);
// json.dumps(v, ensure_ascii=False, indent=indent) with Python's separators.
std::string to_json(const Value& v, int indent = -1);

class Template {
 public:
  // Parses the template; throws ascent::Error with the line of the fault.
  explicit Template(const std::string& source);
  ~Template();
  Template(Template&&) noexcept;
  // Renders with the given variables (plus the built-ins: namespace, raise_exception, range, ...).
  std::string render(const std::map<std::string, Value>& vars) const;

  struct Node;

 private:
  std::vector<std::unique_ptr<Node>> body_;
};

}  // namespace ascent::tokenizer::jinja
