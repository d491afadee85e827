// Requests side by side: each of 16 concurrent streams gives the text it gives alone (greedy, or seeded), and a
// client that aborts mid-stream leaves a server that still answers and holds no KV block for it.
import assert from "node:assert/strict";
import { test } from "node:test";

import { client, collect, kvUsed, modelName, waitKvIdle } from "./helpers.js";

const STARTS = ["Once upon a time", "The little dog", "Tom and Sue went to the park", "One day, a big bird",
                "Lily wanted to play", "There was a tree", "The sun was hot and", "Ben had a red ball",
                "Mom said", "A cat sat on", "In the forest", "The boy was sad because", "She found a box",
                "It was a rainy day", "The fish swam", "Sam liked to"];

// Requests 0-11 greedy, 12-15 sampled with their own seeds; lengths vary so the streams end at different steps.
function request(i) {
  const sampled = i >= 12;
  return { prompt: STARTS[i], max_tokens: 20 + 7 * i, temperature: sampled ? 0.9 : 0,
           ...(sampled ? { seed: 1000 + i, top_k: 40 } : {}) };
}

test("16 concurrent streams each equal its text alone", async () => {
  const model = await modelName();
  const alone = [];
  for (let i = 0; i < STARTS.length; i++) {
    const r = await client.completions.create({ model, ...request(i) });
    alone.push({ text: r.choices[0].text, finish: r.choices[0].finish_reason });
  }
  const together = await Promise.all(STARTS.map(async (_, i) =>
    collect(await client.completions.create({ model, ...request(i), stream: true }))));
  together.forEach((s, i) => {
    assert.equal(s.text, alone[i].text, `stream ${i} (${JSON.stringify(STARTS[i])}) differs from its text alone`);
    assert.equal(s.finish, alone[i].finish, `stream ${i}: finish_reason`);
  });
  // Chat too: 8 at once, greedy, against each alone.
  const chat = (i) => ({ model, messages: [{ role: "user", content: STARTS[i] }], max_tokens: 24, temperature: 0 });
  const chatAlone = [];
  for (let i = 0; i < 8; i++) {
    chatAlone.push((await client.chat.completions.create(chat(i))).choices[0].message.content);
  }
  const chatTogether = await Promise.all([...Array(8).keys()].map(async (i) =>
    collect(await client.chat.completions.create({ ...chat(i), stream: true }))));
  chatTogether.forEach((s, i) => assert.equal(s.text, chatAlone[i], `chat stream ${i}`));
});

// Reads a long stream until `after` chunks arrived, then aborts it. Returns how many chunks came and whether the
// server had already finished (then the abort tested nothing).
async function abortAfter(model, after, prompt) {
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model, prompt, max_tokens: 400, ignore_eos: true, temperature: 0, stream: true },
    { signal: controller.signal });
  let chunks = 0;
  let finished = false;
  try {
    for await (const chunk of stream) {
      chunks++;
      if (chunk.choices?.[0]?.finish_reason) finished = true;
      if (chunks >= after) controller.abort();
    }
  } catch (e) {
    if (!controller.signal.aborted) throw e;
  }
  return { chunks, finished };
}

test("an aborted stream is cancelled: the server answers and KV blocks used return to idle", async (t) => {
  const model = await modelName();
  // Nothing runs now (the files run one at a time, their tests in order), so this is the idle count.
  let idle;
  try {
    idle = (await kvUsed()).total;
    console.log(`KV blocks used at idle: ${idle}`);
  } catch (e) {
    idle = e;
  }
  const kvBackToIdle = async (what) => {
    if (idle instanceof Error) throw idle;
    await waitKvIdle(idle, what);
  };
  const runs = [await abortAfter(model, 1, STARTS[0])];
  runs.push(...(await Promise.all([1, 3, 10, 30].map((after, i) => abortAfter(model, after, STARTS[i + 1])))));
  console.log(`aborted after ${runs.map((r) => r.chunks).join(", ")} chunks; ` +
              `${runs.filter((r) => r.finished).length} had finished first`);
  await t.test("the server answers after 5 aborted streams", async () => {
    const r = await client.completions.create({ model, prompt: STARTS[5], max_tokens: 8, temperature: 0 });
    assert.ok(r.choices[0].text.length > 0, "no text");
  });
  await t.test("KV blocks used are back at idle", () => kvBackToIdle("after 5 aborted streams"));
  // Aborted right after the request is sent, before the first chunk.
  await Promise.all([6, 7, 8].map(async (i) => {
    const controller = new AbortController();
    const p = client.completions.create({ model, prompt: STARTS[i], max_tokens: 300, ignore_eos: true, stream: true },
                                        { signal: controller.signal });
    setTimeout(() => controller.abort(), 5);
    try {
      for await (const _ of await p);
    } catch (e) {
      if (!controller.signal.aborted) throw e;
    }
  }));
  await t.test("the server answers after 3 early aborts", async () => {
    const r = await client.completions.create({ model, prompt: STARTS[9], max_tokens: 8, temperature: 0 });
    assert.ok(r.choices[0].text.length > 0, "no text");
  });
  await t.test("KV blocks used are back at idle after early aborts", () => kvBackToIdle("after 3 early aborts"));
});
