// What every fuzz target shares: a scratch folder for readers that take a path, files read into exact heap copies
// (so AddressSanitizer sees a read past a file's end), and the rule that a clean ascent::Error is the expected
// outcome for bad bytes while any other exception, crash or sanitizer report is a bug.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>

#include "ascent/base/error.h"
#include "ascent/base/log.h"
#include "ascent/base/mapped_file.h"
#include "ascent/model/model.h"
#include "ascent/model/model_tokenizer.h"
#include "ascent/model/session.h"
#include "ascent/tokenizer/tokenizer.h"

namespace ascent::fuzz {

// This process's folder in /dev/shm (memory, not disk), made once and removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = (base / "ascent-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    static std::string removed;
    removed = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removed, ec);
    });
    return tmpl;
  }();
  return dir;
}

// Writes bytes to NAME in the scratch folder (replacing it) and returns its path.
inline std::string write_scratch(const std::string& name, std::span<const uint8_t> bytes) {
  const std::string path = scratch_dir() + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      std::perror(path.c_str());
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

inline std::string write_scratch(const std::string& name, const std::string& text) {
  return write_scratch(name, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

// Process set-up for LLVMFuzzerInitialize: exact heap copies of files, and only errors logged (a warning per
// input would drown the fuzzer's own output).
inline void init() {
  MappedFile::set_exact_copies(true);
  log::set_level(log::Level::Error);
}

// Runs fn; an ascent::Error is a clean refusal. Anything else propagates, and libFuzzer reports it as a crash.
template <class Fn>
bool refused(Fn&& fn) {
  try {
    fn();
    return false;
  } catch (const Error&) {
    return true;
  }
}

// What a prompt does with a loaded tokenizer: encode text (special tokens parsed and not, with the vocabulary's own
// BOS and suffix), then decode every id, as a whole and token by token.
inline void exercise_tokenizer(const tokenizer::Tokenizer& t) {
  static const std::string kText =
      "Once upon a time, <s> a little <|im_start|>girl\n\n  named \"Lily\" said: 42 -- caf\xc3\xa9 "
      "\xe4\xbd\xa0\xe5\xa5\xbd "
      "\xf0\x9f\xa6\x99 <0x41><|endoftext|></s>\t\r\n\xff\xc3 end";
  for (const bool special : {false, true}) {
    const std::vector<int32_t> ids = t.encode(kText, /*add_special=*/true, /*parse_special=*/special);
    (void)t.decode(ids);
    for (size_t i = 0; i < ids.size(); ++i) (void)t.decode_token(ids[i], /*strip_space=*/i == 0);
  }
}

// What `ascent generate` does with a model file: load it (every tensor's values checked too, --check-tensors), find
// its tokenizer where with_tokenizer, and run one token through the graph.
inline void load_and_run(const std::string& path, bool with_tokenizer) {
  std::unique_ptr<model::Model> m = model::Model::load(path, {.check_tensors = true});
  if (with_tokenizer) {
    refused([&] { exercise_tokenizer(*model::load_tokenizer(*m, "")); });
  }
  const model::ModelConfig& c = m->config();
  const int32_t token = c.bos_id >= 0 && c.bos_id < c.vocab ? c.bos_id : 0;
  model::Session s(*m);
  (void)s.forward(std::span(&token, 1), /*all_logits=*/false);
}

}  // namespace ascent::fuzz
