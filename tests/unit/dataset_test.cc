// The training data pipeline (train/): document splitting, a prepared folder's files read back independently of
// TokenData, the sampler's epochs, shards and resume, and the errors for damaged folders.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/base/read_file.h"
#include "ascent/model/model_tokenizer.h"
#include "ascent/train/data_prepare.h"
#include "ascent/train/dataset.h"

namespace ascent::train {
namespace {

namespace fs = std::filesystem;

const std::string kShared = ASCENT_SHARED_DIR;
const std::string kStory = kShared + "/models/story-656K";

// The error message of fn(), or "" when it throws none.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A token file read with plain stdio, as the documented format says: little-endian uint16.
std::vector<int32_t> read_u16_file(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<int32_t> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<unsigned char>(bytes[2 * i]) | static_cast<unsigned char>(bytes[2 * i + 1]) << 8;
  }
  return out;
}

class Dataset : public ::testing::Test {
 protected:
  // One folder for the suite: the first 40 KB of tinyshakespeare (about 250 documents) under story-656K's tokenizer.
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/ascent-dataset-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    const std::string corpus = read_file(kShared + "/corpora/tinyshakespeare.txt").substr(0, 40000);
    text_ = root_ + "/corpus.txt";
    std::ofstream(text_) << corpus;
    dir_ = root_ + "/data";
    prepare_data({.inputs = {text_}, .tokenizer = kStory, .out = dir_, .val_fraction = 0.1, .workers = 2, .seed = 7});
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // A copy of the prepared folder to damage.
  static std::string copy_folder(const std::string& name) {
    const std::string to = root_ + "/" + name;
    fs::remove_all(to);
    fs::copy(dir_, to);
    return to;
  }

  static std::string root_, text_, dir_;
};
std::string Dataset::root_, Dataset::text_, Dataset::dir_;

TEST(DatasetSplit, DocumentsAreRunsOfNonBlankLines) {
  const std::string text = "\n\nFirst: one\ntwo\n\n \t\r\nsecond\r\nline\r\n\n\n\nlast";
  const std::vector<TextSpan> docs = split_documents(text);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].text, "First: one\ntwo");
  EXPECT_EQ(docs[0].line, 3);
  EXPECT_EQ(docs[1].text, "second\r\nline");  // the last line's "\r\n" is left out, inner ones kept
  EXPECT_EQ(docs[1].line, 7);
  EXPECT_EQ(docs[2].text, "last");
  EXPECT_EQ(docs[2].line, 12);
  EXPECT_TRUE(split_documents("\n \n\t\n").empty());
}

TEST(DatasetSplit, UniformBelowStaysInRangeAndCoversIt) {
  std::mt19937_64 rng(3);
  std::vector<int> count(7);
  for (int i = 0; i < 70000; ++i) ++count[uniform_below(rng, 7)];
  for (int c : count) EXPECT_NEAR(c, 10000, 500);
  const uint64_t big = (uint64_t{1} << 63) + 1;  // rejects almost half the draws
  for (int i = 0; i < 100; ++i) EXPECT_LT(uniform_below(rng, big), big);
  EXPECT_EQ(uniform_below(rng, 1), 0u);
}

TEST_F(Dataset, FilesMatchTheIndexAndDocumentsAreFramed) {
  const TokenData train = TokenData::open(dir_, "train"), val = TokenData::open(dir_, "val");
  EXPECT_EQ(train.vocab_size(), 2048);
  const tokenizer::Vocab vocab = model::load_vocab(kStory, 0);
  EXPECT_EQ(train.fingerprint(), tokenizer_fingerprint(vocab));
  EXPECT_EQ(train.bos_id(), 1);
  EXPECT_EQ(train.eos_id(), 2);
  const size_t docs = split_documents(read_file(text_)).size();
  const size_t n_val = val.doc_starts().size() - 1;
  EXPECT_EQ(train.doc_starts().size() - 1 + n_val, docs);
  EXPECT_EQ(n_val, static_cast<size_t>(std::llround(0.1 * static_cast<double>(docs))));
  for (const TokenData* d : {&train, &val}) {
    const std::vector<int32_t> ids = read_u16_file(d->path());
    ASSERT_EQ(static_cast<int64_t>(ids.size()), d->size());
    const auto starts = d->doc_starts();
    for (size_t i = 0; i + 1 < starts.size(); ++i) {
      EXPECT_EQ(ids[static_cast<size_t>(starts[i])], 1) << "document " << i << " starts with BOS";
      EXPECT_EQ(ids[static_cast<size_t>(starts[i + 1] - 1)], 2) << "document " << i << " ends with EOS";
    }
    std::vector<int32_t> got(ids.size());
    d->read(0, got);
    EXPECT_EQ(got, ids);
  }
}

TEST_F(Dataset, TheSameSeedGivesTheSameBytesAndAnotherSeedOtherSplits) {
  const std::string again = root_ + "/again", other = root_ + "/other";
  prepare_data({.inputs = {text_}, .tokenizer = kStory, .out = again, .val_fraction = 0.1, .workers = 1, .seed = 7});
  prepare_data({.inputs = {text_}, .tokenizer = kStory, .out = other, .val_fraction = 0.1, .workers = 3, .seed = 8});
  for (const char* f : {"train.bin", "val.bin", "train.idx", "val.idx", "index.json"}) {
    EXPECT_EQ(read_file(dir_ + "/" + f), read_file(again + "/" + f)) << f;
  }
  EXPECT_NE(read_file(dir_ + "/val.bin"), read_file(other + "/val.bin"));
}

TEST_F(Dataset, LargeVocabulariesAreReadAsInt32) {
  const std::string out = root_ + "/llama3";
  const PrepareResult r =
      prepare_data({.inputs = {text_}, .tokenizer = kShared + "/tokenizers/llama3", .out = out, .val_fraction = 0});
  EXPECT_EQ(r.dtype, "int32");
  const TokenData d = TokenData::open(out, "train");
  EXPECT_EQ(d.vocab_size(), 128256);
  const std::string bytes = read_file(d.path());
  ASSERT_EQ(static_cast<int64_t>(bytes.size()), 4 * d.size());
  std::vector<int32_t> got(static_cast<size_t>(d.size()));
  d.read(0, got);
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t v = 0;
    for (int b = 3; b >= 0; --b) v = v << 8 | static_cast<unsigned char>(bytes[4 * i + static_cast<size_t>(b)]);
    ASSERT_EQ(got[i], static_cast<int32_t>(v)) << "token " << i;
  }
  EXPECT_EQ(got.back(), d.eos_id());
  EXPECT_EQ(TokenData::open(out, "val").size(), 0);  // --val-fraction 0: an empty split, still readable
}

TEST_F(Dataset, AnotherTokenizerIsRefusedNamingBoth) {
  const TokenData train = TokenData::open(dir_, "train");
  EXPECT_NO_THROW(train.check_tokenizer(model::load_vocab(kStory, 0), kStory));
  const tokenizer::Vocab other = model::load_vocab(kShared + "/models/stories260K/tok512.model", 0);
  const std::string e = error_of([&] { train.check_tokenizer(other, "stories260K"); });
  EXPECT_NE(e.find(dir_), std::string::npos) << e;
  EXPECT_NE(e.find(train.fingerprint()), std::string::npos) << e;
  EXPECT_NE(e.find(tokenizer_fingerprint(other)), std::string::npos) << e;
  EXPECT_NE(e.find("vocab 512"), std::string::npos) << e;
  // One piece changed is another tokenizer.
  tokenizer::Vocab edited = model::load_vocab(kStory, 0);
  edited.pieces[100] += "x";
  EXPECT_NE(tokenizer_fingerprint(edited), train.fingerprint());
}

TEST_F(Dataset, EachEpochVisitsEveryWindowOnceInANewOrder) {
  const TokenData train = TokenData::open(dir_, "train");
  const int64_t t = 64, w = train.windows(t);
  ASSERT_EQ(w, (train.size() - 1) / t);
  ASSERT_GT(w, 50);
  BatchSampler s(train, t, /*seed=*/11);
  EXPECT_EQ(s.samples_per_epoch(), w);
  std::vector<int64_t> e0, e1;
  for (int64_t i = 0; i < w; ++i) e0.push_back(s.window_at(static_cast<uint64_t>(i)));
  for (int64_t i = 0; i < w; ++i) e1.push_back(s.window_at(static_cast<uint64_t>(w + i)));
  EXPECT_NE(e0, e1);
  for (auto* e : {&e0, &e1}) {
    std::vector<int64_t> sorted = *e;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < w; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  }
  std::vector<int64_t> identity(e0.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int64_t>(i);
  EXPECT_NE(e0, identity);
  BatchSampler other_seed(train, t, /*seed=*/12);
  std::vector<int64_t> o0;
  for (int64_t i = 0; i < w; ++i) o0.push_back(other_seed.window_at(static_cast<uint64_t>(i)));
  EXPECT_NE(o0, e0);
}

TEST_F(Dataset, BatchesHoldWindowsAndTheirNextTokens) {
  const TokenData train = TokenData::open(dir_, "train");
  const std::vector<int32_t> ids = read_u16_file(train.path());
  const int64_t t = 32;
  BatchSampler s(train, t, /*seed=*/5);
  std::vector<int32_t> in(4 * t), tg(4 * t);
  s.next(in, tg);
  EXPECT_EQ(s.position(), 4u);
  for (int r = 0; r < 4; ++r) {
    const int64_t w = s.window_at(static_cast<uint64_t>(r));
    for (int64_t j = 0; j < t; ++j) {
      ASSERT_EQ(in[static_cast<size_t>(r * t + j)], ids[static_cast<size_t>(w * t + j)]);
      ASSERT_EQ(tg[static_cast<size_t>(r * t + j)], ids[static_cast<size_t>(w * t + j + 1)]);
    }
  }
}

TEST_F(Dataset, ShardsAreDisjointAndTogetherFollowOneOrder) {
  const TokenData train = TokenData::open(dir_, "train");
  const int64_t t = 64, w = train.windows(t);
  const int shards = 3;
  BatchSampler whole(train, t, /*seed=*/9);
  std::set<int64_t> seen;
  for (int sh = 0; sh < shards; ++sh) {
    BatchSampler s(train, t, /*seed=*/9, shards, sh);
    ASSERT_EQ(s.samples_per_epoch(), w / shards);
    for (int64_t k = 0; k < s.samples_per_epoch(); ++k) {
      const int64_t win = s.window_at(static_cast<uint64_t>(k));
      EXPECT_EQ(win, whole.window_at(static_cast<uint64_t>(k * shards + sh)));
      EXPECT_TRUE(seen.insert(win).second) << "window " << win << " dealt twice";
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), w / shards * shards);
}

TEST_F(Dataset, SeekResumesTheExactSequenceAcrossEpochs) {
  const TokenData train = TokenData::open(dir_, "train");
  const int64_t t = 128;
  BatchSampler a(train, t, /*seed=*/4, /*num_shards=*/2, /*shard_id=*/1);
  const int64_t per = a.samples_per_epoch();
  const int64_t b = 3;
  std::vector<int32_t> in(b * t), tg(b * t);
  std::vector<std::vector<int32_t>> batches;
  std::vector<uint64_t> positions;
  for (int64_t i = 0; i < per; ++i) {  // b * per samples: about three epochs
    positions.push_back(a.position());
    a.next(in, tg);
    batches.push_back(in);
    batches.back().insert(batches.back().end(), tg.begin(), tg.end());
  }
  EXPECT_EQ(a.epoch(), static_cast<uint64_t>(b));
  BatchSampler r(train, t, /*seed=*/4, 2, 1);
  const size_t from = batches.size() / 2;
  r.seek(positions[from]);
  for (size_t i = from; i < batches.size(); ++i) {
    r.next(in, tg);
    std::vector<int32_t> both = in;
    both.insert(both.end(), tg.begin(), tg.end());
    ASSERT_EQ(both, batches[i]) << "batch " << i;
  }
}

TEST_F(Dataset, ValidationWindowsComeInFileOrder) {
  const TokenData val = TokenData::open(dir_, "val");
  const std::vector<int32_t> ids = read_u16_file(val.path());
  const int64_t t = 16, w = val.windows(t);
  ASSERT_GT(w, 5);
  std::vector<int32_t> in(4 * t), tg(4 * t);
  int64_t first = 0, rows = 0;
  while ((rows = val.read_windows(first, t, in, tg)) > 0) {
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(in[static_cast<size_t>(r * t)], ids[static_cast<size_t>((first + r) * t)]);
      ASSERT_EQ(tg[static_cast<size_t>(r * t + t - 1)], ids[static_cast<size_t>((first + r) * t + t)]);
    }
    first += rows;
  }
  EXPECT_EQ(first, w);
}

TEST_F(Dataset, DamagedFoldersAreRefusedNamingTheFile) {
  const std::string cut = copy_folder("cut");
  fs::resize_file(cut + "/train.bin", fs::file_size(cut + "/train.bin") - 2);
  std::string e = error_of([&] { TokenData::open(cut, "train"); });
  EXPECT_NE(e.find(cut + "/train.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  const std::string idx = copy_folder("idx");
  fs::resize_file(idx + "/val.idx", 8);
  e = error_of([&] { TokenData::open(idx, "val"); });
  EXPECT_NE(e.find(idx + "/val.idx"), std::string::npos) << e;

  const std::string unfinished = copy_folder("unfinished");
  fs::remove(unfinished + "/index.json");
  e = error_of([&] { TokenData::open(unfinished, "train"); });
  EXPECT_NE(e.find("no index.json"), std::string::npos) << e;

  // An id past the vocabulary, as a damaged file could hold, fails when read rather than indexing past the embedding.
  const std::string bad_id = copy_folder("bad_id");
  {
    std::fstream f(bad_id + "/train.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\xff').put('\xff');
  }
  const TokenData d = TokenData::open(bad_id, "train");
  std::vector<int32_t> out(16);
  e = error_of([&] { d.read(0, out); });
  EXPECT_NE(e.find("token 10 is id 65535"), std::string::npos) << e;

  const TokenData train = TokenData::open(dir_, "train");
  e = error_of([&] { BatchSampler(train, train.size(), /*seed=*/1); });
  EXPECT_NE(e.find(dir_ + ": split train"), std::string::npos) << e;
  e = error_of([&] { TokenData::open(dir_, "test"); });
  EXPECT_NE(e.find("no split 'test'"), std::string::npos) << e;
}

TEST_F(Dataset, BadInputsAreRefusedAndLeaveNoIndex) {
  const std::string out = root_ + "/refused";
  std::string e =
      error_of([&] { prepare_data({.inputs = {root_ + "/missing.txt"}, .tokenizer = kStory, .out = out}); });
  EXPECT_NE(e.find(root_ + "/missing.txt"), std::string::npos) << e;
  const std::string blank = root_ + "/blank.txt";
  std::ofstream(blank) << "\n  \n\n";
  e = error_of([&] { prepare_data({.inputs = {blank}, .tokenizer = kStory, .out = out}); });
  EXPECT_NE(e.find(blank + ": holds no text"), std::string::npos) << e;
  const std::string binary = root_ + "/binary.txt";
  std::ofstream(binary) << "fine\n\nstill fine\nbut \xff here\n";
  e = error_of([&] { prepare_data({.inputs = {binary}, .tokenizer = kStory, .out = out}); });
  EXPECT_NE(e.find(binary + ":4: not UTF-8"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(out + "/index.json"));
  EXPECT_FALSE(fs::exists(out + "/train.bin"));
  e = error_of([&] { prepare_data({.inputs = {text_}, .tokenizer = text_, .out = out}); });
  EXPECT_NE(e.find("--tokenizer " + text_), std::string::npos) << e;
}

}  // namespace
}  // namespace ascent::train
