#include "ascent/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "ascent/base/error.h"
#include "ascent/base/log.h"
#include "ascent/engine/kv_pool.h"
#include "ascent/graph/executor.h"

namespace ascent::engine {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "cancelled";
    case FinishReason::Error:
      return "error";
  }
  return "?";
}

namespace {

struct Request;

// One sequence: a request's prompt and the tokens sampled for it so far, where its positions lie in the pool, and
// its own sampler.
struct Sequence {
  Request* req = nullptr;
  int index = 0;
  uint64_t order = 0;           // admission order: preemption takes the newest first
  std::vector<int32_t> tokens;  // prompt, then generated
  int64_t computed = 0;         // positions whose K and V are in the pool
  std::vector<int32_t> blocks;  // block table
  int64_t published = 0;        // full blocks offered to the prefix cache
  uint64_t chain = 0;           // prefix hash of the published blocks
  Sampler sampler;
  int64_t generated = 0;
  bool running = false;  // holds blocks and takes part in steps; else waits for admission
  bool done = false;
  bool forked = false;           // n > 1: the other choices were made from this one
  std::vector<uint64_t> hashes;  // prefix hashes of the prompt's full blocks (KvPool::chain), made at first need
  bool hashed = false;
  uint64_t epoch = 0;  // counts preemptions: a step's plan drops entries made before one

  Sequence(Request* r, int i, SamplingParams p) : req(r), index(i), sampler(std::move(p)) {}
};

struct Request {
  uint64_t id = 0;
  RequestParams params;
  std::shared_ptr<RequestSink> sink;
  std::vector<std::unique_ptr<Sequence>> seqs;  // seqs[0] prefills; the others fork from it
  Usage usage;
  int finished = 0;
  std::string error;
};

SamplingParams choice_params(const SamplingParams& p, int index) {
  SamplingParams q = p;
  q.seed = p.seed + static_cast<uint64_t>(index);  // choice 0 of n draws what a request with n = 1 draws
  return q;
}

int64_t bucket_of(int64_t tokens) {
  int64_t i = 0;
  for (int64_t b : EngineStats::kBatchBuckets) {
    if (tokens <= b) return i;
    ++i;
  }
  return i;  // past the last bucket: +Inf
}

}  // namespace

struct Engine::Impl {
  const model::Model& model;
  EngineOptions opt;
  KvPool pool;
  graph::Executor exec;

  std::mutex mu;  // guards incoming, cancels, stats, stopping
  std::condition_variable wake;
  std::deque<std::unique_ptr<Request>> incoming;
  std::vector<std::pair<uint64_t, FinishReason>> cancels;
  EngineStats stats;
  bool stopping = false, quit = false;
  int64_t live = 0;  // requests submitted and not yet done (on_done called): what stop() waits for
  uint64_t next_id = 1;
  std::thread thread;

  // The step thread's own state.
  std::map<uint64_t, std::unique_ptr<Request>> requests;
  std::deque<Sequence*> waiting;  // admission order; preempted sequences go back to the front
  std::vector<Sequence*> running;
  uint64_t next_order = 1;

  Impl(const model::Model& m, EngineOptions o, int64_t n_blocks)
      : model(m),
        opt(o),
        pool(m, n_blocks, o.kv_block, o.kv_type, o.prefix_caching),
        exec(m.generation_graph(), m.passes()) {}

  void loop();
  bool step();
  void take_incoming();  // with mu held
  void apply_cancels();
  void publish_stats();
  void finish(Sequence& s, FinishReason r);
  void end_request(Request& r);
  bool ensure_blocks(Sequence& s, int64_t upto);
  void preempt(Sequence& s);
  bool preempt_newest(const Sequence* keep);
  void admit_prefix(Sequence& s);
  void publish_full(Sequence& s);
  const std::vector<uint64_t>& prompt_hashes(Sequence& s);
  void fork(Sequence& s);
  void emit(Sequence& s, std::span<const float> logits);
};

Engine::Engine(const model::Model& model, EngineOptions options) : model_(model), opt_(options) {
  const auto& cfg = model.config();
  if (opt_.ctx_size == 0) opt_.ctx_size = model.default_context();
  model.check_context(opt_.ctx_size, "--ctx-size");
  ASCENT_CHECK(opt_.max_seqs >= 1, "--max-seqs: must be at least 1, got {}", opt_.max_seqs);
  ASCENT_CHECK(opt_.max_batch_tokens >= opt_.max_seqs,
               "--max-batch-tokens: {} cannot hold a decode step of --max-seqs {} sequences", opt_.max_batch_tokens,
               opt_.max_seqs);
  ASCENT_CHECK(opt_.prefill_chunk >= 1, "--prefill-chunk: must be at least 1, got {}", opt_.prefill_chunk);
  ASCENT_CHECK(opt_.kv_block >= 16 && opt_.kv_block % 16 == 0, "--kv-block: must be a positive multiple of 16, got {}",
               opt_.kv_block);
  ASCENT_CHECK(opt_.kv_type == DType::F32 || opt_.kv_type == DType::F16, "--kv-type: {} is not f32 or f16",
               dtype_name(opt_.kv_type));
  ASCENT_CHECK(opt_.kv_type != DType::F16 || graph::KvCache::k_tiles(cfg.head_dim),
               "--kv-type f16 needs an even head size; this model's is {}", cfg.head_dim);
  ASCENT_CHECK(opt_.max_queued >= 0, "--max-queued: must be 0 or more, got {}", opt_.max_queued);
  ASCENT_CHECK(opt_.max_queue_delay_us >= 0, "--max-queue-delay-us: must be 0 or more, got {}",
               opt_.max_queue_delay_us);
  const int64_t per_block = 2 * cfg.n_layers * opt_.kv_block * model.kv_width() * block_bytes(opt_.kv_type);
  const int64_t blocks_per_seq = (opt_.ctx_size + opt_.kv_block - 1) / opt_.kv_block;
  ASCENT_CHECK(opt_.kv_memory_bytes >= 0, "--kv-memory: must be 0 (--ctx-size x --max-seqs) or more, got {}",
               opt_.kv_memory_bytes);
  const int64_t n_blocks = opt_.kv_memory_bytes > 0 ? opt_.kv_memory_bytes / per_block : blocks_per_seq * opt_.max_seqs;
  ASCENT_CHECK(n_blocks >= 2, "--kv-memory: {} bytes hold {} KV blocks of {} bytes; at least 2 are needed",
               opt_.kv_memory_bytes, n_blocks, per_block);
  impl_ = std::make_unique<Impl>(model, opt_, n_blocks);
  impl_->stats.kv_blocks_total = n_blocks;
  impl_->stats.batch_tokens_hist.assign(std::size(EngineStats::kBatchBuckets) + 1, 0);
}

Engine::~Engine() {
  stop(0);
}

void Engine::start() {
  if (impl_->thread.joinable()) return;
  // Every shape a step can take: up to max_batch_tokens rows, up to max_seqs of them returning logits.
  impl_->exec.warm_up(opt_.max_batch_tokens, opt_.max_seqs);
  impl_->thread = std::thread([this] { impl_->loop(); });
  ready_ = true;
}

uint64_t Engine::submit(RequestParams params, std::shared_ptr<RequestSink> sink) {
  const auto& cfg = model_.config();
  ASCENT_CHECK(!params.prompt.empty(), "prompt: it is empty");
  for (int32_t id : params.prompt) {
    ASCENT_CHECK(id >= 0 && id < cfg.vocab, "prompt: token id {} is outside the vocabulary of {}", id, cfg.vocab);
  }
  ASCENT_CHECK(params.n >= 1 && params.n <= opt_.max_seqs, "n: must be in [1, {}] (--max-seqs), got {}", opt_.max_seqs,
               params.n);
  ASCENT_CHECK(params.max_tokens >= 1, "max_tokens: must be at least 1, got {}", params.max_tokens);
  ASCENT_CHECK(params.top_logprobs >= -1 && params.top_logprobs <= 20, "top_logprobs: must be in [0, 20], got {}",
               params.top_logprobs);
  const auto prompt_len = static_cast<int64_t>(params.prompt.size());
  ASCENT_CHECK(prompt_len + params.max_tokens <= opt_.ctx_size,
               "max_tokens: the prompt's {} tokens and max_tokens {} exceed the context length of {}", prompt_len,
               params.max_tokens, opt_.ctx_size);
  const int64_t need = (prompt_len + params.max_tokens + opt_.kv_block - 1) / opt_.kv_block;
  ASCENT_CHECK(need <= impl_->pool.total(),
               "max_tokens: the prompt and max_tokens need {} KV blocks, more than the pool's {} (--kv-memory)", need,
               impl_->pool.total());
  if (params.end_ids.empty()) {
    params.end_ids.push_back(cfg.eos_id);
    params.end_ids.insert(params.end_ids.end(), cfg.end_ids.begin(), cfg.end_ids.end());
  }
  auto r = std::make_unique<Request>();
  r->params = std::move(params);
  r->sink = std::move(sink);
  for (int i = 0; i < r->params.n; ++i) {
    r->seqs.push_back(std::make_unique<Sequence>(r.get(), i, choice_params(r->params.sampling, i)));
  }
  r->seqs[0]->tokens = r->params.prompt;
  r->usage.prompt_tokens = prompt_len;
  std::lock_guard lock(impl_->mu);
  if (impl_->stopping) throw QueueFull("the server is shutting down");
  if (impl_->stats.waiting + static_cast<int64_t>(impl_->incoming.size()) >= opt_.max_queued) {
    throw QueueFull(fmt::format("{} requests are waiting (--max-queued)", opt_.max_queued));
  }
  r->id = impl_->next_id++;
  ++impl_->live;
  const uint64_t id = r->id;
  impl_->incoming.push_back(std::move(r));
  impl_->wake.notify_one();
  return id;
}

void Engine::cancel(uint64_t id, FinishReason reason) {
  std::lock_guard lock(impl_->mu);
  impl_->cancels.emplace_back(id, reason);
  impl_->wake.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

void Engine::stop(double timeout_s) {
  if (!impl_) return;
  {
    std::unique_lock lock(impl_->mu);
    impl_->stopping = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    impl_->wake.wait_until(lock, deadline, [&] { return impl_->live == 0; });
    impl_->quit = true;
    impl_->wake.notify_all();
  }
  if (impl_->thread.joinable()) impl_->thread.join();
  ready_ = false;
}

void Engine::Impl::take_incoming() {
  while (!incoming.empty()) {
    std::unique_ptr<Request> r = std::move(incoming.front());
    incoming.pop_front();
    waiting.push_back(r->seqs[0].get());
    const uint64_t id = r->id;
    requests.emplace(id, std::move(r));
  }
}

void Engine::Impl::loop() {
  for (;;) {
    {
      std::unique_lock lock(mu);
      // Idle: sleep until a request or a cancel arrives. Then wait max_queue_delay_us more, so that requests arriving
      // together start in one step (Triton's dynamic batching window).
      if (requests.empty() && incoming.empty() && !quit) {
        wake.wait(lock, [&] { return quit || !incoming.empty() || !cancels.empty(); });
        if (opt.max_queue_delay_us > 0 && !quit) {
          wake.wait_for(lock, std::chrono::microseconds(opt.max_queue_delay_us), [&] { return quit; });
        }
      }
      take_incoming();
      if (quit) {
        cancels.clear();
        for (auto& [id, r] : requests) cancels.emplace_back(id, FinishReason::Cancelled);
      }
    }
    apply_cancels();
    publish_stats();  // a cancelled sequence's blocks show as free before the next step, or at exit
    if (quit && requests.empty()) break;
    bool progressed = false;
    try {
      progressed = step();
    } catch (const std::exception& e) {
      // A failed step fails the requests in it, not the server: every sequence that was running ends with the error.
      log::warn("engine step failed: {}", e.what());
      for (Sequence* s : std::vector<Sequence*>(running)) {
        s->req->error = e.what();
        finish(*s, FinishReason::Error);
      }
    }
    publish_stats();
    wake.notify_all();  // stop() waits for the queue to drain
    if (!progressed && !requests.empty()) {
      // Nothing could run (every block held by waiting work cannot happen: preemption frees them): wait for a cancel.
      std::unique_lock lock(mu);
      wake.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
}

void Engine::Impl::publish_stats() {
  std::lock_guard lock(mu);
  stats.running = static_cast<int64_t>(running.size());
  stats.waiting = static_cast<int64_t>(waiting.size());
  stats.kv_blocks_used = pool.used();
  stats.kv_blocks_cached = pool.cached();
  stats.prefix_queries = pool.lookups();
  stats.prefix_hits = pool.hits();
}

void Engine::Impl::apply_cancels() {
  std::vector<std::pair<uint64_t, FinishReason>> todo;
  {
    std::lock_guard lock(mu);
    todo.swap(cancels);
  }
  for (const auto& [id, reason] : todo) {
    auto it = requests.find(id);
    if (it == requests.end()) continue;
    for (auto& s : it->second->seqs) {
      if (!s->done) finish(*s, reason);
    }
  }
}

void Engine::Impl::finish(Sequence& s, FinishReason r) {
  if (s.done) return;
  Request& req = *s.req;
  if (s.index == 0 && !s.forked && req.params.n > 1) {
    // The others never forked: they end with it.
    for (size_t i = 1; i < req.seqs.size(); ++i) {
      Sequence& o = *req.seqs[i];
      o.done = true;
      req.sink->on_finish(o.index, r);
      ++req.finished;
    }
  }
  s.done = true;
  pool.release_all(s.blocks);
  std::erase(running, &s);
  std::erase(waiting, &s);
  s.running = false;
  req.sink->on_finish(s.index, r);
  if (++req.finished == req.params.n) end_request(req);
}

void Engine::Impl::end_request(Request& r) {
  publish_stats();  // the request's blocks show as free before its client hears it is done
  r.sink->on_done(r.usage, r.error);
  requests.erase(r.id);  // destroys r
  std::lock_guard lock(mu);
  --live;
  wake.notify_all();
}

// Gives s blocks for positions [0, upto): a new block where a table ends, a private copy where a shared block will be
// written. Preempts newer sequences when the pool is out; false when s itself should wait.
bool Engine::Impl::ensure_blocks(Sequence& s, int64_t upto) {
  const int64_t B = pool.block();
  // The block the next position is written to, if it is shared (n > 1 choices fork with a shared partial block).
  const int64_t first_written = s.computed / B;
  for (;;) {
    bool ok = true;
    if (first_written < static_cast<int64_t>(s.blocks.size()) &&
        !pool.copy_on_write(s.blocks, static_cast<size_t>(first_written))) {
      ok = false;
    }
    while (ok && static_cast<int64_t>(s.blocks.size()) * B < upto) {
      const int32_t b = pool.allocate();
      if (b < 0) {
        ok = false;
        break;
      }
      s.blocks.push_back(b);
    }
    if (ok) return true;
    if (!preempt_newest(&s)) return false;
  }
}

// Frees the newest running sequence other than keep (and newer than it) so that keep can go on.
bool Engine::Impl::preempt_newest(const Sequence* keep) {
  Sequence* victim = nullptr;
  for (Sequence* r : running) {
    if (r != keep && r->order > keep->order && (victim == nullptr || r->order > victim->order)) victim = r;
  }
  if (victim == nullptr) return false;
  preempt(*victim);
  return true;
}

// Recomputation: the sequence drops its blocks and goes back to the front of the queue with every token it has; when
// admitted again it prefills them all (from the prefix cache where it can), and samples on from the same generator.
void Engine::Impl::preempt(Sequence& s) {
  ++s.epoch;
  pool.release_all(s.blocks);
  s.computed = 0;
  s.published = 0;
  s.chain = 0;
  s.running = false;
  std::erase(running, &s);
  waiting.push_front(&s);
  std::lock_guard lock(mu);
  ++stats.preemptions;
}

// A newly admitted sequence takes the published blocks that match its tokens' full blocks, leaving at least its last
// token to compute (its logits are needed).
void Engine::Impl::admit_prefix(Sequence& s) {
  const int64_t B = pool.block();
  const auto n = static_cast<int64_t>(s.tokens.size());
  int32_t parent = -1;
  for (int64_t i = 0; (i + 1) * B <= n - 1; ++i) {
    const std::span<const int32_t> toks(s.tokens.data() + i * B, static_cast<size_t>(B));
    const uint64_t h = KvPool::chain(s.chain, toks);
    const int32_t b = pool.lookup(h, parent, toks);
    if (b < 0) break;
    s.blocks.push_back(b);
    s.chain = h;
    s.published = i + 1;
    s.computed = (i + 1) * B;
    parent = b;
  }
  if (s.index == 0 && s.generated == 0) s.req->usage.cached_prompt_tokens = s.computed;
}

const std::vector<uint64_t>& Engine::Impl::prompt_hashes(Sequence& s) {
  if (!s.hashed) {
    const int64_t B = pool.block();
    const auto n = static_cast<int64_t>(s.req->params.prompt.size());
    uint64_t h = 0;
    for (int64_t i = 0; (i + 1) * B <= n; ++i) {
      h = KvPool::chain(h, std::span<const int32_t>(s.tokens.data() + i * B, static_cast<size_t>(B)));
      s.hashes.push_back(h);
    }
    s.hashed = true;
  }
  return s.hashes;
}

void Engine::Impl::publish_full(Sequence& s) {
  const int64_t B = pool.block();
  while ((s.published + 1) * B <= s.computed) {
    const std::span<const int32_t> toks(s.tokens.data() + s.published * B, static_cast<size_t>(B));
    const uint64_t h = KvPool::chain(s.chain, toks);
    const int32_t parent = s.published > 0 ? s.blocks[static_cast<size_t>(s.published - 1)] : -1;
    pool.publish(s.blocks[static_cast<size_t>(s.published)], h, parent, toks);
    s.chain = h;
    ++s.published;
  }
}

// n > 1: when choice 0 has its prompt computed, choices 1.. take its tokens and blocks (sharing them) and sample their
// first token from the same logits.
void Engine::Impl::fork(Sequence& s) {
  s.forked = true;
  Request& r = *s.req;
  for (size_t i = 1; i < r.seqs.size(); ++i) {
    Sequence& o = *r.seqs[i];
    o.tokens = s.tokens;
    o.computed = s.computed;
    o.blocks = s.blocks;
    for (int32_t b : o.blocks) pool.retain(b);
    o.published = s.published;
    o.chain = s.chain;
    o.order = next_order++;
    o.running = true;
    running.push_back(&o);
  }
}

void Engine::Impl::emit(Sequence& s, std::span<const float> logits) {
  Request& r = *s.req;
  const RequestParams& p = r.params;
  const size_t from = p.prompt.size();
  SampledToken t = s.sampler.sample(logits, s.tokens, from, p.top_logprobs);
  const bool end = !p.ignore_eos && std::ranges::find(p.end_ids, t.id) != p.end_ids.end();
  if (end) {
    finish(s, FinishReason::Stop);
    return;
  }
  s.tokens.push_back(t.id);
  ++s.generated;
  ++r.usage.generated_tokens;
  {
    std::lock_guard lock(mu);
    ++stats.generated_tokens;
  }
  TokenEvent e;
  e.index = s.index;
  e.id = t.id;
  e.logprob = t.logprob;
  e.top = std::move(t.top);
  r.sink->on_token(e);
  if (s.generated >= p.max_tokens || static_cast<int64_t>(s.tokens.size()) >= opt.ctx_size) {
    finish(s, FinishReason::Length);
  }
}

// One iteration: the running sequences' next tokens, then prompt chunks (running prefills first, then new sequences)
// up to the token budget. Returns whether anything ran.
bool Engine::Impl::step() {
  int64_t budget = opt.max_batch_tokens;
  struct Planned {
    Sequence* s;
    int64_t n;  // tokens this step computes
    uint64_t epoch;
  };
  std::vector<Planned> plan;
  // Decodes first, oldest first, so that preemption (newest first) never takes a sequence already planned.
  std::vector<Sequence*> order(running);
  std::ranges::sort(order, [](const Sequence* a, const Sequence* b) { return a->order < b->order; });
  for (Sequence* s : order) {
    if (!s->running) continue;  // preempted by an older one in this loop
    const auto left = static_cast<int64_t>(s->tokens.size()) - s->computed;
    if (left != 1) continue;
    if (!ensure_blocks(*s, s->computed + 1)) {
      preempt(*s);
      continue;
    }
    plan.push_back({s, 1, s->epoch});
    --budget;
  }
  // While sequences decode, prompt chunks share the step up to prefill_chunk tokens: the step then takes a few times a
  // decode step's time, so the streams' gaps between tokens stay even. With nothing decoding, the whole budget.
  if (budget < opt.max_batch_tokens) budget = std::min(budget, opt.prefill_chunk);
  // Prefills of running sequences (admitted in an earlier step, their prompt not yet all computed).
  for (Sequence* s : order) {
    if (!s->running || budget <= 0) continue;
    const auto left = static_cast<int64_t>(s->tokens.size()) - s->computed;
    if (left <= 1) continue;  // planned as a decode, or waiting for its sample
    const int64_t n = std::min(left, budget);
    if (!ensure_blocks(*s, s->computed + n)) continue;
    plan.push_back({s, n, s->epoch});
    budget -= n;
  }
  // New sequences while there is room: a block for each running sequence's next token stays free (a watermark), so
  // that admitting one rarely forces a preemption at the next step. A sequence whose prompt shares a full block with a
  // prompt still being computed waits for it, then takes it from the prefix cache: requests that arrive together with
  // one system prompt compute it once, not once each.
  std::unordered_set<uint64_t> in_flight;
  if (opt.prefix_caching) {
    for (Sequence* r : running) {
      const std::vector<uint64_t>& h = prompt_hashes(*r);
      for (size_t i = static_cast<size_t>(r->published); i < h.size(); ++i) in_flight.insert(h[i]);
    }
  }
  for (size_t w = 0; w < waiting.size() && budget > 0 && static_cast<int64_t>(running.size()) < opt.max_seqs;) {
    Sequence* s = waiting[w];
    if (s->index == 0 && !s->forked && s->req->params.n > static_cast<int>(opt.max_seqs - running.size())) break;
    const auto shares = [&](uint64_t h) { return in_flight.contains(h); };
    if (!in_flight.empty() && std::ranges::any_of(prompt_hashes(*s), shares)) {
      ++w;
      continue;
    }
    admit_prefix(*s);
    const auto left = static_cast<int64_t>(s->tokens.size()) - s->computed;
    const int64_t n = std::min(left, budget);
    const int64_t B = pool.block();
    const int64_t need = (s->computed + n + B - 1) / B - static_cast<int64_t>(s->blocks.size());
    if (pool.available() - need < static_cast<int64_t>(running.size())) {
      pool.release_all(s->blocks);  // give back the prefix it took; it stays first in line
      s->computed = 0;
      s->published = 0;
      s->chain = 0;
      break;
    }
    waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(w));
    if (opt.prefix_caching) in_flight.insert(prompt_hashes(*s).begin(), prompt_hashes(*s).end());
    s->running = true;
    s->order = next_order++;
    running.push_back(s);
    if (!ensure_blocks(*s, s->computed + n)) {
      preempt(*s);
      break;
    }
    plan.push_back({s, n, s->epoch});
    budget -= n;
  }
  // Preempted by a later sequence's blocks (and perhaps admitted again, from position 0).
  std::erase_if(plan, [](const Planned& p) { return p.epoch != p.s->epoch || !p.s->running; });
  if (plan.empty()) return false;

  std::vector<graph::Segment> segs;
  segs.reserve(plan.size());
  int64_t tokens = 0, prompt_tokens = 0;
  for (const Planned& p : plan) {
    Sequence& s = *p.s;
    segs.push_back({std::span<const int32_t>(s.tokens.data() + s.computed, static_cast<size_t>(p.n)), s.computed,
                    &pool.cache(), s.blocks, /*all_rows=*/false});
    tokens += p.n;
    if (p.n > 1 || s.generated == 0) prompt_tokens += p.n;
  }
  const std::span<const float> logits = exec.run_batch(segs);
  {
    std::lock_guard lock(mu);
    ++stats.steps;
    stats.prompt_tokens += prompt_tokens;
    ++stats.batch_tokens_hist[static_cast<size_t>(bucket_of(tokens))];
    stats.batch_tokens_sum += tokens;
  }
  const auto V = static_cast<size_t>(model.config().vocab);
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i].s;
    s.computed += plan[i].n;
    publish_full(s);
    if (s.computed < static_cast<int64_t>(s.tokens.size())) continue;  // a prompt chunk: more to come
    const std::span<const float> row = logits.subspan(i * V, V);
    if (s.index == 0 && !s.forked && s.req->params.n > 1) {
      fork(s);
      for (auto& o : s.req->seqs) {
        if (o.get() != &s) emit(*o, row);
      }
    }
    emit(s, row);
  }
  return true;
}

}  // namespace ascent::engine
