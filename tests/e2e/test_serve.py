"""`ascent serve` end to end on story-656K, driven by Python's own http.client. Greedy completions give the text and
token count `ascent generate --temp 0` gives for the same prompt, by text and by token ids; a streamed response
carries the same text as a whole one; stop strings cut the text where they begin, streamed or not; chat answers in
OpenAI's shapes; bad fields, unknown models and routes, wrong methods, large bodies and missing keys get OpenAI's
errors and statuses; /metrics is Prometheus text whose counters follow the requests; a client that leaves has its
request cancelled; SIGTERM exits 0."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

from common import ASCENT, SHARED, check, finish, no_sanitizer_report, run

MODEL = os.path.join(SHARED, "models", "story-656K")
PROMPT = "Once upon a time, there was a little"


class Server:
    """An `ascent serve` process on a free port; its stderr is collected line by line."""

    def __init__(self, *flags):
        self.proc = subprocess.Popen([ASCENT, "serve", "-m", MODEL, "--port", "0", *flags], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.ready = threading.Event()
        self.port = None
        threading.Thread(target=self._read, daemon=True).start()
        self.ready.wait(120)

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            m = re.match(r"ascent serve: listening on http://([0-9.]+):(\d+)$", line.strip())
            if m:
                self.port = int(m.group(2))
                self.ready.set()
        self.ready.set()

    def request(self, method, path, body=None, headers=None, raw=None):
        """(status, headers, body text) of one request on a new connection."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        return r.status, dict(r.getheaders()), text

    def post(self, path, body, headers=None):
        status, _, text = self.request("POST", path, body, headers)
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def stream(self, path, body):
        """The JSON of each server-sent event, and whether the stream ended with [DONE]."""
        status, hdrs, text = self.request("POST", path, body)
        events = [e for e in text.split("\n\n") if e]
        done = bool(events) and events[-1] == "data: [DONE]"
        chunks = [json.loads(e[len("data: "):]) for e in events if e.startswith("data: {")]
        ok = status == 200 and hdrs.get("Content-Type") == "text/event-stream" and all(
            e.startswith("data: ") for e in events)
        return ok, chunks, done

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = None
        r = subprocess.CompletedProcess(self.proc.args, code, "", "".join(self.lines))
        no_sanitizer_report(r, "ascent serve")
        return code


def generate_reference(prompt, n):
    """`ascent generate --temp 0`: the generated ids (after the prompt's) and the text."""
    ids = run(["generate", "-m", MODEL, "-p", prompt, "-n", n, "--temp", 0, "--print-ids"])
    text = run(["generate", "-m", MODEL, "-p", prompt, "-n", n, "--temp", 0])
    all_ids = [int(x) for x in ids.stdout.split()]
    return all_ids, text.stdout[:-1]  # generate ends the text with a newline


def check_completions(s):
    n = 40
    all_ids, ref_text = generate_reference(PROMPT, n)
    status, tok = s.post("/tokenize", {"content": PROMPT, "add_special": True})
    prompt_ids = tok.get("tokens", []) if status == 200 else []
    check(status == 200 and all_ids[:len(prompt_ids)] == prompt_ids,
          f"/tokenize with add_special gives generate's prompt ids: {prompt_ids}")
    gen_ids = all_ids[len(prompt_ids):]
    req = {"model": "story-656K", "prompt": PROMPT, "max_tokens": n, "temperature": 0}
    status, r = s.post("/v1/completions", req)
    ok = status == 200 and isinstance(r, dict)
    check(ok and r["object"] == "text_completion" and r["id"].startswith("cmpl-") and r["model"] == "story-656K"
          and isinstance(r["created"], int) and len(r["choices"]) == 1 and r["choices"][0]["index"] == 0,
          f"completions: OpenAI's shape: {str(r)[:300]}")
    if not ok:
        return None
    c = r["choices"][0]
    check(c["text"] == ref_text, f"completions at temperature 0 give generate's text: {c['text']!r} vs {ref_text!r}")
    u = r["usage"]
    check(u["prompt_tokens"] == len(prompt_ids) and u["completion_tokens"] == len(gen_ids)
          and u["total_tokens"] == len(prompt_ids) + len(gen_ids),
          f"usage counts generate's tokens: {u}, prompt {len(prompt_ids)}, generated {len(gen_ids)}")
    want_reason = "length" if len(gen_ids) == n else "stop"
    check(c["finish_reason"] == want_reason, f"finish_reason {c['finish_reason']}, want {want_reason}")
    # The same prompt as ids, and the generated ids back through /detokenize.
    status, r2 = s.post("/v1/completions", {**req, "prompt": prompt_ids})
    check(status == 200 and r2["choices"][0]["text"] == ref_text, "a prompt of token ids gives the same text")
    status, d = s.post("/detokenize", {"tokens": gen_ids})
    check(status == 200 and d["content"].lstrip(" ") == ref_text.lstrip(" "),
          f"/detokenize of generate's ids is the completion's text: {d}")
    # Token by token: logprobs' tokens are the pieces of generate's ids, and banning the first generated id with
    # logit_bias changes the first token.
    status, r3 = s.post("/v1/completions", {**req, "logprobs": 2})
    lp = r3["choices"][0]["logprobs"] if status == 200 else None
    check(lp is not None and len(lp["tokens"]) == len(gen_ids) and len(lp["token_logprobs"]) == len(gen_ids)
          and all(len(t) == 2 for t in lp["top_logprobs"]) and all(x <= 0 for x in lp["token_logprobs"]),
          f"logprobs: one entry per token, two alternatives each: {str(lp)[:200]}")
    if lp is not None:
        firsts = [max(t.items(), key=lambda kv: kv[1])[0] for t in lp["top_logprobs"]]
        check(firsts == lp["tokens"], "at temperature 0 each token is its position's most likely one")
        status, pieces = s.post("/detokenize", {"tokens": gen_ids[:1]})
        check(lp["tokens"][0].strip() == pieces["content"].strip(), f"the first token is generate's first: {pieces}")
    status, r4 = s.post("/v1/completions", {**req, "logit_bias": {str(gen_ids[0]): -100}, "max_tokens": 1})
    status2, d = s.post("/detokenize", {"tokens": gen_ids[:1]})
    check(status == 200 and r4["choices"][0]["text"].strip() != d["content"].strip(),
          f"logit_bias -100 on generate's first token changes it: {r4['choices'][0]['text']!r} vs {d['content']!r}")
    return c["text"]


def check_streaming(s, text):
    req = {"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "stream": True,
           "stream_options": {"include_usage": True}}
    ok, chunks, done = s.stream("/v1/completions", req)
    pieces = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    check(ok and done and all(c["object"] == "text_completion" for c in chunks),
          f"a completions stream: SSE chunks ending in [DONE] ({len(chunks)} chunks)")
    check("".join(pieces) == text, f"streamed text equals the whole response: {''.join(pieces)!r}")
    check(chunks and chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0,
          f"include_usage: a last chunk with usage and no choices: {chunks[-1] if chunks else None}")
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    check(reasons[-1] in ("stop", "length") and all(r is None for r in reasons[:-1]),
          f"only the last chunk of the choice has a finish_reason: {reasons[-3:]}")


def check_stop_strings(s, text):
    # A stop string that starts inside one token and ends in another: the text ends where it begins.
    stop = text[7:13]
    want = text[:text.index(stop)]
    req = {"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "stop": [stop, "zzzz"]}
    status, r = s.post("/v1/completions", req)
    check(status == 200 and r["choices"][0]["text"] == want and r["choices"][0]["finish_reason"] == "stop",
          f"stop {stop!r}: text {r['choices'][0]['text']!r}, want {want!r}, reason {r['choices'][0]['finish_reason']}")
    ok, chunks, done = s.stream("/v1/completions", {**req, "stream": True})
    streamed = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    check(ok and done and streamed == want, f"streamed with the stop string: {streamed!r}")
    check(not any(stop[:k] in c["choices"][0]["text"] for c in chunks for k in (len(stop),)),
          "no chunk shows the stop string")
    # n=2 at temperature 0: both choices are the one greedy text, each cut by the stop string.
    status, r = s.post("/v1/completions", {**req, "n": 2})
    check(status == 200 and [c["index"] for c in r["choices"]] == [0, 1]
          and all(c["text"] == want and c["finish_reason"] == "stop" for c in r["choices"]),
          f"n=2 with a stop string: {[c['text'] for c in r['choices']] if status == 200 else r}")


def check_seeds(s):
    req = {"prompt": PROMPT, "max_tokens": 24, "temperature": 1.0, "seed": 1234}
    a = s.post("/v1/completions", req)[1]["choices"][0]["text"]
    b = s.post("/v1/completions", req)[1]["choices"][0]["text"]
    texts = {s.post("/v1/completions", {**req, "seed": k})[1]["choices"][0]["text"] for k in range(4)}
    check(a == b and len(texts) > 1, f"a seed reproduces its text, other seeds differ: {len(texts)} texts")


def check_chat(s):
    msgs = [{"role": "user", "content": "Tell me a story."}]
    req = {"model": "story-656K", "messages": msgs, "max_tokens": 20, "temperature": 0}
    status, r = s.post("/v1/chat/completions", req)
    ok = status == 200 and r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    check(ok and r["choices"][0]["message"]["role"] == "assistant" and isinstance(r["choices"][0]["message"]["content"],
                                                                                  str),
          f"chat: OpenAI's shape: {str(r)[:300]}")
    if not ok:
        return
    # ChatML (the model has none) around the message: its tokens are the prompt's.
    status, tok = s.post("/tokenize", {"content": "<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n"})
    check(r["usage"]["prompt_tokens"] == len(tok["tokens"]),
          f"chat prompt is the ChatML rendering: {r['usage']['prompt_tokens']} vs {len(tok['tokens'])} tokens")
    ok, chunks, done = s.stream("/v1/chat/completions", {**req, "stream": True})
    first = chunks[0]["choices"][0]["delta"] if chunks else None
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    check(ok and done and first == {"role": "assistant", "content": ""}
          and all(c["object"] == "chat.completion.chunk" for c in chunks),
          f"a chat stream starts with the role: {first}")
    check(text == r["choices"][0]["message"]["content"], "streamed chat text equals the whole response")
    status, r = s.post("/v1/chat/completions", {**req, "logprobs": True, "top_logprobs": 1})
    content = r["choices"][0]["logprobs"]["content"] if status == 200 else []
    check(len(content) == r["usage"]["completion_tokens"] and all(len(e["top_logprobs"]) == 1 for e in content),
          "chat logprobs: one entry per token")


def check_errors(s):
    def err(status, body, want_status, want_param, what, code=None):
        e = body.get("error", {}) if isinstance(body, dict) else {}
        check(status == want_status and e.get("type") and e.get("message") and e.get("param") == want_param
              and (code is None or e.get("code") == code),
              f"{what}: {status} {str(body)[:200]}")

    st, _, text = s.request("POST", "/v1/completions", raw="{not json")
    err(st, json.loads(text), 400, None, "bad JSON is 400")
    err(*s.post("/v1/completions", {"prompt": "a", "temperature": "hot"}), 400, "temperature", "wrong type")
    err(*s.post("/v1/completions", {"prompt": "a", "top_p": 1.5}), 400, "top_p", "out of range")
    err(*s.post("/v1/completions", {"prompt": "a", "n": 99}), 400, "n", "n past the limit")
    err(*s.post("/v1/completions", {"prompt": [1, 99999]}), 400, "prompt", "an id outside the vocabulary")
    err(*s.post("/v1/completions", {"prompt": "a", "max_tokens": 5000}), 400, "max_tokens",
        "prompt + max_tokens past the context", "context_length_exceeded")
    err(*s.post("/v1/completions", {"prompt": "a " * 600}), 400, "prompt", "a prompt past the context",
        "context_length_exceeded")
    err(*s.post("/v1/chat/completions", {"messages": [{"content": "x"}]}), 400, "messages[0].role", "a message's role")
    err(*s.post("/v1/completions", {"model": "gpt-4", "prompt": "a"}), 404, "model", "unknown model",
        "model_not_found")
    st, _, text = s.request("POST", "/v1/nothing", {})
    err(st, json.loads(text), 404, None, "unknown route")
    st, hdrs, text = s.request("GET", "/v1/completions")
    err(st, json.loads(text), 405, None, "wrong method")
    check(hdrs.get("Allow") == "POST", f"405 names the method: {hdrs.get('Allow')}")
    st, _, text = s.request("POST", "/v1/completions", raw="x" * 200_000)
    err(st, json.loads(text), 413, None, "a body over --max-body")
    err(*s.post("/detokenize", {"tokens": [-1]}), 400, "tokens", "detokenize of a bad id")
    st, r = s.post("/tokenize", {"content": "a", "add_special": "yes"})
    err(st, r, 400, "add_special", "tokenize with a bad flag")


def check_disconnect(s):
    """A streaming request whose client leaves is cancelled: logged as 499, and the server goes on."""
    before = metric(s, 'ascent_requests_total{code="499"}')
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    body = json.dumps({"prompt": PROMPT, "max_tokens": 400, "ignore_eos": True, "stream": True})
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    got = sock.recv(4096)
    sock.close()
    after = before
    for _ in range(100):
        after = metric(s, 'ascent_requests_total{code="499"}')
        if after > before:
            break
        time.sleep(0.05)
    check(b"200 OK" in got and after == before + 1, f"a client leaving mid-stream: 499 counted ({before} -> {after})")
    check(s.request("GET", "/health")[0] == 200, "the server answers after the client left")


def metric(s, name):
    text = s.request("GET", "/metrics")[2]
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def check_metrics(s):
    status, hdrs, text = s.request("GET", "/metrics")
    check(status == 200 and hdrs.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
          f"/metrics: {status} {hdrs.get('Content-Type')}")
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_]+="[^"]*",?)*\})? (-?[0-9.e+-]+|\+Inf|NaN)$')
    families, bad = {}, []
    for line in text.splitlines():
        m = re.match(r"^# (HELP|TYPE) (\S+) (.*)$", line)
        if m:
            families.setdefault(m.group(2), {})[m.group(1)] = m.group(3)
        elif not sample.match(line):
            bad.append(line)
    check(not bad, f"every sample line parses: {bad[:3]}")
    check(all(set(f) == {"HELP", "TYPE"} for f in families.values()), "each family has HELP and TYPE")
    for name in ("ascent_time_to_first_token_seconds", "ascent_inter_token_latency_seconds",
                 "ascent_e2e_request_latency_seconds", "ascent_batch_tokens"):
        check(families.get(name, {}).get("TYPE") == "histogram", f"{name} is a histogram")
        count = metric(s, name + "_count")
        inf = [line for line in text.splitlines() if line.startswith(name + '_bucket{le="+Inf"}')]
        check(count > 0 and inf and float(inf[0].split()[-1]) == count, f"{name}: {count} observations")
    for name in ("ascent_num_requests_running", "ascent_num_requests_waiting", "ascent_kv_blocks_used",
                 "ascent_kv_blocks_free", "ascent_prefix_cache_hit_rate", "ascent_preemptions_total"):
        check(name in families, f"/metrics has {name}")
    ok200 = metric(s, 'ascent_requests_total{code="200"}')
    s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "ignore_eos": True})
    gen = metric(s, "ascent_generation_tokens_total")
    check(metric(s, 'ascent_requests_total{code="200"}') >= ok200 + 1 and gen >= 3, "counters follow a request")


def check_api_key():
    s = Server("--api-key", "sekrit")
    if s.port is None:
        check(False, "ascent serve --api-key started")
        return
    st, _, text = s.request("GET", "/v1/models")
    check(st == 401 and json.loads(text)["error"]["code"] == "invalid_api_key", f"no key: {st}")
    st, _, _ = s.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
    check(st == 401, f"a wrong key: {st}")
    st, _, text = s.request("GET", "/v1/models", headers={"Authorization": "Bearer sekrit"})
    check(st == 200 and json.loads(text)["data"][0]["id"] == "story-656K", f"the key: {st} {text[:100]}")
    check(s.request("GET", "/health")[0] == 200 and s.request("GET", "/metrics")[0] == 200,
          "/health and /metrics need no key")
    check(s.stop() == 0, "SIGTERM: exit 0")


def main():
    s = Server("--max-body", "100K")
    check(s.port is not None, f"ascent serve printed its listening line: {''.join(s.lines)[-500:]}")
    if s.port is None:
        s.proc.kill()
        finish()
    st, _, text = s.request("GET", "/health")
    check(st == 200 and json.loads(text) == {"status": "ok"}, f"/health: {st} {text}")
    st, _, text = s.request("GET", "/v1/models")
    check(st == 200 and json.loads(text)["data"][0]["id"] == "story-656K", f"/v1/models: {text}")
    text = check_completions(s)
    if text:
        check_streaming(s, text)
        check_stop_strings(s, text)
    check_seeds(s)
    check_chat(s)
    check_errors(s)
    check_disconnect(s)
    check_metrics(s)
    code = s.stop()
    check(code == 0, f"SIGTERM: exit {code}")
    log = "".join(s.lines)
    check(re.search(r"ascent serve: #\d+ \S+ POST /v1/completions 200 prompt=\d+ generated=\d+ ttft=[0-9.]+ms", log),
          "one log line per request with its tokens and times")
    check_api_key()
    finish()


if __name__ == "__main__":
    main()
