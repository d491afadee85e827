"""The training kernels (ops.h "Training") against PyTorch autograd in float64 on the same f32 inputs: each forward is
written in torch and torch.autograd.grad gives the reference gradients. Odd shapes (1, 3, 17, 33, 65), grouped-query
attention with odd-even head sizes and sliding windows, rows the loss ignores, chunks that do not divide the rows.
Parameter gradients start non-zero, so a kernel that wrote them instead of adding to them fails. Every ISA variant
this CPU runs is checked (the batched attention forward dispatches to the SIMD kernels). Also: results do not depend
on the thread count (bitwise), outputs written over dy's buffer where ops.h allows it give the same bits, and bad ids
or targets are refused naming the row."""
import math
import os
import re

import numpy as np
import torch
import torch.nn.functional as F

from common import ISAS, check, finish, isa_variants, op_runner, tmpdir

torch.manual_seed(0)
DIR = tmpdir()
_n = 0


def save(t):
    global _n
    _n += 1
    path = os.path.join(DIR, f"in{_n}.npy")
    np.save(path, t.numpy())
    return path


def run_op(name, inputs, isa=None, **attrs):
    """op_runner's op: its flat output as float64 and its stdout, or (None, stderr) when it failed."""
    out = os.path.join(DIR, "out.npy")
    args = [name, out] + [save(t) for t in inputs] + [f"{k}={v}" for k, v in attrs.items()]
    r = op_runner(args, isa, what=name)
    if r.returncode != 0:
        return None, r.stderr
    return torch.from_numpy(np.load(out)).double(), r.stdout


def op(name, inputs, isa=None, **attrs):
    return run_op(name, inputs, isa, **attrs)[0]


def split(flat, *shapes):
    """flat cut into tensors of the given shapes, in order; None when the sizes do not add up."""
    if flat is None or flat.numel() != sum(math.prod(s) for s in shapes):
        return [None] * len(shapes)
    parts, at = [], 0
    for s in shapes:
        n = math.prod(s)
        parts.append(flat[at:at + n].reshape(s))
        at += n
    return parts


def expect(what, got, ref, tol=1e-5):
    ok = got is not None and got.shape == ref.shape
    err = ((got - ref).abs() / (ref.abs() + 1.0)).max().item() if ok and ref.numel() else (0.0 if ok else math.inf)
    check(ok and err < tol, f"{what} (max scaled err {err:.1e} < {tol:.0e})")


def rand(*shape, scale=1.0):
    return torch.randn(*shape) * scale


def grads(fn, inputs, dy):
    """torch.autograd.grad of fn over the f32 inputs taken to float64, with output gradient dy."""
    xs = [t.double().requires_grad_() for t in inputs]
    return torch.autograd.grad(fn(*xs), xs, dy.double())


# --- torch forwards ------------------------------------------------------------------------------------------------

def rope_torch(x, pos, D, style):
    T, HD = x.shape
    inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = (pos.float()[:, None] * inv[None, :]).double()  # f32 angles, as HF computes them
    xh = x.view(T, HD // D, D)
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    if style == "half":
        a, b = xh[..., :D // 2], xh[..., D // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).reshape(T, HD)
    a, b = xh[..., 0::2], xh[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], -1).reshape(T, HD)


def attention_torch(q, k, v, B, H, Hkv, window):
    BT, HD = q.shape
    T, D = BT // B, HD // H
    qp = q.view(B, T, H, D).transpose(1, 2)
    kp = k.view(B, T, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    vp = v.view(B, T, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    qpos, kpos = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allow = kpos <= qpos
    if window:
        allow &= (qpos - kpos) < window
    s = (qp @ kp.transpose(-1, -2)) / math.sqrt(D)
    a = torch.softmax(s.masked_fill(~allow, float("-inf")), -1) @ vp
    return a.transpose(1, 2).reshape(BT, HD)


def ce_torch(x, w, targets):
    logits = x @ w.T
    keep = targets >= 0
    return -torch.log_softmax(logits[keep], -1).gather(1, targets[keep].long()[:, None]).sum()


# --- the checks, under one ISA variant -----------------------------------------------------------------------------

def check_all(isa):
    tag = f"ASCENT_ISA={isa}:"
    for V, C, T in [(1, 1, 1), (17, 3, 33), (65, 10, 17)]:
        dy, ids, d0 = rand(T, C), torch.randint(0, V, (T,), dtype=torch.int32), rand(V, C)
        (ref,) = grads(lambda t: F.embedding(ids.long(), t), [d0], dy)
        expect(f"{tag} embedding_backward V={V} C={C} T={T}", op("embedding_backward", [dy, ids, d0], isa),
               (d0.double() + ref).reshape(-1))
    for T, C, P in [(1, 1, 1), (3, 17, 17), (17, 12, 6), (33, 130, 10), (65, 64, 64)]:
        x, w, dy, dw0 = rand(T, C), rand(P), rand(T, C), rand(P)
        dx, dw = split(op("mul_vec_backward", [x, w, dy, dw0], isa), (T, C), (P,))
        rx, rw = grads(lambda x, w: (x.view(T, C // P, P) * w).view(T, C), [x, w], dy)
        expect(f"{tag} mul_vec_backward T={T} C={C} P={P} dx", dx, rx)
        expect(f"{tag} mul_vec_backward T={T} C={C} P={P} dw +=", dw, dw0.double() + rw)
    for T, C, G in [(1, 1, 1), (3, 17, 17), (17, 60, 6), (33, 65, 65), (65, 40, 10)]:
        x, w, dy, dw0 = rand(T, C, scale=2.0), rand(G), rand(T, C), rand(G)

        def rms(x, w=None):
            xg = x.view(T, C // G, G)
            y = xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + 1e-5)
            return (y * w if w is not None else y).view(T, C)

        dx, dw = split(op("rms_norm_backward", [x, w, dy, dw0], isa, group=G, eps=1e-5), (T, C), (G,))
        rx, rw = grads(rms, [x, w], dy)
        expect(f"{tag} rms_norm_backward T={T} C={C} group={G} dx", dx, rx)
        expect(f"{tag} rms_norm_backward T={T} C={C} group={G} dw +=", dw, dw0.double() + rw)
        (bare,) = split(op("rms_norm_backward", [x, dy], isa, group=G, eps=1e-5, bare=1), (T, C))
        expect(f"{tag} rms_norm_backward T={T} C={C} group={G} without a weight", bare, grads(rms, [x], dy)[0])
    for T, C in [(1, 3), (3, 17), (33, 65), (65, 130)]:
        x, w, dy, dw0, db0 = rand(T, C, scale=3.0), rand(C), rand(T, C), rand(C), rand(C)
        b = rand(C)
        dx, dw, db = split(op("layer_norm_backward", [x, w, dy, dw0, db0], isa, eps=1e-5), (T, C), (C,), (C,))
        rx, rw, rb = grads(lambda x, w, b: F.layer_norm(x, (C,), w, b, 1e-5), [x, w, b], dy)
        expect(f"{tag} layer_norm_backward T={T} C={C} dx", dx, rx)
        expect(f"{tag} layer_norm_backward T={T} C={C} dw +=", dw, dw0.double() + rw)
        expect(f"{tag} layer_norm_backward T={T} C={C} db +=", db, db0.double() + rb)
    for T, H, D in [(1, 1, 2), (3, 3, 6), (17, 2, 10), (33, 4, 64)]:
        dy, x = rand(T, H * D), rand(T, H * D)
        pos = torch.randint(0, 4097, (T,), dtype=torch.int32)
        for style in ("half", "interleaved"):
            (ref,) = grads(lambda x: rope_torch(x, pos, D, style), [x], dy)
            expect(f"{tag} rope_backward {style} T={T} H={H} D={D}",
                   op("rope_backward", [dy, pos], isa, dim=D, theta=10000.0, style=style), ref.reshape(-1))
    for B, T, H, Hkv, D, window in [(1, 1, 1, 1, 6, 0), (2, 17, 6, 2, 6, 0), (1, 33, 6, 2, 10, 5),
                                    (3, 17, 4, 4, 10, 0), (2, 65, 6, 6, 6, 7), (1, 65, 6, 2, 10, 0),
                                    (2, 3, 6, 2, 10, 1)]:
        q, k, v, dout = rand(B * T, H * D), rand(B * T, Hkv * D), rand(B * T, Hkv * D), rand(B * T, H * D)
        a = dict(batch=B, heads=H, kv_heads=Hkv, window=window)
        what = f"B={B} T={T} H={H}/{Hkv} D={D} window={window}"
        with torch.no_grad():
            ref_out = attention_torch(q.double(), k.double(), v.double(), B, H, Hkv, window)
        expect(f"{tag} attention_train_forward {what}", op("attention_train_forward", [q, k, v], isa, **a),
               ref_out.reshape(-1))
        dq, dk, dv = split(op("attention_backward", [q, k, v, dout], isa, **a), (B * T, H * D), (B * T, Hkv * D),
                           (B * T, Hkv * D))
        rq, rk, rv = grads(lambda q, k, v: attention_torch(q, k, v, B, H, Hkv, window), [q, k, v], dout)
        expect(f"{tag} attention_backward {what} dq", dq, rq)
        expect(f"{tag} attention_backward {what} dk", dk, rk)
        expect(f"{tag} attention_backward {what} dv", dv, rv)
    for n in [1, 17, 4097, 20000]:  # 20000 takes the threaded path
        x, g, u, dy = rand(n, scale=3.0), rand(n, scale=3.0), rand(n, scale=3.0), rand(n)
        (rx,) = grads(lambda x: F.gelu(x, approximate="tanh"), [x], dy)
        expect(f"{tag} gelu_tanh_backward n={n}", op("gelu_tanh_backward", [x, dy], isa), rx)
        dg, du = split(op("swiglu_backward", [g, u, dy], isa), (n,), (n,))
        rg, ru = grads(lambda g, u: F.silu(g) * u, [g, u], dy)
        expect(f"{tag} swiglu_backward n={n} dgate", dg, rg)
        expect(f"{tag} swiglu_backward n={n} dup", du, ru)
    for R, C, V, chunk in [(1, 3, 5, 64), (3, 1, 1, 2), (17, 6, 33, 5), (33, 10, 65, 7), (65, 17, 130, 64)]:
        x, w, dw0 = rand(R, C), rand(V, C), rand(V, C)
        targets = torch.randint(0, V, (R,), dtype=torch.int32)
        targets[torch.rand(R) < 0.3] = -100
        if R > 1:
            targets[1] = -1
        scale = 0.37
        flat, out = run_op("lm_head_cross_entropy", [x, w, targets, dw0], isa, loss_scale=scale, chunk=chunk)
        dx, dw = split(flat, (R, C), (V, C))
        rx, rw = grads(lambda x, w: scale * ce_torch(x, w, targets), [x, w], torch.tensor(1.0))
        with torch.no_grad():
            ref_loss = ce_torch(x.double(), w.double(), targets).item()
        m = re.search(r"^loss (\S+)$", out, re.M) if flat is not None else None
        loss = float(m.group(1)) if m else math.inf
        what = f"R={R} C={C} V={V} chunk={chunk} ({int((targets < 0).sum())} rows ignored)"
        check(abs(loss - ref_loss) <= 1e-5 * (abs(ref_loss) + 1),
              f"{tag} lm_head_cross_entropy {what} loss {loss:.9g} vs {ref_loss:.9g}")
        expect(f"{tag} lm_head_cross_entropy {what} dx", dx, rx)
        expect(f"{tag} lm_head_cross_entropy {what} dw +=", dw, dw0.double() + rw)
        # dw_zero: dw is taken to hold zeros, so the first chunk overwrites it (what it held is gone) and the rest add.
        flat, _ = run_op("lm_head_cross_entropy", [x, w, targets, dw0], isa, loss_scale=scale, chunk=chunk, dw_zero=1)
        _, dw = split(flat, (R, C), (V, C))
        expect(f"{tag} lm_head_cross_entropy {what} dw_zero", dw, rw)
        flat, out = run_op("lm_head_cross_entropy", [x, w, targets], isa, loss_scale=scale, chunk=chunk, grad=0)
        m = re.search(r"^loss (\S+)$", out, re.M) if flat is not None else None
        check(m is not None and float(m.group(1)) == loss, f"{tag} lm_head_cross_entropy {what}: the loss alone "
              "(no gradients) is the same")


def main():
    probe = save(rand(3))
    variants = isa_variants(lambda isa: op_runner(["silu", os.path.join(DIR, "probe.npy"), probe], isa), ISAS)
    check(len(variants) >= 1, "at least one ISA variant runs here")
    for isa in variants:
        check_all(isa)

    # Results do not depend on the thread count: every kernel, bitwise, on 1 and on 3 threads.
    T, C, G, B, S, H, Hkv, D, V = 65, 60, 6, 2, 33, 6, 2, 10, 130
    x, w, dy = rand(T, C), rand(G), rand(T, C)
    ids, pos = torch.randint(0, V, (T,), dtype=torch.int32), torch.randint(0, 999, (T,), dtype=torch.int32)
    q, k, v = rand(B * S, H * D), rand(B * S, Hkv * D), rand(B * S, Hkv * D)
    big = rand(40000)
    targets = torch.randint(-1, V, (T,), dtype=torch.int32)
    cases = [("embedding_backward", [dy, ids, rand(V, C)], {}),
             ("mul_vec_backward", [x, w, dy, rand(G)], {}),
             ("rms_norm_backward", [x, w, dy, rand(G)], dict(group=G, eps=1e-5)),
             ("layer_norm_backward", [x, rand(C), dy, rand(C), rand(C)], dict(eps=1e-5)),
             ("rope_backward", [dy, pos], dict(dim=G, theta=10000.0, style="half")),
             ("attention_backward", [q, k, v, rand(B * S, H * D)], dict(batch=B, heads=H, kv_heads=Hkv, window=0)),
             ("gelu_tanh_backward", [big, rand(40000)], {}),
             ("swiglu_backward", [big, rand(40000), rand(40000)], {}),
             ("lm_head_cross_entropy", [x, rand(V, C), targets, rand(V, C)], dict(loss_scale=0.5, chunk=16))]
    for name, inputs, attrs in cases:
        one, out1 = run_op(name, inputs, threads=1, **attrs)
        three, out3 = run_op(name, inputs, threads=3, **attrs)
        check(one is not None and three is not None and torch.equal(one, three) and
              re.findall(r"^loss .*$", out1, re.M) == re.findall(r"^loss .*$", out3, re.M),
              f"{name}: the same bits on 1 and 3 threads")

    # LayerNorm's SIMD rows keep the reference's double sums in the reference's order (norm_avx512.cc): the same bits on
    # every ISA variant, forward and backward, rows whose width is not a multiple of 8 included.
    for width in (61, 768):
        x_, w_, b_, dy_ = rand(17, width), rand(width), rand(width), rand(17, width)
        for name, inputs, attrs in [("layer_norm", [x_, w_, b_], dict(eps=1e-5)),
                                    ("layer_norm_backward", [x_, w_, dy_, rand(width), rand(width)], dict(eps=1e-5))]:
            outs = [op(name, inputs, isa, **attrs) for isa in variants]
            check(all(o is not None and torch.equal(o, outs[0]) for o in outs),
                  f"{name} C={width}: the same bits on {', '.join(str(v) for v in variants)}")

    # dx written over dy's buffer, where ops.h allows it, gives the same bits.
    for name, inputs, attrs, alias in [("rms_norm_backward", [x, w, dy, rand(G)], dict(group=G, eps=1e-5), "1"),
                                       ("layer_norm_backward", [x, rand(C), dy, rand(C), rand(C)], dict(eps=1e-5), "1"),
                                       ("gelu_tanh_backward", [big, rand(40000)], {}, "1"),
                                       ("swiglu_backward", [big, rand(40000), rand(40000)], {}, "gate"),
                                       ("swiglu_backward", [big, rand(40000), rand(40000)], {}, "up")]:
        apart = op(name, inputs, **attrs)
        over = op(name, inputs, alias=alias, **attrs)
        check(apart is not None and over is not None and torch.equal(apart, over),
              f"{name}: output over dy's buffer ({alias}) == apart, bitwise")

    # Bad ids and targets: refused, naming them, before anything is written.
    _, err = run_op("embedding_backward", [rand(3, 4), torch.tensor([0, 5, 1], dtype=torch.int32), rand(5, 4)])
    check("token id 5 at position 1" in err, f"embedding_backward refuses id 5 of a vocabulary of 5: {err.strip()}")
    bad = torch.tensor([0, -1, 7, 2], dtype=torch.int32)
    _, err = run_op("lm_head_cross_entropy", [rand(4, 3), rand(7, 3), bad, rand(7, 3)], loss_scale=1.0, chunk=2)
    check("target 7 of row 2" in err, f"lm_head_cross_entropy refuses target 7 of a vocabulary of 7: {err.strip()}")
    finish()


if __name__ == "__main__":
    main()
