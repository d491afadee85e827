// What the Jinja interpreter's source files share: the limits a template is held to, Python's semantics for values
// (jinja_values.cc), and the tables of filters and tests (jinja_filters.cc) and of methods (jinja_methods.cc) that
// the evaluator (jinja_eval.cc) dispatches to by name.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ascent/tokenizer/jinja.h"

namespace ascent::tokenizer::jinja {

// Limits on what a model's template may make the renderer do. Each is an error naming the template line, where the
// process would otherwise hang, run out of memory or overflow its stack.
//
// How deep a value may nest where nothing else bounds it: a context's JSON, and a namespace attribute (the one value
// a template can grow across iterations). Printing, comparing and freeing a value recurse through it.
inline constexpr int kMaxValueDepth = 256;
// jinja2's sandbox limit on range(), which Hugging Face renders under; also bounds batch's and slice's output.
inline constexpr int64_t kMaxRange = 100000;
// Bytes one repetition, concatenation, replace, join or indent may make: a string, or a list's items and their
// strings. A string doubled in a loop 40 times would ask for a terabyte.
inline constexpr int64_t kMaxRepeat = int64_t{1} << 28;

// Fails when an operation (`what`) would build more than kMaxRepeat bytes.
void check_built(size_t bytes, std::string_view what, int line);
// What a copy of l's items costs: each Value and its string (lists and dicts inside are shared, not copied).
size_t list_bytes(const List& l);
// x op y for op in + - *, failing where Python's unbounded integers would leave int64. Unary minus is 0 - x.
int64_t checked(int64_t x, int64_t y, char op, int line);

// json.dumps's options, as Hugging Face's tojson filter passes them on.
struct JsonOptions {
  std::optional<std::string> indent;          // per level; none writes one line
  bool ensure_ascii = false;                  // characters past ASCII as \uXXXX
  std::optional<std::string> item_separator;  // ", " on one line, "," indented
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

// Python's repr: strings quoted (Markup as Markup('...')), anything else as to_string.
std::string repr(const Value& v);
// Python's ==: numbers by value whatever their type, tuples never equal to lists.
bool equal(const Value& a, const Value& b);
// Python's order of two values (-1, 0, 1), as jinja2's <, sort, min and max use it; other pairs fail.
int compare(const Value& l, const Value& r, int line);
// Python's `item in container` for a string, list or dict.
bool contains(const Value& container, const Value& item, int line);

// A number, an integer or a string out of v, or a failure naming the line (and `what` wanted the string).
double as_number(const Value& v, int line);
int64_t as_int(const Value& v, int line);
const std::string& as_str(const Value& v, int line, std::string_view what);

// What a for loop over v sees: a list's items, a dict's keys, a string's characters; Undefined gives nothing.
std::vector<Value> iterate(const Value& v, int line);

// Python's str.isspace() for one code point.
bool is_space(int32_t cp);
// The number of code points in s.
int64_t chars_in(std::string_view s);
// Python's str.strip (left and right), lstrip or rstrip: those in chars (a string), else whitespace.
std::string strip(const std::string& s, const Value* chars, bool left, bool right);
// Case mapping by code point: 'U' upper, 'L' lower, 'T' str.title, 'C' str.capitalize, 'J' jinja2's title filter.
std::string case_mapped(const std::string& s, char how);
// Python's str.splitlines().
std::vector<std::string> split_lines(const std::string& s);
// Python's format % args.
std::string percent_format(const std::string& format, const Value& args, int line);
// markupsafe's escape of s: a Markup string.
Value html_escaped(const std::string& s);

// jinja2's attribute path ("a.b", "0"): dict keys and list indices; a missing part gives Undefined.
Value attribute_path(const Value& item, const std::string& path);
// The key jinja2's sort, unique, min, max, sum, join and map take of an item: the item or its attribute(s), strings
// lowered unless case_sensitive.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive, int line);
// items stably sorted by sort_key, as Python's sorted(key=..., reverse=...).
List sorted(List items, const Value& attribute, bool case_sensitive, bool reverse, int line);
// One string per value that Python's set tells apart; lists and dicts fail as unhashable.
std::string hash_key(const Value& v, int line);

// A list or a tuple as `like` is one.
Value list_like(const Value& like, List l);
// A list standing for a jinja2 generator (Value::generator).
Value generator_of(List l);
// Python's index i into n items: from the end when negative.
int64_t normalize_index(int64_t i, int64_t n);
// A start or end of find/index(sub, start, end) over n items: normalized, then within [0, n].
int64_t clamped_index(int64_t i, int64_t n);

// jinja2's built-in filter `name` on v. An unknown name fails with "unknown filter 'NAME'".
Value apply_filter(std::string_view name, const Value& v, const Args& a, const Kwargs& kw, int line);
// jinja2's built-in test `name` on v with arguments a. An unknown name fails with "unknown test 'NAME'".
bool apply_test(std::string_view name, const Value& v, const Args& a, int line);

// obj.name: a dict's key (or one of its methods), a str's or list's method, else Undefined.
Value attribute(const Value& obj, const std::string& name, int line);
// obj.name as a callable, the method found now; calling one not implemented fails with "unknown method 'NAME'".
Value bound_method(const Value& obj, std::string_view name, int line);
// obj.name(a...), for filters and tests that are a method of str(value).
Value call_method(const Value& obj, std::string_view name, const Args& a, int line);

}  // namespace ascent::tokenizer::jinja
