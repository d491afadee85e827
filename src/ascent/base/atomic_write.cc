#include "ascent/base/atomic_write.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ascent/base/error.h"

namespace ascent {

void write_file_atomic(const std::string& path, std::span<const std::span<const char>> parts) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  ASCENT_CHECK(f != nullptr, "{}: cannot create: {}", tmp, std::strerror(errno));
  bool ok = true;
  for (const auto& p : parts) ok = ok && std::fwrite(p.data(), 1, p.size(), f) == p.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("{}: write failed (disk full or no permission?)", path);
  }
}

}  // namespace ascent
