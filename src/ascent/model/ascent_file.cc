#include "ascent/model/ascent_file.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <vector>

#include "ascent/base/atomic_write.h"
#include "ascent/base/error.h"
#include "ascent/base/json_number.h"
#include "ascent/base/mapped_file.h"
#include "ascent/model/safetensors.h"
#include "ascent/tensor/quantize.h"

namespace ascent::model {
namespace {

using nlohmann::json;

// Version 2: int4 codes and scales in blocks of 16 rows (dtype.h). Version 1 files load unless they hold int4.
constexpr int kVersion = 2;

// The shape of an I8/I4 matrix's code entry: (N, row bytes) for I8; for I4 (blocks of 16 rows, bytes per block).
Shape int_codes_shape(DType t, int64_t N, int64_t K) {
  if (t == DType::I8) return {N, row_bytes(t, K)};
  return {int4_stored_rows(N) / kInt4Rows, kInt4Rows * row_bytes(t, K)};
}

json config_json(const ModelConfig& c) {
  json j;
  j["arch"] = arch_name(c.arch);
  j["vocab"] = c.vocab;
  j["dim"] = c.dim;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["n_kv_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["ffn_dim"] = c.ffn_dim;
  j["max_seq"] = c.max_seq;
  j["norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_style"] = c.rope_style == RopeStyle::Half ? "half" : "interleaved";
  j["rope_scaling"] = {{"enabled", c.rope_scaling.enabled},
                       {"factor", c.rope_scaling.factor},
                       {"low_freq_factor", c.rope_scaling.low_freq_factor},
                       {"high_freq_factor", c.rope_scaling.high_freq_factor},
                       {"original_max_position", c.rope_scaling.original_max_position}};
  j["sliding_window"] = c.sliding_window;
  j["sliding_from_layer"] = c.sliding_from_layer;
  j["rope_freq_factors"] = c.rope_freq_factors;
  j["tied_embeddings"] = c.tied_embeddings;
  j["bos_id"] = c.bos_id;
  j["eos_id"] = c.eos_id;
  j["end_ids"] = c.end_ids;
  return j;
}

ModelConfig config_from_json(const json& j) {
  ModelConfig c;
  const std::string arch = j.at("arch").get<std::string>();
  bool found = false;
  for (Arch a : {Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3, Arch::Gpt2}) {
    if (arch == arch_name(a)) {
      c.arch = a;
      found = true;
    }
  }
  ASCENT_CHECK(found, "unknown architecture '{}'", arch);
  c.vocab = json_int(j.at("vocab"), "vocab");
  c.dim = json_int(j.at("dim"), "dim");
  c.n_layers = json_int(j.at("n_layers"), "n_layers");
  c.n_heads = json_int(j.at("n_heads"), "n_heads");
  c.n_kv_heads = json_int(j.at("n_kv_heads"), "n_kv_heads");
  c.head_dim = json_int(j.at("head_dim"), "head_dim");
  c.ffn_dim = json_int(j.at("ffn_dim"), "ffn_dim");
  c.max_seq = json_int(j.at("max_seq"), "max_seq");
  c.norm_eps = j.at("norm_eps").get<float>();
  c.rope_theta = j.at("rope_theta").get<double>();
  c.rope_style = j.at("rope_style").get<std::string>() == "half" ? RopeStyle::Half : RopeStyle::Interleaved;
  const json& rs = j.at("rope_scaling");
  c.rope_scaling.enabled = rs.at("enabled").get<bool>();
  c.rope_scaling.factor = rs.at("factor").get<double>();
  c.rope_scaling.low_freq_factor = rs.at("low_freq_factor").get<double>();
  c.rope_scaling.high_freq_factor = rs.at("high_freq_factor").get<double>();
  c.rope_scaling.original_max_position = rs.at("original_max_position").get<double>();
  c.sliding_window = json_int(j.at("sliding_window"), "sliding_window");
  // Absent from files written before it existed.
  if (j.contains("sliding_from_layer"))
    c.sliding_from_layer = json_int(j.at("sliding_from_layer"), "sliding_from_layer");
  c.rope_freq_factors = j.at("rope_freq_factors").get<std::vector<float>>();
  c.tied_embeddings = j.at("tied_embeddings").get<bool>();
  c.bos_id = json_int32(j.at("bos_id"), "bos_id");
  c.eos_id = json_int32(j.at("eos_id"), "eos_id");
  // Absent from files written before it existed.
  if (j.contains("end_ids")) {
    ASCENT_CHECK(j.at("end_ids").is_array(), "end_ids must be a list of token ids, got {}", j.at("end_ids").dump());
    for (const json& id : j.at("end_ids")) c.end_ids.push_back(json_int32(id, "end_ids"));
  }
  return c;
}

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    default:
      return "U8";
  }
}

struct Entry {
  std::string name;
  std::string dtype;
  Shape shape;
  std::span<const char> bytes;
};

}  // namespace

bool is_ascent_file(const std::string& path) {
  // A header that cannot be read is reported here, naming the file, rather than the file being taken for one of a
  // Hugging Face folder's (whose reader would then report the folder's missing config.json).
  const json h = read_safetensors_header(path);
  if (!h.contains("__metadata__") || !h["__metadata__"].is_object()) return false;
  const json& m = h["__metadata__"];
  return m.contains("format") && m["format"] == "ascent";
}

void write_ascent_model(const ModelConfig& cfg, const WeightSet& w, const std::string& quant,
                        std::span<const char> tokenizer, const std::string& tokenizer_kind, const std::string& path) {
  std::vector<Entry> entries;
  json tensors = json::object();
  for (const auto& [name, t] : w.all()) {
    const auto* data = static_cast<const char*>(t.data);
    if (is_int_weight(t.dtype)) {
      ASCENT_CHECK(t.shape.size() == 2, "{}: {} tensors must be 2-D", name, dtype_name(t.dtype));
      const int64_t N = t.shape[0], K = t.shape[1];
      entries.push_back({name, "U8", int_codes_shape(t.dtype, N, K), {data, static_cast<size_t>(t.nbytes())}});
      const int64_t ns = int_weight_scale_count(t.dtype, N, K, t.group);
      const int64_t blocks = int4_stored_rows(N) / kInt4Rows;
      const Shape sshape = t.dtype == DType::I8 ? Shape{N} : Shape{blocks, ns / (blocks * kInt4Rows), kInt4Rows};
      entries.push_back(
          {name + ".scale", "F32", sshape, {reinterpret_cast<const char*>(t.scales), static_cast<size_t>(ns * 4)}});
      if (t.input_scale != nullptr) {
        entries.push_back({name + ".input_scale",
                           "F32",
                           {K},
                           {reinterpret_cast<const char*>(t.input_scale), static_cast<size_t>(K * 4)}});
      }
      tensors[name] = {{"type", std::string(dtype_name(t.dtype))}, {"shape", t.shape}, {"group", t.group}};
    } else {
      ASCENT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
                   "{}: {} tensors cannot be stored in an Ascent file", name, dtype_name(t.dtype));
      entries.push_back({name, st_dtype(t.dtype), t.shape, {data, static_cast<size_t>(t.nbytes())}});
    }
  }
  if (!tokenizer.empty()) {
    entries.push_back({"ascent.tokenizer", "U8", {static_cast<int64_t>(tokenizer.size())}, tokenizer});
  }
  json header = json::object();
  header["__metadata__"] = {{"format", "ascent"},
                            {"ascent.version", std::to_string(kVersion)},
                            {"ascent.config", config_json(cfg).dump()},
                            {"ascent.quant", quant},
                            {"ascent.tensors", tensors.dump()},
                            {"ascent.tokenizer_kind", tokenizer.empty() ? "" : tokenizer_kind}};
  // Tensor data aligned to 64 bytes so every row can be read in place with aligned vector loads.
  uint64_t offset = 0;
  std::vector<uint64_t> begin;
  for (const auto& e : entries) {
    offset = (offset + 63) / 64 * 64;
    begin.push_back(offset);
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string text = header.dump();
  // The data section starts at 8 + header length: pad the header with spaces so that it is 64-byte aligned.
  text.append((64 - (8 + text.size()) % 64) % 64, ' ');
  const uint64_t len = text.size();
  static const std::vector<char> zeros(64, 0);
  std::vector<std::span<const char>> parts{{reinterpret_cast<const char*>(&len), 8}, {text.data(), text.size()}};
  uint64_t at = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    parts.emplace_back(zeros.data(), static_cast<size_t>(begin[i] - at));
    parts.push_back(entries[i].bytes);
    at = begin[i] + entries[i].bytes.size();
  }
  write_file_atomic(path, parts);
}

AscentFileInfo read_ascent_model(const std::string& path, ModelConfig& cfg, WeightSet& w,
                                 std::span<const uint8_t>& tokenizer) {
  auto file = std::make_shared<MappedFile>(path);
  const SafetensorsLayout layout = parse_safetensors(path, file->bytes());
  const json& header = layout.header;
  const uint8_t* data = layout.data;
  const uint64_t data_size = layout.data_size;
  AscentFileInfo info;
  json tensors;
  int version = kVersion;
  std::string field = "__metadata__";
  try {
    const json& meta = header.at("__metadata__");
    field = "ascent.version";
    const std::string v = meta.at(field).get<std::string>();
    ASCENT_CHECK(v == "1" || v == std::to_string(kVersion), "unsupported version {} (this build reads 1 and {})",
                 meta.at(field).dump(), kVersion);
    version = std::stoi(v);
    field = "ascent.config";
    cfg = config_from_json(json::parse(meta.at(field).get<std::string>()));
    field = "ascent.quant";
    info.quant = meta.at(field).get<std::string>();
    ASCENT_CHECK(info.quant == "int8" || info.quant == "int4" || info.quant == "bf16", "'{}' is not int8, int4 or bf16",
                 info.quant);
    field = "ascent.tokenizer_kind";
    info.tokenizer_kind = meta.at(field).get<std::string>();
    // The loader picks the tokenizer's reader by this name: an unknown one would be read as the wrong format.
    ASCENT_CHECK(info.tokenizer_kind.empty() || info.tokenizer_kind == "tokenizer.json" ||
                     info.tokenizer_kind == "tokenizer.bin" || info.tokenizer_kind == "gguf",
                 "'{}' is not tokenizer.json, tokenizer.bin, gguf or empty", info.tokenizer_kind);
    field = "ascent.tensors";
    tensors = json::parse(meta.at(field).get<std::string>());
    ASCENT_CHECK(tensors.is_object(), "expected a JSON object of tensors, got {}", tensors.type_name());
  } catch (const json::exception& e) {
    fail("{}: metadata {}: {}", path, field, e.what());
  } catch (const Error& e) {
    fail("{}: metadata {}: {}", path, field, e.what());
  }
  validate_config(cfg, path);
  // As the other readers check theirs: an end id outside the vocabulary never matched, without a word. (-1: none.)
  for (const auto& [id, field] : {std::pair{cfg.bos_id, "metadata ascent.config: bos_id"},
                                  std::pair{cfg.eos_id, "metadata ascent.config: eos_id"}}) {
    if (id != -1) check_token_id(cfg, id, field, path);
  }
  for (int32_t id : cfg.end_ids) check_token_id(cfg, id, "metadata ascent.config: end_ids", path);

  // Every entry as raw bytes, checked against the data section.
  struct Raw {
    std::string dtype;
    Shape shape;
    const uint8_t* p;
    uint64_t size;
  };
  std::map<std::string, Raw> raw;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      Raw r;
      r.dtype = e.at("dtype").get<std::string>();
      for (const auto& d : e.at("shape")) {
        const int64_t v = json_int(d, "shape");
        // A weight has elements in every dimension: a 0 (a damaged file's (64, 0)) reached Tensor::rows(), which
        // divides by the last one.
        ASCENT_CHECK(v > 0, "dimension {} is not positive", v);
        r.shape.push_back(v);
      }
      const auto& off = e.at("data_offsets");
      ASCENT_CHECK(off.is_array() && off.size() == 2, "data_offsets must be [begin, end]");
      const uint64_t b = json_uint(off[0], "data_offsets"), end = json_uint(off[1], "data_offsets");
      ASCENT_CHECK(b <= end && end <= data_size, "data [{}, {}] lies outside the file's {} data bytes", b, end,
                   data_size);
      const int64_t elem = r.dtype == "F32" ? 4 : (r.dtype == "F16" || r.dtype == "BF16") ? 2 : r.dtype == "U8" ? 1 : 0;
      ASCENT_CHECK(elem > 0, "unsupported dtype {}", r.dtype);
      const int64_t n = numel(r.shape);  // throws past int64
      ASCENT_CHECK(n <= static_cast<int64_t>(data_size) / elem && static_cast<uint64_t>(n * elem) == end - b,
                   "shape {} of {} needs {} elements of {} bytes, has {} bytes", shape_str(r.shape), r.dtype, n, elem,
                   end - b);
      ASCENT_CHECK(reinterpret_cast<uintptr_t>(data + b) % static_cast<uintptr_t>(elem) == 0,
                   "data offset {} is not aligned to its element size", b);
      r.p = data + b;
      r.size = end - b;
      raw[name] = r;
    } catch (const json::exception& ex) {
      fail("{}: tensor {}: bad header JSON: {}", path, name, ex.what());
    } catch (const Error& ex) {
      fail("{}: tensor {}: {}", path, name, ex.what());
    }
  }
  auto take = [&](const std::string& name) -> const Raw& {
    auto it = raw.find(name);
    ASCENT_CHECK(it != raw.end(), "{}: tensor {} is missing", path, name);
    return it->second;
  };

  std::map<std::string, bool> part_of_int;
  for (const auto& [name, d] : tensors.items()) {
    const char* key = "";  // the entry's field being read, for a JSON error
    try {
      key = "type";
      const std::string type = d.at(key).get<std::string>();
      key = "shape";
      Shape shape;
      for (const json& v : d.at(key)) shape.push_back(json_int(v, key));
      // Read wide and checked before it narrows, so that a corrupted size is reported as written (read as an int, 10^12
      // would come out as -727379968 in the error).
      key = "group";
      const int64_t group = json_int(d.at(key), key);
      key = "";
      ASCENT_CHECK(type == "int8" || type == "int4", "type '{}' is not int8 or int4", type);
      // quantize writes every linear layer in the file's one format, so a mixed file is a corrupted one.
      ASCENT_CHECK(type == info.quant, "type {} in a file whose ascent.quant is {}", type, info.quant);
      // Below 2^31 as every model dimension is (validate_config): the padded sizes and scale counts computed from
      // them then fit int64 (a row count near 2^63 overflowed rounding up to 16 rows).
      constexpr int64_t kMaxDim = int64_t{1} << 31;
      ASCENT_CHECK(shape.size() == 2 && shape[0] > 0 && shape[1] > 0 && shape[0] < kMaxDim && shape[1] < kMaxDim,
                   "shape {} is not a matrix of 1 to 2^31 - 1 rows and columns", shape_str(shape));
      const DType dt = type == "int8" ? DType::I8 : DType::I4;
      const int64_t N = shape[0], K = shape[1];
      if (dt == DType::I4) check_int4_group(group);
      // quantize writes 0 for int8 (one scale per row); another value is a damaged field, refused rather than ignored.
      ASCENT_CHECK(dt == DType::I4 || group == 0, "group {} for an int8 tensor (one scale per row: 0)", group);
      Tensor t;
      t.dtype = dt;
      t.shape = shape;
      t.group = dt == DType::I4 ? static_cast<int>(group) : 0;
      ASCENT_CHECK(dt != DType::I4 || version >= 2,
                   "int4 tensor in a version {} file: int4 is laid out in blocks of 16 rows since version 2; quantize "
                   "the model again with this build",
                   version);
      const Raw& q = take(name);
      const Shape qshape = int_codes_shape(dt, N, K);
      ASCENT_CHECK(q.dtype == "U8" && q.shape == qshape, "codes are {} {}, expected U8 {}", q.dtype, shape_str(q.shape),
                   shape_str(qshape));
      const Raw& s = take(name + ".scale");
      const int64_t ns = int_weight_scale_count(dt, N, K, t.group);
      ASCENT_CHECK(s.dtype == "F32" && numel(s.shape) == ns, "{}.scale is {} {}, expected F32 with {} values", name,
                   s.dtype, shape_str(s.shape), ns);
      t.data = q.p;
      t.scales = reinterpret_cast<const float*>(s.p);
      part_of_int[name] = part_of_int[name + ".scale"] = true;
      if (auto it = raw.find(name + ".input_scale"); it != raw.end()) {
        ASCENT_CHECK(it->second.dtype == "F32" && numel(it->second.shape) == K,
                     "{}.input_scale is {} {}, expected F32 ({},)", name, it->second.dtype, shape_str(it->second.shape),
                     K);
        t.input_scale = reinterpret_cast<const float*>(it->second.p);
        part_of_int[name + ".input_scale"] = true;
      }
      w.add(name, t, path);
    } catch (const json::exception& ex) {
      fail("{}: metadata ascent.tensors: {}{}{}: {}", path, name, *key != 0 ? "." : "", key, ex.what());
    } catch (const Error& ex) {
      if (std::strncmp(ex.what(), path.c_str(), path.size()) == 0) throw;
      fail("{}: tensor {}: {}", path, name, ex.what());
    }
  }
  for (const auto& [name, r] : raw) {
    if (part_of_int.count(name) != 0) continue;
    if (name == "ascent.tokenizer") {
      tokenizer = {r.p, static_cast<size_t>(r.size)};
      continue;
    }
    Tensor t;
    if (r.dtype == "F32") {
      t.dtype = DType::F32;
    } else if (r.dtype == "F16") {
      t.dtype = DType::F16;
    } else if (r.dtype == "BF16") {
      t.dtype = DType::BF16;
    } else {
      fail("{}: tensor {}: U8 data not listed in ascent.tensors", path, name);
    }
    t.shape = r.shape;
    t.data = r.p;
    w.add(name, t, path);
  }
  ASCENT_CHECK(info.tokenizer_kind.empty() || !tokenizer.empty(),
               "{}: metadata says tokenizer {} but tensor ascent.tokenizer is missing", path, info.tokenizer_kind);
  w.keep_file(file);
  return info;
}

}  // namespace ascent::model
