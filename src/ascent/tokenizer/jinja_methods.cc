// Python's methods on template values (str, list and tuple, dict), one function each in a table per receiver type,
// and attribute lookup (obj.name), which decides which names are methods. Positions and lengths count characters,
// as Python's do. Keyword arguments to a method are ignored.
#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_map>

#include <utf8proc.h>

#include "ascent/base/error.h"
#include "ascent/tokenizer/jinja_internal.h"
#include "ascent/tokenizer/utf8.h"

namespace ascent::tokenizer::jinja {
namespace {

using K = Value::Kind;

// One call of a method: its receiver, its name (for error messages), its positional arguments and its line.
struct MethodCall {
  const Value& self;
  std::string_view name;
  const Args& args;
  int line;

  // Argument k, or null when not given.
  const Value* arg(size_t k) const { return k < args.size() ? &args[k] : nullptr; }
  // Argument k, which the method requires.
  const Value& need(size_t k) const {
    if (k >= args.size())
      fail("template line {}: {}() needs at least {} argument(s), got {}", line, name, k + 1, args.size());
    return args[k];
  }
  // Argument k as an integer, or dflt when not given.
  int64_t int_arg(size_t k, int64_t dflt) const { return k < args.size() ? as_int(args[k], line) : dflt; }
};

using MethodFn = Value (*)(const MethodCall&);
using MethodTable = std::unordered_map<std::string_view, MethodFn>;

// --- str ---------------------------------------------------------------------------------------------------------

// strip, lstrip and rstrip([chars]): whitespace, or the characters of chars.
template <bool kLeft, bool kRight>
Value str_strip(const MethodCall& c) {
  const Value* chars = c.arg(0);
  if (chars != nullptr && chars->kind != K::None && chars->kind != K::String)
    fail("template line {}: {} arg must be None or str, got {}", c.line, c.name, repr(*chars));
  return Value::string(strip(c.self.s, chars, kLeft, kRight));
}

// upper, lower, title, capitalize (case_mapped's letters).
template <char kHow>
Value str_case(const MethodCall& c) {
  return Value::string(case_mapped(c.self.s, kHow));
}

// startswith and endswith(prefix[, start[, end]]): prefix a string or a tuple of them, within s[start:end]. As in
// CPython's tailmatch, a start past the end matches nothing, not even an empty prefix.
template <bool kStart>
Value str_starts_or_ends_with(const MethodCall& c) {
  const std::string& s = c.self.s;
  const Value& prefix = c.need(0);
  const int64_t n = chars_in(s);
  auto index = [&](const Value* x, int64_t dflt) {
    if (x == nullptr || x->kind == K::None) return dflt;
    const int64_t i = as_int(*x, c.line);
    return i < 0 ? std::max<int64_t>(0, i + n) : i;
  };
  const int64_t start = index(c.arg(1), 0), end = std::min(index(c.arg(2), n), n);
  auto matches = [&](const std::string& p) {
    const int64_t m = chars_in(p);
    if (end - m < start) return false;
    const size_t at = byte_offset(s, static_cast<size_t>(kStart ? start : end - m));
    return s.compare(at, p.size(), p) == 0;
  };
  if (prefix.kind == K::List && prefix.tuple) {
    for (const Value& p : *prefix.list) {
      if (matches(as_str(p, c.line, c.name))) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  return Value::boolean(matches(as_str(prefix, c.line, c.name)));
}

// split(None, maxsplit): runs of whitespace separate, none at the ends. After maxsplit words the rest is one item,
// its trailing whitespace kept.
List split_on_whitespace(const std::string& s, int64_t max) {
  List parts;
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
  return parts;
}

Value str_split(const MethodCall& c) {
  const std::string& s = c.self.s;
  const Value* sep_arg = c.arg(0);
  if (sep_arg == nullptr || sep_arg->kind == K::None) return Value::make_list(split_on_whitespace(s, c.int_arg(1, -1)));
  const std::string& sep = as_str(*sep_arg, c.line, "split");
  if (sep.empty()) fail("template line {}: split with an empty separator", c.line);
  int64_t max = c.int_arg(1, -1);
  List parts;
  size_t st = 0;
  for (size_t at; max != 0 && (at = s.find(sep, st)) != std::string::npos; st = at + sep.size(), --max) {
    parts.push_back(Value::string(s.substr(st, at - st)));
  }
  parts.push_back(Value::string(s.substr(st)));
  return Value::make_list(std::move(parts));
}

// replace(old, new[, count]): an empty old matches before every character and at the end.
Value str_replace(const MethodCall& c) {
  const std::string& s = c.self.s;
  const std::string& from = as_str(c.need(0), c.line, "replace");
  const std::string& to = as_str(c.need(1), c.line, "replace");
  int64_t count = c.int_arg(2, -1);
  if (count < 0) count = INT64_MAX;
  std::string r;
  auto add = [&](std::string_view piece) {
    check_built(r.size() + piece.size(), "replace", c.line);
    r += piece;
  };
  size_t st = 0;
  if (from.empty()) {
    for (const Value& ch : iterate(c.self, c.line)) {
      if (count-- > 0) add(to);
      add(ch.s);
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

enum class Search { Find, RFind, Index, RIndex, Count };

// find, rfind, index, rindex and count(sub[, start[, end]]): start and end bound the search as a slice's would, and an
// empty sub is found at every position.
template <Search kHow>
Value str_search(const MethodCall& c) {
  const std::string& s = c.self.s;
  const std::string& sub = as_str(c.need(0), c.line, c.name);
  const int64_t n = chars_in(s);
  auto bound = [&](const Value* x, int64_t dflt) {
    if (x == nullptr || x->kind == K::None) return dflt;
    return clamped_index(as_int(*x, c.line), n);
  };
  const int64_t c0 = bound(c.arg(1), 0), c1 = bound(c.arg(2), n);
  const bool past = c.arg(1) != nullptr && c.arg(1)->kind != K::None && as_int(*c.arg(1), c.line) > n;
  const size_t b0 = byte_offset(s, static_cast<size_t>(c0)), b1 = byte_offset(s, static_cast<size_t>(c1));
  const std::string_view range = c0 <= c1 ? std::string_view(s).substr(b0, b1 - b0) : std::string_view();
  if constexpr (kHow == Search::Count) {
    if (past || c0 > c1) return Value::integer(0);
    if (sub.empty()) return Value::integer(c1 - c0 + 1);
    int64_t count = 0;
    for (size_t at = 0; (at = range.find(sub, at)) != std::string_view::npos; at += sub.size()) ++count;
    return Value::integer(count);
  }
  constexpr bool kFromEnd = kHow == Search::RFind || kHow == Search::RIndex;
  size_t at = std::string_view::npos;
  if (!past && c0 <= c1) at = kFromEnd ? range.rfind(sub) : range.find(sub);
  if (at == std::string_view::npos) {
    if (kHow == Search::Index || kHow == Search::RIndex)
      fail("template line {}: {}: substring not found", c.line, c.name);
    return Value::integer(-1);
  }
  return Value::integer(c0 + chars_in(range.substr(0, at)));
}

enum class Pad { LJust, RJust, Center, ZFill };

// ljust, rjust, center and zfill: padding to width characters with fillchar (one character, a space by default).
// center puts the extra one on the left when the margin and width are odd; zfill pads with zeros after a sign.
template <Pad kHow>
Value str_pad(const MethodCall& c) {
  const std::string& s = c.self.s;
  const int64_t width = as_int(c.need(0), c.line);
  const std::string fill = kHow == Pad::ZFill ? "0" : c.arg(1) != nullptr ? as_str(*c.arg(1), c.line, c.name) : " ";
  if (chars_in(fill) != 1) fail("template line {}: {}: the fill character must be one character", c.line, c.name);
  const int64_t n = chars_in(s);
  if (width <= n) return Value::string(s);
  check_built(static_cast<size_t>(std::min<int64_t>(width, int64_t{1} << 40)) * fill.size(), c.name, c.line);
  const int64_t marg = width - n;
  auto pad = [&](int64_t k) {
    std::string p;
    for (int64_t i = 0; i < k; ++i) p += fill;
    return p;
  };
  switch (kHow) {
    case Pad::LJust:
      return Value::string(s + pad(marg));
    case Pad::RJust:
      return Value::string(pad(marg) + s);
    case Pad::Center: {
      const int64_t left = marg / 2 + (marg & width & 1);
      return Value::string(pad(left) + s + pad(marg - left));
    }
    case Pad::ZFill:
      break;
  }
  const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  return Value::string(s.substr(0, sign) + pad(marg) + s.substr(sign));
}

// Python's str predicates are true of a non-empty string whose every character passes.
template <class Pass>
bool all_chars(const std::string& s, Pass pass) {
  if (s.empty()) return false;
  for (size_t k = 0; k < s.size();) {
    const auto [cp, n] = char_at(s, k);
    if (!pass(cp, cp < 0 ? UTF8PROC_CATEGORY_CN : utf8proc_category(cp))) return false;
    k += n;
  }
  return true;
}

bool is_letter(utf8proc_category_t c) {
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}
bool is_number(utf8proc_category_t c) {
  return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}
bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; });
}

// isascii, isspace, isalpha (category L), isdecimal (Nd) and isalnum (L or N) hold for all of Unicode.
Value str_isascii(const MethodCall& c) {
  return Value::boolean(is_ascii(c.self.s));
}
Value str_isspace(const MethodCall& c) {
  return Value::boolean(all_chars(c.self.s, [](int32_t cp, auto) { return is_space(cp); }));
}
Value str_isalpha(const MethodCall& c) {
  return Value::boolean(all_chars(c.self.s, [](int32_t, auto cat) { return is_letter(cat); }));
}
Value str_isdecimal(const MethodCall& c) {
  return Value::boolean(all_chars(c.self.s, [](int32_t, auto cat) { return cat == UTF8PROC_CATEGORY_ND; }));
}
Value str_isalnum(const MethodCall& c) {
  return Value::boolean(all_chars(c.self.s, [](int32_t, auto cat) { return is_letter(cat) || is_number(cat); }));
}

// isdigit, isnumeric, islower, isupper and istitle need Unicode properties utf8proc lacks (Numeric_Type,
// Other_Lowercase). Beyond ASCII they fail by name rather than guess.
const std::string& ascii_only(const MethodCall& c) {
  if (!is_ascii(c.self.s)) fail("template line {}: {}() of text beyond ASCII is not supported", c.line, c.name);
  return c.self.s;
}
Value str_isdigit(const MethodCall& c) {
  return Value::boolean(all_chars(ascii_only(c), [](int32_t cp, auto) { return cp >= '0' && cp <= '9'; }));
}

enum class Cased { Lower, Upper, Title };

// islower, isupper and istitle: true when the string has a cased character and each passes. istitle wants upper
// case only after an uncased character, lower only after a cased one.
template <Cased kHow>
Value str_is_cased(const MethodCall& c) {
  bool cased = false, ok = true, after_cased = false;
  for (const char ch : ascii_only(c)) {
    const bool up = ch >= 'A' && ch <= 'Z', low = ch >= 'a' && ch <= 'z';
    cased = cased || up || low;
    if (kHow == Cased::Lower) ok = ok && !up;
    if (kHow == Cased::Upper) ok = ok && !low;
    if (kHow == Cased::Title) ok = ok && (after_cased ? !up : !low);
    after_cased = up || low;
  }
  return Value::boolean(cased && ok);
}

Value str_join(const MethodCall& c) {
  std::string r;
  const auto items = iterate(c.need(0), c.line);
  for (size_t k = 0; k < items.size(); ++k) {
    r += (k ? c.self.s : "") + to_string(items[k]);
    check_built(r.size(), "join", c.line);
  }
  return Value::string(r);
}

const MethodTable kStrMethods = {
    {"strip", str_strip<true, true>},
    {"lstrip", str_strip<true, false>},
    {"rstrip", str_strip<false, true>},
    {"upper", str_case<'U'>},
    {"lower", str_case<'L'>},
    {"title", str_case<'T'>},
    {"capitalize", str_case<'C'>},
    {"startswith", str_starts_or_ends_with<true>},
    {"endswith", str_starts_or_ends_with<false>},
    {"split", str_split},
    {"replace", str_replace},
    {"find", str_search<Search::Find>},
    {"rfind", str_search<Search::RFind>},
    {"index", str_search<Search::Index>},
    {"rindex", str_search<Search::RIndex>},
    {"count", str_search<Search::Count>},
    {"ljust", str_pad<Pad::LJust>},
    {"rjust", str_pad<Pad::RJust>},
    {"center", str_pad<Pad::Center>},
    {"zfill", str_pad<Pad::ZFill>},
    {"isascii", str_isascii},
    {"isspace", str_isspace},
    {"isalpha", str_isalpha},
    {"isdecimal", str_isdecimal},
    {"isalnum", str_isalnum},
    {"isdigit", str_isdigit},
    {"isnumeric", str_isdigit},
    {"islower", str_is_cased<Cased::Lower>},
    {"isupper", str_is_cased<Cased::Upper>},
    {"istitle", str_is_cased<Cased::Title>},
    {"join", str_join},
};

// --- dict --------------------------------------------------------------------------------------------------------

Value dict_items(const MethodCall& c) {
  List l;
  for (const auto& [k, v] : *c.self.dict) l.push_back(Value::make_tuple({Value::string(k), v}));
  return Value::make_list(std::move(l));
}
Value dict_keys(const MethodCall& c) {
  List l;
  for (const auto& kv : *c.self.dict) l.push_back(Value::string(kv.first));
  return Value::make_list(std::move(l));
}
Value dict_values(const MethodCall& c) {
  List l;
  for (const auto& kv : *c.self.dict) l.push_back(kv.second);
  return Value::make_list(std::move(l));
}
// get(key[, default]): a key that is not a string is in no dict here (their keys are strings).
Value dict_get(const MethodCall& c) {
  const Value& key = c.need(0);
  const Value* v = key.kind == K::String ? c.self.get(key.s) : nullptr;
  return v ? *v : (c.arg(1) ? *c.arg(1) : Value::none());
}

const MethodTable kDictMethods = {
    {"items", dict_items},
    {"keys", dict_keys},
    {"values", dict_values},
    {"get", dict_get},
};

// --- list and tuple ----------------------------------------------------------------------------------------------

// count(x) and index(x[, start[, end]]), by ==.
Value list_count(const MethodCall& c) {
  const Value& x = c.need(0);
  int64_t count = 0;
  for (const Value& item : *c.self.list) count += equal(item, x) ? 1 : 0;
  return Value::integer(count);
}
Value list_index(const MethodCall& c) {
  const Value& x = c.need(0);
  const auto n = static_cast<int64_t>(c.self.list->size());
  auto bound = [&](const Value* b, int64_t dflt) { return b == nullptr ? dflt : clamped_index(as_int(*b, c.line), n); };
  const int64_t k0 = bound(c.arg(1), 0), k1 = bound(c.arg(2), n);
  for (int64_t k = k0; k < k1; ++k) {
    if (equal((*c.self.list)[static_cast<size_t>(k)], x)) return Value::integer(k);
  }
  fail("template line {}: index: '{}' is not in the list", c.line, to_string(x));
}
// Hugging Face's sandbox refuses it (SecurityError), and a list appended to itself would print forever.
Value list_append(const MethodCall& c) {
  fail("template line {}: lists cannot be changed ('append' is refused, as in jinja2's sandbox)", c.line);
}

const MethodTable kListMethods = {
    {"count", list_count},
    {"index", list_index},
    {"append", list_append},
};

// The method `name` of obj's type, or null.
MethodFn find_method(const Value& obj, std::string_view name) {
  const MethodTable* table = obj.kind == K::String ? &kStrMethods
                             : obj.kind == K::Dict ? &kDictMethods
                             : obj.kind == K::List ? &kListMethods
                                                   : nullptr;
  if (table == nullptr) return nullptr;
  const auto it = table->find(name);
  return it == table->end() ? nullptr : it->second;
}

Value call_found(MethodFn fn, const Value& obj, std::string_view name, const Args& a, int line) {
  if (fn == nullptr) fail("template line {}: unknown method '{}'", line, name);
  return fn(MethodCall{obj, name, a, line});
}

}  // namespace

Value bound_method(const Value& obj, std::string_view name, int line) {
  return Value::function([obj, name = std::string(name), line, fn = find_method(obj, name)](
                             const Args& a, const Kwargs&) { return call_found(fn, obj, name, a, line); });
}

Value call_method(const Value& obj, std::string_view name, const Args& a, int line) {
  return call_found(find_method(obj, name), obj, name, a, line);
}

Value attribute(const Value& obj, const std::string& name, int line) {
  if (obj.group && (name == "grouper" || name == "list")) return (*obj.list)[name == "grouper" ? 0 : 1];
  if (obj.kind == K::Dict) {
    if (const Value* v = obj.get(name)) return *v;
    // A namespace has its attributes only; a dict has its methods too.
    if (!obj.is_namespace && kDictMethods.contains(name)) return bound_method(obj, name, line);
    return {};
  }
  // A name Python's str or list has is a method (calling one not implemented fails by name); any other is
  // Undefined, as in jinja2.
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
    return bound_method(obj, name, line);
  if (obj.kind == K::Undefined) fail("template line {}: '{}' of an undefined value", line, name);
  return {};
}

}  // namespace ascent::tokenizer::jinja
