// Jinja values with Python's semantics: construction (from JSON too), truth, str() and repr(), json.dumps,
// ==, ordering, `in`, iteration, and the string work several filters and methods share (strip, case mapping,
// splitlines, printf-style % formatting). Strings are UTF-8; every position and length counts code points, as
// Python's do.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <utf8proc.h>

#include "ascent/base/error.h"
#include "ascent/tokenizer/jinja_internal.h"
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

using K = Value::Kind;

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

// Python's backslash escape of a code point: \xNN, \uNNNN or \UNNNNNNNN.
std::string escaped_char(int32_t cp) {
  return cp < 0x100     ? fmt::format("\\x{:02x}", cp)
         : cp < 0x10000 ? fmt::format("\\u{:04x}", cp)
                        : fmt::format("\\U{:08x}", cp);
}

// Python's ascii() of what repr gave: every character past ASCII escaped.
std::string ascii_escaped(const std::string& s) {
  std::string out;
  for (size_t k = 0; k < s.size();) {
    const auto [cp, n] = char_at(s, k);
    if (cp >= 0x80) {
      out += escaped_char(cp);
    } else {
      out.append(s, k, n);
    }
    k += n;
  }
  return out;
}

// Python's repr of a str: quoted with ' (or " when only ' occurs), backslash escapes for the quote, \\, \t, \n and
// \r, and \xNN, \uNNNN or \UNNNNNNNN for what is not printable (categories C and Z but the space).
std::string py_quote(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (size_t k = 0; k < s.size();) {
    const auto [cp, n] = char_at(s, k);
    const char c = s[k];
    k += n;
    if (cp < 0) {
      out += c;  // not UTF-8: a Python str cannot hold it, so it stays as it is
    } else if (c == q || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\t' || c == '\n' || c == '\r') {
      out += c == '\t' ? "\\t" : c == '\n' ? "\\n" : "\\r";
    } else if (cp == ' ' || (cp > 0x20 && cp < 0x7f)) {
      out += c;
    } else {
      const utf8proc_category_t cat = utf8proc_category(cp);
      const bool printable = cp >= 0x80 && !(cat >= UTF8PROC_CATEGORY_ZS && cat <= UTF8PROC_CATEGORY_ZP) &&
                             !(cat >= UTF8PROC_CATEGORY_CC && cat <= UTF8PROC_CATEGORY_CO) &&
                             cat != UTF8PROC_CATEGORY_CN;
      if (printable) {
        out.append(s, k - n, n);
      } else {
        out += escaped_char(cp);
      }
    }
  }
  return out + q;
}

}  // namespace

std::string repr(const Value& v) {
  if (v.kind == Value::Kind::String) return v.markup ? "Markup(" + py_quote(v.s) + ")" : py_quote(v.s);
  return to_string(v);
}

// & < > " ' as HTML entities.
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

namespace {

// A JSON string as json.dumps writes it: the short escapes, \u00XX for other control characters, and with
// ensure_ascii every character past ASCII's printable ones as \uXXXX (a surrogate pair past U+FFFF).
void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  auto escape = [&](uint32_t u) { out += fmt::format("\\u{:04x}", u); };
  out += '"';
  for (size_t k = 0; k < s.size();) {
    const auto c = static_cast<unsigned char>(s[k]);
    const char* short_escape = c == '"'    ? "\\\""
                               : c == '\\' ? "\\\\"
                               : c == '\n' ? "\\n"
                               : c == '\r' ? "\\r"
                               : c == '\t' ? "\\t"
                               : c == '\b' ? "\\b"
                               : c == '\f' ? "\\f"
                                           : nullptr;
    if (short_escape != nullptr) {
      out += short_escape;
      ++k;
    } else if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      escape(c);
      ++k;
    } else if (c < 0x80 || !ensure_ascii) {
      out += static_cast<char>(c);
      ++k;
    } else {
      const auto [cp, n] = char_at(s, k);
      if (cp < 0) {
        out += static_cast<char>(c);  // not UTF-8: Python's strings cannot hold it, so it stays as it is
      } else if (cp > 0xffff) {
        escape(0xd800 + ((static_cast<uint32_t>(cp) - 0x10000) >> 10));
        escape(0xdc00 + ((static_cast<uint32_t>(cp) - 0x10000) & 0x3ff));
      } else {
        escape(static_cast<uint32_t>(cp));
      }
      k += n;
    }
  }
  out += '"';
}

void json_dump(const Value& v, const JsonOptions& o, int depth, std::string& out) {
  const auto newline = [&](int d) {
    out += '\n';
    for (int k = 0; k < d; ++k) out += *o.indent;
  };
  const std::string& item_separator = o.item_separator ? *o.item_separator : o.indent ? "," : ", ";
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
      json_string(v.s, o.ensure_ascii, out);
      return;
    case Value::Kind::List: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_separator;
        if (o.indent) newline(depth + 1);
        json_dump((*v.list)[k], o, depth + 1, out);
      }
      if (o.indent) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : *v.dict) items.push_back(&kv);
      // Python's order of str keys is by code point, which is UTF-8's byte order.
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_separator;
        if (o.indent) newline(depth + 1);
        json_string(items[k]->first, o.ensure_ascii, out);
        out += o.key_separator;
        json_dump(items[k]->second, o, depth + 1, out);
      }
      if (o.indent) newline(depth);
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
      std::string s = v.is_namespace ? "<Namespace {" : "{";  // jinja2's Namespace.__repr__
      for (size_t k = 0; k < v.dict->size(); ++k) {
        s += (k ? ", " : "") + py_quote((*v.dict)[k].first) + ": " + repr((*v.dict)[k].second);
      }
      return s + (v.is_namespace ? "}>" : "}");
    }
    case Value::Kind::Function:
      return "<function>";
  }
  return "";
}

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_dump(v, options, 0, out);
  return out;
}

std::string to_json(const Value& v, int indent) {
  JsonOptions options;
  if (indent >= 0) options.indent = std::string(static_cast<size_t>(indent), ' ');
  return to_json(v, options);
}

void check_built(size_t bytes, std::string_view what, int line) {
  if (bytes > static_cast<size_t>(kMaxRepeat))
    fail("template line {}: {} makes more than {} bytes", line, what, kMaxRepeat);
}

size_t list_bytes(const List& l) {
  size_t n = 0;
  for (const Value& v : l) n += sizeof(Value) + v.s.size();
  return n;
}

// Signed overflow is undefined behaviour in C++, so each operation is checked.
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

const std::string& as_str(const Value& v, int line, std::string_view what) {
  if (v.kind != K::String) fail("template line {}: {} expects a string, got '{}'", line, what, to_string(v));
  return v.s;
}

// Python's whitespace (what str.split() and str.strip() take by default) is bidi classes WS, B and S and category Zs:
// a no-break space (U+00A0) and an ideographic space (U+3000) among them, not only ASCII's six.
bool is_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

int64_t chars_in(std::string_view s) {
  return static_cast<int64_t>(code_points(s));
}

// Whole characters come off the ends, never bytes: strip('é') must not take the first byte of an 'è'.
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
      // As jinja2's default Undefined (HF renders with it): iterating one, or taking its length, gives nothing, so
      // `{% for tool in tools %}` without tools renders nothing.
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
    // As Python: the first items that are not == decide, so equal items need no order (two equal dicts).
    const size_t n = std::min(l.list->size(), r.list->size());
    for (size_t k = 0; k < n; ++k) {
      if (!equal((*l.list)[k], (*r.list)[k])) return compare((*l.list)[k], (*r.list)[k], line);
    }
    return (l.list->size() > n) - (r.list->size() > n);
  }
  const auto what = [](const Value& v) { return v.kind == K::Undefined ? std::string("an undefined value") : repr(v); };
  fail("template line {}: cannot compare {} with {}", line, what(l), what(r));
}

bool contains(const Value& container, const Value& item, int line) {
  if (container.kind == K::Undefined) return false;  // jinja2's Undefined iterates as nothing
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

namespace {

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

}  // namespace

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

// Python sorts with key and reverse together, which keeps equal items in their order.
List sorted(List items, const Value& attribute, bool case_sensitive, bool reverse, int line) {
  std::vector<std::pair<Value, size_t>> keyed;
  keyed.reserve(items.size());
  for (size_t k = 0; k < items.size(); ++k) keyed.emplace_back(sort_key(items[k], attribute, case_sensitive, line), k);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return compare(reverse ? y.first : x.first, reverse ? x.first : y.first, line) < 0;
  });
  List out;
  out.reserve(items.size());
  for (const auto& [key, k] : keyed) out.push_back(std::move(items[k]));
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

namespace {

// One conversion of a printf-style format: %[(key)][flags][width][.precision][length]type.
struct Conversion {
  std::string flags;       // of - + space 0 #
  int64_t width = 0;       // in characters
  int64_t precision = -1;  // none given
  char type = 0;
  bool has(char flag) const { return flags.find(flag) != std::string::npos; }
};

// %s, %r and %a: str(), repr() or ascii(), cut to the first `precision` characters.
std::string format_text(const Conversion& c, const Value& v) {
  std::string body = c.type == 's' ? to_string(v) : c.type == 'a' ? ascii_escaped(repr(v)) : repr(v);
  if (c.precision >= 0) body = prefix_chars(body, static_cast<size_t>(c.precision));
  return body;
}

// %c: a one-character string, or an integer's code point.
std::string format_char(const Value& v, int line) {
  if (v.kind == K::String) {
    if (code_points(v.s) != 1) fail("template line {}: %c requires an int or a single character", line);
    return v.s;
  }
  const int64_t cp = as_int(v, line);
  if (cp < 0 || cp > 0x10ffff || !utf8proc_codepoint_valid(static_cast<utf8proc_int32_t>(cp)))
    fail("template line {}: %c arg {} not in range(0x110000)", line, cp);
  std::string body;
  append_utf8(body, static_cast<utf8proc_int32_t>(cp));
  return body;
}

// %d %i %u %o %x %X: an integer, a bool, or a float truncated toward zero (%o %x %X refuse floats, as Python does).
// precision gives the least digits; the 0 flag pads with zeros after the sign and the # flag's 0o/0x/0X prefix.
std::string format_integer(const Conversion& c, const Value& v, int line) {
  const char type = c.type;
  if (v.kind != K::Int && v.kind != K::Bool && v.kind != K::Float)
    fail("template line {}: %{} format: a number is required, not {}", line, type, repr(v));
  if (v.kind == K::Float && (type == 'o' || type == 'x' || type == 'X'))
    fail("template line {}: %{} format: an integer is required, not {}", line, type, repr(v));
  if (v.kind == K::Float && !std::isfinite(v.f)) fail("template line {}: cannot convert {} to integer", line, repr(v));
  if (v.kind == K::Float && std::fabs(v.f) >= 0x1p63) fail("template line {}: {} is past 64 bits", line, repr(v));
  const int64_t x = v.kind == K::Float ? static_cast<int64_t>(v.f) : as_int(v, line);
  const uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  char buf[32];
  const char* fmt = type == 'o' ? "%llo" : type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llu";
  std::snprintf(buf, sizeof buf, fmt, static_cast<unsigned long long>(mag));
  std::string digits = buf;
  if (c.precision >= 0 && static_cast<int64_t>(digits.size()) < c.precision)
    digits.insert(0, static_cast<size_t>(c.precision) - digits.size(), '0');
  const std::string prefix = !c.has('#') ? "" : type == 'o' ? "0o" : type == 'x' ? "0x" : type == 'X' ? "0X" : "";
  const std::string sign = x < 0 ? "-" : c.has('+') ? "+" : c.has(' ') ? " " : "";
  const bool zero_pad = c.has('0') && !c.has('-');
  if (zero_pad && static_cast<int64_t>(sign.size() + prefix.size() + digits.size()) < c.width)
    digits.insert(0, static_cast<size_t>(c.width) - sign.size() - prefix.size() - digits.size(), '0');
  return sign + prefix + digits;
}

// %e %E %f %F %g %G through C's printf, whose flags, width and precision mean what Python's do. Only inf and nan
// differ: Python pads them with zeros too under the 0 flag, and prints no sign of a nan.
std::string format_float(const Conversion& c, const Value& v, int line) {
  const double number = as_number(v, line);
  const double x = std::isnan(number) ? std::fabs(number) : number;  // Python's nan has no sign
  const bool zero_pad_special = !std::isfinite(x) && c.has('0') && !c.has('-');
  std::string flags = c.flags;
  if (zero_pad_special) std::erase(flags, '0');
  const int64_t width = zero_pad_special ? 0 : c.width;
  const std::string spec = "%" + flags + (width > 0 ? std::to_string(width) : "") + "." +
                           std::to_string(c.precision >= 0 ? c.precision : 6) + c.type;
  const int n = std::snprintf(nullptr, 0, spec.c_str(), x);
  std::string body(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(body.data(), body.size(), spec.c_str(), x);
  body.resize(static_cast<size_t>(n));
  if (zero_pad_special && static_cast<int64_t>(body.size()) < c.width) {
    const size_t sign = body[0] == '+' || body[0] == '-' || body[0] == ' ' ? 1 : 0;
    body.insert(sign, static_cast<size_t>(c.width) - body.size(), '0');
  }
  return body;
}

// v by one conversion, padded to its width.
std::string format_conversion(const Conversion& c, const Value& v, int line) {
  std::string body;
  if (c.type == 's' || c.type == 'r' || c.type == 'a') {
    body = format_text(c, v);
  } else if (c.type == 'c') {
    body = format_char(v, line);
  } else if (c.type != 0 && std::strchr("diuoxX", c.type) != nullptr) {
    body = format_integer(c, v, line);
  } else if (c.type != 0 && std::strchr("eEfFgG", c.type) != nullptr) {
    return format_float(c, v, line);  // printf has padded it
  } else {
    const auto u = static_cast<unsigned char>(c.type);
    if (u < 0x20 || u >= 0x7f) fail("template line {}: unsupported format character 0x{:02x}", line, u);
    fail("template line {}: unsupported format character '{}'", line, c.type);
  }
  const auto len = static_cast<int64_t>(code_points(body));
  if (len < c.width) {
    const std::string pad(static_cast<size_t>(c.width - len), ' ');
    body = c.has('-') ? body + pad : pad + body;
  }
  return body;
}

}  // namespace

// A tuple gives the positional arguments, and any other value is the one argument; a dict also gives the %(name)s
// ones. Conversions are s r a d i u o x X e E f F g G c and %%, with flags (- + space 0 #), width and precision
// (digits or *). As in Python, an argument that can be subscripted (a dict, a list, Undefined) need not be used.
std::string percent_format(const std::string& format, const Value& args, int line) {
  const bool mapping = args.kind == K::Dict;
  const bool tuple = args.kind == K::List && args.tuple;
  const bool subscriptable = mapping || (args.kind == K::List && !tuple) || args.kind == K::Undefined;
  const List positional = tuple ? *args.list : List{args};
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
    Conversion c;
    while (i < format.size() && std::strchr("-+ 0#", format[i]) != nullptr && format[i] != 0) c.flags += format[i++];
    // A width or precision: digits, or * for the next argument.
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
    c.width = number("width");
    if (c.width < 0) {
      c.flags += '-';
      c.width = -c.width;
    }
    if (i < format.size() && format[i] == '.') {
      ++i;
      c.precision = std::max<int64_t>(0, number("precision"));
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;  // Python ignores them
    if (i >= format.size()) fail("template line {}: incomplete format", line);
    c.type = format[i];
    if (c.type == '%') {
      if (format[i - 1] != '%') fail("template line {}: unsupported format character '%' after a flag or width", line);
      out += '%';
      continue;
    }
    out += format_conversion(c, named != nullptr ? *named : take(), line);
  }
  if (!subscriptable && next < positional.size())
    fail("template line {}: not all arguments converted during string formatting", line);
  return out;
}

// unique's seen set hashes these strings: comparing each item with every one kept is quadratic. Equal numbers are
// alike whatever their type (1, 1.0 and true); strings, None, Undefined and tuples of those hash too.
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

}  // namespace ascent::tokenizer::jinja
