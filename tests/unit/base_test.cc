// Thread pool, mapped files and the GGUF writer/reader pair.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <thread>

#include <sys/mman.h>

#include "ascent/base/error.h"
#include "ascent/base/mapped_file.h"
#include "ascent/base/thread_pool.h"
#include "ascent/engine/sampler.h"
#include "ascent/model/gguf.h"

namespace ascent {
namespace {

TEST(ThreadPool, CoversTheRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, DynamicChunksCoverTheRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 5, 64, 1001}) {
    for (int64_t grain : {1, 7, 64, 5000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for_dynamic(n, grain, [&](int64_t b, int64_t e) {
        EXPECT_LE(e - b, grain);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, StealingChunksCoverTheRangeExactlyOnce) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 5, 64, 1001}) {
      for (int64_t grain : {1, 7, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for_stealing(n, grain, [&](int64_t b, int64_t e) {
          EXPECT_LE(e - b, grain);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (auto& h : hits) EXPECT_EQ(h.load(), 1);
      }
    }
  }
}

// Waits for a state of the pool's threads (ThreadPool::sleeping_workers and the like) rather than sleeping for a time
// that makes it likely. Polls, and gives the core away only after a while: a state can last only microseconds, and a
// yield on a busy host can give the core away for milliseconds.
void wait_until(const std::function<bool()>& state) {
  for (int polls = 0; !state(); ++polls) {
    if (polls >= 10000) std::this_thread::yield();
  }
}

// The worker holds its first chunk until the caller, done with its own share, has run an item of the worker's: the
// caller must have stolen from a share whose owner had not reached those items, in every round, and every index must
// still run exactly once.
TEST(ThreadPool, StealingFromAShareItsOwnerHasNotReachedCoversTheRangeOnce) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  for (int round = 0; round < 20; ++round) {
    std::vector<std::atomic<int>> hits(64);
    std::latch caller_stole(1);
    std::atomic<int> caller_took_worker_items{0};
    pool.parallel_for_stealing(64, 1, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() != caller) {
        caller_stole.wait();
      } else if (b >= 32 && caller_took_worker_items++ == 0) {
        caller_stole.count_down();
      }
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << round;
    EXPECT_GT(caller_took_worker_items.load(), 0) << "round " << round;
  }
}

TEST(ThreadPool, StealingOwnerWalksItsShareInOrderAndAnIdleThreadTakesItsBack) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::vector<int64_t> caller_chunks;  // only the caller appends
  std::atomic<int64_t> stolen_from_caller{0};
  std::latch worker_stole(1);
  // The caller owns [0, 32) and holds its first chunk until the worker, done with its share [32, 64), has run an item
  // of the caller's: it must have taken the back of that share, and the caller still walks the rest front to back.
  // Once its walk ends the caller may steal in turn (the back of what the worker took, when the worker is slow):
  // those chunks all lie past where its walk stopped.
  pool.parallel_for_stealing(64, 1, [&](int64_t b, int64_t) {
    if (std::this_thread::get_id() == caller) {
      caller_chunks.push_back(b);
      if (b == 0) worker_stole.wait();
    } else if (b < 32 && stolen_from_caller++ == 0) {
      worker_stole.count_down();
    }
  });
  EXPECT_GT(stolen_from_caller.load(), 0);
  size_t walked = 0;
  while (walked < caller_chunks.size() && caller_chunks[walked] == static_cast<int64_t>(walked)) ++walked;
  EXPECT_GT(walked, 0u);
  EXPECT_LT(walked, 32u);  // the worker took some of the share's back
  for (size_t i = walked; i < caller_chunks.size(); ++i) {
    EXPECT_GE(caller_chunks[i], static_cast<int64_t>(walked)) << "chunk " << i << " of the caller's";
  }
}

// The pool takes its mutex only to sleep or wake: in some rounds every worker has gone to sleep before the loop, in
// others the workers' chunks wait until the caller sleeps; every loop must still start and finish (a lost wake-up
// hangs here).
TEST(ThreadPool, WakesSleepingWorkersAndASleepingCaller) {
  ThreadPool pool(3);
  for (int round = 0; round < 40; ++round) {
    if (round % 2 == 0) wait_until([&] { return pool.sleeping_workers() == 2; });
    const bool caller_sleeps = round % 3 == 0;
    std::latch caller_asleep(1);
    std::jthread watcher;
    if (caller_sleeps) {
      watcher = std::jthread([&] {
        wait_until([&] { return pool.caller_sleeping(); });
        caller_asleep.count_down();
      });
    }
    std::vector<std::atomic<int>> hits(30);
    pool.parallel_for(30, [&](int64_t b, int64_t e) {
      if (caller_sleeps && b > 0) caller_asleep.wait();
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << round;
  }
}

// Bytes named for warming (a decode thread's next weights) are only prefetched. Loops before and after still run every
// index once: whether the named bytes outlast the idle time or not, whether the workers sleep between rounds or not,
// and with a loop that runs on the caller alone between them.
TEST(ThreadPool, WarmingNamedBytesLeavesEveryLoopWhole) {
  std::vector<uint8_t> bytes(size_t{8} << 20, 1);  // before the pool: outlives its workers' warming
  const std::span<const uint8_t> all(bytes);
  ThreadPool pool(3);
  for (int round = 0; round < 30; ++round) {
    if (round % 5 == 0) wait_until([&] { return pool.sleeping_workers() == 2; });
    for (int t = 1; t < 3; ++t) pool.warm_after_next_call(t, all.subspan(static_cast<size_t>(t + round) << 16));
    std::vector<std::atomic<int>> hits(100);
    auto count = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    };
    if (round % 3 == 0) {
      pool.parallel_for(100, count);
    } else if (round % 3 == 1) {
      pool.parallel_for_stealing(100, 4, count);
    } else {
      pool.parallel_for_stealing(100, 100, count);  // one grain: the caller alone, and the named bytes dropped
      pool.parallel_for(100, [&](int64_t, int64_t) {});
    }
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << round;
  }
  for (int t : {0, 3}) {  // the caller, and a thread the pool lacks
    try {
      pool.warm_after_next_call(t, all);
      FAIL() << "thread " << t << " of 3 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("thread " + std::to_string(t) + " is not a worker of a pool of 3"),
                std::string::npos)
          << e.what();
    }
  }
}

// Named bytes may be freed right after forget_warm: a worker still warming them (here: more than it can get through
// before the memory goes) must never load them afterwards. Without the handshake this dies of SIGSEGV. In half the
// rounds forget_warm comes at once, in the others once the worker is seen loading the bytes, if it is within a bound
// of polls: nothing can hold a worker mid-load, and on a busy host it may warm and sleep while this thread is off
// its core, so the rounds that catch it are counted, not required.
TEST(ThreadPool, ForgetWarmLetsNamedBytesBeFreedAtOnce) {
  ThreadPool pool(2);
  const size_t bytes = size_t{4} << 20;
  int rounds_seen_warming = 0;
  for (int round = 0; round < 100; ++round) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    pool.warm_after_next_call(1, {static_cast<const uint8_t*>(p), bytes});
    std::atomic<int64_t> covered{0};
    pool.parallel_for(2, [&](int64_t b, int64_t e) { covered += e - b; });
    ASSERT_EQ(covered.load(), 2);
    if (round % 2 == 0) {
      for (int polls = 0; polls < 1000000 && pool.sleeping_workers() == 0; ++polls) {
        if (pool.warming(1)) {
          ++rounds_seen_warming;
          break;
        }
      }
    }
    pool.forget_warm();
    ASSERT_EQ(munmap(p, bytes), 0);
  }
  std::printf("forget_warm came while the worker was seen loading in %d of 50 rounds\n", rounds_seen_warming);
}

TEST(ThreadPool, RethrowsAWorkersError) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, [](int64_t b, int64_t) { ASCENT_CHECK(b == 0, "chunk {} failed", b); }), Error);
  int64_t total = 0;
  pool.parallel_for(10, [&](int64_t b, int64_t e) {
    if (b == 0) total += e - b;
  });
  EXPECT_GT(total, 0);  // still usable afterwards
}

TEST(MappedFile, ErrorsNameThePath) {
  try {
    MappedFile f("/nonexistent/model.bin");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.bin"), std::string::npos);
  }
}

// The fuzz targets' mode: the file's bytes in a heap block of exactly its size, page-aligned as a mapping is, and
// the loads still told that the file is mapped (copies_files).
TEST(MappedFile, ExactCopiesHoldTheFile) {
  const std::string path = (std::filesystem::temp_directory_path() / "ascent_exact_copy_test.bin").string();
  const std::string text = "seven bytes and then some";
  std::FILE* out = std::fopen(path.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), out), text.size());
  std::fclose(out);
  MappedFile::set_exact_copies(true);
  {
    MappedFile f(path);
    EXPECT_EQ(f.size(), text.size());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.bytes().data()), f.size()), text);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f.bytes().data()) % 4096, 0u);
    EXPECT_FALSE(MappedFile::copies_files());
  }
  MappedFile::set_exact_copies(false);
  std::filesystem::remove(path);
}

TEST(Gguf, WriterOutputReadsBack) {
  const std::string path = (std::filesystem::temp_directory_path() / "ascent_gguf_test.gguf").string();
  Tensor t = make_owned(DType::F32, {3, 32});
  auto* p = static_cast<float*>(const_cast<void*>(t.data));
  for (int i = 0; i < 96; ++i) p[i] = static_cast<float>(i) * 0.25f - 3.0f;
  model::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 7);
  w.set_f32s("scores", {0.5f, -1.0f});
  w.set_strings("tokens", {"a", "bc"});
  w.add_tensor("x", t);
  w.add_tensor("xq", convert(t, DType::Q8_0));
  w.write(path);
  model::GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 7);
  EXPECT_EQ(f.find("tokens")->strings.size(), 2u);
  ASSERT_EQ(f.tensors().size(), 2u);
  const Tensor x = f.tensor(f.tensors()[0]);
  EXPECT_EQ(x.shape, (Shape{3, 32}));
  EXPECT_EQ(0, std::memcmp(x.data, t.data, 96 * 4));
  EXPECT_EQ(f.tensors()[1].dtype, DType::Q8_0);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(path);
}

TEST(Gguf, SetValueKeepsTypesAndReplacesKeys) {
  const std::string path = (std::filesystem::temp_directory_path() / "ascent_gguf_values.gguf").string();
  model::GgufWriter w;
  w.set_u32("a", 1);
  model::GgufValue i16, f64, u8s, f32s;
  i16.type = model::GgufType::I16;
  i16.i = -7;
  f64.type = model::GgufType::F64;
  f64.f = 0.1;
  u8s.type = f32s.type = model::GgufType::Array;
  u8s.elem_type = model::GgufType::U8;
  u8s.ints = {0, 200, 255};
  f32s.elem_type = model::GgufType::F32;
  f32s.floats = {-1967.0, 0.5};
  w.set_value("b", i16);
  w.set_value("c", f64);
  w.set_value("d", u8s);
  w.set_value("e", f32s);
  w.set_string("a", "again");  // replaces the u32: a key written twice would make the file unreadable
  w.write(path);
  model::GgufFile f(path);
  EXPECT_EQ(f.metadata().size(), 5u);
  EXPECT_EQ(f.get_string("a"), "again");
  EXPECT_EQ(f.find("b")->type, model::GgufType::I16);
  EXPECT_EQ(f.get_int("b"), -7);
  EXPECT_EQ(f.find("c")->type, model::GgufType::F64);
  EXPECT_EQ(f.find("c")->f, 0.1);
  EXPECT_EQ(f.find("d")->elem_type, model::GgufType::U8);
  EXPECT_EQ(f.find("d")->ints, (std::vector<int64_t>{0, 200, 255}));
  EXPECT_EQ(f.find("e")->elem_type, model::GgufType::F32);
  EXPECT_EQ(f.find("e")->floats, (std::vector<double>{-1967.0, 0.5}));
  std::filesystem::remove(path);
}

TEST(Sampler, GreedyAndSeededAreReproducible) {
  std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f, 2.0f};
  engine::Sampler greedy({.temperature = 0.0f});
  EXPECT_EQ(greedy.sample(logits, {}), 1);  // ties go to the lowest id
  engine::SamplingParams p{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 42};
  engine::Sampler a(p), b(p);
  std::vector<int> counts(5);
  for (int i = 0; i < 2000; ++i) {
    const int32_t x = a.sample(logits, {});
    EXPECT_EQ(x, b.sample(logits, {}));
    counts[static_cast<size_t>(x)]++;
  }
  EXPECT_GT(counts[1], counts[0]);
  EXPECT_GT(counts[0], counts[3]);
  engine::Sampler topk({.temperature = 1.0f, .top_k = 2, .top_p = 1.0f, .min_p = 0.0f, .seed = 1});
  for (int i = 0; i < 200; ++i) {
    const int32_t x = topk.sample(logits, {});
    EXPECT_TRUE(x == 1 || x == 4) << x;
  }
  // A strong repetition penalty moves greedy off a repeated token.
  engine::Sampler rep({.temperature = 0.0f, .repeat_penalty = 10.0f});
  const std::vector<int32_t> hist = {1, 4};
  EXPECT_EQ(rep.sample(logits, hist), 2);
}

}  // namespace
}  // namespace ascent

#include "ascent/tokenizer/tokenizer.h"

namespace ascent {
namespace {

TEST(Utf8Stream, NeverEmitsABrokenCharacter) {
  tokenizer::Utf8Stream s;
  const std::string euro = "\xe2\x82\xac";  // one character, three bytes, fed one byte at a time
  EXPECT_EQ(s.push("a"), "a");
  EXPECT_EQ(s.push(euro.substr(0, 1)), "");
  EXPECT_EQ(s.push(euro.substr(1, 1)), "");
  EXPECT_EQ(s.push(euro.substr(2, 1) + "b"), euro + "b");
  EXPECT_EQ(s.push("\xf0\x9f"), "");
  EXPECT_EQ(s.flush(), "\xf0\x9f");  // what is left at the end is still delivered
}

}  // namespace
}  // namespace ascent
