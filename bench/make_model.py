#!/usr/bin/env python3
"""Writes a random-weight Llama-architecture model of a real model's shape, for load and speed benchmarks: a GGUF
file (f32, f16, q8_0, q4_0) or, with --hf, a Hugging Face folder (config.json + model.safetensors in f32, f16 or
bf16). The writers here are NumPy code written from the GGUF and safetensors descriptions, independent of Ascent's
own, so loading their output also cross-checks our readers.

  bench/make_model.py -o bench/models/tinyllama-f16.gguf                   # TinyLlama 1.1B shape, 22 layers
  bench/make_model.py -o /tmp/small.gguf --layers 2 --type q8_0
  bench/make_model.py -o bench/models/qwen2.5-0.5b-q8_0.gguf --shape qwen2.5-0.5b --type q8_0
  bench/make_model.py -o bench/models/llama3-8b-q4_0.gguf --shape llama3-8b --type q4_0      # 4.6 GB
  bench/make_model.py -o bench/models/tl16-hf --hf --layers 16 --type f16                   # HF folder
  bench/make_model.py -o bench/models/tl16-q4_k.gguf --layers 16 --type q4_k   # random K-quant blocks
  bench/make_model.py -o bench/models/tl16-f16.gguf --layers 16 --vocab ../shared/vocab/ggml-vocab-llama-spm.gguf

--vocab copies a GGUF vocabulary's tokenizer.* metadata into the file (its token count must be the shape's
vocabulary): llama.cpp refuses a model without one, and text prompts need one. TinyLlama's is Llama-2's
(ggml-vocab-llama-spm.gguf); the "k256" shape is the smallest whose every matrix row is whole 256-value K-quant
super-blocks (for llama-quantize's Q4_K_M in bench/interop.py).
"""
import argparse
import struct
import sys

import numpy as np

SHAPES = {
    # name: hidden, heads, kv heads, ffn, vocab, layers, context, architecture, rope theta
    "tinyllama": (2048, 32, 8, 5632, 32000, 22, 2048, "llama", 10000.0),
    "qwen2.5-0.5b": (896, 14, 2, 4864, 151936, 24, 32768, "qwen2", 1000000.0),  # QKV bias, tied embeddings
    "llama3-8b": (4096, 32, 8, 14336, 128256, 32, 8192, "llama", 500000.0),
    "k256": (256, 4, 2, 768, 32000, 2, 2048, "llama", 10000.0),
}
GGML = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "q4_k": 12, "q6_k": 14}


def kv_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def read_vocab(path, vocab_size):
    """The tokenizer.* key/value pairs of a GGUF file, as (key, type, encoded value) ready to write again."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # fixed-size value types
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"GGUF" or struct.unpack_from("<I", data, 4)[0] not in (2, 3):
        sys.exit(f"{path}: not a GGUF v2/v3 file")
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    pos = 24

    def string_end(p):
        return p + 8 + struct.unpack_from("<Q", data, p)[0]

    def value_end(t, p):
        if t in sizes:
            return p + sizes[t]
        if t == 8:
            return string_end(p)
        if t != 9:
            sys.exit(f"{path}: metadata value type {t} at byte {p} is not a GGUF type")
        et, n = struct.unpack_from("<IQ", data, p)
        p += 12
        if et in sizes:
            return p + n * sizes[et]
        for _ in range(n):
            p = value_end(et, p)
        return p

    out, tokens = [], None
    for _ in range(n_kv):
        key_end = string_end(pos)
        key = data[pos + 8:key_end].decode()
        t = struct.unpack_from("<I", data, key_end)[0]
        end = value_end(t, key_end + 4)
        if key.startswith("tokenizer."):
            out.append((key, t, data[key_end + 4:end]))
        if key == "tokenizer.ggml.tokens":
            tokens = struct.unpack_from("<Q", data, key_end + 8)[0]
        pos = end
    if tokens != vocab_size:
        sys.exit(f"{path}: tokenizer.ggml.tokens has {tokens} tokens, the shape's vocabulary {vocab_size}")
    return out


def random_kquant(t, kind, rng):
    """K-quant super-blocks with random codes, scaled so values have about the weights' spread (there is no
    K-quant quantizer here: these files are for speed, and tests/e2e/test_kquants.py checks the arithmetic)."""
    n = t.size // 256
    size = 144 if kind == "q4_k" else 210
    b = rng.integers(0, 256, (n, size), dtype=np.uint8)
    spread = float(np.std(t)) or 1.0
    if kind == "q4_k":  # d * scale(0..63) * q(0..15) - dmin * min(0..63)
        b[:, 0:2] = np.full(n, spread / 150, "<f2").view(np.uint8).reshape(n, 2)
        b[:, 2:4] = np.full(n, spread / 40, "<f2").view(np.uint8).reshape(n, 2)
    else:  # d * scale(int8) * (q - 32)
        b[:, 192:208] = rng.integers(-16, 17, (n, 16)).astype(np.int8).view(np.uint8)
        b[:, 208:210] = np.full(n, spread / 150, "<f2").view(np.uint8).reshape(n, 2)
    return b.tobytes()


def encode(t, kind, rng=None):
    if kind in ("q4_k", "q6_k"):
        return random_kquant(t, kind, rng)
    if kind == "f32":
        return t.astype("<f4").tobytes()
    if kind == "f16":
        return t.astype("<f2").tobytes()
    blocks = t.astype(np.float32).reshape(-1, 32)
    if kind == "q8_0":
        d = np.abs(blocks).max(axis=1) / 127.0
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
        q = np.round(blocks * inv[:, None]).astype(np.int8)
        out = np.empty((len(blocks), 34), dtype=np.uint8)
        out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
        out[:, 2:] = q.view(np.uint8)
        return out.tobytes()
    idx = np.abs(blocks).argmax(axis=1)  # q4_0
    d = blocks[np.arange(len(blocks)), idx] / -8.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.minimum(15, np.floor(blocks * inv[:, None] + 8.5)).astype(np.uint8)
    out = np.empty((len(blocks), 18), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def nbytes(shape, kind):
    n = int(np.prod(shape))
    return {"f32": 4 * n, "f16": 2 * n, "q8_0": n // 32 * 34, "q4_0": n // 32 * 18, "q4_k": n // 256 * 144,
            "q6_k": n // 256 * 210}[kind]


HF_PARTS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def hf_name(n):
    if n == "token_embd.weight":
        return "model.embed_tokens.weight"
    if n == "output.weight":
        return "lm_head.weight"
    if n == "output_norm.weight":
        return "model.norm.weight"
    _, l, part, leaf = n.split(".")
    return f"model.layers.{l}.{HF_PARTS[part]}.{leaf}"


def write_hf(a, tensors, values, shape):
    """config.json + model.safetensors (an 8-byte header length, a JSON header, then the raw tensors)."""
    import json
    import os
    C, H, Hkv, F, V, L, ctx, arch, theta = shape
    if a.type not in ("f32", "f16", "bf16"):
        sys.exit(f"--hf: --type {a.type} is not a Hugging Face storage type (f32, f16, bf16)")
    os.makedirs(a.output, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen2ForCausalLM"], "model_type": arch,
           "hidden_size": C, "intermediate_size": F, "num_attention_heads": H, "num_key_value_heads": Hkv,
           "num_hidden_layers": L, "vocab_size": V, "max_position_embeddings": ctx, "rope_theta": theta,
           "rms_norm_eps": 1e-6 if arch == "qwen2" else 1e-5, "tie_word_embeddings": arch == "qwen2",
           "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": {"f32": "float32", "f16": "float16",
                                                                  "bf16": "bfloat16"}[a.type]}
    with open(os.path.join(a.output, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    st = {"f32": ("F32", 4), "f16": ("F16", 2), "bf16": ("BF16", 2)}
    header, offset = {}, 0
    for name, shp in tensors:
        dt, size = st["f32" if len(shp) == 1 else a.type]
        n = int(np.prod(shp)) * size
        header[hf_name(name)] = {"dtype": dt, "shape": list(shp), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    path = os.path.join(a.output, "model.safetensors")
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for i, (name, shp) in enumerate(tensors):
            t = values(name, shp)
            kind = "f32" if len(shp) == 1 else a.type
            if kind == "f32":
                f.write(t.astype("<f4").tobytes())
            elif kind == "f16":
                f.write(t.astype("<f2").tobytes())
            else:  # bf16: round to nearest even on the f32 bit pattern
                u = t.astype("<f4").view(np.uint32).astype(np.uint64)
                f.write(((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes())
            print(f"\r{i + 1}/{len(tensors)} tensors", end="", file=sys.stderr)
    os.replace(path + ".tmp", path)
    print(f"\nwrote {a.output}/: config.json + model.safetensors, {L} layers, {a.type}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--shape", default="tinyllama", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="override the layer count")
    ap.add_argument("--type", default="f16", choices=sorted(GGML) + ["bf16"])
    ap.add_argument("--hf", action="store_true", help="write a Hugging Face folder (f32, f16 or bf16) instead of GGUF")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", help="a GGUF file whose tokenizer.* metadata to copy (GGUF output only)")
    a = ap.parse_args()
    C, H, Hkv, F, V, L, ctx, arch, theta = SHAPES[a.shape]
    L = a.layers or L
    D = C // H
    tensors = [("token_embd.weight", (V, C)), ("output_norm.weight", (C,))]
    if arch == "llama":
        tensors.append(("output.weight", (V, C)))  # Qwen2.5-0.5B ties its output to the embedding
    for l in range(L):
        b = f"blk.{l}."
        if arch == "qwen2":
            tensors += [(b + "attn_q.bias", (C,)), (b + "attn_k.bias", (Hkv * D,)), (b + "attn_v.bias", (Hkv * D,))]
        tensors += [(b + "attn_norm.weight", (C,)), (b + "attn_q.weight", (C, C)), (b + "attn_k.weight", (Hkv * D, C)),
                    (b + "attn_v.weight", (Hkv * D, C)), (b + "attn_output.weight", (C, C)),
                    (b + "ffn_norm.weight", (C,)), (b + "ffn_gate.weight", (F, C)), (b + "ffn_up.weight", (F, C)),
                    (b + "ffn_down.weight", (C, F))]
    rng = np.random.default_rng(a.seed)

    def values(name, shape):
        if name.endswith(".bias"):
            return 0.02 * rng.standard_normal(shape, dtype=np.float32)
        if len(shape) == 1:
            return 1.0 + 0.05 * rng.standard_normal(shape, dtype=np.float32)
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / np.sqrt(shape[1]))

    if a.hf and a.vocab:
        sys.exit("--vocab is for GGUF output (a --hf folder takes no tokenizer from here)")
    if a.hf:
        return write_hf(a, tensors, values, (C, H, Hkv, F, V, L, ctx, arch, theta))
    if a.type == "bf16":
        sys.exit("--type bf16 is for --hf folders (this GGUF writer has f32, f16, q8_0, q4_0)")
    p = arch + "."
    meta = [("general.architecture", 8, kv_str(arch)), ("general.name", 8, kv_str(f"random-{a.shape}")),
            ("general.alignment", 4, struct.pack("<I", 32)),
            (p + "context_length", 4, struct.pack("<I", ctx)), (p + "embedding_length", 4, struct.pack("<I", C)),
            (p + "block_count", 4, struct.pack("<I", L)), (p + "feed_forward_length", 4, struct.pack("<I", F)),
            (p + "attention.head_count", 4, struct.pack("<I", H)),
            (p + "attention.head_count_kv", 4, struct.pack("<I", Hkv)),
            (p + "attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-6 if arch == "qwen2" else 1e-5)),
            (p + "rope.freq_base", 6, struct.pack("<f", theta)),
            (p + "rope.dimension_count", 4, struct.pack("<I", D))]
    if a.vocab:
        meta += read_vocab(a.vocab, V)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for k, t, v in meta:
        head += kv_str(k) + struct.pack("<I", t) + v
    offset = 0
    kinds = {}
    for name, shape in tensors:
        kind = "f32" if len(shape) == 1 else a.type
        if kind in ("q4_k", "q6_k") and shape[-1] % 256:
            sys.exit(f"{name}: rows of {shape[-1]} are not whole 256-element {kind} super-blocks")
        kinds[name] = kind
        head += kv_str(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape[::-1])
        head += struct.pack("<IQ", GGML[kind], offset)
        offset += (nbytes(shape, kind) + 31) // 32 * 32
    head += b"\0" * ((32 - len(head) % 32) % 32)
    with open(a.output + ".tmp", "wb") as f:
        f.write(head)
        for i, (name, shape) in enumerate(tensors):
            blob = encode(values(name, shape), kinds[name], rng)
            f.write(blob + b"\0" * ((32 - len(blob) % 32) % 32))
            print(f"\r{i + 1}/{len(tensors)} tensors", end="", file=sys.stderr)
    import os
    os.replace(a.output + ".tmp", a.output)
    print(f"\nwrote {a.output}: {L} layers, {a.type}", file=sys.stderr)


if __name__ == "__main__":
    main()
