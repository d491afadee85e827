#include "ascent/base/read_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "ascent/base/error.h"

namespace ascent {

std::string read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (f == nullptr) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fileno(f.get()), &st) == 0 && S_ISDIR(st.st_mode)) fail("{}: is a directory, expected a file", path);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof(buf), f.get());
    out.append(buf, n);
    if (n < sizeof(buf)) break;
  }
  if (std::ferror(f.get())) fail("{}: read failed: {}", path, std::strerror(errno));
  return out;
}

}  // namespace ascent
