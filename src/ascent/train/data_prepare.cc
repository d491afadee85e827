#include "ascent/train/data_prepare.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "ascent/base/atomic_write.h"
#include "ascent/base/error.h"
#include "ascent/base/mapped_file.h"
#include "ascent/model/model_tokenizer.h"
#include "ascent/tokenizer/tokenizer.h"
#include "ascent/tokenizer/utf8.h"
#include "ascent/train/dataset.h"

namespace ascent::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSplitNames[2] = {"train", "val"};
// Documents are handed to workers in chunks of about this much text: large enough that a chunk's hand-off costs
// nothing next to encoding it, small enough for a smooth progress bar and little memory per chunk in flight.
constexpr uint64_t kChunkBytes = 256 * 1024;

bool blank_line(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

struct Doc {
  uint32_t file;
  int64_t line;
  std::string_view text;
  int split = 0;  // 0 train, 1 val
};

struct Chunk {
  size_t first = 0, end = 0;  // documents [first, end)
  uint64_t bytes = 0;
  std::vector<int32_t> ids[2];
  std::vector<int64_t> lengths[2];  // tokens per document, in order
  bool done = false;
};

// Refuses bytes that are not UTF-8, naming the file and line: a binary file passed by mistake would otherwise become
// byte-fallback tokens without a word.
void check_utf8(const Doc& d, const std::string& path) {
  const std::string_view s = d.text;
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const auto [cp, n] = tokenizer::char_at(s, i);
    if (cp < 0) {
      const auto line = d.line + std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(i), '\n');
      fail("{}:{}: not UTF-8 text (byte 0x{:02x})", path, line, static_cast<unsigned char>(s[i]));
    }
    i += n;
  }
}

// Which documents go to val: round(fraction * n) of them, at least one when fraction > 0 and n >= 2, never all,
// drawn by a seeded Fisher-Yates shuffle of the document numbers.
void assign_splits(std::vector<Doc>& docs, double fraction, uint64_t seed) {
  const auto n = static_cast<int64_t>(docs.size());
  if (fraction <= 0 || n < 2) return;
  const int64_t k = std::clamp<int64_t>(std::llround(fraction * static_cast<double>(n)), 1, n - 1);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  // A stream apart from the samplers' (their seeds mix in the epoch), so one --seed serves both without correlation.
  std::mt19937_64 rng(seed ^ 0x6a09e667f3bcc909ull);
  for (uint64_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[uniform_below(rng, i + 1)]);
  for (int64_t i = 0; i < k; ++i) docs[static_cast<size_t>(order[static_cast<size_t>(i)])].split = 1;
}

void prepare_out_folder(const std::string& out) {
  ASCENT_CHECK(!out.empty(), "--out: no folder given");
  std::error_code ec;
  if (fs::exists(out, ec)) {
    ASCENT_CHECK(fs::is_directory(out, ec), "--out {}: exists and is not a folder", out);
  } else {
    fs::create_directories(out, ec);
    ASCENT_CHECK(!ec, "--out {}: cannot create: {}", out, ec.message());
  }
  ASCENT_CHECK(::access(out.c_str(), W_OK) == 0, "--out {}: cannot write in it: {}", out, std::strerror(errno));
  // An index.json left from an earlier run would describe token files this run is about to replace.
  const fs::path index = fs::path(out) / "index.json";
  fs::remove(index, ec);
  ASCENT_CHECK(!ec, "{}: cannot remove the old index: {}", index.string(), ec.message());
}

// Joins the workers however the writing thread leaves (an error while writing included).
struct Workers {
  std::vector<std::thread> threads;
  std::function<void()> stop;
  ~Workers() {
    if (stop) stop();
    for (auto& t : threads) t.join();
  }
};

}  // namespace

std::vector<TextSpan> split_documents(std::string_view text) {
  std::vector<TextSpan> docs;
  size_t doc_start = std::string_view::npos, doc_end = 0;
  int64_t doc_line = 0, line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    ++line_no;
    const std::string_view line = text.substr(pos, eol - pos);
    if (blank_line(line)) {
      if (doc_start != std::string_view::npos) docs.push_back({text.substr(doc_start, doc_end - doc_start), doc_line});
      doc_start = std::string_view::npos;
    } else {
      if (doc_start == std::string_view::npos) {
        doc_start = pos;
        doc_line = line_no;
      }
      doc_end = line.ends_with('\r') ? eol - 1 : eol;
    }
    pos = eol + 1;
  }
  if (doc_start != std::string_view::npos) docs.push_back({text.substr(doc_start, doc_end - doc_start), doc_line});
  return docs;
}

PrepareResult prepare_data(const PrepareOptions& o, const std::function<void(const PrepareProgress&)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  ASCENT_CHECK(!o.inputs.empty(), "--input: no files given");
  ASCENT_CHECK(std::isfinite(o.val_fraction) && o.val_fraction >= 0 && o.val_fraction < 1,
               "--val-fraction {}: must be in [0, 1)", o.val_fraction);
  ASCENT_CHECK(o.workers >= 1 && o.workers <= 256, "--workers {}: must be in [1, 256]", o.workers);
  ASCENT_CHECK(!o.tokenizer.empty(), "--tokenizer: no file or folder given");

  const tokenizer::Vocab vocab = with_context("--tokenizer " + o.tokenizer, [&] {
    tokenizer::Vocab v = model::load_vocab(o.tokenizer, 0);
    ASCENT_CHECK(!v.pieces.empty(), "the vocabulary is empty");
    ASCENT_CHECK(v.eos_id >= 0 && v.eos_id < static_cast<int32_t>(v.pieces.size()),
                 "the vocabulary has no EOS token, which ends each document");
    return v;
  });
  // Built before any output, for its own checks (the pre-split regex compiles); the first worker then uses it.
  auto first_tokenizer =
      with_context("--tokenizer " + o.tokenizer, [&] { return std::make_unique<tokenizer::Tokenizer>(vocab); });
  const auto n_vocab = static_cast<int64_t>(vocab.pieces.size());
  const bool narrow = n_vocab <= 65536;
  const bool bos = vocab.add_bos && vocab.bos_id >= 0;

  // Inputs, mapped, and their documents.
  std::vector<std::unique_ptr<MappedFile>> files;
  std::vector<Doc> docs;
  std::vector<int64_t> docs_per_file;
  uint64_t total_bytes = 0;
  for (size_t f = 0; f < o.inputs.size(); ++f) {
    files.push_back(std::make_unique<MappedFile>(o.inputs[f]));
    const std::string_view text(reinterpret_cast<const char*>(files.back()->bytes().data()), files.back()->size());
    const std::vector<TextSpan> spans = split_documents(text);
    ASCENT_CHECK(!spans.empty(), "{}: holds no text (only blank lines)", o.inputs[f]);
    for (const TextSpan& s : spans) {
      docs.push_back({static_cast<uint32_t>(f), s.line, s.text});
      total_bytes += s.text.size();
    }
    docs_per_file.push_back(static_cast<int64_t>(spans.size()));
  }
  assign_splits(docs, o.val_fraction, o.seed);

  std::vector<Chunk> chunks;
  for (size_t d = 0; d < docs.size();) {
    Chunk c;
    c.first = d;
    while (d < docs.size() && (c.bytes < kChunkBytes || d == c.first)) c.bytes += docs[d++].text.size();
    c.end = d;
    chunks.push_back(std::move(c));
  }

  prepare_out_folder(o.out);
  const fs::path out(o.out);
  std::unique_ptr<AtomicFile> bin[2], idx[2];
  for (int s = 0; s < 2; ++s) {
    bin[s] = std::make_unique<AtomicFile>((out / (std::string(kSplitNames[s]) + ".bin")).string());
    idx[s] = std::make_unique<AtomicFile>((out / (std::string(kSplitNames[s]) + ".idx")).string());
  }

  // Workers encode chunks in any order, each with its own Tokenizer (encode fills a cache, so one is not shared);
  // this thread writes them in order. A worker stays at most `window` chunks ahead of the writer, so memory holds a
  // few chunks' tokens whatever the input's size.
  const size_t window = 4 * static_cast<size_t>(o.workers);
  std::mutex mu;
  std::condition_variable cv;
  size_t next_chunk = 0, written = 0;
  bool stop = false;
  std::exception_ptr error;
  Workers workers;
  workers.stop = [&] {
    std::lock_guard lock(mu);
    stop = true;
    cv.notify_all();
  };
  auto work = [&](int w) {
    try {
      const std::unique_ptr<tokenizer::Tokenizer> own =
          w == 0 ? std::move(first_tokenizer) : std::make_unique<tokenizer::Tokenizer>(vocab);
      const tokenizer::Tokenizer& tok = *own;
      for (;;) {
        size_t c = 0;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return stop || next_chunk >= chunks.size() || next_chunk < written + window; });
          if (stop || next_chunk >= chunks.size()) return;
          c = next_chunk++;
        }
        Chunk& ch = chunks[c];  // this worker's alone until done is set
        for (size_t d = ch.first; d < ch.end; ++d) {
          const Doc& doc = docs[d];
          check_utf8(doc, o.inputs[doc.file]);
          std::vector<int32_t>& ids = ch.ids[doc.split];
          const size_t before = ids.size();
          if (bos) ids.push_back(vocab.bos_id);
          const std::vector<int32_t> enc = tok.encode(doc.text, /*add_special=*/false, /*parse_special=*/false);
          ids.insert(ids.end(), enc.begin(), enc.end());
          ids.push_back(vocab.eos_id);
          ch.lengths[doc.split].push_back(static_cast<int64_t>(ids.size() - before));
        }
        std::lock_guard lock(mu);
        ch.done = true;
        cv.notify_all();
      }
    } catch (...) {
      std::lock_guard lock(mu);
      if (!error) error = std::current_exception();
      stop = true;
      cv.notify_all();
    }
  };
  for (int w = 0; w < o.workers; ++w) workers.threads.emplace_back(work, w);

  PrepareResult res;
  PrepareProgress p;
  p.bytes_total = total_bytes;
  auto last_report = std::chrono::steady_clock::now();
  auto report = [&](bool force) {
    if (!progress) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_report < std::chrono::milliseconds(100)) return;
    last_report = now;
    p.seconds = seconds();
    progress(p);
  };
  int64_t offset[2] = {0, 0};
  for (int s = 0; s < 2; ++s) idx[s]->write({reinterpret_cast<const char*>(&offset[s]), sizeof(int64_t)});
  std::vector<uint16_t> narrow_ids;
  for (size_t c = 0; c < chunks.size(); ++c) {
    Chunk ch;
    {
      std::unique_lock lock(mu);
      while (!chunks[c].done && !error) {
        if (cv.wait_for(lock, std::chrono::milliseconds(100)) == std::cv_status::timeout) {
          lock.unlock();
          report(/*force=*/false);
          lock.lock();
        }
      }
      if (error) std::rethrow_exception(error);
      ch = std::move(chunks[c]);
      chunks[c] = Chunk();
      written = c + 1;
      cv.notify_all();
    }
    for (int s = 0; s < 2; ++s) {
      const std::vector<int32_t>& ids = ch.ids[s];
      if (narrow) {
        narrow_ids.resize(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) narrow_ids[i] = static_cast<uint16_t>(ids[i]);
        bin[s]->write({reinterpret_cast<const char*>(narrow_ids.data()), narrow_ids.size() * sizeof(uint16_t)});
      } else {
        bin[s]->write({reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t)});
      }
      for (int64_t len : ch.lengths[s]) {
        offset[s] += len;
        idx[s]->write({reinterpret_cast<const char*>(&offset[s]), sizeof(int64_t)});
      }
      res.documents[s] += static_cast<int64_t>(ch.lengths[s].size());
      p.tokens += static_cast<int64_t>(ids.size());
    }
    p.bytes_done += ch.bytes;
    report(/*force=*/c + 1 == chunks.size());
  }
  for (int s = 0; s < 2; ++s) {
    bin[s]->commit();
    idx[s]->commit();
    res.tokens[s] = offset[s];
  }

  nlohmann::ordered_json j;
  j["format"] = kTokenDataFormat;
  j["version"] = kTokenDataVersion;
  j["dtype"] = narrow ? "uint16" : "int32";
  j["tokenizer"] = {{"path", o.tokenizer},    {"fingerprint", tokenizer_fingerprint(vocab)},
                    {"vocab_size", n_vocab},  {"bos_id", vocab.bos_id},
                    {"eos_id", vocab.eos_id}, {"bos_per_document", bos}};
  for (int s = 0; s < 2; ++s) {
    j["splits"][kSplitNames[s]] = {{"tokens", res.tokens[s]}, {"documents", res.documents[s]}};
  }
  j["val_fraction"] = o.val_fraction;
  j["seed"] = o.seed;
  j["inputs"] = nlohmann::ordered_json::array();
  for (size_t f = 0; f < o.inputs.size(); ++f) {
    j["inputs"].push_back({{"path", o.inputs[f]}, {"bytes", files[f]->size()}, {"documents", docs_per_file[f]}});
  }
  const std::string text = j.dump(2) + "\n";
  write_file_atomic((out / "index.json").string(), {std::span<const char>(text.data(), text.size())});

  res.vocab_size = n_vocab;
  res.dtype = narrow ? "uint16" : "int32";
  res.bytes = total_bytes;
  res.seconds = seconds();
  return res;
}

}  // namespace ascent::train
