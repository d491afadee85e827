"""Same tokens under any load: a greedy request and a seeded sampled one return byte-identical text alone and among
1, 7 and 31 concurrent other requests, streamed and not, with prefix caching on and off, and when a tiny --kv-memory
forces the engine to preempt sequences and recompute them (its /metrics must show preemptions). The texts alone are
checked against `ascent generate` (the single-sequence path, checked against PyTorch elsewhere) where generate has
the same sampler settings."""
import json
import os
import random
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "serve"))
from server import MODEL, Server, http  # noqa: E402

from common import check, finish, run  # noqa: E402

WORDS = ("once upon a time there was a little girl named lily she liked to play in the park with her dog one day "
         "the sun was shining and they went to see the big tree").split()
PROMPT = "once upon a time there was a little dog named spot who liked to run"
GREEDY = {"temperature": 0}
SEEDED = {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "min_p": 0.0, "seed": 1234}
MAX_TOKENS = 48


def completion_text(url, prompt, settings, stream):
    body = {"model": "story-656K", "prompt": prompt, "max_tokens": MAX_TOKENS, "stream": stream, **settings}
    status, payload = http(url, "POST", "/v1/completions", body)
    if status != 200:
        return f"<status {status}: {payload[:200]}>"
    if not stream:
        return json.loads(payload)["choices"][0]["text"]
    text = ""
    for line in payload.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for c in json.loads(line[6:]).get("choices", []):
                text += c.get("text", "")
    return text


def others(url, n, rng, stop):
    """n clients sending other requests (other prompts, lengths and settings) until stop is set."""
    def client(seed):
        r = random.Random(seed)
        while not stop.is_set():
            prompt = " ".join(r.choice(WORDS) for _ in range(r.randint(1, 150)))
            if r.random() < 0.3:
                prompt = PROMPT + " " + prompt  # shares the target's prefix blocks
            settings = {"temperature": r.choice([0, 0.7, 1.2]), "seed": r.randint(0, 1000)}
            body = {"model": "story-656K", "prompt": prompt, "max_tokens": r.randint(1, 80), "stream": r.random() < 0.5,
                    **settings}
            http(url, "POST", "/v1/completions", body)
    threads = [threading.Thread(target=client, args=(rng.random(),), daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def reference(settings):
    """`ascent generate` alone, same prompt and sampler (its -p tokenizes as the server does)."""
    args = ["generate", "-m", MODEL, "-p", PROMPT, "-n", str(MAX_TOKENS)]
    if settings["temperature"] == 0:
        args += ["--temp", "0"]
    else:
        args += ["--temp", str(settings["temperature"]), "--top-k", str(settings["top_k"]), "--top-p",
                 str(settings["top_p"]), "--min-p", str(settings["min_p"]), "--seed", str(settings["seed"])]
    r = run(args)
    return r.stdout.rstrip("\n") if r.returncode == 0 else None


def main():
    refs = {name: reference(s) for name, s in (("greedy", GREEDY), ("seeded", SEEDED))}
    configs = [("prefix caching on", []), ("prefix caching off", ["--no-prefix-caching"]),
               # 24 blocks of 16 positions (16 KiB each here) for 8 sequences of up to 230 positions: preemption is
               # certain.
               ("tiny --kv-memory", ["--kv-block", "16", "--kv-memory", "384K"])]
    for name, extra in configs:
        srv = Server(["-m", MODEL, "--port", "0", "-t", "2", "--max-seqs", "8", "--max-batch-tokens", "64",
                      "--ctx-size", "256", "--max-queued", "1024", *extra])
        alone = {}
        for label, settings in (("greedy", GREEDY), ("seeded", SEEDED)):
            for stream in (False, True):
                alone[(label, stream)] = completion_text(srv.url, PROMPT, settings, stream)
            check(alone[(label, False)] == alone[(label, True)], f"{name}: {label} alone, streamed == not streamed")
            if refs[label] is not None:
                # generate prints the generated text alone, as the server's completion has it.
                check(alone[(label, False)] == refs[label],
                      f"{name}: {label} alone == ascent generate's text ({alone[(label, False)][:40]!r} vs "
                      f"{refs[label][:40]!r})")
        rng = random.Random(3)
        for n in (1, 7, 31):
            stop = threading.Event()
            threads = others(srv.url, n, rng, stop)
            same = True
            for label, settings in (("greedy", GREEDY), ("seeded", SEEDED)):
                for stream in (False, True):
                    got = completion_text(srv.url, PROMPT, settings, stream)
                    if got != alone[(label, stream)]:
                        same = False
                        print(f"  {label} stream={stream}: {got[:60]!r} != {alone[(label, stream)][:60]!r}")
            stop.set()
            for t in threads:
                t.join()
            check(same, f"{name}: greedy and seeded, streamed and not, among {n} concurrent others == alone")
        status, m = http(srv.url, "GET", "/metrics")
        pre = metric(m, "ascent_preemptions_total")
        if "kv-memory" in name:
            check(pre is not None and pre > 0, f"{name}: the engine preempted sequences ({pre})")
        used = metric(m, "ascent_kv_blocks_used")
        check(used == 0, f"{name}: no KV block held once every request has finished ({used})")
        code = srv.stop()
        check(code in (0, "external"), f"{name}: SIGTERM: exit 0 (got {code})")
        check(srv.sanitizer_report() is None, f"{name}: no sanitizer report ({srv.sanitizer_report()})")
    finish()


if __name__ == "__main__":
    main()
