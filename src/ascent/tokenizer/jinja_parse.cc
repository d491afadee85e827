// Jinja lexer and parser: splits the source into text and tags (with -/+ whitespace control, trim_blocks and
// lstrip_blocks as Hugging Face configures them), then parses tags into statements and expressions with
// Jinja2's operator precedence.
#include <charconv>
#include <cstring>

#include <utf8proc.h>

#include "ascent/base/error.h"
#include "ascent/tokenizer/jinja_ast.h"
#include "ascent/tokenizer/utf8.h"

namespace ascent::tokenizer::jinja {
namespace {

struct Segment {
  enum class Kind { Text, Var, Block } kind;
  std::string text;
  int line;
};

// Line numbers for error messages, counted incrementally as the lexer moves forward through the source.
class LineCounter {
 public:
  explicit LineCounter(const std::string& s) : s_(s) {}
  int at(size_t pos) {
    for (; at_ < pos && at_ < s_.size(); ++at_) line_ += s_[at_] == '\n';
    return line_;
  }

 private:
  const std::string& s_;
  size_t at_ = 0;
  int line_ = 1;
};

// Finds the closing delimiter of a tag starting at `from`, skipping string literals and what brackets enclose.
size_t find_close(const std::string& s, size_t from, const char* close) {
  char quote = 0;
  int depth = 0;  // brackets open: jinja2 ends a tag only outside them, so {{ {'a': {'b': 1}} }} is one expression
  for (size_t i = from; i + 1 < s.size(); ++i) {
    if (quote) {
      if (s[i] == '\\') {
        ++i;
      } else if (s[i] == quote) {
        quote = 0;
      }
    } else if (s[i] == '\'' || s[i] == '"') {
      quote = s[i];
    } else if (depth == 0 && s[i] == close[0] && s[i + 1] == close[1]) {
      return i;
    } else if (s[i] == '(' || s[i] == '[' || s[i] == '{') {
      ++depth;
    } else if ((s[i] == ')' || s[i] == ']' || s[i] == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string::npos;
}

std::vector<Segment> lex(const std::string& src) {
  std::vector<Segment> out;
  LineCounter lines(src);
  size_t pos = 0;
  bool strip_leading = false, trim_newline = false;
  while (pos <= src.size()) {
    size_t open = std::string::npos;
    for (size_t i = src.find('{', pos); i != std::string::npos && i + 1 < src.size(); i = src.find('{', i + 1)) {
      if (src[i + 1] == '{' || src[i + 1] == '%' || src[i + 1] == '#') {
        open = i;
        break;
      }
    }
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (strip_leading) {
      text.erase(
          0, text.find_first_not_of(" \t\r\n") == std::string::npos ? text.size() : text.find_first_not_of(" \t\r\n"));
    } else if (trim_newline) {
      if (text.rfind("\r\n", 0) == 0) {
        text.erase(0, 2);
      } else if (!text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
    }
    strip_leading = trim_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Kind::Text, text, lines.at(pos)});
      break;
    }
    const char kind = src[open + 1];
    const char mod = open + 2 < src.size() ? src[open + 2] : 0;
    if (mod == '-') {
      const size_t keep = text.find_last_not_of(" \t\r\n");
      text.erase(keep == std::string::npos ? 0 : keep + 1);
    } else if (kind != '{' && mod != '+') {
      // lstrip_blocks: a block or comment tag preceded only by indentation on its source line takes it along.
      size_t k = open;
      while (k > 0 && (src[k - 1] == ' ' || src[k - 1] == '\t')) --k;
      if (k == 0 || src[k - 1] == '\n') {
        const size_t keep = text.find_last_not_of(" \t");
        text.erase(keep == std::string::npos ? 0 : keep + 1);
      }
    }
    if (!text.empty()) out.push_back({Segment::Kind::Text, text, lines.at(pos)});
    const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t body = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
    const size_t end = kind == '#' ? src.find(close, body) : find_close(src, body, close);
    if (end == std::string::npos) fail("template line {}: unclosed '{}{}'", lines.at(open), '{', kind);
    size_t inner_end = end;
    if (end > body && src[end - 1] == '-') {
      strip_leading = true;
      --inner_end;
    } else if (kind != '{') {
      trim_newline = true;  // trim_blocks
    }
    if (kind != '#') {
      out.push_back({kind == '{' ? Segment::Kind::Var : Segment::Kind::Block, src.substr(body, inner_end - body),
                     lines.at(open)});
    }
    pos = end + 2;
  }
  return out;
}

struct Token {
  enum class Kind { Name, String, Int, Float, Op, End } kind;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

// The escape after a backslash at s[j] in a string literal, appended to v as jinja2 reads it (Python's
// unicode-escape: \\ \' \" \a \b \f \n \r \t \v, up to 3 octal digits, \xhh, \uhhhh, \Uhhhhhhhh, a backslash
// before a line end drops both; any other backslash stays). Returns the index of the escape's last character.
size_t unescape(const std::string& s, size_t j, std::string& v, int line) {
  const char e = s[j];
  switch (e) {
    case '\\':
    case '\'':
    case '"':
      v += e;
      return j;
    case 'a':
      v += '\a';
      return j;
    case 'b':
      v += '\b';
      return j;
    case 'f':
      v += '\f';
      return j;
    case 'n':
      v += '\n';
      return j;
    case 'r':
      v += '\r';
      return j;
    case 't':
      v += '\t';
      return j;
    case 'v':
      v += '\v';
      return j;
    case '\n':  // a line continuation
      return j;
    default:
      break;
  }
  uint32_t cp = 0;
  size_t last = j;
  if (e >= '0' && e <= '7') {
    for (size_t k = j; k < s.size() && k < j + 3 && s[k] >= '0' && s[k] <= '7'; ++k) {
      cp = cp * 8 + static_cast<uint32_t>(s[k] - '0');
      last = k;
    }
  } else if (e == 'x' || e == 'u' || e == 'U') {
    const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
    const char* digits = s.data() + j + 1;
    const auto [end, ec] = std::from_chars(digits, digits + std::min(n, s.size() - j - 1), cp, 16);
    if (ec != std::errc() || end != digits + n)
      fail("template line {}: truncated \\{} escape in a string (needs {} hex digits)", line, e, n);
    last = j + n;
  } else {
    v += '\\';
    v += e;
    return j;
  }
  if (!utf8proc_codepoint_valid(static_cast<utf8proc_int32_t>(cp)))
    fail("template line {}: escape \\{} in a string is not a Unicode character (U+{:X})", line,
         s.substr(j, last - j + 1), cp);
  append_utf8(v, static_cast<utf8proc_int32_t>(cp));
  return last;
}

// The number literal at s[i] (digits and underscores, a fraction, an exponent); i moves past it.
Token lex_number(const std::string& s, size_t& i, int line) {
  auto digit = [&](size_t k) { return k < s.size() && std::isdigit(static_cast<unsigned char>(s[k])); };
  size_t j = i;
  bool is_float = false;
  while (digit(j) || (j < s.size() && s[j] == '_') || (j < s.size() && s[j] == '.' && digit(j + 1))) {
    is_float |= s[j] == '.';
    ++j;
  }
  // An exponent (jinja2's float literals: 1e300, 2.5E-3), taken only where digits follow it.
  if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
    size_t k = j + 1;
    if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
    if (digit(k)) {
      while (digit(k) || (k < s.size() && s[k] == '_')) ++k;
      is_float = true;
      j = k;
    }
  }
  std::string num = s.substr(i, j - i);
  i = j;
  std::erase(num, '_');
  Token t{is_float ? Token::Kind::Float : Token::Kind::Int, num};
  if (is_float) {
    t.f = std::strtod(num.c_str(), nullptr);  // past a double's range: inf, as Python's literal
    return t;
  }
  // Python's ints are unbounded; ours are 64-bit, as the evaluator's arithmetic is.
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), t.i);
  if (ec != std::errc() || end != num.data() + num.size())
    fail("template line {}: integer literal {} is past 64 bits", line, num);
  return t;
}

std::vector<Token> tokenize(const std::string& s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      out.push_back(lex_number(s, i, line));
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        j = unescape(s, j + 1, v, line);
      }
      if (j >= s.size()) fail("template line {}: unterminated string", line);
      out.push_back({Token::Kind::String, v});
      i = j + 1;
    } else {
      static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".",
                                  ",",  ":",  "|",  "~",  "+",  "-",  "*", "/", "%", "<", ">", "="};
      bool found = false;
      for (const char* op : ops) {
        const size_t n = std::strlen(op);
        if (s.compare(i, n, op) == 0) {
          out.push_back({Token::Kind::Op, op});
          i += n;
          found = true;
          break;
        }
      }
      if (!found) fail("template line {}: unexpected character '{}'", line, c);
    }
  }
  out.push_back({Token::Kind::End, ""});
  return out;
}

using ExprPtr = std::unique_ptr<Expr>;

// Templates nested deeper than this are refused: the parsers below recurse once per level (parentheses, lists,
// unary operators, blocks), so unbounded nesting in a model's template would overflow the stack. Python's jinja2, the
// reference, fails at about 100 nested parentheses or blocks as well (RecursionError, "too many levels of
// indentation").
constexpr int kMaxNesting = 100;

// Whether an expression or a template body names `loop` or calls a function by name (Template::Node::needs_loop).
// The parser's depth limits bound the recursion.
bool reads_loop(const Expr* e) {
  if (e == nullptr) return false;
  if (e->kind == Expr::Kind::Name && e->name == "loop") return true;
  if (e->kind == Expr::Kind::Call && e->args[0]->kind == Expr::Kind::Name) return true;
  for (const auto& a : e->args) {
    if (reads_loop(a.get())) return true;
  }
  for (const auto& [name, a] : e->kwargs) {
    if (reads_loop(a.get())) return true;
  }
  return false;
}
bool reads_loop(const NodeList& body) {
  for (const auto& n : body) {
    if (reads_loop(n->expr.get()) || reads_loop(n->filter.get())) return true;
    for (const auto& c : n->conditions) {
      if (reads_loop(c.get())) return true;
    }
    for (const auto& b : n->branches) {
      if (reads_loop(b)) return true;
    }
    for (const auto& [name, d] : n->params) {
      if (reads_loop(d.get())) return true;
    }
  }
  return false;
}

}  // namespace

DepthGuard::DepthGuard(int& depth, int limit, int line, const char* what) : depth_(depth) {
  if (depth_ >= limit) fail("template line {}: {} more than {} levels deep", line, what, limit);
  ++depth_;
}

namespace {

class ExprParser {
 public:
  ExprParser(std::vector<Token> toks, int line) : t_(std::move(toks)), line_(line) {}

  const Token& peek(size_t k = 0) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  bool at_end() const { return peek().kind == Token::Kind::End; }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).kind == Token::Kind::Op && peek(k).text == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).kind == Token::Kind::Name && peek(k).text == n; }
  Token next() { return t_[std::min(pos_++, t_.size() - 1)]; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail("template line {}: expected '{}' but found '{}'", line_, op, peek().text);
    ++pos_;
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::Name) fail("template line {}: expected a name but found '{}'", line_, peek().text);
    return next().text;
  }
  void expect_end() {
    if (!at_end()) fail("template line {}: unexpected '{}'", line_, peek().text);
  }

  ExprPtr expression() {
    const DepthGuard guard(depth_, kMaxNesting, line_, "nested");
    ExprPtr e = or_expr();
    if (is_name("if")) {  // a if cond else b
      ++pos_;
      auto n = node(Expr::Kind::Ternary);
      ExprPtr cond = or_expr();
      ExprPtr other;
      if (is_name("else")) {
        ++pos_;
        other = expression();
      }
      n->args.push_back(std::move(e));
      n->args.push_back(std::move(cond));
      n->args.push_back(std::move(other));
      return n;
    }
    return e;
  }

  // Without the ternary: the iterable of "for x in y if cond" stops before "if".
  ExprPtr or_expr() {
    ExprPtr l = and_expr();
    while (is_name("or")) {
      ++pos_;
      l = binary("or", std::move(l), and_expr());
    }
    return l;
  }

 private:
  ExprPtr node(Expr::Kind k) {
    auto n = std::make_unique<Expr>();
    n->kind = k;
    n->line = line_;
    return n;
  }
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r) {
    auto n = node(Expr::Kind::Binary);
    n->name = op;
    n->args.push_back(std::move(l));
    n->args.push_back(std::move(r));
    return n;
  }
  ExprPtr and_expr() {
    ExprPtr l = not_expr();
    while (is_name("and")) {
      ++pos_;
      l = binary("and", std::move(l), not_expr());
    }
    return l;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      const DepthGuard guard(depth_, kMaxNesting, line_, "nested");
      ++pos_;
      auto n = node(Expr::Kind::Unary);
      n->name = "not";
      n->args.push_back(not_expr());
      return n;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr l = math1();
    for (;;) {
      static const char* ops[] = {"==", "!=", "<", ">", "<=", ">="};
      bool matched = false;
      for (const char* op : ops) {
        if (is_op(op)) {
          ++pos_;
          l = binary(op, std::move(l), math1());
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (is_name("in")) {
        ++pos_;
        l = binary("in", std::move(l), math1());
      } else if (is_name("not") && is_name("in", 1)) {
        pos_ += 2;
        l = binary("not in", std::move(l), math1());
      } else {
        return l;
      }
    }
  }
  ExprPtr math1() {
    ExprPtr l = concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = next().text;
      l = binary(op, std::move(l), concat());
    }
    return l;
  }
  ExprPtr concat() {
    ExprPtr l = math2();
    while (is_op("~")) {
      ++pos_;
      l = binary("~", std::move(l), math2());
    }
    return l;
  }
  ExprPtr math2() {
    ExprPtr l = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = next().text;
      l = binary(op, std::move(l), power());
    }
    return l;
  }
  ExprPtr power() {
    ExprPtr l = unary();
    while (is_op("**")) {
      ++pos_;
      l = binary("**", std::move(l), unary());
    }
    return l;
  }
  // As jinja2's parse_unary: a sign applies to its operand before the operand's filters, so -3|abs is abs(-3),
  // and "- - x" nests; only the outermost level takes the filters.
  ExprPtr unary(bool with_filters = true) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const DepthGuard guard(depth_, kMaxNesting, line_, "nested");
      auto n = node(Expr::Kind::Unary);
      n->name = next().text;
      n->args.push_back(unary(/*with_filters=*/false));
      e = std::move(n);
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filters) e = filters(std::move(e));
    return e;
  }
  void call_args(Expr& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Token::Kind::Name && is_op("=", 1)) {
        std::string key = next().text;
        ++pos_;
        n.kwargs.emplace_back(std::move(key), expression());
      } else {
        n.args.push_back(expression());
      }
      if (!is_op(")")) expect_op(",");
    }
    expect_op(")");
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        ++pos_;
        auto n = node(Expr::Kind::Attr);
        n->name = expect_name();
        n->args.push_back(std::move(e));
        e = std::move(n);
      } else if (is_op("[")) {
        ++pos_;
        ExprPtr parts[3];
        int part = 0;
        bool slice = false;
        while (!is_op("]")) {
          if (is_op(":")) {
            ++pos_;
            slice = true;
            if (++part > 2) fail("template line {}: bad slice", line_);
            continue;
          }
          // One expression per part: x[1 2] is an error, as in jinja2.
          if (parts[part]) fail("template line {}: expected ':' or ']' in a subscript", line_);
          parts[part] = expression();
        }
        expect_op("]");
        // jinja2 refuses x[] as syntax; an Index needs its key.
        if (!slice && !parts[0]) fail("template line {}: an empty subscript []", line_);
        auto n = node(slice ? Expr::Kind::Slice : Expr::Kind::Index);
        n->args.push_back(std::move(e));
        for (int k = 0; k < (slice ? 3 : 1); ++k) n->args.push_back(std::move(parts[k]));
        e = std::move(n);
      } else if (is_op("(")) {
        auto n = node(Expr::Kind::Call);
        n->args.push_back(std::move(e));
        call_args(*n);
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  ExprPtr filters(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        ++pos_;
        auto n = node(Expr::Kind::Filter);
        n->name = expect_name();
        n->args.push_back(std::move(e));
        if (is_op("(")) call_args(*n);
        e = std::move(n);
      } else if (is_name("is")) {
        ++pos_;
        auto n = node(Expr::Kind::Test);
        if (is_name("not")) {
          ++pos_;
          n->negate = true;
        }
        n->name = expect_name();
        n->args.push_back(std::move(e));
        if (is_op("(")) {
          call_args(*n);
        } else if (!at_end() && (peek().kind == Token::Kind::String || peek().kind == Token::Kind::Int ||
                                 peek().kind == Token::Kind::Float)) {
          n->args.push_back(primary());  // "is divisibleby 3", "is equalto 'x'"
        }
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Token t = next();
    auto lit = [&](Value v) {
      auto n = node(Expr::Kind::Literal);
      n->literal = std::move(v);
      return n;
    };
    switch (t.kind) {
      case Token::Kind::String: {
        std::string s = t.text;
        while (peek().kind == Token::Kind::String) s += next().text;  // adjacent literals concatenate
        return lit(Value::string(s));
      }
      case Token::Kind::Int:
        return lit(Value::integer(t.i));
      case Token::Kind::Float:
        return lit(Value::number(t.f));
      case Token::Kind::Name:
        if (t.text == "true" || t.text == "True") return lit(Value::boolean(true));
        if (t.text == "false" || t.text == "False") return lit(Value::boolean(false));
        if (t.text == "none" || t.text == "None") return lit(Value::none());
        {
          auto n = node(Expr::Kind::Name);
          n->name = t.text;
          return n;
        }
      case Token::Kind::Op:
        if (t.text == "(") {
          ExprPtr first = expression();
          if (is_op(",")) {  // a tuple
            auto n = node(Expr::Kind::ListLit);
            n->tuple = true;
            n->args.push_back(std::move(first));
            while (is_op(",")) {
              ++pos_;
              if (is_op(")")) break;
              n->args.push_back(expression());
            }
            expect_op(")");
            return n;
          }
          expect_op(")");
          return first;
        }
        if (t.text == "[") {
          auto n = node(Expr::Kind::ListLit);
          while (!is_op("]")) {
            n->args.push_back(expression());
            if (!is_op("]")) expect_op(",");
          }
          expect_op("]");
          return n;
        }
        if (t.text == "{") {
          auto n = node(Expr::Kind::DictLit);
          while (!is_op("}")) {
            n->args.push_back(expression());
            expect_op(":");
            n->args.push_back(expression());
            if (!is_op("}")) expect_op(",");
          }
          expect_op("}");
          return n;
        }
        break;
      case Token::Kind::End:
        fail("template line {}: expression ends too early", line_);
    }
    fail("template line {}: unexpected '{}'", line_, t.text);
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int line_;
  int depth_ = 0;  // expressions, unary operators and nots open now (DepthGuard)
};

class Parser {
 public:
  explicit Parser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  NodeList parse_all() {
    std::string stop;
    NodeList body = body_until({}, stop);
    return body;
  }

 private:
  using Node = Template::Node;

  // Parses nodes until a block tag whose keyword is in `stops`; that keyword lands in `stop`, and the parser
  // for that tag's remaining tokens is left in `last_`.
  NodeList body_until(const std::vector<std::string>& stops, std::string& stop) {
    const DepthGuard guard(depth_, kMaxNesting, i_ < segs_.size() ? segs_[i_].line : 0, "nested");
    NodeList out;
    while (i_ < segs_.size()) {
      const Segment& s = segs_[i_++];
      auto n = std::make_unique<Node>();
      n->line = s.line;
      if (s.kind == Segment::Kind::Text) {
        n->kind = Node::Kind::Text;
        n->text = s.text;
        out.push_back(std::move(n));
        continue;
      }
      auto p = std::make_unique<ExprParser>(tokenize(s.text, s.line), s.line);
      if (s.kind == Segment::Kind::Var) {
        n->kind = Node::Kind::Output;
        n->expr = p->expression();
        p->expect_end();
        out.push_back(std::move(n));
        continue;
      }
      const std::string kw = p->expect_name();
      for (const auto& st : stops) {
        if (kw == st) {
          stop = kw;
          last_ = std::move(p);
          return out;
        }
      }
      if (kw == "if") {
        parse_if(*p, *n);
      } else if (kw == "for") {
        parse_for(*p, *n);
      } else if (kw == "set") {
        parse_set(*p, *n);
      } else if (kw == "macro") {
        parse_macro(*p, *n);
      } else if (kw == "break" || kw == "continue") {
        n->kind = kw == "break" ? Node::Kind::Break : Node::Kind::Continue;
      } else if (kw == "generation" || kw == "endgeneration") {
        continue;  // Hugging Face's marker for assistant-token masks; renders nothing
      } else {
        fail("template line {}: unknown or misplaced tag '{}'", s.line, kw);
      }
      out.push_back(std::move(n));
    }
    if (!stops.empty()) stop.clear();
    return out;
  }

  // The body up to one of `stops`, failing with "'TAG' is never closed with END" at the end of the template.
  NodeList body_closed_by(const std::vector<std::string>& stops, std::string& end, const Node& n, const char* tag,
                          const char* closer) {
    NodeList body = body_until(stops, end);
    if (end.empty()) fail("template line {}: {} is never closed with {}", n.line, tag, closer);
    return body;
  }

  // {% if cond %} ... {% elif cond %} ... {% else %} ... {% endif %}: a condition per branch, none for else.
  void parse_if(ExprParser& p, Node& n) {
    n.kind = Node::Kind::If;
    n.conditions.push_back(p.expression());
    p.expect_end();
    for (;;) {
      std::string end;
      n.branches.push_back(body_closed_by({"elif", "else", "endif"}, end, n, "'if'", "endif"));
      if (end == "endif") break;
      if (end == "elif") n.conditions.push_back(last_->expression());
      last_->expect_end();
    }
  }

  // {% for a[, b...] in iterable [if filter] %} ... [{% else %} ...] {% endfor %}
  void parse_for(ExprParser& p, Node& n) {
    n.kind = Node::Kind::For;
    n.targets.push_back(p.expect_name());
    while (p.is_op(",")) {
      p.next();
      n.targets.push_back(p.expect_name());
    }
    if (!p.is_name("in")) fail("template line {}: expected 'in' in for", n.line);
    p.next();
    n.expr = p.or_expr();
    if (p.is_name("if")) {
      p.next();
      n.filter = p.or_expr();
    }
    if (p.is_name("recursive")) fail("template line {}: recursive loops are not supported", n.line);
    p.expect_end();
    std::string end;
    n.branches.push_back(body_closed_by({"else", "endfor"}, end, n, "'for'", "endfor"));
    n.needs_loop = reads_loop(n.branches[0]);
    if (end == "else") n.branches.push_back(body_closed_by({"endfor"}, end, n, "'for'", "endfor"));
  }

  // {% set name[.attribute] = value %}, or {% set name %}...{% endset %}, whose rendered body becomes the value.
  void parse_set(ExprParser& p, Node& n) {
    n.kind = Node::Kind::Set;
    n.targets.push_back(p.expect_name());
    if (p.is_op(".")) {
      p.next();
      n.targets.push_back(p.expect_name());
    }
    if (p.is_op("=")) {
      p.next();
      n.expr = p.expression();
      p.expect_end();
      return;
    }
    p.expect_end();
    std::string end;
    n.branches.push_back(body_closed_by({"endset"}, end, n, "'set' block", "endset"));
  }

  // {% macro name(param, param=default, ...) %} ... {% endmacro %}
  void parse_macro(ExprParser& p, Node& n) {
    n.kind = Node::Kind::Macro;
    n.macro_name = p.expect_name();
    p.expect_op("(");
    while (!p.is_op(")")) {
      std::string name = p.expect_name();
      std::unique_ptr<Expr> dflt;
      if (p.is_op("=")) {
        p.next();
        dflt = p.expression();
      }
      n.params.emplace_back(std::move(name), std::move(dflt));
      if (!p.is_op(")")) p.expect_op(",");
    }
    p.expect_op(")");
    p.expect_end();
    std::string end;
    n.branches.push_back(body_closed_by({"endmacro"}, end, n, "'macro'", "endmacro"));
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  std::unique_ptr<ExprParser> last_;
  int depth_ = 0;  // block bodies open now (DepthGuard)
};

}  // namespace

NodeList parse_template(const std::string& source) {
  // As jinja2 loads a template (keep_trailing_newline false, newline_sequence "\n", HF's settings): line ends become
  // "\n" and one final line end is dropped.
  std::string text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      text += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      text += source[i];
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return Parser(lex(text)).parse_all();
}

}  // namespace ascent::tokenizer::jinja
