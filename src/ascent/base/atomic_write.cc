#include "ascent/base/atomic_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ascent/base/error.h"

namespace ascent {

namespace fs = std::filesystem;

AtomicFile::AtomicFile(const std::string& path) : path_(path), target_(path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // through any links
  ASCENT_CHECK(!fs::is_directory(st), "{}: is a directory", path);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A device, pipe or socket (-o /dev/stdout) is written in place: renaming over it would replace the node.
    f_ = std::fopen(path_.c_str(), "wb");
    ASCENT_CHECK(f_ != nullptr, "{}: cannot create: {}", path_, std::strerror(errno));
    return;
  }
  if (fs::exists(st)) {
    // A file reached through links is replaced where it lies, not the link (a rename over the link would turn it into a
    // plain file).
    const fs::path real = fs::canonical(path, ec);
    if (!ec) target_ = real.string();
  } else {
    // Not there yet; a link to a file not yet there makes that file.
    fs::path p = path;
    for (int hop = 0; hop < 40 && fs::is_symlink(fs::symlink_status(p, ec)); ++hop) {
      const fs::path to = fs::read_symlink(p, ec);
      if (ec) break;
      p = to.is_absolute() ? to : p.parent_path() / to;
    }
    target_ = p.string();
  }
  // The temporary is created afresh (O_EXCL) after removing any left over: a PATH.tmp planted beforehand as a link in
  // a shared directory would otherwise be followed, and the file it names overwritten.
  tmp_ = target_ + ".tmp";
  ::unlink(tmp_.c_str());
  const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  ASCENT_CHECK(fd >= 0, "{}: cannot create: {}", tmp_, std::strerror(errno));
  f_ = ::fdopen(fd, "wb");
  if (f_ == nullptr) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    fail("{}: cannot create: {}", tmp_, std::strerror(err));
  }
}

AtomicFile::~AtomicFile() {
  if (f_ != nullptr) {
    std::fclose(f_);
    if (!tmp_.empty()) std::remove(tmp_.c_str());
  }
}

void AtomicFile::write(std::span<const char> bytes) {
  // An empty span's data() may be null, which fwrite must not be given even for no bytes.
  if (bytes.empty()) return;
  if (err_ == 0 && std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) err_ = errno != 0 ? errno : EIO;
}

void AtomicFile::commit() {
  if (std::fclose(f_) != 0 && err_ == 0) err_ = errno != 0 ? errno : EIO;
  f_ = nullptr;
  if (err_ != 0) {
    if (!tmp_.empty()) std::remove(tmp_.c_str());
    fail("{}: write failed: {}", path_, std::strerror(err_));
  }
  if (tmp_.empty()) return;
  std::error_code ec;
  fs::rename(tmp_, target_, ec);
  if (ec) {
    std::remove(tmp_.c_str());
    fail("{}: cannot rename from {}: {}", path_, tmp_, ec.message());
  }
}

void write_file_atomic(const std::string& path, std::span<const std::span<const char>> parts) {
  AtomicFile f(path);
  for (const auto& p : parts) f.write(p);
  f.commit();
}

}  // namespace ascent
