"""Exact resume: `ascent train --resume` after SIGKILLs at random moments (one of them while a checkpoint is being
written) ends with the same loss at every step, bit for bit, and the same final weights and optimizer moments as an
uninterrupted run; a kill during a write leaves the previous checkpoint loadable. Also: a second run into a folder
that holds checkpoints is refused without --resume, and a damaged checkpoint is refused naming the file."""
import glob
import json
import os
import random
import signal
import subprocess
import time

from common import ASCENT, SHARED, check, finish, run, tmpdir

DIR = tmpdir()
rng = random.Random(1234)
TOK = os.path.join(SHARED, "models", "story-656K")
data = os.path.join(DIR, "data")
r = run(["data", "prepare", "--input", os.path.join(SHARED, "corpora", "tinyshakespeare.txt"), "--tokenizer", TOK,
         "--out", data, "--val-fraction", "0.02"])
check(r.returncode == 0, "data prepare")

STEPS = 48


def config(out):
    path = os.path.join(DIR, os.path.basename(out) + ".yaml")
    with open(path, "w") as f:
        f.write(f"""model:
  arch: llama
  dim: 256
  n_layers: 4
  n_heads: 8
  n_kv_heads: 4
  ffn_dim: 640
  max_seq: 128
tokenizer: {TOK}
data:
  dir: {data}
train:
  batch_size: 4
  seq_len: 48
  grad_accum: 2
  steps: {STEPS}
  seed: 7
optimizer:
  lr: 2e-3
  warmup_steps: 4
eval:
  interval: 9
  batches: 2
checkpoint:
  interval: 4
  keep: 2
output: {out}
threads: 2
""")
    return path


def losses(out):
    rows = [json.loads(l) for l in open(os.path.join(out, "log.jsonl")) if l.strip()]
    return ([(j["step"], j["loss"], j["grad_norm"], j["lr"]) for j in rows if "loss" in j],
            [(j["step"], j["val_loss"]) for j in rows if "val_loss" in j])


def final(out):
    ck = sorted(glob.glob(os.path.join(out, "checkpoints", "step-*")))[-1]
    return ck, {n: open(os.path.join(ck, n), "rb").read() for n in ("model.safetensors", "optimizer.safetensors")}


ref_out = os.path.join(DIR, "ref")
t0 = time.time()
r = run(["train", config(ref_out)])
ref_seconds = time.time() - t0
check(r.returncode == 0, f"the uninterrupted run finishes ({r.stderr.strip()[-200:]})")
ref_losses, ref_val = losses(ref_out)
VALS = STEPS // 9 + (1 if STEPS % 9 else 0)
check(len(ref_losses) == STEPS and len(ref_val) == VALS, f"it logs {STEPS} steps and {VALS} validations")

# A second run into the same folder without --resume would overwrite it: refused, nothing changed.
before = final(ref_out)[1]
r = run(["train", config(ref_out)])
check(r.returncode != 0 and "--resume" in r.stderr and final(ref_out)[1] == before,
      f"a new run into a folder with checkpoints is refused ({r.stderr.strip()[-120:]})")

out = os.path.join(DIR, "killed")
cfg = config(out)
kills, during_write, attempts, loaded = 0, 0, 0, 0
while True:
    attempts += 1
    p = subprocess.Popen([ASCENT, "train", cfg, "--resume"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Every other start is killed the moment a checkpoint write is seen under way; the others after a random time.
    # After six kills the run is left to finish.
    have = glob.glob(os.path.join(out, "checkpoints", "step-*"))
    watch_write = attempts % 2 == 0 and during_write < 2 and attempts <= 6 and bool(have)
    # Random moments within the time a whole run takes, so each kill lands somewhere in the middle of one.
    deadline = time.time() + rng.uniform(0.1, 0.45) * ref_seconds if attempts <= 6 else float("inf")
    killed = False
    while p.poll() is None:
        if watch_write and glob.glob(os.path.join(out, "checkpoints", ".step-*.tmp")):
            p.send_signal(signal.SIGKILL)
            during_write += 1
            killed = True
            break
        if not watch_write and time.time() > deadline:
            p.send_signal(signal.SIGKILL)
            killed = True
            break
        time.sleep(0.002)
    p.wait()
    err = p.stderr.read().decode()
    if killed and p.returncode == -signal.SIGKILL:
        kills += 1
        latest = sorted(glob.glob(os.path.join(out, "checkpoints", "step-*")))
        if latest and watch_write:
            g = run(["generate", "-m", latest[-1], "-p", "The", "-n", "2"])
            check(g.returncode == 0, f"after a kill during a checkpoint write, {os.path.basename(latest[-1])} loads")
            loaded += 1
        continue
    check(p.returncode == 0, f"a resumed run finishes ({err.strip()[-200:]})")
    break
check(kills >= 4 and during_write >= 1 and loaded == during_write,
      f"the run was killed {kills} times, {during_write} during a checkpoint write (the previous one loaded after each)")
got_losses, got_val = losses(out)
check(got_losses == ref_losses, f"every step's loss, grad norm and lr equal the uninterrupted run's, bit for bit "
      f"({len(got_losses)} steps)")
check(got_val == ref_val, "every validation loss equals the uninterrupted run's")
check(final(out)[1] == final(ref_out)[1], "the final model.safetensors and optimizer.safetensors are byte-identical")

# A damaged checkpoint is refused, naming the file, and the run's folder is left as it was.
ck, files = final(out)
with open(os.path.join(ck, "model.safetensors"), "r+b") as f:
    f.seek(1000)
    f.write(b"\x00\x01\x02\x03")
cfg2 = config(out)
with open(cfg2) as f:
    text = f.read().replace(f"steps: {STEPS}", f"steps: {STEPS + 4}")
with open(cfg2, "w") as f:
    f.write(text)
r = run(["train", cfg2, "--resume"])
check(r.returncode != 0 and "model.safetensors" in r.stderr and "damaged" in r.stderr,
      f"a corrupted checkpoint is refused naming the file ({r.stderr.strip()[-160:]})")
with open(os.path.join(ck, "model.safetensors"), "wb") as f:
    f.write(files["model.safetensors"])
os.truncate(os.path.join(ck, "optimizer.safetensors"), 100)
r = run(["train", cfg2, "--resume"])
check(r.returncode != 0 and "optimizer.safetensors" in r.stderr,
      f"a truncated checkpoint is refused naming the file ({r.stderr.strip()[-160:]})")
check(losses(out)[0] == ref_losses, "the refused runs left the log as it was")
finish()
