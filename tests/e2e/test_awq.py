"""Calibrated int4 (quant/awq.h: `ascent quantize --type int4 --calib`) against a NumPy implementation written here
from awq.h's contract and quantize.h's int4 rounding. Per input channel, s = max(mean|x|, 1e-4)^alpha for alpha in
1/20 .. 1, normalised so that sqrt(min s * max s) is 1. An alpha is kept where it lowers the output error
|| X W^T - X Wq^T ||^2 / || X W^T ||^2 below round to nearest's. Then each (row, group) takes the clip ratio 1, 0.95
.. 0.5 whose residual w - q gives the least sum over rows of (x . (w - q))^2, kept where the whole matrix's error
drops. X is the first 256 calibration rows; the mean is over all of them.

Small matrices run through op_runner on the same rows as the NumPy side: the same alpha, input scale, group scales
and codes. On story-656K the model's activations on the calibration text come from the PyTorch reference. Over
them, every calibrated matrix's output error is below round to nearest's and equals the NumPy calibration's, with
the alpha `quantize` reports (to 1e-5: the reference's activations are float64, Ascent's f32)."""
import json
import os
import re

import numpy as np
import torch

from common import SHARED, check, finish, op_runner, read_safetensors, reference_logits, run, tmpdir
from test_quantize import read_ascent

DIR = tmpdir()
M656 = os.path.join(SHARED, "models", "story-656K")
f32 = np.float32
CAP = 256  # calibration rows kept per matrix (CalibRows::cap)


def quant_int4(w, group, clip=None):
    """int4 codes (N, Kp) in [-8, 7] and scales (N, G) of f32 rows w (N, Kp). Per group, the signed value of largest
    magnitude (the first such) times the clip ratio maps to -8: d = vmax * clip / -8. Codes round x * (1 / d) half to
    even, where 1 / d counts as 0 if d = 0 or it is not finite."""
    N, Kp = w.shape
    g = w.reshape(N, Kp // group, group)
    vmax = np.take_along_axis(g, np.abs(g).argmax(axis=2)[:, :, None], axis=2)[:, :, 0]
    ratio = np.ones_like(vmax) if clip is None else clip.astype(f32)
    d = ((vmax * ratio).astype(f32) / f32(-8)).astype(f32)
    with np.errstate(divide="ignore", over="ignore"):
        inv = (f32(1) / np.where(d != 0, d, f32(1))).astype(f32)
    inv = np.where((d != 0) & np.isfinite(inv), inv, f32(0)).astype(f32)
    q = np.clip(np.rint((g * inv[:, :, None]).astype(f32)), -8, 7)
    return q.reshape(N, Kp), d


def power(mean, alpha):
    """max(mean, 1e-4)^alpha in f32, rounded once from float64 as glibc's powf rounds (NumPy's own float32 power is
    a last bit off for a fifth of these values)."""
    return (np.maximum(mean, f32(1e-4)).astype(np.float64) ** float(alpha)).astype(f32)


def awq(w, x_all, group):
    """The NumPy calibration of weight w (N, K) on rows x_all (R, K): (alpha, input_scale or None, codes (N, K),
    scales (N, G), errors (round to nearest, scaled, final), margin), errors as awq.h defines them, in float64;
    margin, how far the next best alpha's error (or round to nearest's) is from the chosen one's, relative."""
    N, K = w.shape
    Kp = -(-K // 128) * 128
    G = Kp // group
    x = x_all[:CAP]
    mean = (np.abs(x_all).astype(np.float64).sum(axis=0) / len(x_all)).astype(f32)
    y = x.astype(np.float64) @ w.astype(np.float64).T
    pad = lambda a: np.pad(a, ((0, 0), (0, Kp - K)))

    def decoded(q, d, inv):  # the effective weight: codes times scales, times the input scale
        wq = (q * np.repeat(d, group, axis=1).astype(np.float64))[:, :K]
        return wq * inv.astype(np.float64)[None, :] if inv is not None else wq

    def err(wq):
        return float(((y - x.astype(np.float64) @ wq.T) ** 2).sum() / (y ** 2).sum())

    q, d = quant_int4(pad(w), group)
    best = {"alpha": 0.0, "inv": None, "q": q, "d": d}
    e_rtn = e_scaled = err(decoded(q, d, None))
    tried = [e_rtn]
    for a in range(1, 21):
        alpha = f32(a) / f32(20)
        s = power(mean, alpha)
        inv = (np.sqrt(s.min() * s.max()).astype(f32) / s).astype(f32)
        q, d = quant_int4(pad((w / inv).astype(f32)), group)
        tried.append(err(decoded(q, d, inv)))
        if tried[-1] < e_scaled:
            e_scaled, best = tried[-1], {"alpha": float(alpha), "inv": inv, "q": q, "d": d}
    margin = min(abs(e - e_scaled) for e in tried if e != e_scaled) / e_scaled
    # Clip search on the chosen scaling: each (row, group)'s residual against the scaled rows.
    inv = best["inv"]
    ws = pad((w / inv).astype(f32) if inv is not None else w)
    xs = pad((x * inv).astype(f32) if inv is not None else x).astype(np.float64)
    errs = []
    for step in range(11):
        ratio = f32(1) - f32(0.05) * f32(step)
        q, d = quant_int4(ws, group, np.full((N, G), ratio, f32))
        res = (ws - (np.repeat(d, group, axis=1) * q).astype(f32)).astype(np.float64)
        errs.append(np.stack([((xs[:, g * group:(g + 1) * group] @ res[:, g * group:(g + 1) * group].T) ** 2).sum(0)
                              for g in range(G)], axis=1))
    errs = np.stack(errs)  # (step, N, G)
    clip = (f32(1) - f32(0.05) * errs.argmin(axis=0).astype(f32)).astype(f32)
    q, d = quant_int4(ws, group, clip)
    e_final = err(decoded(q, d, inv))
    if e_final < e_scaled:
        best["q"], best["d"] = q, d
    else:
        e_final = e_scaled
    return best["alpha"], inv, best["q"][:, :K], best["d"], (e_rtn, e_scaled, e_final), margin


def save(a):
    path = os.path.join(DIR, f"in{len(os.listdir(DIR))}.npy")
    np.save(path, a)
    return path


def small_matrices():
    """awq_int4 through op_runner on the same rows as the NumPy calibration: channels of very different typical
    size (the case activation-aware scaling is for), more rows than the cap, K with and without a padded group."""
    rng = np.random.default_rng(7)
    for N, K, R, group in ((24, 200, 300, 64), (16, 256, 260, 32), (20, 384, 64, 128)):
        w = rng.standard_normal((N, K)).astype(f32)
        x = (rng.standard_normal((R, K)) * np.exp(rng.normal(0.0, 1.2, K))).astype(f32)
        out = os.path.join(DIR, "awq.npy")
        r = op_runner(["awq", out, save(w), save(x), f"group={group}"])
        what = f"awq N={N} K={K} R={R} group={group}"
        if r.returncode != 0:
            check(False, f"{what}: op_runner failed")
            continue
        got = np.load(out)
        m = re.search(r"alpha (\S+) err_rtn (\S+) err_scaled (\S+) err_final (\S+)", r.stdout)
        alpha, e_rtn, e_scaled, e_final = f32(m.group(1)), *(float(v) for v in m.groups()[1:])
        G = got.shape[1] - K
        codes, scales, input_scale = got[:N, :K], got[:N, K:], got[N, :K]
        ref_alpha, ref_inv, ref_codes, ref_scales, ref_errs, margin = awq(w, x, group)
        # awq.h compares errors of f32 outputs: a margin under 1e-3 could flip with their rounding.
        check(margin > 1e-3 and ref_alpha > 0 and ref_errs[2] < ref_errs[1] < ref_errs[0],
              f"{what}: the test data separates the choices (next alpha {margin:.1e} off) and calibration pays: "
              f"reference errors {ref_errs[0]:.4f} -> {ref_errs[1]:.4f} (alpha {ref_alpha:.2f}) -> {ref_errs[2]:.4f}")
        check(alpha == f32(ref_alpha) and np.array_equal(input_scale, ref_inv if ref_inv is not None else np.ones(K)),
              f"{what}: alpha {alpha:.2f} and the input scale are the reference's")
        check(G == ref_scales.shape[1] and np.array_equal(scales, ref_scales) and np.array_equal(codes, ref_codes),
              f"{what}: group scales (so clip ratios) and codes are the reference's "
              f"({int((scales != ref_scales).sum()) if G == ref_scales.shape[1] else 'shape'} scales, "
              f"{int((codes != ref_codes).sum())} codes differ)")
        # awq.h's errors come from f32 outputs, the reference's from float64 ones.
        close = all(abs(a - b) <= 1e-4 * b for a, b in zip((e_rtn, e_scaled, e_final), ref_errs))
        check(close, f"{what}: reported errors {e_rtn:.6f} -> {e_scaled:.6f} -> {e_final:.6f} are the reference's "
                     f"{ref_errs[0]:.6f} -> {ref_errs[1]:.6f} -> {ref_errs[2]:.6f}")


# Each matmul input in the order reference_logits multiplies them (per layer q, k, v, o, gate, up, down; then the
# output head), by the matrices' names in an Ascent file.
LAYER_MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def model_activations(cfg, w, ids, chunk):
    """Every matrix's input rows (float32) as `ascent quantize --calib` sees them: the text in chunks from position
    0, through the f32 model (the PyTorch reference)."""
    names = [f"blk.{l}.{m}.weight" for l in range(cfg["num_hidden_layers"]) for m in LAYER_MATRICES]
    names.append("output.weight")
    rows = {n: [] for n in names}
    for i in range(0, len(ids), chunk):
        seen = []
        reference_logits(cfg, w, ids[i:i + chunk], act=lambda x: seen.append(x.float().numpy()) or x)
        assert len(seen) == len(names)
        for n, x in zip(names, seen):
            rows[n].append(x)
    return {n: np.concatenate(v).astype(f32) for n, v in rows.items()}


def story_model():
    cfg = json.load(open(os.path.join(M656, "config.json")))
    calib = os.path.join(DIR, "calib.txt")
    with open(os.path.join(SHARED, "corpora", "tinyshakespeare.txt"), encoding="utf-8") as f:
        open(calib, "w", encoding="utf-8").write(f.read(8_000))
    tokens = 600  # two chunks of 256 and a part one: the mean covers rows past the first 256
    paths = {k: os.path.join(DIR, f"656-{k}.safetensors") for k in ("calib", "plain")}
    r = run(["quantize", "-m", M656, "-o", paths["calib"], "--type", "int4", "--group", "32", "--calib", calib,
             "--calib-tokens", tokens])
    p = run(["quantize", "-m", M656, "-o", paths["plain"], "--type", "int4", "--group", "32"])
    t = run(["tokenize", "-m", M656, "--text-file", calib])
    check(r.returncode == 0 and p.returncode == 0 and t.returncode == 0,
          f"quantize int4 g32 with and without --calib, tokenize: {(r.stderr + p.stderr + t.stderr).strip()[:200]}")
    if r.returncode != 0 or p.returncode != 0 or t.returncode != 0:
        return
    ids = [int(v) for v in t.stdout.split()][:tokens]
    check(len(ids) == tokens, f"the calibration text is {len(ids)} >= {tokens} tokens")
    reported = dict(re.findall(r"^(\S+)\s.*\(([0-9.]+)\)$", r.stdout, re.M))
    hf = read_safetensors(os.path.join(M656, "model.safetensors"))
    w = {k: v.double() for k, v in hf.items()}
    acts = model_activations(cfg, w, ids, min(cfg["max_position_embeddings"], 256))
    _, calibrated = read_ascent(paths["calib"])
    _, plain = read_ascent(paths["plain"])
    hf_names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                "ffn_down": "mlp.down_proj"}
    worse, apart, lines = [], [], []
    for name, x_all in acts.items():
        if name == "output.weight":
            src = hf.get("lm_head.weight", hf.get("model.embed_tokens.weight"))
        else:
            _, l, m, _ = name.split(".")
            src = hf[f"model.layers.{l}.{hf_names[m]}.weight"]
        wf = src.float().numpy()
        x = x_all[:CAP].astype(np.float64)
        y = x @ wf.astype(np.float64).T

        def err(wq):
            return float(((y - x @ wq.T) ** 2).sum() / (y ** 2).sum())

        e_cal, e_plain = err(calibrated[name].numpy()), err(plain[name].numpy())
        alpha, _, _, _, ref_errs, _ = awq(wf, x_all, 32)
        lines.append(f"{name} {e_plain:.5f} -> {e_cal:.5f} (reference {ref_errs[2]:.5f}, alpha {alpha:.2f}; "
                     f"reported {reported.get(name)})")
        if not e_cal < e_plain:
            worse.append(name)
        if abs(e_cal - ref_errs[2]) > 1e-5 * ref_errs[2] or reported.get(name) != f"{alpha:.2f}":
            apart.append(name)
    print("\n".join(lines))
    not_ok = lambda names: f" (not: {', '.join(names)})" if names else ""
    check(len(acts) == 15 and not worse, f"story-656K: each of the {len(acts)} calibrated matrices' output error on "
                                         f"the calibration activations is below round to nearest's{not_ok(worse)}")
    check(not apart, f"story-656K: each calibrated matrix's output error is the NumPy calibration's on the same "
                     f"activations (to 1e-5), its alpha the reported one{not_ok(apart)}")


def main():
    small_matrices()
    story_model()
    finish()


if __name__ == "__main__":
    main()
