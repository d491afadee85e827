// jinja2's built-in filters ({{ x|name(args) }}) and tests ({{ x is name(args) }}), one function each, in a table
// keyed by name. Each follows jinja2's own (jinja2/filters.py, jinja2/tests.py) as Hugging Face's environment runs
// it: no autoescaping, its tojson, the sandbox's limits.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <utf8proc.h>

#include "ascent/base/error.h"
#include "ascent/tokenizer/jinja_internal.h"
#include "ascent/tokenizer/utf8.h"

namespace ascent::tokenizer::jinja {
namespace {

using K = Value::Kind;

// One use of a filter: its name as written (for error messages), its arguments and its line.
struct FilterCall {
  std::string_view name;
  const Args& args;
  const Kwargs& kwargs;
  int line;

  // The arguments as jinja2 binds them to the parameters `names`: positional ones first, then keywords by name; one
  // left out is Undefined. Too many, unknown or doubled ones fail, naming the filter.
  std::vector<Value> bind(std::initializer_list<const char*> names) const {
    std::vector<Value> out(names.size());
    if (args.size() > names.size())
      fail("template line {}: filter '{}' takes at most {} arguments, got {}", line, name, names.size(), args.size());
    std::copy(args.begin(), args.end(), out.begin());
    for (const auto& [k, x] : kwargs) {
      const auto* it = std::find_if(names.begin(), names.end(), [&k = k](const char* n) { return k == n; });
      if (it == names.end()) fail("template line {}: filter '{}' has no argument '{}'", line, name, k);
      const size_t i = static_cast<size_t>(it - names.begin());
      if (i < args.size()) fail("template line {}: filter '{}' got argument '{}' twice", line, name, k);
      out[i] = x;
    }
    return out;
  }
};

using FilterFn = Value (*)(const Value& v, const FilterCall& c);

// A filter that takes no arguments: any given fail, as they do in jinja2.
template <FilterFn kFilter>
Value without_arguments(const Value& v, const FilterCall& c) {
  c.bind({});
  return kFilter(v, c);
}

// --- numbers -----------------------------------------------------------------------------------------------------

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

// int(value), else int(float(value)) truncated toward zero, else the default (a string that is no number, none, a
// list). Where the reference raises (an infinite float, or an integer past 64 bits, which Python holds exactly),
// this fails naming the line.
Value int_of(const Value& v, const Value& fallback, int line) {
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

// float(value), else the default.
Value float_of(const Value& v, const Value& fallback) {
  if (v.kind == K::Float) return v;
  if (v.kind == K::Int) return Value::number(static_cast<double>(v.i));
  if (v.kind == K::Bool) return Value::number(v.b ? 1.0 : 0.0);
  if (v.kind == K::String) {
    if (const auto d = parse_float(v.s)) return Value::number(*d);
  }
  return fallback;
}

// int(default=0, base=10); other bases are not supported.
Value filter_int(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"default", "base"});
  if (p[1].defined() && as_int(p[1], c.line) != 10)
    fail("template line {}: int with base {} is not supported", c.line, to_string(p[1]));
  return int_of(v, p[0].defined() ? p[0] : Value::integer(0), c.line);
}

Value filter_float(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"default"});
  return float_of(v, p[0].defined() ? p[0] : Value::number(0.0));
}

// round(value, precision=0, method='common'): 'common' is Python's round (to nearest, ties to even, on the exact
// binary value; an integer or a bool gives an integer); 'ceil' and 'floor' scale by 10^precision, round that way and
// divide back.
Value filter_round(const Value& v, const FilterCall& c) {
  const int line = c.line;
  int64_t precision = c.args.empty() ? 0 : as_int(c.args[0], line);
  std::string method = c.args.size() < 2 ? "common" : as_str(c.args[1], line, "round");
  for (const auto& [k, x] : c.kwargs) {
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
  // 0-22 places, where 10^precision is exact in a double. Rounding to tens or hundreds (a negative precision), which
  // no chat template does, is refused rather than approximated.
  if (precision < 0 || precision > 22) fail("template line {}: round precision {} is not 0-22", line, precision);
  if (v.kind == K::Int && method == "common") return v;
  if (v.kind == K::Bool && method == "common") return Value::integer(v.b);
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

// Python's abs: an integer (or a bool) stays one.
Value filter_abs(const Value& v, const FilterCall& c) {
  if (v.kind == K::Int) return Value::integer(v.i < 0 ? checked(0, v.i, '-', c.line) : v.i);
  if (v.kind == K::Bool) return Value::integer(v.b);
  return Value::number(std::fabs(as_number(v, c.line)));
}

// Python's sum over numbers, from start, left to right (ints exact, failing past 64 bits).
Value filter_sum(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"attribute", "start"});
  Value total = p[1].defined() ? p[1] : Value::integer(0);
  for (const auto& item : iterate(v, c.line)) {
    const Value x = sort_key(item, p[0], /*case_sensitive=*/true, c.line);
    const bool ints = (total.kind == K::Int || total.kind == K::Bool) && (x.kind == K::Int || x.kind == K::Bool);
    total = ints ? Value::integer(checked(as_int(total, c.line), as_int(x, c.line), '+', c.line))
                 : Value::number(as_number(total, c.line) + as_number(x, c.line));
  }
  return total;
}

// Decimal (kB, MB, ...) or binary (KiB, MiB, ...) units, one decimal place.
Value filter_filesizeformat(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"binary"});
  const Value x = float_of(v, Value{});
  if (!x.defined()) fail("template line {}: filesizeformat of '{}', not a number", c.line, to_string(v));
  const bool binary = p[0].truthy();
  const double bytes = x.f, base = binary ? 1024.0 : 1000.0;
  if (bytes == 1.0) return Value::string("1 Byte");
  if (bytes < base) return Value::string(fmt::format("{:.0f} Bytes", std::trunc(bytes) + 0.0));
  static constexpr const char* kDecimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static constexpr const char* kBinary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  double unit = base * base;  // base ** (k + 2)
  int k = 0;
  for (; k < 7 && bytes >= unit; ++k) unit *= base;
  return Value::string(fmt::format("{:.1f} {}", base * bytes / unit, binary ? kBinary[k] : kDecimal[k]));
}

// --- strings -----------------------------------------------------------------------------------------------------

// length and count: a string's characters, else the items iterating gives.
Value filter_length(const Value& v, const FilterCall& c) {
  if (v.kind == K::String) return Value::integer(static_cast<int64_t>(code_points(v.s)));
  return Value::integer(static_cast<int64_t>(iterate(v, c.line).size()));
}

Value filter_string(const Value& v, const FilterCall&) {
  return Value::string(to_string(v));
}

// str(value).strip(chars): whitespace, or the characters of chars.
Value filter_trim(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"chars"});
  if (p[0].defined() && p[0].kind != K::None && p[0].kind != K::String)
    fail("template line {}: trim's chars must be a string, got {}", c.line, repr(p[0]));
  return Value::string(strip(to_string(v), &p[0], true, true));
}

// jinja2's title, which is not str.title(): see case_mapped's 'J'.
Value filter_title(const Value& v, const FilterCall&) {
  return Value::string(case_mapped(to_string(v), 'J'));
}

// upper, lower and capitalize: the str method of that name on str(value).
Value filter_case(const Value& v, const FilterCall& c) {
  return call_method(Value::string(to_string(v)), c.name, {}, c.line);
}

// str(value).replace(str(old), str(new)[, count]).
Value filter_replace(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"old", "new", "count"});
  Args a;
  for (size_t k = 0; k < p.size() && p[k].defined(); ++k) a.push_back(k < 2 ? Value::string(to_string(p[k])) : p[k]);
  return call_method(Value::string(to_string(v)), "replace", a, c.line);
}

// str(value).center(width), 80 by default.
Value filter_center(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"width"});
  return call_method(Value::string(to_string(v)), "center", {p[0].defined() ? p[0] : Value::integer(80)}, c.line);
}

// The separator between str() of each item (or of its attribute).
Value filter_join(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"d", "attribute"});
  const std::string sep = p[0].defined() ? to_string(p[0]) : "";
  if (!p[1].defined() || p[1].kind == K::None) return call_method(Value::string(sep), "join", {v}, c.line);
  List parts;
  for (const auto& item : iterate(v, c.line)) parts.push_back(sort_key(item, p[1], /*case_sensitive=*/true, c.line));
  return call_method(Value::string(sep), "join", {Value::make_list(std::move(parts))}, c.line);
}

// Each line after the first gains the indentation (width spaces, or width itself when a string), blank ones only
// with blank=true; the first one with first=true, even blank. Lines split as str.splitlines() does.
Value filter_indent(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"width", "first", "blank"});
  const std::string pad =
      p[0].kind == K::String ? p[0].s
      : p[0].defined()
          ? std::string(static_cast<size_t>(std::clamp<int64_t>(as_int(p[0], c.line), 0, int64_t{1} << 16)), ' ')
          : std::string(4, ' ');
  const std::vector<std::string> lines = split_lines(to_string(v) + "\n");
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k > 0) out += '\n';
    if (k == 0 ? p[1].truthy() : !lines[k].empty() || p[2].truthy()) out += pad;
    out += lines[k];
    check_built(out.size(), "indent", c.line);
  }
  return Value::string(out);
}

// value % args as a tuple, or % kwargs as a dict.
Value filter_format(const Value& v, const FilterCall& c) {
  if (!c.args.empty() && !c.kwargs.empty())
    fail("template line {}: format takes positional or keyword arguments, not both", c.line);
  if (!c.kwargs.empty())
    return Value::string(
        percent_format(to_string(v), Value::make_dict(Dict(c.kwargs.begin(), c.kwargs.end())), c.line));
  return Value::string(percent_format(to_string(v), Value::make_tuple(c.args), c.line));
}

// Within length + leeway (5, HF's default policy) the text stays as it is. Else it is cut to length - len(end)
// characters, back to the last space unless killwords, and end appended.
Value filter_truncate(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"length", "killwords", "end", "leeway"});
  const std::string& text = as_str(v, c.line, "truncate");
  const int64_t length = p[0].defined() ? as_int(p[0], c.line) : 255;
  const std::string end = p[2].defined() ? to_string(p[2]) : "...";
  const int64_t leeway = p[3].defined() && p[3].kind != K::None ? as_int(p[3], c.line) : 5;
  const auto end_len = static_cast<int64_t>(code_points(end));
  if (length < end_len) fail("template line {}: truncate: expected length >= {}, got {}", c.line, end_len, length);
  if (leeway < 0) fail("template line {}: truncate: expected leeway >= 0, got {}", c.line, leeway);
  const auto n = static_cast<int64_t>(code_points(text));
  if (n <= length || n - length <= leeway) return Value::string(text);  // n <= length + leeway, without overflow
  std::string kept = prefix_chars(text, static_cast<size_t>(length - end_len));
  if (!p[1].truthy()) {
    const size_t space = kept.rfind(' ');
    if (space != std::string::npos) kept.resize(space);
  }
  return Value::string(kept + end);
}

// len(re.findall(r"\w+", s)), where \w is a letter, a number (Unicode categories L and N) or '_'.
Value filter_wordcount(const Value& v, const FilterCall&) {
  const std::string text = to_string(v);
  int64_t words = 0;
  bool in_word = false;
  for (size_t k = 0; k < text.size();) {
    const auto [cp, n] = char_at(text, k);
    const utf8proc_category_t cat = cp < 0 ? UTF8PROC_CATEGORY_CN : utf8proc_category(cp);
    const bool word = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                      (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
    words += word && !in_word ? 1 : 0;
    in_word = word;
    k += n;
  }
  return Value::integer(words);
}

// A string (or any value that does not iterate) quoted with '/' kept; a dict's items or an iterable's pairs as
// key=value joined by '&', quoted with nothing kept and spaces as '+'.
Value filter_urlencode(const Value& v, const FilterCall& c) {
  auto quote = [](const std::string& text, bool for_qs) {
    std::string out;
    for (const char ch : text) {
      const auto u = static_cast<unsigned char>(ch);
      if ((u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') || u == '_' || u == '.' ||
          u == '-' || u == '~' || (u == '/' && !for_qs)) {
        out += ch;
      } else if (u == ' ' && for_qs) {
        out += '+';
      } else {
        out += fmt::format("%{:02X}", u);
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
      const List pair = iterate(item, c.line);
      if (pair.size() != 2)
        fail("template line {}: urlencode expects (key, value) pairs, got '{}'", c.line, to_string(item));
      add(pair[0], pair[1]);
    }
  }
  return Value::string(out);
}

// HF renders without autoescape: safe marks str(value) as Markup; escape (e) HTML-escapes str(value) unless it is
// Markup already; forceescape always does.
Value filter_safe(const Value& v, const FilterCall&) {
  Value m = Value::string(to_string(v));
  m.markup = true;
  return m;
}
Value filter_escape(const Value& v, const FilterCall&) {
  if (v.kind == K::String && v.markup) return v;
  return html_escaped(to_string(v));
}
Value filter_forceescape(const Value& v, const FilterCall&) {
  return html_escaped(to_string(v));
}

// Hugging Face's tojson: json.dumps(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False), its
// arguments bound in that order. An integer indent is that many spaces a level (0 or less: the line ends only), a
// string indent is used as it is. Past 1024 an indent is refused.
Value filter_tojson(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions options;
  options.ensure_ascii = p[0].truthy();
  if (p[1].kind == K::String) {
    if (p[1].s.size() > 1024) fail("template line {}: tojson indent of {} bytes is past 1024", c.line, p[1].s.size());
    options.indent = p[1].s;
  } else if (p[1].defined() && p[1].kind != K::None) {
    const int64_t indent = std::max<int64_t>(0, as_int(p[1], c.line));
    if (indent > 1024) fail("template line {}: tojson indent {} is past 1024", c.line, indent);
    options.indent = std::string(static_cast<size_t>(indent), ' ');
  }
  if (p[2].defined() && p[2].kind != K::None) {
    const Value& sep = p[2];
    if (sep.kind != K::List || sep.list->size() != 2 || (*sep.list)[0].kind != K::String ||
        (*sep.list)[1].kind != K::String)
      fail("template line {}: tojson separators must be two strings, got {}", c.line, repr(sep));
    options.item_separator = (*sep.list)[0].s;
    options.key_separator = (*sep.list)[1].s;
  }
  options.sort_keys = p[3].truthy();
  return Value::string(to_json(v, options));
}

// --- any value ---------------------------------------------------------------------------------------------------

// default(default_value='', boolean=False), also d: default_value where v is undefined, or false when boolean is true.
Value filter_default(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"default_value", "boolean"});
  const bool use_default = !v.defined() || (p[1].truthy() && !v.truthy());
  return use_default ? (p[0].defined() ? p[0] : Value::string("")) : v;
}

// getattr(obj, name) only, never obj[name]: a dict's keys are not its attributes.
Value filter_attr(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"name"});
  if (!p[0].defined()) fail("template line {}: attr needs a name", c.line);
  const std::string& name = as_str(p[0], c.line, "attr");
  if (v.kind == K::Dict && !v.is_namespace) {
    if (name == "items" || name == "keys" || name == "values" || name == "get") return bound_method(v, name, c.line);
    return {};
  }
  // HF's immutable sandbox gives a list's modifying methods as undefined.
  static const std::set<std::string, std::less<>> kModifying = {"append", "clear",  "extend",  "insert",
                                                                "pop",    "remove", "reverse", "sort"};
  if (v.kind == K::Undefined || (v.kind == K::List && kModifying.contains(name))) return {};
  return attribute(v, name, c.line);
}

// --- sequences ---------------------------------------------------------------------------------------------------

Value filter_list(const Value& v, const FilterCall& c) {
  return Value::make_list(iterate(v, c.line));
}

// A mapping's (key, value) tuples, as jinja2's generator (true even when empty); Undefined gives none.
Value filter_items(const Value& v, const FilterCall& c) {
  if (v.kind == K::Undefined) return generator_of({});
  if (v.kind != K::Dict || v.is_namespace)
    fail("template line {}: items: can only get item pairs from a mapping, got {}", c.line, repr(v));
  return generator_of(*call_method(v, "items", {}, c.line).list);
}

// first and last: Undefined for an empty sequence.
template <bool kFirst>
Value filter_first_or_last(const Value& v, const FilterCall& c) {
  const auto items = iterate(v, c.line);
  if (items.empty()) return {};
  return kFirst ? items.front() : items.back();
}

// A string reversed, or the items as reversed()'s iterator: true even when empty.
Value filter_reverse(const Value& v, const FilterCall& c) {
  auto items = iterate(v, c.line);
  std::reverse(items.begin(), items.end());
  if (v.kind == K::String) {
    std::string s;
    for (const auto& ch : items) s += ch.s;
    return Value::string(s);
  }
  return generator_of(std::move(items));
}

// select(test, *args) and reject: the items that pass (fail) the test; without a test, each item's truth.
template <bool kKeep>
Value filter_select(const Value& v, const FilterCall& c) {
  const Args& a = c.args;
  const std::string test_name = a.empty() ? std::string() : as_str(a[0], c.line, c.name);
  const Args rest(a.begin() + std::min<ptrdiff_t>(1, static_cast<ptrdiff_t>(a.size())), a.end());
  List out;
  for (const auto& item : iterate(v, c.line)) {
    const bool pass = test_name.empty() ? item.truthy() : apply_test(test_name, item, rest, c.line);
    if (pass == kKeep) out.push_back(item);
  }
  return generator_of(std::move(out));
}

// selectattr(attribute, test, *args) and rejectattr: as select, on each item's attribute.
template <bool kKeep>
Value filter_selectattr(const Value& v, const FilterCall& c) {
  const Args& a = c.args;
  if (a.empty()) fail("template line {}: {} needs an attribute", c.line, c.name);
  const std::string& attr = as_str(a[0], c.line, c.name);
  const std::string test_name = a.size() > 1 ? as_str(a[1], c.line, c.name) : std::string();
  const Args rest(a.begin() + std::min<ptrdiff_t>(2, static_cast<ptrdiff_t>(a.size())), a.end());
  List out;
  for (const auto& item : iterate(v, c.line)) {
    const Value x = attribute_path(item, attr);
    const bool pass = test_name.empty() ? x.truthy() : apply_test(test_name, x, rest, c.line);
    if (pass == kKeep) out.push_back(item);
  }
  return generator_of(std::move(out));
}

// map(attribute=path, default=value), or map(filter, *args, **kwargs) applying that filter to each item.
Value filter_map(const Value& v, const FilterCall& c) {
  List out;
  if (c.args.empty()) {
    const std::vector<Value> p = c.bind({"attribute", "default"});
    if (!p[0].defined()) fail("template line {}: map needs a filter name or attribute=", c.line);
    for (const auto& item : iterate(v, c.line)) {
      Value x = sort_key(item, p[0], /*case_sensitive=*/true, c.line);
      out.push_back(!x.defined() && p[1].defined() ? p[1] : x);
    }
  } else {
    const std::string& name = as_str(c.args[0], c.line, "map");
    if (name == "map") fail("template line {}: map('map') is not supported", c.line);
    const Args rest(c.args.begin() + 1, c.args.end());
    for (const auto& item : iterate(v, c.line)) out.push_back(apply_filter(name, item, rest, c.kwargs, c.line));
  }
  return generator_of(std::move(out));
}

Value filter_sort(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"reverse", "case_sensitive", "attribute"});
  return Value::make_list(sorted(iterate(v, c.line), p[2], p[1].truthy(), p[0].truthy(), c.line));
}

// A dict's (key, value) tuples sorted by key or value.
Value filter_dictsort(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"case_sensitive", "by", "reverse"});
  if (v.kind != K::Dict) fail("template line {}: dictsort expects a dict, got '{}'", c.line, to_string(v));
  const std::string by = p[1].defined() ? as_str(p[1], c.line, "dictsort's by") : "key";
  if (by != "key" && by != "value") fail("template line {}: dictsort sorts by 'key' or 'value', got '{}'", c.line, by);
  List pairs;
  for (const auto& [k, x] : *v.dict) pairs.push_back(Value::make_tuple({Value::string(k), x}));
  return Value::make_list(
      sorted(std::move(pairs), Value::integer(by == "key" ? 0 : 1), p[0].truthy(), p[2].truthy(), c.line));
}

Value filter_unique(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"case_sensitive", "attribute"});
  List out;
  std::unordered_set<std::string> seen;
  for (const auto& item : iterate(v, c.line)) {
    if (seen.insert(hash_key(sort_key(item, p[1], p[0].truthy(), c.line), c.line)).second) out.push_back(item);
  }
  return generator_of(std::move(out));
}

// min and max: the first least (greatest) item by its key; an empty sequence gives Undefined, as jinja2's does.
template <int kWant>
Value filter_min_or_max(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"case_sensitive", "attribute"});
  const List items = iterate(v, c.line);
  const Value* best = nullptr;
  Value best_key;
  for (const auto& item : items) {
    Value key = sort_key(item, p[1], p[0].truthy(), c.line);
    if (best == nullptr || compare(key, best_key, c.line) == kWant) {
      best = &item;
      best_key = std::move(key);
    }
  }
  return best != nullptr ? *best : Value{};
}

// Lists of linecount items, the last filled up with fill_with when one is given.
Value filter_batch(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"linecount", "fill_with"});
  if (!p[0].defined()) fail("template line {}: batch needs a linecount", c.line);
  const int64_t count = as_int(p[0], c.line);
  List out, cur;
  for (const auto& item : iterate(v, c.line)) {
    if (static_cast<int64_t>(cur.size()) == count) {
      out.push_back(Value::make_list(std::move(cur)));
      cur.clear();
    }
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (p[1].defined() && p[1].kind != K::None) {
      if (count > kMaxRange) fail("template line {}: batch filled up to {} items, past {}", c.line, count, kMaxRange);
      while (static_cast<int64_t>(cur.size()) < count) cur.push_back(p[1]);
    }
    out.push_back(Value::make_list(std::move(cur)));
  }
  return generator_of(std::move(out));
}

// `slices` lists of consecutive items, the first len % slices one longer; with fill_with the shorter ones get it
// appended.
Value filter_slice(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"slices", "fill_with"});
  if (!p[0].defined()) fail("template line {}: slice needs a number of slices", c.line);
  const int64_t slices = as_int(p[0], c.line);
  const List seq = iterate(v, c.line);
  if (slices == 0) fail("template line {}: slice into 0 parts (a division by zero in jinja2)", c.line);
  if (slices < 0) return generator_of({});  // jinja2's range(slices): no slices
  const auto length = static_cast<int64_t>(seq.size());
  const int64_t per = length / slices, extra = length % slices;
  if (slices > kMaxRange) fail("template line {}: slice into {} parts, past {}", c.line, slices, kMaxRange);
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

// The items sorted by the attribute (strings lowered unless case_sensitive; default for a missing one), then runs of
// equal keys as (grouper, list) pairs. The grouper is the first item's own value, not lowered.
Value filter_groupby(const Value& v, const FilterCall& c) {
  const std::vector<Value> p = c.bind({"attribute", "default", "case_sensitive"});
  // The attribute: a dotted path, an index (negative from the end) or none (the item itself).
  if (!p[0].defined()) fail("template line {}: groupby needs an attribute", c.line);
  if (p[0].kind != K::None && p[0].kind != K::Int) as_str(p[0], c.line, "groupby's attribute");
  const bool case_sensitive = p[2].truthy();
  auto key_of = [&](const Value& item, bool lowered) {
    Value k = p[0].kind == K::None ? item : p[0].kind == K::String ? attribute_path(item, p[0].s) : Value{};
    if (p[0].kind == K::Int && (item.kind == K::List || item.kind == K::String)) {
      const List seq = iterate(item, c.line);
      const int64_t at = normalize_index(p[0].i, static_cast<int64_t>(seq.size()));
      if (at >= 0 && at < static_cast<int64_t>(seq.size())) k = seq[static_cast<size_t>(at)];
    }
    if (!k.defined() && p[1].defined()) k = p[1];
    if (lowered && !case_sensitive && k.kind == K::String) k.s = case_mapped(k.s, 'L');
    return k;
  };
  List items = iterate(v, c.line);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t k = 0; k < items.size(); ++k) keyed.emplace_back(key_of(items[k], /*lowered=*/true), k);
  std::stable_sort(keyed.begin(), keyed.end(),
                   [&](const auto& x, const auto& y) { return compare(x.first, y.first, c.line) < 0; });
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

const std::unordered_map<std::string_view, FilterFn> kFilters = {
    {"abs", without_arguments<filter_abs>},
    {"attr", filter_attr},
    {"batch", filter_batch},
    {"capitalize", without_arguments<filter_case>},
    {"center", filter_center},
    {"count", without_arguments<filter_length>},
    {"d", filter_default},
    {"default", filter_default},
    {"dictsort", filter_dictsort},
    {"e", without_arguments<filter_escape>},
    {"escape", without_arguments<filter_escape>},
    {"filesizeformat", filter_filesizeformat},
    {"first", without_arguments<filter_first_or_last<true>>},
    {"float", filter_float},
    {"forceescape", without_arguments<filter_forceescape>},
    {"format", filter_format},
    {"groupby", filter_groupby},
    {"indent", filter_indent},
    {"int", filter_int},
    {"items", without_arguments<filter_items>},
    {"join", filter_join},
    {"last", without_arguments<filter_first_or_last<false>>},
    {"length", without_arguments<filter_length>},
    {"list", without_arguments<filter_list>},
    {"lower", without_arguments<filter_case>},
    {"map", filter_map},
    {"max", filter_min_or_max<1>},
    {"min", filter_min_or_max<-1>},
    {"reject", filter_select<false>},
    {"rejectattr", filter_selectattr<false>},
    {"replace", filter_replace},
    {"reverse", without_arguments<filter_reverse>},
    {"round", filter_round},
    {"safe", without_arguments<filter_safe>},
    {"select", filter_select<true>},
    {"selectattr", filter_selectattr<true>},
    {"slice", filter_slice},
    {"sort", filter_sort},
    {"string", without_arguments<filter_string>},
    {"sum", filter_sum},
    {"title", without_arguments<filter_title>},
    {"tojson", filter_tojson},
    {"trim", filter_trim},
    {"truncate", filter_truncate},
    {"unique", filter_unique},
    {"upper", without_arguments<filter_case>},
    {"urlencode", without_arguments<filter_urlencode>},
    {"wordcount", without_arguments<filter_wordcount>},
};

// --- tests -------------------------------------------------------------------------------------------------------

// One use of a test: its name as written, its arguments and its line.
struct TestCall {
  std::string_view name;
  const Args& args;
  int line;

  // The argument the test compares with.
  const Value& arg() const {
    if (args.empty()) fail("template line {}: test '{}' needs an argument", line, name);
    return args[0];
  }
};

using TestFn = bool (*)(const Value& v, const TestCall& c);

bool is_test(std::string_view name);

template <K kKind>
bool test_kind(const Value& v, const TestCall&) {
  return v.kind == kKind;
}
bool test_defined(const Value& v, const TestCall&) {
  return v.defined();
}
bool test_undefined(const Value& v, const TestCall&) {
  return !v.defined();
}
// A bool is a number in Python (but not an integer to jinja2's integer test).
bool test_number(const Value& v, const TestCall&) {
  return v.kind == K::Int || v.kind == K::Float || v.kind == K::Bool;
}
// jinja2's Undefined is iterable (as nothing), indexable and callable (both fail), so these tests hold for it; a
// namespace is none of these.
bool test_mapping(const Value& v, const TestCall&) {
  return v.kind == K::Dict && !v.is_namespace;
}
bool test_callable(const Value& v, const TestCall&) {
  return v.kind == K::Function || v.kind == K::Undefined;
}
template <bool kWant>
bool test_bool(const Value& v, const TestCall&) {
  return v.kind == K::Bool && v.b == kWant;
}
bool test_iterable(const Value& v, const TestCall&) {
  return v.kind == K::List || v.kind == K::String || (v.kind == K::Dict && !v.is_namespace) || v.kind == K::Undefined;
}
template <bool kOdd>
bool test_odd_or_even(const Value& v, const TestCall& c) {
  return (as_int(v, c.line) % 2 != 0) == kOdd;
}
bool test_divisibleby(const Value& v, const TestCall& c) {
  const int64_t d = as_int(c.arg(), c.line);
  if (d == 0) fail("template line {}: divisibleby 0", c.line);  // Python's ZeroDivisionError
  return d == -1 || as_int(v, c.line) % d == 0;                 // INT64_MIN % -1 traps
}
bool test_eq(const Value& v, const TestCall& c) {
  return equal(v, c.arg());
}
bool test_ne(const Value& v, const TestCall& c) {
  return !equal(v, c.arg());
}
bool test_lt(const Value& v, const TestCall& c) {
  return compare(v, c.arg(), c.line) < 0;
}
bool test_le(const Value& v, const TestCall& c) {
  return compare(v, c.arg(), c.line) <= 0;
}
bool test_gt(const Value& v, const TestCall& c) {
  return compare(v, c.arg(), c.line) > 0;
}
bool test_ge(const Value& v, const TestCall& c) {
  return compare(v, c.arg(), c.line) >= 0;
}
bool test_in(const Value& v, const TestCall& c) {
  return contains(c.arg(), v, c.line);
}
// jinja2: hasattr(value, "__html__"), which only Markup has here.
bool test_escaped(const Value& v, const TestCall&) {
  return v.kind == K::String && v.markup;
}
// lower and upper: str(value).islower() / isupper().
bool test_lower(const Value& v, const TestCall& c) {
  return call_method(Value::string(to_string(v)), "islower", {}, c.line).truthy();
}
bool test_upper(const Value& v, const TestCall& c) {
  return call_method(Value::string(to_string(v)), "isupper", {}, c.line).truthy();
}
// Whether v names one of HF's environment's filters: jinja2's defaults. A few of them, striptags for one, are not
// implemented here and fail by name when used.
bool test_filter(const Value& v, const TestCall&) {
  static const std::set<std::string, std::less<>> kJinjaFilters = {
      "abs",    "attr",       "batch",       "capitalize", "center",   "count",
      "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
      "first",  "float",      "forceescape", "format",     "groupby",  "indent",
      "int",    "items",      "join",        "last",       "length",   "list",
      "lower",  "map",        "max",         "min",        "pprint",   "random",
      "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
      "select", "selectattr", "slice",       "sort",       "string",   "striptags",
      "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
      "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr"};
  return v.kind == K::String && kJinjaFilters.contains(v.s);
}
// Whether v names one of jinja2's tests: every one of them is in the table below.
bool test_test(const Value& v, const TestCall&) {
  return v.kind == K::String && is_test(v.s);
}

const std::unordered_map<std::string_view, TestFn> kTests = {
    {"defined", test_defined},
    {"undefined", test_undefined},
    {"none", test_kind<K::None>},
    {"string", test_kind<K::String>},
    {"number", test_number},
    {"integer", test_kind<K::Int>},
    {"float", test_kind<K::Float>},
    {"boolean", test_kind<K::Bool>},
    {"true", test_bool<true>},
    {"false", test_bool<false>},
    {"mapping", test_mapping},
    {"sequence", test_iterable},
    {"iterable", test_iterable},
    {"callable", test_callable},
    {"odd", test_odd_or_even<true>},
    {"even", test_odd_or_even<false>},
    {"divisibleby", test_divisibleby},
    {"equalto", test_eq},
    {"eq", test_eq},
    {"==", test_eq},
    {"sameas", test_eq},
    {"ne", test_ne},
    {"!=", test_ne},
    {"lt", test_lt},
    {"<", test_lt},
    {"lessthan", test_lt},
    {"le", test_le},
    {"<=", test_le},
    {"gt", test_gt},
    {">", test_gt},
    {"greaterthan", test_gt},
    {"ge", test_ge},
    {">=", test_ge},
    {"in", test_in},
    {"escaped", test_escaped},
    {"lower", test_lower},
    {"upper", test_upper},
    {"filter", test_filter},
    {"test", test_test},
};

bool is_test(std::string_view name) {
  return kTests.contains(name);
}

}  // namespace

Value apply_filter(std::string_view name, const Value& v, const Args& a, const Kwargs& kw, int line) {
  const auto it = kFilters.find(name);
  if (it == kFilters.end()) fail("template line {}: unknown filter '{}'", line, name);
  return it->second(v, FilterCall{name, a, kw, line});
}

bool apply_test(std::string_view name, const Value& v, const Args& a, int line) {
  const auto it = kTests.find(name);
  if (it == kTests.end()) fail("template line {}: unknown test '{}'", line, name);
  return it->second(v, TestCall{name, a, line});
}

}  // namespace ascent::tokenizer::jinja
