// ascent chat-template: renders a model's chat template for a conversation, exactly as the model will see it.
#include <cstdio>
#include <filesystem>

#include "ascent/base/error.h"
#include "ascent/base/json_file.h"
#include "ascent/cli/commands.h"
#include "ascent/tokenizer/chat_template.h"

namespace ascent::cli {
namespace {

void run(const std::string& config, const std::string& context_path, bool gen_prompt) {
  std::string cfg = config;
  if (std::filesystem::is_directory(cfg)) cfg = (std::filesystem::path(cfg) / "tokenizer_config.json").string();
  const auto tmpl = tokenizer::ChatTemplate::from_tokenizer_config(cfg);
  nlohmann::ordered_json ctx = read_json_file<nlohmann::ordered_json>(context_path);
  if (ctx.is_array()) ctx = nlohmann::ordered_json{{"messages", ctx}};
  if (gen_prompt) ctx["add_generation_prompt"] = true;
  // A rendering error's template line is in cfg's template; the context is what it was rendering.
  const std::string out = with_context(cfg + " (rendering " + context_path + ")", [&] { return tmpl.render(ctx); });
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

void add_chat_template(CLI::App& app) {
  auto config = std::make_shared<std::string>();
  auto context = std::make_shared<std::string>();
  auto gen = std::make_shared<bool>(false);
  auto* c = app.add_subcommand("chat-template", "render a chat template for a conversation");
  c->add_option("--config", *config, "tokenizer_config.json, or the model folder holding it")->required();
  c->add_option(
       "--context", *context,
       "a JSON file: a messages list, or {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": ...}")
      ->required();
  c->add_flag("--add-generation-prompt", *gen, "end with the assistant's turn header");
  c->callback([config, context, gen] { run(*config, *context, *gen); });
}

}  // namespace ascent::cli
