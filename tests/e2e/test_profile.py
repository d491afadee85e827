"""The profiler and the graph passes as a user sees them: `ascent profile` reports fewer nodes per layer after
fusion and one plan per shape bucket (a warm-up moves them to start-up); `--profile` writes a Chrome trace whose
events carry the required fields and cover every executed node; `--memory-csv` writes memory over time."""
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
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    required = {"name", "ph", "ts", "dur", "pid", "tid", "args"}
    check(all(required <= set(e) for e in events), "every event has name, ph, ts, dur, pid, tid, args")
    check(all({"op", "shapes", "bytes", "flops"} <= set(e["args"]) for e in events), "args carry op, shapes, bytes, flops")
    check(len(events) == 6 * per_run, f"{len(events)} events for 6 runs of {per_run} nodes")
    names = {e["name"] for e in events}
    check({"token_embd", "blk.0.attn", "blk.1.ffn_swiglu", "blk.1.ffn_down", "output"} <= names, f"events name the nodes: {sorted(names)[:6]}")
    check(all(e["dur"] >= 0 and e["ts"] >= 0 for e in events), "timestamps and durations are non-negative")

    # Without fusion the same trace has more nodes per run, and the profile says so.
    r2 = run(["profile", "-m", MODEL, "-p", 20, "-n", 1, "--passes", "-fuse"] + ROOF)
    check(field(r2.stdout, "nodes_per_layer_after_fusion") == before, "--passes -fuse leaves the graph unfused")
    r3 = run(["profile", "-m", MODEL, "-p", 20, "-n", 2, "--warmup", 32] + ROOF)
    check("(6 at warm-up, 0 during the run)" in r3.stdout, f"warm-up compiles buckets 1..32 before the first token: "
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
