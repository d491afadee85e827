"""kernels::sgemm (and sgemm_bf16, sgemm_f16) against PyTorch float64 over odd shapes, the four transpose combinations
and beta 0 (over a C of NaN, which must not leak), 1 and 0.5, in every ISA variant. sgemm.h promises one summation
order (an FMA chain over k from beta * c), so beyond the error bound this checks that every variant gives the same
bits, that 1 and 2 threads do, and that a row's result does not depend on the other rows in the call. sgemm_f16's
operands beyond fp16's range become infinities, as an fp16 matmul's would."""
import os

import numpy as np
import torch

from common import check, finish, gamma, isa_variants, op_runner, tmpdir

torch.manual_seed(0)
DIR = tmpdir()
_n = 0

# Odd sizes in each dimension, then GPT-2-124M's training products scaled down 4x (768 -> 192, 3072 -> 768,
# 256 rows -> 64): forward (B transposed), input gradient, weight gradient (A transposed, beta 1), the LM head.
SHAPES = [(s, 17, 33) for s in (1, 3, 17, 31, 33, 65, 257)] + [(3, s, 65) for s in (1, 31, 33, 257)] + \
    [(31, 33, s) for s in (1, 3, 17, 257, 1000)] + [(257, 65, 257), (65, 257, 31)]
GPT2 = [(64, 576, 192, 0, 1, 0.0), (64, 192, 768, 0, 1, 0.0), (64, 192, 576, 0, 0, 0.0), (64, 768, 192, 0, 0, 0.0),
        (576, 192, 64, 1, 0, 1.0), (192, 768, 64, 1, 0, 1.0), (16, 4099, 192, 0, 1, 0.0)]


def save(a):
    global _n
    _n += 1
    path = os.path.join(DIR, f"in{_n}.npy")
    np.save(path, np.ascontiguousarray(a.numpy().astype(np.float32)))
    return path


def operands(M, N, K, ta, tb, beta):
    a = torch.randn(K, M) if ta else torch.randn(M, K)
    b = torch.randn(N, K) if tb else torch.randn(K, N)
    c = torch.full((M, N), float("nan")) if beta == 0 else torch.randn(M, N)
    return a, b, c


def sgemm(a, b, c, ta, tb, beta, isa=None, what=None, **attrs):
    out = os.path.join(DIR, "out.npy")
    args = ["sgemm", out, save(a), save(b), save(c), f"ta={ta}", f"tb={tb}", f"beta={beta}"]
    r = op_runner(args + [f"{k}={v}" for k, v in attrs.items()], isa, what=what)
    return torch.from_numpy(np.load(out)) if r.returncode == 0 else None


def within_bound(got, a, b, c, ta, tb, beta, bf16=False, f16=False):
    """Whether got is op(A) op(B) + beta C to within the FMA chain's bound: K + 2 roundings (beta * c, one per k)
    of the sum of the magnitudes. With bf16 (f16), op(A) and op(B) are first rounded to bf16 (fp16) by torch;
    the products are exact in f32."""
    if got is None:
        return False, float("inf")
    if bf16:
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    if f16:
        a, b = a.half(), b.half()
    A, B, C = a.double(), b.double(), c.double()
    A, B = (A.T if ta else A), (B.T if tb else B)
    bc = beta * C if beta != 0 else torch.zeros_like(C)
    ref = A @ B + bc
    bound = gamma(A.shape[1] + 2) * (A.abs() @ B.abs() + bc.abs()) + 1e-30
    err = ((got.double() - ref).abs() / bound).max().item() if ref.numel() else 0.0
    return bool(torch.isfinite(got).all()) and err <= 1.0, err


def same_bits(x, y):
    return x is not None and y is not None and x.shape == y.shape and torch.equal(x.view(torch.int32), y.view(torch.int32))


def main():
    probe_a = save(torch.ones(2, 3))
    isas = isa_variants(lambda isa: op_runner(["sgemm", os.path.join(DIR, "p.npy"), probe_a, probe_a, "ta=0",
                                               "tb=1", "beta=0"], isa))
    cases = []
    for i, (M, N, K) in enumerate(SHAPES):
        for ta in (0, 1):
            for tb in (0, 1):
                cases.append((M, N, K, ta, tb, (0.0, 1.0, 0.5)[(i + 2 * ta + tb) % 3]))
    cases += GPT2
    for name in ("sgemm", "sgemm_bf16", "sgemm_f16"):
        bf16, f16 = int(name == "sgemm_bf16"), int(name == "sgemm_f16")
        for M, N, K, ta, tb, beta in cases:
            a, b, c = operands(M, N, K, ta, tb, beta)
            first = None
            for isa in isas:
                got = sgemm(a, b, c, ta, tb, beta, isa, name, bf16=bf16, f16=f16)
                ok, err = within_bound(got, a, b, c, ta, tb, beta, bf16=bf16, f16=f16)
                check(ok, f"{name} {isa} M={M} N={N} K={K} ta={ta} tb={tb} beta={beta} (err {err:.2f} of bound)")
                if bf16 and isa == "avx512":
                    continue  # vdpbf16ps adds a pair of products per step: its own order, not the FMA chain's
                if first is None:
                    first = (isa, got)
                elif got is not None:
                    check(same_bits(got, first[1]), f"{name} {isa} gives {first[0]}'s bits: M={M} N={N} K={K} "
                          f"ta={ta} tb={tb}")

        # Threads and batch: shapes that split N across threads, and ones that split M (N too narrow for two).
        for isa in isas:
            for M, N, K, ta, tb in [(257, 4099, 65, 0, 1), (1031, 17, 300, 1, 0), (257, 200, 257, 0, 0),
                                    (64, 1500, 192, 0, 1)]:
                a, b, c = operands(M, N, K, ta, tb, 1.0)
                one = sgemm(a, b, c, ta, tb, 1.0, isa, name, threads=1, bf16=bf16, f16=f16)
                two = sgemm(a, b, c, ta, tb, 1.0, isa, name, threads=2, bf16=bf16, f16=f16)
                check(same_bits(one, two), f"{name} {isa} M={M} N={N} K={K} ta={ta} tb={tb}: 1 and 2 threads give "
                      "the same bits")
                for i in (0, 13, M - 1):
                    ai = a[:, i:i + 1] if ta else a[i:i + 1]
                    row = sgemm(ai, b, c[i:i + 1], ta, tb, 1.0, isa, name, threads=2, bf16=bf16, f16=f16)
                    check(row is not None and same_bits(row[0], two[i]), f"{name} {isa} M={M} N={N} K={K} ta={ta} "
                          f"tb={tb}: row {i} alone equals row {i} of the whole")

    # fp16's edges, in A and in B: past the largest half (65520 and up round to infinity, 65519.99 to 65504), below
    # half the smallest subnormal (1e-8 rounds to zero), ties (1.5 * 2^-24 rounds to 2^-23, 1 + 2^-11 to 1).
    a = torch.tensor([[70000.0, 1.0], [65504.0, 1.0], [1e-8, 1.0], [1.5 * 2**-24, 0.0], [1 + 2**-11, 0.0],
                      [65519.99, 0.0], [65520.0, 0.0]])
    b = torch.tensor([[1.0, 2.0, 1.5 * 2**-24], [0.0, 1.0, 1 + 2**-11]])
    want = (a.half().double() @ b.half().double()).float()
    for isa in isas:
        got = sgemm(a, b, torch.zeros(7, 3), 0, 0, 0.0, isa, "sgemm_f16", f16=1)
        check(got is not None and torch.equal(got, want), f"sgemm_f16 {isa}: operands at fp16's edges round as torch's "
              f"half does: {got.tolist() if got is not None else None} vs {want.tolist()}")

    # Bad input: a clear error naming the mismatch, not a crash.
    r = op_runner(["sgemm", os.path.join(DIR, "bad.npy"), save(torch.ones(3, 4)), save(torch.ones(5, 6)), "ta=0",
                   "tb=0", "beta=0"])
    check(r.returncode != 0 and "op(A) is 3x4 but op(B) is 5x6" in r.stderr, "sgemm: mismatched shapes are refused")
    finish()


if __name__ == "__main__":
    main()
