#!/usr/bin/python3
"""`ascent serve` beside llama.cpp's llama-server (../shared/anchors/llama.cpp, commit 34af94cd9) under the same
`ascent loadtest`: generated tok/s, TTFT and inter-token percentiles, and the ratios, as a markdown table.

Each server runs the same GGUF on the same threads (-t), with one slot (sequence) per client and room in each for the
scenario's prompt plus its tokens. For each scenario the servers take turns, one at a time: start, an untimed warm-up
request (it pages the mapped weights in), the scenario, SIGTERM. Scenarios, each a loadtest with its own seed:
  decode   --clients C --requests R --prompt-tokens P --max-tokens N  (16, 32, 300, 128): throughput under load
  prefix   the same clients and requests, prompts of K + 100 words whose first K (1000) are the same in all: TTFT,
           where a server that reuses a cached prefix computes ~100 prompt tokens per request instead of ~1100
Ratios are ascent over llama-server: generated tok/s (higher is better for ascent), TTFT p50 (lower is better).
Each row's inter-token p99/p50 says how even its token stream is: a prefill batched beside decodes stalls them.

llama-server: -m MODEL -np C -c C*SLOT -t T --host 127.0.0.1 --port PORT (its -c is split evenly over its slots).
ascent serve: -m MODEL --port PORT -t T --max-seqs C --ctx-size SLOT (per sequence: the same total as llama-server's
-c). A third server, ascent with --no-prefix-caching, runs the prefix scenario alone: prefix caching's TTFT gain is
ascent's TTFT p50 without it over with it.
Ready means GET /health answers 200. Needs build.sh's llama-server unless --llama-server names one; --no-ascent runs
llama-server alone. On a shared or busy host the figures are indicative only.

  bench/serve_table.py [--model GGUF] [--no-ascent] [--clients 16] [--requests 32] [--prompt-tokens 300]
                       [--max-tokens 128] [--shared-prefix 1000] [--scenarios decode,prefix] [-t 2]
                       [--ascent BIN] [--llama-server BIN] [--jsonl OUT] [--dry-run]
"""
import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime

from peer_table import BUILD_SH, ROOT, git_commit, lscpu_model

MODEL_PLACES = [os.path.join(ROOT, "bench", "models", "tl16-q4_0.gguf"), "/work/models/tl16-q4_0.gguf"]
NO_CACHE = "ascent-no-prefix-caching"
PREFIX_TAIL = 100  # words after the shared prefix in the prefix scenario
SLOT_MARGIN = 64  # positions past prompt + tokens in each slot: a prompt's BOS, and words of two tokens


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_llama_server(args):
    if args.llama_server:
        return args.llama_server
    r = subprocess.run(["bash", BUILD_SH], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"serve_table: {BUILD_SH} failed: {r.stderr.strip()[-400:]}")
    return os.path.join(r.stdout.strip().splitlines()[-1], "llama-server")


def scenarios(args):
    """(name, loadtest flags) for each scenario asked for."""
    out = []
    for name in args.scenarios.split(","):
        base = ["--clients", args.clients, "--requests", args.requests, "--max-tokens", args.max_tokens]
        if name == "decode":
            out.append((name, base + ["--prompt-tokens", args.prompt_tokens, "--seed", 1]))
        elif name == "prefix":
            out.append((name, base + ["--prompt-tokens", args.shared_prefix + PREFIX_TAIL, "--shared-prefix",
                                      args.shared_prefix, "--seed", 2]))
        else:
            sys.exit(f"serve_table: --scenarios {args.scenarios}: unknown '{name}' (decode, prefix)")
    return [(n, [str(a) for a in f]) for n, f in out]


def slot_size(args):
    longest = max(args.prompt_tokens if n == "decode" else args.shared_prefix + PREFIX_TAIL
                  for n in args.scenarios.split(","))
    return longest + args.max_tokens + SLOT_MARGIN


def server_cmd(args, tool, port):
    total = args.clients * slot_size(args)
    if tool == "llama-server":
        return [args.llama_server, "-m", args.model, "-np", str(args.clients), "-c", str(total), "-t",
                str(args.threads), "--host", "127.0.0.1", "--port", str(port)]
    extra = ["--no-prefix-caching"] if tool == NO_CACHE else []
    return [args.ascent, "serve", "-m", args.model, "--port", str(port), "-t", str(args.threads), "--max-seqs",
            str(args.clients), "--ctx-size", str(slot_size(args))] + args.ascent_flags.split() + extra


def loadtest_cmd(args, port, flags, jsonl):
    return [args.ascent, "loadtest", "--url", f"http://127.0.0.1:{port}"] + flags + ["--jsonl", jsonl]


def wait_ready(proc, port, log_path, tool, limit=600):
    """Waits for GET /health to answer 200; exits naming the tool and its log's last lines if it dies or hangs."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if proc.poll() is not None:
            with open(log_path, errors="replace") as f:
                tail = f.read()[-600:]
            sys.exit(f"serve_table: {tool} exited ({proc.returncode}) before it was ready: {tail.strip()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    stop(proc)
    sys.exit(f"serve_table: {tool} not ready after {limit} s (log: {log_path})")


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_tool(args, tool, work):
    """Starts the tool's server, warms it, runs every scenario's loadtest; {scenario: loadtest summary}."""
    port = free_port()
    log_path = os.path.join(work, f"{tool}-{args.scenarios}.log")
    cmd = server_cmd(args, tool, port)
    print(f"{tool}: {shlex.join(cmd)}", flush=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        ready = wait_ready(proc, port, log_path, tool)
        print(f"{tool}: ready after {ready:.1f} s", flush=True)
        warm = os.path.join(work, f"{tool}-{args.scenarios}-warm.jsonl")
        subprocess.run(loadtest_cmd(args, port, ["--prompt-tokens", "16", "--max-tokens", "4"], warm),
                       capture_output=True, text=True)
        out = {}
        for name, flags in scenarios(args):
            if tool == NO_CACHE and name != "prefix":
                continue
            jsonl = os.path.join(work, f"{tool}-{name}.jsonl")
            cmd = loadtest_cmd(args, port, flags, jsonl)
            print(f"{tool} {name} {datetime.now():%H:%M:%S}: {shlex.join(cmd)}", flush=True)
            r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # progress goes through to stderr
            if not os.path.exists(jsonl):
                sys.exit(f"serve_table: {tool} {name}: loadtest wrote no results (exit {r.returncode})")
            with open(jsonl) as f:
                rows = [json.loads(line) for line in f]
            summary = rows[-1]
            summary["exit"] = r.returncode
            out[name] = summary
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps({"tool": tool, "scenario": name, "server": server_cmd(args, tool, port),
                                        "date": f"{datetime.now():%Y-%m-%d %H:%M:%S}", **summary}) + "\n")
        return out
    finally:
        stop(proc)


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def pct(summary, key, p):
    return summary[key][p] if summary.get(key) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="the GGUF both servers run (default: bench/models/tl16-q4_0.gguf, else "
                                    "/work/models/tl16-q4_0.gguf; bench/make_model.py makes it)")
    ap.add_argument("--ascent", default=os.path.join(ROOT, "build", "release", "ascent"))
    ap.add_argument("--llama-server", help="llama-server binary (default: the one build.sh builds)")
    ap.add_argument("--no-ascent", action="store_true", help="run llama-server alone")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=300)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--shared-prefix", type=int, default=1000)
    ap.add_argument("--scenarios", default="decode,prefix", help="comma-separated, of decode, prefix")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--ascent-flags", default="", help="more flags for ascent serve, e.g. '--max-batch-tokens 128'")
    ap.add_argument("--jsonl", help="append each run's loadtest summary to this file")
    ap.add_argument("--dry-run", action="store_true", help="print the commands; run nothing")
    args = ap.parse_args()
    if min(args.clients, args.requests, args.prompt_tokens, args.max_tokens, args.shared_prefix, args.threads) < 1:
        sys.exit("serve_table: --clients, --requests, --prompt-tokens, --max-tokens, --shared-prefix and -t must be "
                 "positive")
    plan = scenarios(args)
    tools = ["llama-server"] + ([] if args.no_ascent else ["ascent"])
    if not args.no_ascent and any(n == "prefix" for n, _ in plan):
        tools.append(NO_CACHE)
    if args.model is None:
        args.model = next((p for p in MODEL_PLACES if os.path.exists(p)), MODEL_PLACES[0])
    if args.dry_run:
        args.llama_server = args.llama_server or "llama-server"
        for name, flags in plan:
            one = argparse.Namespace(**{**vars(args), "scenarios": name})
            for tool in tools:
                if tool == NO_CACHE and name != "prefix":
                    continue
                print(f"{tool}: {shlex.join(server_cmd(one, tool, 'PORT'))}")
                print(f"  {name}: {shlex.join(loadtest_cmd(one, 'PORT', flags, f'{tool}-{name}.jsonl'))}")
        return
    if not os.path.exists(args.model):
        sys.exit(f"serve_table: no model at {args.model} (bench/make_model.py's docstring says how to make it)")
    if not os.access(args.ascent, os.X_OK):
        sys.exit(f"serve_table: --ascent {args.ascent} is not an executable (build it: make build)")
    args.llama_server = find_llama_server(args)
    if not os.access(args.llama_server, os.X_OK):
        sys.exit(f"serve_table: --llama-server {args.llama_server} is not an executable")

    print(f"command: {shlex.join([sys.argv[0]] + sys.argv[1:])}")
    print(f"date: {datetime.now():%Y-%m-%d %H:%M:%S}; machine: {lscpu_model()}, {os.cpu_count()} logical CPUs; "
          f"ascent {git_commit()}; model {args.model}", flush=True)
    results = {tool: {} for tool in tools}
    with tempfile.TemporaryDirectory(prefix="serve-table-") as work:
        for name, _ in plan:
            # Each scenario on fresh servers sized for it: llama-server's attention grows with its whole -c.
            one = argparse.Namespace(**{**vars(args), "scenarios": name})
            for tool in tools:
                if tool == NO_CACHE and name != "prefix":
                    continue
                results[tool].update(run_tool(one, tool, work))

    print()
    print("| server | scenario | clients | requests | prompt words | max tokens | errors | generated tok/s | "
          "TTFT p50 ms | TTFT p99 ms | inter-token p50 ms | inter-token p99 ms | p99/p50 | e2e p50 ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    failed = False
    for name, _ in plan:
        for tool in tools:
            if name not in results[tool]:
                continue
            s = results[tool][name]
            failed |= s["exit"] != 0 or s["errors"] > 0
            i50, i99 = pct(s, "itl_ms", "p50"), pct(s, "itl_ms", "p99")
            words = s["prompt_words"] if not s["shared_prefix"] else f"{s['prompt_words']} ({s['shared_prefix']} shared)"
            print(f"| {tool} | {name} | {s['clients']} | {s['requests']} | {words} | {s['max_tokens']} | {s['errors']} "
                  f"| {s['generated_tok_per_s']:.2f} | {fmt(pct(s, 'ttft_ms', 'p50'))} | "
                  f"{fmt(pct(s, 'ttft_ms', 'p99'))} | {fmt(i50)} | {fmt(i99)} | "
                  f"{fmt(i99 / i50 if i50 and i99 else None, 2)} | {fmt(pct(s, 'e2e_ms', 'p50'))} |")
    if "ascent" in results:
        print()
        print("| scenario | tok/s ascent / llama-server | TTFT p50 ascent / llama-server |")
        print("|---|---:|---:|")
        for name, _ in plan:
            a, b = results["ascent"][name], results["llama-server"][name]
            tps = a["generated_tok_per_s"] / b["generated_tok_per_s"] if b["generated_tok_per_s"] else None
            ta, tb = pct(a, "ttft_ms", "p50"), pct(b, "ttft_ms", "p50")
            print(f"| {name} | {fmt(tps, 2)} | {fmt(ta / tb if ta and tb else None, 2)} |")
    if NO_CACHE in results and "prefix" in results[NO_CACHE]:
        a, b = pct(results["ascent"]["prefix"], "ttft_ms", "p50"), pct(results[NO_CACHE]["prefix"], "ttft_ms", "p50")
        print()
        print(f"prefix caching: ascent's TTFT p50 {fmt(a)} ms with it, {fmt(b)} ms without: "
              f"{fmt(a / b if a and b else None, 3)} of it")
    if failed:
        sys.exit("serve_table: some requests failed (the errors column); the figures above leave them out")


if __name__ == "__main__":
    main()
