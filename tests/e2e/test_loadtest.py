"""ascent loadtest against a server written here with Python's http.server, which speaks the OpenAI streaming
protocol with known delays and token counts. Checked: the requests it sends (fields, prompt lengths, distinct prompts,
the shared prefix, the seed, words of one Llama 2 token each by libsentencepiece), the counts it reports (from
usage, else from chunks), that its TTFT, inter-token and end-to-end figures agree with the server's delays (loose
bounds: the delays are hundreds of milliseconds), that its percentiles are NumPy's over its own per-request records,
and its errors: failed requests, a stream cut short, a timeout, bad flags and a refused connection."""
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import sentencepiece

from common import SHARED, check, finish, run, tmpdir

TTFT = 0.4  # seconds the server waits before the first token
GAP = 0.2  # seconds between tokens


class Handler(BaseHTTPRequestHandler):
    """Behaviour by the request's model: "plain" (a token per chunk, usage, chunked transfer), "pairs" (two tokens per
    chunk), "no-usage" (no usage chunk; the body ends with the connection, CRLF lines split over writes),
    "fail-odd" (every second request gets HTTP 500), "no-done" (the stream stops before [DONE]), "stall" (nothing
    for 3 s)."""
    protocol_version = "HTTP/1.1"
    requests = []
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "plain", "object": "model"}]})
        else:
            self.send_json(404, {"error": {"message": "no such path"}})

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def chunk(self, data):
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self):
        if self.path != "/v1/completions":
            return self.send_json(404, {"error": {"message": "no such path"}})
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with Handler.lock:
            Handler.requests.append(req)
            serial = len(Handler.requests)
        model, n = req.get("model"), req["max_tokens"]
        words = len(req["prompt"].split())
        if model == "fail-odd" and serial % 2 == 1:
            return self.send_json(500, {"error": {"code": 500, "message": "boom", "type": "server_error"}})
        if model == "stall":
            time.sleep(3)
        time.sleep(TTFT)
        usage = {"prompt_tokens": words + 1, "completion_tokens": n, "total_tokens": words + 1 + n}
        if not req.get("stream"):
            return self.send_json(200, {"object": "text_completion", "usage": usage,
                                        "choices": [{"index": 0, "text": " w" * n, "finish_reason": "length"}]})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        close = model == "no-usage"
        self.send_header("Connection" if close else "Transfer-Encoding", "close" if close else "chunked")
        self.end_headers()
        per_chunk = 2 if model == "pairs" else 1
        events = []
        for i in range(0, n, per_chunk):
            text = " w" * min(per_chunk, n - i)
            events.append({"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": None}]})
        final = {"object": "text_completion", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
        if model != "no-usage":
            final["usage"] = usage
        for i, e in enumerate(events + [final]):
            if 0 < i < len(events):
                time.sleep(GAP)
            if model == "no-done" and i == 2:
                break
            data = f"data: {json.dumps(e)}\n\n".encode()
            if close:
                data = data.replace(b"\n", b"\r\n")
                self.wfile.write(data[:7])  # mid-field: the client must join the pieces
                self.wfile.flush()
                time.sleep(0.01)
                self.wfile.write(data[7:])
                self.wfile.flush()
            else:
                self.chunk(data)
        if model != "no-done":
            done = b": the end\n\ndata: [DONE]\n\n"
            self.wfile.write(done) if close else self.chunk(done)
        if close:
            self.close_connection = True
        else:
            self.chunk(b"")


def loadtest(url, *args, jsonl=None, timeout=120):
    cmd = ["loadtest", "--url", url] + [str(a) for a in args]
    if jsonl:
        cmd += ["--jsonl", jsonl]
    Handler.requests = []
    t0 = time.monotonic()
    r = run(cmd, timeout=timeout)
    r.seconds = time.monotonic() - t0
    return r


def read_jsonl(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if r["type"] == "request"], [r for r in rows if r["type"] == "summary"]


def common_prefix_words(a, b):
    n = 0
    for x, y in zip(a.split(), b.split()):
        if x != y:
            break
        n += 1
    return n


def check_percentiles(summary, values, key, what):
    """The summary's p50/p90/p99 are NumPy's (linear interpolation) over the per-request figures."""
    want = np.percentile(np.array(values), [50, 90, 99]) if values else None
    got = summary[key]
    ok = (got is None) if want is None else (
        got["n"] == len(values) and np.allclose([got["p50"], got["p90"], got["p99"]], want, rtol=1e-9, atol=1e-6))
    check(ok, f"{what}: {key} {got} are NumPy's percentiles of the {len(values)} per-request values")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    out = tmpdir()
    jl = os.path.join(out, "run.jsonl")

    # A plain run: 2 clients, 4 requests of 4 tokens, each 0.4 s to its first token and 0.2 s between tokens.
    r = loadtest(url, "--clients", 2, "--requests", 4, "--prompt-tokens", 30, "--max-tokens", 4, "--seed", 7,
                 jsonl=jl)
    check(r.returncode == 0, f"plain run: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    sent = list(Handler.requests)
    reqs, summ = read_jsonl(jl)
    check(len(reqs) == 4 and len(summ) == 1, f"plain: 4 request rows and a summary in --jsonl ({len(reqs)}, {len(summ)})")
    s = summ[0]
    check(s["requests"] == 4 and s["errors"] == 0 and s["generated_tokens"] == 16,
          f"plain: 4 requests, 0 errors, 16 tokens: {s['requests']}, {s['errors']}, {s['generated_tokens']}")
    check(s["model"] == "plain", f"plain: the model named by /v1/models is used ({s['model']!r})")
    check(all(x["completion_tokens"] == 4 and x["usage"] and x["text_chunks"] == 4 and x["prompt_tokens"] == 31
              and x["status"] == 200 and len(x["itl_ms"]) == 3 for x in reqs),
          "plain: each request 4 tokens (usage), 4 text chunks, 3 gaps, the server's prompt count, HTTP 200")
    check(all(q["stream"] is True and q["stream_options"] == {"include_usage": True} and q["ignore_eos"] is True
              and q["max_tokens"] == 4 and q["temperature"] == 0 and q["model"] == "plain" for q in sent),
          f"plain: request fields {sent[0] if sent else None}")
    prompts = [q["prompt"] for q in sent]
    check(all(len(p.split()) == 30 for p in prompts) and len(set(prompts)) == 4
          and len({p.split()[0] for p in prompts}) == 4,
          f"plain: 4 distinct 30-word prompts with distinct first words: {[p[:30] for p in prompts]}")
    ttft = [x["ttft_ms"] for x in reqs]
    gaps = [g for x in reqs for g in x["itl_ms"]]
    e2e = [x["e2e_ms"] for x in reqs]
    check(all(TTFT * 1e3 <= t <= TTFT * 1e3 + 1500 for t in ttft), f"plain: TTFT {ttft} ms within [400, 1900]")
    check(GAP * 1e3 * 0.5 <= float(np.median(gaps)) <= GAP * 1e3 + 1000,
          f"plain: inter-token median {np.median(gaps):.1f} ms within [100, 1200]")
    least = (TTFT + 3 * GAP) * 1e3
    check(all(least <= t <= least + 2500 for t in e2e), f"plain: e2e {e2e} ms within [{least:.0f}, {least + 2500:.0f}]")
    # Two rounds of requests on each client: at least twice one request's time.
    check(2 * least / 1e3 <= s["wall_s"] <= r.seconds, f"plain: wall {s['wall_s']:.2f} s within [2.0, {r.seconds:.2f}]")
    check(abs(s["generated_tok_per_s"] - 16 / s["wall_s"]) < 1e-6, f"plain: tok/s {s['generated_tok_per_s']} = 16 / wall")
    check_percentiles(s, ttft, "ttft_ms", "plain")
    check_percentiles(s, gaps, "itl_ms", "plain")
    check_percentiles(s, e2e, "e2e_ms", "plain")
    check("| 4 | 0 | 16 |" in r.stdout and "| TTFT |" in r.stdout and "| inter-token |" in r.stdout,
          f"plain: the summary table ({r.stdout.strip()[:200]!r})")
    check("loadtest: 4/4 done" in r.stderr, f"plain: a progress line on stderr ({r.stderr.strip()[-200:]!r})")

    # The same seed gives the same prompts; another seed others.
    r = loadtest(url, "--clients", 2, "--requests", 4, "--prompt-tokens", 30, "--max-tokens", 1, "--seed", 7)
    check(r.returncode == 0 and sorted(q["prompt"] for q in Handler.requests) == sorted(prompts),
          "seed 7 again: the same prompts")
    r = loadtest(url, "--clients", 2, "--requests", 4, "--prompt-tokens", 30, "--max-tokens", 1, "--seed", 8)
    check(r.returncode == 0 and not set(q["prompt"] for q in Handler.requests) & set(prompts),
          "seed 8: other prompts")

    # The words are one token each: checked with libsentencepiece on Llama 2's vocabulary, over the words of many prompts.
    r = loadtest(url, "--clients", 10, "--requests", 20, "--prompt-tokens", 60, "--max-tokens", 1, "--seed", 3)
    words = sorted({w for q in Handler.requests for w in q["prompt"].split()})
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(SHARED, "tokenizers", "llama2-spm",
                                                                      "tokenizer.model"))
    pieces = sp.encode(" ".join(words))
    check(r.returncode == 0 and len(words) > 150 and len(pieces) == len(words),
          f"{len(words)} distinct prompt words are {len(pieces)} Llama 2 tokens")

    # A shared prefix: the first 12 words of every prompt are the same, and no two prompts share more.
    r = loadtest(url, "--clients", 3, "--requests", 6, "--prompt-tokens", 20, "--shared-prefix", 12, "--max-tokens",
                 1, "--model", "plain")
    ps = [q["prompt"] for q in Handler.requests]
    pairs = [common_prefix_words(a, b) for i, a in enumerate(ps) for b in ps[i + 1:]]
    check(r.returncode == 0 and len(ps) == 6 and all(len(p.split()) == 20 for p in ps) and set(pairs) == {12},
          f"--shared-prefix 12: 6 prompts of 20 words whose common prefixes are all 12 words ({set(pairs)})")

    # Two tokens per chunk: tokens from usage, a gap per chunk.
    r = loadtest(url, "--clients", 1, "--requests", 2, "--prompt-tokens", 5, "--max-tokens", 6, "--model", "pairs",
                 jsonl=jl)
    reqs, summ = read_jsonl(jl)
    check(r.returncode == 0 and summ[0]["generated_tokens"] == 12
          and all(x["completion_tokens"] == 6 and x["text_chunks"] == 3 and len(x["itl_ms"]) == 2 for x in reqs),
          f"pairs: 6 tokens from usage, 3 chunks and 2 gaps per request: {[(x['completion_tokens'], x['text_chunks'], len(x['itl_ms'])) for x in reqs]}")

    # No usage: tokens are the text chunks; the body ends with the connection, lines in CRLF split over writes.
    r = loadtest(url, "--clients", 2, "--requests", 2, "--prompt-tokens", 5, "--max-tokens", 3, "--model", "no-usage",
                 jsonl=jl)
    reqs, summ = read_jsonl(jl)
    check(r.returncode == 0 and summ[0]["generated_tokens"] == 6
          and all(not x["usage"] and x["completion_tokens"] == 3 and x["prompt_tokens"] is None for x in reqs),
          f"no-usage: 3 tokens per request counted from chunks: {r.stderr.strip()[-200:]}")

    # Unstreamed: the whole text at once, its time is the TTFT, and there are no gaps.
    r = loadtest(url, "--clients", 2, "--requests", 2, "--prompt-tokens", 5, "--max-tokens", 3, "--no-stream",
                 jsonl=jl)
    reqs, summ = read_jsonl(jl)
    check(r.returncode == 0 and all(q["stream"] is False and "stream_options" not in q for q in Handler.requests)
          and summ[0]["generated_tokens"] == 6 and summ[0]["itl_ms"] is None
          and all(x["ttft_ms"] == x["e2e_ms"] and x["ttft_ms"] >= TTFT * 1e3 for x in reqs),
          f"--no-stream: 6 tokens from usage, TTFT = e2e >= 400 ms, no gaps ({r.stderr.strip()[-200:]})")

    # Failures: every second request gets HTTP 500. The run finishes, writes --jsonl, says why, and exits 1.
    r = loadtest(url, "--clients", 2, "--requests", 4, "--prompt-tokens", 5, "--max-tokens", 2, "--model", "fail-odd",
                 jsonl=jl)
    reqs, summ = read_jsonl(jl)
    check(r.returncode == 1 and "loadtest: 2 requests failed" in r.stderr and "HTTP 500: boom" in r.stderr
          and f"ascent: error: 2 of 4 requests to {url}/v1/completions failed" in r.stderr,
          f"fail-odd: exit {r.returncode}, {r.stderr.strip()[-300:]!r}")
    check(summ[0]["errors"] == 2 and summ[0]["generated_tokens"] == 4
          and sorted(x["status"] for x in reqs) == [200, 200, 500, 500] and "| 4 | 2 | 4 |" in r.stdout,
          f"fail-odd: 2 errors and 4 tokens in the summary ({summ[0]['errors']}, {summ[0]['generated_tokens']})")

    r = loadtest(url, "--requests", 1, "--prompt-tokens", 5, "--max-tokens", 4, "--model", "no-done")
    check(r.returncode == 1 and "the stream ended before data: [DONE]" in r.stderr,
          f"no-done: a stream cut short is an error: {r.stderr.strip()[-200:]!r}")
    r = loadtest(url, "--requests", 1, "--prompt-tokens", 5, "--max-tokens", 1, "--model", "stall", "--timeout", 0.5)
    check(r.returncode == 1 and "timed out" in r.stderr, f"stall with --timeout 0.5: {r.stderr.strip()[-200:]!r}")

    # Bad flags, each named in one line.
    base = ["--prompt-tokens", 5, "--max-tokens", 1]
    for args, want in (
            (["--clients", 0] + base, "--clients: at least 1"),
            (["--requests", 0] + base, "--requests: at least 1"),
            (["--prompt-tokens", 0, "--max-tokens", 1], "--prompt-tokens: at least 1"),
            (["--prompt-tokens", 5, "--max-tokens", 0], "--max-tokens: at least 1"),
            (["--shared-prefix", 6] + base, "--shared-prefix 6: must be from 0 to --prompt-tokens 5"),
            (["--temperature", -1] + base, "--temperature: must be >= 0"),
            (["--timeout", 0] + base, "--timeout: must be > 0"),
            (["--api-key", "a\nb"] + base, "--api-key: holds a control character"),
            (["--jsonl", os.path.join(out, "no", "such.jsonl")] + base, "--jsonl: "),
    ):
        r = loadtest(url, *args)
        check(r.returncode == 1 and len(r.stderr.splitlines()) == 1 and r.stderr.startswith("ascent: error: ")
              and want in r.stderr, f"{args[:2]}: {r.stderr.strip()!r}")
    for bad, want in (("https://127.0.0.1:1", "https is not supported"), ("127.0.0.1:8080", "expected http://"),
                      ("http://127.0.0.1:70000", "port '70000' is not a number"), ("http://:80", "no host")):
        r = loadtest(bad, *base)
        check(r.returncode == 1 and len(r.stderr.splitlines()) == 1
              and r.stderr.startswith(f"ascent: error: --url {bad}: ") and want in r.stderr,
              f"--url {bad}: {r.stderr.strip()!r}")
    r = run(["loadtest", "--prompt-tokens", 5, "--max-tokens", 1], timeout=60)
    check(r.returncode == 2 and "--url is required" in r.stderr, f"no --url: exit {r.returncode}, {r.stderr.strip()!r}")

    # A port nothing listens on: refused before any request, naming the URL.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = loadtest(f"http://127.0.0.1:{port}", *base)
    want = f"ascent: error: --url http://127.0.0.1:{port}: cannot connect to 127.0.0.1:{port}: connection refused"
    check(r.returncode == 1 and r.stderr.strip() == want, f"connection refused: {r.stderr.strip()!r}")

    server.shutdown()
    finish()


if __name__ == "__main__":
    main()
