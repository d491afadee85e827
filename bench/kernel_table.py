#!/usr/bin/python3
"""The kernel table: `ascent bench` over every weight format, several passes in rotated order, medians judged
against the targets.

One pass runs `ascent bench -m MODEL -p 512 -n 128 -t 2 -r 3 --no-mmap --jsonl` for each model in turn. A host's
memory rate can move by up to 1.8x within minutes (bench/RESULTS.md, roofline table), so one pass decides nothing.
The script takes --passes passes and reports each format's median over them. Pass i starts at the i-th model and
wraps around. So no format always runs first (right after the previous pass's last model freed its memory) or always
last. Rotated series have shown no effect of the position (bench/RESULTS.md, kernel table), but the rotation keeps
any such effect off any one format.

Decode is judged as `ascent bench` judges it: each run against the best read of memory between its tokens. Prefill is
judged against tokens/s derived from llama.cpp's figures on the same model shape (PREFILL_TPS below). The script
measures and compares; it changes nothing.

  bench/kernel_table.py [--ascent BIN] [--passes 5] [-p 512] [-n 128] [-r 3] [-t 2] [--jsonl OUT] [MODEL ...]

MODEL defaults to bench/models/tl16-{int4,int8,bf16}.safetensors and tl16-{q4_0,q8_0,q4_k,q6_k}.gguf; bench/RESULTS.md
(kernel table) gives the commands that make them. A model's format is the part of its file name after the last '-'
(tl16-q4_0.gguf: q4_0).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODELS = [os.path.join(HERE, "models", f"tl16-{f}") for f in
                  ("int4.safetensors", "int8.safetensors", "bf16.safetensors", "q4_0.gguf", "q8_0.gguf",
                   "q4_k.gguf", "q6_k.gguf")]

# The targets. llama.cpp (commit 34af94cd9, 2 threads, the 16-layer TinyLlama shape) ran pp512 at Q8_0 132 t/s,
# Q4_0 261, F16 165. int8 must reach 2x the first (and 55% of the vpdpbusd peak), int4 and bf16 1.5x the others.
PREFILL_TPS = {"int8": 2 * 132, "int4": 1.5 * 261, "bf16": 1.5 * 165}
PREFILL_PCT = {"int8": 55.0}
DECODE_PCT = {f: 85.0 for f in ("int8", "int4", "q4_0", "q8_0", "q4_k", "q6_k")}


def fmt_of(path):
    return os.path.basename(path.rstrip("/")).split(".")[0].rsplit("-", 1)[-1]


def run_bench(args, model):
    cmd = [args.ascent, "bench", "-m", model, "-p", str(args.p), "-n", str(args.n), "-t", str(args.threads), "-r",
           str(args.reps), "--jsonl"] + ([] if args.mmap else ["--no-mmap"])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"kernel_table: {' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()[-300:]}")
    out = {}
    for line in r.stdout.splitlines():
        d = json.loads(line)
        out["pp" if d["test"].startswith("pp") else "tg"] = d
    if ("pp" not in out and args.p > 0) or ("tg" not in out and args.n > 0):
        sys.exit(f"kernel_table: {' '.join(cmd)} printed no {'pp' if 'pp' not in out else 'tg'} result")
    if "tg" in out and not out["tg"].get("read_gbps"):
        sys.exit(f"kernel_table: {args.ascent} printed no read_gbps beside its decode result")
    return out


def cells(values, digits=1):
    return " / ".join(f"{v:.{digits}f}" for v in values)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ascent", default=os.path.join(HERE, "..", "build", "release", "ascent"))
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("-p", type=int, default=512, help="prompt tokens (prefill test)")
    ap.add_argument("-n", type=int, default=128, help="decode tokens per run")
    ap.add_argument("-r", "--reps", type=int, default=3, help="timed runs per ascent bench call")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--mmap", action="store_true", help="use the weights in place (the table uses --no-mmap)")
    ap.add_argument("--jsonl", help="append every ascent bench result, with its pass and position, to this file")
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    args = ap.parse_args()
    if args.passes < 1:
        sys.exit(f"kernel_table: --passes {args.passes}: need at least one pass")
    if args.p <= 0 and args.n <= 0:
        sys.exit("kernel_table: -p and -n are both 0: nothing to measure")
    missing = [m for m in args.models if not os.path.exists(m)]
    if missing:
        sys.exit(f"kernel_table: no model at {', '.join(missing)} (bench/RESULTS.md, Issue 5 section: how to make "
                 "them with bench/make_model.py and ascent quantize)")
    if not os.access(args.ascent, os.X_OK):
        sys.exit(f"kernel_table: --ascent {args.ascent} is not an executable (build it: make build)")

    results = {m: [] for m in args.models}  # per model, in pass order
    n = len(args.models)
    log = open(args.jsonl, "a") if args.jsonl else None
    for i in range(args.passes):
        order = args.models[i % n:] + args.models[:i % n]
        print(f"pass {i + 1} {datetime.now():%H:%M:%S}: {', '.join(os.path.basename(m) for m in order)}", flush=True)
        for pos, m in enumerate(order):
            d = run_bench(args, m)
            results[m].append(d)
            parts = []
            if "pp" in d:
                parts.append(f"{d['pp']['test']} {d['pp']['tps_median']:.1f} t/s ({d['pp']['roofline_pct']:.1f}% "
                             "of peak)")
            if "tg" in d:
                reads = d["tg"]["read_gbps"]
                parts.append(f"{d['tg']['test']} {d['tg']['tps_median']:.1f} t/s, {d['tg']['roofline_pct']:.1f}% of "
                             f"read ({min(reads):.1f}-{max(reads):.1f} GB/s)")
            print(f"  {os.path.basename(m)}: {'; '.join(parts)}", flush=True)
            if log:
                log.write(json.dumps({"pass": i + 1, "position": pos + 1, "model": m, **d}) + "\n")
                log.flush()
    if log:
        log.close()

    print(f"\n{args.passes} passes, each model first in {args.passes // n}-{-(-args.passes // n)} of them")
    print("\n| format | pp t/s (passes) | pp median | tg % of read (passes) | tg median | tg t/s median | reads GB/s |")
    print("|---|---|---|---|---|---|---|")
    verdicts = []
    for m in args.models:
        f, rows = fmt_of(m), results[m]
        pp = [d["pp"]["tps_median"] for d in rows if "pp" in d]
        pp_pct = [d["pp"]["roofline_pct"] for d in rows if "pp" in d]
        tg = [d["tg"]["roofline_pct"] for d in rows if "tg" in d]
        tg_tps = [d["tg"]["tps_median"] for d in rows if "tg" in d]
        reads = [g for d in rows if "tg" in d for g in d["tg"]["read_gbps"]]
        print(f"| {f} | {cells(pp) or '-'} | {statistics.median(pp) if pp else 0:.1f} | {cells(tg) or '-'} | "
              f"{statistics.median(tg) if tg else 0:.1f}% | {statistics.median(tg_tps) if tg_tps else 0:.1f} | "
              f"{f'{min(reads):.0f}-{max(reads):.0f}' if reads else '-'} |")
        if pp and f in PREFILL_TPS:
            med = statistics.median(pp)
            verdicts.append((f"{f} prefill median {med:.1f} t/s >= {PREFILL_TPS[f]:.1f}", med >= PREFILL_TPS[f],
                             f"lowest pass {min(pp):.1f}"))
        if pp_pct and f in PREFILL_PCT:
            med = statistics.median(pp_pct)
            verdicts.append((f"{f} prefill median {med:.1f}% of the int8 dot peak >= {PREFILL_PCT[f]:.0f}%",
                             med >= PREFILL_PCT[f], f"lowest pass {min(pp_pct):.1f}%"))
        if tg and f in DECODE_PCT:
            med = statistics.median(tg)
            above = sum(v >= DECODE_PCT[f] for v in tg)
            verdicts.append((f"{f} decode median {med:.1f}% of the read >= {DECODE_PCT[f]:.0f}%", med >= DECODE_PCT[f],
                             f"{above} of {len(tg)} passes at or above"))
    print("\nTargets (issue 5, set for the 16-layer TinyLlama shape), by the medians:")
    for text, ok, detail in verdicts:
        print(f"- {text}: {'met' if ok else 'NOT met'} ({detail})")
    if not verdicts:
        print("- none of these models' formats has a target")
    print(f"\nall targets met: {'yes' if verdicts and all(ok for _, ok, _ in verdicts) else 'no'}")


if __name__ == "__main__":
    main()
