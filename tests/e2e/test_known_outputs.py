"""The real models in ../shared: stories260K (llama2.c) and story-656K (Hugging Face Llama) reproduce their known
greedy outputs, their logits match the PyTorch reference, and perplexity agrees with PyTorch on the same windows."""
import json
import math
import os
import struct

import torch

from common import SHARED, check, finish, load_npy, read_safetensors, reference_logits, run, tmpdir

S260 = os.path.join(SHARED, "models", "stories260K")
S656 = os.path.join(SHARED, "models", "story-656K")
KNOWN_260 = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
             "she saw a big, red ball. She wanted to play with it, but it was too high.")
KNOWN_656 = [1, 147, 201, 282, 215, 286, 598, 1662, 356, 499, 826, 1363]


def llama2c_as_hf(path):
    """Reads a llama2.c checkpoint (header + stacked f32 arrays) into a config.json-style dict and HF-named weights."""
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, L, H, Hkv, vocab, seq = struct.unpack("<7i", data[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    D = dim // H
    flat = torch.frombuffer(bytearray(data[28:]), dtype=torch.float32)
    off = 0

    def take(*shape):
        nonlocal off
        n = math.prod(shape)
        t = flat[off:off + n].reshape(shape)
        off += n
        return t

    def to_rotate_half(w, heads):  # llama2.c rotates pairs (2i, 2i+1); HF rotates (i, i + D/2)
        return w.reshape(heads, D // 2, 2, -1).transpose(1, 2).reshape(w.shape)

    w = {"model.embed_tokens.weight": take(vocab, dim)}
    att = take(L, dim)
    wq, wk, wv, wo = take(L, H * D, dim), take(L, Hkv * D, dim), take(L, Hkv * D, dim), take(L, dim, H * D)
    ffn = take(L, dim)
    w1, w2, w3 = take(L, hidden, dim), take(L, dim, hidden), take(L, hidden, dim)
    w["model.norm.weight"] = take(dim)
    take(seq, D // 2)
    take(seq, D // 2)
    w["lm_head.weight"] = w["model.embed_tokens.weight"] if shared else take(vocab, dim)
    for l in range(L):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"], w[p + "post_attention_layernorm.weight"] = att[l], ffn[l]
        w[p + "self_attn.q_proj.weight"] = to_rotate_half(wq[l], H)
        w[p + "self_attn.k_proj.weight"] = to_rotate_half(wk[l], Hkv)
        w[p + "self_attn.v_proj.weight"], w[p + "self_attn.o_proj.weight"] = wv[l], wo[l]
        w[p + "mlp.gate_proj.weight"], w[p + "mlp.down_proj.weight"], w[p + "mlp.up_proj.weight"] = w1[l], w2[l], w3[l]
    cfg = {"model_type": "llama", "hidden_size": dim, "num_attention_heads": H, "num_key_value_heads": Hkv,
           "num_hidden_layers": L, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
    return cfg, w


def greedy(cfg, w, ids, n):
    ids = list(ids)
    for _ in range(n):
        ids.append(int(reference_logits(cfg, w, ids)[-1].argmax()))
    return ids


def main():
    d = tmpdir()
    # stories260K: known text, and greedy ids equal to PyTorch's greedy ids.
    bin_path, tok = os.path.join(S260, "stories260K.bin"), os.path.join(S260, "tok512.bin")
    r61 = run(["generate", "-m", bin_path, "--tokenizer", tok, "--temp", 0, "-n", 61])
    check(r61.returncode == 0 and r61.stdout.rstrip("\n") == KNOWN_260,
          f"stories260K -n 61 prints the known greedy text exactly: {r61.stdout.strip()!r}")
    r = run(["generate", "-m", bin_path, "--tokenizer", tok, "--temp", 0, "-n", 61, "--no-mmap"])
    check(r.returncode == 0 and r.stdout.rstrip("\n") == KNOWN_260, "--no-mmap (model read into memory): same text")
    r60 = run(["generate", "-m", bin_path, "--tokenizer", tok, "--temp", 0, "-n", 60])
    check(r60.returncode == 0 and r60.stdout.rstrip("\n") == KNOWN_260[:-1],
          "stories260K -n 60 prints the known text up to its 61st token (the final '.')")
    ids = run(["generate", "-m", bin_path, "--tokenizer", tok, "--temp", 0, "-n", 61, "--print-ids"])
    cfg, w = llama2c_as_hf(bin_path)
    ours = [int(x) for x in ids.stdout.split()]
    check(ids.returncode == 0 and ours == greedy(cfg, w, [1], 61), "stories260K greedy ids equal PyTorch's greedy ids")
    probe = torch.randint(3, 512, (48,), generator=torch.Generator().manual_seed(3)).tolist()
    out = os.path.join(d, "260.npy")
    r = run(["logits", "-m", bin_path, "--prompt-ids", " ".join(map(str, [1] + probe)), "-o", out])
    diff = (load_npy(out) - reference_logits(cfg, w, [1] + probe)).abs().max().item() if r.returncode == 0 else 1.0
    check(diff < 1e-4, f"stories260K logits match PyTorch on 49 tokens ({diff:.2e} < 1e-4)")

    # story-656K: known ids, and full-vocabulary logits at every position of a 64-token input.
    r = run(["generate", "-m", S656, "--temp", 0, "-n", 12, "--prompt-ids", 1, "--print-ids"])
    got = [int(x) for x in r.stdout.split()]
    check(r.returncode == 0 and got[:12] == KNOWN_656, f"story-656K -n 12 --print-ids starts with the known ids {got}")
    r = run(["generate", "-m", S656, "--temp", 0, "-n", 12, "--prompt-ids", 1, "--print-ids", "--no-mmap"])
    check(r.returncode == 0 and [int(x) for x in r.stdout.split()] == got, "story-656K --no-mmap: the same ids")
    r = run(["generate", "-m", S656, "--temp", 0, "-n", 11, "--prompt-ids", 1, "--print-ids"])
    check(r.returncode == 0 and r.stdout.split() == [str(x) for x in KNOWN_656],
          "story-656K -n 11 prints exactly the 12 known ids")
    cfg = json.load(open(os.path.join(S656, "config.json")))
    w = read_safetensors(os.path.join(S656, "model.safetensors"))
    probe = [1] + torch.randint(3, 2048, (63,), generator=torch.Generator().manual_seed(5)).tolist()
    out = os.path.join(d, "656.npy")
    r = run(["logits", "-m", S656, "--prompt-ids", " ".join(map(str, probe)), "-o", out])
    ours = load_npy(out) if r.returncode == 0 else None
    ref = reference_logits(cfg, w, probe)
    diff = (ours - ref).abs().max().item() if ours is not None else 1.0
    check(ours is not None and ours.shape == (64, 2048) and diff < 1e-4,
          f"story-656K logits (64 x 2048) match PyTorch ({diff:.2e} < 1e-4)")

    # Perplexity over non-overlapping windows agrees with PyTorch on the same token ids.
    text = os.path.join(d, "text.txt")
    with open(os.path.join(SHARED, "corpora", "tinyshakespeare.txt")) as f:
        open(text, "w").write(f.read(3000))
    r = run(["perplexity", "-m", S656, "-f", text, "-c", 64, "--chunks", 3])
    lines = r.stdout.strip().splitlines()
    check(r.returncode == 0 and lines[-1].startswith("ppl = "), f"perplexity ends with 'ppl = X': {lines[-1:]}")
    ppl = float(lines[-1].split("=")[1])
    toks = [int(x) for x in run(["tokenize", "-m", S656, "--text-file", text]).stdout.split()]
    nll, n = 0.0, 0
    for c in range(3):
        win = toks[c * 64:(c + 1) * 64]
        lp = torch.log_softmax(reference_logits(cfg, w, win).double(), -1)
        nll -= sum(lp[t, win[t + 1]].item() for t in range(len(win) - 1))
        n += len(win) - 1
    ref_ppl = math.exp(nll / n)
    check(abs(ppl - ref_ppl) / ref_ppl < 1e-4, f"perplexity {ppl} equals PyTorch's {ref_ppl:.4f}")
    finish()


if __name__ == "__main__":
    main()
