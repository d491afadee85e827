"""Broken models fail cleanly. A missing, truncated or corrupted file (bad magic, bad header JSON, offsets out of range,
dtype or shape mismatch, missing tensor) gives exactly one line on stderr, naming the file and the fault, and exit code
1. Under the asan preset the same script runs the sanitized binary, so none may crash."""
import json
import os
import shutil
import struct
import subprocess

from common import ASCENT, SHARED, check, finish, no_sanitizer_report, run, tmpdir, write_safetensors
from test_models import MODELS, write_hf

ROOT = tmpdir()


def expect_error(what, args, must_contain):
    r = run(args, timeout=120)
    lines = r.stderr.strip().splitlines()
    ok = r.returncode == 1 and len(lines) == 1 and all(s in lines[0] for s in must_contain)
    check(ok, f"{what}: exit {r.returncode}, {len(lines)} line(s): {lines[0] if lines else ''!r}")


def fresh_hf(name):
    folder = os.path.join(ROOT, name)
    cfg, w = MODELS["llama"]
    write_hf(folder, cfg, w)
    return folder, cfg, w


def edit_header(path, fn):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = fn(json.loads(data[8:8 + n]))
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data[8 + n:])


def main():
    ids = ["--prompt-ids", "1 2 3", "-n", "2", "--print-ids"]
    gen = lambda m: ["generate", "-m", m] + ids

    expect_error("missing model", gen(os.path.join(ROOT, "nope.gguf")), ["nope.gguf", "no such file"])

    folder = os.path.join(ROOT, "empty-folder")
    os.makedirs(folder)
    expect_error("folder without config.json", gen(folder), [folder, "config.json"])

    folder, cfg, w = fresh_hf("bad-config")
    open(os.path.join(folder, "config.json"), "w").write("{ not json")
    expect_error("bad config JSON", gen(folder), ["config.json", "bad JSON"])

    folder, cfg, w = fresh_hf("config-field")
    c = dict(cfg)
    del c["hidden_size"]
    json.dump(c, open(os.path.join(folder, "config.json"), "w"))
    expect_error("config missing hidden_size", gen(folder), ["config.json", "hidden_size"])

    # config.json values of the wrong shape: one line naming the file and the field. An empty eos_token_id list, a float
    # for an integer (not truncated), a string rope_scaling and a negative window are all caught.
    eos_msg = "field eos_token_id must be an integer or a non-empty list of integers"
    for key, value, needle in [("eos_token_id", [], eos_msg),
                               ("eos_token_id", ["a"], eos_msg),
                               ("intermediate_size", 1.5, "field intermediate_size must be an integer, got 1.5"),
                               ("rope_scaling", "bad", "field rope_scaling must be an object or null"),
                               ("sliding_window", -5, "sliding_window -5 must be 0 (none) or positive"),
                               # Ids outside the vocabulary: checked at load (bos would fail first at the embedding, an
                               # end id never).
                               ("bos_token_id", 10 ** 6, "bos_token_id 1000000 is not a token id"),
                               ("eos_token_id", [2, -1], "eos_token_id -1 is not a token id"),
                               # Past int32: refused, not wrapped (2^63 would become 0, a valid id; 2^31 would be
                               # reported as -2^31).
                               ("eos_token_id", 2 ** 63, f"field eos_token_id {2 ** 63} is out of range"),
                               ("eos_token_id", [2, 2 ** 31], f"field eos_token_id {2 ** 31} is out of range"),
                               ("bos_token_id", 2 ** 32 + 1, f"field bos_token_id {2 ** 32 + 1} is out of range"),
                               # Not "head_dim must be a positive integer, got 0", a field the file lacks.
                               ("num_attention_heads", 1000, "hidden_size 64 is not a multiple of num_attention_heads "
                                "1000 (and there is no head_dim)"),
                               # Rotary over part of each head: refused, not ignored.
                               ("partial_rotary_factor", 0.5, "partial_rotary_factor 0.5 is not supported")]:
        folder, cfg, w = fresh_hf("config-value")
        c = dict(cfg, **{key: value})
        if key == "sliding_window":
            c["model_type"] = "mistral"
        if key == "num_attention_heads":
            del c["head_dim"]  # so that the head size is derived from these
        json.dump(c, open(os.path.join(folder, "config.json"), "w"))
        expect_error(f"config {key}={json.dumps(value)}", gen(folder), [os.path.join(folder, "config.json"), needle])
        shutil.rmtree(folder)

    st = lambda f: os.path.join(f, "model.safetensors")
    folder, _, _ = fresh_hf("truncated")
    size = os.path.getsize(st(folder))
    with open(st(folder), "r+b") as f:
        f.truncate(size // 2)
    expect_error("truncated safetensors", gen(folder), ["model.safetensors", "out of range"])

    folder, _, _ = fresh_hf("tiny")
    with open(st(folder), "wb") as f:
        f.write(b"\x01\x02")
    expect_error("safetensors shorter than its header", gen(folder), ["model.safetensors", "truncated"])

    folder, _, _ = fresh_hf("empty")
    open(st(folder), "wb").close()
    expect_error("empty safetensors", gen(folder), ["model.safetensors", "empty"])

    folder, _, _ = fresh_hf("bad-json")
    with open(st(folder), "r+b") as f:
        f.seek(8)
        f.write(b"{{{{garbage")
    expect_error("bad header JSON", gen(folder), ["model.safetensors", "bad header JSON"])

    # A byte that is not UTF-8 in the header: the JSON parser's message quotes it ("last read"), and the error line
    # shows it as an escape, so it stays valid UTF-8.
    folder, _, _ = fresh_hf("bad-utf8")
    with open(st(folder), "r+b") as f:
        f.seek(10)
        f.write(b"\xff")
    r = subprocess.run([ASCENT] + gen(folder), capture_output=True, timeout=120)  # bytes: stderr is what is checked
    no_sanitizer_report(r, "a non-UTF-8 byte in a header")
    try:
        err = r.stderr.decode("utf-8")
    except UnicodeDecodeError:
        err = None
    check(r.returncode == 1 and err is not None and "\\xff" in err and err.count("\n") == 1,
          f"a non-UTF-8 byte quoted by an error is escaped: {r.stderr.strip()!r}")

    folder, _, _ = fresh_hf("huge-header")
    with open(st(folder), "r+b") as f:
        f.write(struct.pack("<Q", 1 << 40))
    expect_error("header length past the end", gen(folder), ["model.safetensors", "header length"])

    def bump(h):
        h["model.norm.weight"]["data_offsets"] = [10 ** 9, 10 ** 9 + 256]
        return h
    folder, _, _ = fresh_hf("offsets")
    edit_header(st(folder), bump)
    expect_error("offsets out of range", gen(folder), ["model.safetensors", "model.norm.weight", "out of range"])

    def dtype_i64(h):
        h["model.norm.weight"]["dtype"] = "I64"
        return h
    folder, _, _ = fresh_hf("dtype")
    edit_header(st(folder), dtype_i64)
    expect_error("unsupported dtype", gen(folder), ["model.safetensors", "model.norm.weight", "I64"])

    def bytes_mismatch(h):
        h["model.norm.weight"]["shape"] = [7]
        return h
    folder, _, _ = fresh_hf("nbytes")
    edit_header(st(folder), bytes_mismatch)
    expect_error("shape disagrees with byte count", gen(folder), ["model.safetensors", "model.norm.weight", "bytes"])

    # A matrix with no columns is refused by name (where its data lay off the element alignment, the reader's copy
    # divided its size by the zero: SIGFPE).
    def no_columns(h):
        b = h["lm_head.weight"]["data_offsets"][0]
        h["lm_head.weight"].update(shape=[64, 0], data_offsets=[b, b])
        return h
    folder, _, _ = fresh_hf("no-columns")
    edit_header(st(folder), no_columns)
    expect_error("matrix with no columns", gen(folder),
                 ["model.safetensors", "lm_head.weight", "dimension 0 is not positive"])

    folder, cfg, w = fresh_hf("shape")
    w2 = dict(w)
    w2["model.layers.1.self_attn.q_proj.weight"] = w["model.layers.1.self_attn.q_proj.weight"][:32].clone()
    write_safetensors(st(folder), w2)
    expect_error("tensor of the wrong shape", gen(folder), ["model.safetensors", "blk.1.attn_q.weight", "shape"])

    folder, cfg, w = fresh_hf("missing")
    w2 = {k: v for k, v in w.items() if k != "model.layers.0.mlp.down_proj.weight"}
    write_safetensors(st(folder), w2)
    expect_error("missing tensor", gen(folder), [folder, "missing tensor", "blk.0.ffn_down.weight"])

    folder, cfg, w = fresh_hf("sharded")
    os.remove(st(folder))
    json.dump({"weight_map": {"model.norm.weight": "model-00001.safetensors"}},
              open(os.path.join(folder, "model.safetensors.index.json"), "w"))
    expect_error("shard listed in the index is absent", gen(folder), ["model-00001.safetensors", "cannot open"])

    # GGUF
    folder, _, _ = fresh_hf("for-gguf")
    good = os.path.join(ROOT, "good.gguf")
    assert run(["convert", "-m", folder, "-o", good, "--type", "q8_0"]).returncode == 0
    data = open(good, "rb").read()

    def variant(name, blob):
        p = os.path.join(ROOT, name)
        open(p, "wb").write(blob)
        return p

    expect_error("GGUF bad magic", gen(variant("magic.gguf", b"GGUX" + data[4:])), ["magic.gguf", "bad magic"])
    v2 = run(gen(variant("v2.gguf", data[:4] + struct.pack("<I", 2) + data[8:])))
    v3 = run(gen(good))
    check(v2.returncode == 0 and v3.returncode == 0 and v2.stdout == v3.stdout,
          "GGUF version 2 (same layout as 3) loads and runs alike")
    expect_error("GGUF version 9", gen(variant("version.gguf", data[:4] + struct.pack("<I", 9) + data[8:])),
                 ["version.gguf", "version 9"])
    expect_error("GGUF truncated in the header", gen(variant("cut-header.gguf", data[:200])),
                 ["cut-header.gguf", "truncated"])
    expect_error("GGUF truncated in the data", gen(variant("cut-data.gguf", data[: len(data) - 1000])),
                 ["cut-data.gguf", "outside the file"])
    # Point the first tensor's type at Q2_K (10), which this build does not run; then at Q4_K (12), which it runs
    # but whose 256-element super-blocks do not fit these 64-wide rows.
    i = data.find(b"token_embd.weight")
    nd = struct.unpack_from("<I", data, i + 17)[0]
    t_at = i + 17 + 4 + 8 * nd
    expect_error("GGUF unsupported tensor type",
                 gen(variant("qtype.gguf", data[:t_at] + struct.pack("<I", 10) + data[t_at + 4:])),
                 ["qtype.gguf", "token_embd.weight", "ggml type 10"])
    expect_error("GGUF K-quant rows that are not whole super-blocks",
                 gen(variant("kq-rows.gguf", data[:t_at] + struct.pack("<I", 12) + data[t_at + 4:])),
                 ["kq-rows.gguf", "token_embd.weight", "q4_k blocks"])
    expect_error("GGUF tensor larger than int64 counts",
                 gen(variant("dims.gguf", data[:i + 21] + struct.pack("<QQ", 2 ** 32 - 32, 2 ** 32 - 32) + data[i + 37:])),
                 ["dims.gguf", "tensor token_embd.weight", "more elements than an int64 holds"])
    expect_error("GGUF tensor offset out of range",
                 gen(variant("offset.gguf", data[:t_at + 4] + struct.pack("<Q", 1 << 40) + data[t_at + 12:])),
                 ["offset.gguf", "token_embd.weight", "outside the file"])
    # Metadata values replaced in place (same type, same size).
    def with_value(key, packed):
        kb = key.encode()
        at = data.find(struct.pack("<Q", len(kb)) + kb) + 8 + len(kb) + 4
        return data[:at] + packed + data[at + len(packed):]
    # llama.cpp rotates only rope.dimension_count dimensions of a head; ours rotates all, so fewer is refused.
    expect_error("GGUF partial rotary embedding",
                 gen(variant("n-rot.gguf", with_value("llama.rope.dimension_count", struct.pack("<I", 6)))),
                 ["n-rot.gguf", "rope.dimension_count 6 is not the head size", "partial rotary"])
    expect_error("GGUF infinite rope base",
                 gen(variant("theta.gguf", with_value("llama.rope.freq_base", struct.pack("<f", float("inf"))))),
                 ["theta.gguf", "rope_theta inf must be positive and finite"])
    # Metadata entries added in front of the others, with a filler entry that keeps the header's length a multiple of
    # the 32-byte alignment. So the data section and every tensor offset stay where they are.
    def with_entries(entries):
        def entry(key, t, packed):
            return struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", t) + packed
        def text(v):
            return struct.pack("<Q", len(v)) + v.encode()
        body = b"".join(entry(k, t, v) for k, t, v in entries)
        fill = len(entry("ascent.test.fill", 8, text("")))
        body += entry("ascent.test.fill", 8, text("x" * ((32 - (len(body) + fill) % 32) % 32)))
        n_kv = struct.unpack_from("<Q", data, 16)[0] + len(entries) + 1
        return data[:16] + struct.pack("<Q", n_kv) + body + data[24:]
    def scaling(v):
        return ("llama.rope.scaling.type", 8, struct.pack("<Q", len(v)) + v.encode())
    r = run(gen(variant("rope-none.gguf", with_entries([scaling("none")]))))
    check(r.returncode == 0 and r.stdout == v3.stdout, f"GGUF rope.scaling.type none loads and runs alike: {r.stderr!r}")
    # An array length the file cannot hold is refused before it sizes the array (2^31 int32s reserved 16 GB).
    for et, width in ((5, 4), (8, 8)):
        expect_error(f"GGUF array of type {et} longer than the file",
                     gen(variant(f"array-{et}.gguf", with_entries([("ascent.test.array", 9, struct.pack("<IQ", et, 2 ** 31))]))),
                     [f"array-{et}.gguf", "metadata ascent.test.array: 2147483648 elements need "
                      f"{width * 2 ** 31} bytes or more"])
    # llama.cpp's linear and YaRN scaling move every position's angles, which ours do not: refused.
    expect_error("GGUF rope.scaling.type yarn", gen(variant("rope-yarn.gguf", with_entries([scaling("yarn")]))),
                 ["rope-yarn.gguf", "rope.scaling.type 'yarn' is not supported"])
    expect_error("GGUF rope.scale_linear 4",
                 gen(variant("rope-lin.gguf", with_entries([("llama.rope.scale_linear", 6, struct.pack("<f", 4.0))]))),
                 ["rope-lin.gguf", "rope.scale_linear 4 is not supported"])
    expect_error("GGUF mixture of experts",
                 gen(variant("moe.gguf", with_entries([("llama.expert_count", 4, struct.pack("<I", 8))]))),
                 ["moe.gguf", "expert_count 8: mixture-of-experts models are not supported"])
    renamed = data.replace(b"blk.0.ffn_up.weight", b"blk.0.ffn_XX.weight")
    expect_error("GGUF missing tensor", gen(variant("renamed.gguf", renamed)), ["renamed.gguf", "blk.0.ffn_up.weight"])

    # An Ascent file (a safetensors container) whose GPT-2 fused QKV weight is a scalar: its rows were read from an
    # empty shape when the load split it into Q, K and V.
    config = {"arch": "gpt2", "vocab": 64, "dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 4, "head_dim": 8,
              "ffn_dim": 128, "max_seq": 64, "norm_eps": 1e-5, "rope_theta": 10000.0, "rope_style": "half",
              "rope_scaling": {"enabled": False, "factor": 1.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position": 8192.0},
              "sliding_window": 0, "rope_freq_factors": [], "tied_embeddings": True, "bos_id": 1, "eos_id": 2}
    meta = {"format": "ascent", "ascent.version": "2", "ascent.config": json.dumps(config), "ascent.quant": "bf16",
            "ascent.tensors": "{}", "ascent.tokenizer_kind": ""}
    header = json.dumps({"__metadata__": meta, "blk.0.attn_qkv.weight": {"dtype": "F32", "shape": [],
                                                                          "data_offsets": [0, 4]}}).encode()
    header += b" " * (-(8 + len(header)) % 64)  # the data 64-byte aligned, as quantize writes it
    expect_error("Ascent file with a scalar fused QKV",
                 gen(variant("scalar-qkv.safetensors", struct.pack("<Q", len(header)) + header + b"\0" * 4)),
                 ["scalar-qkv.safetensors", "tensor blk.0.attn_qkv.weight has shape (), expected 96 rows"])

    # llama2.c
    b260 = open(os.path.join(os.environ.get("ASCENT_SHARED", "../shared"), "models", "stories260K",
                             "stories260K.bin"), "rb").read()
    expect_error("llama2.c truncated", gen(variant("cut.bin", b260[:5000])), ["cut.bin", "truncated"])
    expect_error("llama2.c bad header", gen(variant("neg.bin", struct.pack("<i", -5) + b260[4:])),
                 ["neg.bin", "bad header"])
    # No tensor table: a header whose shapes need fewer floats than the file holds (hidden_dim 172 -> 1), or bytes
    # past the weights, are refused by the size instead of loading a prefix under the wrong shapes.
    expect_error("llama2.c header for fewer weights", gen(variant("hidden.bin", b260[:4] + struct.pack("<i", 1) + b260[8:])),
                 ["hidden.bin", "header promises", "after its header"])
    expect_error("llama2.c bytes past the weights", gen(variant("long.bin", b260 + b"\0" * 4)),
                 ["long.bin", "header promises", "after its header"])
    # Header fields at the format's limit (2^24) promise more floats than int64 counts: refused with the number.
    huge = struct.pack("<7i", 1 << 24, 1 << 24, 1 << 24, 1, 1, 1 << 24, 1 << 24)
    expect_error("llama2.c header past int64", gen(variant("huge.bin", huge + b"\0" * 64)),
                 ["huge.bin", "truncated: header promises 33056566505987440115712 floats of weights, file holds 16"])
    expect_error("not a model at all", gen(variant("text.bin", b"hello world, this is not a model" * 4)),
                 ["text.bin"])

    # Tokenizer and flags
    folder, _, _ = fresh_hf("bad-tokenizer")
    open(os.path.join(folder, "tokenizer.json"), "w").write('{"model": {"type": "BPE", "vocab": [1, 2')
    expect_error("malformed tokenizer.json", ["generate", "-m", folder, "-p", "hi", "-n", "2"],
                 ["tokenizer.json", "bad JSON"])
    # A pre-tokenizer regex that does not compile: the error names the file.
    tj = json.load(open(os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json"), encoding="utf-8"))
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?<=a+)b"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    bad_regex = os.path.join(ROOT, "bad-regex.json")
    json.dump(tj, open(bad_regex, "w", encoding="utf-8"), ensure_ascii=False)
    expect_error("pre-tokenizer regex that does not compile", ["tokenize", "--vocab", bad_regex, "-p", "hi"],
                 [bad_regex, "pre-tokenizer regex does not compile", "lookbehind"])
    # A tokenizer with more tokens than the model has rows: the error names the tokenizer and the model.
    s260 = os.path.join(SHARED, "models", "stories260K", "stories260K.bin")
    tok656 = os.path.join(SHARED, "models", "story-656K", "tokenizer.json")
    expect_error("tokenizer larger than the model's vocabulary",
                 ["generate", "-m", s260, "--tokenizer", tok656, "-p", "hi", "-n", "2"],
                 [f"{tok656}: the tokenizer has 2048 tokens but the model {s260} has a vocabulary of 512"])
    folder, _, _ = fresh_hf("ids")
    expect_error("prompt id outside the vocabulary", ["generate", "-m", folder, "--prompt-ids", "1 99999", "-n", "1"],
                 ["--prompt-ids", "99999"])
    # An f16 KV cache keeps K in key tiles, which need an even head size: a GPT-2 of 64 heads of 1 is refused at load,
    # naming the model and its head size, and runs with the default f32 cache.
    odd = os.path.join(ROOT, "gpt2-d1")
    cfg, w = MODELS["gpt2"]
    write_hf(odd, dict(cfg, n_head=cfg["n_embd"]), w)
    expect_error("f16 KV cache with an odd head size", gen(odd) + ["--kv-type", "f16"],
                 [odd, "f16 KV cache needs an even head size", "is 1"])
    r = run(gen(odd), timeout=120)
    check(r.returncode == 0, f"the same model runs with the f32 cache: exit {r.returncode} {r.stderr.strip()[-80:]}")
    # A KV cache type we do not have: refused by the flag's check, naming the flag and the types there are.
    r = run(["generate", "-m", folder, "--prompt-ids", "1 2", "-n", "1", "--kv-type", "q8_0"], timeout=120)
    check(r.returncode != 0 and "--kv-type" in r.stderr and "f16" in r.stderr,
          f"--kv-type q8_0 refused: exit {r.returncode}, {r.stderr.strip()[-80:]!r}")
    expect_error("prompt id not a number", ["generate", "-m", folder, "--prompt-ids", "1 x2", "-n", "1"],
                 ["--prompt-ids", "x2"])
    out = os.path.join(ROOT, "never.npy")
    expect_error("logits --beside with --twice", ["logits", "-m", folder, "--prompt-ids", "1 2", "-o", out,
                                                  "--beside", "1", "--twice"], ["--beside", "--twice"])
    check(not os.path.exists(out), "logits refused before writing anything")
    # A bad ASCENT_ISA is refused before the model loads, by every command that loads a model. The line names the
    # variable and nothing else, not the graph node whose kernel call would first read it.
    for value in ["bogus", "AVX512"]:
        r = run(gen(folder), timeout=120, env={"ASCENT_ISA": value})
        line = r.stderr.strip()
        check(r.returncode == 1 and line == f"ascent: error: ASCENT_ISA={value}: expected avx512, avx2 or ref",
              f"ASCENT_ISA={value} refused up front: exit {r.returncode}, {line!r}")
    r = run(["info", "-m", folder], timeout=120, env={"ASCENT_ISA": "bogus"})
    check(r.returncode == 1 and r.stderr.strip() == "ascent: error: ASCENT_ISA=bogus: expected avx512, avx2 or ref",
          f"info under ASCENT_ISA=bogus: exit {r.returncode}, {r.stderr.strip()!r}")
    q_out = os.path.join(ROOT, "never-quantized.safetensors")
    r = run(["quantize", "-m", folder, "-o", q_out, "--type", "int8"], timeout=120, env={"ASCENT_ISA": "bogus"})
    check(r.returncode == 1 and r.stderr.strip() == "ascent: error: ASCENT_ISA=bogus: expected avx512, avx2 or ref"
          and not os.path.exists(q_out), f"quantize under ASCENT_ISA=bogus: exit {r.returncode}, {r.stderr.strip()!r}")
    # perplexity: a window longer than the model's context (story-656K: 512) is refused, not cut to it. A negative
    # --chunks is refused, not read as "all". Both checks name the flag. The flags' own bounds and the text file are
    # checked before the model loads.
    s656 = os.path.join(SHARED, "models", "story-656K")
    text = os.path.join(SHARED, "corpora", "tinyshakespeare.txt")
    expect_error("perplexity -c past the context", ["perplexity", "-m", s656, "-f", text, "-c", "513"],
                 ["-c 513: more than the model's context of 512 tokens"])
    expect_error("perplexity --chunks -1", ["perplexity", "-m", s656, "-f", text, "--chunks", "-1"],
                 ["--chunks: must be 0 (all windows) or more, got -1"])
    expect_error("perplexity of a missing text, no model needed", ["perplexity", "-m", os.path.join(ROOT, "nope.gguf"),
                 "-f", os.path.join(ROOT, "nope.txt")], ["nope.txt: cannot open"])
    r = run(["perplexity", "-m", s656, "-f", text, "-c", "512", "--chunks", "1"], timeout=120)
    check(r.returncode == 0 and r.stdout.strip().splitlines()[-1].startswith("ppl = "),
          f"perplexity -c 512 (the whole context) runs: exit {r.returncode}")
    # generate: sampling values without a meaning are refused, naming the flag, not read as "off". So are a context past
    # the model's and one below 1. All before the model loads.
    for flag, value, message in [("--temp", "-1", "--temp must be 0 (greedy) or more, got -1"),
                                 ("--temp", "nan", "--temp must be 0 (greedy) or more, got nan"),
                                 ("--top-k", "-3", "--top-k must be 0 (off) or more, got -3"),
                                 ("--top-p", "2", "--top-p must be in (0, 1], got 2"),
                                 ("--min-p", "1.5", "--min-p must be in [0, 1], got 1.5"),
                                 ("--repeat-penalty", "inf", "--repeat-penalty must be positive, got inf"),
                                 ("--repeat-last-n", "-2", "--repeat-last-n must be -1 (the whole history) or more"),
                                 ("--presence-penalty", "2.5", "--presence-penalty must be in [-2, 2], got 2.5"),
                                 ("--frequency-penalty", "nan", "--frequency-penalty must be in [-2, 2], got nan"),
                                 ("--logit-bias", "5:101", "--logit-bias: the bias of token 5 must be in [-100, 100]"),
                                 ("--logit-bias", "5:1,5:2", "--logit-bias: token id 5 is given twice"),
                                 ("--logit-bias", "-1:2", "--logit-bias: token id -1 is negative"),
                                 ("--logit-bias", "5:1,x:2", "--logit-bias: 'x:2' is not ID:BIAS"),
                                 ("--logit-bias", "5", "--logit-bias: '5' is not ID:BIAS"),
                                 ("--logit-bias", "5:1,", "--logit-bias: '' is not ID:BIAS"),
                                 ("-c", "-1", "-c: must be 0 (the model's context) or more, got -1")]:
        expect_error(f"generate {flag} {value}", ["generate", "-m", os.path.join(ROOT, "nope.gguf"), "--prompt-ids",
                                                  "1 2 3", flag, value], [message])
    expect_error("generate --warmup -1", ["generate", "-m", os.path.join(ROOT, "nope.gguf"), "--prompt-ids", "1 2 3",
                                          "--warmup", "-1"], ["--warmup: must be >= 0, got -1"])
    expect_error("generate -c past the context", ["generate", "-m", s656, "--prompt-ids", "1 2 3", "-c", "513"],
                 ["-c 513: more than the model's context of 512 tokens"])
    expect_error("generate --logit-bias past the vocabulary", ["generate", "-m", s656, "--prompt-ids", "1 2 3",
                                                               "--logit-bias", "2048:1"],
                 ["--logit-bias: token id 2048 is outside the vocabulary of 2048 ids"])
    # A context that fills before -n tokens stops the run with a warning that says how many were made (5 positions
    # hold the 3 prompt tokens and 2 generated ones; the third generated one needs no position).
    r = run(["generate", "-m", s656, "--prompt-ids", "1 2 3", "-c", "5", "-n", "10", "--temp", "0", "--print-ids"],
            timeout=120)
    check(r.returncode == 0 and len(r.stdout.split()) == 6 and
          "stopped at the context length of 5 positions: 3 of the 10 tokens -n asked for" in r.stderr,
          f"a full context is reported: exit {r.returncode}, {r.stdout.strip()!r}, {r.stderr.strip()[-120:]!r}")
    # logits: negative --step / --beside (not read as 0); tokenize: -p beside --text-file (neither dropped); convert: a
    # GGUF written under another name. Each is refused, naming the flag, and nothing is written.
    npy = os.path.join(ROOT, "never.npy")
    for flag, message in [("--step", "--step: must be 0 (all at once) or more, got -1"),
                          ("--beside", "--beside: must be 0 (alone) or more, got -1")]:
        expect_error(f"logits {flag} -1", ["logits", "-m", s656, "--prompt-ids", "1 2 3", "-o", npy, flag, "-1"],
                     [message])
        check(not os.path.exists(npy), f"logits {flag} -1 wrote nothing")
    # Where -o is a link, the file it names is written and the link stays: a rename over the link would make it a plain
    # file. A device is written in place: a link to /dev/full fails with ENOSPC, and /dev/full stays a device (as root,
    # a rename would replace /dev/full itself with a plain file). A directory is refused.
    logits = ["logits", "-m", s656, "--prompt-ids", "1 2 3", "-o"]
    full_link = os.path.join(ROOT, "full.npy")
    os.symlink("/dev/full", full_link)
    expect_error("logits -o a link to /dev/full", logits + [full_link], [full_link, "write failed", "No space left"])
    check(os.path.islink(full_link) and not os.path.exists(full_link + ".tmp") and
          os.path.exists("/dev/full") and not os.path.isfile("/dev/full"),
          "the link and /dev/full are left as they were, and no temporary")
    link, real = os.path.join(ROOT, "link.npy"), os.path.join(ROOT, "real.npy")
    os.symlink("real.npy", link)
    r = run(logits + [link])
    check(r.returncode == 0 and os.path.islink(link) and os.path.isfile(real) and
          open(real, "rb").read(6) == b"\x93NUMPY", f"logits -o a link writes the file it names: {r.stderr.strip()!r}")
    expect_error("logits -o a directory", logits + [ROOT], [ROOT, "is a directory"])
    # A PATH.tmp planted beforehand as a link (a shared /tmp) is replaced, not followed to the file it names.
    victim, out = os.path.join(ROOT, "victim.txt"), os.path.join(ROOT, "planted.npy")
    open(victim, "w").write("precious")
    os.symlink(victim, out + ".tmp")
    r = run(logits + [out])
    check(r.returncode == 0 and open(victim).read() == "precious" and open(out, "rb").read(6) == b"\x93NUMPY" and
          not os.path.lexists(out + ".tmp"), f"a planted PATH.tmp link is not followed: {r.stderr.strip()!r}")
    # Their ids and flag combinations are checked before the model loads (a missing model is never reached).
    nope = os.path.join(ROOT, "nope.gguf")
    for what, args, message in [
            ("logits with a word for an id", ["--prompt-ids", "1 two 3"], "--prompt-ids: 'two' is not a token id"),
            ("logits with no ids", ["--prompt-ids", " "], "--prompt-ids: no ids given"),
            ("logits --beside with --step", ["--prompt-ids", "1 2", "--beside", "1", "--step", "1"],
             "--beside cannot be combined with --step or --twice")]:
        expect_error(what, ["logits", "-m", nope, "-o", npy] + args, [message])
    expect_error("generate with a word for an id", ["generate", "-m", nope, "--prompt-ids", "1 x"],
                 ["--prompt-ids: 'x' is not a token id"])
    expect_error("tokenize -p and --text-file", ["tokenize", "-m", s656, "-p", "hi", "--text-file", text],
                 ["give either -p or --text-file, not both"])
    not_gguf = os.path.join(ROOT, "model.bin")
    expect_error("convert -o without .gguf", ["convert", "-m", s656, "-o", not_gguf, "--type", "q8_0"],
                 [f"-o {not_gguf}: the output name must end in .gguf"])
    check(not os.path.exists(not_gguf), "convert -o model.bin wrote nothing")
    # -c 0 is the model's whole context (llama.cpp's meaning): a 510-token prompt leaves room for 3 of 10 tokens.
    long_prompt = " ".join(str(5 + i % 200) for i in range(510))
    r = run(["generate", "-m", s656, "--prompt-ids", long_prompt, "-c", "0", "-n", "10", "--temp", "0", "--print-ids"],
            timeout=120)
    check(r.returncode == 0 and "stopped at the context length of 512 positions: 3 of the 10 tokens" in r.stderr,
          f"-c 0 takes the model's context: exit {r.returncode}, {r.stderr.strip()[-120:]!r}")
    # doctor: a negative -t and a bad ASCENT_ISA are refused before any line is printed. -t is not read as all cores,
    # and the report does not fail halfway down.
    cpus = os.cpu_count()
    most = min(512, 8 * cpus)
    for args, env, message in [(["doctor", "-t", "-1"], None, "ascent: error: -t: thread count must be >= 0, got -1"),
                               # Spinning workers past 8 per CPU only slow each other down (-t 1000 would not finish).
                               (["doctor", "-t", "1000"], None,
                                f"ascent: error: -t 1000: at most {most} threads on this machine's {cpus} CPUs "
                                "(8 per CPU, 512 in all)"),
                               (["doctor"], {"ASCENT_ISA": "x"},
                                "ascent: error: ASCENT_ISA=x: expected avx512, avx2 or ref")]:
        r = run(args, timeout=120, env=env)
        check(r.returncode == 1 and r.stdout == "" and r.stderr.strip() == message,
              f"{' '.join(args)} {env or ''} refused up front: exit {r.returncode}, {r.stdout[:40]!r}, "
              f"{r.stderr.strip()!r}")
    # An unknown ASCENT_LOG level warns once, naming the levels, and the run goes on at the default level.
    r = run(gen(folder), timeout=120, env={"ASCENT_LOG": "verbose"})
    check(r.returncode == 0 and r.stderr.count("ASCENT_LOG=verbose: expected error, warn, info or debug") == 1,
          f"ASCENT_LOG=verbose warns once: exit {r.returncode}, {r.stderr.strip()[-120:]!r}")
    # ASCENT_PASSES' errors name the variable, --passes' the flag.
    r = run(gen(folder), timeout=120, env={"ASCENT_PASSES": "-fusion"})
    check(r.returncode == 1 and r.stderr.startswith("ascent: error: ASCENT_PASSES: unknown pass 'fusion' ("),
          f"ASCENT_PASSES=-fusion refused: exit {r.returncode}, {r.stderr.strip()!r}")
    expect_error("--passes -fusion", gen(folder) + ["--passes", "-fusion"], ["--passes: unknown pass 'fusion'"])
    # --passes overrides ASCENT_PASSES, so a bad value in the environment is not read when the flag is given.
    r = run(gen(folder) + ["--passes", "-fuse"], timeout=120, env={"ASCENT_PASSES": "-fusion"})
    check(r.returncode == 0 and "ASCENT_PASSES" not in r.stderr,
          f"--passes -fuse overrides ASCENT_PASSES=-fusion: exit {r.returncode}, {r.stderr.strip()[-160:]!r}")
    r = run(["generate", "--bogus-flag"])
    check(r.returncode == 2 and r.stderr.count("\n") == 1, f"unknown flag exits 2 with one line: {r.stderr.strip()!r}")
    shutil.rmtree(ROOT, ignore_errors=True)
    # An -o in a folder that does not exist is refused before any work, not after loading and computing everything.
    # --beside is bounded: 2^31 others would run for ever.
    story = os.path.join(SHARED, "models", "story-656K")
    missing = os.path.join(ROOT, "no-such-folder")
    for what, args, want in [
            ("quantize -o", ["quantize", "-m", story, "-o", os.path.join(missing, "q.safetensors"), "--type", "int8"],
             f"-o {missing}/q.safetensors: no folder {missing}"),
            ("convert -o", ["convert", "-m", story, "-o", os.path.join(missing, "c.gguf")],
             f"-o {missing}/c.gguf: no folder {missing}"),
            ("logits -o", ["logits", "-m", story, "--prompt-ids", "1 2", "-o", os.path.join(missing, "l.npy")],
             f"-o {missing}/l.npy: no folder {missing}"),
            ("logits --beside 2^31", ["logits", "-m", story, "--prompt-ids", "1 2", "-o", os.path.join(ROOT, "l.npy"),
                                      "--beside", str(2 ** 31)], f"--beside: at most 255 other sequences, got {2 ** 31}")]:
        r = run(args, timeout=60)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and lines == [f"ascent: error: {want}"] and r.stdout == "",
              f"{what}: refused before any work: exit {r.returncode}, {lines[:1]!r}, stdout {r.stdout[:40]!r}")
    # A directory named where a file is read: one line saying so, not an empty text (tokenize printing nothing and
    # exiting 0, perplexity saying the text has fewer than 2 tokens) or a bare std::filebuf error (chat-template).
    story = os.path.join(SHARED, "models", "story-656K")
    adir = os.path.join(ROOT, "a-directory")
    os.makedirs(adir, exist_ok=True)
    for what, args in [
            ("tokenize --text-file", ["tokenize", "--vocab", story, "--text-file", adir]),
            ("perplexity -f", ["perplexity", "-m", story, "-f", adir]),
            ("chat-template --context", ["chat-template", "--config", os.path.join(SHARED, "tokenizers", "qwen3"),
                                         "--context", adir]),
            ("quantize --calib", ["quantize", "-m", story, "-o", os.path.join(ROOT, "never.safetensors"), "--type",
                                  "int4", "--calib", adir])]:
        r = run(args)
        lines = r.stderr.strip().splitlines()
        want = f"ascent: error: {adir}: is a directory, expected a file" if "quantize" not in what else \
            f"ascent: error: {adir}: cannot read calibration text"
        check(r.returncode in (1, 2) and lines == [want] and r.stdout == "",
              f"{what} given a directory: exit {r.returncode}, {lines[:1]!r}, stdout {r.stdout[:40]!r}")
    finish()


if __name__ == "__main__":
    main()
