"""Every CPU kernel against PyTorch (float64 on the same inputs) over odd shapes (1, 3, 17, 4097, ...), with inputs
stored as f32, f16 and bf16. Embedding is also checked with GGUF Q8_0 and Q4_0 tables; their reference values come from
a NumPy implementation of the block formats, written here from the GGUF description. Matmuls with quantized weights are
checked per format and ISA in test_kernels.py."""
import os

import numpy as np
import torch

from common import check, finish, float_rounds, gamma, isa_variants, op_runner, tmpdir

torch.manual_seed(0)
DIR = tmpdir()
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
_n = 0


def save(t):
    """Writes a tensor as .npy (bf16 as its uint16 bit patterns); returns the path."""
    global _n
    _n += 1
    path = os.path.join(DIR, f"in{_n}.npy")
    if t.dtype == torch.bfloat16:
        np.save(path, t.view(torch.int16).numpy().view(np.uint16))
    else:
        np.save(path, t.numpy())
    return path


def op(name, inputs, isa=None, **attrs):
    """Runs op_runner's op; under ASCENT_ISA=isa, a kernel other than isa's counts as isa skipped for the op."""
    out = os.path.join(DIR, "out.npy")
    args = [name, out] + [save(t) for t in inputs] + [f"{k}={v}" for k, v in attrs.items()]
    r = op_runner(args, isa, what=f"{name} {attrs.get('wtype', '')}".strip())
    return torch.from_numpy(np.load(out)).double() if r.returncode == 0 else None


def close(got, ref, tol):
    if got is None or got.shape != ref.shape:
        return False, float("inf")
    err = ((got - ref).abs() / (ref.abs() + 1.0)).max().item() if ref.numel() else 0.0
    return err < tol, err


def expect(what, got, ref, tol=2e-5):
    ok, err = close(got, ref, tol)
    check(ok, f"{what} (max scaled err {err:.1e} < {tol:.0e})")


def rand(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape) * scale).to(dtype)


# --- block quantization reference (GGUF Q8_0 / Q4_0) ------------------------------------------------------------

def q8_0(w):
    b = w.double().reshape(-1, 32).numpy()
    amax = np.abs(b).max(axis=1)
    d = (amax / 127.0).astype(np.float32)
    inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0.0).astype(np.float32)
    q = np.round(b.astype(np.float32) * inv[:, None])
    return torch.from_numpy((d.astype(np.float16).astype(np.float64)[:, None] * q).reshape(w.shape))


def q4_0(w):
    b = w.reshape(-1, 32).numpy().astype(np.float32)
    idx = np.abs(b).argmax(axis=1)
    vmax = b[np.arange(len(b)), idx]
    d = (vmax / -8.0).astype(np.float32)
    inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0.0).astype(np.float32)
    q = np.minimum(15, np.floor(b * inv[:, None] + 8.5)) - 8
    return torch.from_numpy((d.astype(np.float16).astype(np.float64)[:, None] * q).reshape(w.shape))


def main():
    for dn, dt in DTYPES.items():
        # matmul (T, K) @ (N, K)^T + bias. The bound is test_kernels.py's for float weights, with one more rounding
        # (the bias) and |b| in the sum of magnitudes. The inputs are stored in dn, so rounding x to bf16 changes
        # nothing.
        for T, K, N in [(1, 1, 1), (3, 17, 5), (17, 64, 3), (1, 4097, 3), (2, 3, 4097)]:
            x, w, b = rand(T, K, dtype=dt), rand(N, K, dtype=dt), rand(N)
            ref = x.double() @ w.double().T + b.double()
            mag = x.double().abs() @ w.double().abs().T + b.double().abs()
            got = op("matmul", [x, w, b])
            err = ((got - ref).abs() / mag).max().item() if got is not None else float("inf")
            bound = gamma(float_rounds(K) + 1)
            check(err <= bound, f"matmul {dn} T={T} K={K} N={N} (scaled err {err:.1e} <= gamma({float_rounds(K) + 1}) "
                                f"= {bound:.1e})")
        # embedding
        for V, C in [(1, 1), (17, 3), (4097, 17), (3, 4097)]:
            table, ids = rand(V, C, dtype=dt), torch.randint(0, V, (7,), dtype=torch.int32)
            expect(f"embedding {dn} V={V} C={C}", op("embedding", [table, ids]), table.double()[ids.long()], 1e-7)
        # rms_norm (whole row and grouped) and layer_norm
        for T, C, group in [(1, 1, 1), (3, 17, 17), (17, 4097, 4097), (3, 64, 16), (2, 3, 1)]:
            x, w = rand(T, C, dtype=dt), rand(group, dtype=dt)
            xg = x.double().reshape(T, C // group, group)
            ref = (xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double()).reshape(T, C)
            expect(f"rms_norm {dn} T={T} C={C} group={group}", op("rms_norm", [x, w], eps=1e-5, group=group), ref)
        for T, C in [(1, 3), (3, 17), (17, 4097)]:
            x, w, b = rand(T, C, dtype=dt, scale=3.0), rand(C, dtype=dt), rand(C, dtype=dt)
            ref = torch.nn.functional.layer_norm(x.double(), (C,), w.double(), b.double(), 1e-5)
            expect(f"layer_norm {dn} T={T} C={C}", op("layer_norm", [x, w, b], eps=1e-5), ref)
        # rope, both pair layouts
        for T, H, D in [(1, 1, 2), (3, 3, 16), (17, 2, 64)]:
            x = rand(T, H * D, dtype=dt)
            pos = torch.randint(0, 4097, (T,), dtype=torch.int32)
            inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
            ang = (pos.float()[:, None] * inv[None, :]).double()  # f32 angles, as HF computes them
            xh = x.double().view(T, H, D)
            cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
            a, bb = xh[..., : D // 2], xh[..., D // 2:]
            half = torch.cat([a * cos - bb * sin, bb * cos + a * sin], -1).reshape(T, H * D)
            xc = torch.view_as_complex(xh.reshape(T, H, D // 2, 2).contiguous())
            inter = torch.view_as_real(xc * torch.polar(torch.ones_like(ang), ang)[:, None, :]).reshape(T, H * D)
            expect(f"rope half {dn} T={T} H={H} D={D}",
                   op("rope", [x, pos], dim=D, theta=10000.0, style="half"), half, 1e-5)
            expect(f"rope interleaved {dn} T={T} H={H} D={D}",
                   op("rope", [x, pos], dim=D, theta=10000.0, style="interleaved"), inter, 1e-5)
        # causal attention with GQA, cache offset and sliding window
        for T, n_past, H, Hkv, D, window in [(1, 0, 1, 1, 1, 0), (3, 5, 4, 2, 16, 0), (17, 0, 4, 1, 3, 0),
                                             (17, 4, 4, 4, 16, 4), (1, 40, 2, 1, 64, 0)]:
            S = n_past + T
            q, k, v = rand(T, H * D, dtype=dt), rand(S, Hkv * D, dtype=dt), rand(S, Hkv * D, dtype=dt)
            qp = q.double().view(T, H, D).transpose(0, 1)
            kp = k.double().view(S, Hkv, D).transpose(0, 1).repeat_interleave(H // Hkv, 0)
            vp = v.double().view(S, Hkv, D).transpose(0, 1).repeat_interleave(H // Hkv, 0)
            qpos, kpos = torch.arange(n_past, S)[:, None], torch.arange(S)[None, :]
            allow = kpos <= qpos
            if window:
                allow &= (qpos - kpos) < window
            scores = (qp @ kp.transpose(1, 2)) / D ** 0.5
            ref = torch.softmax(scores.masked_fill(~allow, float("-inf")), -1) @ vp
            ref = ref.transpose(0, 1).reshape(T, H * D)
            expect(f"attention {dn} T={T} past={n_past} H={H}/{Hkv} D={D} window={window}",
                   op("attention", [q, k, v], heads=H, kv_heads=Hkv, n_past=n_past, window=window), ref)
            if dn == "f32" and D % 2 == 0:
                # An f16 cache (kv_store rounds each K and V value to f16) against PyTorch over K and V rounded to
                # f16 by PyTorch: the cache loses nothing more than that rounding.
                kh = k.half().double().view(S, Hkv, D).transpose(0, 1).repeat_interleave(H // Hkv, 0)
                vh = v.half().double().view(S, Hkv, D).transpose(0, 1).repeat_interleave(H // Hkv, 0)
                scores = (qp @ kh.transpose(1, 2)) / D ** 0.5
                ref16 = (torch.softmax(scores.masked_fill(~allow, float("-inf")), -1) @ vh).transpose(0, 1)
                expect(f"attention over an f16 cache T={T} past={n_past} H={H}/{Hkv} D={D} window={window}",
                       op("attention", [q, k, v], heads=H, kv_heads=Hkv, n_past=n_past, window=window, kv_block=16,
                          k_tiles=1, kv_f16=1), ref16.reshape(T, H * D))
        # softmax and element-wise ops (20000 elements takes the threaded path)
        for R, C in [(1, 1), (3, 17), (2, 4097)]:
            x = rand(R, C, dtype=dt, scale=4.0)
            expect(f"softmax {dn} {R}x{C}", op("softmax", [x]), torch.softmax(x.double(), -1))
        for n in [1, 3, 17, 4097, 20000]:
            x, y = rand(n, dtype=dt, scale=3.0), rand(n, dtype=dt, scale=3.0)
            xd, yd = x.double(), y.double()
            expect(f"silu {dn} n={n}", op("silu", [x]), torch.nn.functional.silu(xd))
            expect(f"gelu_tanh {dn} n={n}", op("gelu_tanh", [x]), torch.nn.functional.gelu(xd, approximate="tanh"))
            expect(f"swiglu {dn} n={n}", op("swiglu", [x, y]), torch.nn.functional.silu(xd) * yd)
            expect(f"add {dn} n={n}", op("add", [x, y]), xd + yd)
            expect(f"mul {dn} n={n}", op("mul", [x, y]), xd * yd)

    # GGUF block weights: our quantizer + embedding against the NumPy block reference (matmuls with quantized
    # weights also quantize their activations: tests/e2e/test_kernels.py checks them format by format).
    for wt, quant in (("q8_0", q8_0), ("q4_0", q4_0)):
        table, ids = rand(17, 64), torch.randint(0, 17, (5,), dtype=torch.int32)
        expect(f"embedding {wt}", op("embedding", [table, ids], wtype=wt), quant(table)[ids.long()], 1e-6)
    # Embedding runs row loops whose SIMD variants keep the reference's summation order, so every ISA variant gives
    # bitwise the reference's results (matmul variants: test_kernels.py, with per-format tolerances).
    supported = isa_variants(lambda isa: op_runner(["silu", os.path.join(DIR, "probe.npy"), save(rand(3))], isa),
                             ("avx2", "avx512"))
    check(len(supported) >= 1, "at least one SIMD variant runs here (x86-64 with AVX2)")
    for isa in supported:
        same = True
        for wt in ("f32", "f16", "bf16", "q8_0", "q4_0"):
            table, ids = rand(17, 4128), torch.randint(0, 17, (5,), dtype=torch.int32)
            attrs = {} if wt == "f32" else {"wtype": wt}
            same &= torch.equal(op("embedding", [table, ids], isa=isa, **attrs),
                                op("embedding", [table, ids], isa="ref", **attrs))
        check(same, f"ASCENT_ISA={isa}: embedding (every weight type) bitwise equal to ref")
        # SiLU / SwiGLU: each ISA's own exp, checked against PyTorch over the whole float range (tails masked).
        x = torch.cat([rand(37, scale=4.0), torch.tensor([-200.0, -88.5, -87.5, -20.0, 0.0, 20.0, 87.5, 88.5, 200.0])])
        y = rand(x.numel())
        for name, args, ref in (("silu", [x], torch.nn.functional.silu(x.double())),
                                ("swiglu", [x, y], torch.nn.functional.silu(x.double()) * y.double())):
            expect(f"ASCENT_ISA={isa}: {name} over [-200, 200] vs PyTorch", op(name, args, isa=isa), ref, 1e-6)
        # Rounding to f16 (an f16 KV cache's stores) against PyTorch's: normals, halves' subnormals and their
        # underflow, ties, the overflow boundary (65504 stays, 65520 rounds to infinity), infinities, signed zeros;
        # 37 values so the 8-wide loop and its scalar tail both run, and a NaN inside a group of 8.
        edge = torch.tensor([65504.0, 65519.99, 65520.0, -65520.0, float("inf"), -float("inf"), 0.0, -0.0,
                             2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0001, 3 * 2.0 ** -26, 1.0 + 2.0 ** -11,
                             1.0 + 3 * 2.0 ** -11, 6.1e-5, -6.0e-5])
        xs = torch.cat([rand(4101, scale=3.0), rand(37, scale=1e-5), edge, rand(19, scale=3e4)])
        for variant in (isa, "ref"):
            got = op("f16_round", [xs], isa=variant)
            check(got is not None and torch.equal(got.float(), xs.half().float()),
                  f"ASCENT_ISA={variant}: rounding {xs.numel()} values to f16 == PyTorch's, bitwise")
        with_nan = torch.tensor([1.0, 2.0, float("nan"), 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
        got = op("f16_round", [with_nan], isa=isa)
        check(got is not None and torch.isnan(got[2]).item() and torch.equal(got[[0, 1, 3, 4, 5, 6, 7, 8]].float(),
                                                                            with_nan[[0, 1, 3, 4, 5, 6, 7, 8]]),
              f"ASCENT_ISA={isa}: rounding to f16 keeps NaN in its lane only")
        nan = op("silu", [torch.tensor([1.0, float("nan"), -1.0])], isa=isa)
        check(nan is not None and torch.isnan(nan[1]).item() and not torch.isnan(nan[[0, 2]]).any().item(),
              f"ASCENT_ISA={isa}: silu keeps NaN in its lane only")
        # Attention: the SIMD variants are flash-style (online softmax over tiles of 8 or 16 keys, vector exp, FMA).
        for T, past, H, Hkv, D, window in [(17, 3, 4, 2, 37, 0), (5, 40, 8, 2, 64, 0), (9, 0, 2, 2, 128, 4),
                                           (1, 300, 4, 1, 16, 0), (3, 2, 2, 1, 8, 0), (150, 90, 8, 2, 64, 0),
                                           (150, 90, 8, 2, 64, 70)]:
            q, k, v = rand(T, H * D), rand(T + past, Hkv * D), rand(T + past, Hkv * D)
            a = dict(heads=H, kv_heads=Hkv, n_past=past, window=window)
            got, ref = op("attention", [q, k, v], isa=isa, **a), op("attention", [q, k, v], isa="ref", **a)
            expect(f"ASCENT_ISA={isa}: attention T={T} past={past} H={H}/{Hkv} D={D} window={window} vs ref",
                   got, ref, 2e-6)
        # Caches in blocks of B positions, each block (Hkv, B, D) (ops.h kv_offset; the model's KvCache keeps 256). The
        # arithmetic is the same as over rows (positions, Hkv*D), so the result is bitwise the same. Covered: blocks
        # ending inside a run of keys, a window starting inside one, and the last block part-filled (op_runner fills the
        # rest with NaN, which any read would spread). With 8 kv heads, a decode thread attends over several,
        # prefetching the next one's tiles as a head ends.
        for T, past, H, Hkv, D, window, B in [(1, 300, 4, 1, 16, 0, 16), (1, 90, 8, 2, 64, 0, 32),
                                              (150, 90, 8, 2, 64, 70, 32), (17, 3, 4, 2, 37, 0, 16),
                                              (5, 40, 8, 2, 40, 0, 256), (1, 519, 8, 2, 64, 0, 256),
                                              (1, 100, 16, 8, 64, 0, 32)]:
            q, k, v = rand(T, H * D), rand(T + past, Hkv * D), rand(T + past, Hkv * D)
            a = dict(heads=H, kv_heads=Hkv, n_past=past, window=window)
            for variant in (isa, "ref"):
                rows = op("attention", [q, k, v], isa=variant, **a)
                for tiles in (0, 1) if D % 2 == 0 else (0,):
                    blocks = op("attention", [q, k, v], isa=variant, kv_block=B, k_tiles=tiles, **a)
                    check(rows is not None and blocks is not None and torch.equal(rows, blocks),
                          f"ASCENT_ISA={variant}: attention T={T} past={past} H={H}/{Hkv} D={D} window={window} over "
                          f"blocks of {B} positions{', K in key tiles' if tiles else ''} == over rows, bitwise")
        # f16 caches: every cached value widens exactly, so the result has the bits of an f32 cache holding the same
        # f16-rounded values. D = 40: value rows copied into whole vectors on AVX-512; D = 64: read in place; the last
        # block part-filled with NaN.
        for T, past, H, Hkv, D, window, B in [(1, 300, 4, 1, 16, 0, 16), (150, 90, 8, 2, 64, 70, 32),
                                              (5, 40, 8, 2, 40, 0, 256), (1, 519, 8, 2, 64, 0, 256),
                                              (1, 100, 16, 8, 64, 0, 32)]:
            q, k, v = rand(T, H * D), rand(T + past, Hkv * D), rand(T + past, Hkv * D)
            a = dict(heads=H, kv_heads=Hkv, n_past=past, window=window, kv_block=B, k_tiles=1)
            for variant in (isa, "ref"):
                f16 = op("attention", [q, k, v], isa=variant, kv_f16=1, **a)
                f32 = op("attention", [q, k.half().float(), v.half().float()], isa=variant, **a)
                check(f16 is not None and f32 is not None and torch.equal(f16, f32),
                      f"ASCENT_ISA={variant}: attention T={T} past={past} H={H}/{Hkv} D={D} window={window} over an "
                      f"f16 cache == over an f32 cache of the f16-rounded values, bitwise")
        # The SIMD kernels read f16 keys only in key tiles: an f16 cache without them is refused with the reason.
        q, k, v = rand(1, 2 * 16), rand(5, 16), rand(5, 16)
        r = op_runner(["attention", os.path.join(DIR, "out.npy"), save(q), save(k), save(v), "heads=2", "kv_heads=1",
                       "n_past=4", "window=0", "kv_block=16", "k_tiles=0", "kv_f16=1"], isa)
        check(r.returncode != 0 and "f16 cache needs K in key tiles" in r.stderr,
              f"ASCENT_ISA={isa}: attention refuses an f16 cache without key tiles: {r.stderr.strip()[-90:]}")
        # K in key tiles needs an even head size (the kernels read dimensions in pairs): refused with the reason.
        q, k, v = rand(1, 2 * 37), rand(5, 37), rand(5, 37)
        r = op_runner(["attention", os.path.join(DIR, "out.npy"), save(q), save(k), save(v), "heads=2", "kv_heads=1",
                       "n_past=4", "window=0", "kv_block=16", "k_tiles=1"], isa)
        check(r.returncode != 0 and "even head size" in r.stderr,
              f"ASCENT_ISA={isa}: attention refuses K in key tiles for D = 37: {r.stderr.strip()[-90:]}")
        # A query row's result depends only on its position and the cache. So prefill rows equal the same rows run as
        # decode steps (one token over the cache so far), bitwise, for any key tiling the kernel uses: prefill takes key
        # tiles in pairs, decode one at a time. Checked over rows, blocks with key tiles, and an f16 cache. D = 40 has
        # value rows copied into whole vectors (AVX-512), D = 64 read in place from the cache.
        T, past, H, Hkv = 70, 29, 8, 2
        for layout in ({}, {"kv_block": 32, "k_tiles": 1}, {"kv_block": 256, "k_tiles": 1, "kv_f16": 1}):
            for D, window in ((40, 0), (40, 21), (64, 0), (64, 21)):
                q, k, v = rand(T, H * D), rand(T + past, Hkv * D), rand(T + past, Hkv * D)
                whole = op("attention", [q, k, v], isa=isa, heads=H, kv_heads=Hkv, n_past=past, window=window,
                           **layout)
                same = whole is not None
                for t in (0, 1, 17, 40, 69):
                    one = op("attention", [q[t:t + 1], k[:past + t + 1], v[:past + t + 1]], isa=isa, heads=H,
                             kv_heads=Hkv, n_past=past + t, window=window, **layout)
                    same &= one is not None and torch.equal(one[0], whole[t])
                check(same, f"ASCENT_ISA={isa}: attention D={D} window={window} {layout or 'rows'}: prefill rows == "
                      "the same rows decoded alone")
    finish()


if __name__ == "__main__":
    main()
