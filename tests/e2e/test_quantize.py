"""ascent quantize and Ascent's quantized file.

- int8/int4/bf16 models of story-656K are decoded here by NumPy from the file (written from the format's description in
  src/ascent/model/ascent_file.h), run through the PyTorch reference with the formats' activation rounding, and compared
  with Ascent's logits.
- Quantized stories260K and a quantized GGUF load with their embedded tokenizers.
- Corrupted files fail with one clear line naming the fault."""
import json
import os
import shutil
import struct

import numpy as np
import torch

from common import ACTIVATIONS, SHARED, check, finish, load_npy, reference_logits, run, tmpdir

ROOT = tmpdir()
M656 = os.path.join(SHARED, "models", "story-656K")
S260 = os.path.join(SHARED, "models", "stories260K")

# Canonical (GGUF-style) names in an Ascent file back to the Hugging Face names the reference takes.
HF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
      "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
      "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def hf_name(n):
    if n == "token_embd.weight":
        return "model.embed_tokens.weight"
    if n == "output.weight":
        return "lm_head.weight"
    if n == "output_norm.weight":
        return "model.norm.weight"
    _, l, kind, leaf = n.split(".")
    return f"model.layers.{l}.{HF[kind]}.{leaf}"


def read_ascent(path):
    """Decodes every tensor of an Ascent file to float64. Codes are offset-binary (q + 128 for int8, q + 8 for int4),
    rows padded (64 / 128 columns). int8 is row-major; int4 comes in blocks of 16 rows (below)."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__")
    body = data[8 + n:]

    def raw(name):
        b, e = header[name]["data_offsets"]
        return body[b:e], header[name]

    qinfo = json.loads(meta["ascent.tensors"])
    out = {}
    for name, h in header.items():
        if name.endswith((".scale", ".input_scale")) or name == "ascent.tokenizer":
            continue
        buf, info = raw(name)
        if name not in qinfo:
            dt = {"F32": np.float32, "F16": np.float16, "BF16": None}[info["dtype"]]
            if dt is None:
                a = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                a = np.frombuffer(buf, dt)
            out[name] = torch.from_numpy(a.astype(np.float64).reshape(info["shape"]))
            continue
        N, K = qinfo[name]["shape"]
        codes = np.frombuffer(buf, np.uint8).reshape(info["shape"])
        scale = np.frombuffer(raw(name + ".scale")[0], np.float32).astype(np.float64)
        if qinfo[name]["type"] == "int8":
            w = (codes[:, :K].astype(np.float64) - 128) * scale[:, None]
        else:
            # Blocks of 16 rows (codes (blocks, 16 * Kp / 2), scales (blocks, groups, 16)): per 8-column step 64
            # bytes, byte 4i + j holding column 8o + j of row i in its low nibble and 8o + 4 + j in its high one.
            g = qinfo[name]["group"]
            blocks = codes.shape[0]
            steps = codes.reshape(blocks, -1, 16, 4)  # (block, step o, row i, byte j)
            q = np.concatenate([steps & 15, steps >> 4], axis=3)  # (block, o, i, column 8o + 0..7)
            q = q.transpose(0, 2, 1, 3).reshape(blocks * 16, -1).astype(np.float64) - 8
            s = scale.reshape(blocks, -1, 16).transpose(0, 2, 1).reshape(blocks * 16, -1)
            w = (q * np.repeat(s, g, axis=1))[:N, :K]
        if name + ".input_scale" in header:
            w = w * np.frombuffer(raw(name + ".input_scale")[0], np.float32).astype(np.float64)[None, :]
        out[name] = torch.from_numpy(w)
    return meta, out


def logits(model, ids, out):
    r = run(["logits", "-m", model, "--prompt-ids", " ".join(map(str, ids)), "-o", out])
    return load_npy(out) if r.returncode == 0 else None


def rel_rms(a, b):
    return ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt()).item()


def main():
    cfg = json.load(open(os.path.join(M656, "config.json")))
    ids = [1, 147, 201, 282, 215, 286, 598, 1662, 356, 499, 826, 1363, 1145, 33, 7, 900]
    f32 = logits(M656, ids, os.path.join(ROOT, "f32.npy"))
    calib = os.path.join(ROOT, "calib.txt")
    with open(os.path.join(SHARED, "corpora", "tinyshakespeare.txt"), encoding="utf-8") as f:
        open(calib, "w", encoding="utf-8").write(f.read(50_000))
    for qtype, extra, bound in [("int8", [], 0.05), ("int4", ["--group", "64"], 0.2),
                                ("int4", ["--group", "32", "--calib", calib], 0.2), ("bf16", [], 0.01)]:
        label = " ".join([qtype] + extra[:2] + (["calibrated"] if "--calib" in extra else []))
        path = os.path.join(ROOT, f"656-{qtype}-{len(extra)}.safetensors")
        r = run(["quantize", "-m", M656, "-o", path, "--type", qtype, *extra])
        lines = r.stdout.strip().splitlines()
        check(r.returncode == 0 and len(lines) == 17 and "output.weight" in r.stdout,
              f"quantize {label}: exit 0, one error line per matrix (15) plus header and summary "
              f"({lines[-1] if lines else r.stderr.strip()[:200]})")
        if r.returncode != 0:
            continue
        meta, w = read_ascent(path)
        check(meta["format"] == "ascent" and meta["ascent.quant"] == qtype and
              meta["ascent.tokenizer_kind"] == "tokenizer.json", f"{label}: metadata names the format and tokenizer")
        ours = logits(path, ids, os.path.join(ROOT, f"{qtype}.npy"))
        if "--calib" not in extra:  # (calibrated layers round x * input_scale, one scale per layer: test_kernels.py)
            ref = reference_logits(cfg, {hf_name(k): v for k, v in w.items()}, ids, act=ACTIVATIONS[qtype])
            d = rel_rms(ours, ref) if ours is not None else float("inf")
            check(d < 1e-2, f"{label}: logits equal PyTorch on the decoded weights with {qtype} activation rounding "
                            f"(relative RMS {d:.1e} < 1e-2)")
        e = rel_rms(ours, f32) if ours is not None else float("inf")
        check(e < bound, f"{label}: within {bound:.0%} RMS of the f32 model's logits ({e:.4f})")
        if "--calib" not in extra:
            # Converted to GGUF f32, the file holds the decoded weights: its logits are PyTorch's on them, with no
            # activation rounding. (An int8 or int4 file failed: "cannot convert f32 to int4 row by row".)
            gg32 = os.path.join(ROOT, f"656-{qtype}-{len(extra)}.gguf")
            r = run(["convert", "-m", path, "-o", gg32, "--type", "f32"])
            conv = logits(gg32, ids, os.path.join(ROOT, f"{qtype}-gguf.npy")) if r.returncode == 0 else None
            ref32 = reference_logits(cfg, {hf_name(k): v for k, v in w.items()}, ids)
            d = rel_rms(conv, ref32) if conv is not None else float("inf")
            check(d < 1e-4, f"{label} converted to GGUF f32: logits equal PyTorch on the decoded weights (relative RMS "
                            f"{d:.1e} < 1e-4; {r.stderr.strip()[:100]})")
            if qtype != "bf16":  # rounding a quantized matrix again is said, once (llama.cpp asks --allow-requantize)
                r = run(["convert", "-m", path, "-o", os.path.join(ROOT, "requantized.gguf"), "--type", "q4_0"])
                # Besides it, only the embedded vocabulary's note on what GGUF's keys cannot describe.
                lines = [x for x in r.stderr.strip().splitlines() if "may tokenize some text otherwise" not in x]
                check(r.returncode == 0 and lines == [
                    f"ascent: warn: {ROOT}/requantized.gguf: {qtype} matrices requantized to q4_0: their rounding "
                    "compounds; convert the original model for the best copy"],
                    f"{label} converted to GGUF q4_0: one warning ({r.stderr.strip()[:120]!r})")
        if "--calib" in extra:
            check(" -> " in lines[1], f"{label}: prints the output error before and after calibration ({lines[1]})")

    # stories260K (llama2.c): the tokenizer travels in the file, and int8 keeps the known greedy story.
    q8 = os.path.join(ROOT, "260-int8.safetensors")
    run(["quantize", "-m", os.path.join(S260, "stories260K.bin"), "--tokenizer", os.path.join(S260, "tok512.bin"),
         "-o", q8, "--type", "int8"])
    r = run(["generate", "-m", q8, "--temp", "0", "-n", "61"])
    check(r.returncode == 0 and "Once upon a time, there was a little girl named Lily." in r.stdout,
          f"stories260K int8 generates the known story with its embedded tokenizer ({r.stdout.strip()[:60]}...)")
    # From GGUF (ours carries no vocabulary, so --tokenizer names one): loads and tokenizes as the original.
    gg = os.path.join(ROOT, "656.gguf")
    run(["convert", "-m", M656, "-o", gg, "--type", "f32"])
    q4 = os.path.join(ROOT, "656-from-gguf.safetensors")
    r = run(["quantize", "-m", gg, "--tokenizer", M656, "-o", q4, "--type", "int4", "--group", "128"])
    t1 = run(["tokenize", "-m", M656, "-p", "Once upon a time"]).stdout
    t2 = run(["tokenize", "-m", q4, "-p", "Once upon a time"]).stdout
    check(r.returncode == 0 and t1 and t1 == t2, f"int4 from GGUF: embedded tokenizer tokenizes as the original ({t2.strip()})")
    a = logits(gg, ids, os.path.join(ROOT, "gg.npy"))
    b = logits(q4, ids, os.path.join(ROOT, "q4gg.npy"))
    d = rel_rms(b, a) if a is not None and b is not None else float("inf")
    check(d < 0.2, f"int4 from GGUF: within 20% RMS of the GGUF's logits ({d:.4f})")
    # From a quantized GGUF: its matrices are rounded again, which is said once (the weight errors printed are
    # against the q8_0 matrices, not the original ones).
    g8 = os.path.join(ROOT, "656-q8_0.gguf")
    run(["convert", "-m", M656, "-o", g8, "--type", "q8_0"])
    q4r = os.path.join(ROOT, "656-from-q8_0.safetensors")
    r = run(["quantize", "-m", g8, "--tokenizer", M656, "-o", q4r, "--type", "int4"])
    check(r.returncode == 0 and r.stderr.strip().splitlines() == [
        f"ascent: warn: {q4r}: q8_0 matrices requantized to int4: their rounding compounds, and the errors above are "
        "against them, not the original weights; quantize the original model for the best copy"],
        f"int4 from a q8_0 GGUF: one warning ({r.stderr.strip()[:100]!r})")

    # Corrupted files: one line naming the file and the fault, exit 1.
    good = open(q8, "rb").read()
    n = struct.unpack("<Q", good[:8])[0]
    header = json.loads(good[8:8 + n])

    def variant(tag, data):
        p = os.path.join(ROOT, f"bad-{tag}.safetensors")
        open(p, "wb").write(data)
        return p

    def rewrite(h, src=good):
        text = json.dumps(h).encode()
        text += b" " * ((64 - (8 + len(text)) % 64) % 64)  # keep the data section 64-byte aligned
        return struct.pack("<Q", len(text)) + text + src[8 + struct.unpack("<Q", src[:8])[0]:]

    cases = []
    cases.append(("truncated data", variant("trunc", good[: len(good) - 1000]), "outside"))
    # A header that cannot be read is reported as such, naming the file. The file is not taken for one of a Hugging Face
    # folder's, whose error would name the folder's missing config.json.
    cases.append(("header not JSON", variant("json", good[:8] + b"#" + good[9:]), "bad header JSON"))
    cases.append(("header length past the end", variant("hlen", struct.pack("<Q", 10 ** 12) + good[8:]),
                  "header length 1000000000000 exceeds the file size"))
    cases.append(("shorter than a header length", variant("short", good[:5]), "truncated: 5 bytes"))
    # Past the safetensors library's 100 MB header limit (the file is sparse): refused before it is read.
    big = os.path.join(ROOT, "bad-bighdr.safetensors")
    with open(big, "wb") as f:
        f.write(struct.pack("<Q", 200_000_000) + b"{")
        f.truncate(300_000_000)
    cases.append(("header past the format's limit", big,
                  "header length 200000000 exceeds the format's limit of 100000000 bytes"))
    # Integers are read as integers. A float offset of 1e30 would otherwise pass the range check as some other number
    # (an out-of-range float-to-integer conversion) and the model load; 2.5 would be truncated to 2, and an id of 2^32 +
    # 1 to 1.
    h = json.loads(json.dumps(header))
    h["blk.0.attn_k.weight"]["data_offsets"][0] = 1e30
    cases.append(("float data offset", variant("off-float", rewrite(h)),
                  "tensor blk.0.attn_k.weight: data_offsets must be a non-negative integer, got 1e+30"))
    h = json.loads(json.dumps(header))
    t = json.loads(h["__metadata__"]["ascent.tensors"])
    t["blk.0.attn_k.weight"]["group"] = 64  # int8 keeps one scale per row: a group there is refused
    h["__metadata__"]["ascent.tensors"] = json.dumps(t)
    cases.append(("group on an int8 tensor", variant("int8-group", rewrite(h)),
                  "blk.0.attn_k.weight: group 64 for an int8 tensor (one scale per row: 0)"))
    h = json.loads(json.dumps(header))
    h["blk.0.attn_k.weight.scale"]["shape"] = [2 ** 40, 2 ** 40 + 8]  # the product wrapped (UBSan: overflow)
    cases.append(("shape past int64", variant("shape-huge", rewrite(h)),
                  f"tensor blk.0.attn_k.weight.scale: shape ({2 ** 40}, {2 ** 40 + 8}) has more elements than an int64 "
                  "holds"))
    h = json.loads(json.dumps(header))
    h["blk.0.attn_k.weight"]["shape"][0] = 2.5
    cases.append(("float dimension", variant("dim-float", rewrite(h)),
                  "tensor blk.0.attn_k.weight: shape must be an integer, got 2.5"))
    config = json.loads(header["__metadata__"]["ascent.config"])
    head_dim = config["head_dim"]
    for tag, key, value, needle in [
            ("bos-wide", "bos_id", 2 ** 32 + 1, "metadata ascent.config: bos_id 4294967297 is out of range"),
            # An end id outside the vocabulary never matched, without a word.
            ("end-id", "end_ids", [5000], "metadata ascent.config: end_ids 5000 is not a token id (the vocabulary has 512)"),
            ("end-ids-scalar", "end_ids", 2, "metadata ascent.config: end_ids must be a list of token ids, got 2"),
            ("cfg-dim-float", "dim", float(config["dim"]), f"metadata ascent.config: dim must be an integer, got {config['dim']}.0"),
            # rope_inv_freq divides by these: a list of the wrong length would apply to its first entries only.
            ("rope-factors", "rope_freq_factors", [1.0, 2.0],
             f"2 rope frequency factors for head_dim {head_dim} (expected {head_dim // 2})"),
            ("rope-factor-zero", "rope_freq_factors", [1.0] * (head_dim // 2 - 1) + [0.0],
             f"rope frequency factor {head_dim // 2 - 1} is 0, not positive and finite"),
            ("rope-scaling", "rope_scaling", {"enabled": True, "factor": 8.0, "low_freq_factor": 4.0,
                                              "high_freq_factor": 4.0, "original_max_position": 8192.0},
             "rope_scaling.high_freq_factor 4 must be finite and above low_freq_factor 4")]:
        h = json.loads(json.dumps(header))
        c = json.loads(h["__metadata__"]["ascent.config"])
        c[key] = value
        h["__metadata__"]["ascent.config"] = json.dumps(c)
        cases.append((f"config {key} {value}", variant(tag, rewrite(h)), needle))
    h = json.loads(json.dumps(header))
    h["__metadata__"]["format"] = "pt"
    cases.append(("not marked as Ascent's, outside any folder", variant("format", rewrite(h)),
                  'not an Ascent file (its metadata has no format "ascent") and not in a Hugging Face folder'))
    h = json.loads(json.dumps(header))
    h["blk.0.attn_q.weight.scale"]["shape"] = [3]
    cases.append(("scale of the wrong size", variant("scale", rewrite(h)), "blk.0.attn_q.weight"))
    h = json.loads(json.dumps(header))
    h["__metadata__"]["ascent.config"] = "{not json"
    cases.append(("bad config JSON", variant("config", rewrite(h)), "ascent.config"))
    h = json.loads(json.dumps(header))
    del h["blk.1.ffn_down.weight"]
    cases.append(("missing codes", variant("missing", rewrite(h)), "blk.1.ffn_down.weight"))
    h = json.loads(json.dumps(header))
    t = json.loads(h["__metadata__"]["ascent.tensors"])
    t["blk.0.attn_k.weight"]["type"] = "int3"
    h["__metadata__"]["ascent.tensors"] = json.dumps(t)
    cases.append(("unknown type", variant("type", rewrite(h)), "int3"))
    # The metadata's labels are checked too: the tokenizer's reader is picked by its kind, and every linear layer is
    # in the file's one format.
    for tag, key, value, needle in [
            ("quant-label", "ascent.quant", "int5", "metadata ascent.quant: 'int5' is not int8, int4 or bf16"),
            ("quant-mixed", "ascent.quant", "int4", "type int8 in a file whose ascent.quant is int4"),
            ("tok-kind", "ascent.tokenizer_kind", "sentencepiece",
             "metadata ascent.tokenizer_kind: 'sentencepiece' is not tokenizer.json, tokenizer.bin, gguf or empty"),
            ("tensors-array", "ascent.tensors", "[]", "metadata ascent.tensors: expected a JSON object")]:
        h = json.loads(json.dumps(header))
        h["__metadata__"][key] = value
        cases.append((f"{key} {value}", variant(tag, rewrite(h)), needle))
    # A group size past int's range is reported as written, not narrowed; a field of the wrong JSON type is named.
    good4 = open(q4, "rb").read()
    for tag, group, needle in [("group-huge", 10 ** 12, "int4 group size 1000000000000 is not 32, 64 or 128"),
                               ("group-text", "32", 'blk.0.attn_k.weight: group must be an integer, got "32"'),
                               ("group-float", 32.0, "blk.0.attn_k.weight: group must be an integer, got 32.0")]:
        h = json.loads(good4[8:8 + struct.unpack("<Q", good4[:8])[0]])
        t = json.loads(h["__metadata__"]["ascent.tensors"])
        t["blk.0.attn_k.weight"]["group"] = group
        h["__metadata__"]["ascent.tensors"] = json.dumps(t)
        cases.append((tag, variant(tag, rewrite(h, good4)), needle))
    # A matrix shape near int64's limit is refused by name (rounding its rows up to blocks of 16 overflowed).
    for tag, shape in [("rows-huge", [2 ** 63 - 1, 32]), ("cols-huge", [32, 2 ** 63 - 1])]:
        h = json.loads(good4[8:8 + struct.unpack("<Q", good4[:8])[0]])
        t = json.loads(h["__metadata__"]["ascent.tensors"])
        t["blk.0.attn_k.weight"]["shape"] = shape
        h["__metadata__"]["ascent.tensors"] = json.dumps(t)
        cases.append((tag, variant(tag, rewrite(h, good4)), "is not a matrix of 1 to 2^31 - 1 rows and columns"))
    # Version 1 files laid int4 out row by row: one holding int4 is refused with the fix; int8 ones still load.
    h = json.loads(good4[8:8 + struct.unpack("<Q", good4[:8])[0]])
    h["__metadata__"]["ascent.version"] = "1"
    cases.append(("int4 in a version 1 file", variant("v1int4", rewrite(h, good4)), "quantize the model again"))
    h = json.loads(json.dumps(header))
    h["__metadata__"]["ascent.version"] = "1"
    r = run(["generate", "-m", variant("v1int8", rewrite(h)), "--temp", "0", "-n", "61"])
    check(r.returncode == 0 and "Once upon a time, there was a little girl named Lily." in r.stdout,
          f"a version 1 int8 file still loads and generates the known story (exit {r.returncode})")
    # --group sizes int4's groups only: with another type it is refused, naming the flag, and nothing is written.
    for qtype in ("int8", "bf16"):
        out = os.path.join(ROOT, f"group-{qtype}.safetensors")
        r = run(["quantize", "-m", M656, "-o", out, "--type", qtype, "--group", "32"])
        err = r.stderr.strip()
        check(r.returncode == 2 and "--group" in err and "int4 only" in err and not os.path.exists(out),
              f"--type {qtype} --group 32 refused: exit {r.returncode}, {err[:120]!r}")
    # Options that cannot go together, or a calibration text that cannot be read, are refused before the model loads:
    # exit 2, one line naming the flag or the file, no report header, nothing written. (--calib-tokens 0 is refused too,
    # rather than falling back to round to nearest without a word.)
    shakespeare = os.path.join(SHARED, "corpora", "tinyshakespeare.txt")
    missing = os.path.join(ROOT, "no-such-text.txt")
    for extra, message in [(["--type", "int3"], "--type int3: expected int8, int4 or bf16"),
                           (["--type", "int4", "--group", "48"], "--group: int4 group size 48 is not 32, 64 or 128"),
                           (["--type", "bf16", "--calib", shakespeare],
                            "--calib: activation-aware calibration applies to --type int4 only"),
                           (["--type", "int4", "--calib", shakespeare, "--calib-tokens", "0"],
                            "--calib-tokens 0: calibration needs at least 1"),
                           (["--type", "int4", "--calib", missing], f"{missing}: cannot read calibration text")]:
        out = os.path.join(ROOT, "refused.safetensors")
        r = run(["quantize", "-m", M656, "-o", out, *extra])
        err = r.stderr.strip()
        check(r.returncode == 2 and err == f"ascent: error: {message}" and r.stdout == "" and not os.path.exists(out),
              f"quantize {' '.join(extra)} refused before loading: exit {r.returncode}, {err[:120]!r}, "
              f"stdout {r.stdout[:40]!r}")
    for what, path, needle in cases:
        r = run(["generate", "-m", path, "-n", "2"])
        err = r.stderr.strip()
        check(r.returncode == 1 and len(err.splitlines()) == 1 and path in err and needle in err,
              f"corrupted ({what}): exit {r.returncode}, {err[:160]!r}")
    finish()


if __name__ == "__main__":
    main()
