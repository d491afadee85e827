#!/usr/bin/env python3
"""Fused ops against the ops they replace: the same prefill and decode steps profiled with all passes and with
--passes -fuse, node times from the Chrome trace grouped by the part of the layer they compute. Medians of
several runs; ratio < 1 means the fused form is faster.

  bench/bench_fusion.py -m MODEL [-p 64] [-n 16] [-r 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GROUPS = {
    "attention block (q/k/v, q/k norm, rope, attention)": ("attn_q", "attn_k", "attn_v", "rope_q", "rope_k", "attn",
                                                           "attn_q_norm", "attn_q_norm.norm", "attn_k_norm",
                                                           "attn_k_norm.norm"),
    "gate/up + swiglu": ("ffn_gate", "ffn_up", "ffn_swiglu"),
    "output/down projections + residual adds": ("attn_output", "attn_residual", "ffn_down", "ffn_residual"),
    "rms norm + scale": ("attn_norm", "attn_norm.norm", "ffn_norm", "ffn_norm.norm"),
}


def group_of(name):
    if not name.startswith("blk."):
        return None
    suffix = name.split(".", 2)[2]
    for g, members in GROUPS.items():
        if suffix in members:
            return g
    return None


def profile(ascent, model, p, n, passes):
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "t.json")
        args = [ascent, "profile", "-m", model, "-p", str(p), "-n", str(n), "--profile", trace,
                "--roofline-gbps", "1", "--roofline-gflops", "1"]
        if passes:
            args += ["--passes", passes]
        subprocess.run(args, check=True, capture_output=True)
        events = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    phase = {"prefill": {}, "decode": {}}
    run = -1
    for e in events:
        if e["name"] == "token_embd":
            run += 1
        g = group_of(e["name"])
        if g:
            bucket = phase["prefill" if run == 0 else "decode"]
            bucket[g] = bucket.get(g, 0.0) + e["dur"]
    return phase


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", type=int, default=64)
    ap.add_argument("-n", type=int, default=16)
    ap.add_argument("-r", "--runs", type=int, default=5)
    ap.add_argument("--ascent", default=os.path.join(ROOT, "build", "release", "ascent"))
    a = ap.parse_args()
    fused = [profile(a.ascent, a.model, a.p, a.n, None) for _ in range(a.runs)]
    unfused = [profile(a.ascent, a.model, a.p, a.n, "-fuse") for _ in range(a.runs)]
    print(f"| phase | part of the layer | unfused ms | fused ms | fused / unfused |")
    print(f"|---|---|---|---|---|")
    for phase in ("prefill", "decode"):
        for g in GROUPS:
            u = statistics.median(r[phase].get(g, 0.0) for r in unfused) / 1e3
            f = statistics.median(r[phase].get(g, 0.0) for r in fused) / 1e3
            if u == 0 and f == 0:
                continue
            print(f"| {phase} p={a.p} n={a.n} | {g} | {u:.2f} | {f:.2f} | {f / u if u else float('nan'):.3f} |")


if __name__ == "__main__":
    main()
