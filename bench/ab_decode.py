#!/usr/bin/python3
"""A/B decode speed of several ascent binaries on one model: runs interleaved, each judged by its best read.

A host's memory can move between a slow state (two threads read about what one does) and a fast one (two threads
read ~1.7x one) within seconds. So back-to-back medians of two builds compare
states as often as code. This script alternates the binaries round by round, every other round in reverse order: the
run second in a round can read less beside its tokens. It takes each `ascent bench --jsonl` decode result with the
read each run was judged against (the best of the reads between its tokens). It prints per binary the median t/s and % of read,
overall and split by state; a result whose reads' median is above --fast-gbps counts as fast. It measures; it does
not judge.

Then, for each binary after the first, it prints two figures against the first binary in the same round:
  - the median of its % of read minus the first binary's, counting only rounds whose two reads agree within
    --pair-gbps (medians of whole series differ by the states their rounds met as much as by the code);
  - the median over all rounds of its t/s over the first binary's, with how many rounds it was faster in.

  bench/ab_decode.py -m MODEL [-t 2] [-n 32] [-r 3] [--rounds 4] [--no-mmap] [--fast-gbps 45] [--pair-gbps 5]
                     BIN [BIN ...]

A BIN may carry flags for `ascent bench`, quoted as one argument: "build/release/ascent --no-thread-layout" against
"build/release/ascent" measures what the weights' placement by thread is worth on the same binary.
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys


def run_once(binary, args):
    path, *flags = shlex.split(binary)
    cmd = [path, "bench", "-m", args.model, "-p", "0", "-n", str(args.n), "-t", str(args.threads), "-r",
           str(args.reps), "--jsonl"] + (["--no-mmap"] if args.no_mmap else []) + flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ab_decode: {' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()[-300:]}")
    for line in r.stdout.splitlines():
        d = json.loads(line)
        if d["test"].startswith("tg"):
            if not d.get("read_gbps"):
                sys.exit(f"ab_decode: {binary} printed no read_gbps (an ascent without the decode read probe?)")
            return d
    sys.exit(f"ab_decode: {' '.join(cmd)} printed no decode result")


def summary(rows):
    if not rows:
        return "-"
    tps = statistics.median(d["tps_median"] for d in rows)
    pct = statistics.median(d["roofline_pct"] for d in rows)
    return f"{tps:.1f} t/s, {pct:.0f}% of read (n={len(rows)})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=32, help="decode tokens per run")
    ap.add_argument("-r", "--reps", type=int, default=3, help="timed runs per ascent bench call")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-mmap", action="store_true")
    ap.add_argument("--fast-gbps", type=float, default=45.0,
                    help="a result whose median surrounding read exceeds this counts as the fast state")
    ap.add_argument("--pair-gbps", type=float, default=5.0,
                    help="pair a round's two runs only when their median reads differ by at most this")
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    results = [[] for _ in args.binaries]  # per position, so that one binary given twice is an A/A test
    order = list(range(len(args.binaries)))
    for rnd in range(args.rounds):
        # ABBA: every other round in reverse order, so that a bias of the first or second run of a round (a
        # neighbour's load arriving, memory the previous process freed being reclaimed) falls on every binary alike.
        for i in (order if rnd % 2 == 0 else order[::-1]):
            b = args.binaries[i]
            d = run_once(b, args)
            results[i].append(d)
            reads = ", ".join(f"{x:.1f}" for x in d["read_gbps"])
            print(f"round {rnd + 1} {b}: {d['test']} {d['tps_median']:.1f} t/s, {d['roofline_pct']:.1f}% "
                  f"of read [{reads}] GB/s", flush=True)
    print(f"\n| binary | all | fast state (read > {args.fast_gbps:g} GB/s) | slow state |")
    print("|---|---|---|---|")
    for b, rows in zip(args.binaries, results):
        fast = [d for d in rows if statistics.median(d["read_gbps"]) > args.fast_gbps]
        slow = [d for d in rows if d not in fast]
        print(f"| {b} | {summary(rows)} | {summary(fast)} | {summary(slow)} |")
    # The two runs of one round met nearly the same memory when their reads agree: their difference in % of the read
    # is then the code's, where the medians above can compare states as often as code.
    first = args.binaries[0]
    for i, b in enumerate(args.binaries[1:], start=1):
        diffs, left_out = [], 0
        for x, y in zip(results[0], results[i]):
            if abs(statistics.median(x["read_gbps"]) - statistics.median(y["read_gbps"])) <= args.pair_gbps:
                diffs.append(y["roofline_pct"] - x["roofline_pct"])
            else:
                left_out += 1
        per_round = ", ".join(f"{d:+.1f}" for d in diffs) or "-"
        median = f"{statistics.median(diffs):+.1f}" if diffs else "-"
        print(f"\npaired with {first}: {b}: median {median} points of the read over {len(diffs)} rounds whose reads "
              f"differ by <= {args.pair_gbps:g} GB/s ({per_round}); {left_out} rounds left out")
        # t/s against the same round's first binary, every round: a code change that moves bytes and arithmetic
        # alike shows here even when the reads beside the runs swing. The reads can move 10+ GB/s between the two runs
        # of a round while the tokens' speed stays.
        ratios = [y["tps_median"] / x["tps_median"] for x, y in zip(results[0], results[i])]
        faster = sum(r > 1 for r in ratios)
        print(f"t/s against {first}, same round: median x{statistics.median(ratios):.3f} over {len(ratios)} rounds, "
              f"faster in {faster} ({', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
