// What the suite's files share: the client for the server under test (from the environment tests/serve/run.py
// sets), raw HTTP for what the client cannot send, and the server's KV block count from /metrics.
import assert from "node:assert/strict";
import OpenAI from "openai";

export const baseURL = (process.env.ASCENT_SERVE_URL ?? "").replace(/\/+$/, "");
if (!baseURL) {
  throw new Error("ASCENT_SERVE_URL is not set: run the suite through tests/serve/run.py, which starts the server");
}
export const apiKey = process.env.ASCENT_SERVE_API_KEY ?? "";

// No retries: a retried 5xx or dropped connection would hide the fault under test.
export const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: apiKey || "no-key", maxRetries: 0,
                                   timeout: 120_000 });

let cachedModel;
// The name to send as "model": ASCENT_SERVE_MODEL, else the first the server lists.
export async function modelName() {
  if (cachedModel === undefined) {
    cachedModel = process.env.ASCENT_SERVE_MODEL || (await client.models.list()).data[0].id;
  }
  return cachedModel;
}

// One HTTP exchange with the body given as a string or bytes (so it may be malformed). Returns the status, the
// headers, the body's text and its JSON (null when it is not JSON).
export async function raw(method, path, body, { auth = true, headers = {} } = {}) {
  const h = { ...headers };
  if (body !== undefined && !("content-type" in h)) h["content-type"] = "application/json";
  if (auth && apiKey) h.authorization = `Bearer ${apiKey}`;
  const res = await fetch(`${baseURL}${path}`, { method, headers: h, body });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON: json stays null and the caller's checks say so
  }
  return { status: res.status, headers: res.headers, text, json };
}

// Asserts an OpenAI error body: {"error": {"message": non-empty string, "type": string, "param", "code"}}, with
// param equal to `param` when given.
export function assertErrorBody(json, what, param) {
  assert.ok(json && typeof json.error === "object" && json.error !== null, `${what}: no error object in the body`);
  const e = json.error;
  assert.equal(typeof e.message, "string", `${what}: error.message is not a string`);
  assert.ok(e.message.length > 0, `${what}: error.message is empty`);
  assert.equal(typeof e.type, "string", `${what}: error.type is not a string`);
  assert.ok("param" in e, `${what}: error has no param key`);
  assert.ok("code" in e, `${what}: error has no code key`);
  if (param !== undefined) assert.equal(e.param, param, `${what}: error.param (message: ${e.message})`);
}

// Runs fn, which must throw the client's APIError with this status; returns the error.
export async function expectStatus(status, what, fn) {
  let err;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  assert.ok(err, `${what}: the request succeeded; expected HTTP ${status}`);
  assert.ok(err instanceof OpenAI.APIError, `${what}: expected an APIError, got ${err}`);
  assert.equal(err.status, status, `${what}: status (${err.message})`);
  return err;
}

// A stream's text and finish reason: the deltas of choice `index` joined, for completions or chat chunks.
export async function collect(stream) {
  const texts = new Map();
  const finish = new Map();
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    for (const c of chunk.choices ?? []) {
      const piece = c.text ?? c.delta?.content ?? "";
      texts.set(c.index, (texts.get(c.index) ?? "") + piece);
      if (c.finish_reason) finish.set(c.index, c.finish_reason);
    }
  }
  return { chunks, text: texts.get(0) ?? "", finish: finish.get(0) ?? null, texts, finishes: finish };
}

// Metric lines of /metrics (Prometheus text format) as [name, labels, value].
export async function metrics() {
  const r = await raw("GET", "/metrics");
  assert.equal(r.status, 200, `GET /metrics: ${r.text.slice(0, 200)}`);
  const out = [];
  for (const line of r.text.split("\n")) {
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line.trim());
    if (m) out.push([m[1], m[2] ?? "", Number(m[3])]);
  }
  return out;
}

// The KV blocks held by sequences: every series of each metric whose name holds "kv" and "used" (any case), other
// than ones that count a prefix cache. Returns {names, total}; fails, listing the names seen, when there is none.
export async function kvUsed() {
  const all = await metrics();
  const rows = all.filter(([n]) => /kv/i.test(n) && /used/i.test(n) && !/cached|prefix/i.test(n));
  assert.ok(rows.length > 0, `/metrics has no metric named with "kv" and "used"; it has: ` +
                             [...new Set(all.map(([n]) => n))].join(", "));
  return { names: [...new Set(rows.map(([n, l]) => n + l))], total: rows.reduce((s, [, , v]) => s + v, 0) };
}

// Waits until the KV blocks used come back to `idle` (the cancellation of a dropped request may land a little after
// the drop), then asserts it.
export async function waitKvIdle(idle, what, timeoutMs = 20_000) {
  const end = Date.now() + timeoutMs;
  let now = await kvUsed();
  while (now.total !== idle && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 200));
    now = await kvUsed();
  }
  console.log(`${what}: ${now.names.join(", ")} = ${now.total} (idle ${idle})`);
  assert.equal(now.total, idle, `${what}: KV blocks used (${now.names.join(", ")}) did not return to idle`);
}
