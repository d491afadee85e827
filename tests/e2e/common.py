"""Shared helpers for the end-to-end tests. They locate the binaries and ../shared, run ascent, and read and write
safetensors and GGUF files independently of Ascent's own code. They also hold a PyTorch reference of each supported
architecture, written from the Hugging Face model definitions (modeling_llama, modeling_mistral, modeling_qwen2,
modeling_qwen3, modeling_gpt2)."""
import atexit
import json
import math
import os
import re
import struct
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASCENT = os.environ.get("ASCENT_BIN", os.path.join(ROOT, "build", "release", "ascent"))
OP_RUNNER = os.environ.get("OP_RUNNER", os.path.join(ROOT, "build", "release", "tests", "op_runner"))
SHARED = os.environ.get("ASCENT_SHARED", os.path.join(ROOT, "..", "shared"))

_failures = []
_passes = 0


def check(cond, what):
    """Records one check; the script's exit status reflects all of them."""
    global _passes
    if cond:
        _passes += 1
        print(f"ok   {what}")
    else:
        _failures.append(what)
        print(f"FAIL {what}")
    sys.stdout.flush()


def finish():
    print(f"{_passes} passed, {len(_failures)} failed")
    sys.exit(1 if _failures else 0)


# A sanitizer's report (the asan preset) fails the test whatever the command's exit status and output: a test that
# expects an error exit, or reads only part of the output, would otherwise pass over it.
_SANITIZER = re.compile(r"ERROR: \w*Sanitizer|: runtime error: |SUMMARY: \w*Sanitizer")


def no_sanitizer_report(r, what):
    """Fails a check when r (a CompletedProcess, text or bytes) printed a sanitizer report; returns r."""
    err = r.stderr.decode("utf-8", "replace") if isinstance(r.stderr, bytes) else (r.stderr or "")
    m = _SANITIZER.search(err)
    if m:
        line = err[err.rfind("\n", 0, m.start()) + 1:].split("\n", 1)[0]
        check(False, f"{what}: sanitizer report: {line.strip()[:200]}")
    return r


def run(args, timeout=600, env=None):
    full_env = dict(os.environ, **env) if env else None
    args = [str(a) for a in args]
    r = subprocess.run([ASCENT] + args, capture_output=True, text=True, timeout=timeout, env=full_env)
    return no_sanitizer_report(r, "ascent " + " ".join(args)[:120])


# --- kernel variants: which ran, which were skipped and why -------------------------------------------------------
# Tests that loop over ASCENT_ISA=ref|avx2|avx512 run the variants this CPU has and print the others as skipped,
# with the reason. ASCENT_REQUIRE_ISA (a comma list; `make test` sets it from /proc/cpuinfo) names variants that
# must run: one skipped is a failed check, so a CPU-detection slip cannot quietly test less. Under AVX-512 a weight
# format whose kernel needs VNNI or BF16 the CPU lacks runs the AVX2 kernel (kernels/cpu/isa.h); op_runner says
# which kernel ran, and that counts as the avx512 variant skipped for that format.

ISAS = ("ref", "avx2", "avx512")


def _required_isas():
    value = os.environ.get("ASCENT_REQUIRE_ISA", "")
    names = {n.strip() for n in value.split(",") if n.strip()}
    if names - set(ISAS):
        sys.exit(f"ASCENT_REQUIRE_ISA={value}: expected a comma list of {', '.join(ISAS)}")
    return names


REQUIRED_ISAS = _required_isas()
_skipped = set()


def skipped(isa, what, why):
    """Says once per (isa, what) that `what` did not run the isa variant, and why: a failed check where
    ASCENT_REQUIRE_ISA names isa, a printed line otherwise."""
    if (isa, what) in _skipped:
        return
    _skipped.add((isa, what))
    if isa in REQUIRED_ISAS:
        check(False, f"{what}: the {isa} variant is required (ASCENT_REQUIRE_ISA) but did not run: {why}")
    else:
        print(f"skip {what}: the {isa} variant did not run: {why}")
        sys.stdout.flush()


def isa_variants(probe, wanted=ISAS):
    """The variants in `wanted` this CPU runs. probe(isa) runs one small command under ASCENT_ISA=isa and returns
    its CompletedProcess; one that fails is skipped, its last error line the reason."""
    ran = []
    for isa in wanted:
        r = probe(isa)
        if r.returncode == 0:
            ran.append(isa)
        else:
            lines = (r.stderr or "").strip().splitlines()
            skipped(isa, "every check", lines[-1] if lines else f"exit {r.returncode}")
    print(f"ISA variants run: {', '.join(ran) or 'none'} (of {', '.join(wanted)}; required: "
          f"{', '.join(sorted(REQUIRED_ISAS)) or 'none'})")
    sys.stdout.flush()
    return ran


def op_runner(args, isa=None, what=None):
    """Runs tests/tools/op_runner with args (under ASCENT_ISA=isa when given) and returns its CompletedProcess;
    prints the error of a failed run. With what and isa: a kernel variant other than isa (op_runner's "variant"
    line) is that variant skipped for `what`."""
    args = [str(a) for a in args]
    env = dict(os.environ, ASCENT_ISA=isa) if isa else None
    r = no_sanitizer_report(subprocess.run([OP_RUNNER] + args, capture_output=True, text=True, env=env),
                            "op_runner " + " ".join(os.path.basename(a) for a in args)[:120])
    if r.returncode != 0:
        print(r.stderr.strip())
    elif what and isa:
        ran = re.search(r"^variant (\w+)(.*)$", r.stdout, re.M)
        if ran is None:
            check(False, f"{what}: op_runner names no kernel variant ({r.stdout.strip()[-100:]!r})")
        elif ran.group(1) != isa:
            skipped(isa, what, f"op_runner ran the {ran.group(1)} kernel{ran.group(2)}")
    return r


def tmpdir():
    """A fresh directory for one test's files, removed when the test's process exits."""
    path = tempfile.mkdtemp(prefix="ascent-test-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


# --- rounding error bounds (tests/e2e/test_kernels.py says how each weight format's follows from its arithmetic) -----

U = 2.0 ** -24  # f32's unit roundoff


def gamma(n):
    """(1 + u)^n - 1 <= n u / (1 - n u): the relative error of n roundings. A sum of products each of which passes
    through at most n roundings is within gamma(n) times the sum of the products' magnitudes, in any order."""
    return n * U / (1 - n * U)


def float_rounds(K):
    """The roundings one product of an f32/f16/bf16 matmul passes through in any of the CPU variants: its own (none
    under FMA), at most ceil(K / 8) additions in one of 8 or more partial sums, at most 4 joining them."""
    return -(-K // 8) + 5


# --- safetensors (written from the format description: u64 header length, JSON header, raw data) ---------------

_ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + e])
        dt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[info["dtype"]]
        out[name] = torch.frombuffer(raw, dtype=dt).reshape(info["shape"]).clone() if raw else torch.zeros(info["shape"], dtype=dt)
    return out


# --- GGUF reader (written from the GGUF specification), dequantizing every tensor to float32 -------------------

def _f16(b):
    return np.frombuffer(b, dtype="<f2").astype(np.float32)


def dequant_q4_k(b, dtype=np.float32):
    """GGUF Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) pairs for 8 sub-blocks of 32, 128 bytes of
    nibbles (per 64 elements: 32 bytes, low nibbles first). Element = d * scale * q - dmin * min."""
    d, dmin = _f16(b[:, 0:2].tobytes()), _f16(b[:, 2:4].tobytes())
    s = b[:, 4:16].astype(np.int64)
    sc = np.zeros((len(b), 8)); mn = np.zeros((len(b), 8))
    for j in range(8):
        if j < 4:
            sc[:, j], mn[:, j] = s[:, j] & 63, s[:, j + 4] & 63
        else:
            sc[:, j] = (s[:, j + 4] & 0x0F) | ((s[:, j - 4] >> 6) << 4)
            mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    qs = b[:, 16:].reshape(len(b), 4, 32)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=2).reshape(len(b), 8, 32).astype(np.float64)
    y = d[:, None, None] * sc[:, :, None] * q - dmin[:, None, None] * mn[:, :, None]
    return y.reshape(-1).astype(dtype)


def dequant_q6_k(b, dtype=np.float32):
    """GGUF Q6_K: 128 bytes low nibbles, 64 bytes of high 2-bit pairs, 16 int8 scales (one per 16), f16 d.
    Per 128 elements (half h): from ql[64h..], qh[32h..], four runs of 32 take (low/high nibble of ql[l] or
    ql[l+32]) | (2 bits of qh[l] << 4), minus 32."""
    ql, qh = b[:, :128].astype(np.int64), b[:, 128:192].astype(np.int64)
    sc = b[:, 192:208].view(np.int8).astype(np.float64)
    d = _f16(b[:, 208:210].tobytes())
    y = np.zeros((len(b), 256))
    for h in range(2):
        L, H = ql[:, 64 * h:64 * h + 64], qh[:, 32 * h:32 * h + 32]
        q = [(L[:, :32] & 15) | ((H & 3) << 4), (L[:, 32:] & 15) | (((H >> 2) & 3) << 4),
             (L[:, :32] >> 4) | (((H >> 4) & 3) << 4), (L[:, 32:] >> 4) | (((H >> 6) & 3) << 4)]
        for r in range(4):
            for l in range(32):
                y[:, 128 * h + 32 * r + l] = d * sc[:, 8 * h + l // 16 + 2 * r] * (q[r][:, l] - 32)
    return y.reshape(-1).astype(dtype)


def gguf_layout(data):
    """A GGUF file's metadata, its tensors as (name, shape outermost-first, ggml type, offset) and where their data
    section starts."""
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8", errors="surrogateescape")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t in scalar:
            return take(scalar[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        raise ValueError(f"bad type {t}")

    assert data[:4] == b"GGUF"
    pos = 4
    version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("I")
        dims = [take("Q") for _ in range(nd)]
        infos.append((name, dims[::-1], take("I"), take("Q")))
    align = meta.get("general.alignment", 32)
    return meta, infos, (pos + align - 1) // align * align


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    meta, infos, start = gguf_layout(data)
    tensors = {}
    for name, shape, t, off in infos:
        n = int(np.prod(shape))
        p = start + off
        if t == 0:
            a = np.frombuffer(data, dtype="<f4", count=n, offset=p).copy()
        elif t == 1:
            a = np.frombuffer(data, dtype="<f2", count=n, offset=p).astype(np.float32)
        elif t == 30:
            a = (np.frombuffer(data, dtype="<u2", count=n, offset=p).astype(np.uint32) << 16).view(np.float32)
        elif t == 8:  # Q8_0: f16 scale + 32 int8
            blocks = np.frombuffer(data, dtype=np.uint8, count=n // 32 * 34, offset=p).reshape(-1, 34)
            d = _f16(blocks[:, :2].tobytes())
            q = blocks[:, 2:].view(np.int8).astype(np.float32)
            a = (d[:, None] * q).reshape(-1)
        elif t == 2:  # Q4_0: f16 scale + 16 bytes; low nibbles are elements 0..15, high nibbles 16..31
            blocks = np.frombuffer(data, dtype=np.uint8, count=n // 32 * 18, offset=p).reshape(-1, 18)
            d = _f16(blocks[:, :2].tobytes())
            qs = blocks[:, 2:]
            q = np.concatenate([(qs & 0x0F), (qs >> 4)], axis=1).astype(np.float32) - 8.0
            a = (d[:, None] * q).reshape(-1)
        elif t == 12:  # Q4_K: 144-byte super-blocks of 256
            a = dequant_q4_k(np.frombuffer(data, dtype=np.uint8, count=n // 256 * 144, offset=p).reshape(-1, 144))
        elif t == 14:  # Q6_K: 210-byte super-blocks of 256
            a = dequant_q6_k(np.frombuffer(data, dtype=np.uint8, count=n // 256 * 210, offset=p).reshape(-1, 210))
        else:
            raise ValueError(f"{name}: ggml type {t}")
        tensors[name] = a.reshape(shape)
    return meta, tensors


def hf_from_gguf(cfg, tensors):
    """Maps tensors read back from GGUF to HF names (undoing llama.cpp's Q/K row permutation)."""
    t = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
    out = {}
    if cfg["model_type"] == "gpt2":
        out["wte.weight"], out["wpe.weight"] = t["token_embd.weight"], t["position_embd.weight"]
        out["ln_f.weight"], out["ln_f.bias"] = t["output_norm.weight"], t["output_norm.bias"]
        names = {"attn_norm": "ln_1", "ffn_norm": "ln_2", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj",
                 "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}
        for l in range(cfg["n_layer"]):
            for g, h in names.items():
                wt = t[f"blk.{l}.{g}.weight"]
                out[f"h.{l}.{h}.weight"] = wt if wt.dim() == 1 else wt.T
                out[f"h.{l}.{h}.bias"] = t[f"blk.{l}.{g}.bias"]
        return out
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg["head_dim"]
    unpermute = cfg["model_type"] in ("llama", "mistral")

    def unperm(x, heads):
        if not unpermute:
            return x
        shape = x.shape
        return x.reshape(heads, D // 2, 2, *shape[1:]).transpose(1, 2).reshape(shape)

    out["model.embed_tokens.weight"] = t["token_embd.weight"]
    out["model.norm.weight"] = t["output_norm.weight"]
    out["lm_head.weight"] = t.get("output.weight", t["token_embd.weight"])
    for l in range(cfg["num_hidden_layers"]):
        b, p = f"blk.{l}.", f"model.layers.{l}."
        out[p + "input_layernorm.weight"] = t[b + "attn_norm.weight"]
        out[p + "post_attention_layernorm.weight"] = t[b + "ffn_norm.weight"]
        out[p + "self_attn.q_proj.weight"] = unperm(t[b + "attn_q.weight"], H)
        out[p + "self_attn.k_proj.weight"] = unperm(t[b + "attn_k.weight"], Hkv)
        out[p + "self_attn.v_proj.weight"] = t[b + "attn_v.weight"]
        out[p + "self_attn.o_proj.weight"] = t[b + "attn_output.weight"]
        for n in ("q", "k", "v"):
            if b + f"attn_{n}.bias" in t:
                bias = t[b + f"attn_{n}.bias"]
                out[p + f"self_attn.{n}_proj.bias"] = unperm(bias, H if n == "q" else Hkv) if n != "v" else bias
        if b + "attn_q_norm.weight" in t:
            out[p + "self_attn.q_norm.weight"] = t[b + "attn_q_norm.weight"]
            out[p + "self_attn.k_norm.weight"] = t[b + "attn_k_norm.weight"]
        out[p + "mlp.gate_proj.weight"] = t[b + "ffn_gate.weight"]
        out[p + "mlp.up_proj.weight"] = t[b + "ffn_up.weight"]
        out[p + "mlp.down_proj.weight"] = t[b + "ffn_down.weight"]
    return out


# --- PyTorch reference, following the Hugging Face implementations ----------------------------------------------

def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama3_inv_freq(inv_freq, s):
    low_wavelen = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wavelen = s["original_max_position_embeddings"] / s["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq
    out = torch.where(wavelen > low_wavelen, inv_freq / s["factor"], inv_freq)
    smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
        s["high_freq_factor"] - s["low_freq_factor"])
    smoothed = (1 - smooth) * out / s["factor"] + smooth * out
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, out)


def fake_quant(x, width):
    """x rounded through symmetric int8 per span of `width` columns as the kernels quantize activations: in f32,
    d = amax / 127, q = round-half-even(x * (1 / d)); returned as q * d."""
    shape = x.shape
    xs = x.float().reshape(-1, shape[-1] // width, width)
    d = xs.abs().amax(dim=-1, keepdim=True) / 127.0
    inv = torch.where(d != 0, 1.0 / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(d))
    q = torch.round(xs * inv).clamp(-127, 127)
    return (q.double() * d.double()).reshape(shape).to(x.dtype)


# What each weight type does to a matmul's activations first (src/ascent/kernels/cpu/gemm.h).
ACTIVATIONS = {
    "f32": None, "f16": None,
    "bf16": lambda x: x.to(torch.bfloat16).to(x.dtype),
    "q8_0": lambda x: fake_quant(x, 32), "q4_0": lambda x: fake_quant(x, 32),
    "q4_k": lambda x: fake_quant(x, 32), "q6_k": lambda x: fake_quant(x, 32),
    "int8": lambda x: fake_quant(x, x.shape[-1]), "int4": lambda x: fake_quant(x, x.shape[-1]),
}


def reference_logits(cfg, w, ids, dtype=torch.float64, act=None, kv=None):
    """Logits (T, vocab) of a causal LM given its config.json dict and HF-named weights. act, when given, is applied
    to every matmul's input (the activation rounding of a quantized weight format, ACTIVATIONS); kv to every layer's
    keys (after RoPE) and values before attention reads them (a KV cache's rounding: f16 for --kv-type f16)."""
    kv = kv or (lambda x: x)
    w = {k: v.to(dtype) for k, v in w.items()}
    mm = (lambda x, m: act(x) @ m) if act else (lambda x, m: x @ m)
    ids = torch.tensor(ids, dtype=torch.long)
    T = len(ids)
    pos = torch.arange(T)
    if cfg["model_type"] == "gpt2":
        return _gpt2(cfg, w, ids, pos, mm, kv)
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim") or C // H
    eps = cfg["rms_norm_eps"]
    emb = w.get("model.embed_tokens.weight", w.get("lm_head.weight"))
    head = w.get("lm_head.weight", emb)
    inv_freq = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    if cfg.get("rope_scaling"):
        inv_freq = llama3_inv_freq(inv_freq, cfg["rope_scaling"])
    freqs = pos[:, None].float() * inv_freq[None, :]
    e = torch.cat((freqs, freqs), dim=-1)
    cos, sin = e.cos().to(dtype), e.sin().to(dtype)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    window = cfg.get("sliding_window") if cfg["model_type"] == "mistral" or cfg.get("use_sliding_window") else None
    # Qwen2/Qwen3 (transformers' layer_types): layers from max_window_layers (default 28) on slide, the rest do not.
    first = cfg.get("max_window_layers", 28) if cfg["model_type"] in ("qwen2", "qwen3") else 0
    h = emb[ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        mask = causal & ((pos[:, None] - pos[None, :]) < window) if window and l >= first else causal
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)

        def proj(n):
            y = mm(x, w[p + f"self_attn.{n}_proj.weight"].T)
            b = w.get(p + f"self_attn.{n}_proj.bias")
            return y + b if b is not None else y

        q = proj("q").view(T, H, D)
        k = proj("k").view(T, Hkv, D)
        v = proj("v").view(T, Hkv, D)
        if cfg["model_type"] == "qwen3":
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = kv(k * cos + rotate_half(k) * sin)
        k = k.repeat_interleave(H // Hkv, dim=0)
        v = kv(v).repeat_interleave(H // Hkv, dim=0)
        s = (q @ k.transpose(1, 2)) / math.sqrt(D)
        s = s.masked_fill(~mask, float("-inf"))
        a = torch.softmax(s, dim=-1) @ v
        a = a.transpose(0, 1).reshape(T, H * D)
        h = h + mm(a, w[p + "self_attn.o_proj.weight"].T)
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        g = mm(x, w[p + "mlp.gate_proj.weight"].T)
        u = mm(x, w[p + "mlp.up_proj.weight"].T)
        h = h + mm(torch.nn.functional.silu(g) * u, w[p + "mlp.down_proj.weight"].T)
    h = rms_norm(h, w["model.norm.weight"], eps)
    return mm(h, head.T).float()


def _gpt2(cfg, w, ids, pos, mm, kv):
    C, H = cfg["n_embd"], cfg["n_head"]
    D = C // H
    T = len(ids)
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    ln = lambda x, n: torch.nn.functional.layer_norm(x, (C,), w[n + ".weight"], w[n + ".bias"], eps)
    conv = lambda x, n: mm(x, w[n + ".weight"]) + w[n + ".bias"]  # Conv1D: weight is (in, out)
    h = w["wte.weight"][ids] + w["wpe.weight"][pos]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        qkv = conv(ln(h, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (t.view(T, H, D).transpose(0, 1) for t in qkv.split(C, dim=-1))
        k, v = kv(k), kv(v)
        s = (q @ k.transpose(1, 2)) / math.sqrt(D)
        a = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
        h = h + conv(a.transpose(0, 1).reshape(T, C), p + "attn.c_proj")
        m = torch.nn.functional.gelu(conv(ln(h, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh")
        h = h + conv(m, p + "mlp.c_proj")
    h = ln(h, "ln_f")
    return mm(h, w["wte.weight"].T).float()


def load_npy(path):
    return torch.from_numpy(np.load(path))
