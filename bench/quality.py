#!/usr/bin/env python3
"""Quantization quality: perplexity of story-656K and stories260K over held-out ../shared/corpora text, for f32,
int8, int4 rounded to nearest and int4 calibrated (activation-aware, --calib on a different part of the corpus).
Prints a table and checks the quality bounds: int8 at most +1% over f32; calibrated int4 loses at most half of what
round-to-nearest int4 loses. Exit status 1 if a bound fails.

  python3 bench/quality.py [--ascent build/release/ascent] [--shared ../shared] [--group 32] [--chunks 40]
"""
import argparse
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ascent", default=os.path.join(HERE, "..", "build", "release", "ascent"))
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "shared"))
    ap.add_argument("--group", type=int, default=32, help="int4 group (the models' widths are 64 and 128)")
    ap.add_argument("--chunks", type=int, default=40, help="256-token windows to evaluate")
    args = ap.parse_args()
    models = os.path.join(args.shared, "models")
    corpus = open(os.path.join(args.shared, "corpora", "tinyshakespeare.txt"), encoding="utf-8").read()
    tmp = tempfile.mkdtemp(prefix="ascent-quality-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    calib, evalf = os.path.join(tmp, "calib.txt"), os.path.join(tmp, "eval.txt")
    # Calibrate on the first 200 kB, evaluate on the last 300 kB: no overlap.
    open(calib, "w", encoding="utf-8").write(corpus[:200_000])
    open(evalf, "w", encoding="utf-8").write(corpus[-300_000:])

    def ascent(*a):
        r = subprocess.run([args.ascent, *a], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"ascent {' '.join(a)} failed: {r.stderr.strip()}")
        return r.stdout

    def ppl(model, tok):
        out = ascent("perplexity", "-m", model, *tok, "-f", evalf, "-c", "256", "--chunks", str(args.chunks))
        return float(re.search(r"^ppl = ([0-9.]+)", out, re.M).group(1))

    ok = True
    print(f"| model | f32 | int8 | int4 g{args.group} nearest | int4 g{args.group} calibrated | int8 vs f32 | "
          f"int4 loss calibrated / nearest |")
    print("|---|---|---|---|---|---|---|")
    for name, path, tok in [
        ("stories260K", os.path.join(models, "stories260K", "stories260K.bin"),
         ["--tokenizer", os.path.join(models, "stories260K", "tok512.bin")]),
        ("story-656K", os.path.join(models, "story-656K"), []),
    ]:
        base = ppl(path, tok)
        q = {}
        for kind, extra in (("int8", ["--type", "int8"]), ("rtn", ["--type", "int4", "--group", str(args.group)]),
                            ("awq", ["--type", "int4", "--group", str(args.group), "--calib", calib])):
            out = os.path.join(tmp, f"{name}-{kind}.safetensors")
            ascent("quantize", "-m", path, *tok, "-o", out, *extra)
            q[kind] = ppl(out, [])  # the quantized file carries its tokenizer
        d8 = q["int8"] / base - 1
        loss_rtn, loss_awq = q["rtn"] - base, q["awq"] - base
        ratio = loss_awq / loss_rtn if loss_rtn > 0 else float("inf")
        print(f"| {name} | {base:.3f} | {q['int8']:.3f} | {q['rtn']:.3f} | {q['awq']:.3f} | {d8:+.2%} | "
              f"{loss_awq:+.3f} / {loss_rtn:+.3f} = {ratio:.2f} |")
        ok &= d8 <= 0.01 and loss_rtn > 0 and loss_awq <= 0.5 * loss_rtn
    print("bounds (int8 <= +1%, calibrated int4 loses <= half of nearest):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
