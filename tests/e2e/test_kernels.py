"""The matmul engine in every ISA variant (ref, avx2, avx512: each one this CPU runs, so the AVX2 path is tested on
AVX-512 machines too) against NumPy references of each weight format's arithmetic, written here from the format
descriptions in src/ascent/kernels/cpu/gemm.h and tensor/quantize.h: bf16-rounded activations for bf16 weights,
per-token int8 activations for int8/int4, per-32-block int8 activations for GGUF q8_0/q4_0/q4_k/q6_k, exact
integer dot products, float64 scaling. Shapes are odd: K not a multiple of the vector width, T past the token block.
Each format has a bound from its arithmetic, and the integer formats are bitwise equal across ISAs. Batch invariance:
a row's output is bitwise the same whether it runs alone or among other rows. Each run checks the kernel variant
op_runner reports."""
import os

import numpy as np

from common import check, dequant_q4_k, dequant_q6_k, finish, float_rounds, gamma, isa_variants, op_runner, tmpdir

rng = np.random.default_rng(0)
DIR = tmpdir()
_n = 0


def save(a):
    global _n
    _n += 1
    path = os.path.join(DIR, f"k{_n}.npy")
    np.save(path, a)
    return path


def run(inputs, isa, **attrs):
    """x @ w^T through op_runner under ASCENT_ISA=isa; another kernel than isa's is isa skipped for the format."""
    out = os.path.join(DIR, "out.npy")
    args = ["matmul", out] + [save(a) for a in inputs] + [f"{k}={v}" for k, v in attrs.items()]
    what = f"matmul {attrs.get('wtype', 'f32')}" + (f" g{attrs['group']}" if "group" in attrs else "")
    r = op_runner(args, isa, what=what)
    return np.load(out).astype(np.float64) if r.returncode == 0 else None


f32 = np.float32


def round_bf16(x):
    u = x.astype(f32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(f32)


def quant_rows(x, width):
    """Symmetric int8 per span of `width` columns: d = amax / 127, q = round-half-even(x * (1 / d)), where 1 / d
    counts as 0 when it is not finite (d = 0, or d subnormal below 1 / FLT_MAX: every code 0). A span holding a NaN
    or an infinity has d = NaN and every code 0, so that whatever it feeds is NaN, as a float matmul's would be."""
    T, K = x.shape
    xs = x.astype(f32).reshape(T, K // width, width)
    bad = ~np.isfinite(xs).all(axis=2)
    xs = np.where(bad[:, :, None], f32(0), xs)
    d = (np.abs(xs).max(axis=2) / f32(127)).astype(f32)
    with np.errstate(over="ignore"):
        inv = (f32(1) / np.where(d != 0, d, f32(1))).astype(f32)
    inv = np.where((d != 0) & np.isfinite(inv), inv, f32(0)).astype(f32)
    q = np.clip(np.rint(xs * inv[:, :, None]), -127, 127).astype(np.int64)
    return q.reshape(T, K), np.where(bad, np.nan, d.astype(np.float64))


# Each reference returns (y, mag): y in float64 from the format's own operands (the weights as stored, the activations
# as the format rounds them), and mag, the sum of those products' magnitudes that scaled_err divides by.
def float_ref(x, w):
    x, w = x.astype(np.float64), w.astype(np.float64)
    return x @ w.T, np.abs(x) @ np.abs(w).T


def ref_f16(x, w):
    return float_ref(x, w.astype(f32).astype(np.float16))


def ref_f32(x, w):
    return float_ref(x, w)


def ref_bf16(x, w):
    return float_ref(round_bf16(x), round_bf16(w))


def ref_int8(x, w, s=None):
    ws = w / s[None, :] if s is not None else w
    wq, wd = quant_rows(ws.astype(f32), ws.shape[1])
    xq, xd = quant_rows((x * s[None, :]).astype(f32) if s is not None else x, x.shape[1])
    scale = wd[:, 0][None, :] * xd[:, 0][:, None]
    return (xq @ wq.T).astype(np.float64) * scale, (np.abs(xq) @ np.abs(wq).T).astype(np.float64) * np.abs(scale)


def int4_weight(w, group):
    """Codes in [-8, 7] and per-group scales: the signed extreme maps to -8."""
    N, K = w.shape
    Kp = (K + 127) // 128 * 128
    wp = np.zeros((N, Kp), f32)
    wp[:, :K] = w
    g = wp.reshape(N, Kp // group, group)
    idx = np.abs(g).argmax(axis=2)
    vmax = np.take_along_axis(g, idx[:, :, None], axis=2)[:, :, 0]
    d = (vmax / f32(-8)).astype(f32)
    inv = np.where(d != 0, f32(1) / np.where(d != 0, d, f32(1)), f32(0)).astype(f32)
    q = np.clip(np.rint(g * inv[:, :, None]), -8, 7).astype(np.int64)
    return q, d.astype(np.float64), Kp


def ref_int4(x, w, group, s=None):
    ws = (w / s[None, :]).astype(f32) if s is not None else w
    q, d, Kp = int4_weight(ws, group)
    xs = (x * s[None, :]).astype(f32) if s is not None else x
    xp = np.zeros((x.shape[0], Kp), f32)
    xp[:, : x.shape[1]] = xs
    xq, xd = quant_rows(xp[:, : x.shape[1]], x.shape[1])
    xqp = np.zeros((x.shape[0], Kp), np.int64)
    xqp[:, : x.shape[1]] = xq
    G = Kp // group
    dots = np.einsum("tgk,ngk->tng", xqp.reshape(-1, G, group), q)  # exact per-group integer sums
    mags = np.einsum("tgk,ngk->tng", np.abs(xqp).reshape(-1, G, group), np.abs(q))
    return ((dots * d[None, :, :]).sum(axis=2) * xd[:, 0][:, None],
            (mags * np.abs(d)[None, :, :]).sum(axis=2) * np.abs(xd[:, 0])[:, None])


def block_dots(xq, xd, wq, wd16):
    """Per-32-block exact integer dots of int8 activations (T, K) and weight codes (N, K / 32, 32), times the
    blocks' weight and activation scales, summed in float64: (y, mag)."""
    T, K = xq.shape
    xb = xq.reshape(T, K // 32, 32)
    scale = wd16[None] * xd[:, None, :]
    y = (np.einsum("tbk,nbk->tnb", xb, wq) * scale).sum(axis=2)
    return y, (np.einsum("tbk,nbk->tnb", np.abs(xb), np.abs(wq)) * np.abs(scale)).sum(axis=2)


def ref_q8_0(x, w):
    K = x.shape[1]
    wb = w.astype(f32).reshape(-1, 32)
    wd = (np.abs(wb).max(axis=1) / f32(127)).astype(f32)
    inv = np.where(wd != 0, f32(1) / np.where(wd != 0, wd, f32(1)), f32(0)).astype(f32)
    # Rounded half away from zero, as GGUF's Q8_0 quantizer (llama.cpp's roundf) and ours (std::lround) do; the
    # activations (quant_rows) round half to even.
    v = (wb * inv[:, None]).astype(np.float64)
    wq = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int64).reshape(w.shape[0], K // 32, 32)
    wd16 = wd.astype(np.float16).astype(np.float64).reshape(w.shape[0], K // 32)
    return block_dots(*quant_rows(x, 32), wq, wd16)


def ref_q4_0(x, w):
    K = x.shape[1]
    wb = w.astype(f32).reshape(-1, 32)
    idx = np.abs(wb).argmax(axis=1)
    vmax = wb[np.arange(len(wb)), idx]
    wd = (vmax / f32(-8)).astype(f32)
    inv = np.where(wd != 0, f32(1) / np.where(wd != 0, wd, f32(1)), f32(0)).astype(f32)
    wq = (np.minimum(15, np.floor(wb * inv[:, None] + f32(8.5))) - 8).astype(np.int64).reshape(w.shape[0], K // 32, 32)
    wd16 = wd.astype(np.float16).astype(np.float64).reshape(w.shape[0], K // 32)
    return block_dots(*quant_rows(x, 32), wq, wd16)


# GGUF K-quant weights as random super-blocks (no quantizer to make them from floats): every code, scale and
# minimum bit pattern occurs; d and dmin fixed so the values stay O(0.1).
def q4_k_blocks(n, k):
    b = rng.integers(0, 256, (n * k // 256, 144), dtype=np.uint8)
    b[:, 0:2] = np.frombuffer(np.float16(2e-4).tobytes(), np.uint8)
    b[:, 2:4] = np.frombuffer(np.float16(1e-4).tobytes(), np.uint8)
    return b


def q6_k_blocks(n, k):
    b = rng.integers(0, 256, (n * k // 256, 210), dtype=np.uint8)
    b[:, 208:210] = np.frombuffer(np.float16(3e-4).tobytes(), np.uint8)
    return b


def ref_kquant(x, blocks, dequant):
    """Per-32-block int8 activations times the exactly (float64) dequantized weights: the K-quant formulas of
    gemm.h regrouped (d * scale * code - dmin * min per element). mag counts Q4_K's two terms apart (the same blocks
    with dmin's sign flipped give d * scale * code + dmin * min, every part of it positive here)."""
    T, K = x.shape
    w = dequant(blocks, np.float64).reshape(-1, K)
    if blocks.shape[1] == 144:
        flipped = blocks.copy()
        flipped[:, 3] ^= 0x80
        w_abs = np.abs(dequant(flipped, np.float64).reshape(-1, K))
    else:
        w_abs = np.abs(w)
    xq, xd = quant_rows(x, 32)
    xs = xq.reshape(T, K // 32, 32).astype(np.float64)
    dots = np.einsum("tbk,nbk->tnb", xs, w.reshape(len(w), K // 32, 32))
    mags = np.einsum("tbk,nbk->tnb", np.abs(xs), w_abs.reshape(len(w), K // 32, 32))
    return (dots * xd[:, None, :]).sum(axis=2), (mags * np.abs(xd)[:, None, :]).sum(axis=2)


def scaled_err(got, ref):
    """The worst |got - y| over mag, for ref = (y, mag): the quantity a dot product's rounding error is bounded by
    (below). Dividing by |y| instead is ill-conditioned where a row's products cancel: a correct f32 kernel then
    reads as 1.8e-5 off."""
    y, mag = ref
    if got is None or got.shape != y.shape:
        return float("inf")
    diff = np.abs(got - y)
    return float(np.where(mag > 0, diff / np.where(mag > 0, mag, 1.0), np.where(diff > 0, np.inf, 0.0)).max())


# The bound on scaled_err is gamma(n), n the most f32 roundings a product's term meets on its way to the output.
# Any summation order then gives |fl(y) - y| <= gamma(n) * mag (Higham, Accuracy and Stability of Numerical
# Algorithms, 3.1), so no correct variant exceeds it. Per format:
#   f32, f16, bf16: the product (none under FMA; bf16 products are exact), at most ceil(K / 8) additions in one of
#     8 or more partial sums (ref: 8 accumulators; AVX2: 8 lanes; AVX-512: 16), at most 4 joining them.
#   int8: the integer dot is exact; its conversion and two scale products make 3.
#   int4: each group's sum times its scale, Kp / group of them added, times the token's scale.
#   q8_0, q4_0 and their repacks: a block's sum times its scales' product (2), K / 32 blocks, 4 joining lanes.
#   q4_k, q6_k: 4 per block (scale products, the min term or the halves' sum, the activation scale), then as q8_0.
# A product dropped or doubled moves an output by ~1 / (0.64 K) of mag on Gaussian data. At K = 4097 that is
# 3.8e-4, against a bound of 3.1e-5.
def int4_rounds(group):
    return lambda K: -(-K // 128) * 128 // group + 2


def block_rounds(K):
    return K // 32 + 6


def kquant_rounds(K):
    return K // 32 + 8


# (name, op_runner attrs, reference, roundings n(K), needs K % 32 == 0, SIMD variants bitwise the reference kernel).
# int8 and int4 sum integers exactly and scale them in the reference's order, so every variant gives its bits; the
# float and block formats sum in each variant's own order.
FORMATS = [
    ("f32", {}, ref_f32, float_rounds, False, False),
    ("f16", {"wtype": "f16"}, ref_f16, float_rounds, False, False),
    ("bf16", {"wtype": "bf16"}, ref_bf16, float_rounds, False, False),
    ("int8", {"wtype": "int8"}, ref_int8, lambda K: 3, False, True),
    ("int4 g32", {"wtype": "int4", "group": 32}, lambda x, w: ref_int4(x, w, 32), int4_rounds(32), False, True),
    ("int4 g64", {"wtype": "int4", "group": 64}, lambda x, w: ref_int4(x, w, 64), int4_rounds(64), False, True),
    ("int4 g128", {"wtype": "int4", "group": 128}, lambda x, w: ref_int4(x, w, 128), int4_rounds(128), False, True),
    ("q8_0", {"wtype": "q8_0"}, ref_q8_0, block_rounds, True, False),
    ("q4_0", {"wtype": "q4_0"}, ref_q4_0, block_rounds, True, False),
    # q4_0 repacked (dtype.h Q4_0R), as models load it for the AVX-512 kernel: the same codes, so q4_0's reference
    ("q4_0r", {"wtype": "q4_0r"}, ref_q4_0, block_rounds, True, False),
    # q8_0 repacked (dtype.h Q8_0R) likewise: q8_0's reference
    ("q8_0r", {"wtype": "q8_0r"}, ref_q8_0, block_rounds, True, False),
]
SHAPES = [(1, 64, 1), (1, 100, 7), (3, 33, 5), (5, 4097, 3), (17, 256, 13), (1, 2048, 37), (131, 96, 6), (2, 3, 9)]
# Drawn from a generator of their own, so that adding one leaves the other shapes' data as it was. K = 80: rows that
# end half-way through 32 columns.
MORE_SHAPES = [(2, 80, 7)]


def main():
    probe = os.path.join(DIR, "probe.npy")
    supported = isa_variants(lambda isa: op_runner(["silu", probe, save(np.ones(3, f32))], isa))
    check("avx2" in supported, "the AVX2 variant runs here (and is tested even when AVX-512 is present)")
    for name, attrs, ref_fn, rounds, blocks, bitwise in FORMATS:
        # Every variant on the same data: its worst error as a share of its shape's bound (gamma(rounds(K))), and
        # for the integer formats, its outputs against the reference kernel's.
        worst = {isa: 0.0 for isa in supported}
        same = {isa: True for isa in supported}
        ns = []
        for i, (T, K, N) in enumerate(SHAPES + MORE_SHAPES):
            if blocks and K % 32:
                K = (K + 31) // 32 * 32
            ns.append(rounds(K))
            g = rng if i < len(SHAPES) else np.random.default_rng(i)
            x = g.standard_normal((T, K)).astype(f32)
            w = g.standard_normal((N, K)).astype(f32)
            ref = ref_fn(x, w)
            outs = {isa: run([x, w], isa, **attrs) for isa in supported}
            for isa in supported:
                worst[isa] = max(worst[isa], scaled_err(outs[isa], ref) / gamma(rounds(K)))
                same[isa] &= outs[isa] is not None and outs.get("ref") is not None and np.array_equal(outs[isa],
                                                                                                    outs["ref"])
        for isa in supported:
            check(worst[isa] <= 1, f"{name:9s} {isa:6s} matches the NumPy reference over {len(SHAPES + MORE_SHAPES)} "
                                   f"shapes (worst scaled err {worst[isa]:.2g} of its shape's bound, gamma(n) for n = "
                                   f"{min(ns)}..{max(ns)})")
            if bitwise and isa != "ref" and "ref" in supported:
                check(same[isa], f"{name:9s} {isa:6s} bitwise the reference kernel over the same shapes")
        # The largest integer sums: every 32 columns one weight at the negative extreme and the rest at the
        # positive one (int4 codes -8 and 7, i.e. stored 0 and 15; int8 codes -127/127), activations all +1 or
        # all -1 (quantized to +-127), so that kernels summing products in 16 bits before widening are at their
        # bound (a sum one step too long wraps and fails here, not on random data). Decode (T = 1) and prefill.
        pattern = np.where(np.arange(512) % 32 == 0, f32(-8), f32(7)).astype(f32)
        w = np.stack([pattern * f32(0.01 * (r + 1)) for r in range(16)])
        for isa in supported:
            worst = 0.0
            for T in (1, 5):
                x = np.stack([np.full(512, f32(1) if t % 2 == 0 else f32(-1)) for t in range(T)]).astype(f32)
                worst = max(worst, scaled_err(run([x, w], isa, **attrs), ref_fn(x, w)) / gamma(rounds(512)))
            check(worst <= 1, f"{name:9s} {isa:6s} extreme codes and activations (worst scaled err {worst:.2g} of "
                              f"the bound gamma({rounds(512)}))")
        # Batch invariance: each row of a 9-token matmul equals that row run alone, bitwise, in every ISA. K = 4128
        # is 129 blocks of 32: the block formats' last pair is a half one, in the row-cache tiles too. The float
        # formats also at K = 4112, 4099 and 4125: rows that end half-way through 32 columns, and inside the first or
        # the second 16 of them (the masked tails of the float kernels' 16-column steps).
        for isa in supported:
            same = True
            for K in (4128,) if blocks else (4128, 4112, 4099, 4125):
                x = rng.standard_normal((9, K)).astype(f32)
                w = rng.standard_normal((11, K)).astype(f32)
                full = run([x, w], isa, **attrs)
                same &= full is not None and all(np.array_equal(run([x[t:t + 1], w], isa, **attrs), full[t:t + 1])
                                                 for t in (0, 4, 8))
            check(same, f"{name:9s} {isa:6s} rows alone are bitwise equal to the same rows in a batch of 9")
        # The float formats with 40 tokens too, at K = 2048 and 2061: a token block that large makes f16 prefill
        # widen each row tile once for all its token tiles (F16Kern), and the rows must still equal decode's bits.
        for isa in supported if name in ("f32", "f16", "bf16") else ():
            same = True
            for K in (2048, 2061):
                x = rng.standard_normal((40, K)).astype(f32)
                w = rng.standard_normal((13, K)).astype(f32)
                full = run([x, w], isa, **attrs)
                same &= full is not None and all(np.array_equal(run([x[t:t + 1], w], isa, **attrs), full[t:t + 1])
                                                 for t in (0, 17, 39))
            check(same, f"{name:9s} {isa:6s} rows alone are bitwise equal to the same rows in a batch of 40")
        # A NaN or an infinite activation makes its token's every output NaN (or infinite), as in floats, and
        # leaves the other tokens' bits alone. A quantizer once dropped the NaN from its block's scale: the output
        # stayed finite, and a model with a NaN activation went on generating.
        for isa in supported:
            ok = True
            x = rng.standard_normal((3, 96)).astype(f32)
            w = rng.standard_normal((5, 96)).astype(f32)
            clean = run([x, w], isa, **attrs)
            for v in (np.nan, np.inf):
                xb = x.copy()
                xb[1, 40] = v
                got = run([xb, w], isa, **attrs)
                ok &= (clean is not None and got is not None and not np.isfinite(got[1]).any() and
                       np.array_equal(got[[0, 2]], clean[[0, 2]]))
            check(ok, f"{name:9s} {isa:6s} a NaN or infinite activation gives its token no finite output, and the "
                      f"other tokens their bits")
    # GGUF K-quants, given as super-blocks (rows of uint16 pairs of bytes): K a multiple of 256, decode (T = 1) and
    # tiles of tokens, rows alone bitwise equal to the same rows in a batch.
    # q4_kr, q6_kr: Q4_K and Q6_K blocks repacked (dtype.h Q4_KR, Q6_KR) as models load them for the AVX-512 kernel,
    # so q4_k's and q6_k's references.
    for name, make, dequant in (("q4_k", q4_k_blocks, dequant_q4_k), ("q6_k", q6_k_blocks, dequant_q6_k),
                                ("q4_kr", q4_k_blocks, dequant_q4_k), ("q6_kr", q6_k_blocks, dequant_q6_k)):
        for isa in supported:
            worst = 0.0
            for T, K, N in [(1, 256, 1), (1, 2048, 37), (3, 512, 5), (17, 256, 13), (5, 768, 3), (131, 256, 6)]:
                x = rng.standard_normal((T, K)).astype(f32)
                blocks = make(N, K)
                err = scaled_err(run([x, blocks.view("<u2").reshape(N, -1)], isa, wtype=name),
                                 ref_kquant(x, blocks, dequant))
                worst = max(worst, err / gamma(kquant_rounds(K)))
            check(worst <= 1, f"{name:9s} {isa:6s} matches the NumPy reference over 6 shapes (worst scaled err "
                              f"{worst:.2g} of the bound gamma({kquant_rounds(256)}) at K = 256 ... "
                              f"gamma({kquant_rounds(2048)}) at K = 2048)")
            x = rng.standard_normal((9, 1024)).astype(f32)
            w = make(11, 1024).view("<u2").reshape(11, -1)
            full = run([x, w], isa, wtype=name)
            same = full is not None and all(np.array_equal(run([x[t:t + 1], w], isa, wtype=name), full[t:t + 1])
                                            for t in (0, 4, 8))
            check(same, f"{name:9s} {isa:6s} rows alone are bitwise equal to the same rows in a batch of 9")
            x = rng.standard_normal((3, 512)).astype(f32)
            w = make(5, 512).view("<u2").reshape(5, -1)
            clean, ok = run([x, w], isa, wtype=name), True
            for v in (np.nan, -np.inf):
                xb = x.copy()
                xb[1, 300] = v
                got = run([xb, w], isa, wtype=name)
                ok &= (clean is not None and got is not None and not np.isfinite(got[1]).any() and
                       np.array_equal(got[[0, 2]], clean[[0, 2]]))
            check(ok, f"{name:9s} {isa:6s} a NaN or infinite activation gives its token no finite output, and the "
                      f"other tokens their bits")
    # Q4_KR's tiles take two super-blocks per step: K = 1280, an odd number of them, rows alone and in a batch (a
    # generator of its own leaves the other draws as they were).
    g = np.random.default_rng(51)
    x = g.standard_normal((9, 1280)).astype(f32)
    w = g.integers(0, 256, (11 * 5, 144), dtype=np.uint8)
    w[:, 0:4] = np.frombuffer(np.array([2e-4, 1e-4], np.float16).tobytes(), np.uint8)  # d, dmin as q4_k_blocks
    w = w.view("<u2").reshape(11, -1)
    for isa in supported:
        full = run([x, w], isa, wtype="q4_kr")
        same = full is not None and all(np.array_equal(run([x[t:t + 1], w], isa, wtype="q4_kr"), full[t:t + 1])
                                        for t in (0, 4, 8))
        check(same, f"q4_kr     {isa:6s} rows alone bitwise equal to the same rows in a batch of 9 (K = 1280: 5 "
                    f"super-blocks)")
    # The K-quant repacks are lossless: q4_kr's and q6_kr's reference matmuls and dequantized rows are bitwise
    # q4_k's and q6_k's, and the rows are the NumPy decoding's.
    w6 = g.integers(0, 256, (11 * 5, 210), dtype=np.uint8)
    w6[:, 208:210] = np.frombuffer(np.float16(3e-4).tobytes(), np.uint8)  # d as q6_k_blocks
    w6 = w6.view("<u2").reshape(11, -1)
    out = os.path.join(DIR, "out.npy")
    ids = np.array([10, 0, 3], np.int32)
    for name, blocks, size, dequant in (("q4_k", w, 144, dequant_q4_k), ("q6_k", w6, 210, dequant_q6_k)):
        a, b = run([x, blocks], "ref", wtype=name), run([x, blocks], "ref", wtype=name + "r")
        rows = []
        for wt in (name, name + "r"):
            r = op_runner(["embedding", out, save(blocks), save(ids), f"wtype={wt}", "k=1280"], "ref")
            rows.append(np.load(out) if r.returncode == 0 else None)
        want = dequant(blocks.view(np.uint8).reshape(-1, size), np.float64).reshape(11, 1280)[ids]
        check(a is not None and b is not None and np.array_equal(a, b) and rows[1] is not None and
              np.array_equal(rows[0], rows[1]) and np.abs(rows[1] - want).max() < 1e-6,
              f"{name}r: reference matmul and dequantized rows bitwise {name}'s, the rows the NumPy decoding's")
    # The repacks are lossless: q4_0r's (q8_0r's) reference kernel and dequantized rows are bitwise q4_0's (q8_0's)
    # (K = 896 and 4128: rows that end inside a 512-column group).
    for name in ("q4_0", "q8_0"):
        for K in (896, 4128):
            x, w = rng.standard_normal((3, K)).astype(f32), rng.standard_normal((5, K)).astype(f32)
            a, b = run([x, w], "ref", wtype=name), run([x, w], "ref", wtype=name + "r")
            ids = np.array([4, 0, 2], np.int32)
            out = os.path.join(DIR, "out.npy")
            rows = []
            for wt in (name, name + "r"):
                r = op_runner(["embedding", out, save(w), save(ids), f"wtype={wt}"], "ref")
                rows.append(np.load(out) if r.returncode == 0 else None)
            check(a is not None and b is not None and np.array_equal(a, b) and rows[1] is not None and
                  np.array_equal(rows[0], rows[1]), f"{name}r: matmul and dequantized rows bitwise {name}'s (K = {K})")
    # Integer formats have exact integer sums, so every ISA gives bitwise the reference's int8 results.
    x, w = rng.standard_normal((7, 333)).astype(f32), rng.standard_normal((9, 333)).astype(f32)
    outs = [run([x, w], isa, wtype="int8") for isa in supported]
    check(all(o is not None and np.array_equal(o, outs[0]) for o in outs),
          f"int8: {', '.join(supported)} bitwise equal")
    # int4 likewise: every ISA forms each group's exact sum, scales it and adds it in group order, as the reference
    # does, so all give its bits. N = 37 and 53: whole blocks of 16 rows and a partial last one, in the AVX-512
    # prefill's tiles of three blocks and in decode's pairs; 13 tokens: tiles of 4 and a remainder of 1.
    same = True
    for group in (32, 64, 128):
        for T, N in ((1, 37), (13, 53)):
            x, w = rng.standard_normal((T, 333)).astype(f32), rng.standard_normal((N, 333)).astype(f32)
            outs = [run([x, w], isa, wtype="int4", group=group) for isa in supported]
            same &= all(o is not None and np.array_equal(o, outs[0]) for o in outs)
    check(same, f"int4 g32/g64/g128: {', '.join(supported)} bitwise equal (1 and 13 tokens, 37 and 53 rows)")
    # The same with activations that stress the quantizer (AVX-512 has its own, meant to give the scalar one's
    # bits): exact rounding ties (x.5 after scaling by 127 / amax), an all-zero row, values 1e30 apart, a row of one
    # value. (q8_0 shares the quantizer, but its per-block float sums are ordered per ISA, so it is not bitwise.)
    x = np.zeros((5, 333), f32)
    x[0] = (np.arange(333) % 255 - 127) / 2.0 * (127 / 63.5) / 127 * 63.5  # codes at exact halves
    x[2] = rng.standard_normal(333) * np.where(np.arange(333) % 7 == 0, 1e15, 1e-15)
    x[3] = 0.25
    x[4] = rng.standard_normal(333)
    x[4, ::11] = 0.0
    w = rng.standard_normal((9, 333)).astype(f32)
    outs = [run([x, w], isa, wtype="int8") for isa in supported]
    check(all(o is not None and np.array_equal(o, outs[0]) for o in outs),
          f"int8: {', '.join(supported)} bitwise equal on quantizer edge cases (ties, zeros, 1e30 range)")
    # The activation quantizers themselves, per token (int8/int4 weights) and per 32 columns (GGUF weights): each
    # ISA's codes and scales bitwise quant_rows', over every tail length and the edge cases above, plus spans too
    # small for a finite 1 / d (largest magnitude under ~3.7e-37) and a row's input_scale.
    def act_quant(x, isa, s=None, blocks=False):
        out = os.path.join(DIR, "aq.npy")
        args = ["act_quant", out, save(x)] + ([save(s), "input_scale=1"] if s is not None else [])
        r = op_runner(args + (["blocks=1"] if blocks else []), isa)
        return np.load(out).astype(np.float64) if r.returncode == 0 else None

    def edge_rows(K):
        x = np.zeros((8, K), f32)
        x[0] = (np.arange(K) % 255 - 127) / 2.0  # codes at exact halves
        x[2] = rng.standard_normal(K) * np.where(np.arange(K) % 7 == 0, 1e15, 1e-15)
        x[3] = 0.25
        x[4] = rng.standard_normal(K)
        x[4, ::11] = 0.0
        x[5] = rng.standard_normal(K) * 1e-38  # subnormal d: no finite inverse
        x[6] = rng.standard_normal(K) * np.where(np.arange(K) % 64 < 32, 1.0, 1e-38)
        x[7] = rng.standard_normal(K) * 1e3
        # A NaN, +inf or -inf in the last 32-column span (and values near the float limit, which an input_scale
        # above 1 takes past it): those spans get d = NaN and zero codes, the others are untouched.
        special = np.tile(rng.standard_normal(K).astype(f32), (4, 1))
        for r, v in enumerate((np.nan, np.inf, -np.inf)):
            special[r, K - 1 - (r * 5) % min(K, 32)] = v
            # And one in an early span: the AVX-512 block quantizer takes 16 blocks at a time before its tail.
            if K > 64:
                special[r, 33 + 7 * r] = v
        special[3, (K - 1) // 2] = f32(3e38)
        return np.concatenate([x, special]).astype(f32)

    bad = []
    for K in (1, 7, 8, 9, 31, 32, 33, 45, 64, 100, 333):
        x, s = edge_rows(K), rng.uniform(0.25, 4.0, K).astype(f32)
        for isa in supported:
            for scale in (None, s):
                got = act_quant(x, isa, scale)
                with np.errstate(over="ignore", invalid="ignore"):
                    q, d = quant_rows((x * scale).astype(f32) if scale is not None else x, K)
                if got is None or not (np.array_equal(got[:, :K], q) and np.array_equal(got[:, K:], d, equal_nan=True)):
                    bad.append(f"{isa} per token K={K}{' input_scale' if scale is not None else ''}")
    for K in (32, 96, 2112):
        x = edge_rows(K)
        q, d = quant_rows(x, 32)
        for isa in supported:
            got = act_quant(x, isa, blocks=True)
            if got is None or not (np.array_equal(got[:, :K], q) and np.array_equal(got[:, K:], d, equal_nan=True)):
                bad.append(f"{isa} per block K={K}")
    check(not bad, f"activation int8 codes and scales bitwise the NumPy reference in {', '.join(supported)}, per token "
          f"(K = 1..333, with and without input_scale) and per 32 columns (ties, zeros, 1e30 range, d subnormal, "
          f"NaN and infinities)"
          + (f"; differ: {bad}" if bad else ""))
    # Activation-aware scaling: the input_scale multiplies activations and divides weight columns.
    s = rng.uniform(0.25, 4.0, 200).astype(f32)
    x, w = rng.standard_normal((4, 200)).astype(f32), rng.standard_normal((6, 200)).astype(f32)
    for isa in supported:
        e8 = scaled_err(run([x, w, s], isa, wtype="int8", input_scale=1), ref_int8(x, w, s)) / gamma(3)
        e4 = scaled_err(run([x, w, s], isa, wtype="int4", group=64, input_scale=1), ref_int4(x, w, 64, s))
        e4 /= gamma(int4_rounds(64)(200))
        check(e8 <= 1 and e4 <= 1, f"input_scale {isa}: int8 err {e8:.2g}, int4 err {e4:.2g} of their bounds")
    finish()


if __name__ == "__main__":
    main()
