// One function per `ascent` subcommand; each registers its flags on the app and runs when selected.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ascent::cli {

// What every subcommand's -m,--model takes: each format model/loaders.h reads.
inline constexpr const char* kModelHelp = "HF folder, .gguf, llama2.c .bin or Ascent .safetensors";

void add_generate(CLI::App& app);
void add_info(CLI::App& app);
void add_perplexity(CLI::App& app);
void add_doctor(CLI::App& app);
void add_convert(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_logits(CLI::App& app);
void add_chat_template(CLI::App& app);
void add_profile(CLI::App& app);
void add_bench(CLI::App& app);
void add_quantize(CLI::App& app);
void add_serve(CLI::App& app);
void add_loadtest(CLI::App& app);
void add_data(CLI::App& app);  // `data prepare`
void add_train(CLI::App& app);

// Parses "1 2 3" (spaces or commas) into ids; throws naming the flag on anything else.
std::vector<int32_t> parse_ids(const std::string& text, const char* flag);
// Refuses ids at or past the model's vocabulary size, naming the flag, before any runs.
void check_ids_in_vocab(std::span<const int32_t> ids, int64_t vocab, const char* flag);
// Sets the kernel thread count (-t); 0 means all cores.
void set_threads(int threads);
// Refuses a -c given past the model's context of model_ctx positions, which would otherwise be cut to it: a run
// then never reports on windows or contexts other than the ones asked for.
void check_ctx_flag(int64_t ctx, int64_t model_ctx);
// Refuses an -o whose name does not end in ext (".gguf", ".safetensors"): a file under another name would later be
// taken for another format.
void check_output_name(const std::string& out, std::string_view ext);
// Refuses an -o whose folder does not exist or cannot be written, before any work: the writer found out only at the
// end (quantize, convert and logits after loading and computing everything).
void check_output_folder(const std::string& out);

}  // namespace ascent::cli
