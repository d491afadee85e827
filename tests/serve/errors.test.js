// Errors as OpenAI gives them: a status and {"error": {"message", "type", "param", "code"}}, with param naming the
// field at fault. The client's error classes must see them as OpenAI's.
import assert from "node:assert/strict";
import { test } from "node:test";
import OpenAI from "openai";

import { apiKey, assertErrorBody, baseURL, client, expectStatus, modelName, raw } from "./helpers.js";

const PROMPT = "Once upon a time";

test("an unknown model is 404", async (t) => {
  await t.test("completions", async () => {
    const e = await expectStatus(404, "completions", () =>
      client.completions.create({ model: "no-such-model", prompt: PROMPT, max_tokens: 4 }));
    assert.ok(e instanceof OpenAI.NotFoundError);
  });
  await t.test("chat", () => expectStatus(404, "chat", () =>
    client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] })));
  await t.test("the error body", async () => {
    const r = await raw("POST", "/v1/completions", JSON.stringify({ model: "no-such-model", prompt: PROMPT }));
    assert.equal(r.status, 404);
    assertErrorBody(r.json, "unknown model");
  });
});

test("an unknown route is 404, a wrong method 405", async (t) => {
  await t.test("GET /v1/no-such-route", async () => {
    const r = await raw("GET", "/v1/no-such-route");
    assert.equal(r.status, 404);
    assertErrorBody(r.json, "unknown route");
  });
  for (const [method, path] of [["GET", "/v1/completions"], ["GET", "/v1/chat/completions"], ["POST", "/v1/models"],
                                ["DELETE", "/v1/completions"]]) {
    await t.test(`${method} ${path}`, async () => {
      const w = await raw(method, path, method === "POST" ? "{}" : undefined);
      assert.equal(w.status, 405, `${method} ${path}: ${w.text.slice(0, 200)}`);
      assertErrorBody(w.json, `${method} ${path}`);
    });
  }
});

// Each value is out of its documented range (OpenAI's, or Ascent's sampler's for min_p and repetition_penalty); the
// error's param must name the field.
const OUT_OF_RANGE = [
  ["temperature", -1],
  ["top_p", 1.5],
  ["min_p", 1.5],
  ["min_p", -0.1],
  ["repetition_penalty", 0],
  ["presence_penalty", 2.5],
  ["frequency_penalty", -2.5],
  ["max_tokens", -1],
  ["n", 0],
  ["logprobs", -1],
  ["logit_bias", { 5: 500 }],
  ["stop", ["a", "b", "c", "d", "e"]],
];

test("out-of-range values are 400 naming the field", async (t) => {
  const model = await modelName();
  for (const [field, value] of OUT_OF_RANGE) {
    await t.test(`${field}=${JSON.stringify(value)}`, async () => {
      const e = await expectStatus(400, `${field}=${JSON.stringify(value)}`, () =>
        client.completions.create({ model, prompt: PROMPT, max_tokens: 4, [field]: value }));
      assert.ok(e instanceof OpenAI.BadRequestError);
      assert.equal(e.param, field, `${field}=${JSON.stringify(value)}: param (${e.message})`);
    });
  }
  await t.test("chat top_logprobs=-1", async () => {
    const e = await expectStatus(400, "top_logprobs=-1", () =>
      client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], logprobs: true,
                                      top_logprobs: -1 }));
    assert.equal(e.param, "top_logprobs");
  });
});

test("wrong types are 400 naming the field", async (t) => {
  const model = await modelName();
  for (const [field, value] of [["max_tokens", "4"], ["temperature", "hot"], ["prompt", { text: PROMPT }],
                                ["stream", "yes"], ["seed", 1.5], ["stop", 5], ["logit_bias", [1, 2]]]) {
    await t.test(`${field}=${JSON.stringify(value)}`, async () => {
      const body = { model, prompt: PROMPT, max_tokens: 4, [field]: value };
      const r = await raw("POST", "/v1/completions", JSON.stringify(body));
      assert.equal(r.status, 400, `${field}=${JSON.stringify(value)}: ${r.text.slice(0, 200)}`);
      assertErrorBody(r.json, `${field}=${JSON.stringify(value)}`, field);
    });
  }
});

test("malformed or incomplete JSON is 400", async (t) => {
  const model = await modelName();
  for (const body of ["{", `{"model": "${model}", "prompt": "Once"`, "not json", "", "[]", "null", "{\"prompt\": }"]) {
    await t.test(`body ${JSON.stringify(body)}`, async () => {
      const r = await raw("POST", "/v1/completions", body);
      assert.equal(r.status, 400, `body ${JSON.stringify(body)}: ${r.text.slice(0, 200)}`);
      assertErrorBody(r.json, `body ${JSON.stringify(body)}`);
    });
  }
  await t.test("no prompt", async () => {
    const r = await raw("POST", "/v1/completions", JSON.stringify({ model, max_tokens: 4 }));
    assert.equal(r.status, 400, r.text.slice(0, 200));
    assertErrorBody(r.json, "no prompt", "prompt");
  });
  await t.test("no messages", async () => {
    const r = await raw("POST", "/v1/chat/completions", JSON.stringify({ model, max_tokens: 4 }));
    assert.equal(r.status, 400, r.text.slice(0, 200));
    assertErrorBody(r.json, "no messages", "messages");
  });
});

test("a missing or wrong API key is 401", async (t) => {
  assert.ok(apiKey, "ASCENT_SERVE_API_KEY is not set: the suite expects a server started with --api-key");
  const model = await modelName();
  const body = JSON.stringify({ model, prompt: PROMPT, max_tokens: 4 });
  await t.test("no key", async () => {
    const r = await raw("POST", "/v1/completions", body, { auth: false });
    assert.equal(r.status, 401, r.text.slice(0, 200));
    assertErrorBody(r.json, "no key");
  });
  await t.test("a wrong key", async () => {
    const r = await raw("POST", "/v1/completions", body, { auth: false,
                                                           headers: { authorization: `Bearer ${apiKey}x` } });
    assert.equal(r.status, 401, r.text.slice(0, 200));
    assertErrorBody(r.json, "wrong key");
  });
  await t.test("GET /v1/models without a key", async () => {
    const r = await raw("GET", "/v1/models", undefined, { auth: false });
    assert.equal(r.status, 401, r.text.slice(0, 200));
  });
  await t.test("the client with a wrong key", async () => {
    const other = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "wrong-key", maxRetries: 0 });
    const e = await expectStatus(401, "client with a wrong key", () =>
      other.completions.create({ model, prompt: PROMPT, max_tokens: 4 }));
    assert.ok(e instanceof OpenAI.AuthenticationError);
  });
});

test("a prompt beyond the context is 400", async (t) => {
  const model = await modelName();
  await t.test("a prompt of thousands of tokens", async () => {
    const long = "Once upon a time, there was a little girl. ".repeat(400);
    const e = await expectStatus(400, "a prompt of thousands of tokens", () =>
      client.completions.create({ model, prompt: long, max_tokens: 4 }));
    assert.ok(e.error?.message, "no error message");
  });
  await t.test("max_tokens past the context", () => expectStatus(400, "max_tokens past the context", () =>
    client.completions.create({ model, prompt: PROMPT, max_tokens: 1_000_000 })));
});
