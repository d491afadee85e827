"""Weights that are not finite (a NaN or an infinity: a damaged or badly converted file) are named, never carried on as
plausible output.

- `--check-tensors` reads every weight at load and names the tensor, the position and the value. It covers every storage
  type that holds floats: f32, f16, bf16 values; the block scales of q8_0, q4_0, q4_k (d and dmin) and q6_k; the row and
  group scales and input scales of Ascent's int8 and int4.
- Without it, generation and perplexity stop at the first logits that are not finite, naming the position. This holds in
  quantized formats too: their activation quantizers carry the NaN on rather than drop it.
- `quantize` and `convert` check their source always and write nothing from a bad one. Nor do they write a finite value
  their rounding would make infinite (f16 values and block scales end at 65504).

Each error is one line on stderr with exit code 1. The damaged files are sound ones with one value overwritten here, at
a place this script computes from the formats' layouts."""
import json
import os
import shutil
import struct

import numpy as np

from common import SHARED, check, finish, gguf_layout, run, tmpdir
from test_kquants import write_model as write_kquant_model

ROOT = tmpdir()
S656 = os.path.join(SHARED, "models", "story-656K")
S260 = os.path.join(SHARED, "models", "stories260K", "stories260K.bin")
TOK260 = os.path.join(SHARED, "models", "stories260K", "tok512.bin")
SHAKESPEARE = os.path.join(SHARED, "corpora", "tinyshakespeare.txt")
NAN16, INF16 = struct.pack("<H", 0x7E00), struct.pack("<H", 0x7C00)
NAN32, INF32 = struct.pack("<f", float("nan")), struct.pack("<f", float("inf"))


def one_line_error(r, *needles):
    # One error line; convert may warn first about its vocabulary (story-656K's added tokens), which is not the error.
    lines = [l for l in r.stderr.strip().splitlines() if not l.startswith("ascent: warn:")]
    return r.returncode == 1 and len(lines) == 1 and all(n in lines[0] for n in needles), \
        f"exit {r.returncode}, {len(lines)} error line(s): {lines[-1] if lines else ''!r}"


def expect(what, args, *needles):
    ok, got = one_line_error(run(args), *needles)
    check(ok, f"{what}: {got}")


def damaged(src, dst, where, raw):
    """A copy of src with raw written at where(data) (a byte offset)."""
    with open(src, "rb") as f:
        data = bytearray(f.read())
    at = where(bytes(data))
    data[at:at + len(raw)] = raw
    with open(dst, "wb") as f:
        f.write(data)
    return dst


def in_gguf(tensor, byte):
    def where(data):
        _, infos, start = gguf_layout(data)
        return start + next(off for name, _, _, off in infos if name == tensor) + byte
    return where


def in_safetensors(tensor, byte):
    def where(data):
        n = struct.unpack("<Q", data[:8])[0]
        return 8 + n + json.loads(data[8:8 + n])[tensor]["data_offsets"][0] + byte
    return where


def safetensors_shape(path, tensor):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))[tensor]["shape"]


def main():
    ids = ["--prompt-ids", "1 2 3", "-n", "4"]

    # GGUF: q8_0 (from stories260K: blk.2.attn_v.weight is (32, 64), two 34-byte blocks a row), q4_0 and f16.
    q8 = os.path.join(ROOT, "s260-q8_0.gguf")
    r = run(["convert", "-m", S260, "-o", q8, "--type", "q8_0"])
    check(r.returncode == 0, f"convert stories260K to q8_0: exit {r.returncode}")
    bad = damaged(q8, os.path.join(ROOT, "q8-nan.gguf"), in_gguf("blk.2.attn_v.weight", 5 * 34), NAN16)
    expect("--check-tensors names a q8_0 block scale", ["info", "-m", bad, "--check-tensors"],
           f"{bad}: tensor blk.2.attn_v.weight: the scale d of block 5 (row 2, columns 32-63) is nan")
    r = run(["info", "-m", q8, "--check-tensors"])
    check(r.returncode == 0 and not r.stderr, f"--check-tensors passes the sound q8_0 file: exit {r.returncode}")
    # Without the check, the NaN reaches the logits through the int8 activations of the matmuls after it.
    expect("generate from a q8_0 file with a NaN scale stops at the prompt's logits",
           ["generate", "-m", bad, "--tokenizer", TOK260] + ids, "position 2: the logit of token", "is nan", "--check-tensors")
    q4 = os.path.join(ROOT, "s260-q4_0.gguf")
    run(["convert", "-m", S260, "-o", q4, "--type", "q4_0"])
    bad = damaged(q4, os.path.join(ROOT, "q4-inf.gguf"), in_gguf("blk.0.ffn_gate.weight", 3 * 18), INF16)
    expect("--check-tensors names a q4_0 block scale", ["info", "-m", bad, "--check-tensors"],
           f"{bad}: tensor blk.0.ffn_gate.weight: the scale d of block 3 (row 1, columns 32-63) is inf")
    f16 = os.path.join(ROOT, "s260-f16.gguf")
    run(["convert", "-m", S260, "-o", f16, "--type", "f16"])
    bad = damaged(f16, os.path.join(ROOT, "f16-inf.gguf"), in_gguf("blk.4.attn_k.weight", 2 * (64 * 7 + 9)),
                  struct.pack("<H", 0xFC00))
    expect("--check-tensors names an f16 value", ["info", "-m", bad, "--check-tensors"],
           f"{bad}: tensor blk.4.attn_k.weight: the value at row 7, column 9 is -inf")
    bad = damaged(f16, os.path.join(ROOT, "norm-nan.gguf"), in_gguf("output_norm.weight", 4 * 11), NAN32)
    expect("--check-tensors names an f32 vector's value", ["info", "-m", bad, "--check-tensors"],
           f"{bad}: tensor output_norm.weight: the value at index 11 is nan")

    # K-quants (test_kquants.py's model: (512, 256) q4_k ffn_gate, one 144-byte super-block a row; (256, 256) q6_k
    # output, 210-byte super-blocks with d at byte 208).
    kq = os.path.join(ROOT, "kq.gguf")
    write_kquant_model(kq)
    r = run(["info", "-m", kq, "--check-tensors"])
    check(r.returncode == 0, f"--check-tensors passes the sound K-quant file: exit {r.returncode}")
    bad = damaged(kq, os.path.join(ROOT, "kq-dmin.gguf"), in_gguf("blk.1.ffn_gate.weight", 7 * 144 + 2), NAN16)
    expect("--check-tensors names a q4_k minimum scale", ["info", "-m", bad, "--check-tensors"],
           f"{bad}: tensor blk.1.ffn_gate.weight: the minimum scale dmin of block 7 (row 7, columns 0-255) is nan")
    bad = damaged(kq, os.path.join(ROOT, "kq-d.gguf"), in_gguf("output.weight", 3 * 210 + 208), INF16)
    expect("--check-tensors names a q6_k scale", ["info", "-m", bad, "--check-tensors"],
           f"{bad}: tensor output.weight: the scale d of block 3 (row 3, columns 0-255) is inf")

    # A Hugging Face folder (story-656K, f32) with one NaN in a projection.
    hf = os.path.join(ROOT, "s656-nan")
    shutil.copytree(S656, hf)
    st = os.path.join(hf, "model.safetensors")
    cols = safetensors_shape(st, "model.layers.0.self_attn.q_proj.weight")[1]
    damaged(st, st, in_safetensors("model.layers.0.self_attn.q_proj.weight", 4 * (3 * cols + 5)), NAN32)
    want = f"{st}: tensor blk.0.attn_q.weight: the value at row 3, column 5 is nan"
    expect("--check-tensors names an f32 value of a Hugging Face folder", ["info", "-m", hf, "--check-tensors"], want)
    expect("perplexity over a model with a NaN weight names the window and position",
           ["perplexity", "-m", hf, "-f", SHAKESPEARE, "-c", "64", "--chunks", "1"],
           f"{SHAKESPEARE}: window 1, position 0: the logit of token")
    for cmd, out, extra in (("quantize", "q.safetensors", ["--type", "int8"]), ("convert", "c.gguf", ["--type", "q8_0"])):
        out = os.path.join(ROOT, out)
        r = run([cmd, "-m", hf, "-o", out] + extra)
        ok, got = one_line_error(r, want)
        check(ok and not os.path.exists(out), f"{cmd} refuses a source with a NaN weight, writing nothing: {got}")

    # convert checks what it rounds too: f16 (and the f16 block scales of q8_0) end at 65504, so a finite source value
    # past that would be written as an infinity. bf16 keeps it.
    big = os.path.join(ROOT, "s656-big")
    shutil.copytree(S656, big)
    st = os.path.join(big, "model.safetensors")
    cols = safetensors_shape(st, "model.layers.1.mlp.up_proj.weight")[1]
    for value, qtype, want in ((7e4, "f16", "the value at row 3, column 5 is inf once rounded to f16"),
                               (1e7, "q8_0", f"the scale d of block {3 * cols // 32} (row 3, columns 0-31) is inf once "
                                             "rounded to q8_0")):
        damaged(st, st, in_safetensors("model.layers.1.mlp.up_proj.weight", 4 * (3 * cols + 5)), struct.pack("<f", value))
        out = os.path.join(ROOT, f"big-{qtype}.gguf")
        r = run(["convert", "-m", big, "-o", out, "--type", qtype])
        ok, got = one_line_error(r, f"{out}: tensor blk.1.ffn_up.weight: {want}", "--type bf16 or f32 keeps it")
        check(ok and not os.path.exists(out), f"convert --type {qtype} refuses {value:g}, past its range: {got}")
    # quantize stores embeddings as f16 (int8, int4): the same bound (story-656K's embedding is its tied lm_head).
    emb = os.path.join(ROOT, "s656-big-emb")
    shutil.copytree(S656, emb)
    st = os.path.join(emb, "model.safetensors")
    cols = safetensors_shape(st, "lm_head.weight")[1]
    damaged(st, st, in_safetensors("lm_head.weight", 4 * (9 * cols + 2)), struct.pack("<f", -1e5))
    out = os.path.join(ROOT, "emb-int8.safetensors")
    r = run(["quantize", "-m", emb, "-o", out, "--type", "int8"])
    ok, got = one_line_error(r, f"{out}: tensor token_embd.weight: the value at row 9, column 2 is -inf once stored as f16")
    check(ok and not os.path.exists(out), f"quantize refuses an embedding value past f16's range: {got}")
    out = os.path.join(ROOT, "big-bf16.gguf")
    r = run(["convert", "-m", big, "-o", out, "--type", "bf16"])
    check(r.returncode == 0 and run(["info", "-m", out, "--check-tensors"]).returncode == 0,
          f"convert --type bf16 keeps 1e7: exit {r.returncode}")

    # Ascent's int8, int4 (groups of 32; calibrated: input scales) and bf16 files from story-656K.
    made = {}
    for tag, extra in (("int8", ["--type", "int8"]), ("int4", ["--type", "int4", "--group", "32"]),
                       ("awq", ["--type", "int4", "--group", "32", "--calib", SHAKESPEARE, "--calib-tokens", "256"]),
                       ("bf16", ["--type", "bf16"])):
        made[tag] = os.path.join(ROOT, f"s656-{tag}.safetensors")
        r = run(["quantize", "-m", S656, "-o", made[tag]] + extra)
        check(r.returncode == 0, f"quantize story-656K {' '.join(extra[:4])}: exit {r.returncode}")
        r = run(["info", "-m", made[tag], "--check-tensors"])
        check(r.returncode == 0, f"--check-tensors passes the sound {tag} file: exit {r.returncode}")
    bad = damaged(made["int8"], os.path.join(ROOT, "int8-scale.safetensors"),
                  in_safetensors("blk.1.ffn_up.weight.scale", 4 * 4), INF32)
    expect("--check-tensors names an int8 row scale", ["info", "-m", bad, "--check-tensors"],
           f"{bad}: tensor blk.1.ffn_up.weight: the scale of row 4 is inf")
    expect("generate from an int8 file with an infinite row scale stops", ["generate", "-m", bad] + ids,
           "position 2: the logit of token", "is nan")
    # int4 scales are kept per 16-row block: (blocks, groups, 16); row 17, group 2 is at (1 * groups + 2) * 16 + 1.
    groups = safetensors_shape(made["int4"], "blk.0.ffn_down.weight.scale")[1]
    bad = damaged(made["int4"], os.path.join(ROOT, "int4-scale.safetensors"),
                  in_safetensors("blk.0.ffn_down.weight.scale", 4 * ((groups + 2) * 16 + 1)), NAN32)
    expect("--check-tensors names an int4 group scale", ["info", "-m", bad, "--check-tensors"],
           f"{bad}: tensor blk.0.ffn_down.weight: the scale of row 17, group 2 (columns 64-95) is nan")
    expect("generate from an int4 file with a NaN group scale stops", ["generate", "-m", bad] + ids,
           "position 2: the logit of token", "is nan")
    bad = damaged(made["awq"], os.path.join(ROOT, "awq-input.safetensors"),
                  in_safetensors("blk.1.attn_v.weight.input_scale", 4 * 9), NAN32)
    expect("--check-tensors names an input scale", ["info", "-m", bad, "--check-tensors"],
           f"{bad}: tensor blk.1.attn_v.weight: the input scale of column 9 is nan")
    cols = safetensors_shape(made["bf16"], "blk.0.attn_output.weight")[1]
    bad = damaged(made["bf16"], os.path.join(ROOT, "bf16-inf.safetensors"),
                  in_safetensors("blk.0.attn_output.weight", 2 * (2 * cols + 7)), struct.pack("<H", 0x7F80))
    expect("--check-tensors names a bf16 value", ["info", "-m", bad, "--check-tensors"],
           f"{bad}: tensor blk.0.attn_output.weight: the value at row 2, column 7 is inf")
    expect("generate from a bf16 file with an infinite weight stops", ["generate", "-m", bad] + ids,
           "position 2: the logit of token", "is nan")
    # The check in the other commands that load a model, and none of it in sound output: greedy text unchanged.
    r = run(["generate", "-m", made["int8"], "--temp", "0", "-n", "12", "--prompt-ids", "1", "--print-ids",
             "--check-tensors"])
    check(r.returncode == 0 and r.stdout.split()[:1] == ["1"], f"generate --check-tensors on a sound int8 file: "
          f"exit {r.returncode}")
    finish()


if __name__ == "__main__":
    main()
