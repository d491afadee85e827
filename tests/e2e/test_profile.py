"""The profiler and the graph passes as a user sees them:

- `ascent profile` reports fewer nodes per layer after fusion, and one plan per shape bucket (a warm-up moves them to
  start-up);
- `--profile` writes a Chrome trace whose events carry the required fields and cover every executed node, with each pool
  thread's share of every matmul call on its own track;
- `--memory-csv` writes memory over time."""
import csv
import json
import os
import re

from common import SHARED, check, finish, run, tmpdir

MODEL = os.path.join(SHARED, "models", "story-656K")
ROOF = ["--roofline-gbps", 20, "--roofline-gflops", 200, "--roofline-int8-gops", 800, "--roofline-bf16-gflops", 400]


def field(text, name):
    m = re.search(rf"^{name} = (\d+)", text, re.M)
    return int(m.group(1)) if m else None


def check_thread_spans(d):
    """With two threads, each matmul call's rows are filed per pool thread on its own trace track. The threads' rows add
    up to the matrix rows the model's config gives, and their bytes to rows x K x 4 (f32 weights). Each span lies inside
    its call, inside its node. The printed decode table's row shares add up to 100%."""
    cfg = json.load(open(os.path.join(MODEL, "config.json")))
    hidden, ffn, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    head = hidden // cfg["num_attention_heads"]
    qkv = (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * head
    trace = os.path.join(d, "threads.json")
    r = run(["profile", "-m", MODEL, "-p", 20, "-n", 5, "-t", 2, "--profile", trace] + ROOF)
    check(r.returncode == 0, f"profile -t 2 runs ({r.stderr.strip()[:200]})")
    if r.returncode != 0:
        return
    doc = json.load(open(trace))["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in doc if e.get("ph") == "M" and e["name"] == "thread_name"}
    nodes = [e for e in doc if e.get("ph") == "X" and e.get("cat") != "rows"]
    spans = [e for e in doc if e.get("cat") == "rows"]
    # Which threads got rows is the host's timing (a busy CI host may leave the worker asleep through a call); each
    # one that did has its named track.
    used = {e["tid"] for e in spans}
    check(used and used <= {100, 101} and all(tracks.get(t) == f"pool thread {t - 100}" for t in used),
          f"spans on the pool threads' named tracks: {sorted(used)}, {tracks}")
    calls = {}
    for e in spans:
        calls.setdefault(e["args"]["call"], []).append(e)
    # rows and K of each node's call(s), prefill (T > 1) and decode (T = 1). The fused gate/up runs as one call of both
    # matrices' rows in decode, and in prefill as one call over rows that each take a gate and an up row.
    def want(name, decode):
        if name.endswith(".attn"):
            return qkv, hidden
        if name.endswith(".attn_output"):
            return hidden, hidden
        if name.endswith(".ffn_swiglu"):
            return (2 * ffn if decode else ffn), hidden
        if name.endswith(".ffn_down"):
            return hidden, ffn
        return (vocab, hidden) if name == "output" else (None, None)
    bad, both, decode_calls = [], 0, 0
    eps = 0.01  # microseconds: the trace's timestamps are rounded to the nanosecond
    for c, es in calls.items():
        a = es[0]["args"]
        node = [n for n in nodes if n["name"] == es[0]["name"] and n["ts"] - eps <= a["call_ts"]
                and a["call_ts"] + a["call_dur"] <= n["ts"] + n["dur"] + eps]
        decode = bool(node) and node[0]["args"]["shapes"].startswith("(1, ")
        rows, K = want(es[0]["name"], decode)
        per_row = K * 4 * (2 if es[0]["name"].endswith(".ffn_swiglu") and not decode else 1) if K else None
        decode_calls += decode
        both += len({e["tid"] for e in es}) == 2
        if (len(node) != 1 or sum(e["args"]["rows"] for e in es) != a["call_rows"] or a["call_rows"] != rows
                or any(e["args"]["bytes"] != e["args"]["rows"] * per_row for e in es)
                or any(e["ts"] < a["call_ts"] - eps or e["ts"] + e["dur"] > a["call_ts"] + a["call_dur"] + eps
                       for e in es)):
            bad.append((c, es[0]["name"], a["call_rows"], rows, len(node)))
    check(len(calls) == 6 * 9 and not bad, f"{len(calls)} calls of 6 runs x 9 matmuls; rows, bytes and times "
          f"agree with the config and nest in their nodes (mismatches: {bad[:3]})")
    # One-row calls: the 5 decode steps' 9 each, and the prefill's output projection (of its last row only).
    check(decode_calls == 5 * 9 + 1, f"{decode_calls} one-row calls ({both} of all calls ran on both threads)")
    m = re.search(r"^decode matmul calls: (\d+) in 5 steps", r.stdout, re.M)
    shares = [float(x) for x in re.findall(r"^[01]\s+([\d.]+)%", r.stdout, re.M)]
    check(m is not None and int(m.group(1)) == 45 and len(shares) == 2 and abs(sum(shares) - 100) < 0.2,
          f"the decode table: 45 calls, two threads' row shares adding to 100% ({shares})")


def main():
    d = tmpdir()
    trace = os.path.join(d, "trace.json")
    r = run(["profile", "-m", MODEL, "-p", 20, "-n", 5, "--profile", trace] + ROOF)
    check(r.returncode == 0, f"profile runs ({r.stderr.strip()[:200]})")
    before, after = field(r.stdout, "nodes_per_layer_before_fusion"), field(r.stdout, "nodes_per_layer_after_fusion")
    check(before and after and after < before, f"fusion lowers nodes per layer: {before} -> {after}")
    check(field(r.stdout, "plans_compiled") == 2, "prefill bucket and decode bucket: 2 plans for 6 runs")
    check(re.search(r"^matmul\s+\d+", r.stdout, re.M) is not None and "share" in r.stdout, "top-ops table printed")
    per_run = int(re.search(r"nodes_executed = \d+ \((\d+) per run\)", r.stdout).group(1))

    doc = json.load(open(trace))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "rows"]  # the nodes
    required = {"name", "ph", "ts", "dur", "pid", "tid", "args"}
    check(all(required <= set(e) for e in events), "every event has name, ph, ts, dur, pid, tid, args")
    check(all({"op", "shapes", "bytes", "flops"} <= set(e["args"]) for e in events), "args carry op, shapes, bytes, flops")
    check(len(events) == 6 * per_run, f"{len(events)} events for 6 runs of {per_run} nodes")
    names = {e["name"] for e in events}
    check({"token_embd", "blk.0.attn", "blk.1.ffn_swiglu", "blk.1.ffn_down", "output"} <= names, f"events name the nodes: {sorted(names)[:6]}")
    check(all(e["dur"] >= 0 and e["ts"] >= 0 for e in events), "timestamps and durations are non-negative")

    check_thread_spans(d)

    # Without fusion the same trace has more nodes per run, and the profile says so.
    r2 = run(["profile", "-m", MODEL, "-p", 20, "-n", 1, "--passes", "-fuse"] + ROOF)
    check(r2.returncode == 0 and field(r2.stdout, "nodes_per_layer_after_fusion") == before,
          "--passes -fuse leaves the graph unfused")
    r3 = run(["profile", "-m", MODEL, "-p", 20, "-n", 2, "--warmup", 32] + ROOF)
    check(r3.returncode == 0 and "(6 at warm-up, 0 during the run)" in r3.stdout, f"warm-up compiles buckets 1..32 before the first token: "
          f"{re.search(r'plans_compiled.*', r3.stdout).group(0) if 'plans_compiled' in r3.stdout else r3.stderr}")

    # Unfused decode attention reads the cache's K and V of n_past + 1 positions: 4 bytes a value, 2 in an f16 cache.
    last = {}
    for kv in ("f32", "f16"):
        t = os.path.join(d, f"attn-{kv}.json")
        r = run(["profile", "-m", MODEL, "-p", 20, "-n", 1, "--passes", "-fuse-attention", "--kv-type", kv,
                 "--profile", t] + ROOF)
        ev = [e for e in json.load(open(t))["traceEvents"] if e.get("args", {}).get("op") == "attention"] \
            if r.returncode == 0 else []
        last[kv] = ev[-1]["args"] if ev else None
    if last["f32"] and last["f16"]:
        dims = [int(x) for x in re.findall(r"\(1, (\d+)\)", last["f32"]["shapes"])]  # q, k, v inputs -> output
        values = 2 * 21 * dims[1]  # K and V of positions 0..20
        want = {"f32": 8 * dims[0] + 4 * values, "f16": 8 * dims[0] + 2 * values}
        check(all(last[kv]["bytes"] == want[kv] for kv in want),
              f"profile: decode attention counts 4 bytes per cached value, 2 with --kv-type f16 "
              f"({last['f32']['bytes']}, {last['f16']['bytes']} == {want['f32']}, {want['f16']})")
    else:
        check(False, f"profile --kv-type f32/f16 with unfused attention runs: {r.stderr.strip()[:200]}")

    mem = os.path.join(d, "mem.csv")
    trace2 = os.path.join(d, "gen.json")
    r = run(["generate", "-m", MODEL, "--prompt-ids", "1", "-n", 4, "--temp", 0, "--print-ids", "--profile", trace2,
             "--memory-csv", mem])
    rows = list(csv.DictReader(open(mem))) if r.returncode == 0 else []
    check(len(rows) == 4 and all(int(x["arena_bytes"]) > 0 and int(x["resident_bytes"]) > 0 for x in rows),
          f"generate --memory-csv: one sample per forward, prefill + 3 decode steps ({len(rows)})")
    check(r.returncode == 0 and len(json.load(open(trace2))["traceEvents"]) > 0, "generate --profile writes a trace")
    r = run(["generate", "-m", MODEL, "--prompt-ids", "1", "-n", 1, "--passes", "-fusion"])
    check(r.returncode == 2 or (r.returncode == 1 and "--passes" in r.stderr), f"bad --passes: {r.stderr.strip()}")
    finish()


if __name__ == "__main__":
    main()
