#!/usr/bin/python3
"""Logits of two ascent binaries compared bitwise on the same files: both suite models, each converted to every GGUF
type and quantized to every Ascent type, two K-quant files from bench/make_model.py, in every ISA variant and load or
run mode. A refactor that claims to change no bits (a structural move, a kernel rewritten for speed) is checked by
building the commit before it and running this against the new build. Prints each file and mode whose logits differ
or that fails, then the count; exits 1 if any.

  scripts/logits_bitwise.py OLD_ASCENT NEW_ASCENT WORKDIR
"""
import hashlib
import itertools
import os
import subprocess
import sys

if len(sys.argv) != 4:
    sys.exit(__doc__.strip().splitlines()[-1].strip())
old, new, work = sys.argv[1:4]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S = os.path.join(ROOT, "..", "shared", "models")
os.makedirs(work, exist_ok=True)


def run(b, args, env=None):
    return subprocess.run([b] + args, capture_output=True, text=True, env=env)


sources = [(f"{S}/stories260K/stories260K.bin", "s260"), (f"{S}/story-656K", "s656")]
files = [src for src, _ in sources]
for src, tag in sources:
    for t in ["f16", "bf16", "q8_0", "q4_0"]:
        p = f"{work}/{tag}-{t}.gguf"
        if not os.path.exists(p):
            r = run(new, ["convert", "-m", src, "-o", p, "--type", t]); assert r.returncode == 0, r.stderr
        files.append(p)
    for t, extra in [("int8", []), ("int4", ["--group", "32"]), ("bf16", [])]:
        p = f"{work}/{tag}-{t}.safetensors"
        if not os.path.exists(p):
            r = run(new, ["quantize", "-m", src, "-o", p, "--type", t] + extra); assert r.returncode == 0, r.stderr
        files.append(p)
for t in ["q4_k", "q6_k"]:
    p = f"{work}/k256-{t}.gguf"
    if not os.path.exists(p):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "make_model.py"), "-o", p, "--shape", "k256", "--type", t],
                       check=True, capture_output=True)
    files.append(p)
# 30 ids of both small vocabularies; the K-quant files (vocabulary 32000) take them too.
ids = "1 403 407 280 261 268 301 290 400 500 17 33 66 99 128 256 300 350 420 480 5 9 13 21 34 55 89 144 233 377"
# A 200-token prompt besides: prefill kernels take other paths for long token blocks.
long_ids = " ".join(str(3 + (i * 37) % 470) for i in range(200))
modes = [[], ["--step", "1"], ["--no-mmap"], ["--kv-type", "f16"], ["--no-repack"], ["LONG"]]
same = diff = 0
for f, isa, mode in itertools.product(files, ["ref", "avx2", "avx512"], modes):
    env = dict(os.environ, ASCENT_ISA=isa)
    outs = []
    for b, name in [(old, "old"), (new, "new")]:
        o = f"{work}/out-{name}.npy"
        prompt, flags = (long_ids, []) if mode == ["LONG"] else (ids, mode)
        r = run(b, ["logits", "-m", f, "--prompt-ids", prompt, "-o", o, "-t", "2"] + flags, env)
        if r.returncode != 0:
            outs.append("ERR " + r.stderr.strip()[-150:])
        else:
            outs.append(hashlib.sha256(open(o, "rb").read()).hexdigest())
    ok = outs[0] == outs[1] and not outs[0].startswith("ERR")
    same += ok; diff += not ok
    if not ok:
        print(f"DIFF {os.path.basename(f)} {isa} {' '.join(mode) or 'default'}: old {outs[0][:70]} new {outs[1][:70]}")
print(f"{same} runs bitwise equal, {diff} not, over {len(files)} files x 3 ISAs x {len(modes)} modes")
sys.exit(1 if diff else 0)
