#!/usr/bin/python3
"""Ascent beside llama.cpp (the peer: ../shared/anchors/llama.cpp, commit 34af94cd9) on the same model files:
`ascent bench` and `llama-bench` prefill and decode t/s per weight format, several passes, medians, ratios.

Needs build.sh's binaries: the script runs ../shared/anchors/llama.cpp/build.sh (15-20 minutes on 2 cores the first
time, then a check) and takes llama-bench from the folder it prints, unless --llama-bench names one. CI does not
build llama.cpp, so no test runs this script against the peer; `--dry-run` prints the plan (passes, order, commands)
without running anything, which is what tests/CMakeLists.txt checks.

Each format pairs a file of ours with the peer's nearest (MODELS: tl16-FORMAT.gguf or .safetensors):
  f16, bf16g (BF16 GGUF), q8_0, q4_0, q4_k_m, q6_k    both tools run the same GGUF file
  int8 / int4 / bf16 (Ascent's .safetensors)          the peer runs tl16-q8_0 / tl16-q4_0 / tl16-bf16g.gguf
A pass runs every format once, starting at the pass's own format and wrapping around (no format always first or
last); within a format the two tools alternate which goes first, pass by pass and format by format. This host is
shared and its memory rate moves within minutes, so one pass decides nothing: medians over passes, and each ratio
is the median of the passes' ratios (each pair measured within the same minute).

Fairness: the same -p/-n/-r/-t; both map the file (llama-bench's default load; ascent's default), or with --no-mmap
both read it into memory (llama-bench --load-mode none); both run an untimed warm-up first (their defaults); the KV
cache is f16 on both (llama-bench's default, ascent --kv-type f16). llama-bench's t/s is the median of its
samples_ts, as ascent's tps_median is of its runs.

Decode's share of the read: the bytes a token must read (the matrices but the token embedding, which is gathered,
plus the K and V rows attended over, on average (n + 1) / 2 positions) times t/s, over the best read of memory
`ascent bench` measured between its decode tokens in the same pass (the highest of its runs' read_gbps: a plain
2-thread read's ceiling in those seconds, prof::ReadProbe). Ours counts the bytes `ascent bench` reports
(token_bytes); the peer's come from its GGUF file's tensor table.

  bench/peer_table.py --models DIR [--formats f16,q8_0,...] [--passes 5] [-r 3] [-t 2] [-p 512] [-n 128]
                      [--no-mmap] [--ascent BIN] [--llama-bench BIN] [--jsonl OUT] [--dry-run]
"""
import argparse
import json
import os
import shlex
import statistics
import struct
import subprocess
import sys
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD_SH = os.path.join(ROOT, "..", "shared", "anchors", "llama.cpp", "build.sh")

# format: (our file, the peer's file), names under --models
PAIRS = {
    "f16": ("tl16-f16.gguf", "tl16-f16.gguf"),
    "bf16g": ("tl16-bf16g.gguf", "tl16-bf16g.gguf"),
    "q8_0": ("tl16-q8_0.gguf", "tl16-q8_0.gguf"),
    "q4_0": ("tl16-q4_0.gguf", "tl16-q4_0.gguf"),
    "q4_k_m": ("tl16-q4_k_m.gguf", "tl16-q4_k_m.gguf"),
    "q6_k": ("tl16-q6_k.gguf", "tl16-q6_k.gguf"),
    "int8": ("tl16-int8.safetensors", "tl16-q8_0.gguf"),
    "int4": ("tl16-int4.safetensors", "tl16-q4_0.gguf"),
    "bf16": ("tl16-bf16.safetensors", "tl16-bf16g.gguf"),
}

# GGML type: (elements per block, bytes per block), for the types llama-quantize writes here.
GGML_BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
               12: (256, 144), 13: (256, 176), 14: (256, 210), 10: (256, 84), 11: (256, 110)}


def gguf_token_read(path, n_gen):
    """(bytes a decode token reads, model facts) from a GGUF file's header: every matrix but the token embedding,
    plus an f16 K and V row per layer and position for (n_gen + 1) / 2 positions on average."""
    with open(path, "rb") as f:
        head = f.read(64 << 20)
    if head[:4] != b"GGUF":
        sys.exit(f"peer_table: {path}: not a GGUF file")
    n_tensors, n_kv = struct.unpack_from("<QQ", head, 8)
    pos = 24
    meta = {}

    def string(p):
        n = struct.unpack_from("<Q", head, p)[0]
        return head[p + 8:p + 8 + n].decode(errors="replace"), p + 8 + n

    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def value(t, p):
        if t in scalar:
            return struct.unpack_from(scalar[t], head, p)[0], p + struct.calcsize(scalar[t])
        if t == 8:
            return string(p)
        if t != 9:
            sys.exit(f"peer_table: {path}: metadata type {t} is not a GGUF type")
        et, n = struct.unpack_from("<IQ", head, p)
        p += 12
        if et in scalar:
            return None, p + n * struct.calcsize(scalar[et])
        for _ in range(n):
            _, p = value(et, p)
        return None, p

    for _ in range(n_kv):
        key, pos = string(pos)
        t = struct.unpack_from("<I", head, pos)[0]
        meta[key], pos = value(t, pos + 4)
    arch = meta.get("general.architecture")
    layers, kv_heads = meta.get(f"{arch}.block_count"), meta.get(f"{arch}.attention.head_count_kv")
    heads, embd = meta.get(f"{arch}.attention.head_count"), meta.get(f"{arch}.embedding_length")
    if not all((layers, kv_heads, heads, embd)):
        sys.exit(f"peer_table: {path}: no {arch}.block_count / head counts / embedding_length")
    head_dim = meta.get(f"{arch}.attention.key_length", embd // heads)
    weights = 0
    for _ in range(n_tensors):
        name, pos = string(pos)
        nd = struct.unpack_from("<I", head, pos)[0]
        dims = struct.unpack_from(f"<{nd}Q", head, pos + 4)
        ggml_type = struct.unpack_from("<I", head, pos + 4 + 8 * nd)[0]
        pos += 4 + 8 * nd + 4 + 8
        if ggml_type not in GGML_BLOCKS:
            sys.exit(f"peer_table: {path}: tensor {name} has GGML type {ggml_type}, not one this script sizes")
        per, size = GGML_BLOCKS[ggml_type]
        n = 1
        for d in dims:
            n *= d
        if nd == 2 and name != "token_embd.weight":
            weights += n // per * size
    kv = 2 * layers * kv_heads * head_dim * 2 * 0.5 * (n_gen + 1)
    return weights + kv


def lscpu_model():
    r = subprocess.run(["lscpu"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def git_commit():
    r = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def find_llama_bench(args):
    if args.llama_bench:
        return args.llama_bench
    r = subprocess.run(["bash", BUILD_SH], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"peer_table: {BUILD_SH} failed: {r.stderr.strip()[-400:]}")
    return os.path.join(r.stdout.strip().splitlines()[-1], "llama-bench")


def ascent_cmd(args, model):
    return [args.ascent, "bench", "-m", model, "-p", str(args.p), "-n", str(args.n), "-t", str(args.threads), "-r",
            str(args.reps), "--kv-type", "f16", "--jsonl"] + (["--no-mmap"] if args.no_mmap else [])


def llama_cmd(args, model):
    return [args.llama_bench, "-m", model, "-p", str(args.p), "-n", str(args.n), "-t", str(args.threads), "-r",
            str(args.reps), "-o", "jsonl"] + (["--load-mode", "none"] if args.no_mmap else [])


def run_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"peer_table: {shlex.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()[-400:]}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def run_ascent(args, model):
    out = {}
    for d in run_json(ascent_cmd(args, model)):
        key = "pp" if d["n_prompt"] > 0 else "tg"
        out[key] = d["tps_median"]
        if key == "tg":
            if not d.get("read_gbps") or not d.get("token_bytes"):
                sys.exit(f"peer_table: {args.ascent} printed no read_gbps/token_bytes beside its decode result")
            out["read"] = max(d["read_gbps"])
            out["bytes"] = d["token_bytes"]
    return out


def run_llama(args, model):
    out = {}
    for d in run_json(llama_cmd(args, model)):
        key = "pp" if d["n_prompt"] > 0 else "tg"
        out[key] = statistics.median(d["samples_ts"])
        out["commit"] = d.get("build_commit", "?")
    return out


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=1, suffix=""):
    return "-" if v is None else f"{v:.{digits}f}{suffix}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=os.path.join(HERE, "models"), help="folder holding the tl16-* files")
    ap.add_argument("--formats", default=",".join(PAIRS), help=f"comma-separated, of {', '.join(PAIRS)}")
    ap.add_argument("--ascent", default=os.path.join(ROOT, "build", "release", "ascent"))
    ap.add_argument("--llama-bench", help="llama-bench binary (default: the one build.sh builds)")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("-p", type=int, default=512, help="prompt tokens (prefill test)")
    ap.add_argument("-n", type=int, default=128, help="decode tokens")
    ap.add_argument("-r", "--reps", type=int, default=3, help="timed runs per tool call")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--no-mmap", action="store_true", help="both tools read the file into memory")
    ap.add_argument("--jsonl", help="append each pass's results to this file")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and commands; run nothing")
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    bad = [f for f in formats if f not in PAIRS]
    if bad or not formats:
        sys.exit(f"peer_table: --formats {args.formats}: unknown {', '.join(bad) or '(none given)'}; "
                 f"formats are {', '.join(PAIRS)}")
    if args.passes < 1 or args.p <= 0 or args.n <= 0 or args.reps < 1 or args.threads < 1:
        sys.exit("peer_table: --passes, -p, -n, -r and -t must be positive")
    files = {f: tuple(os.path.join(args.models, name) for name in PAIRS[f]) for f in formats}
    if args.dry_run:
        args.llama_bench = args.llama_bench or "llama-bench"
    else:
        missing = sorted({p for pair in files.values() for p in pair if not os.path.exists(p)})
        if missing:
            sys.exit(f"peer_table: no model at {', '.join(missing)} (the docstring of bench/make_model.py and "
                     "bench/RESULTS.md say how to make them)")
        if not os.access(args.ascent, os.X_OK):
            sys.exit(f"peer_table: --ascent {args.ascent} is not an executable (build it: make build)")
        args.llama_bench = find_llama_bench(args)
        if not os.access(args.llama_bench, os.X_OK):
            sys.exit(f"peer_table: --llama-bench {args.llama_bench} is not an executable")

    print(f"command: {shlex.join([sys.argv[0]] + sys.argv[1:])}")
    print(f"date: {datetime.now():%Y-%m-%d %H:%M:%S}; machine: {lscpu_model()}, {os.cpu_count()} logical CPUs; "
          f"ascent {git_commit()}")
    print(f"ascent: {shlex.join(ascent_cmd(args, 'FILE'))}")
    print(f"peer:   {shlex.join(llama_cmd(args, 'FILE'))}")
    peer_bytes = {} if args.dry_run else {f: gguf_token_read(files[f][1], args.n) for f in formats}
    rows = {f: [] for f in formats}
    log = open(args.jsonl, "a") if args.jsonl and not args.dry_run else None
    commit = "?"
    for i in range(args.passes):
        order = formats[i % len(formats):] + formats[:i % len(formats)]
        print(f"pass {i + 1} {datetime.now():%H:%M:%S}: {', '.join(order)}", flush=True)
        for f in order:
            ours_first = (i + formats.index(f)) % 2 == 0  # each format: the other tool first next pass
            tools = ["ascent", "llama"] if ours_first else ["llama", "ascent"]
            if args.dry_run:
                for tool in tools:
                    cmd = ascent_cmd(args, files[f][0]) if tool == "ascent" else llama_cmd(args, files[f][1])
                    print(f"  {f}: {shlex.join(cmd)}")
                continue
            got = {}
            for tool in tools:
                got[tool] = run_ascent(args, files[f][0]) if tool == "ascent" else run_llama(args, files[f][1])
            a, b = got["ascent"], got["llama"]
            commit = b.get("commit", commit)
            row = {"pass": i + 1, "format": f, "first": tools[0], "ascent": a, "llama": b,
                   "share_ascent": 100 * a["bytes"] * a["tg"] / (a["read"] * 1e9),
                   "share_llama": 100 * peer_bytes[f] * b["tg"] / (a["read"] * 1e9)}
            rows[f].append(row)
            print(f"  {f} ({tools[0]} first): pp ours {a['pp']:.1f} theirs {b['pp']:.1f} t/s; tg ours {a['tg']:.1f} "
                  f"theirs {b['tg']:.1f} t/s; read {a['read']:.1f} GB/s", flush=True)
            if log:
                log.write(json.dumps(row) + "\n")
                log.flush()
    if args.dry_run:
        return

    print(f"\nllama-bench {args.llama_bench} (build_commit {commit}); t/s medians over {args.passes} passes; ours/theirs: the median of the "
          "passes' ratios; share: decode bytes per token x t/s over the best read measured between ascent's tokens")
    summary = []
    for f in formats:
        rs = rows[f]
        print(f"\n### {f}: ours {os.path.basename(files[f][0])}, theirs {os.path.basename(files[f][1])}\n")
        print("| pass | pp ours | pp theirs | ours/theirs | tg ours | tg theirs | ours/theirs | read GB/s | "
              "tg % of read ours | theirs |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rs:
            a, b = r["ascent"], r["llama"]
            print(f"| {r['pass']} ({r['first']} first) | {a['pp']:.1f} | {b['pp']:.1f} | {a['pp'] / b['pp']:.2f} | "
                  f"{a['tg']:.2f} | {b['tg']:.2f} | {a['tg'] / b['tg']:.2f} | {a['read']:.1f} | "
                  f"{r['share_ascent']:.0f}% | {r['share_llama']:.0f}% |")
        s = {"format": f,
             "pp_a": med(r["ascent"]["pp"] for r in rs), "pp_b": med(r["llama"]["pp"] for r in rs),
             "pp_ratio": med(r["ascent"]["pp"] / r["llama"]["pp"] for r in rs),
             "tg_a": med(r["ascent"]["tg"] for r in rs), "tg_b": med(r["llama"]["tg"] for r in rs),
             "tg_ratio": med(r["ascent"]["tg"] / r["llama"]["tg"] for r in rs),
             "read": med(r["ascent"]["read"] for r in rs), "share_a": med(r["share_ascent"] for r in rs),
             "share_b": med(r["share_llama"] for r in rs),
             "mb_a": rs[0]["ascent"]["bytes"] / 1e6, "mb_b": peer_bytes[f] / 1e6}
        summary.append(s)
        print(f"| median | {s['pp_a']:.1f} | {s['pp_b']:.1f} | **{s['pp_ratio']:.2f}** | {s['tg_a']:.2f} | "
              f"{s['tg_b']:.2f} | **{s['tg_ratio']:.2f}** | {s['read']:.1f} | {s['share_a']:.0f}% | "
              f"{s['share_b']:.0f}% |")
    print("\n### All formats (medians)\n")
    print(f"| format | pp{args.p} ours | theirs | ours/theirs | tg{args.n} ours | theirs | ours/theirs | "
          "MB/token ours | theirs | tg % of read ours | theirs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summary:
        print(f"| {s['format']} | {s['pp_a']:.1f} | {s['pp_b']:.1f} | {s['pp_ratio']:.2f} | {s['tg_a']:.2f} | "
              f"{s['tg_b']:.2f} | {s['tg_ratio']:.2f} | {s['mb_a']:.0f} | {s['mb_b']:.0f} | {s['share_a']:.0f}% | "
              f"{s['share_b']:.0f}% |")


if __name__ == "__main__":
    main()
