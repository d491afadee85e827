// The serving engine against the single-sequence path: whatever else runs beside a request (a batch of others,
// chunked prefill, prefix caching, preemption under a tiny pool, other block sizes, n > 1), it gets the tokens and
// log-probabilities a Session gives it alone. The Session path is checked against PyTorch by tests/e2e.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <random>

#include "ascent/base/error.h"
#include "ascent/engine/engine.h"
#include "ascent/engine/generator.h"
#include "ascent/model/session.h"

namespace ascent::engine {
namespace {

const std::string kModel = std::string(ASCENT_SHARED_DIR) + "/models/story-656K";

struct Result {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;
  std::vector<FinishReason> reasons;
  Usage usage;
  std::string error;
};

class Collect : public RequestSink {
 public:
  explicit Collect(int n) {
    r_.tokens.resize(static_cast<size_t>(n));
    r_.logprobs.resize(static_cast<size_t>(n));
    r_.reasons.resize(static_cast<size_t>(n), FinishReason::Error);
  }
  void on_token(const TokenEvent& e) override {
    std::lock_guard lock(mu_);
    r_.tokens[static_cast<size_t>(e.index)].push_back(e.id);
    r_.logprobs[static_cast<size_t>(e.index)].push_back(e.logprob);
    if (first_token_) first_token_();
  }
  void on_finish(int index, FinishReason reason) override {
    std::lock_guard lock(mu_);
    r_.reasons[static_cast<size_t>(index)] = reason;
  }
  void on_done(const Usage& usage, const std::string& error) override {
    std::lock_guard lock(mu_);
    r_.usage = usage;
    r_.error = error;
    done_ = true;
    cv_.notify_all();
  }
  Result wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return r_;
  }
  std::function<void()> first_token_;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Result r_;
};

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t len, int64_t vocab) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  p[0] = 1;
  for (size_t i = 1; i < p.size(); ++i) p[i] = static_cast<int32_t>(3 + rng() % static_cast<uint32_t>(vocab - 3));
  return p;
}

// The prompt's continuation on its own: a Session, the sampler, no end ids.
std::vector<int32_t> alone(const model::Model& m, const std::vector<int32_t>& prompt, int64_t n, SamplingParams p) {
  model::Session s(m, static_cast<int64_t>(prompt.size()) + n);
  Sampler sampler(p);
  return generate(
      s, prompt, n, sampler, {}, [](int32_t) {}, nullptr);
}

struct Case {
  std::vector<int32_t> prompt;
  int64_t max_tokens;
  SamplingParams sampling;
};

std::vector<Case> make_cases(const model::Model& m, int count, int shared_prefix) {
  std::mt19937 rng(11);
  const std::vector<int32_t> prefix = random_prompt(rng, std::max(shared_prefix, 1), m.config().vocab);
  std::vector<Case> cases;
  for (int i = 0; i < count; ++i) {
    const int64_t len = 1 + static_cast<int64_t>(rng() % 200);
    std::vector<int32_t> prompt = random_prompt(rng, len, m.config().vocab);
    if (shared_prefix > 0) prompt.insert(prompt.begin(), prefix.begin(), prefix.end());
    SamplingParams p{.temperature = 0.0f};
    if (i % 2 == 1) p = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .min_p = 0.0f, .seed = 100u + i};
    cases.push_back({prompt, 8 + static_cast<int64_t>(rng() % 24), p});
  }
  return cases;
}

std::vector<Result> run_all(const model::Model& m, const EngineOptions& o, const std::vector<Case>& cases,
                            EngineStats* stats = nullptr, int top_logprobs = -1) {
  Engine e(m, o);
  e.start();
  std::vector<std::shared_ptr<Collect>> sinks;
  for (const Case& c : cases) {
    auto sink = std::make_shared<Collect>(1);
    e.submit({.prompt = c.prompt,
              .sampling = c.sampling,
              .max_tokens = c.max_tokens,
              .ignore_eos = true,
              .top_logprobs = top_logprobs},
             sink);
    sinks.push_back(sink);
  }
  std::vector<Result> out;
  for (auto& s : sinks) out.push_back(s->wait());
  e.stop(10);
  if (stats != nullptr) *stats = e.stats();
  EXPECT_EQ(e.stats().kv_blocks_used, 0) << "a finished request left blocks held";
  return out;
}

void expect_alone(const model::Model& m, const std::vector<Case>& cases, const std::vector<Result>& got) {
  ASSERT_EQ(got.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto want = alone(m, cases[i].prompt, cases[i].max_tokens, cases[i].sampling);
    EXPECT_EQ(got[i].tokens[0], want) << "request " << i << " (prompt of " << cases[i].prompt.size() << " tokens)";
    EXPECT_EQ(got[i].reasons[0], FinishReason::Length);
    EXPECT_TRUE(got[i].error.empty()) << got[i].error;
  }
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = model::Model::load(kModel).release(); }
  static void TearDownTestSuite() { delete model_; }
  static model::Model* model_;
};
model::Model* EngineTest::model_ = nullptr;

TEST_F(EngineTest, ManyAtOnceGiveTheTokensEachGetsAlone) {
  const auto cases = make_cases(*model_, 12, 0);
  const EngineOptions o{.max_seqs = 8, .max_batch_tokens = 64, .ctx_size = 512};
  expect_alone(*model_, cases, run_all(*model_, o, cases));
}

TEST_F(EngineTest, PrefixCachingOnAndOffGiveTheSameTokens) {
  const auto cases = make_cases(*model_, 10, 150);
  EngineStats on_stats, off_stats;
  EngineOptions o{.max_seqs = 4, .max_batch_tokens = 128, .ctx_size = 512, .kv_block = 32};
  const auto on = run_all(*model_, o, cases, &on_stats);
  o.prefix_caching = false;
  const auto off = run_all(*model_, o, cases, &off_stats);
  expect_alone(*model_, cases, on);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(on[i].tokens, off[i].tokens) << "request " << i;
  EXPECT_GT(on_stats.prefix_hits, 0);
  EXPECT_EQ(off_stats.prefix_hits, 0);
  // Submitted together, the requests compute the shared prefix's full blocks once (4 of 32 positions each): the
  // others wait for the first to publish them.
  int64_t all = 0;
  for (const Case& c : cases) all += static_cast<int64_t>(c.prompt.size());
  EXPECT_EQ(off_stats.prompt_tokens, all);
  EXPECT_LE(on_stats.prompt_tokens, all - static_cast<int64_t>(cases.size() - 1) * 4 * 32);
}

TEST_F(EngineTest, PreemptedSequencesResumeWithTheSameTokens) {
  const auto cases = make_cases(*model_, 12, 0);
  // 14 blocks of 16 positions: fewer than the running sequences need, so the newest are preempted and recomputed.
  const int64_t block_bytes = 2 * model_->config().n_layers * 16 * model_->kv_width() * 4;
  const EngineOptions o{
      .max_seqs = 8, .max_batch_tokens = 64, .ctx_size = 224, .kv_memory_bytes = 14 * block_bytes, .kv_block = 16};
  EngineStats stats;
  expect_alone(*model_, cases, run_all(*model_, o, cases, &stats));
  EXPECT_GT(stats.preemptions, 0);
}

TEST_F(EngineTest, LogprobsAreTheSameBitsAloneAndInABatch) {
  auto cases = make_cases(*model_, 6, 0);
  const EngineOptions o{.max_seqs = 6, .max_batch_tokens = 96, .ctx_size = 512};
  const auto together = run_all(*model_, o, cases, nullptr, /*top_logprobs=*/2);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto one = run_all(*model_, o, {cases[i]}, nullptr, /*top_logprobs=*/2);
    EXPECT_EQ(one[0].tokens, together[i].tokens);
    ASSERT_EQ(one[0].logprobs[0].size(), together[i].logprobs[0].size());
    for (size_t t = 0; t < one[0].logprobs[0].size(); ++t) {
      EXPECT_EQ(std::bit_cast<uint32_t>(one[0].logprobs[0][t]), std::bit_cast<uint32_t>(together[i].logprobs[0][t]))
          << "request " << i << " token " << t;
    }
  }
}

TEST_F(EngineTest, ChoicesOfOneRequestAreTheRequestsWithTheirSeeds) {
  std::mt19937 rng(5);
  const auto prompt = random_prompt(rng, 70, model_->config().vocab);
  const SamplingParams p{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 7};
  Engine e(*model_, {.max_seqs = 4, .max_batch_tokens = 32, .ctx_size = 256, .kv_block = 16});
  e.start();
  auto sink = std::make_shared<Collect>(3);
  e.submit({.prompt = prompt, .sampling = p, .max_tokens = 20, .n = 3, .ignore_eos = true}, sink);
  const Result r = sink->wait();
  for (int i = 0; i < 3; ++i) {
    SamplingParams pi = p;
    pi.seed = p.seed + static_cast<uint64_t>(i);
    EXPECT_EQ(r.tokens[static_cast<size_t>(i)], alone(*model_, prompt, 20, pi)) << "choice " << i;
  }
  EXPECT_EQ(r.usage.generated_tokens, 60);
  e.stop(10);
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, F16CacheGivesWhatAnF16SessionGives) {
  const auto m16 = model::Model::load(kModel, {.kv_type = DType::F16});
  const auto cases = make_cases(*m16, 6, 0);
  const EngineOptions o{.max_seqs = 4, .max_batch_tokens = 64, .ctx_size = 512, .kv_type = DType::F16};
  expect_alone(*m16, cases, run_all(*m16, o, cases));
}

TEST_F(EngineTest, CancelFreesTheBlocksAndEndsTheRequest) {
  std::mt19937 rng(9);
  Engine e(*model_, {.max_seqs = 4, .max_batch_tokens = 64, .ctx_size = 512});
  e.start();
  auto sink = std::make_shared<Collect>(1);
  std::atomic<uint64_t> id{0};
  std::atomic<bool> cancelled{false};
  sink->first_token_ = [&] {
    if (!cancelled.exchange(true)) e.cancel(id.load());
  };
  id =
      e.submit({.prompt = random_prompt(rng, 40, model_->config().vocab), .max_tokens = 400, .ignore_eos = true}, sink);
  const Result r = sink->wait();
  EXPECT_EQ(r.reasons[0], FinishReason::Cancelled);
  EXPECT_LT(r.tokens[0].size(), 400u);
  e.stop(10);
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, RefusesWhatCannotRun) {
  Engine e(*model_, {.max_seqs = 2, .max_batch_tokens = 16, .ctx_size = 64});
  auto sink = std::make_shared<Collect>(1);
  auto error_of = [&](RequestParams p) {
    try {
      e.submit(std::move(p), sink);
    } catch (const std::exception& ex) {
      return std::string(ex.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({.prompt = {}}).find("prompt"), std::string::npos);
  EXPECT_NE(error_of({.prompt = {1, 999999}}).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(error_of({.prompt = {1, 2}, .max_tokens = 63}).find("max_tokens"), std::string::npos);
  EXPECT_NE(error_of({.prompt = {1, 2}, .n = 3}).find("n: must be in [1, 2]"), std::string::npos);
  const EngineOptions small_budget{.max_seqs = 8, .max_batch_tokens = 4}, odd_block{.kv_block = 24};
  EXPECT_THROW(Engine(*model_, small_budget), ascent::Error);
  EXPECT_THROW(Engine(*model_, odd_block), ascent::Error);
}

}  // namespace
}  // namespace ascent::engine
