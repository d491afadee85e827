// The API through the official OpenAI client: models, completions, chat, streaming, usage, stop, seed, max_tokens,
// logprobs, n, tokenize. Greedy (temperature 0) and seeded requests are deterministic, so each check compares the
// server with itself under another form of the same request: streamed against whole, cut by a stop string against
// uncut, n copies against one.
import assert from "node:assert/strict";
import { test } from "node:test";

import { client, collect, modelName, raw } from "./helpers.js";

const PROMPT = "Once upon a time, there was a little girl named Lily. She";
const MESSAGES = [{ role: "user", content: "Tell me a story about a cat." }];

function assertUsage(usage, what) {
  assert.ok(usage, `${what}: no usage`);
  assert.ok(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0, `${what}: prompt_tokens`);
  assert.ok(Number.isInteger(usage.completion_tokens) && usage.completion_tokens >= 0, `${what}: completion_tokens`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, `${what}: total_tokens`);
}

async function greedy(extra = {}) {
  return client.completions.create({ model: await modelName(), prompt: PROMPT, max_tokens: 32, temperature: 0,
                                     ...extra });
}

test("GET /health is 200 once the server is ready", async () => {
  const r = await raw("GET", "/health");
  assert.equal(r.status, 200, r.text);
});

test("GET /v1/models lists the served model", async () => {
  const list = await client.models.list();
  assert.ok(list.data.length >= 1, "no model listed");
  for (const m of list.data) {
    assert.equal(typeof m.id, "string");
    assert.equal(m.object, "model");
  }
  const r = await raw("GET", "/v1/models");
  assert.equal(r.json.object, "list");
  if (process.env.ASCENT_SERVE_MODEL) {
    assert.ok(list.data.some((m) => m.id === process.env.ASCENT_SERVE_MODEL),
              `${process.env.ASCENT_SERVE_MODEL} is not among ${list.data.map((m) => m.id).join(", ")}`);
  }
});

test("completions: a well-formed greedy answer, the same twice", async () => {
  const a = await greedy();
  assert.equal(a.object, "text_completion");
  assert.equal(typeof a.id, "string");
  assert.ok(Number.isInteger(a.created));
  assert.equal(a.model, await modelName());
  assert.equal(a.choices.length, 1);
  const c = a.choices[0];
  assert.equal(c.index, 0);
  assert.equal(typeof c.text, "string");
  assert.ok(c.text.length > 0, "empty text");
  assert.ok(["stop", "length"].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  assertUsage(a.usage, "completion");
  assert.ok(a.usage.completion_tokens >= 1 && a.usage.completion_tokens <= 32, `${a.usage.completion_tokens} tokens`);
  if (c.finish_reason === "length") assert.equal(a.usage.completion_tokens, 32);
  const b = await greedy();
  assert.equal(b.choices[0].text, c.text, "greedy text differs between two identical requests");
});

test("chat: a well-formed assistant message", async () => {
  const a = await client.chat.completions.create({ model: await modelName(), messages: MESSAGES, max_tokens: 24,
                                                   temperature: 0 });
  assert.equal(a.object, "chat.completion");
  assert.equal(typeof a.id, "string");
  assert.equal(a.choices.length, 1);
  const c = a.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, "assistant");
  assert.equal(typeof c.message.content, "string");
  assert.ok(["stop", "length"].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  assertUsage(a.usage, "chat");
  assert.ok(a.usage.completion_tokens <= 24);
  // A system message and a multi-turn history are accepted too.
  const b = await client.chat.completions.create({
    model: await modelName(), max_tokens: 8, temperature: 0,
    messages: [{ role: "system", content: "You tell stories." }, ...MESSAGES,
               { role: "assistant", content: "Once upon a time" }, { role: "user", content: "Go on." }],
  });
  assert.equal(b.choices[0].message.role, "assistant");
});

test("completions: streamed text equals the whole answer at temperature 0", async () => {
  const whole = await greedy({ max_tokens: 40 });
  const s = await collect(await client.completions.create({ model: await modelName(), prompt: PROMPT, max_tokens: 40,
                                                             temperature: 0, stream: true }));
  assert.ok(s.chunks.length >= 2, `${s.chunks.length} chunk(s)`);
  for (const ch of s.chunks) {
    assert.equal(ch.object, "text_completion");
    assert.equal(ch.id, s.chunks[0].id, "chunks of one stream carry different ids");
  }
  assert.equal(s.text, whole.choices[0].text);
  assert.equal(s.finish, whole.choices[0].finish_reason);
});

test("chat: streamed content equals the whole answer at temperature 0", async () => {
  const req = { model: await modelName(), messages: MESSAGES, max_tokens: 40, temperature: 0 };
  const whole = await client.chat.completions.create(req);
  const s = await collect(await client.chat.completions.create({ ...req, stream: true }));
  for (const ch of s.chunks) assert.equal(ch.object, "chat.completion.chunk");
  const roles = s.chunks.flatMap((ch) => ch.choices.map((c) => c.delta?.role)).filter(Boolean);
  assert.deepEqual([...new Set(roles)], ["assistant"], "the stream names no role, or another than assistant");
  assert.equal(s.text, whole.choices[0].message.content);
  assert.equal(s.finish, whole.choices[0].finish_reason);
});

test("stream_options.include_usage: one last chunk with usage and no choices", async (t) => {
  const whole = await greedy();
  const stream = async (include) => collect(await client.completions.create({
    model: await modelName(), prompt: PROMPT, max_tokens: 32, temperature: 0, stream: true,
    ...(include ? { stream_options: { include_usage: true } } : {}),
  }));
  await t.test("with include_usage", async () => {
    const s = await stream(true);
    const withUsage = s.chunks.filter((ch) => ch.usage);
    assert.equal(withUsage.length, 1, `${withUsage.length} chunks carry usage`);
    const last = s.chunks[s.chunks.length - 1];
    assert.ok(last.usage, "the usage chunk is not the last");
    assert.deepEqual(last.choices, [], "the usage chunk has choices");
    assertUsage(last.usage, "usage chunk");
    for (const k of ["prompt_tokens", "completion_tokens", "total_tokens"]) {
      assert.equal(last.usage[k], whole.usage[k], `streamed usage.${k} differs from the whole answer's`);
    }
  });
  await t.test("without include_usage", async () => {
    const s = await stream(false);
    assert.equal(s.chunks.filter((ch) => ch.usage).length, 0, "usage sent without stream_options.include_usage");
  });
  await t.test("chat", async () => {
    const c = await collect(await client.chat.completions.create({
      model: await modelName(), messages: MESSAGES, max_tokens: 16, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    }));
    const last = c.chunks[c.chunks.length - 1];
    assert.deepEqual(last.choices, [], "the usage chunk has choices");
    assertUsage(last.usage, "chat usage chunk");
  });
});

test("stop: the text ends before the first stop string, finish_reason stop", async () => {
  const full = (await greedy({ max_tokens: 48 })).choices[0].text;
  assert.ok(full.length >= 12, `the greedy text is too short to cut: ${JSON.stringify(full)}`);
  // Strings taken from the text's middle: one word-internal, one spanning a space (most likely across tokens).
  const at = Math.floor(full.length / 2);
  const cases = [[full.slice(at, at + 3)], [full.slice(at - 2, at + 2), "zzzq"],
                 [full.slice(4, 6), full.slice(at, at + 4)]];
  for (const stop of cases) {
    const cut = Math.min(...stop.map((s) => full.indexOf(s)).filter((i) => i >= 0));
    const r = await greedy({ max_tokens: 48, stop: stop.length === 1 ? stop[0] : stop });
    assert.equal(r.choices[0].text, full.slice(0, cut), `stop ${JSON.stringify(stop)} in ${JSON.stringify(full)}`);
    assert.equal(r.choices[0].finish_reason, "stop", `stop ${JSON.stringify(stop)}`);
    const s = await collect(await client.completions.create({ model: await modelName(), prompt: PROMPT, max_tokens: 48,
                                                               temperature: 0, stop, stream: true }));
    assert.equal(s.text, full.slice(0, cut), `streamed, stop ${JSON.stringify(stop)}`);
    assert.equal(s.finish, "stop");
  }
});

test("seed: the same seed gives the same text; different seeds sample", async () => {
  const req = async (seed) => (await client.completions.create({
    model: await modelName(), prompt: PROMPT, max_tokens: 32, temperature: 1.0, seed,
  })).choices[0].text;
  const a = await req(1234);
  assert.equal(await req(1234), a, "seed 1234 twice");
  const chat = async (seed) => (await client.chat.completions.create({
    model: await modelName(), messages: MESSAGES, max_tokens: 24, temperature: 0.9, top_p: 0.95, seed,
  })).choices[0].message.content;
  const c = await chat(99);
  assert.equal(await chat(99), c, "chat seed 99 twice");
  // At temperature 1 over 32 tokens, five seeds that all gave one text would mean the seed or temperature is ignored.
  const texts = new Set([a]);
  for (const seed of [1, 2, 3, 4]) texts.add(await req(seed));
  assert.ok(texts.size >= 2, "five seeds at temperature 1 all gave the same text");
});

test("max_tokens with ignore_eos: exactly max_tokens tokens, finish_reason length", async () => {
  for (const n of [1, 7, 60]) {
    const r = await greedy({ max_tokens: n, ignore_eos: true });
    assert.equal(r.usage.completion_tokens, n, `max_tokens ${n}`);
    assert.equal(r.choices[0].finish_reason, "length", `max_tokens ${n}`);
  }
  const s = await collect(await client.completions.create({
    model: await modelName(), prompt: PROMPT, max_tokens: 20, ignore_eos: true, temperature: 0.8, seed: 5,
    stream: true, stream_options: { include_usage: true },
  }));
  assert.equal(s.chunks[s.chunks.length - 1].usage.completion_tokens, 20);
  assert.equal(s.finish, "length");
});

function assertSortedDesc(values, what) {
  for (let i = 1; i < values.length; i++) assert.ok(values[i - 1] >= values[i], `${what}: not sorted: ${values}`);
}

function assertLogprob(v, what) {
  assert.ok(typeof v === "number" && Number.isFinite(v) && v <= 0, `${what}: logprob ${v}`);
}

test("logprobs (completions): one per token, <= 0, top lists sorted, greedy picks the first", async () => {
  const r = await greedy({ max_tokens: 12, logprobs: 3 });
  const c = r.choices[0];
  const lp = c.logprobs;
  assert.ok(lp, "no logprobs");
  const n = r.usage.completion_tokens;
  assert.equal(lp.tokens.length, n, "tokens");
  assert.equal(lp.token_logprobs.length, n, "token_logprobs");
  assert.equal(lp.top_logprobs.length, n, "top_logprobs");
  assert.equal(lp.tokens.join(""), c.text, "the tokens do not spell the text");
  for (let i = 0; i < n; i++) {
    assertLogprob(lp.token_logprobs[i], `token ${i}`);
    const top = Object.entries(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3, `token ${i}: ${top.length} alternatives`);
    top.forEach(([, v]) => assertLogprob(v, `token ${i} alternative`));
    const values = top.map(([, v]) => v);
    assertSortedDesc(values, `token ${i}`);
    assert.ok(values.reduce((s, v) => s + Math.exp(v), 0) <= 1 + 1e-4, `token ${i}: probabilities sum past 1`);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(lp.token_logprobs[i] - values[0]) <= 1e-5, `token ${i}: chosen ${lp.token_logprobs[i]}, ` +
                                                                  `top ${values[0]}`);
    assert.equal(top[0][0], lp.tokens[i], `token ${i}: the greedy token is not the first alternative`);
  }
  // Logprobs change nothing in what is generated.
  assert.equal(c.text, (await greedy({ max_tokens: 12 })).choices[0].text);
});

test("logprobs (chat): content entries with sorted top_logprobs", async () => {
  const r = await client.chat.completions.create({ model: await modelName(), messages: MESSAGES, max_tokens: 12,
                                                   temperature: 0, logprobs: true, top_logprobs: 4 });
  const c = r.choices[0];
  const content = c.logprobs?.content;
  assert.ok(Array.isArray(content), "no logprobs.content");
  assert.equal(content.length, r.usage.completion_tokens);
  assert.equal(content.map((e) => e.token).join(""), c.message.content, "the tokens do not spell the content");
  content.forEach((e, i) => {
    assert.equal(typeof e.token, "string");
    assertLogprob(e.logprob, `token ${i}`);
    assert.equal(e.top_logprobs.length, 4, `token ${i}: ${e.top_logprobs.length} alternatives`);
    e.top_logprobs.forEach((t) => assertLogprob(t.logprob, `token ${i} alternative`));
    assertSortedDesc(e.top_logprobs.map((t) => t.logprob), `token ${i}`);
    assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) <= 1e-5, `token ${i}: greedy is not the first`);
    if (e.bytes) assert.equal(Buffer.from(e.bytes).toString("utf8"), e.token, `token ${i}: bytes`);
  });
  // Streamed, the same entries arrive chunk by chunk.
  const s = await collect(await client.chat.completions.create({ model: await modelName(), messages: MESSAGES,
                                                                  max_tokens: 12, temperature: 0, logprobs: true,
                                                                  top_logprobs: 4, stream: true }));
  const streamed = s.chunks.flatMap((ch) => ch.choices.flatMap((x) => x.logprobs?.content ?? []));
  assert.deepEqual(streamed.map((e) => e.token), content.map((e) => e.token));
  streamed.forEach((e, i) => assert.ok(Math.abs(e.logprob - content[i].logprob) <= 1e-5, `streamed token ${i}`));
});

test("n: n choices, indexed; greedy copies agree; seeded choices reproduce", async (t) => {
  await t.test("greedy: n copies of the one text", async () => {
    const one = (await greedy({ max_tokens: 16 })).choices[0].text;
    const g = await greedy({ max_tokens: 16, n: 3 });
    assert.equal(g.choices.length, 3);
    assert.deepEqual(g.choices.map((c) => c.index).sort(), [0, 1, 2]);
    for (const c of g.choices) assert.equal(c.text, one, `greedy choice ${c.index}`);
  });
  const req = { model: await modelName(), prompt: PROMPT, max_tokens: 10, ignore_eos: true, temperature: 1.0,
                seed: 7, n: 4 };
  const byIndex = (r) => r.choices.slice().sort((x, y) => x.index - y.index).map((c) => c.text);
  const a = await client.completions.create(req);
  await t.test("sampled: 4 well-formed choices", () => {
    assert.equal(a.choices.length, 4);
    assert.deepEqual(a.choices.map((c) => c.index).sort(), [0, 1, 2, 3]);
    for (const c of a.choices) {
      assert.equal(typeof c.text, "string");
      assert.equal(c.finish_reason, "length");
    }
  });
  await t.test("usage counts every choice's tokens", () => assert.equal(a.usage.completion_tokens, 40));
  await t.test("the same seeded request twice", async () =>
    assert.deepEqual(byIndex(await client.completions.create(req)), byIndex(a)));
  await t.test("streamed, the choices spell the same texts", async () => {
    const s = await collect(await client.completions.create({ ...req, stream: true }));
    assert.deepEqual([0, 1, 2, 3].map((i) => s.texts.get(i)), byIndex(a));
  });
  await t.test("chat", async () => {
    const chat = await client.chat.completions.create({ model: await modelName(), messages: MESSAGES, max_tokens: 8,
                                                        temperature: 0.8, seed: 3, n: 2 });
    assert.equal(chat.choices.length, 2);
    for (const c of chat.choices) assert.equal(c.message.role, "assistant");
  });
});

test("/tokenize and /detokenize round-trip plain text", async (t) => {
  const text = "Once upon a time, there was a little cat.";
  const r = await raw("POST", "/tokenize", JSON.stringify({ content: text }));
  assert.equal(r.status, 200, r.text);
  const tokens = r.json.tokens;
  assert.ok(Array.isArray(tokens) && tokens.length > 0 && tokens.every(Number.isInteger), r.text);
  await t.test("detokenize gives the text back", async () => {
    const d = await raw("POST", "/detokenize", JSON.stringify({ tokens }));
    assert.equal(d.status, 200, d.text);
    assert.equal(d.json.content, text);
  });
  await t.test("usage counts the prompt's tokens, with at most one BOS added", async () => {
    const c = await client.completions.create({ model: await modelName(), prompt: text, max_tokens: 1 });
    assert.ok([tokens.length, tokens.length + 1].includes(c.usage.prompt_tokens),
              `prompt_tokens ${c.usage.prompt_tokens} for ${tokens.length} tokens`);
  });
});
