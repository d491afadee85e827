// Errors that carry context. Every failure a user can cause surfaces as an ascent::Error whose message names the
// file, tensor, field or flag at fault; callers add context on the way up with with_context().
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace ascent {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Runs fn; an ascent::Error escaping it is rethrown as "context: message".
template <class Fn>
auto with_context(const std::string& context, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(context + ": " + e.what());
  }
}

}  // namespace ascent

#define ASCENT_CHECK(cond, ...)    \
  do {                             \
    if (!(cond)) {                 \
      ::ascent::fail(__VA_ARGS__); \
    }                              \
  } while (0)
