"""Mixed precision that holds: on a small Llama trained from text, the O1 (bf16 matmuls) and O2 (bf16 activations
too) loss curves stay within a stated bound of the fp32 (O0) curve, step by step and at the end; an fp16 O3 run with
an overflow injected at one step skips exactly that step, halves its loss scale, grows it again after
loss_scale_window clean steps and ends within the same bound."""
import json
import os

from common import SHARED, check, finish, run, tmpdir

DIR = tmpdir()
TOK = os.path.join(SHARED, "models", "story-656K")
data = os.path.join(DIR, "data")
r = run(["data", "prepare", "--input", os.path.join(SHARED, "corpora", "tinyshakespeare.txt"), "--tokenizer", TOK,
         "--out", data])
check(r.returncode == 0, "data prepare")
STEPS = 60
# The bound: bf16 keeps 8 significant bits; a step's loss may move by a few thousandths, and the curves must not drift.
STEP_BOUND, FINAL_BOUND = 0.03, 0.01


def train(name, precision):
    out = os.path.join(DIR, name)
    cfg = os.path.join(DIR, name + ".yaml")
    with open(cfg, "w") as f:
        f.write(f"""model: {{arch: llama, dim: 128, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_dim: 384, max_seq: 256}}
tokenizer: {TOK}
data: {{dir: {data}}}
train: {{batch_size: 8, seq_len: 64, steps: {STEPS}, seed: 3}}
optimizer: {{lr: 3e-3, warmup_steps: 5}}
eval: {{interval: {STEPS}, batches: 8}}
checkpoint: {{interval: 0}}
output: {out}
threads: 2
precision: {precision}
""")
    r = run(["train", cfg])
    check(r.returncode == 0, f"{name}: ascent train runs ({r.stderr.strip()[-150:]})")
    rows = [json.loads(l) for l in open(os.path.join(out, "log.jsonl")) if l.strip()]
    steps = [j for j in rows if "loss" in j]
    val = [j["val_loss"] for j in rows if "val_loss" in j]
    return steps, val[-1] if val else float("nan")


o0, o0_val = train("O0", "O0")
for level in ("O1", "O2"):
    steps, val = train(level, level)
    worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(steps, o0))
    check(len(steps) == STEPS and worst < STEP_BOUND,
          f"{level}: every step's loss within {STEP_BOUND} of fp32's (worst {worst:.4f})")
    check(abs(val - o0_val) < FINAL_BOUND * o0_val,
          f"{level}: final validation loss {val:.4f} within {FINAL_BOUND:.0%} of fp32's {o0_val:.4f}")

INJECT = 25
steps, val = train("O3-fp16", "{level: O3, half: fp16, loss_scale: 1024, loss_scale_window: 10, "
                   f"inject_overflow_step: {INJECT}}}")
skipped = [j["step"] for j in steps if j["skipped"]]
check(INJECT in skipped, f"O3 fp16: the step with the injected overflow ({INJECT}) was skipped (skipped: {skipped})")
scale = {j["step"]: j["loss_scale"] for j in steps}
check(scale[INJECT] == scale[INJECT - 1] / 2, f"O3 fp16: its loss scale halved ({scale[INJECT - 1]} -> {scale[INJECT]})")
check(all(not j["skipped"] for j in steps if INJECT < j["step"] <= INJECT + 10),
      "O3 fp16: the steps after it run (no further overflow)")
check(scale[INJECT + 10] == scale[INJECT] * 2, f"O3 fp16: the scale doubles after 10 clean steps ({scale[INJECT + 10]})")
worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(steps, o0) if a["step"] < INJECT)
check(worst < STEP_BOUND, f"O3 fp16: the loss before the overflow within {STEP_BOUND} of fp32's (worst {worst:.4f})")
check(abs(val - o0_val) < FINAL_BOUND * o0_val,
      f"O3 fp16: recovers: final validation loss {val:.4f} within {FINAL_BOUND:.0%} of fp32's {o0_val:.4f}")
finish()
