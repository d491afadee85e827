// Minimal leveled logging to stderr. The level comes from ASCENT_LOG (error|warn|info|debug), default warn, so
// that stdout stays clean for program output (generated text, ids, tables).
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>

namespace ascent::log {

enum class Level { Error = 0, Warn = 1, Info = 2, Debug = 3 };

Level level();
void set_level(Level l);
void write(Level l, const std::string& msg);

template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() >= Level::Info) write(Level::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() >= Level::Warn) write(Level::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() >= Level::Debug) write(Level::Debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ascent::log
