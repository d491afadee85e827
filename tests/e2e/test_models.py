"""Tiny random Llama, Mistral, Qwen2, Qwen3 and GPT-2 checkpoints made with PyTorch, written as Hugging Face folders.
Our logits must match the PyTorch reference (< 1e-4), fed at once or token by token (bitwise equal, also with each piece
run twice over a rewound cache).

The same weights converted by our GGUF writer to F16, Q8_0 and Q4_0 must match a reference built from the weights read
back from that file by an independent GGUF reader (< 1e-4). They must also stay within a per-type bound of the
unquantized reference."""
import json
import os

import torch

from common import (ACTIVATIONS, check, finish, hf_from_gguf, load_npy, read_gguf, reference_logits, run, tmpdir,
                    write_safetensors)

torch.manual_seed(1234)
C, F, V, T = 64, 96, 256, 24


def rnd(*shape, scale=0.15):
    return torch.randn(*shape) * scale


def norm_w(n):
    return 1.0 + 0.1 * torch.randn(n)


def llama_like(model_type, H=4, Hkv=2, D=None, bias=False, qk_norm=False, extra=None):
    D = D or C // H
    cfg = {"model_type": model_type, "vocab_size": V, "hidden_size": C, "intermediate_size": F,
           "num_hidden_layers": 2, "num_attention_heads": H, "num_key_value_heads": Hkv, "head_dim": D,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 128, "hidden_act": "silu",
           "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
    cfg.update(extra or {})
    w = {"model.embed_tokens.weight": rnd(V, C, scale=0.5), "model.norm.weight": norm_w(C),
         "lm_head.weight": rnd(V, C)}
    for l in range(2):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm_w(C)
        w[p + "post_attention_layernorm.weight"] = norm_w(C)
        w[p + "self_attn.q_proj.weight"] = rnd(H * D, C)
        w[p + "self_attn.k_proj.weight"] = rnd(Hkv * D, C)
        w[p + "self_attn.v_proj.weight"] = rnd(Hkv * D, C)
        w[p + "self_attn.o_proj.weight"] = rnd(C, H * D)
        if bias:
            for n, rows in (("q", H * D), ("k", Hkv * D), ("v", Hkv * D)):
                w[p + f"self_attn.{n}_proj.bias"] = rnd(rows)
        if qk_norm:
            w[p + "self_attn.q_norm.weight"] = norm_w(D)
            w[p + "self_attn.k_norm.weight"] = norm_w(D)
        w[p + "mlp.gate_proj.weight"] = rnd(F, C)
        w[p + "mlp.up_proj.weight"] = rnd(F, C)
        w[p + "mlp.down_proj.weight"] = rnd(C, F)
    return cfg, w


def gpt2():
    H = 4
    cfg = {"model_type": "gpt2", "vocab_size": V, "n_embd": C, "n_layer": 2, "n_head": H, "n_positions": 64,
           "n_inner": F * 2, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
    w = {"wte.weight": rnd(V, C, scale=0.5), "wpe.weight": rnd(64, C), "ln_f.weight": norm_w(C),
         "ln_f.bias": rnd(C)}
    for l in range(2):
        p = f"h.{l}."
        w[p + "ln_1.weight"], w[p + "ln_1.bias"] = norm_w(C), rnd(C)
        w[p + "ln_2.weight"], w[p + "ln_2.bias"] = norm_w(C), rnd(C)
        w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = rnd(C, 3 * C), rnd(3 * C)
        w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = rnd(C, C), rnd(C)
        w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = rnd(C, 2 * F), rnd(2 * F)
        w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = rnd(2 * F, C), rnd(C)
    return cfg, w


MODELS = {
    "llama": llama_like("llama", extra={"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                          "high_freq_factor": 4.0,
                                                          "original_max_position_embeddings": 16}}),
    "mistral": llama_like("mistral", extra={"sliding_window": 5}),
    "qwen2": llama_like("qwen2", bias=True),
    "qwen3": llama_like("qwen3", D=32, qk_norm=True),
    "gpt2": gpt2(),
}

# How far quantized logits may stray from the unquantized reference: RMS error relative to the reference's RMS.
# Random Gaussian weights are the worst case for 4-bit blocks (error ~9% RMS per weight, compounding over layers).
QUANT_BOUND = {"f16": 0.005, "q8_0": 0.05, "q4_0": 0.5}


def write_hf(folder, cfg, w, sharded=False, dtype=torch.float32):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    if cfg["model_type"] == "gpt2":
        w = {"transformer." + k: v for k, v in w.items()}
    w = {k: v.to(dtype) for k, v in w.items()}
    if not sharded:
        write_safetensors(os.path.join(folder, "model.safetensors"), w)
        return
    names = sorted(w)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(halves):
        fn = f"model-{i + 1:05d}-of-00002.safetensors"
        write_safetensors(os.path.join(folder, fn), {n: w[n] for n in part})
        weight_map.update({n: fn for n in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


# Every pass switched off alone, and all of them: outputs must stay bitwise identical (no pass reorders arithmetic).
PASS_VARIANTS = ["-fuse-norm", "-fuse-attention", "-fuse-swiglu", "-fuse-residual", "-dce", "-cse", "-inplace",
                 "-plan", "-all"]


def ascent_logits(model, ids, out, step=0, passes=None, isa=None, extra=()):
    env = {}
    if passes:
        env["ASCENT_PASSES"] = passes
    if isa:
        env["ASCENT_ISA"] = isa
    r = run(["logits", "-m", model, "--prompt-ids", " ".join(map(str, ids)), "-o", out, "--step", step, *extra],
            env=env or None)
    if r.returncode != 0:
        print(r.stderr)
        return None
    return load_npy(out)


def rel_rms(a, b):
    return ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt()).item()


def main():
    root = tmpdir()
    ids = torch.randint(3, V, (T,)).tolist()
    for name, (cfg, w) in MODELS.items():
        folder = os.path.join(root, name)
        write_hf(folder, cfg, w)
        ref = reference_logits(cfg, w, ids)
        ours = ascent_logits(folder, ids, os.path.join(root, name + ".npy"))
        check(ours is not None, f"{name}: ascent logits runs")
        if ours is None:
            continue
        diff = (ours - ref).abs().max().item()
        check(diff < 1e-4, f"{name}: HF safetensors logits match PyTorch (max abs diff {diff:.2e} < 1e-4)")
        for passes in PASS_VARIANTS:
            other = ascent_logits(folder, ids, os.path.join(root, f"{name}{passes}.npy"), passes=passes)
            check(other is not None and torch.equal(other, ours), f"{name}: passes {passes}: bitwise identical logits")
        ref_isa = ascent_logits(folder, ids, os.path.join(root, f"{name}-ref.npy"), isa="ref")
        d_isa = (ref_isa - ours).abs().max().item() if ref_isa is not None else float("inf")
        check(d_isa < 1e-5, f"{name}: ASCENT_ISA=ref gives the same logits to f32 rounding ({d_isa:.1e} < 1e-5)")
        # Token by token, each kv head's RoPE and append run inside the attention call, in every kernel variant: the
        # prompt's bits still (the reference kernels run the heads' steps before attending, the SIMD ones per head).
        for isa, whole in (("ref", ref_isa), ("avx2", ascent_logits(folder, ids, os.path.join(root, f"{name}-avx2.npy"),
                                                                     isa="avx2"))):
            inc = ascent_logits(folder, ids, os.path.join(root, f"{name}-{isa}-step1.npy"), step=1, isa=isa)
            check(inc is not None and whole is not None and torch.equal(inc, whole),
                  f"{name}: ASCENT_ISA={isa}, fed 1 token at a time, logits are bitwise identical")
        # The unfused graph's attention node appends per head the same way (its RoPE runs in the graph before it).
        inc = ascent_logits(folder, ids, os.path.join(root, f"{name}-unfused-step1.npy"), step=1,
                            passes="-fuse-attention")
        check(inc is not None and torch.equal(inc, ours),
              f"{name}: attention unfused, fed 1 token at a time, logits are bitwise identical")
        for step in (1, 7):
            inc = ascent_logits(folder, ids, os.path.join(root, f"{name}-step{step}.npy"), step=step)
            check(inc is not None and torch.equal(inc, ours),
                  f"{name}: fed {step} token(s) at a time through the KV cache, logits are bitwise identical")
            again = ascent_logits(folder, ids, os.path.join(root, f"{name}-twice{step}.npy"), step=step,
                                  extra=["--twice"])
            check(again is not None and torch.equal(again, ours),
                  f"{name}: each piece of {step} run, the cache rewound and the piece run again (as bench reruns "
                  f"decode steps), logits are bitwise identical")
        # An f16 KV cache (--kv-type f16): PyTorch with each layer's keys and values rounded to f16 before attention
        # reads them. It must match that far better than the f32 reference (the rounding is what it changes), and
        # decoding token by token must give the prompt's bits (every row reads the cache's rounded values).
        ref16 = reference_logits(cfg, w, ids, kv=lambda x: x.half().to(x.dtype))
        f16 = ascent_logits(folder, ids, os.path.join(root, name + "-kv16.npy"), extra=["--kv-type", "f16"])
        d16 = rel_rms(f16, ref16) if f16 is not None else float("inf")
        d32 = rel_rms(f16, ref) if f16 is not None else 0.0
        check(d16 < 1e-5 and d16 < d32 / 10, f"{name}: with an f16 KV cache, logits match PyTorch with K and V rounded "
                                             f"to f16 (relative RMS {d16:.1e} < 1e-5; against f32 K/V {d32:.1e})")
        inc16 = ascent_logits(folder, ids, os.path.join(root, name + "-kv16-step1.npy"), step=1,
                              extra=["--kv-type", "f16"])
        check(inc16 is not None and f16 is not None and torch.equal(inc16, f16),
              f"{name}: with an f16 KV cache, fed 1 token at a time, logits are bitwise identical")
        # The serving engine's path (ascent logits --paged): a shared pool of KV blocks, the sequence's blocks
        # scattered through it, a few tokens per step beside 3 other sequences. The same bits, f32 and f16 caches.
        for kv, whole in (("f32", ours), ("f16", f16)):
            paged = ascent_logits(folder, ids, os.path.join(root, f"{name}-paged-{kv}.npy"),
                                  extra=["--paged", "16", "--beside", "3", "--kv-type", kv])
            check(paged is not None and whole is not None and torch.equal(paged, whole),
                  f"{name}: {kv} KV cache, paged among 3 other sequences, logits are bitwise identical")
        for qtype, bound in QUANT_BOUND.items():
            gguf = os.path.join(root, f"{name}-{qtype}.gguf")
            r = run(["convert", "-m", folder, "-o", gguf, "--type", qtype])
            check(r.returncode == 0, f"{name}: convert to GGUF {qtype} ({r.stderr.strip()[:200]})")
            if r.returncode != 0:
                continue
            q = ascent_logits(gguf, ids, os.path.join(root, f"{name}-{qtype}.npy"))
            check(q is not None, f"{name}: GGUF {qtype} runs")
            if q is None:
                continue
            _, tensors = read_gguf(gguf)
            qref = reference_logits(cfg, hf_from_gguf(cfg, tensors), ids, act=ACTIVATIONS[qtype])
            # f16 weights widen exactly and leave activations alone. Only f32 rounding then separates Ascent from the
            # float64 reference, as for an f32 model or an f16 KV cache: 1e-5 (seen: 2-5e-7). The block formats round
            # activations to int8 from f32 here and f64 there. A value within an ulp of a rounding boundary can land
            # on the neighbouring code: ~1e-3 relative RMS in the logits, against 1e-7 otherwise. So their bound is
            # 1e-2 RMS: a wrong scale or code order in a kernel costs over 10%.
            d_same, same_bound = rel_rms(q, qref), 1e-5 if qtype == "f16" else 1e-2
            check(d_same < same_bound, f"{name}: GGUF {qtype} matches PyTorch on the stored weights"
                                       f"{'' if qtype == 'f16' else ' with int8 activations'} (relative RMS "
                                       f"{d_same:.1e} < {same_bound:.0e})")
            rel = ((q - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()
            check(rel < bound, f"{name}: GGUF {qtype} within {bound:.1%} RMS of the f32 reference ({rel:.4f})")

    # Qwen2/Qwen3 with use_sliding_window: only layers from max_window_layers on slide (transformers' layer_types). This
    # model's first layer attends fully, its second over the last 5 positions. GGUF has one window for every layer, so
    # convert refuses it, naming the field.
    for model_type, extra in (("qwen2", {"bias": True}), ("qwen3", {"D": 32, "qk_norm": True})):
        cfg, w = llama_like(model_type, **extra, extra={"use_sliding_window": True, "sliding_window": 5,
                                                        "max_window_layers": 1})
        folder = os.path.join(root, f"{model_type}-window")
        write_hf(folder, cfg, w)
        ref = reference_logits(cfg, w, ids)
        every = reference_logits(dict(cfg, max_window_layers=0), w, ids)
        ours = ascent_logits(folder, ids, os.path.join(root, f"{model_type}-window.npy"))
        diff = (ours - ref).abs().max().item() if ours is not None else float("inf")
        apart = (every - ref).abs().max().item()
        check(diff < 1e-4 and apart > 1e-2, f"{model_type} window from layer 1: logits match PyTorch (max abs diff "
                                            f"{diff:.2e} < 1e-4; windowing every layer moves them {apart:.2e})")
        inc = ascent_logits(folder, ids, os.path.join(root, f"{model_type}-window-step1.npy"), step=1)
        check(inc is not None and ours is not None and torch.equal(inc, ours),
              f"{model_type} window from layer 1: fed 1 token at a time, logits are bitwise identical")
        r = run(["info", "-m", folder])
        check(r.returncode == 0 and "sliding window    5 (layers 1 on)" in r.stdout,
              f"{model_type} window from layer 1: info says so")
        gguf = os.path.join(root, f"{model_type}-window.gguf")
        r = run(["convert", "-m", folder, "-o", gguf, "--type", "f16"])
        check(r.returncode == 1 and "max_window_layers" in r.stderr and not os.path.exists(gguf),
              f"{model_type} window from layer 1: convert to GGUF refused ({r.stderr.strip()[:160]})")
        q8 = os.path.join(root, f"{model_type}-window-int8.safetensors")
        q = run(["quantize", "-m", folder, "-o", q8, "--type", "int8"])
        r = run(["info", "-m", q8])
        check(q.returncode == 0 and r.returncode == 0 and "sliding window    5 (layers 1 on)" in r.stdout,
              f"{model_type} window from layer 1: kept by quantize")

    # Sharded checkpoints, and f16/bf16 safetensors.
    cfg, w = MODELS["qwen2"]
    ref = reference_logits(cfg, w, ids)
    folder = os.path.join(root, "qwen2-sharded")
    write_hf(folder, cfg, w, sharded=True)
    ours = ascent_logits(folder, ids, os.path.join(root, "sharded.npy"))
    check(ours is not None and (ours - ref).abs().max().item() < 1e-4, "qwen2: sharded safetensors with index match")
    for dt in (torch.float16, torch.bfloat16):
        folder = os.path.join(root, f"llama-{dt}")
        cfg, w = MODELS["llama"]
        write_hf(folder, cfg, w, dtype=dt)
        rounded = {k: v.to(dt).float() for k, v in w.items()}
        ref_dt = reference_logits(cfg, rounded, ids, act=ACTIVATIONS["bf16" if dt == torch.bfloat16 else "f16"])
        ours = ascent_logits(folder, ids, os.path.join(root, f"llama-{dt}.npy"))
        diff = rel_rms(ours, ref_dt) if ours is not None else float("inf")
        check(diff < 1e-4, f"llama: {dt} safetensors used in place match PyTorch (relative RMS {diff:.1e} < 1e-4)")
    finish()


if __name__ == "__main__":
    main()
