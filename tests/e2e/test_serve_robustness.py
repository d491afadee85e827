"""`ascent serve` under hostile and careless clients. They send malformed and truncated JSON, wrong types in every
main field, 10 MB bodies, invalid UTF-8, prompts past the context and garbage HTTP. They are slow, stall, half-close,
come 200 at once, overfill the queue, or drop 120 requests right after sending them. Each gets a clean answer: an
OpenAI error body with the right status, or a clean close. Meanwhile the server serves everyone else. Once the
requests are gone no KV block stays held (/metrics), and greedy text is what it was at the start. SIGTERM lets the
running streams finish and exits 0. Python's standard library only (the server's helper is tests/serve/server.py);
with ASCENT_SERVE_URL set it tests the server running there instead."""
import http.client
import json
import os
import re
import socket
import struct
import sys
import threading
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "serve"))
from server import MODEL, Server  # noqa: E402

_failures = []
_passes = 0
_lock = threading.Lock()


def check(cond, what):
    """Records one check; the script's exit status reflects all of them."""
    global _passes
    with _lock:
        if cond:
            _passes += 1
            print(f"ok   {what}")
        else:
            _failures.append(what)
            print(f"FAIL {what}")
        sys.stdout.flush()


MAX_BODY = 1 << 20
SERVER_ARGS = ["-m", MODEL, "--port", "0", "-t", "2", "--max-body", str(MAX_BODY), "--max-seqs", "4",
               "--max-queued", "8", "--idle-timeout", "5", "--request-timeout", "30", "--served-model-name",
               "tiny-story"]
PROMPT = "Once upon a time, there was a little girl named Lily. She"
HOST = PORT = None
AUTH = {"Authorization": f"Bearer {os.environ['ASCENT_SERVE_API_KEY']}"} if os.environ.get(
    "ASCENT_SERVE_API_KEY") else {}
MODEL_NAME = os.environ.get("ASCENT_SERVE_MODEL", "tiny-story")


def request(method, path, body=None, headers=None, timeout=60):
    """One HTTP/1.1 exchange on a fresh connection. body is bytes, str or a JSON-able object. Returns (status,
    headers as a dict with lower-case names, body bytes); status is None and the body the error's text when the
    exchange failed (refused, reset, timed out)."""
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    h = {"Content-Type": "application/json", **AUTH, **(headers or {})}
    conn = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except (OSError, http.client.HTTPException) as e:
        return None, {}, f"{type(e).__name__}: {e}".encode()
    finally:
        conn.close()


def completion(body, path="/v1/completions", timeout=60):
    return request("POST", path, {"model": MODEL_NAME, **body}, timeout=timeout)


def error_of(status, body, want_status, want_param=None, param_prefix=False):
    """Empty string when (status, body) is want_status with an OpenAI error body whose param is want_param (or, with
    param_prefix, a path inside it: "messages[0].role", "stream_options.include_usage"); otherwise what is wrong."""
    if status != want_status:
        return f"status {status}, expected {want_status}: {body[:160]!r}"
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return f"no JSON error object: {body[:160]!r}"
    if not isinstance(e, dict) or not isinstance(e.get("message"), str) or not e["message"] or \
            not isinstance(e.get("type"), str) or "param" not in e or "code" not in e:
        return f"the error object lacks message, type, param or code: {body[:160]!r}"
    if want_param is not None:
        p = e["param"]
        inside = param_prefix and isinstance(p, str) and p.startswith((want_param + ".", want_param + "["))
        if p != want_param and not inside:
            return f"param {p!r}, expected {want_param!r}: {e['message'][:120]!r}"
    return ""


def expect_error(what, status, body, want_status, want_param=None, param_prefix=False):
    problem = error_of(status, body, want_status, want_param, param_prefix)
    check(not problem, f"{what}: {want_status}" + (f" naming {want_param}" if want_param else "") +
          (f" ({problem})" if problem else ""))


def healthy(what):
    status, _, body = request("GET", "/health", timeout=10)
    check(status == 200, f"{what}: GET /health answers 200 (got {status} {body[:80]!r})")


def greedy_text(max_tokens=24):
    status, _, body = completion({"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0})
    return json.loads(body)["choices"][0]["text"] if status == 200 else None


def connect(timeout=30):
    return socket.create_connection((HOST, PORT), timeout=timeout)


def http_bytes(body, path="/v1/completions", extra_headers=""):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    auth = "".join(f"{k}: {v}\r\n" for k, v in AUTH.items())
    head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{PORT}\r\nContent-Type: application/json\r\n{auth}"
            f"Content-Length: {len(data)}\r\n{extra_headers}\r\n")
    return head.encode(), data


def read_response(sock, timeout=30):
    """Reads one HTTP response from sock. Returns (status, headers, body), or (None, {}, b"") when the server closed
    the connection without one; raises socket.timeout when nothing came within timeout seconds."""
    sock.settimeout(timeout)
    r = http.client.HTTPResponse(sock)
    try:
        r.begin()
    except (http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine):
        return None, {}, b""
    headers = {k.lower(): v for k, v in r.getheaders()}
    try:
        return r.status, headers, r.read()
    except (http.client.IncompleteRead, ConnectionResetError) as e:
        # The answer was cut short: the body read so far, marked so no check takes it for a whole one.
        return r.status, dict(headers, truncated="yes"), getattr(e, "partial", b"")


# --- the checks ------------------------------------------------------------------------------------------------


def malformed_json():
    bodies = ["{", "{\"model\": \"x\", \"prompt\": \"Once", "{\"prompt\": \"Once\",}", "not json", "", "[]", "null",
              "42", "\"prompt\"", "{\"prompt\": \"a\"}}", "{\"prompt\": \"a\" \"max_tokens\": 4}", "{" * 100000,
              "[" * 100000 + "]" * 100000, "{\"prompt\": \"\\u00\"}", "{\"prompt\": \"a\\q\"}", "\0\0\0"]
    for path in ("/v1/completions", "/v1/chat/completions"):
        for b in bodies:
            status, _, body = request("POST", path, b)
            expect_error(f"{path} body {b[:40]!r}{'...' if len(b) > 40 else ''}", status, body, 400)
    healthy("after malformed JSON")


# (field, bad values) per endpoint: wrong JSON types, and values of the right type no request can mean.
COMPLETION_FIELDS = [
    ("model", [5, ["story"]]),
    ("prompt", [5, True, None, {"text": "a"}, [1.5], [["a"]], [[1, "a"]]]),
    ("max_tokens", ["4", 4.5, True, [4]]),
    ("temperature", ["hot", True, [0.5], {}]),
    ("top_p", ["x", False]),
    ("top_k", ["x", 1.5]),
    ("min_p", ["x", []]),
    ("seed", ["x", 1.5, [1]]),
    ("presence_penalty", ["x", {}]),
    ("frequency_penalty", ["x", True]),
    ("repetition_penalty", ["x", [1]]),
    ("logit_bias", [[], "x", 5, {"a": 1}, {"5": "x"}, {"5": [1]}, {"99999999": 1}]),
    ("stop", [5, [1], [["a"]], {"a": 1}]),
    ("logprobs", ["x", 1.5, [1]]),
    ("n", ["2", 1.5, True]),
    ("ignore_eos", ["x", 3, [True]]),
    ("stream", ["yes", 1, {}]),
    ("stream_options", ["x", 5, {"include_usage": "x"}]),
]
CHAT_FIELDS = [
    ("messages", ["hi", [], [5], [{"role": 5, "content": "x"}], [{"role": "user"}], [{"role": "user", "content": 5}],
                  [{"role": "robot", "content": "x"}], [{"content": "x"}], {"role": "user", "content": "x"}]),
    ("logprobs", ["x", 3]),
    ("top_logprobs", ["x", 1.5]),
    ("max_tokens", ["4", 2.5]),
    ("temperature", ["x"]),
]


def wrong_types():
    for field, values in COMPLETION_FIELDS:
        for v in values:
            body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 4, field: v}
            status, _, text = request("POST", "/v1/completions", body)
            expect_error(f"completions {field}={json.dumps(v)}", status, text, 400, field, param_prefix=True)
    for field, values in CHAT_FIELDS:
        for v in values:
            body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, field: v}
            status, _, text = request("POST", "/v1/chat/completions", body)
            expect_error(f"chat {field}={json.dumps(v)}", status, text, 400, field, param_prefix=True)
    healthy("after wrong types")


def big_body():
    """A 10 MB body against --max-body 1 MiB: 413 (answered from Content-Length alone, or after reading), and the
    server stays up. The body is sent only when no answer came within 2 s of the headers."""
    payload = json.dumps({"model": MODEL_NAME, "prompt": "a" * (10 << 20), "max_tokens": 1}).encode()
    head, _ = http_bytes(payload)
    s = connect()
    status = None
    try:
        s.sendall(head)
        s.settimeout(2)
        try:
            first = s.recv(1, socket.MSG_PEEK)
        except socket.timeout:
            first = None
        if first is None:
            try:
                s.sendall(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered and closed while the body was still going: the answer is read below
        status, _, body = read_response(s, 30)
        expect_error("a 10 MB body (Content-Length)", status, body, 413)
    except (socket.timeout, OSError) as e:
        check(False, f"a 10 MB body (Content-Length): no answer ({type(e).__name__}: {e})")
    finally:
        s.close()
    # The same size in chunks with no Content-Length: refused (413, or 411/400 if chunked bodies are not taken).
    s = connect()
    try:
        auth = "".join(f"{k}: {v}\r\n" for k, v in AUTH.items())
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n{auth}"
                  f"Transfer-Encoding: chunked\r\n\r\n".encode())
        try:
            for i in range(0, len(payload), 1 << 16):
                piece = payload[i:i + (1 << 16)]
                s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, _, body = read_response(s, 30)
        check(status in (400, 411, 413), f"a 10 MB chunked body: refused with 413, 411 or 400 (got {status} "
                                         f"{body[:100]!r})")
    except (socket.timeout, OSError) as e:
        check(False, f"a 10 MB chunked body: no answer ({type(e).__name__}: {e})")
    finally:
        s.close()
    # A body just under the limit is taken (its bulk in OpenAI's "user" field, which only identifies the caller).
    status, _, body = completion({"prompt": PROMPT, "max_tokens": 2, "user": "u" * (MAX_BODY - 200)})
    check(status == 200, f"a body just under --max-body is served: 200 (got {status} {body[:100]!r})")
    healthy("after the big bodies")


def invalid_text():
    raw = b'{"model": "%s", "prompt": "Once \xff\xfe upon \xc3", "max_tokens": 4}' % MODEL_NAME.encode()
    status, _, body = request("POST", "/v1/completions", raw)
    expect_error("invalid UTF-8 in the prompt", status, body, 400, "prompt")
    raw = b'{"model": "%s", "messages": [{"role": "user", "content": "hi \xc0\xaf"}]}' % MODEL_NAME.encode()
    status, _, body = request("POST", "/v1/chat/completions", raw)
    expect_error("invalid UTF-8 in a message", status, body, 400, "messages", param_prefix=True)
    status, _, body = request("POST", "/v1/completions", '{"model": "%s", "prompt": "a \\ud800 b", "max_tokens": 4}'
                              % MODEL_NAME)
    expect_error("a lone surrogate escape in the prompt", status, body, 400)
    status, _, body = completion({"prompt": [1, 2, 99999999], "max_tokens": 4})
    expect_error("a prompt token id past the vocabulary", status, body, 400, "prompt")
    status, _, body = completion({"prompt": [1, -5, 2], "max_tokens": 4})
    expect_error("a negative prompt token id", status, body, 400, "prompt")
    # Valid text the vocabulary may lack pieces for (byte fallback or the unknown token takes it): served.
    for what, text in (("NUL and controls", "a\0b\x01\x7f c"), ("emoji", "Once \U0001F600\U0001F431 upon"),
                       ("CJK and combining marks", "\u732b e\u0301\u0301 \u0915\u094d\u0937")):
        status, _, body = completion({"prompt": text, "max_tokens": 2})
        check(status == 200, f"a prompt with {what}: 200 (got {status} {body[:100]!r})")
    status, _, body = completion({"prompt": " " * 8000, "max_tokens": 2})
    check(status in (200, 400), f"a prompt of 8000 spaces: 200, or 400 past the context (got {status} {body[:100]!r})")
    healthy("after invalid text")


def past_context():
    long_prompt = "Once upon a time, there was a little girl. " * 400
    status, _, body = completion({"prompt": long_prompt, "max_tokens": 4})
    expect_error("a prompt of thousands of tokens (past the context)", status, body, 400)
    status, _, body = completion({"prompt": PROMPT, "max_tokens": 1000000})
    expect_error("max_tokens past the context", status, body, 400)
    status, _, body = completion({"prompt": long_prompt, "max_tokens": 4, "stream": True})
    expect_error("a prompt past the context, streamed: an error, not an event stream", status, body, 400)
    status, _, body = request("POST", "/v1/chat/completions",
                              {"model": MODEL_NAME, "messages": [{"role": "user", "content": long_prompt}]})
    expect_error("a chat message past the context", status, body, 400)


def garbage_http():
    post = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
    cases = [("garbage bytes", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64) + b"\r\n\r\n"),
             ("a request line with no version", b"GET /health\r\n\r\n"),
             ("a header without a colon", b"GET /health HTTP/1.1\r\nHost x\r\n\r\n"),
             ("a 100 KB header line", b"GET /health HTTP/1.1\r\nX-Long: " + b"a" * 100000 + b"\r\n\r\n"),
             ("a negative Content-Length", post + b"Content-Length: -5\r\n\r\n"),
             ("a huge Content-Length", post + b"Content-Length: 99999999999999999999\r\n\r\n"),
             ("two Content-Lengths", post + b"Content-Length: 2\r\nContent-Length: 9\r\n\r\n{}"),
             ("HTTP/9.9", b"GET /health HTTP/9.9\r\n\r\n"),
             ("an unknown method", b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n")]
    for what, data in cases:
        s = connect()
        try:
            s.sendall(data)
            status, _, body = read_response(s, 20)
            check(status is None or 400 <= status < 600,
                  f"{what}: an error status or a clean close (got {status} {body[:80]!r})")
        except (socket.timeout, OSError) as e:
            check(False, f"{what}: no answer and no close within 20 s ({type(e).__name__})")
        finally:
            s.close()
    healthy("after garbage HTTP")


def keep_alive():
    conn = http.client.HTTPConnection(HOST, PORT, timeout=60)
    try:
        codes = []
        for body in ({"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 3}, "{bad", {"model": MODEL_NAME,
                                                                                       "prompt": PROMPT,
                                                                                       "max_tokens": 3}):
            conn.request("POST", "/v1/completions", body=body if isinstance(body, str) else json.dumps(body),
                         headers={"Content-Type": "application/json", **AUTH})
            r = conn.getresponse()
            r.read()
            codes.append(r.status)
        check(codes == [200, 400, 200], f"three requests on one kept-alive connection: 200, 400, 200 (got {codes})")
    except (OSError, http.client.HTTPException) as e:
        check(False, f"three requests on one kept-alive connection: {type(e).__name__}: {e}")
    finally:
        conn.close()


def served_meanwhile(what, seconds):
    """Sends /health and small completions for `seconds`, each of which must be answered within 10 s."""
    slowest, n, bad = 0.0, 0, []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        status, _, _ = request("GET", "/health", timeout=10) if n % 2 else completion(
            {"prompt": PROMPT, "max_tokens": 4}, timeout=10)
        slowest = max(slowest, time.monotonic() - t)
        if status != 200:
            bad.append(status)
        n += 1
        time.sleep(0.1)
    check(not bad and slowest < 10, f"{what}: {n} other requests served meanwhile, slowest {slowest:.2f} s "
                                    f"(failed: {bad})")


def slow_clients():
    """One client sends a request a byte every 20 ms, one stalls halfway through its headers and one holds 64 idle
    connections; the server serves others meanwhile, serves or times out the slow one, and closes the stalled."""
    results = {}

    def slow():
        head, data = http_bytes({"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 4})
        s = connect(60)
        try:
            for i in range(len(head)):
                s.sendall(head[i:i + 1])
                time.sleep(0.02)
            s.sendall(data)
            results["slow"] = read_response(s, 60)[0]
        except (BrokenPipeError, ConnectionResetError):
            results["slow"] = "closed"
        except socket.timeout:
            results["slow"] = "hung"
        finally:
            s.close()

    def stalled():
        s = connect(60)
        t = time.monotonic()
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            status = read_response(s, 60)[0]
            results["stalled"] = ("closed" if status is None else status, time.monotonic() - t)
        except (BrokenPipeError, ConnectionResetError):
            results["stalled"] = ("closed", time.monotonic() - t)
        except socket.timeout:
            results["stalled"] = ("hung", time.monotonic() - t)
        finally:
            s.close()

    idle = [connect() for _ in range(64)]
    threads = [threading.Thread(target=slow), threading.Thread(target=stalled)]
    for t in threads:
        t.start()
    served_meanwhile("a slow, a stalled and 64 idle clients", 6)
    for t in threads:
        t.join(90)
    for s in idle:
        s.close()
    check(results.get("slow") in (200, 408, "closed"),
          f"a client sending a byte every 20 ms: served or timed out (got {results.get('slow')})")
    stalled_result = results.get("stalled", ("hung", None))
    check(stalled_result[0] in ("closed", 408, 400),
          f"a client stalled mid-headers: closed by the server (--idle-timeout 5, --request-timeout 30) "
          f"(got {stalled_result[0]} after {stalled_result[1] or 0:.1f} s)")
    healthy("after slow clients")


def half_closed():
    """The client sends a whole request, then shuts its write side: the server answers it (or closes cleanly)."""
    for stream in (False, True):
        head, data = http_bytes({"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 8, "stream": stream})
        s = connect()
        try:
            s.sendall(head + data)
            s.shutdown(socket.SHUT_WR)
            status, headers, body = read_response(s, 30)
            ok = status is None or (status == 200 and "truncated" not in headers and
                                    (b"[DONE]" in body if stream else b"choices" in body))
            check(ok, f"half-closed after a {'streamed' if stream else 'whole'} request: answered in full or closed "
                      f"cleanly (got {status} {body[-60:]!r})")
        except (socket.timeout, OSError) as e:
            check(False, f"half-closed after a request: {type(e).__name__}")
        finally:
            s.close()
    # Half-closed after only part of the body: the server cannot wait for the rest.
    head, data = http_bytes({"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 8})
    s = connect()
    try:
        s.sendall(head + data[:10])
        s.shutdown(socket.SHUT_WR)
        status, _, body = read_response(s, 30)
        check(status is None or status == 400, f"half-closed inside the body: 400 or a clean close (got {status})")
    except (socket.timeout, OSError) as e:
        check(False, f"half-closed inside the body: no close within 30 s ({type(e).__name__})")
    finally:
        s.close()
    healthy("after half-closed connections")


def many_connections(count=200):
    """count connections at once, half /health and half small completions: each gets 200 or a clean 503 (an error
    body and Retry-After), none is refused or hangs."""
    barrier = threading.Barrier(count)
    results = [None] * count

    def one(i):
        try:
            barrier.wait(30)
        except threading.BrokenBarrierError:
            pass
        if i % 2:
            results[i] = request("GET", "/health", timeout=60)
        else:
            results[i] = completion({"prompt": PROMPT, "max_tokens": 4, "seed": i, "temperature": 0.7}, timeout=60)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    counts, bad = {}, []
    for i, r in enumerate(results):
        status = r[0] if r else "hung"
        counts[status] = counts.get(status, 0) + 1
        if status == 200:
            continue
        if status == 503 and not error_of(r[0], r[2], 503) and "retry-after" in r[1]:
            continue
        bad.append((i, status, (r[2][:80] if r else b"")))
    check(not bad, f"{count} connections at once: all 200 or a clean 503 with Retry-After ({counts}; bad: {bad[:3]})")
    check(all(r and r[0] == 200 for i, r in enumerate(results) if i % 2),
          f"{count} connections at once: every /health among them is 200")
    healthy(f"after {count} connections at once")


def full_queue():
    """40 long requests at once against --max-seqs 4 --max-queued 8: those past the queue get 503 with Retry-After
    at once, the rest run in full."""
    results = [None] * 40
    barrier = threading.Barrier(len(results))

    def one(i):
        barrier.wait(30)
        results[i] = completion({"prompt": PROMPT, "max_tokens": 400, "ignore_eos": True, "temperature": 0},
                                timeout=300)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(320)
    full = [r for r in results if r and r[0] == 200 and json.loads(r[2])["usage"]["completion_tokens"] == 400]
    refused = [r for r in results if r and r[0] == 503 and not error_of(r[0], r[2], 503) and "retry-after" in r[1]]
    check(len(full) + len(refused) == len(results) and refused,
          f"40 long requests at once: {len(full)} ran all 400 tokens, {len(refused)} got 503 with Retry-After "
          f"(statuses {sorted(set(r[0] if r else None for r in results), key=str)}; expected some 503)")
    check(len({r[2] and json.loads(r[2])["choices"][0]["text"] for r in full}) <= 1,
          "the greedy requests that ran gave one text")


def kv_used():
    """(names, total) of the metrics whose name holds "kv" and "used" (not a prefix cache's), or (None, all names)."""
    status, _, body = request("GET", "/metrics")
    if status != 200:
        return None, f"GET /metrics: {status}"
    rows, names = [], set()
    for line in body.decode("utf-8", "replace").splitlines():
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line.strip())
        if m:
            names.add(m.group(1))
            n = m.group(1).lower()
            if "kv" in n and "used" in n and "cached" not in n and "prefix" not in n:
                rows.append((m.group(1) + (m.group(2) or ""), float(m.group(3))))
    if not rows:
        return None, ", ".join(sorted(names))
    return [r[0] for r in rows], sum(r[1] for r in rows)


def wait_kv_idle(idle, what, timeout=20):
    end = time.monotonic() + timeout
    names, now = kv_used()
    while names and now != idle and time.monotonic() < end:
        time.sleep(0.2)
        names, now = kv_used()
    if names is None:
        check(False, f"{what}: /metrics has no metric named with kv and used ({now})")
    else:
        check(now == idle, f"{what}: {', '.join(names)} = {now:g}, idle {idle:g}")


def dropped_requests(count=120):
    """Requests closed right after they were sent (streamed or not; some after the first bytes of the answer): the
    server cancels each and holds no KV block afterwards."""
    for i in range(count):
        head, data = http_bytes({"model": MODEL_NAME, "prompt": PROMPT + " " * (i % 7), "max_tokens": 300,
                                 "ignore_eos": True, "stream": i % 2 == 0, "temperature": 0.5, "seed": i})
        s = connect()
        try:
            s.sendall(head + data)
            if i % 3 == 0:
                s.settimeout(10)
                try:
                    s.recv(64)
                except socket.timeout:
                    pass
            if i % 4 == 0:  # a reset (RST) instead of an orderly close
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        finally:
            s.close()


def sigterm_drain(server):
    """Streams running at SIGTERM finish in full; the server then exits 0."""
    head, data = http_bytes({"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 300, "ignore_eos": True,
                             "stream": True})
    socks = [connect(60) for _ in range(3)]
    for s in socks:
        s.sendall(head + data)
    for s in socks:
        s.settimeout(30)
        s.recv(1, socket.MSG_PEEK)  # the answer has begun
    code = [None]
    stopper = threading.Thread(target=lambda: code.__setitem__(0, server.stop(60)))
    stopper.start()
    for i, s in enumerate(socks):
        try:
            status, _, body = read_response(s, 60)
            events = [line[6:] for line in body.decode("utf-8", "replace").splitlines() if line.startswith("data: ")]
            done = events[-1:] == ["[DONE]"]
            chunks = [json.loads(e) for e in events if e != "[DONE]"]
            finish = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
            check(status == 200 and done and "length" in finish,
                  f"stream {i} running at SIGTERM finished in full (status {status}, [DONE] {done}, finish "
                  f"{[f for f in finish if f]})")
        except (socket.timeout, OSError) as e:
            check(False, f"stream {i} running at SIGTERM: {type(e).__name__}")
        finally:
            s.close()
    stopper.join(90)
    check(code[0] == 0, f"SIGTERM: the server exited with {code[0]} (expected 0)")


def main():
    global HOST, PORT
    try:
        server = Server(SERVER_ARGS)
    except RuntimeError as e:
        check(False, str(e))
        return
    u = urlsplit(server.url)
    HOST, PORT = u.hostname, u.port
    try:
        healthy("at start")
        status, _, body = request("GET", "/v1/models")
        try:
            ids = [m.get("id") for m in json.loads(body)["data"]]
        except (ValueError, KeyError, TypeError, AttributeError):
            ids = body[:100]
        check(status == 200 and MODEL_NAME in ids, f"GET /v1/models lists {MODEL_NAME} (--served-model-name): {ids}")
        before = greedy_text()
        check(before is not None, "a greedy completion at start")
        names, idle = kv_used()
        print(f"KV blocks used at idle: {names} = {idle}" if names else f"no KV-used metric: {idle}")
        for step in (malformed_json, wrong_types, big_body, invalid_text, past_context, garbage_http, keep_alive,
                     slow_clients, half_closed, many_connections, full_queue):
            t = time.monotonic()
            step()
            print(f"({step.__name__}: {time.monotonic() - t:.1f} s)")
            if not server.alive():
                check(False, f"the server died during {step.__name__}:\n" + server.tail())
                return
        if names:
            wait_kv_idle(idle, "after all the above")
        dropped_requests()
        healthy("after 120 dropped requests")
        if names:
            wait_kv_idle(idle, "after 120 dropped requests")
        else:
            check(False, f"/metrics has no metric named with kv and used ({idle})")
        check(greedy_text() == before, "greedy text after all of it is the text at start")
        if not server.external:
            sigterm_drain(server)
    finally:
        if server.alive() and not server.external:
            code = server.stop()
            check(False, f"the server was still running at the end; SIGTERM: exit {code}")
        report = None if server.external else server.sanitizer_report()
        check(report is None, f"no sanitizer report from the server ({report})")


if __name__ == "__main__":
    main()
    print(f"{_passes} passed, {len(_failures)} failed")
    sys.exit(1 if _failures else 0)
