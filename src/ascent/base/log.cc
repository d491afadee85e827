#include "ascent/base/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ascent::log {
namespace {

Level initial_level() {
  const char* env = std::getenv("ASCENT_LOG");
  if (env == nullptr || *env == '\0') return Level::Warn;
  if (std::strcmp(env, "error") == 0) return Level::Error;
  if (std::strcmp(env, "info") == 0) return Level::Info;
  if (std::strcmp(env, "debug") == 0) return Level::Debug;
  // An unknown level is not worth failing a run over, but a silent default would hide the typo.
  if (std::strcmp(env, "warn") != 0) {
    std::fprintf(stderr, "ascent: warn: ASCENT_LOG=%s: expected error, warn, info or debug; logging at warn\n", env);
  }
  return Level::Warn;
}

Level g_level = initial_level();
std::mutex g_mutex;

}  // namespace

Level level() {
  return g_level;
}
void set_level(Level l) {
  g_level = l;
}

void write(Level l, const std::string& msg) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "ascent: %s: %s\n", names[static_cast<int>(l)], msg.c_str());
}

}  // namespace ascent::log
