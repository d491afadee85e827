"""What `ascent train` leaves behind, used as a user would: three small models (Llama with grouped-query attention on
story-656K's tokenizer; Qwen3 with its own head_dim and tied embeddings on the same; GPT-2 on the GPT-2 BPE) are
trained briefly, and each final checkpoint must be a model in its own right:
- the PyTorch reference forward (common.reference_logits, from the Hugging Face definitions) run on its config.json and
  model.safetensors gives `ascent logits`' logits (max difference < 1e-4 of the largest logit);
- `ascent generate` writes text from it, `ascent info` describes it, `ascent quantize --type int8` and `ascent convert
  --type q8_0` turn it into models that generate with nothing else given (the tokenizer travels with them);
- it holds the tokenizer's files byte for byte, and config.json says the shape the config asked for.
The run's folder: log.jsonl has one JSON object per line (each step's loss, lr, grad_norm, tokens_per_s and mfu; each
validation's val_loss), loss.svg is well-formed SVG with both curves, config.yaml is the config, and checkpoint.keep
leaves exactly that many checkpoints, the newest."""
import json
import math
import os
import xml.etree.ElementTree as ET

import numpy as np

from common import SHARED, check, finish, load_npy, read_safetensors, reference_logits, run, tmpdir

D = tmpdir()
STORY = os.path.join(SHARED, "models", "story-656K")
GPT2 = os.path.join(SHARED, "tokenizers", "gpt2")
CORPUS = os.path.join(SHARED, "corpora", "tinyshakespeare.txt")


def prepare(name, tokenizer, nbytes):
    src = os.path.join(D, f"{name}.txt")
    with open(CORPUS, "rb") as f, open(src, "wb") as g:
        g.write(f.read()[:nbytes])
    out = os.path.join(D, f"{name}-data")
    r = run(["data", "prepare", "--input", src, "--tokenizer", tokenizer, "--out", out], timeout=120)
    check(r.returncode == 0, f"data prepare {name}: exit {r.returncode} {r.stderr.strip()[-200:]}")
    return out


# name: (tokenizer, data, model section, train section, optimizer section, eval and checkpoint interval, keep,
#        the tokenizer files the checkpoint must carry)
STORY_DATA = prepare("story", STORY, 400000)
GPT2_DATA = prepare("gpt2", GPT2, 100000)
RUNS = {
    "llama": (STORY, STORY_DATA,
              {"arch": "llama", "dim": 128, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 384,
               "max_seq": 256},
              {"batch_size": 8, "seq_len": 64, "steps": 30}, {"lr": "3e-3", "warmup_steps": 5}, 10, 2,
              ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]),
    "qwen3": (STORY, STORY_DATA,
              {"arch": "qwen3", "dim": 96, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 32,
               "ffn_dim": 160, "max_seq": 128, "tied_embeddings": "true", "rope_theta": 1000000},
              {"batch_size": 4, "seq_len": 48, "steps": 12}, {"lr": "3e-3", "warmup_steps": 2}, 4, 2,
              ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]),
    "gpt2": (GPT2, GPT2_DATA,
             {"arch": "gpt2", "dim": 64, "n_layers": 2, "n_heads": 4, "ffn_dim": 256, "max_seq": 96},
             {"batch_size": 4, "seq_len": 32, "steps": 9}, {"lr": "3e-3", "warmup_steps": 2}, 3, 2,
             ["encoder.json", "vocab.bpe"]),
}


def write_config(name, tokenizer, data, model, train, optimizer, interval, keep):
    out = os.path.join(D, f"{name}-run")
    block = lambda d: "\n".join(f"  {k}: {v}" for k, v in d.items())
    text = (f"model:\n{block(model)}\ntokenizer: {tokenizer}\ndata:\n  dir: {data}\ntrain:\n{block(train)}\n"
            f"optimizer:\n{block(optimizer)}\neval:\n  interval: {interval}\n  batches: 4\n"
            f"checkpoint:\n  interval: {interval}\n  keep: {keep}\noutput: {out}\nthreads: 2\n")
    path = os.path.join(D, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path, out, text


def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_log(name, out, steps, interval, lr, warmup):
    lines = open(os.path.join(out, "log.jsonl")).read().splitlines()
    try:
        rows = [json.loads(l) for l in lines]
    except ValueError as e:
        check(False, f"{name}: every line of log.jsonl is JSON ({e})")
        return
    check(all(isinstance(j, dict) for j in rows), f"{name}: log.jsonl: {len(rows)} lines, each one JSON object")
    train = [j for j in rows if "loss" in j]
    val = [j for j in rows if "val_loss" in j]
    check(len(train) + len(val) == len(rows), f"{name}: every log line is a step's or a validation's")
    keys = ("step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu")
    check([j.get("step") for j in train] == list(range(1, steps + 1)),
          f"{name}: one line per step, steps 1..{steps} in order")
    bad = [j for j in train if not all(number(j.get(k)) for k in keys)]
    check(not bad, f"{name}: each step's line holds finite {', '.join(keys)} ({bad[:1]})")
    check(all(j["loss"] > 0 and j["grad_norm"] > 0 and j["tokens_per_s"] > 0 and 0 < j["mfu"] <= 1 for j in train),
          f"{name}: loss, grad_norm and tokens/s positive, mfu in (0, 1]")
    want_val = sorted(set(range(interval, steps + 1, interval)) | {steps})
    check([j["step"] for j in val] == want_val and all(number(j["val_loss"]) and j["val_loss"] > 0 for j in val),
          f"{name}: a validation line at steps {want_val} ({[(j['step'], j['val_loss']) for j in val]})")
    order_ok = all(rows.index(v) > next(i for i, j in enumerate(rows) if j.get("loss") and j["step"] == v["step"])
                   for v in val)
    check(order_ok, f"{name}: each validation line follows its step's line")
    first, last = train[0]["loss"], np.mean([j["loss"] for j in train[-3:]])
    check(last < first, f"{name}: the loss falls ({first:.3f} at step 1, {last:.3f} over the last 3 steps)")
    check(val[-1]["val_loss"] < first, f"{name}: the final validation loss {val[-1]['val_loss']:.3f} is below the "
          f"first step's loss {first:.3f}")
    # Linear warmup to lr, then decay to no less than min_lr (default a tenth of lr).
    lrs = [j["lr"] for j in train]
    rising = all(a < b for a, b in zip(lrs[:warmup], lrs[1:warmup]))
    falling = all(a >= b for a, b in zip(lrs[warmup - 1:], lrs[warmup:]))
    check(rising and falling and abs(max(lrs) - lr) <= 1e-12 * lr and min(lrs) >= 0.1 * lr * (1 - 1e-12),
          f"{name}: lr rises over {warmup} warmup steps to {lr}, then falls, staying above {0.1 * lr:g} "
          f"({lrs[0]:.2e} .. {max(lrs):.2e} .. {lrs[-1]:.2e})")
    return train, val


def check_plot(name, out, n_train, n_val):
    path = os.path.join(out, "loss.svg")
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        check(False, f"{name}: loss.svg is well-formed XML ({e})")
        return
    check(root.tag in ("svg", "{http://www.w3.org/2000/svg}svg"), f"{name}: loss.svg's root is <svg> ({root.tag})")
    # Each curve is a polyline of its points: an SVG path (M then L per point) or a polyline element.
    counts = []
    for el in root.iter():
        tag = el.tag.rsplit("}", 1)[-1]
        if tag == "path":
            counts.append(sum(el.get("d", "").count(c) for c in "MLml"))
        elif tag == "polyline":
            counts.append(len(el.get("points", "").split()))
    check(n_train in counts and n_val in counts,
          f"{name}: loss.svg draws the {n_train} train points and the {n_val} validation points (curves: {counts})")


def generates(what, model, eos):
    """`generate -p` writes text, and greedy decoding yields 20 new ids, or fewer ending in EOS. A briefly trained
    model's greedy text may be only whitespace (GPT-2's newline, repeated): stdout is checked whole, not stripped."""
    r = run(["generate", "-m", model, "-p", "ROMEO:", "-n", "20", "--temp", "0"], timeout=60)
    check(r.returncode == 0 and r.stdout != "", f"{what} writes text ({r.stdout[:60]!r}) {r.stderr.strip()[-150:]}")
    r = run(["generate", "-m", model, "-p", "ROMEO:", "-n", "20", "--temp", "0", "--print-ids"], timeout=60)
    printed = r.stdout.split()
    prompt = run(["generate", "-m", model, "-p", "ROMEO:", "-n", "0", "--print-ids"], timeout=60).stdout.split()
    new = printed[len(prompt):]
    full = len(new) == 20 or (0 < len(new) < 20 and new[-1] == str(eos))
    check(r.returncode == 0 and prompt and printed[:len(prompt)] == prompt and full,
          f"{what}: --print-ids shows the prompt's {len(prompt)} ids and 20 new ones, or fewer ending in EOS "
          f"({len(new)} new) {r.stderr.strip()[-150:]}")


def check_checkpoint(name, ckpt, tokenizer, data, model, tok_files):
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    index = json.load(open(os.path.join(data, "index.json")))
    vocab = index["tokenizer"]["vocab_size"]
    if model["arch"] == "gpt2":
        want = {"model_type": "gpt2", "n_embd": model["dim"], "n_layer": model["n_layers"], "n_head": model["n_heads"],
                "n_positions": model["max_seq"], "vocab_size": vocab}
    else:
        want = {"model_type": model["arch"], "hidden_size": model["dim"], "num_hidden_layers": model["n_layers"],
                "num_attention_heads": model["n_heads"], "num_key_value_heads": model["n_kv_heads"],
                "intermediate_size": model["ffn_dim"], "max_position_embeddings": model["max_seq"],
                "vocab_size": vocab, "tie_word_embeddings": model.get("tied_embeddings") == "true"}
        if "head_dim" in model:
            want["head_dim"] = model["head_dim"]
        if "rope_theta" in model:
            want["rope_theta"] = model["rope_theta"]
    got = {k: cfg.get(k) for k in want}
    check(got == want, f"{name}: config.json has the config's shape ({got} vs {want})")
    gen = json.load(open(os.path.join(ckpt, "generation_config.json")))
    check(gen.get("eos_token_id") == index["tokenizer"]["eos_id"],
          f"{name}: generation_config.json's eos_token_id {gen.get('eos_token_id')} is the tokenizer's "
          f"{index['tokenizer']['eos_id']}")
    same = {f: os.path.isfile(os.path.join(ckpt, f)) and open(os.path.join(ckpt, f), "rb").read()
            == open(os.path.join(tokenizer, f), "rb").read() for f in tok_files}
    check(all(same.values()), f"{name}: the checkpoint carries the tokenizer's files byte for byte ({same})")

    # Logits: Ascent against the PyTorch reference on the checkpoint's own files, on text from the val split.
    w = read_safetensors(os.path.join(ckpt, "model.safetensors"))
    val = np.fromfile(os.path.join(data, "val.bin"), dtype={"uint16": "<u2", "int32": "<i4"}[index["dtype"]])
    ids = [int(x) for x in val[:min(40, model["max_seq"])]]
    npy = os.path.join(D, f"{name}-logits.npy")
    r = run(["logits", "-m", ckpt, "--prompt-ids", " ".join(map(str, ids)), "-o", npy], timeout=60)
    check(r.returncode == 0, f"{name}: ascent logits on the checkpoint (exit {r.returncode} {r.stderr.strip()[-200:]})")
    ref = None
    try:
        ref = reference_logits(cfg, w, ids)
    except KeyError as e:
        check(False, f"{name}: the reference finds every tensor it needs under its HF name (missing {e})")
    if r.returncode == 0 and ref is not None:
        ours = load_npy(npy)
        scale = ref.abs().max().item()
        diff = (ours.double() - ref.double()).abs().max().item() if ours.shape == ref.shape else float("inf")
        check(diff <= 1e-4 * scale, f"{name}: logits {tuple(ours.shape)} match PyTorch's on config.json and "
              f"model.safetensors (max diff {diff:.2e} <= 1e-4 x {scale:.2f})")

    generates(f"{name}: ascent generate on the checkpoint", ckpt, index["tokenizer"]["eos_id"])
    r = run(["info", "-m", ckpt], timeout=60)
    fields = dict(l.split(None, 1) for l in r.stdout.splitlines() if len(l.split(None, 1)) == 2)
    check(r.returncode == 0 and fields.get("architecture") == model["arch"] and fields.get("layers")
          == str(model["n_layers"]) and fields.get("vocab") == str(vocab),
          f"{name}: ascent info describes it (architecture {fields.get('architecture')}, layers "
          f"{fields.get('layers')}, vocab {fields.get('vocab')}) {r.stderr.strip()[-150:]}")

    # Quantized, it runs as it is: no conversion, no tokenizer flag. Its logits stay near the f32 model's.
    for what, cmd, path in (("quantize --type int8", "quantize", os.path.join(D, f"{name}-int8.safetensors")),
                            ("convert --type q8_0", "convert", os.path.join(D, f"{name}-q8_0.gguf"))):
        qtype = "int8" if cmd == "quantize" else "q8_0"
        r = run([cmd, "-m", ckpt, "-o", path, "--type", qtype], timeout=60)
        check(r.returncode == 0, f"{name}: ascent {what} (exit {r.returncode} {r.stderr.strip()[-200:]})")
        if r.returncode != 0:
            continue
        generates(f"{name}: ascent generate on its {qtype} model", path, index["tokenizer"]["eos_id"])
        qnpy = os.path.join(D, f"{name}-{qtype}.npy")
        q = run(["logits", "-m", path, "--prompt-ids", " ".join(map(str, ids)), "-o", qnpy], timeout=60)
        if q.returncode == 0 and ref is not None:
            ql = load_npy(qnpy).double()
            rel = ((ql - ref.double()).pow(2).mean().sqrt() / ref.double().pow(2).mean().sqrt()).item()
            check(rel < 0.05, f"{name}: the {qtype} model's logits are within 5% RMS of the f32 reference ({rel:.4f})")
        else:
            check(False, f"{name}: ascent logits on the {qtype} model (exit {q.returncode} {q.stderr.strip()[-150:]})")


def main():
    for name, (tokenizer, data, model, train, optimizer, interval, keep, tok_files) in RUNS.items():
        path, out, text = write_config(name, tokenizer, data, model, train, optimizer, interval, keep)
        r = run(["train", path], timeout=120)
        check(r.returncode == 0, f"{name}: ascent train (exit {r.returncode}"
              f"{'' if r.returncode == 0 else ' ' + r.stderr.strip()[-200:]})")
        if r.returncode != 0:
            continue
        steps = train["steps"]
        logged = check_log(name, out, steps, interval, float(optimizer["lr"]), optimizer["warmup_steps"])
        if logged:
            check_plot(name, out, len(logged[0]), len(logged[1]))
        check(open(os.path.join(out, "config.yaml")).read() == text, f"{name}: the run's config.yaml is its config")
        root = os.path.join(out, "checkpoints")
        names = sorted(os.listdir(root))
        want = [f"step-{s:08d}" for s in sorted(set(range(interval, steps + 1, interval)) | {steps})][-keep:]
        check(names == want, f"{name}: keep {keep} leaves exactly the newest {keep} checkpoints, nothing else "
              f"({names})")
        final = os.path.join(root, want[-1])
        state = json.load(open(os.path.join(final, "trainer_state.json")))
        check(state.get("step") == steps, f"{name}: the final checkpoint's trainer_state.json says step {steps}")
        check(set(os.listdir(final)) >= {"model.safetensors", "config.json", "generation_config.json",
                                         "optimizer.safetensors", "trainer_state.json", *tok_files},
              f"{name}: the final checkpoint holds {sorted(os.listdir(final))}")
        check_checkpoint(name, final, tokenizer, data, model, tok_files)
    finish()


if __name__ == "__main__":
    main()
