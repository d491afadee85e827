// `ascent`: the command-line front end. Subcommands live one per file; this file only dispatches and turns every
// error into one line on stderr and a non-zero exit code (1 for a failure, 2 for bad usage).
#include <cstdio>
#include <exception>

#include "ascent/base/error.h"
#include "ascent/base/thread_pool.h"
#include "ascent/cli/commands.h"

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
  if (threads > 0) ThreadPool::set_global_threads(threads);
}

void check_ctx_flag(int64_t ctx, int64_t model_ctx) {
  ASCENT_CHECK(ctx <= model_ctx, "-c {}: more than the model's context of {} tokens", ctx, model_ctx);
}

void check_output_name(const std::string& out, std::string_view ext) {
  ASCENT_CHECK(out.size() > ext.size() && out.ends_with(ext), "-o {}: the output name must end in {}", out, ext);
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ascent: error: %s\n", e.what());
    return 2;
  } catch (const ascent::Error& e) {
    std::fprintf(stderr, "ascent: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ascent: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
