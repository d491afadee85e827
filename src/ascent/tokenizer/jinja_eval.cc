// Jinja values and evaluation: Python semantics for the operations chat templates use (truthiness, +, ==, in,
// slicing with negative indices, str methods), Jinja scoping (a for-loop body is its own scope; namespace()
// objects are shared), filters and tests.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <set>
#include <unordered_set>

#include <utf8proc.h>

#include "ascent/base/error.h"
#include "ascent/tokenizer/jinja_ast.h"
#include "ascent/tokenizer/utf8.h"

namespace ascent::tokenizer::jinja {

Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(List x) {
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<List>(std::move(x));
  return v;
}
Value Value::make_tuple(List x) {
  Value v = make_list(std::move(x));
  v.tuple = true;
  return v;
}

Value Value::make_dict(Dict x) {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>(std::move(x));
  return v;
}
Value Value::function(Function f) {
  Value v;
  v.kind = Kind::Function;
  v.fn = std::make_shared<Function>(std::move(f));
  return v;
}

namespace {

// How deep a value may nest where the renderer cannot bound it otherwise: a context's JSON, and what a namespace
// attribute holds (the one value a template can grow from iteration to iteration). Printing, comparing and freeing a
// value recurse through it, and a list nested 100000 deep by a loop overflowed the stack doing so.
constexpr int kMaxValueDepth = 256;

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (j.is_array() || j.is_object()) {
    if (depth >= kMaxValueDepth) fail("a JSON value nested more than {} levels deep", kMaxValueDepth);
  }
  if (j.is_null()) return Value::none();
  if (j.is_boolean()) return Value::boolean(j.get<bool>());
  if (j.is_number_integer()) return Value::integer(j.get<int64_t>());
  if (j.is_number()) return Value::number(j.get<double>());
  if (j.is_string()) return Value::string(j.get<std::string>());
  if (j.is_array()) {
    List l;
    for (const auto& e : j) l.push_back(from_json_at(e, depth + 1));
    return Value::make_list(std::move(l));
  }
  Dict d;
  for (const auto& [k, e] : j.items()) d.emplace_back(k, from_json_at(e, depth + 1));
  return Value::make_dict(std::move(d));
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 0);
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return b;
    case Kind::Int:
      return i != 0;
    case Kind::Float:
      return f != 0.0;
    case Kind::String:
      return !s.empty();
    case Kind::List:
      return generator || !list->empty();
    case Kind::Dict:
      return !dict->empty();
    case Kind::Function:
      return true;
  }
  return false;
}

const Value* Value::get(const std::string& key) const {
  if (kind != Kind::Dict) return nullptr;
  for (const auto& [k, v] : *dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  for (auto& [k, old] : *dict) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict->emplace_back(key, std::move(v));
}

namespace {

// Python's repr of a float: the shortest digits that read back to it, written fixed where the decimal exponent is
// -4..15 (10000000000.0, 0.0001) and as d.ddde+XX otherwise (1e+16, 1e-05). to_chars alone picks whichever is
// shorter (1e+10).
std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(f), std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // d[.ddd]e±XX
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  std::erase(digits, '.');
  const int exp10 = std::stoi(sci.substr(e + 1));
  std::string out = std::signbit(f) ? "-" : "";
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 < 0) return out + "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
    const auto whole = static_cast<size_t>(exp10) + 1;
    if (digits.size() <= whole) return out + digits + std::string(whole - digits.size(), '0') + ".0";
    return out + digits.substr(0, whole) + "." + digits.substr(whole);
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int mag = exp10 < 0 ? -exp10 : exp10;
  return out + (exp10 < 0 ? "e-" : "e+") + (mag < 10 ? "0" : "") + std::to_string(mag);
}

std::string py_quote(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + q;
}

std::string repr(const Value& v) {
  if (v.kind == Value::Kind::String) return v.markup ? "Markup(" + py_quote(v.s) + ")" : py_quote(v.s);
  return to_string(v);
}

// markupsafe's escape: & < > " ' as HTML entities, a Markup string of the result.
Value html_escaped(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const char* entity = c == '&'    ? "&amp;"
                         : c == '<'  ? "&lt;"
                         : c == '>'  ? "&gt;"
                         : c == '"'  ? "&#34;"
                         : c == '\'' ? "&#39;"
                                     : nullptr;
    if (entity != nullptr) {
      out += entity;
    } else {
      out += c;
    }
  }
  Value v = Value::string(std::move(out));
  v.markup = true;
  return v;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_dump(const Value& v, int indent, int depth, std::string& out) {
  const auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.b ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.i);
      return;
    case Value::Kind::Float: {
      const std::string r = float_repr(v.f);
      out += r == "nan" ? "NaN" : r == "inf" ? "Infinity" : r == "-inf" ? "-Infinity" : r;
      return;
    }
    case Value::Kind::String:
      json_string(v.s, out);
      return;
    case Value::Kind::List: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        json_dump((*v.list)[k], indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t k = 0; k < v.dict->size(); ++k) {
        if (k) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        json_string((*v.dict)[k].first, out);
        out += ": ";
        json_dump((*v.dict)[k].second, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::Function:
      fail("tojson: a function is not JSON serializable");
  }
}

}  // namespace

std::string to_string(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return v.b ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(v.i);
    case Value::Kind::Float:
      return float_repr(v.f);
    case Value::Kind::String:
      return v.s;
    case Value::Kind::List: {
      std::string s = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) s += (k ? ", " : "") + repr((*v.list)[k]);
      return s + (!v.tuple ? "]" : v.list->size() == 1 ? ",)" : ")");
    }
    case Value::Kind::Dict: {
      std::string s = "{";
      for (size_t k = 0; k < v.dict->size(); ++k) {
        s += (k ? ", " : "") + py_quote((*v.dict)[k].first) + ": " + repr((*v.dict)[k].second);
      }
      return s + "}";
    }
    case Value::Kind::Function:
      return "<function>";
  }
  return "";
}

std::string to_json(const Value& v, int indent) {
  std::string out;
  json_dump(v, indent, 0, out);
  return out;
}

namespace {

using Node = Template::Node;
using K = Value::Kind;

// Limits on what a model's template may make the renderer do (each an error naming the template line, where before
// the process hung, ran out of memory or overflowed its stack): jinja2's sandbox range limit, which Hugging Face
// renders under; how deep rendering may nest (a recursive macro); how many items (or bytes) one repetition,
// concatenation, replace or indent may make (a string doubled in a loop 40 times asked for a terabyte); how many loop
// iterations one rendering may run.
constexpr int64_t kMaxRange = 100000;
// Each level costs up to ~20 KiB of stack under AddressSanitizer (a macro call's chain), so 200 stay within 4 MiB.
constexpr int kMaxDepth = 200;
constexpr int64_t kMaxRepeat = int64_t{1} << 28;  // bytes of a string, or of a list's items and their strings
constexpr int64_t kMaxLoopSteps = 10'000'000;     // nested loops within range's limit: 10^10 steps would take hours

// Fails when an operation would build a string, or a list, of more than kMaxRepeat bytes.
void check_built(size_t bytes, const char* what, int line) {
  if (bytes > static_cast<size_t>(kMaxRepeat))
    fail("template line {}: {} makes more than {} bytes", line, what, kMaxRepeat);
}

// What a copy of l's items costs: each Value, and its string (lists and dicts inside are shared, not copied).
size_t list_bytes(const List& l) {
  size_t n = 0;
  for (const Value& v : l) n += sizeof(Value) + v.s.size();
  return n;
}

// x op y for op in + - *, failing where Python's unbounded integers would leave int64 (signed overflow was undefined
// behaviour here). Unary minus is 0 - x.
int64_t checked(int64_t x, int64_t y, char op, int line) {
  int64_t r = 0;
  const bool over = op == '+'   ? __builtin_add_overflow(x, y, &r)
                    : op == '-' ? __builtin_sub_overflow(x, y, &r)
                                : __builtin_mul_overflow(x, y, &r);
  if (over) fail("template line {}: integer overflow: {} {} {} is past 64 bits", line, x, op, y);
  return r;
}

bool equal(const Value& a, const Value& b) {
  const bool an = a.kind == K::Int || a.kind == K::Float || a.kind == K::Bool;
  const bool bn = b.kind == K::Int || b.kind == K::Float || b.kind == K::Bool;
  if (an && bn) {
    const double x = a.kind == K::Float ? a.f : a.kind == K::Int ? static_cast<double>(a.i) : a.b;
    const double y = b.kind == K::Float ? b.f : b.kind == K::Int ? static_cast<double>(b.i) : b.b;
    return x == y;
  }
  if (a.kind != b.kind)
    return (a.kind == K::None || a.kind == K::Undefined) && (b.kind == K::None || b.kind == K::Undefined) &&
           a.kind == b.kind;
  switch (a.kind) {
    case K::String:
      return a.s == b.s;
    case K::List:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case K::Dict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [key, val] : *a.dict) {
        const Value* o = b.get(key);
        if (o == nullptr || !equal(val, *o)) return false;
      }
      return true;
    default:
      return a.kind == b.kind;
  }
}

double as_number(const Value& v, int line) {
  if (v.kind == K::Int) return static_cast<double>(v.i);
  if (v.kind == K::Float) return v.f;
  if (v.kind == K::Bool) return v.b;
  fail("template line {}: expected a number, got '{}'", line, to_string(v));
}

int64_t as_int(const Value& v, int line) {
  if (v.kind == K::Int) return v.i;
  if (v.kind == K::Bool) return v.b;
  fail("template line {}: expected an integer, got '{}'", line, to_string(v));
}

const std::string& as_str(const Value& v, int line, const char* what) {
  if (v.kind != K::String) fail("template line {}: {} expects a string, got '{}'", line, what, to_string(v));
  return v.s;
}

// Python's str.isspace() for one code point (the whitespace str.split() and str.strip() take by default): bidi
// classes WS, B and S and category Zs. Only ASCII's six were taken before, so a template's trim kept a no-break space
// (U+00A0) or an ideographic space (U+3000) that Hugging Face's rendering strips.
bool is_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

int64_t chars_in(std::string_view s) {
  return static_cast<int64_t>(code_points(s));
}

// Python's str.strip / lstrip / rstrip: whole characters from the ends, those in chars (a string) or whitespace. Bytes
// were compared before, so strip('é') also took the first byte of an 'è' and left invalid UTF-8.
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<std::string_view> set;
  const bool given = chars != nullptr && chars->kind == K::String;
  for (size_t k = 0; given && k < chars->s.size();) {
    const size_t n = char_at(chars->s, k).second;
    set.push_back(std::string_view(chars->s).substr(k, n));
    k += n;
  }
  auto drop = [&](size_t b, size_t n) {
    const std::string_view c = std::string_view(s).substr(b, n);
    return given ? std::find(set.begin(), set.end(), c) != set.end() : is_space(char_at(s, b).first);
  };
  size_t b = 0, e = s.size();
  while (left && b < e) {
    const size_t n = char_at(s, b).second;
    if (!drop(b, n)) break;
    b += n;
  }
  while (right && e > b) {
    const size_t p = prev_char(s, e);
    if (!drop(p, e - p)) break;
    e = p;
  }
  return s.substr(b, e - b);
}

std::vector<Value> iterate(const Value& v, int line) {
  switch (v.kind) {
    case K::List:
      return *v.list;
    case K::Dict: {
      std::vector<Value> keys;
      for (const auto& kv : *v.dict) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case K::String: {
      // A Value per character (~100 bytes each): a 256 MiB string would take 25 GiB.
      if (v.s.size() > (size_t{1} << 22))
        fail("template line {}: iterating a string of {} bytes (at most 4 MiB)", line, v.s.size());
      std::vector<Value> chars;
      for (size_t k = 0; k < v.s.size();) {
        const unsigned char c = static_cast<unsigned char>(v.s[k]);
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
        chars.push_back(Value::string(v.s.substr(k, n)));
        k += n;
      }
      return chars;
    }
    case K::Undefined:
      // As jinja2's default Undefined (HF renders with it): iterating one, or taking its length, gives nothing. A
      // template's `{% for tool in tools %}` without tools rendered here as an error.
      return {};
    default:
      fail("template line {}: '{}' is not iterable", line, to_string(v));
  }
}

// Python's order of two values, as jinja2's <, sort, min and max use it (-1, 0, 1): numbers (bool, int, float) by
// value, strings by code point (UTF-8 bytes compare in that order), lists item by item and then by length. Other
// pairs fail, as Python raises TypeError for them (jinja2's Undefined refuses every comparison).
int compare(const Value& l, const Value& r, int line) {
  const auto is_num = [](const Value& v) { return v.kind == K::Int || v.kind == K::Float || v.kind == K::Bool; };
  if (is_num(l) && is_num(r)) {
    if (l.kind != K::Float && r.kind != K::Float) {
      const int64_t x = l.kind == K::Int ? l.i : l.b, y = r.kind == K::Int ? r.i : r.b;
      return (x > y) - (x < y);
    }
    const double x = as_number(l, line), y = as_number(r, line);
    return (x > y) - (x < y);
  }
  if (l.kind == K::String && r.kind == K::String) {
    const int c = l.s.compare(r.s);
    return (c > 0) - (c < 0);
  }
  if (l.kind == K::List && r.kind == K::List && l.tuple == r.tuple) {
    const size_t n = std::min(l.list->size(), r.list->size());
    for (size_t k = 0; k < n; ++k) {
      if (const int c = compare((*l.list)[k], (*r.list)[k], line); c != 0) return c;
    }
    return (l.list->size() > n) - (r.list->size() > n);
  }
  const auto what = [](const Value& v) { return v.kind == K::Undefined ? std::string("an undefined value") : repr(v); };
  fail("template line {}: cannot compare {} with {}", line, what(l), what(r));
}

// s cut at every sep (jinja2's attribute paths: "a.b", "role,content").
std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> parts;
  for (size_t b = 0;;) {
    const size_t e = s.find(sep, b);
    parts.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) return parts;
    b = e + 1;
  }
}

// jinja2's attribute path (sort's, selectattr's, map's attribute=): dot-separated parts, each a dict key or, when
// all digits, a list index; a missing one gives Undefined.
Value attribute_path(const Value& item, const std::string& path) {
  Value cur = item;
  for (const std::string& part : split_on(path, '.')) {
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (cur.kind == K::Dict && !digits) {
      const Value* x = cur.get(part);
      cur = x != nullptr ? *x : Value{};
    } else if ((cur.kind == K::List || cur.kind == K::String) && digits && part.size() < 19) {
      const List items = cur.kind == K::List ? *cur.list : iterate(cur, 0);  // a string's code points
      const auto k = static_cast<size_t>(std::stoll(part));
      if (k >= items.size()) return {};
      cur = items[k];
    } else {
      return {};
    }
  }
  return cur;
}

// Python's str.upper ('U'), lower ('L'), title ('T': a cased letter after an uncased character starts a word in
// title case, the others lower) and capitalize ('C': the first character in title case, the rest lower), and
// jinja2's title filter ('J': each run between whitespace, '-', '(', '{', '[' and '<' with its first character upper
// and the rest lower), per code point by utf8proc's simple case mappings (of Python's full ones only "ß" -> "SS" /
// "Ss" is added). Bytes that are not UTF-8 stay as they are.
std::string case_mapped(const std::string& s, char how) {
  std::string out;
  out.reserve(s.size());
  bool after_cased = false;  // 'J': inside a word
  for (size_t i = 0; i < s.size();) {
    const auto [cp, n] = char_at(s, i);
    if (cp < 0) {
      out += s[i++];
      after_cased = false;
      continue;
    }
    const utf8proc_category_t cat = utf8proc_category(cp);
    // "ß" has no one-character upper or title case: Python's full mappings give "SS" and "Ss", utf8proc's "ẞ".
    const bool upper = how == 'U' || (how == 'J' && !after_cased);
    const bool title = (how == 'T' && !after_cased) || (how == 'C' && i == 0);
    if (cp == 0xdf && (upper || title)) {
      out += upper ? "SS" : "Ss";
      after_cased = true;
    } else if (how == 'J') {  // jinja2's title filter: a word's first character upper, the rest lower
      const bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_space(cp);
      append_utf8(out, sep ? cp : after_cased ? utf8proc_tolower(cp) : utf8proc_toupper(cp));
      after_cased = !sep;
    } else {
      append_utf8(out, how == 'U' ? utf8proc_toupper(cp) : title ? utf8proc_totitle(cp) : utf8proc_tolower(cp));
      after_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
    }
    i += n;
  }
  return out;
}

// A sort or comparison key as jinja2's filters form it: the item, or its attribute(s) (several comma-separated:
// a list of them), strings lowered unless case_sensitive.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive, int line) {
  auto lowered = [&](Value v) {
    if (!case_sensitive && v.kind == K::String) v.s = case_mapped(v.s, 'L');
    return v;
  };
  if (!attribute.defined() || attribute.kind == K::None) return lowered(item);
  if (attribute.kind == K::Int) return lowered(attribute_path(item, std::to_string(attribute.i)));
  const std::string& path = as_str(attribute, line, "attribute");
  if (path.find(',') == std::string::npos) return lowered(attribute_path(item, path));
  List parts;
  for (const std::string& one : split_on(path, ',')) parts.push_back(lowered(attribute_path(item, one)));
  return Value::make_list(std::move(parts));
}

// A filter's arguments as jinja2 binds them to its parameters `names`: positional ones first, then keywords by name;
// one left out is Undefined. Too many, unknown or doubled ones fail, naming the filter.
std::vector<Value> bind_args(const std::string& filter, std::initializer_list<const char*> names, const Args& a,
                             const Kwargs& kw, int line) {
  std::vector<Value> out(names.size());
  if (a.size() > names.size())
    fail("template line {}: filter '{}' takes at most {} arguments, got {}", line, filter, names.size(), a.size());
  std::copy(a.begin(), a.end(), out.begin());
  for (const auto& [k, x] : kw) {
    const auto* it = std::find_if(names.begin(), names.end(), [&k = k](const char* n) { return k == n; });
    if (it == names.end()) fail("template line {}: filter '{}' has no argument '{}'", line, filter, k);
    const size_t i = static_cast<size_t>(it - names.begin());
    if (i < a.size()) fail("template line {}: filter '{}' got argument '{}' twice", line, filter, k);
    out[i] = x;
  }
  return out;
}

// Python's str.splitlines(): lines split at \n, \r\n, \r, \v, \f, \x1c-\x1e, U+0085, U+2028 and U+2029, the breaks
// dropped, no empty line after a final break.
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;  // the break's length in bytes at i
    if (c == '\r') {
      n = i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
    } else if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
      n = 1;
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      n = 2;
    } else if (c == 0xe2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xa8 || static_cast<unsigned char>(s[i + 2]) == 0xa9)) {
      n = 3;
    }
    if (n == 0) {
      ++i;
      continue;
    }
    out.push_back(s.substr(start, i - start));
    i += n;
    start = i;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

// Python's printf-style formatting, format % args (the % operator on a string, jinja2's format filter): a tuple
// gives the positional arguments, a dict the %(name)s ones, any other value the one argument. Conversions s r a d i u
// o x X e E f F g G c and %%, with flags (- + space 0 #), width and precision (digits or *).
std::string percent_format(const std::string& format, const Value& args, int line) {
  const bool mapping = args.kind == K::Dict;
  const List positional = args.kind == K::List && args.tuple ? *args.list : mapping ? List{} : List{args};
  size_t next = 0;
  auto take = [&]() -> const Value& {
    if (next >= positional.size()) fail("template line {}: not enough arguments for format string", line);
    return positional[next++];
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) fail("template line {}: incomplete format", line);
    const Value* named = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) fail("template line {}: incomplete format key", line);
      if (!mapping) fail("template line {}: format requires a mapping", line);
      named = args.get(format.substr(i + 1, close - i - 1));
      if (named == nullptr)
        fail("template line {}: format key '{}' is missing", line, format.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::strchr("-+ 0#", format[i]) != nullptr && format[i] != 0) flags += format[i++];
    auto number = [&](const char* what) -> int64_t {
      if (i < format.size() && format[i] == '*') {
        ++i;
        const int64_t n = as_int(take(), line);
        if (n > (1 << 20) || n < -(1 << 20)) fail("template line {}: format {} {} past 2^20", line, what, n);
        return n;
      }
      int64_t n = 0;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') {
        n = n * 10 + (format[i++] - '0');
        if (n > (1 << 20)) fail("template line {}: format {} past 2^20", line, what);
      }
      return n;
    };
    int64_t width = number("width"), precision = -1;
    if (width < 0) {
      flags += '-';
      width = -width;
    }
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = std::max<int64_t>(0, number("precision"));
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;  // Python ignores them
    if (i >= format.size()) fail("template line {}: incomplete format", line);
    const char type = format[i];
    if (type == '%') {
      if (format[i - 1] != '%') fail("template line {}: unsupported format character '%' after a flag or width", line);
      out += '%';
      continue;
    }
    const Value& v = named != nullptr ? *named : take();
    std::string body;
    const bool left = flags.find('-') != std::string::npos;
    bool zero_pad = flags.find('0') != std::string::npos && !left;
    const std::string sign_flag = flags.find('+') != std::string::npos   ? "+"
                                  : flags.find(' ') != std::string::npos ? " "
                                                                         : "";
    if (type == 's' || type == 'r' || type == 'a') {
      body = type == 's' ? to_string(v) : repr(v);
      // Python keeps the first `precision` characters (cutting bytes split "é" and wrote invalid UTF-8).
      if (precision >= 0) body = prefix_chars(body, static_cast<size_t>(precision));
      zero_pad = false;
    } else if (type == 'c') {
      if (v.kind == K::String) {
        if (code_points(v.s) != 1) fail("template line {}: %c requires an int or a single character", line);
        body = v.s;
      } else {
        const int64_t cp = as_int(v, line);
        if (cp < 0 || cp > 0x10ffff || !utf8proc_codepoint_valid(static_cast<utf8proc_int32_t>(cp)))
          fail("template line {}: %c arg {} not in range(0x110000)", line, cp);
        append_utf8(body, static_cast<utf8proc_int32_t>(cp));
      }
      zero_pad = false;
    } else if (std::strchr("diuoxX", type) != nullptr) {
      if (v.kind != K::Int && v.kind != K::Bool && v.kind != K::Float)
        fail("template line {}: %{} format: a number is required, not {}", line, type, repr(v));
      if (v.kind == K::Float && (type == 'o' || type == 'x' || type == 'X'))
        fail("template line {}: %{} format: an integer is required, not {}", line, type, repr(v));
      if (v.kind == K::Float && !std::isfinite(v.f))
        fail("template line {}: cannot convert {} to integer", line, repr(v));
      if (v.kind == K::Float && std::fabs(v.f) >= 0x1p63) fail("template line {}: {} is past 64 bits", line, repr(v));
      const int64_t x = v.kind == K::Float ? static_cast<int64_t>(v.f) : as_int(v, line);
      const uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
      char buf[32];
      const char* fmt = type == 'o' ? "%llo" : type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llu";
      std::snprintf(buf, sizeof buf, fmt, static_cast<unsigned long long>(mag));
      std::string digits = buf;
      if (precision >= 0 && static_cast<int64_t>(digits.size()) < precision)
        digits.insert(0, static_cast<size_t>(precision) - digits.size(), '0');
      const std::string prefix = flags.find('#') == std::string::npos ? ""
                                 : type == 'o'                        ? "0o"
                                 : type == 'x'                        ? "0x"
                                 : type == 'X'                        ? "0X"
                                                                      : "";
      const std::string sign = x < 0 ? "-" : sign_flag;
      if (zero_pad && static_cast<int64_t>(sign.size() + prefix.size() + digits.size()) < width)
        digits.insert(0, static_cast<size_t>(width) - sign.size() - prefix.size() - digits.size(), '0');
      body = sign + prefix + digits;
    } else if (std::strchr("eEfFgG", type) != nullptr) {
      const double x = as_number(v, line);
      std::string spec = "%" + flags + (width > 0 ? std::to_string(width) : "") + "." +
                         std::to_string(precision >= 0 ? precision : 6) + type;
      const int n = std::snprintf(nullptr, 0, spec.c_str(), x);
      body.resize(static_cast<size_t>(n) + 1);
      std::snprintf(body.data(), body.size(), spec.c_str(), x);
      body.resize(static_cast<size_t>(n));
      out += body;
      continue;
    } else {
      fail("template line {}: unsupported format character '{}'", line, type);
    }
    const auto len = static_cast<int64_t>(code_points(body));
    if (len < width) {
      const std::string pad(static_cast<size_t>(width - len), ' ');
      body = left ? body + pad : pad + body;
    }
    out += body;
  }
  if (!mapping && next < positional.size())
    fail("template line {}: not all arguments converted during string formatting", line);
  return out;
}

// What Python's set tells apart, as one string (unique's seen set: comparing each item with every one kept took
// 10^10 steps for range(100000)): equal numbers alike whatever their type (1, 1.0 and true), strings, None and
// Undefined, and tuples of those; lists and dicts fail, as Python's "unhashable type".
std::string hash_key(const Value& v, int line) {
  switch (v.kind) {
    case K::Undefined:
      return "u";
    case K::None:
      return "n";
    case K::Bool:
    case K::Int:
      return "i" + std::to_string(v.kind == K::Bool ? int64_t{v.b} : v.i);
    case K::Float:
      if (std::trunc(v.f) == v.f && std::fabs(v.f) < 0x1p63) return "i" + std::to_string(static_cast<int64_t>(v.f));
      return "f" + float_repr(v.f);
    case K::String:
      return "s" + v.s;
    case K::List:
      if (v.tuple) {
        std::string key = "t" + std::to_string(v.list->size());
        for (const auto& x : *v.list) {
          const std::string k = hash_key(x, line);
          key += ":" + std::to_string(k.size()) + ":" + k;  // lengths keep ("a", "b") apart from ("a:b",)
        }
        return key;
      }
      [[fallthrough]];
    default:
      fail("template line {}: unique: unhashable value {}", line, repr(v));
  }
}

// A list or a tuple as `like` is one (slicing, + and repetition keep the kind).
Value list_like(const Value& like, List l) {
  return like.tuple ? Value::make_tuple(std::move(l)) : Value::make_list(std::move(l));
}

Value generator_of(List l) {
  Value v = Value::make_list(std::move(l));
  v.generator = true;
  return v;
}

int64_t normalize_index(int64_t i, int64_t n) {
  return i < 0 ? i + n : i;
}

// A start or end of Python's find/index(sub, start, end) over n items: from the end when negative, then within [0, n].
int64_t clamped_index(int64_t i, int64_t n) {
  return std::clamp<int64_t>(normalize_index(i, n), 0, n);
}

// Python's int() and float() take single underscores between digits ('1_000'): the text without them, or nothing
// where one stands elsewhere (the reference raises there, and the filters take their default).
std::optional<std::string> without_digit_underscores(const std::string& t) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '_') {
      out += t[i];
    } else if (i == 0 || i + 1 == t.size() || !digit(t[i - 1]) || !digit(t[i + 1])) {
      return std::nullopt;
    }
  }
  return out;
}

// A string's number as Python's float() reads it: surrounding whitespace allowed, the whole rest consumed.
std::optional<double> parse_float(const std::string& text) {
  const auto plain = without_digit_underscores(strip(text, nullptr, true, true));
  if (!plain) return std::nullopt;
  const std::string& t = *plain;
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

// jinja2's int filter: int(value), else int(float(value)) truncated toward zero, else the default (a string that is
// no number, none, a list). Where the reference raises (an infinite float, or an integer past 64 bits, which
// Python holds exactly), this fails naming the line.
Value int_filter(const Value& v, const Value& fallback, int line) {
  auto truncate = [&](double d) {
    if (std::isnan(d)) return fallback;
    if (std::fabs(std::trunc(d)) >= 9223372036854775808.0)  // 2^63, inf included
      fail("template line {}: {} is past 64-bit integers", line, d);
    return Value::integer(static_cast<int64_t>(std::trunc(d)));
  };
  switch (v.kind) {
    case K::Int:
      return v;
    case K::Bool:
      return Value::integer(v.b);
    case K::Float:
      return truncate(v.f);
    case K::String: {
      const auto plain = without_digit_underscores(strip(v.s, nullptr, true, true));
      if (!plain) return fallback;
      std::string t = *plain;
      if (!t.empty() && t[0] == '+') t.erase(0, 1);
      int64_t i = 0;
      const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), i);
      if (!t.empty() && ec == std::errc() && end == t.data() + t.size()) return Value::integer(i);
      if (ec == std::errc::result_out_of_range) fail("template line {}: '{}' is past 64-bit integers", line, v.s);
      if (const auto d = parse_float(v.s)) return truncate(*d);
      return fallback;
    }
    default:
      return fallback;
  }
}

// jinja2's float filter: float(value), else the default.
Value float_filter(const Value& v, const Value& fallback) {
  if (v.kind == K::Float) return v;
  if (v.kind == K::Int) return Value::number(static_cast<double>(v.i));
  if (v.kind == K::Bool) return Value::number(v.b ? 1.0 : 0.0);
  if (v.kind == K::String) {
    if (const auto d = parse_float(v.s)) return Value::number(*d);
  }
  return fallback;
}

// jinja2's round(value, precision=0, method='common'): 'common' is Python's round (to nearest, ties to even, on the
// exact binary value; an integer stays one), 'ceil' and 'floor' scale by 10^precision, round that way and divide
// back (a float).
Value round_filter(const Value& v, const Args& a, const Kwargs& kw, int line) {
  int64_t precision = a.empty() ? 0 : as_int(a[0], line);
  std::string method = a.size() < 2 ? "common" : as_str(a[1], line, "round");
  for (const auto& [k, x] : kw) {
    if (k == "precision") {
      precision = as_int(x, line);
    } else if (k == "method") {
      method = as_str(x, line, "round");
    } else {
      fail("template line {}: round has no argument '{}'", line, k);
    }
  }
  if (method != "common" && method != "ceil" && method != "floor") {
    fail("template line {}: round method '{}' is not common, ceil or floor", line, method);
  }
  // 0-22 places, where 10^precision is exact in a double; rounding to tens or hundreds (a negative precision), which
  // no chat template does, is refused rather than approximated.
  if (precision < 0 || precision > 22) fail("template line {}: round precision {} is not 0-22", line, precision);
  if (v.kind == K::Int && method == "common") return v;
  const double x = as_number(v, line);
  if (method == "common") {
    if (!std::isfinite(x)) return Value::number(x);
    // The shortest correctly rounded decimal of that many places, read back: Python rounds the same way (dtoa).
    char text[400];  // 309 digits before the point at most, 22 after
    std::snprintf(text, sizeof text, "%.*f", static_cast<int>(precision), x);
    return Value::number(std::strtod(text, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double r = method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
  return Value::number(r / scale);
}

class Evaluator {
 public:
  explicit Evaluator(std::string& out) : out_(out) {}

  std::vector<std::map<std::string, Value>> frames;

  enum class Flow { Normal, Break, Continue };

  // Block bodies and expressions each open one level of rendering (DepthGuard). The parser bounds how deep one
  // template nests; a macro that calls itself (or two that call each other) is bounded here, where it overflowed the
  // stack (Python's jinja2 stops it with a RecursionError).
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
        if (e.name == "-")
          return v.kind == K::Int ? Value::integer(checked(0, v.i, '-', e.line)) : Value::number(-as_number(v, e.line));
        return v;
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
    if (item.kind != K::List || item.list->size() != n.targets.size()) {
      fail("template line {}: cannot unpack '{}' into {} names", n.line, to_string(item), n.targets.size());
    }
    for (size_t k = 0; k < n.targets.size(); ++k) frames.back()[n.targets[k]] = (*item.list)[k];
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

  Value attribute(const Value& obj, const std::string& name, int line) {
    if (obj.group && (name == "grouper" || name == "list")) return (*obj.list)[name == "grouper" ? 0 : 1];
    if (obj.kind == K::Dict) {
      if (const Value* v = obj.get(name)) return *v;
      if (name == "items" || name == "keys" || name == "values" || name == "get") return method(obj, name, line);
      return {};
    }
    // A name Python's str or list has is a method (calling one not written here fails by name); any other is
    // Undefined, as jinja2 gives ('x'.content printed "<function>").
    static const std::set<std::string, std::less<>> kStr = {
        "capitalize", "casefold",     "center",       "count",   "encode",     "endswith",    "expandtabs",
        "find",       "format",       "format_map",   "index",   "isalnum",    "isalpha",     "isascii",
        "isdecimal",  "isdigit",      "isidentifier", "islower", "isnumeric",  "isprintable", "isspace",
        "istitle",    "isupper",      "join",         "ljust",   "lower",      "lstrip",      "maketrans",
        "partition",  "removeprefix", "removesuffix", "replace", "rfind",      "rindex",      "rjust",
        "rpartition", "rsplit",       "rstrip",       "split",   "splitlines", "startswith",  "strip",
        "swapcase",   "title",        "translate",    "upper",   "zfill"};
    static const std::set<std::string, std::less<>> kList = {"append", "clear", "copy",   "count",   "extend", "index",
                                                             "insert", "pop",   "remove", "reverse", "sort"};
    // A tuple has only count and index.
    if (obj.kind == K::List && obj.tuple && name != "count" && name != "index") return {};
    if ((obj.kind == K::String && kStr.contains(name)) || (obj.kind == K::List && kList.contains(name)))
      return method(obj, name, line);
    if (obj.kind == K::Undefined) fail("template line {}: '{}' of an undefined value", line, name);
    return {};
  }

  Value method(const Value& obj, const std::string& name, int line) {
    return Value::function([obj, name, line](const Args& a, const Kwargs&) -> Value {
      auto arg = [&](size_t k) { return k < a.size() ? &a[k] : nullptr; };
      // A required argument: a method called without it dereferenced a null pointer (',' .join() crashed).
      auto need = [&](size_t k) -> const Value& {
        if (k >= a.size())
          fail("template line {}: {}() needs at least {} argument(s), got {}", line, name, k + 1, a.size());
        return a[k];
      };
      if (obj.kind == K::String) {
        const std::string& s = obj.s;
        if (name == "strip") return Value::string(strip(s, arg(0), true, true));
        if (name == "lstrip") return Value::string(strip(s, arg(0), true, false));
        if (name == "rstrip") return Value::string(strip(s, arg(0), false, true));
        if (name == "upper" || name == "lower") return Value::string(case_mapped(s, name == "upper" ? 'U' : 'L'));
        if (name == "startswith" || name == "endswith") {
          const std::string& p = as_str(need(0), line, name.c_str());
          const bool ok =
              p.size() <= s.size() && (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                                            : s.compare(s.size() - p.size(), p.size(), p) == 0);
          return Value::boolean(ok);
        }
        if (name == "split") {
          List parts;
          if (arg(0) == nullptr || arg(0)->kind == K::None) {
            // Python's split(None, maxsplit): runs of whitespace separate, none at the ends; after maxsplit words
            // the rest is one item, its trailing whitespace kept (maxsplit was ignored here).
            const int64_t max = arg(1) ? as_int(*arg(1), line) : -1;
            auto space_at = [&](size_t k) { return is_space(char_at(s, k).first); };
            auto next = [&](size_t k) { return k + char_at(s, k).second; };
            size_t k = 0;
            for (int64_t made = 0;; ++made) {
              while (k < s.size() && space_at(k)) k = next(k);
              if (k == s.size()) break;
              if (max >= 0 && made == max) {
                parts.push_back(Value::string(s.substr(k)));
                break;
              }
              const size_t st = k;
              while (k < s.size() && !space_at(k)) k = next(k);
              parts.push_back(Value::string(s.substr(st, k - st)));
            }
          } else {
            const std::string& sep = as_str(*arg(0), line, "split");
            if (sep.empty()) fail("template line {}: split with an empty separator", line);
            int64_t max = arg(1) ? as_int(*arg(1), line) : -1;
            size_t st = 0;
            for (size_t at; max != 0 && (at = s.find(sep, st)) != std::string::npos; st = at + sep.size(), --max) {
              parts.push_back(Value::string(s.substr(st, at - st)));
            }
            parts.push_back(Value::string(s.substr(st)));
          }
          return Value::make_list(std::move(parts));
        }
        if (name == "replace") {
          // Python's str.replace(old, new[, count]): an empty old matches before every character and at the end
          // (it returned the string unchanged here).
          const std::string& from = as_str(need(0), line, "replace");
          const std::string& to = as_str(need(1), line, "replace");
          int64_t count = arg(2) != nullptr ? as_int(*arg(2), line) : -1;
          if (count < 0) count = INT64_MAX;
          std::string r;
          auto add = [&](std::string_view piece) {
            check_built(r.size() + piece.size(), "replace", line);
            r += piece;
          };
          size_t st = 0;
          if (from.empty()) {
            for (const Value& c : iterate(obj, line)) {
              if (count-- > 0) add(to);
              add(c.s);
            }
            if (count > 0) add(to);
            return Value::string(r);
          }
          for (size_t at; count > 0 && (at = s.find(from, st)) != std::string::npos; st = at + from.size(), --count) {
            add(std::string_view(s).substr(st, at - st));
            add(to);
          }
          add(std::string_view(s).substr(st));
          return Value::string(r);
        }
        if (name == "title" || name == "capitalize") return Value::string(case_mapped(s, name == "title" ? 'T' : 'C'));
        if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
          // Python's find/rfind/index/rindex/count(sub[, start[, end]]): positions in characters (bytes before, and
          // start and end were ignored), start and end as a slice's, an empty sub found at every position.
          const std::string& sub = as_str(need(0), line, name.c_str());
          const int64_t n = chars_in(s);
          auto bound = [&](const Value* x, int64_t dflt) {
            if (x == nullptr || x->kind == K::None) return dflt;
            return clamped_index(as_int(*x, line), n);
          };
          const int64_t c0 = bound(arg(1), 0), c1 = bound(arg(2), n);
          const bool past = arg(1) != nullptr && arg(1)->kind != K::None && as_int(*arg(1), line) > n;
          const size_t b0 = byte_offset(s, static_cast<size_t>(c0)), b1 = byte_offset(s, static_cast<size_t>(c1));
          const std::string_view range = c0 <= c1 ? std::string_view(s).substr(b0, b1 - b0) : std::string_view();
          if (name == "count") {
            if (past || c0 > c1) return Value::integer(0);
            if (sub.empty()) return Value::integer(c1 - c0 + 1);
            int64_t c = 0;
            for (size_t at = 0; (at = range.find(sub, at)) != std::string_view::npos; at += sub.size()) ++c;
            return Value::integer(c);
          }
          size_t at = std::string_view::npos;
          if (!past && c0 <= c1) at = name[0] == 'r' ? range.rfind(sub) : range.find(sub);
          if (at == std::string_view::npos) {
            if (name == "index" || name == "rindex") fail("template line {}: {}: substring not found", line, name);
            return Value::integer(-1);
          }
          return Value::integer(c0 + chars_in(range.substr(0, at)));
        }
        if (name == "ljust" || name == "rjust" || name == "center" || name == "zfill") {
          // Python's padding to width characters: fillchar (one character, a space by default) after, before or on
          // both sides (center: the extra one on the left when the margin and width are odd); zfill with zeros after
          // a sign.
          const int64_t width = as_int(need(0), line);
          const std::string fill = name == "zfill"     ? "0"
                                   : arg(1) != nullptr ? as_str(*arg(1), line, name.c_str())
                                                       : " ";
          if (chars_in(fill) != 1) fail("template line {}: {}: the fill character must be one character", line, name);
          const int64_t n = chars_in(s);
          if (width <= n) return Value::string(s);
          check_built(static_cast<size_t>(std::min<int64_t>(width, int64_t{1} << 40)) * fill.size(), name.c_str(),
                      line);
          const int64_t marg = width - n;
          auto pad = [&](int64_t k) {
            std::string p;
            for (int64_t i = 0; i < k; ++i) p += fill;
            return p;
          };
          if (name == "ljust") return Value::string(s + pad(marg));
          if (name == "rjust") return Value::string(pad(marg) + s);
          if (name == "center") {
            const int64_t left = marg / 2 + (marg & width & 1);
            return Value::string(pad(left) + s + pad(marg - left));
          }
          const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
          return Value::string(s.substr(0, sign) + pad(marg) + s.substr(sign));
        }
        if (name.starts_with("is")) {
          // Python's str predicates, each true of a non-empty string whose every character passes (islower, isupper
          // and istitle: whose cased characters pass, at least one). isalpha (category L), isdecimal (Nd), isalnum
          // (L or N), isspace and isascii hold for all of Unicode; isdigit, isnumeric, islower, isupper and istitle
          // need Unicode properties utf8proc lacks (Numeric_Type, Other_Lowercase), so beyond ASCII they fail by name
          // rather than guess.
          bool ascii = true;
          for (const char ch : s) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
          auto all = [&](auto pass) {
            if (s.empty()) return false;
            for (size_t k = 0; k < s.size();) {
              const auto [cp, n] = char_at(s, k);
              if (!pass(cp, cp < 0 ? UTF8PROC_CATEGORY_CN : utf8proc_category(cp))) return false;
              k += n;
            }
            return true;
          };
          auto letter = [](utf8proc_category_t c) { return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO; };
          auto number = [](utf8proc_category_t c) { return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO; };
          if (name == "isascii") return Value::boolean(ascii);
          if (name == "isspace") return Value::boolean(all([](int32_t cp, auto) { return is_space(cp); }));
          if (name == "isalpha") return Value::boolean(all([&](int32_t, auto c) { return letter(c); }));
          if (name == "isdecimal")
            return Value::boolean(all([](int32_t, auto c) { return c == UTF8PROC_CATEGORY_ND; }));
          if (name == "isalnum") return Value::boolean(all([&](int32_t, auto c) { return letter(c) || number(c); }));
          if (name == "isdigit" || name == "isnumeric" || name == "islower" || name == "isupper" || name == "istitle") {
            if (!ascii) fail("template line {}: {}() of text beyond ASCII is not supported", line, name);
            if (name == "isdigit" || name == "isnumeric")
              return Value::boolean(all([](int32_t cp, auto) { return cp >= '0' && cp <= '9'; }));
            bool cased = false, ok = true, after_cased = false;
            for (const char ch : s) {
              const bool up = ch >= 'A' && ch <= 'Z', low = ch >= 'a' && ch <= 'z';
              cased = cased || up || low;
              if (name == "islower") ok = ok && !up;
              if (name == "isupper") ok = ok && !low;
              if (name == "istitle") ok = ok && (after_cased ? !up : !low);  // upper only after an uncased one
              after_cased = up || low;
            }
            return Value::boolean(cased && ok);
          }
        }
        if (name == "join") {
          std::string r;
          const auto items = iterate(need(0), line);
          for (size_t k = 0; k < items.size(); ++k) {
            r += (k ? s : "") + to_string(items[k]);
            check_built(r.size(), "join", line);
          }
          return Value::string(r);
        }
      } else if (obj.kind == K::Dict) {
        if (name == "items" || name == "keys" || name == "values") {
          List l;
          for (const auto& [k, v] : *obj.dict) {
            if (name == "items") l.push_back(Value::make_tuple({Value::string(k), v}));
            if (name == "keys") l.push_back(Value::string(k));
            if (name == "values") l.push_back(v);
          }
          return Value::make_list(std::move(l));
        }
        if (name == "get") {
          const Value* v = obj.get(as_str(need(0), line, "get"));
          return v ? *v : (arg(1) ? *arg(1) : Value::none());
        }
      } else if (obj.kind == K::List && (name == "count" || name == "index")) {
        // Python's list.count(x) and list.index(x[, start[, end]]), by ==.
        const Value& x = need(0);
        const auto n = static_cast<int64_t>(obj.list->size());
        auto bound = [&](const Value* b, int64_t dflt) {
          if (b == nullptr) return dflt;
          return clamped_index(as_int(*b, line), n);
        };
        const int64_t k0 = name == "index" ? bound(arg(1), 0) : 0, k1 = name == "index" ? bound(arg(2), n) : n;
        int64_t count = 0;
        for (int64_t k = k0; k < k1; ++k) {
          if (!equal((*obj.list)[static_cast<size_t>(k)], x)) continue;
          if (name == "index") return Value::integer(k);
          ++count;
        }
        if (name == "index") fail("template line {}: index: '{}' is not in the list", line, to_string(x));
        return Value::integer(count);
      } else if (obj.kind == K::List && name == "append") {
        // Hugging Face's sandbox refuses it (SecurityError), and a list appended to itself printed forever.
        fail("template line {}: lists cannot be changed ('append' is refused, as in jinja2's sandbox)", line);
      }
      fail("template line {}: unknown method '{}'", line, name);
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
      // A string's k-th character, as Python indexes (bytes were taken before: "aé"[1] gave half an é).
      const size_t at = byte_offset(obj.s, static_cast<size_t>(k));
      return Value::string(obj.s.substr(at, char_at(obj.s, at).second));
    }
    if (obj.kind == K::Undefined) fail("template line {}: indexing an undefined value", line);
    return {};
  }

  Value slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    if (obj.kind != K::List && obj.kind != K::String)
      fail("template line {}: cannot slice '{}'", e.line, to_string(obj));
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
      // By characters, as Python slices (bytes were taken before, and "ÉtÉ"[::2] gave invalid UTF-8): one walk over
      // the string, forward or back, keeping each step-th character from start on.
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

  Value call(const Expr& e) {
    const Value f = eval(*e.args[0]);
    Args args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    Kwargs kwargs;
    for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, eval(*v));
    if (f.kind != K::Function) fail("template line {}: calling something that is not a function", e.line);
    return (*f.fn)(args, kwargs);
  }

  Value filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    Args a;
    for (size_t k = 1; k < e.args.size(); ++k) a.push_back(eval(*e.args[k]));
    Kwargs kw;
    for (const auto& [k, x] : e.kwargs) kw.emplace_back(k, eval(*x));
    return apply_filter(e.name, v, a, kw, e.line);
  }

  // jinja2's built-in filter f on v (map() applies one by name too).
  Value apply_filter(const std::string& f, const Value& v, const Args& a, const Kwargs& kw, int line) {
    if (f == "length" || f == "count") {
      if (v.kind == K::String) return Value::integer(static_cast<int64_t>(code_points(v.s)));
      return Value::integer(static_cast<int64_t>(iterate(v, line).size()));
    }
    if (f == "tojson") {
      // json.dumps' indent: none for one line; a negative one writes the line ends only, as 0 does. Past 1024 it is
      // refused (2^40 was cast to an int: 0).
      int64_t indent = -1;
      auto set_indent = [&](const Value& x) {
        if (x.kind == K::None) return;
        indent = std::max<int64_t>(0, as_int(x, line));
        if (indent > 1024) fail("template line {}: tojson indent {} is past 1024", line, indent);
      };
      if (!a.empty()) set_indent(a[0]);
      for (const auto& [k, x] : kw) {
        if (k == "indent") set_indent(x);
      }
      return Value::string(to_json(v, static_cast<int>(indent)));
    }
    if (f == "trim") return Value::string(strip(to_string(v), a.empty() ? nullptr : &a[0], true, true));
    if (f == "string") return Value::string(to_string(v));
    if (f == "title") return Value::string(case_mapped(to_string(v), 'J'));  // not str.title()
    if (f == "upper" || f == "lower" || f == "capitalize") {
      return (*method(Value::string(to_string(v)), f, line).fn)({}, {});
    }
    if (f == "replace") return (*method(Value::string(to_string(v)), "replace", line).fn)(a, {});
    if (f == "first" || f == "last") {
      const auto items = iterate(v, line);
      if (items.empty()) return {};
      return f == "first" ? items.front() : items.back();
    }
    if (f == "join") {
      const std::vector<Value> p = bind_args(f, {"d", "attribute"}, a, kw, line);
      const std::string sep = p[0].defined() ? to_string(p[0]) : "";
      if (!p[1].defined() || p[1].kind == K::None) return (*method(Value::string(sep), "join", line).fn)({v}, {});
      List parts;
      for (const auto& item : iterate(v, line)) parts.push_back(sort_key(item, p[1], /*case_sensitive=*/true, line));
      return (*method(Value::string(sep), "join", line).fn)({Value::make_list(std::move(parts))}, {});
    }
    if (f == "default" || f == "d") {
      const bool use_default = !v.defined() || (a.size() > 1 && a[1].truthy() && !v.truthy());
      return use_default ? (a.empty() ? Value::string("") : a[0]) : v;
    }
    if (f == "list") return Value::make_list(iterate(v, line));
    if (f == "items") return (*method(v, "items", line).fn)({}, {});
    if (f == "int") return int_filter(v, a.empty() ? Value::integer(0) : a[0], line);
    if (f == "float") return float_filter(v, a.empty() ? Value::number(0.0) : a[0]);
    if (f == "round") return round_filter(v, a, kw, line);
    if (f == "abs")
      return v.kind == K::Int ? Value::integer(v.i < 0 ? checked(0, v.i, '-', line) : v.i)
                              : Value::number(std::fabs(as_number(v, line)));
    if (f == "safe" || f == "e" || f == "escape" || f == "forceescape") {
      // jinja2 (HF renders without autoescape): safe marks str(value) as Markup; escape HTML-escapes str(value)
      // unless it is Markup already; forceescape always does. (escape returned its value untouched before, so
      // '<b>'|e printed <b> where jinja2 prints &lt;b&gt;.)
      if (f == "safe") {
        Value m = Value::string(to_string(v));
        m.markup = true;
        return m;
      }
      if (f != "forceescape" && v.kind == K::String && v.markup) return v;
      return html_escaped(to_string(v));
    }
    if (f == "reverse") {
      auto items = iterate(v, line);
      std::reverse(items.begin(), items.end());
      if (v.kind == K::String) {
        std::string s;
        for (const auto& c : items) s += c.s;
        return Value::string(s);
      }
      return generator_of(std::move(items));  // jinja2's reversed(): an iterator, true even when empty
    }
    if (f == "indent") {
      // jinja2: each line after the first gains the indentation (width spaces, or width itself when a string), blank
      // ones only with blank=true; the first one with first=true, even blank. Lines split as str.splitlines() does.
      const std::vector<Value> p = bind_args(f, {"width", "first", "blank"}, a, kw, line);
      const std::string pad =
          p[0].kind == K::String ? p[0].s
          : p[0].defined()
              ? std::string(static_cast<size_t>(std::clamp<int64_t>(as_int(p[0], line), 0, int64_t{1} << 16)), ' ')
              : std::string(4, ' ');
      const std::vector<std::string> lines = split_lines(to_string(v) + "\n");
      std::string out;
      for (size_t k = 0; k < lines.size(); ++k) {
        if (k > 0) out += '\n';
        if (k == 0 ? p[1].truthy() : !lines[k].empty() || p[2].truthy()) out += pad;
        out += lines[k];
        check_built(out.size(), "indent", line);
      }
      return Value::string(out);
    }
    if (f == "format") {
      // jinja2: value % (args or kwargs), the positional arguments as a tuple.
      if (!a.empty() && !kw.empty())
        fail("template line {}: format takes positional or keyword arguments, not both", line);
      if (!kw.empty())
        return Value::string(percent_format(to_string(v), Value::make_dict(Dict(kw.begin(), kw.end())), line));
      return Value::string(percent_format(to_string(v), Value::make_tuple(a), line));
    }
    if (f == "select" || f == "reject") {
      // jinja2: select(test, *args); without a test, each item's truth.
      const std::string test_name = a.empty() ? std::string() : as_str(a[0], line, f.c_str());
      const Args rest(a.begin() + std::min<ptrdiff_t>(1, static_cast<ptrdiff_t>(a.size())), a.end());
      List out;
      for (const auto& item : iterate(v, line)) {
        const bool pass = test_name.empty() ? item.truthy() : apply_test(test_name, item, rest, line);
        if (pass == (f == "select")) out.push_back(item);
      }
      return generator_of(std::move(out));
    }
    if (f == "selectattr" || f == "rejectattr") {
      // jinja2: selectattr(attribute, test, *args); without a test, the attribute's truth.
      if (a.empty()) fail("template line {}: {} needs an attribute", line, f);
      const std::string& attr = as_str(a[0], line, f.c_str());
      const std::string test_name = a.size() > 1 ? as_str(a[1], line, f.c_str()) : std::string();
      const Args rest(a.begin() + std::min<ptrdiff_t>(2, static_cast<ptrdiff_t>(a.size())), a.end());
      List out;
      for (const auto& item : iterate(v, line)) {
        const Value x = attribute_path(item, attr);
        const bool pass = test_name.empty() ? x.truthy() : apply_test(test_name, x, rest, line);
        if (pass == (f == "selectattr")) out.push_back(item);
      }
      return generator_of(std::move(out));
    }
    if (f == "map") {
      // jinja2: map(attribute=path, default=value), or map(filter, *args, **kwargs) applying that filter to each item.
      List out;
      if (a.empty()) {
        const std::vector<Value> p = bind_args(f, {"attribute", "default"}, a, kw, line);
        if (!p[0].defined()) fail("template line {}: map needs a filter name or attribute=", line);
        for (const auto& item : iterate(v, line)) {
          Value x = sort_key(item, p[0], /*case_sensitive=*/true, line);
          out.push_back(!x.defined() && p[1].defined() ? p[1] : x);
        }
      } else {
        const std::string& name = as_str(a[0], line, "map");
        if (name == "map") fail("template line {}: map('map') is not supported", line);
        const Args rest(a.begin() + 1, a.end());
        for (const auto& item : iterate(v, line)) out.push_back(apply_filter(name, item, rest, kw, line));
      }
      return generator_of(std::move(out));
    }
    if (f == "sort") {
      const std::vector<Value> p = bind_args(f, {"reverse", "case_sensitive", "attribute"}, a, kw, line);
      return Value::make_list(sorted(iterate(v, line), p[2], p[1].truthy(), p[0].truthy(), line));
    }
    if (f == "dictsort") {
      // jinja2: (key, value) tuples by key or value.
      const std::vector<Value> p = bind_args(f, {"case_sensitive", "by", "reverse"}, a, kw, line);
      if (v.kind != K::Dict) fail("template line {}: dictsort expects a dict, got '{}'", line, to_string(v));
      const std::string by = p[1].defined() ? as_str(p[1], line, "dictsort's by") : "key";
      if (by != "key" && by != "value")
        fail("template line {}: dictsort sorts by 'key' or 'value', got '{}'", line, by);
      List pairs;
      for (const auto& [k, x] : *v.dict) pairs.push_back(Value::make_tuple({Value::string(k), x}));
      return Value::make_list(
          sorted(std::move(pairs), Value::integer(by == "key" ? 0 : 1), p[0].truthy(), p[2].truthy(), line));
    }
    if (f == "unique") {
      const std::vector<Value> p = bind_args(f, {"case_sensitive", "attribute"}, a, kw, line);
      List out;
      std::unordered_set<std::string> seen;
      for (const auto& item : iterate(v, line)) {
        if (seen.insert(hash_key(sort_key(item, p[1], p[0].truthy(), line), line)).second) out.push_back(item);
      }
      return generator_of(std::move(out));
    }
    if (f == "min" || f == "max") {
      // The first least (greatest) item by its key; an empty sequence gives Undefined, as jinja2's does.
      const std::vector<Value> p = bind_args(f, {"case_sensitive", "attribute"}, a, kw, line);
      const List items = iterate(v, line);
      const Value* best = nullptr;
      Value best_key;
      for (const auto& item : items) {
        Value key = sort_key(item, p[1], p[0].truthy(), line);
        if (best == nullptr || compare(key, best_key, line) == (f == "min" ? -1 : 1)) {
          best = &item;
          best_key = std::move(key);
        }
      }
      return best != nullptr ? *best : Value{};
    }
    if (f == "sum") {
      // Python's sum over numbers, from start, left to right (ints exact, failing past 64 bits).
      const std::vector<Value> p = bind_args(f, {"attribute", "start"}, a, kw, line);
      Value total = p[1].defined() ? p[1] : Value::integer(0);
      for (const auto& item : iterate(v, line)) {
        const Value x = sort_key(item, p[0], /*case_sensitive=*/true, line);
        const bool ints = (total.kind == K::Int || total.kind == K::Bool) && (x.kind == K::Int || x.kind == K::Bool);
        total = ints ? Value::integer(checked(as_int(total, line), as_int(x, line), '+', line))
                     : Value::number(as_number(total, line) + as_number(x, line));
      }
      return total;
    }
    if (f == "wordcount") {
      // jinja2: len(re.findall(r"\w+", s)); \w is a letter, a number (Unicode categories L and N) or '_'.
      const std::string text = to_string(v);
      int64_t words = 0;
      bool in_word = false;
      for (size_t k = 0; k < text.size();) {
        const auto [cp, n] = char_at(text, k);
        const utf8proc_category_t c = cp < 0 ? UTF8PROC_CATEGORY_CN : utf8proc_category(cp);
        const bool word = cp == '_' || (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
                          (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
        words += word && !in_word ? 1 : 0;
        in_word = word;
        k += n;
      }
      return Value::integer(words);
    }
    if (f == "truncate") {
      // jinja2's do_truncate: within length + leeway (5, HF's default policy) as is; else cut to length - len(end)
      // characters, back to the last space unless killwords, and end appended. Lengths count code points.
      const std::vector<Value> p = bind_args(f, {"length", "killwords", "end", "leeway"}, a, kw, line);
      const std::string& text = as_str(v, line, "truncate");
      const int64_t length = p[0].defined() ? as_int(p[0], line) : 255;
      const std::string end = p[2].defined() ? to_string(p[2]) : "...";
      const int64_t leeway = p[3].defined() && p[3].kind != K::None ? as_int(p[3], line) : 5;
      const auto end_len = static_cast<int64_t>(code_points(end));
      if (length < end_len) fail("template line {}: truncate: expected length >= {}, got {}", line, end_len, length);
      if (leeway < 0) fail("template line {}: truncate: expected leeway >= 0, got {}", line, leeway);
      const auto n = static_cast<int64_t>(code_points(text));
      if (n <= length || n - length <= leeway) return Value::string(text);  // n <= length + leeway, without overflow
      std::string kept = prefix_chars(text, static_cast<size_t>(length - end_len));
      if (!p[1].truthy()) {
        const size_t space = kept.rfind(' ');
        if (space != std::string::npos) kept.resize(space);
      }
      return Value::string(kept + end);
    }
    if (f == "center") {  // str(value).center(width), 80 by default
      const std::vector<Value> p = bind_args(f, {"width"}, a, kw, line);
      return (*method(Value::string(to_string(v)), "center", line).fn)({p[0].defined() ? p[0] : Value::integer(80)},
                                                                       {});
    }
    if (f == "batch") {
      // jinja2's do_batch: lists of linecount items, the last filled up with fill_with when one is given.
      const std::vector<Value> p = bind_args(f, {"linecount", "fill_with"}, a, kw, line);
      if (!p[0].defined()) fail("template line {}: batch needs a linecount", line);
      const int64_t count = as_int(p[0], line);
      List out, cur;
      for (const auto& item : iterate(v, line)) {
        if (static_cast<int64_t>(cur.size()) == count) {
          out.push_back(Value::make_list(std::move(cur)));
          cur.clear();
        }
        cur.push_back(item);
      }
      if (!cur.empty()) {
        if (p[1].defined() && p[1].kind != K::None) {
          if (count > kMaxRange) fail("template line {}: batch filled up to {} items, past {}", line, count, kMaxRange);
          while (static_cast<int64_t>(cur.size()) < count) cur.push_back(p[1]);
        }
        out.push_back(Value::make_list(std::move(cur)));
      }
      return generator_of(std::move(out));
    }
    if (f == "slice") {
      // jinja2's do_slice: `slices` lists of consecutive items, the first len % slices one longer; with fill_with
      // the shorter ones get it appended.
      const std::vector<Value> p = bind_args(f, {"slices", "fill_with"}, a, kw, line);
      if (!p[0].defined()) fail("template line {}: slice needs a number of slices", line);
      const int64_t slices = as_int(p[0], line);
      const List seq = iterate(v, line);
      if (slices == 0) fail("template line {}: slice into 0 parts (a division by zero in jinja2)", line);
      if (slices < 0) return generator_of({});  // jinja2's range(slices): no slices
      const auto length = static_cast<int64_t>(seq.size());
      const int64_t per = length / slices, extra = length % slices;
      if (slices > kMaxRange) fail("template line {}: slice into {} parts, past {}", line, slices, kMaxRange);
      List out;
      int64_t offset = 0;
      for (int64_t k = 0; k < slices; ++k) {
        const int64_t start = offset + k * per;
        if (k < extra) ++offset;
        const int64_t stop = offset + (k + 1) * per;
        List part(seq.begin() + start, seq.begin() + stop);
        if (p[1].defined() && p[1].kind != K::None && k >= extra) part.push_back(p[1]);
        out.push_back(Value::make_list(std::move(part)));
      }
      return generator_of(std::move(out));
    }
    if (f == "filesizeformat") {
      // jinja2's do_filesizeformat: decimal (kB, MB, ...) or binary (KiB, MiB, ...) units, one decimal place.
      const std::vector<Value> p = bind_args(f, {"binary"}, a, kw, line);
      const Value x = float_filter(v, Value{});
      if (!x.defined()) fail("template line {}: filesizeformat of '{}', not a number", line, to_string(v));
      const bool binary = p[0].truthy();
      const double bytes = x.f, base = binary ? 1024.0 : 1000.0;
      if (bytes == 1.0) return Value::string("1 Byte");
      if (bytes < base) return Value::string(fmt::format("{:.0f} Bytes", std::trunc(bytes) + 0.0));
      static constexpr const char* kDecimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
      static constexpr const char* kBinary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
      double unit = base;
      for (int k = 0; k < 8; ++k) {
        unit *= base;  // base ** (k + 2)
        if (bytes < unit || k == 7) {
          return Value::string(fmt::format("{:.1f} {}", base * bytes / unit, binary ? kBinary[k] : kDecimal[k]));
        }
      }
    }
    if (f == "urlencode") {
      // jinja2's do_urlencode: a string (or any value that does not iterate) quoted with '/' kept; a dict's items or
      // an iterable's pairs as key=value joined by '&', quoted with nothing kept and spaces as '+'.
      auto quote = [](const std::string& text, bool for_qs) {
        std::string out;
        for (const char ch : text) {
          const auto c = static_cast<unsigned char>(ch);
          if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-' || c == '~' || (c == '/' && !for_qs)) {
            out += ch;
          } else if (c == ' ' && for_qs) {
            out += '+';
          } else {
            out += fmt::format("%{:02X}", c);
          }
        }
        return out;
      };
      if (v.kind != K::List && v.kind != K::Dict) return Value::string(quote(to_string(v), /*for_qs=*/false));
      std::string out;
      auto add = [&](const Value& key, const Value& val) {
        out += (out.empty() ? "" : "&") + quote(to_string(key), /*for_qs=*/true) + "=" +
               quote(to_string(val), /*for_qs=*/true);
      };
      if (v.kind == K::Dict) {
        for (const auto& [key, val] : *v.dict) add(Value::string(key), val);
      } else {
        for (const auto& item : *v.list) {
          const List pair = iterate(item, line);
          if (pair.size() != 2)
            fail("template line {}: urlencode expects (key, value) pairs, got '{}'", line, to_string(item));
          add(pair[0], pair[1]);
        }
      }
      return Value::string(out);
    }
    if (f == "attr") {
      // jinja2's do_attr: getattr(obj, name) only, never obj[name] (a dict's keys are not its attributes).
      const std::vector<Value> p = bind_args(f, {"name"}, a, kw, line);
      if (!p[0].defined()) fail("template line {}: attr needs a name", line);
      const std::string& name = as_str(p[0], line, "attr");
      if (v.kind == K::Dict && !v.is_namespace) {
        if (name == "items" || name == "keys" || name == "values" || name == "get") return method(v, name, line);
        return {};
      }
      // HF's immutable sandbox gives a list's modifying methods as undefined.
      static const std::set<std::string, std::less<>> kModifying = {"append", "clear",  "extend",  "insert",
                                                                    "pop",    "remove", "reverse", "sort"};
      if (v.kind == K::Undefined || (v.kind == K::List && kModifying.contains(name))) return {};
      return attribute(v, name, line);
    }
    if (f == "groupby") {
      // jinja2's do_groupby: the items sorted by the attribute (strings lowered unless case_sensitive; default for
      // a missing one), then runs of equal keys as (grouper, list) pairs; the grouper is the first item's own value.
      const std::vector<Value> p = bind_args(f, {"attribute", "default", "case_sensitive"}, a, kw, line);
      // The attribute: a dotted path, an index (negative from the end) or none (the item itself).
      if (!p[0].defined()) fail("template line {}: groupby needs an attribute", line);
      if (p[0].kind != K::None && p[0].kind != K::Int) as_str(p[0], line, "groupby's attribute");
      const bool case_sensitive = p[2].truthy();
      auto key_of = [&](const Value& item, bool lowered) {
        Value k = p[0].kind == K::None ? item : p[0].kind == K::String ? attribute_path(item, p[0].s) : Value{};
        if (p[0].kind == K::Int && (item.kind == K::List || item.kind == K::String)) {
          const List seq = iterate(item, line);
          const int64_t at = normalize_index(p[0].i, static_cast<int64_t>(seq.size()));
          if (at >= 0 && at < static_cast<int64_t>(seq.size())) k = seq[static_cast<size_t>(at)];
        }
        if (!k.defined() && p[1].defined()) k = p[1];
        if (lowered && !case_sensitive && k.kind == K::String) k.s = case_mapped(k.s, 'L');
        return k;
      };
      List items = iterate(v, line);
      std::vector<std::pair<Value, size_t>> keyed;
      for (size_t k = 0; k < items.size(); ++k) keyed.emplace_back(key_of(items[k], /*lowered=*/true), k);
      std::stable_sort(keyed.begin(), keyed.end(),
                       [&](const auto& x, const auto& y) { return compare(x.first, y.first, line) < 0; });
      List out;
      for (size_t k = 0; k < keyed.size();) {
        List group;
        size_t e = k;
        for (; e < keyed.size() && equal(keyed[e].first, keyed[k].first); ++e) group.push_back(items[keyed[e].second]);
        Value pair = Value::make_tuple({key_of(group.front(), /*lowered=*/false), Value::make_list(std::move(group))});
        pair.group = true;
        out.push_back(std::move(pair));
        k = e;
      }
      return Value::make_list(std::move(out));
    }
    fail("template line {}: unknown filter '{}'", line, f);
  }

  // items sorted by sort_key (stable, as Python's sorted), reversed when asked: Python sorts with key and reverse
  // together, which keeps equal items in their order.
  List sorted(List items, const Value& attribute, bool case_sensitive, bool reverse, int line) {
    std::vector<std::pair<Value, size_t>> keyed;
    keyed.reserve(items.size());
    for (size_t k = 0; k < items.size(); ++k)
      keyed.emplace_back(sort_key(items[k], attribute, case_sensitive, line), k);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return compare(reverse ? y.first : x.first, reverse ? x.first : y.first, line) < 0;
    });
    List out;
    out.reserve(items.size());
    for (const auto& [key, k] : keyed) out.push_back(std::move(items[k]));
    return out;
  }

  bool test(const Expr& e) {
    const Value v = eval(*e.args[0]);
    Args a;
    for (size_t k = 1; k < e.args.size(); ++k) a.push_back(eval(*e.args[k]));
    return apply_test(e.name, v, a, e.line);
  }

  // jinja2's built-in test t on v, with its arguments a (select, reject, selectattr and rejectattr name them too).
  bool apply_test(const std::string& t, const Value& v, const Args& a, int line) {
    auto arg = [&]() -> const Value& {
      if (a.empty()) fail("template line {}: test '{}' needs an argument", line, t);
      return a[0];
    };
    if (t == "defined") return v.defined();
    if (t == "undefined") return !v.defined();
    if (t == "none") return v.kind == K::None;
    if (t == "string") return v.kind == K::String;
    if (t == "number") return v.kind == K::Int || v.kind == K::Float;
    if (t == "integer") return v.kind == K::Int;
    if (t == "float") return v.kind == K::Float;
    if (t == "boolean") return v.kind == K::Bool;
    if (t == "true") return v.kind == K::Bool && v.b;
    if (t == "false") return v.kind == K::Bool && !v.b;
    if (t == "mapping") return v.kind == K::Dict;
    if (t == "sequence" || t == "iterable") return v.kind == K::List || v.kind == K::String || v.kind == K::Dict;
    if (t == "callable") return v.kind == K::Function;
    if (t == "odd" || t == "even") return (as_int(v, line) % 2 != 0) == (t == "odd");
    if (t == "divisibleby") {
      const int64_t d = as_int(arg(), line);
      if (d == 0) fail("template line {}: divisibleby 0", line);  // Python's ZeroDivisionError
      return d == -1 || as_int(v, line) % d == 0;                 // INT64_MIN % -1 traps
    }
    if (t == "equalto" || t == "eq" || t == "==" || t == "sameas") return equal(v, arg());
    if (t == "ne" || t == "!=") return !equal(v, arg());
    if (t == "lt" || t == "<" || t == "lessthan") return compare(v, arg(), line) < 0;
    if (t == "le" || t == "<=") return compare(v, arg(), line) <= 0;
    if (t == "gt" || t == ">" || t == "greaterthan") return compare(v, arg(), line) > 0;
    if (t == "ge" || t == ">=") return compare(v, arg(), line) >= 0;
    if (t == "in") return contains(arg(), v, line);
    if (t == "escaped") return v.kind == K::String && v.markup;  // jinja2: hasattr(value, "__html__")
    // jinja2's lower and upper tests: str(value).islower() / isupper().
    if (t == "lower" || t == "upper") return (*method(Value::string(to_string(v)), "is" + t, line).fn)({}, {}).truthy();
    if (t == "filter" || t == "test") {
      // Whether v names one of HF's environment's filters or tests (jinja2's defaults; a few filters of that set,
      // striptags for one, are not implemented here and fail by name when called).
      static const std::set<std::string, std::less<>> kFilters = {
          "abs",    "attr",       "batch",       "capitalize", "center",   "count",
          "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
          "first",  "float",      "forceescape", "format",     "groupby",  "indent",
          "int",    "items",      "join",        "last",       "length",   "list",
          "lower",  "map",        "max",         "min",        "pprint",   "random",
          "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
          "select", "selectattr", "slice",       "sort",       "string",   "striptags",
          "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
          "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr"};
      static const std::set<std::string, std::less<>> kTests = {
          "!=",       "<",           "<=",          "==",      ">",       ">=",        "boolean",  "callable",
          "defined",  "divisibleby", "eq",          "equalto", "escaped", "even",      "false",    "filter",
          "float",    "ge",          "greaterthan", "gt",      "in",      "integer",   "iterable", "le",
          "lessthan", "lower",       "lt",          "mapping", "ne",      "none",      "number",   "odd",
          "sameas",   "sequence",    "string",      "test",    "true",    "undefined", "upper"};
      return v.kind == K::String && (t == "filter" ? kFilters : kTests).contains(v.s);
    }
    fail("template line {}: unknown test '{}'", line, t);
  }

  bool contains(const Value& container, const Value& item, int line) {
    if (container.kind == K::String) return container.s.find(as_str(item, line, "in")) != std::string::npos;
    if (container.kind == K::Dict) return item.kind == K::String && container.get(item.s) != nullptr;
    if (container.kind == K::List) {
      for (const auto& x : *container.list) {
        if (equal(x, item)) return true;
      }
      return false;
    }
    fail("template line {}: 'in' needs a string, list or dict, got '{}'", line, to_string(container));
  }

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
    const Value l = eval(*e.args[0]), r = eval(*e.args[1]);
    if (op == "~") {
      std::string a = to_string(l), b = to_string(r);
      check_built(a.size() + b.size(), "~", e.line);
      return Value::string(a + b);
    }
    if (op == "==") return Value::boolean(equal(l, r));
    if (op == "!=") return Value::boolean(!equal(l, r));
    if (op == "in") return Value::boolean(contains(r, l, e.line));
    if (op == "not in") return Value::boolean(!contains(r, l, e.line));
    if (op == "+") {
      if (l.kind == K::String && r.kind == K::String) {
        check_built(l.s.size() + r.s.size(), "+", e.line);
        return Value::string(l.s + r.s);
      }
      if (l.kind == K::List && r.kind == K::List) {
        if (l.tuple != r.tuple)
          fail("template line {}: cannot add {} and {} (a tuple and a list)", e.line, repr(l), repr(r));
        check_built(list_bytes(*l.list) + list_bytes(*r.list), "+", e.line);
        List c = *l.list;
        c.insert(c.end(), r.list->begin(), r.list->end());
        return list_like(l, std::move(c));
      }
      if (l.kind == K::String || r.kind == K::String || l.kind == K::Undefined || r.kind == K::Undefined) {
        fail("template line {}: cannot add '{}' and '{}'", e.line, to_string(l), to_string(r));
      }
    }
    const auto is_seq = [](const Value& v) { return v.kind == K::String || v.kind == K::List; };
    if (op == "*" && ((is_seq(l) && r.kind == K::Int) || (l.kind == K::Int && is_seq(r)))) {
      const Value& seq = l.kind == K::Int ? r : l;
      const int64_t times = std::max<int64_t>(0, l.kind == K::Int ? l.i : r.i);
      const auto size = static_cast<int64_t>(seq.kind == K::String ? seq.s.size() : seq.list->size());
      // Python would go on until memory runs out; a model's template is not let take the process down with it.
      const auto bytes = static_cast<int64_t>(seq.kind == K::String ? seq.s.size() : list_bytes(*seq.list));
      if (bytes > 0 && times > kMaxRepeat / bytes)
        fail("template line {}: repeating {} items {} times makes more than {} bytes", e.line, size, times, kMaxRepeat);
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
    if (op == "<" || op == ">" || op == "<=" || op == ">=") return Value::boolean(apply_test(op, l, {r}, e.line));
    const bool ints = (l.kind == K::Int || l.kind == K::Bool) && (r.kind == K::Int || r.kind == K::Bool);
    if (ints && op != "/") {
      const int64_t x = as_int(l, e.line), y = as_int(r, e.line);
      if (op == "+") return Value::integer(checked(x, y, '+', e.line));
      if (op == "-") return Value::integer(checked(x, y, '-', e.line));
      if (op == "*") return Value::integer(checked(x, y, '*', e.line));
      if (op == "**") {
        if (y < 0 && x == 0) fail("template line {}: 0 cannot be raised to a negative power", e.line);
        if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
        int64_t p = 1, b = x;  // by squaring, every product checked
        for (int64_t k = y; k > 0; k >>= 1) {
          if (k & 1) p = checked(p, b, '*', e.line);
          if (k > 1) b = checked(b, b, '*', e.line);
        }
        return Value::integer(p);
      }
      if (y == 0) fail("template line {}: division by zero", e.line);
      if (x == INT64_MIN && y == -1) checked(0, x, '-', e.line);                 // the one quotient past int64's range
      const int64_t q = x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0);  // Python floors
      if (op == "//") return Value::integer(q);
      if (op == "%") return Value::integer(x - q * y);
    }
    if (op == "%" && l.kind == K::String) return Value::string(percent_format(l.s, r, e.line));
    const double x = as_number(l, e.line), y = as_number(r, e.line);
    if (op == "**" && x == 0 && y < 0) fail("template line {}: 0 cannot be raised to a negative power", e.line);
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") return Value::number(std::pow(x, y));
    if (y == 0) fail("template line {}: division by zero", e.line);
    if (op == "/") return Value::number(x / y);
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") return Value::number(x - std::floor(x / y) * y);
    fail("template line {}: unknown operator '{}'", e.line, op);
  }

  std::string& out_;
  int depth_ = 0;           // block bodies and expressions open now (DepthGuard)
  int64_t loop_steps_ = 0;  // for-loop iterations so far in this rendering
};

std::map<std::string, Value> builtins() {
  std::map<std::string, Value> g;
  g["namespace"] = Value::function([](const Args& a, const Kwargs& kw) {
    Value ns = Value::make_dict();
    ns.is_namespace = true;
    if (!a.empty() && a[0].kind == K::Dict) {
      for (const auto& [k, v] : *a[0].dict) ns.set(k, v);
    }
    for (const auto& [k, v] : kw) ns.set(k, v);
    return ns;
  });
  g["raise_exception"] = Value::function([](const Args& a, const Kwargs&) -> Value {
    fail("template raised: {}", a.empty() ? std::string("error") : to_string(a[0]));
  });
  // Hugging Face's environment adds strftime_now(format), Python's datetime.now().strftime(format) in local time:
  // Llama 3.2's, Mistral Small 3's and gpt-oss's templates write today's date with it (an error here before).
  g["strftime_now"] = Value::function([](const Args& a, const Kwargs& kw) -> Value {
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
  });
  g["range"] = Value::function([](const Args& a, const Kwargs&) {
    int64_t start = 0, stop = 0, step = 1;
    if (a.size() == 1) {
      stop = as_int(a[0], 0);
    } else if (a.size() >= 2) {
      start = as_int(a[0], 0);
      stop = as_int(a[1], 0);
      if (a.size() > 2) step = as_int(a[2], 0);
    }
    if (step == 0) fail("range() step must not be zero");
    // Hugging Face renders chat templates in jinja2's sandbox, which refuses ranges of more than 100000 items; so
    // does this one (a model's range(10**9) hung the process). The count in 128 bits: no step can overflow it.
    const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    const __int128 mag = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
    const __int128 count = span <= 0 ? 0 : (span + mag - 1) / mag;
    if (count > kMaxRange)
      fail("range({}, {}, {}) has more than {} items, the limit of jinja2's sandbox", start, stop, step, kMaxRange);
    List l;
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) l.push_back(Value::integer(start + k * step));
    return Value::make_list(std::move(l));
  });
  g["dict"] = Value::function([](const Args&, const Kwargs& kw) {
    Dict d(kw.begin(), kw.end());
    return Value::make_dict(std::move(d));
  });
  return g;
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
