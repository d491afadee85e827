#include "ascent/model/quantize_model.h"

#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "ascent/base/error.h"
#include "ascent/base/log.h"
#include "ascent/base/read_file.h"
#include "ascent/model/ascent_file.h"
#include "ascent/model/check_weights.h"
#include "ascent/model/model_tokenizer.h"
#include "ascent/model/session.h"
#include "ascent/quant/awq.h"
#include "ascent/tensor/quantize.h"

namespace ascent::model {
namespace {

// One matrix's identity across the observer and the loop below: its bytes (shared by a tied model's two names).
const void* matrix_key(const Tensor& t) {
  return t.data;
}

namespace fs = std::filesystem;

// || W - Wq || / || W ||, a row at a time (no f32 copy of the whole matrix).
double weight_error(const Tensor& w, const Tensor& q) {
  std::vector<float> a(static_cast<size_t>(w.cols())), b(a.size());
  double num = 0.0, den = 0.0;
  for (int64_t r = 0; r < w.rows(); ++r) {
    row_to_f32(w, r, a.data());
    row_to_f32(q, r, b.data());
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = static_cast<double>(a[i]) - b[i];
      num += d * d;
      den += static_cast<double>(a[i]) * a[i];
    }
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The tokenizer file to embed: the explicit one, the HF folder's tokenizer.json, llama2.c's tokenizer.bin next to
// the model, or a vocabulary-only GGUF written from a GGUF model's metadata.
std::pair<std::string, std::string> tokenizer_blob(const Model& m, const std::string& explicit_path,
                                                   const std::string& out) {
  auto kind_of = [](const std::string& p) {
    return has_gguf_magic(p) ? "gguf" : fs::path(p).extension() == ".json" ? "tokenizer.json" : "tokenizer.bin";
  };
  if (!explicit_path.empty()) {
    std::string p = explicit_path;
    if (fs::is_directory(p)) p = (fs::path(p) / "tokenizer.json").string();
    return {read_file(p), kind_of(p)};
  }
  if (m.format() == Format::Ascent && !m.embedded_tokenizer().bytes.empty()) {
    const auto& e = m.embedded_tokenizer();
    return {std::string(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size()), e.kind};
  }
  if (m.format() == Format::HuggingFace) {
    const fs::path p = fs::path(m.weights().source()) / "tokenizer.json";
    if (fs::exists(p)) return {read_file(p.string()), "tokenizer.json"};
    // A folder with another vocabulary (GPT-2's encoder.json + vocab.bpe, a tokenizer.model): embedded as a
    // vocabulary-only GGUF in llama.cpp's keys, which every loader reads.
    const FoundVocab found = find_vocab({.format = m.format(),
                                         .path = m.path(),
                                         .source = m.weights().source(),
                                         .vocab_size = m.config().vocab,
                                         .gguf = nullptr,
                                         .embedded = nullptr},
                                        "");
    if (!found.from.empty()) {
      GgufWriter vw;
      add_gguf_vocab(vw, found, m.config().vocab, out);
      const std::string tmp = out + ".vocab.gguf";
      vw.write(tmp);
      std::string bytes = read_file(tmp);
      fs::remove(tmp);
      return {bytes, "gguf"};
    }
  }
  if (m.format() == Format::Llama2c) {
    const fs::path p = fs::path(m.path()).parent_path() / "tokenizer.bin";
    if (fs::exists(p)) return {read_file(p.string()), "tokenizer.bin"};
  }
  if (m.gguf() != nullptr && m.gguf()->find("tokenizer.ggml.model") != nullptr) {
    GgufWriter vw;
    for (const auto& [key, v] : m.gguf()->metadata()) {
      if (key.rfind("tokenizer.", 0) != 0) continue;
      vw.set_value(key, v);  // in its own type, as stored
    }
    const std::string tmp = out + ".vocab.gguf";
    vw.write(tmp);
    std::string bytes = read_file(tmp);
    fs::remove(tmp);
    return {bytes, "gguf"};
  }
  log::warn("{}: no tokenizer found to embed; the quantized model will need --tokenizer", m.path());
  return {};
}

}  // namespace

bool is_linear_weight(const std::string& name) {
  if (name == "output.weight") return true;
  for (const char* part : {".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_output.weight",
                           ".ffn_gate.weight", ".ffn_up.weight", ".ffn_down.weight"}) {
    const std::string p = part;
    if (name.size() > p.size() && name.compare(name.size() - p.size(), p.size(), p) == 0) return true;
  }
  return false;
}

void check_quantize_options(const QuantizeOptions& opt) {
  ASCENT_CHECK(opt.type == "int8" || opt.type == "int4" || opt.type == "bf16", "--type {}: expected int8, int4 or bf16",
               opt.type);
  if (opt.type == "int4") with_context("--group", [&] { check_int4_group(opt.group); });
  ASCENT_CHECK(opt.calib_path.empty() || opt.type == "int4",
               "--calib: activation-aware calibration applies to --type int4 only");
  // Zero tokens would quietly fall back to round to nearest, which is not what --calib asked for.
  ASCENT_CHECK(opt.calib_path.empty() || opt.calib_tokens >= 1, "--calib-tokens {}: calibration needs at least 1",
               opt.calib_tokens);
  if (!opt.calib_path.empty()) {
    std::error_code ec;
    ASCENT_CHECK(fs::is_regular_file(opt.calib_path, ec), "{}: cannot read calibration text", opt.calib_path);
  }
}

void quantize_model(Model& m, const QuantizeOptions& opt, const std::string& out,
                    const std::function<void(const LayerReport&)>& report) {
  check_quantize_options(opt);

  // Calibration: run the text through the model and keep each linear layer's input rows.
  std::map<const void*, quant::CalibRows> calib;
  if (!opt.calib_path.empty()) {
    const std::string text = read_file(opt.calib_path);
    auto tok = load_tokenizer(m, opt.tokenizer_path);
    std::vector<int32_t> ids = tok->encode(text, /*add_special=*/false);
    ASCENT_CHECK(!ids.empty(), "{}: calibration text is empty", opt.calib_path);
    if (static_cast<int64_t>(ids.size()) > opt.calib_tokens) ids.resize(static_cast<size_t>(opt.calib_tokens));
    Session s(m);
    s.set_matmul_observer(
        [&](const Tensor& w, const float* x, int64_t rows) { calib[matrix_key(w)].add(x, rows, w.shape[1]); });
    const int64_t chunk = std::min<int64_t>(s.context(), 256);
    for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(chunk)) {
      s.reset();
      const size_t n = std::min(ids.size() - i, static_cast<size_t>(chunk));
      s.forward(std::span<const int32_t>(ids.data() + i, n), /*all_logits=*/true);
    }
  }

  WeightSet q(m.weights().source());
  std::set<std::string_view> requantized;  // the rounded source types rounded again into int8/int4
  // The source is finite (the CLI loads it with check_tensors), but a value past 65504 becomes an infinity in an f16
  // embedding, and calibration's activations could overflow into an input scale: nothing that is not finite is
  // written.
  auto checked = [&](const std::string& name, Tensor t) {
    if (const auto bad = first_nonfinite(t)) {
      fail("{}: tensor {}: {} once stored as {} (the source holds a value past its range)", out, name, *bad,
           dtype_name(t.dtype));
    }
    return t;
  };
  for (const auto& [name, t] : m.weights().all()) {
    const std::string& file = m.weights().file_of(name);
    if (t.shape.size() != 2) {
      q.add(name, t.dtype == DType::F32 ? t : to_f32(t), file);
      continue;
    }
    if (!is_linear_weight(name)) {  // embeddings: looked up, not multiplied
      const DType target = opt.type == "bf16" ? DType::BF16 : DType::F16;
      q.add(name, checked(name, t.dtype == target ? t : convert(t, target)), file);
      continue;
    }
    if (opt.type != "bf16" && is_rounded(t.dtype)) requantized.insert(dtype_name(t.dtype));
    LayerReport r;
    r.name = name;
    r.shape = t.shape;
    Tensor qt;
    if (opt.type == "bf16") {
      qt = convert(t, DType::BF16);
      r.format = "bf16";
    } else if (opt.type == "int8") {
      qt = quantize_int8(t);
      r.format = "int8";
    } else {
      r.format = "int4 g" + std::to_string(opt.group);
      auto it = calib.find(matrix_key(t));
      if (it != calib.end() && it->second.rows() > 0) {
        quant::AwqResult a = quant::awq_int4(t, opt.group, it->second);
        qt = a.q;
        r.out_err_rtn = std::sqrt(a.err_rtn);
        r.out_err = std::sqrt(a.err_final);
        r.alpha = a.alpha;
      } else {
        qt = quantize_int4(t, opt.group);
      }
    }
    r.weight_err = weight_error(t, qt);
    q.add(name, checked(name, qt), file);
    report(r);
  }
  // As convert says it (llama.cpp's quantize asks --allow-requantize): the weight errors above are against the
  // already rounded matrices, not the original model's.
  if (!requantized.empty()) {
    log::warn(
        "{}: {} matrices requantized to {}: their rounding compounds, and the errors above are against them, "
        "not the original weights; quantize the original model for the best copy",
        out, fmt::join(requantized, ", "), opt.type);
  }
  const auto [tok_bytes, tok_kind] = tokenizer_blob(m, opt.tokenizer_path, out);
  write_ascent_model(m.config(), q, opt.type, std::span<const char>(tok_bytes.data(), tok_bytes.size()), tok_kind, out);
}

}  // namespace ascent::model
