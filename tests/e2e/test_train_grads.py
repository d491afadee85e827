"""Training's gradients against PyTorch autograd, and AdamW against torch.optim.AdamW. Three models: story-656K (Llama,
GQA, tied embeddings), and random tiny GPT-2 and Qwen3 models of odd sizes. The reference forward is the test suite's
own (common.reference_logits, written from the Hugging Face model definitions), in float64, with F.cross_entropy.
tests/tools/train_runner runs Ascent's graph, autodiff pass and optimizer on the same batch; its gradients and
parameters come back under Hugging Face names, so the checkpoint writer's renaming is checked on the way."""
import json
import os
import subprocess

import numpy as np
import torch

from common import SHARED, check, finish, read_safetensors, reference_logits, tmpdir, write_safetensors

TRAIN_RUNNER = os.environ.get("TRAIN_RUNNER", os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "build", "release", "tests", "train_runner"))
DIR = tmpdir()
torch.manual_seed(0)


def random_model(name, cfg, weights):
    d = os.path.join(DIR, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    write_safetensors(os.path.join(d, "model.safetensors"), weights)
    return d


def gpt2_model():
    C, L, V, P, F = 36, 2, 97, 32, 50
    cfg = {"model_type": "gpt2", "vocab_size": V, "n_embd": C, "n_layer": L, "n_head": 3, "n_inner": F,
           "n_positions": P, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
    r = lambda *s: torch.randn(*s) * 0.2
    w = {"wte.weight": r(V, C), "wpe.weight": r(P, C), "ln_f.weight": 1 + r(C), "ln_f.bias": r(C)}
    for l in range(L):
        p = f"h.{l}."
        w.update({p + "ln_1.weight": 1 + r(C), p + "ln_1.bias": r(C), p + "attn.c_attn.weight": r(C, 3 * C),
                  p + "attn.c_attn.bias": r(3 * C), p + "attn.c_proj.weight": r(C, C), p + "attn.c_proj.bias": r(C),
                  p + "ln_2.weight": 1 + r(C), p + "ln_2.bias": r(C), p + "mlp.c_fc.weight": r(C, F),
                  p + "mlp.c_fc.bias": r(F), p + "mlp.c_proj.weight": r(F, C), p + "mlp.c_proj.bias": r(C)})
    return random_model("gpt2", cfg, w)


def qwen3_model():
    C, L, V, H, Hkv, D, F = 40, 2, 101, 4, 2, 10, 70
    cfg = {"model_type": "qwen3", "vocab_size": V, "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": Hkv, "head_dim": D, "intermediate_size": F, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False, "hidden_act": "silu"}
    r = lambda *s: torch.randn(*s) * 0.2
    w = {"model.embed_tokens.weight": r(V, C), "lm_head.weight": r(V, C), "model.norm.weight": 1 + r(C)}
    for l in range(L):
        p = f"model.layers.{l}."
        w.update({p + "input_layernorm.weight": 1 + r(C), p + "self_attn.q_proj.weight": r(H * D, C),
                  p + "self_attn.k_proj.weight": r(Hkv * D, C), p + "self_attn.v_proj.weight": r(Hkv * D, C),
                  p + "self_attn.q_norm.weight": 1 + r(D), p + "self_attn.k_norm.weight": 1 + r(D),
                  p + "self_attn.o_proj.weight": r(C, H * D), p + "post_attention_layernorm.weight": 1 + r(C),
                  p + "mlp.gate_proj.weight": r(F, C), p + "mlp.up_proj.weight": r(F, C),
                  p + "mlp.down_proj.weight": r(C, F)})
    return random_model("qwen3", cfg, w)


def batch(V, B, T):
    tokens = torch.randint(0, V, (B, T), dtype=torch.int32)
    targets = torch.randint(0, V, (B, T), dtype=torch.int32)
    targets[0, 0] = -1  # rows without a target are not counted
    targets[B - 1, T - 1] = -1
    tp, gp = os.path.join(DIR, "tokens.npy"), os.path.join(DIR, "targets.npy")
    np.save(tp, tokens.numpy())
    np.save(gp, targets.numpy())
    return tokens, targets, tp, gp


def torch_loss(cfg, w, tokens, targets):
    total, count = 0.0, int((targets >= 0).sum())
    for b in range(tokens.shape[0]):
        logits = reference_logits(cfg, w, tokens[b].tolist(), dtype=torch.float64).double()
        total = total + torch.nn.functional.cross_entropy(logits, targets[b].long(), ignore_index=-1, reduction="sum")
    return total / count


def runner(*args):
    r = subprocess.run([TRAIN_RUNNER] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr.strip())
    return r


def rel(a, b):
    return ((a.double() - b.double()).abs().max() / (b.double().abs().max() + 1e-30)).item()


def check_model(name, folder, B, T):
    cfg = json.load(open(os.path.join(folder, "config.json")))
    w = {k: v.double().requires_grad_() for k, v in read_safetensors(os.path.join(folder, "model.safetensors")).items()}
    tokens, targets, tp, gp = batch(cfg["vocab_size"], B, T)
    loss = torch_loss(cfg, w, tokens, targets)
    loss.backward()
    outs = {}
    for mode in ("none", "selective", "full"):
        out = os.path.join(DIR, f"{name}-grads-{mode}.safetensors")
        r = runner("grads", folder, out, tp, gp, f"recompute={mode}")
        check(r.returncode == 0, f"{name}: train_runner grads recompute={mode} runs")
        if r.returncode != 0:
            return
        outs[mode] = (read_safetensors(out), r.stdout)
    # A tied model stored with lm_head.weight alone (story-656K) comes back under the embedding's name.
    tied_as_head = "lm_head.weight" in w and "model.embed_tokens.weight" not in w

    def rename(t):
        if tied_as_head and "model.embed_tokens.weight" in t:
            t["lm_head.weight"] = t.pop("model.embed_tokens.weight")
        return t

    for o in outs.values():
        rename(o[0])
    got, stdout = outs["none"]
    got_loss = float(stdout.split()[1])
    check(abs(got_loss - loss.item()) <= 1e-5 * abs(loss.item()),
          f"{name}: loss {got_loss:.7f} == PyTorch's {loss.item():.7f}")
    names = sorted(w)
    check(sorted(got) == names, f"{name}: a gradient for each of the {len(names)} tensors, under their HF names")
    worst = max(((rel(got[n], w[n].grad), n) for n in names if n in got), default=(float("inf"), "-"))
    check(worst[0] < 1e-4, f"{name}: every gradient matches autograd (worst {worst[1]}: rel {worst[0]:.1e} < 1e-4)")
    for mode in ("selective", "full"):
        same = all(torch.equal(outs[mode][0][n], got[n]) for n in got)
        check(same, f"{name}: recompute={mode} gives bitwise the same gradients as none")
    peaks = {m: int(o[1].split("planned")[1].split()[0]) for m, o in outs.items()}
    measured = {m: int(o[1].split("peak_bytes")[1].split()[0]) for m, o in outs.items()}
    check(all(measured[m] == peaks[m] for m in peaks), f"{name}: the planner's peak equals the step's ({peaks})")
    check(peaks["full"] < peaks["selective"] <= peaks["none"], f"{name}: peak activations full < selective <= none")

    # Three AdamW steps on the same batch against torch.optim.AdamW (no decay for vectors: norms and biases). At each
    # step Ascent's gradients are checked against autograd at the parameters torch reached, then handed to torch's
    # optimizer, so the optimizer is compared on the same gradients: a gradient that is zero in exact arithmetic (a
    # GPT-2 key bias) is rounding noise in both, and Adam turns noise of either sign into a full step.
    hp = dict(lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    out = os.path.join(DIR, f"{name}-adamw.safetensors")
    prefix = os.path.join(DIR, f"{name}-step")
    r = runner("adamw", folder, out, tp, gp, "steps=3", f"lr={hp['lr']}", f"wd={hp['weight_decay']}", "b1=0.9",
               "b2=0.999", "eps=1e-8", f"grads={prefix}")
    check(r.returncode == 0, f"{name}: train_runner adamw runs")
    if r.returncode != 0:
        return
    renamed = lambda t: rename(dict(t))
    p = {k: v.detach().float().clone().requires_grad_() for k, v in w.items()}
    opt = torch.optim.AdamW([{"params": [p[n] for n in names if p[n].dim() >= 2]},
                             {"params": [p[n] for n in names if p[n].dim() < 2], "weight_decay": 0.0}], **hp)
    worst_grad = (0.0, "-")
    for k in range(3):
        ours = renamed(read_safetensors(f"{prefix}-{k}.safetensors"))
        p64 = {n: t.detach().double().requires_grad_() for n, t in p.items()}
        torch_loss(cfg, p64, tokens, targets).backward()
        worst_grad = max([worst_grad] + [(rel(ours[n], p64[n].grad), n) for n in names])
        for n in names:
            p[n].grad = ours[n].float()
        opt.step()
    check(worst_grad[0] < 1e-4, f"{name}: each step's gradients match autograd at torch's parameters (worst "
          f"{worst_grad[1]}: rel {worst_grad[0]:.1e} < 1e-4)")
    got = renamed(read_safetensors(out))
    err = max(((got[n].double() - p[n].detach().double()).abs().max().item(), n) for n in names)
    check(err[0] < 1e-5, f"{name}: parameters after 3 AdamW steps match torch.optim.AdamW's (worst {err[1]}: "
          f"{err[0]:.1e} < 1e-5)")


check_model("story-656K", os.path.join(SHARED, "models", "story-656K"), 3, 11)

# Fine-tuning from a GGUF file, whose Q and K rows are permuted for interleaved RoPE: the trainer brings them back to
# Hugging Face's order, so its loss and gradients equal those from the HF folder above (checked against autograd).
gguf = os.path.join(DIR, "story.gguf")
r = subprocess.run([os.environ.get("ASCENT_BIN", os.path.join(os.path.dirname(TRAIN_RUNNER), "..", "ascent")),
                    "convert", "-m", os.path.join(SHARED, "models", "story-656K"), "-o", gguf, "--type", "f32"],
                   capture_output=True, text=True)
check(r.returncode == 0, f"story-656K converts to GGUF ({r.stderr.strip()[-100:]})")
tokens, targets, tp, gp = batch(2048, 2, 9)
outs = []
for m in (os.path.join(SHARED, "models", "story-656K"), gguf):
    out = os.path.join(DIR, os.path.basename(m) + "-grads.safetensors")
    r = runner("grads", m, out, tp, gp)
    outs.append((float(r.stdout.split()[1]) if r.returncode == 0 else None, read_safetensors(out) if r.returncode == 0 else {}))
check(outs[0][0] is not None and outs[0][0] == outs[1][0], f"from GGUF: the same loss as from the HF folder ({outs[1][0]})")
worst = max(((rel(outs[1][1][n], g), n) for n, g in outs[0][1].items() if n in outs[1][1]), default=(float("inf"), "-"))
check(sorted(outs[0][1]) == sorted(outs[1][1]) and worst[0] < 1e-5,
      f"from GGUF: the same gradients under the same HF names (worst {worst[1]}: {worst[0]:.1e})")
check_model("gpt2-tiny", gpt2_model(), 2, 13)
qwen3 = qwen3_model()
check_model("qwen3-tiny", qwen3, 3, 9)

# O3 fp16 multiplies fp16 weights: the same model with its projection matrices rounded to fp16 by torch (embeddings,
# norms and the LM head, which stays f32, as they were) gives bitwise the same loss and gradients at O3 fp16. At O0
# the rounding shows, so the check can fail.
w = read_safetensors(os.path.join(qwen3, "model.safetensors"))
rounded = {n: (t.half().float() if n.endswith("proj.weight") else t) for n, t in w.items()}
cfg = json.load(open(os.path.join(qwen3, "config.json")))
qwen3_f16 = random_model("qwen3-f16", cfg, rounded)
tokens, targets, tp, gp = batch(cfg["vocab_size"], 3, 9)
res = {}
for precision, scale in (("O3-fp16", 1024), ("O0", 1)):
    for name, folder in (("as stored", qwen3), ("fp16-rounded", qwen3_f16)):
        out = os.path.join(DIR, f"qwen3-{precision}-{name}.safetensors")
        r = runner("grads", folder, out, tp, gp, f"precision={precision}", f"loss_scale={scale}")
        check(r.returncode == 0, f"train_runner grads precision={precision} on the {name} weights runs")
        res[precision, name] = (r.stdout.split()[1], read_safetensors(out)) if r.returncode == 0 else (None, {})
(l1, g1), (l2, g2) = res["O3-fp16", "as stored"], res["O3-fp16", "fp16-rounded"]
check(l1 is not None and l1 == l2 and sorted(g1) == sorted(g2) and all(torch.equal(g1[n], g2[n]) for n in g1),
      f"O3 fp16: weights rounded to fp16 beforehand change neither the loss ({l1} vs {l2}) nor any gradient")
check(res["O0", "as stored"][0] != res["O0", "fp16-rounded"][0],
      f"O0: the fp16-rounded weights give another loss ({res['O0', 'as stored'][0]} vs {res['O0', 'fp16-rounded'][0]})")
check(l1 is not None and abs(float(l1) - float(res["O0", "as stored"][0])) < 1e-2 * float(l1),
      f"O3 fp16: the loss {l1} is within 1% of fp32's {res['O0', 'as stored'][0]}")
finish()
