#!/usr/bin/python3
"""`ascent train` beside PyTorch (Debian's python3-torch 1.13, the peer) training the same GPT-2 on the same tokens:
tokens/s and MFU per precision, the ratio to PyTorch, and what full recompute saves and costs, as markdown tables.

The model is GPT-2 124M: 12 layers, 768 wide, 12 heads, 1024 positions, GELU tanh, pre-LayerNorm, biases, tied
embeddings, vocab 50257 (../shared/tokenizers/gpt2). It trains on batches of 4 x 64 tokens from one `ascent data
prepare` of ../shared/corpora/tinyshakespeare.txt. AdamW: lr 3e-4, betas (0.9, 0.95), weight decay 0.1, gradients
clipped to norm 1 (as ascent train does). Each run takes --steps steps: the first two warm up, the rest are timed, medians.
  PyTorch  the GPT-2 below in torch.nn, fed windows of 65 tokens read with numpy from the same train.bin; fp32, and
           bf16 as torch.autocast("cpu", torch.bfloat16) around forward and loss. It runs in a subprocess without the
           OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE pins, once per thread count (1 and -t; torch, OpenMP and OpenBLAS
           all given that many) and OpenMP wait policy (active, the default, and PASSIVE: torch's idle OpenMP
           threads otherwise spin beside OpenBLAS's, which slows fp32 by a quarter on 2 cores, while the bf16
           kernels, OpenMP's own, want them spinning); the best per precision is kept. A step is batch read, forward, backward, clip and AdamW. The
           script stops if torch's sgemm_ is not OpenBLAS's (Debian's reference BLAS is many times slower).
  ascent   `ascent train` at O0 (fp32) and O2 (bf16), recompute none, -t threads; tokens/s and MFU from log.jsonl.
  recompute  ascent O0 with recompute none and full: the planned peak activations (its stderr) and median step time.
MFU is tokens/s times the trainer's FLOPs per token (6 x matrix parameters, the tied head once, plus 6 x layers x
seq x width for attention) over a peak. The MFU column uses one `ascent doctor -t T` for all rows (FP32 for fp32;
the larger of BF16 and FP32 for bf16, the trainer's rule); ascent's log MFU uses the peak each run measured at its
start, which moves with the host's load.
The two models must hold the same number of parameters, or the script stops. If O2's losses equal O0's bit for bit,
the trainer ran O2 in fp32 and the table says so. On a shared or busy host the figures are indicative only.
--quick: a 2-layer, 128-wide GPT-2 on stories260K's 512-piece tokenizer and 64 KiB of text, 4 steps (a smoke test).

  bench/train_table.py [--ascent BIN] [--steps 8] [-t 2] [--corpus TEXT] [--quick]
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

from peer_table import ROOT, git_commit, lscpu_model

SHARED = os.path.join(ROOT, "..", "shared")
WARMUP = 2  # steps before the timed ones, in every run
PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")  # taken out of the peer's environment
FULL = {"dim": 768, "n_layers": 12, "n_heads": 12, "max_seq": 1024, "batch": 4, "seq": 64,
        "tokenizer": os.path.join(SHARED, "tokenizers", "gpt2"), "steps": 8, "corpus_bytes": None}
QUICK = {"dim": 128, "n_layers": 2, "n_heads": 4, "max_seq": 128, "batch": 4, "seq": 64,
         "tokenizer": os.path.join(SHARED, "models", "stories260K", "tok512.model"), "steps": 4,
         "corpus_bytes": 64 << 10}
DTYPES = {"uint16": "<u2", "int32": "<i4"}


# ---- the peer: runs in its own process (--peer SPEC), prints one JSON line ----

def sgemm_provider(torch):
    """The file whose sgemm_ torch's matmuls call, after one has run: dladdr of the symbol as libtorch_cpu resolves
    it. OpenBLAS can be mapped beside the reference BLAS (LAPACK pulls it in), so the mapped names alone do not say."""
    import ctypes

    a = torch.randn(64, 64)
    (a @ a).sum().item()
    with open("/proc/self/maps") as f:
        mapped = {line.split()[-1] for line in f if len(line.split()) >= 6}
    torch_cpu = next((p for p in mapped if os.path.basename(p).startswith("libtorch_cpu.so")), None)
    if torch_cpu is None:
        sys.exit("train_table: libtorch_cpu.so is not mapped after a torch matmul; cannot tell which BLAS it uses")

    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                    ("saddr", ctypes.c_void_p)]

    info = DlInfo()
    addr = ctypes.cast(ctypes.CDLL(torch_cpu).sgemm_, ctypes.c_void_p)
    if not ctypes.CDLL(None).dladdr(addr, ctypes.byref(info)) or not info.fname:
        sys.exit(f"train_table: dladdr found no library for {torch_cpu}'s sgemm_")
    return os.path.realpath(info.fname.decode())


def peer_main(spec):
    """Trains a fresh GPT-2 per precision with spec's threads; prints tokens/s per timed step and the BLAS."""
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(1)
    blas = sgemm_provider(torch)
    if "openblas" not in blas:
        sys.exit(f"train_table: torch's sgemm_ comes from {blas}, not OpenBLAS: the reference BLAS would make the "
                 "peer many times slower; install libopenblas0-pthread (scripts/setup.sh --test)")

    C, L, H, S, V = spec["dim"], spec["n_layers"], spec["n_heads"], spec["max_seq"], spec["vocab"]
    B, T = spec["batch"], spec["seq"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.tril(torch.ones(S, S, dtype=torch.bool)), persistent=False)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / (C // H) ** 0.5)
            att = F.softmax(att.masked_fill(~self.mask[:t, :t], float("-inf")), dim=-1)
            x = x + self.attn_proj((att @ v).transpose(1, 2).reshape(b, t, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(S, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear):
                    nn.init.zeros_(m.bias)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.t()  # the tied head

    data = np.memmap(spec["train_bin"], dtype=DTYPES[spec["dtype"]], mode="r")
    rng = np.random.default_rng(1)

    def batch():
        starts = rng.integers(0, len(data) - T - 1, size=B)
        w = torch.from_numpy(np.stack([data[s:s + T + 1] for s in starts]).astype(np.int64))
        return w[:, :-1], w[:, 1:]

    out = {"threads": spec["threads"], "blas": blas, "torch": torch.__version__}
    for prec in ("fp32", "bf16"):
        model = GPT2()
        out["params"] = sum(p.numel() for p in model.parameters())
        out["matrix_params"] = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and n != "wpe.weight")
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
        tps, losses = [], []
        for step in range(spec["steps"]):
            t0 = time.perf_counter()
            x, y = batch()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
                loss = F.cross_entropy(model(x).view(-1, V).float(), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            if step >= WARMUP:
                tps.append(B * T / (time.perf_counter() - t0))
        out[prec] = {"tokens_per_s": tps, "losses": losses}
    print(json.dumps(out))


def run_peer(shape, threads, wait, data):
    spec = dict(shape, threads=threads, train_bin=os.path.join(data["dir"], "train.bin"), dtype=data["dtype"],
                vocab=data["vocab"])
    env = {k: v for k, v in os.environ.items() if k not in PINS + ("OMP_WAIT_POLICY",)}
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    if wait != "active":
        env["OMP_WAIT_POLICY"] = wait.upper()
    print(f"pytorch -t {threads} OMP_WAIT_POLICY {wait} {datetime.now():%H:%M:%S}", flush=True)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--peer", json.dumps(spec)], env=env,
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        sys.exit(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else
                 f"train_table: the PyTorch run with {threads} threads failed (exit {r.returncode})")
    return dict(json.loads(r.stdout.strip().splitlines()[-1]), wait=wait)


# ---- ascent ----

def run_checked(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        tail = (r.stderr.strip() or r.stdout.strip()).splitlines()
        sys.exit(f"train_table: {what} failed (exit {r.returncode}): {tail[-1] if tail else ''}")
    return r


def doctor(args):
    out = run_checked([args.ascent, "doctor", "-t", str(args.threads)], "ascent doctor").stdout
    fp32 = re.search(r"^fp32 peak .*?, ([0-9.]+) GFLOP/s \((\d+) threads\)", out, re.M)
    bf16 = re.search(r"^bf16 dot peak +([0-9.]+) GFLOP/s", out, re.M)
    if not fp32:
        sys.exit(f"train_table: ascent doctor printed no 'fp32 peak' line:\n{out}")
    return {"fp32": float(fp32.group(1)), "bf16": float(bf16.group(1)) if bf16 else None}


def prepare(args, shape, work):
    corpus = args.corpus
    if shape["corpus_bytes"]:
        corpus = os.path.join(work, "corpus.txt")
        with open(args.corpus, "rb") as f, open(corpus, "wb") as g:
            g.write(f.read(shape["corpus_bytes"]))
    out = os.path.join(work, "data")
    run_checked([args.ascent, "data", "prepare", "--input", corpus, "--tokenizer", shape["tokenizer"], "--out", out],
                "ascent data prepare")
    with open(os.path.join(out, "index.json")) as f:
        index = json.load(f)
    if index["dtype"] not in DTYPES:
        sys.exit(f"train_table: {out}/index.json: dtype {index['dtype']} is not one this script reads")
    return {"dir": out, "dtype": index["dtype"], "vocab": index["tokenizer"]["vocab_size"],
            "tokens": index["splits"]["train"]["tokens"]}


def run_ascent(args, shape, data, work, precision, recompute):
    name = f"{precision}-{recompute}"
    out = os.path.join(work, name)
    cfg = os.path.join(work, name + ".yaml")
    with open(cfg, "w") as f:
        f.write(f"model: {{arch: gpt2, dim: {shape['dim']}, n_layers: {shape['n_layers']}, "
                f"n_heads: {shape['n_heads']}, max_seq: {shape['max_seq']}}}\n"
                f"tokenizer: {shape['tokenizer']}\ndata: {{dir: {data['dir']}}}\n"
                f"train: {{batch_size: {shape['batch']}, seq_len: {shape['seq']}, steps: {shape['steps']}}}\n"
                "optimizer: {lr: 3e-4, beta1: 0.9, beta2: 0.95, weight_decay: 0.1, grad_clip: 1.0}\n"
                f"eval: {{interval: 0}}\ncheckpoint: {{interval: 0}}\noutput: {out}\nthreads: {args.threads}\n"
                f"precision: {precision}\nrecompute: {recompute}\n")
    print(f"ascent {name} {datetime.now():%H:%M:%S}: {shlex.join([args.ascent, 'train', cfg])}", flush=True)
    r = subprocess.run([args.ascent, "train", cfg], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        tail = r.stderr.strip().splitlines()
        return {"error": tail[-1] if tail else f"exit {r.returncode}"}
    peak = re.search(r"planned peak activations ([0-9.]+) MiB", r.stderr)
    params = re.search(r"([0-9]+) parameters", r.stderr)
    if not peak or not params:
        sys.exit(f"train_table: ascent train {cfg}: no 'N parameters' or 'planned peak activations' on stderr")
    with open(os.path.join(out, "log.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows = [j for j in rows if "loss" in j]
    if len(rows) != shape["steps"]:
        sys.exit(f"train_table: {out}/log.jsonl: {len(rows)} steps logged, {shape['steps']} run")
    timed = rows[WARMUP:]
    tokens = shape["batch"] * shape["seq"]
    return {"tokens_per_s": statistics.median(j["tokens_per_s"] for j in timed),
            "mfu": statistics.median(j["mfu"] for j in timed),
            "step_s": statistics.median(tokens / j["tokens_per_s"] for j in timed),
            "losses": [j["loss"] for j in rows], "peak_mib": float(peak.group(1)), "params": int(params.group(1))}


def fmt(x, digits=1, suffix=""):
    return "-" if x is None else f"{x:.{digits}f}{suffix}"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--peer":
        return peer_main(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ascent", default=os.path.join(ROOT, "build", "release", "ascent"))
    ap.add_argument("--steps", type=int, help=f"steps per run, the first {WARMUP} untimed (default 8; --quick 4)")
    ap.add_argument("-t", "--threads", type=int, default=2, help="ascent's threads; PyTorch tries 1 and this many")
    ap.add_argument("--corpus", default=os.path.join(SHARED, "corpora", "tinyshakespeare.txt"))
    ap.add_argument("--quick", action="store_true", help="a 2-layer 128-wide model, 4 steps: checks the script runs")
    args = ap.parse_args()
    shape = dict(QUICK if args.quick else FULL)
    if args.steps is not None:
        if args.steps <= WARMUP:
            sys.exit(f"train_table: --steps {args.steps}: must be more than the {WARMUP} warm-up steps")
        shape["steps"] = args.steps
    if args.threads < 1:
        sys.exit(f"train_table: -t {args.threads}: must be positive")
    if not os.access(args.ascent, os.X_OK):
        sys.exit(f"train_table: --ascent {args.ascent} is not an executable (build it: make build)")
    for path, what in ((args.corpus, "--corpus"), (shape["tokenizer"], "the tokenizer")):
        if not os.path.exists(path):
            sys.exit(f"train_table: {what} {path} does not exist")
    shape["tokenizer"] = os.path.abspath(shape["tokenizer"])

    print(f"command: {shlex.join([sys.argv[0]] + sys.argv[1:])}")
    print(f"date: {datetime.now():%Y-%m-%d %H:%M:%S}; machine: {lscpu_model()}, {os.cpu_count()} logical CPUs; "
          f"ascent {git_commit()}", flush=True)
    pinned = [f"{k}={os.environ[k]}" for k in PINS if k in os.environ]
    with tempfile.TemporaryDirectory(prefix="train-table-") as work:
        peaks = doctor(args)
        data = prepare(args, shape, work)
        peers = [run_peer(shape, t, wait, data) for t in sorted({1, args.threads}) for wait in ("active", "passive")]
        runs = {k: run_ascent(args, shape, data, work, *k)
                for k in (("O0", "none"), ("O0", "full"), ("O2", "none"))}
    for key in (("O0", "none"), ("O0", "full")):
        if "error" in runs[key]:
            sys.exit(f"train_table: ascent train {key[0]} recompute {key[1]} failed: {runs[key]['error']}")
    base = runs[("O0", "none")]
    torch_params = peers[0]["params"]
    if base["params"] != torch_params:
        sys.exit(f"train_table: the models differ: ascent has {base['params']} parameters, PyTorch {torch_params}")

    L, C, T = shape["n_layers"], shape["dim"], shape["seq"]
    flops_tok = 6.0 * peers[0]["matrix_params"] + 6.0 * L * T * C
    peer_peak = {"fp32": peaks["fp32"], "bf16": max(peaks["bf16"] or 0.0, peaks["fp32"])}
    best = {}
    for prec in ("fp32", "bf16"):
        by_setting = [(statistics.median(p[prec]["tokens_per_s"]), p["threads"], p[prec]["losses"][0], p["wait"])
                      for p in peers]
        best[prec] = max(by_setting)
        print(f"pytorch {prec}: " + ", ".join(f"{tps:.1f} tokens/s with {t} threads, {w} wait"
                                             for tps, t, _, w in by_setting))

    print()
    print(f"roofline (ascent doctor -t {args.threads}): FP32 {peaks['fp32']:.1f} GFLOP/s, BF16 "
          f"{fmt(peaks['bf16'])} GFLOP/s")
    print(f"peer: torch {peers[0]['torch']}, sgemm_ from {peers[0]['blas']}; removed from its environment: "
          f"{', '.join(pinned) or 'nothing (no OpenBLAS pins set)'}")
    print(f"model: gpt2 {L} layers x {C} wide, {shape['n_heads']} heads, vocab {data['vocab']}, {torch_params} "
          f"parameters (both); batch {shape['batch']} x {T} tokens; {shape['steps']} steps per run, the first "
          f"{WARMUP} untimed; data {data['tokens']} train tokens from {os.path.basename(args.corpus)}")
    print()
    print("| system | precision | threads | tokens/s | MFU | MFU (ascent's log) | vs PyTorch same precision | "
          "loss at step 1 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    notes = []
    o2 = runs[("O2", "none")]
    for prec, key, label in (("fp32", ("O0", "none"), "O0 (fp32)"), ("bf16", ("O2", "none"), "O2 (bf16)")):
        tps, t, loss1, wait = best[prec]
        mfu = 100 * flops_tok / (peer_peak[prec] * 1e9)
        print(f"| PyTorch {peers[0]['torch']} | {prec}{' autocast' if prec == 'bf16' else ''} | {t} ({wait} wait) | "
              f"{tps:.1f} | {tps * mfu:.1f}% | - | 1.00 | {loss1:.4f} |")
        r = runs[key]
        if "error" in r:
            print(f"| ascent | {label} | {args.threads} | - | - | - | - | - |")
            notes.append(f"ascent train refused {key[0]}: {r['error']}")
            continue
        print(f"| ascent | {label} | {args.threads} | {r['tokens_per_s']:.1f} | {r['tokens_per_s'] * mfu:.1f}% | "
              f"{100 * r['mfu']:.1f}% | {r['tokens_per_s'] / tps:.2f} | {r['losses'][0]:.4f} |")
    if "error" not in o2 and o2["losses"] == base["losses"]:
        notes.append("O2's losses equal O0's bit for bit at every step: the trainer ran O2 in fp32 (bf16 is not "
                     "wired in yet), so its row is not a bf16 figure")
    for n in notes:
        print(f"\nnote: {n}")

    full = runs[("O0", "full")]
    mem, tim = full["peak_mib"] / base["peak_mib"], full["step_s"] / base["step_s"]
    print()
    print("| ascent O0 recompute | planned peak activations MiB | median step ms | memory vs none | time vs none |")
    print("|---|---:|---:|---:|---:|")
    for name, r in (("none", base), ("full", full)):
        print(f"| {name} | {r['peak_mib']:.1f} | {1e3 * r['step_s']:.1f} | {r['peak_mib'] / base['peak_mib']:.2f} | "
              f"{r['step_s'] / base['step_s']:.2f} |")
    met = mem <= 0.5 and tim <= 1.35
    print(f"\nrecompute target (full <= 0.50x the memory for <= 1.35x the time): {'met' if met else 'missed'} "
          f"({mem:.2f}x, {tim:.2f}x)")


if __name__ == "__main__":
    main()
