// `ascent`: the command-line front end. Subcommands live one per file; this file only dispatches and turns every
// error into one line on stderr and a non-zero exit code (1 for a failure, 2 for bad usage).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/cli/commands.h"
#include "ascent/tokenizer/utf8.h"

namespace ascent::cli {

std::vector<int32_t> parse_ids(const std::string& text, const char* flag) {
  std::vector<int32_t> ids;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(cur, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ASCENT_CHECK(used == cur.size() && v >= 0 && v <= INT32_MAX, "{}: '{}' is not a token id", flag, cur);
    ids.push_back(static_cast<int32_t>(v));
    cur.clear();
  };
  for (char c : text) {
    if (c == ' ' || c == ',' || c == '\t' || c == '\n') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  return ids;
}

void set_threads(int threads) {
  ASCENT_CHECK(threads >= 0, "-t: thread count must be >= 0, got {}", threads);
  // The pool's workers spin between calls, so threads beyond the CPUs only slow each other down: 16 on 2 CPUs run ~3x
  // slower, and -t 1000 does not finish a bench in minutes. Refused past 8 per CPU, and past llama.cpp's 512.
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int most = std::min(512, 8 * cpus);
  ASCENT_CHECK(threads <= most, "-t {}: at most {} threads on this machine's {} CPUs (8 per CPU, 512 in all)", threads,
               most, cpus);
  if (threads > 0) ThreadPool::set_global_threads(threads);
}

void check_ctx_flag(int64_t ctx, int64_t model_ctx) {
  ASCENT_CHECK(ctx <= model_ctx, "-c {}: more than the model's context of {} tokens", ctx, model_ctx);
}

void check_ids_in_vocab(std::span<const int32_t> ids, int64_t vocab, const char* flag) {
  for (int32_t id : ids) {
    ASCENT_CHECK(id >= 0 && id < vocab, "{}: token id {} is outside the vocabulary (size {})", flag, id, vocab);
  }
}

void check_output_name(const std::string& out, std::string_view ext) {
  ASCENT_CHECK(out.size() > ext.size() && out.ends_with(ext), "-o {}: the output name must end in {}", out, ext);
}

void check_output_folder(const std::string& out) {
  const std::filesystem::path dir = std::filesystem::path(out).parent_path().empty()
                                        ? std::filesystem::path(".")
                                        : std::filesystem::path(out).parent_path();
  std::error_code ec;
  ASCENT_CHECK(std::filesystem::is_directory(dir, ec), "-o {}: no folder {}", out, dir.string());
  ASCENT_CHECK(::access(dir.c_str(), W_OK) == 0, "-o {}: cannot write in {}: {}", out, dir.string(),
               std::strerror(errno));
}

// An error's text on one line of UTF-8. A control character from the input a message quotes (a token piece holding a
// newline, a corrupted tensor name) is written as an escape, so each error stays the one line scripts and tests read.
// So is a byte that is not UTF-8 (a corrupted header's bytes, quoted by the JSON parser's "last read"), which would
// otherwise reach the terminal or a log reader as a broken character.
std::string one_line(std::string_view what) {
  std::string out;
  out.reserve(what.size());
  for (size_t i = 0; i < what.size();) {
    const auto [cp, n] = tokenizer::char_at(what, i);
    const auto c = static_cast<unsigned char>(what[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (cp < 0 || c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.append(what.substr(i, n));
    }
    i += cp < 0 ? 1 : n;
  }
  return out;
}

}  // namespace ascent::cli

int main(int argc, char** argv) {
  CLI::App app{"ascent: train, compress and serve transformer language models"};
  app.require_subcommand(1);
  ascent::cli::add_generate(app);
  ascent::cli::add_info(app);
  ascent::cli::add_perplexity(app);
  ascent::cli::add_doctor(app);
  ascent::cli::add_convert(app);
  ascent::cli::add_tokenize(app);
  ascent::cli::add_logits(app);
  ascent::cli::add_chat_template(app);
  ascent::cli::add_profile(app);
  ascent::cli::add_bench(app);
  ascent::cli::add_quantize(app);
  ascent::cli::add_serve(app);
  ascent::cli::add_loadtest(app);
  ascent::cli::add_data(app);
  ascent::cli::add_train(app);
  // The first word that is not a flag names the subcommand (the app itself takes no option with a value). CLI11 reads
  // an unknown one as a stray argument: with --help it printed the general help and exited 0, without it said only
  // that a subcommand is required.
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word == "--") break;
    if (word.starts_with('-')) continue;
    if (app.get_subcommands([&](const CLI::App* c) { return c->get_name() == word; }).empty()) {
      std::string names;
      for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; })) {
        names += (names.empty() ? "" : ", ") + c->get_name();
      }
      std::fprintf(stderr, "ascent: error: unknown command '%s' (commands: %s)\n", ascent::cli::one_line(word).c_str(),
                   names.c_str());
      return 2;
    }
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ascent: error: %s\n", ascent::cli::one_line(e.what()).c_str());
    return 2;
  } catch (const ascent::Error& e) {
    std::fprintf(stderr, "ascent: error: %s\n", ascent::cli::one_line(e.what()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ascent: error: %s\n", ascent::cli::one_line(e.what()).c_str());
    return 1;
  }
  return 0;
}
