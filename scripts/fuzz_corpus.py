#!/usr/bin/env python3
"""Builds the seed corpus of every fuzz target (tests/fuzz) in OUT/<target>/, anew on each run, from ../shared:
small files as they are, large ones cut down to a few hundred kilobytes at most while staying valid (a seed that
loads reaches the deep code; mutations of a 10 MB file mostly touch data no check reads). Models are sliced to
a few small layers and written in every format the readers take, partly with the `ascent` program (convert,
quantize). Then each target's committed seeds (tests/fuzz/seeds/<target>/, and seeds/jinja/ for both Jinja targets)
and the inputs that once found a bug (tests/fuzz/regressions/<target>/) are copied in, so a corpus run replays them.

  scripts/fuzz_corpus.py --shared ../shared --ascent build/fuzz/ascent --out build/fuzz/tests/fuzz/corpus
"""
import argparse
import ast
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUZZ = os.path.join(REPO, "tests", "fuzz")
TARGETS = ["gguf", "safetensors", "llama2c", "ascent_file", "tokenizer_json", "sentencepiece", "llama2c_vocab",
           "jinja_parse", "jinja_render", "config"]


# --- llama2.c -----------------------------------------------------------------------------------------------------

def slice_llama2c(src, dst, dim, hidden, layers, heads, kv_heads, vocab, seq, shared=True):
    """Writes the first heads/rows/columns of a llama2.c checkpoint as a smaller one of the same head size; with
    shared False the classifier is stored apart (a negative vocab_size in the header)."""
    raw = open(src, "rb").read()
    C, F, L, H, KV, V, S = struct.unpack("<7i", raw[:28])
    V = abs(V)
    hd = C // H
    w = np.frombuffer(raw, dtype="<f4", offset=28)
    at = 0

    def take(*shape):
        nonlocal at
        n = int(np.prod(shape))
        a = w[at:at + n].reshape(shape)
        at += n
        return a

    emb, rms_att = take(V, C), take(L, C)
    wq, wk, wv, wo = take(L, C, C), take(L, KV * hd, C), take(L, KV * hd, C), take(L, C, C)
    rms_ffn, w1, w2, w3 = take(L, C), take(L, F, C), take(L, C, F), take(L, F, C)
    rms_final, fr, fi = take(C), take(S, hd // 2), take(S, hd // 2)
    q, k = heads * hd, kv_heads * hd
    parts = [emb[:vocab, :dim], rms_att[:layers, :dim], wq[:layers, :q, :dim], wk[:layers, :k, :dim],
             wv[:layers, :k, :dim], wo[:layers, :dim, :q], rms_ffn[:layers, :dim], w1[:layers, :hidden, :dim],
             w2[:layers, :dim, :hidden], w3[:layers, :hidden, :dim], rms_final[:dim], fr[:seq], fi[:seq]]
    if not shared:
        parts.append(emb[:vocab, :dim])
    assert q == dim, "the slice keeps dim = heads * head size"
    with open(dst, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab if shared else -vocab, seq))
        for p in parts:
            f.write(np.ascontiguousarray(p, dtype="<f4").tobytes())


# --- safetensors ----------------------------------------------------------------------------------------------------

def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32"
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype="<f4").reshape(e["shape"])
    return out, header.get("__metadata__")


def write_safetensors(path, tensors, dtype, metadata=None):
    header = {} if metadata is None else {"__metadata__": metadata}
    blobs, at = [], 0
    for name, t in tensors.items():
        t = np.ascontiguousarray(t, dtype=np.float32)
        if dtype == "F32":
            b = t.astype("<f4").tobytes()
        elif dtype == "F16":
            b = t.astype("<f2").tobytes()
        else:  # BF16: the top half of each f32, rounded to nearest even
            u = t.view(np.uint32).astype(np.uint64)
            b = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# The shape tests/fuzz/fuzz_safetensors.cc's fixed config.json gives (keep the two the same).
HF_SLICE = {"hidden": 32, "ffn": 32, "heads": 2, "kv_heads": 1, "layers": 2, "vocab": 64, "positions": 64}


def slice_hf(src_dir, dst_dir, dtype, untied=False):
    """story-656K (hidden 128, head size 16) cut to HF_SLICE, as a Hugging Face folder with model.safetensors."""
    t, meta = read_safetensors(os.path.join(src_dir, "model.safetensors"))
    s = HF_SLICE
    hd = 128 // 8
    C, F, q, k = s["hidden"], s["ffn"], s["heads"] * hd, s["kv_heads"] * hd
    out = {"lm_head.weight": t["lm_head.weight"][:s["vocab"], :C]}
    if untied:
        out["model.embed_tokens.weight"] = t["lm_head.weight"][:s["vocab"], :C] * 0.5
    for layer in range(s["layers"]):
        p = f"model.layers.{layer}."
        out[p + "input_layernorm.weight"] = t[p + "input_layernorm.weight"][:C]
        out[p + "post_attention_layernorm.weight"] = t[p + "post_attention_layernorm.weight"][:C]
        out[p + "self_attn.q_proj.weight"] = t[p + "self_attn.q_proj.weight"][:q, :C]
        out[p + "self_attn.k_proj.weight"] = t[p + "self_attn.k_proj.weight"][:k, :C]
        out[p + "self_attn.v_proj.weight"] = t[p + "self_attn.v_proj.weight"][:k, :C]
        out[p + "self_attn.o_proj.weight"] = t[p + "self_attn.o_proj.weight"][:C, :q]
        out[p + "mlp.gate_proj.weight"] = t[p + "mlp.gate_proj.weight"][:F, :C]
        out[p + "mlp.up_proj.weight"] = t[p + "mlp.up_proj.weight"][:F, :C]
        out[p + "mlp.down_proj.weight"] = t[p + "mlp.down_proj.weight"][:C, :F]
    out["model.norm.weight"] = t["model.norm.weight"][:C]
    os.makedirs(dst_dir, exist_ok=True)
    cfg = json.load(open(os.path.join(src_dir, "config.json")))
    cfg.update({"hidden_size": C, "intermediate_size": F, "num_attention_heads": s["heads"],
                "num_key_value_heads": s["kv_heads"], "num_hidden_layers": s["layers"], "vocab_size": s["vocab"],
                "max_position_embeddings": s["positions"], "tie_word_embeddings": not untied})
    json.dump(cfg, open(os.path.join(dst_dir, "config.json"), "w"), indent=2)
    write_safetensors(os.path.join(dst_dir, "model.safetensors"), out, dtype, None if untied else meta)


# --- GGUF -----------------------------------------------------------------------------------------------------------

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}


class Gguf:
    """A GGUF file as metadata (key -> (type, value[, element type])), tensor infos and the raw data section."""

    def __init__(self, path):
        b = open(path, "rb").read()
        self.pos = 0

        def rd(fmt):
            v = struct.unpack_from(fmt, b, self.pos)[0]
            self.pos += struct.calcsize(fmt)
            return v

        def rs():
            n = rd("<Q")
            s = b[self.pos:self.pos + n]
            self.pos += n
            return s

        def value(t):
            if t == 8:
                return rs()
            if t == 9:
                et, n = rd("<I"), rd("<Q")
                return (et, [value(et) for _ in range(n)])
            return rd(SCALAR[t])

        assert b[:4] == b"GGUF"
        self.pos = 4
        self.version, n_tensors, n_kv = rd("<I"), rd("<Q"), rd("<Q")
        self.kv = {}
        for _ in range(n_kv):
            key = rs().decode()
            t = rd("<I")
            self.kv[key] = (t, value(t))
        self.tensors = []
        for _ in range(n_tensors):
            name = rs()
            dims = [rd("<Q") for _ in range(rd("<I"))]
            self.tensors.append((name, dims, rd("<I"), rd("<Q")))
        align = self.kv.get("general.alignment", (4, 32))[1]
        self.data = b[(self.pos + align - 1) // align * align:]

    def write(self, path):
        out = bytearray(b"GGUF" + struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv)))

        def ws(s):
            out.extend(struct.pack("<Q", len(s)) + s)

        def value(t, v):
            if t == 8:
                ws(v)
            elif t == 9:
                et, items = v
                out.extend(struct.pack("<IQ", et, len(items)))
                for x in items:
                    value(et, x)
            else:
                out.extend(struct.pack(SCALAR[t], v))

        for key, (t, v) in self.kv.items():
            ws(key.encode())
            out.extend(struct.pack("<I", t))
            value(t, v)
        for name, dims, t, off in self.tensors:
            ws(name)
            out.extend(struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims))
            out.extend(struct.pack("<IQ", t, off))
        align = self.kv.get("general.alignment", (4, 32))[1]
        out.extend(b"\0" * (-len(out) % align))
        open(path, "wb").write(bytes(out) + self.data)


def cut_vocab(g, n):
    """Keeps a vocabulary's first n tokens (and the merges among them) in GGUF g's metadata; ids past it are dropped."""
    tokens = g.kv["tokenizer.ggml.tokens"][1][1][:n]
    kept = set(tokens)
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        if key in g.kv:
            et, items = g.kv[key][1]
            g.kv[key] = (9, (et, items[:n]))
    if "tokenizer.ggml.merges" in g.kv:
        def ok(m):
            a, _, b = m.partition(b" ")
            return a in kept and b in kept and a + b in kept
        g.kv["tokenizer.ggml.merges"] = (9, (8, [m for m in g.kv["tokenizer.ggml.merges"][1][1] if ok(m)]))
    for key in list(g.kv):
        if key.endswith("_token_id") and g.kv[key][1] >= n:
            del g.kv[key]


# --- tokenizer.json and tokenizer.model -----------------------------------------------------------------------------

def cut_tokenizer_json(src, dst, n):
    """A BPE tokenizer.json cut to its first n pieces, the merges among them and its added tokens (renumbered after
    them: they sit past the model's vocabulary)."""
    j = json.load(open(src, encoding="utf-8"))
    vocab = {p: i for p, i in j["model"]["vocab"].items() if i < n}
    j["model"]["vocab"] = vocab

    def ok(m):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        return a in vocab and b in vocab and a + b in vocab
    j["model"]["merges"] = [m for m in j["model"]["merges"] if ok(m)]
    renumber = {}
    for t in sorted(j["added_tokens"], key=lambda t: t["id"]):
        if t["id"] >= n:
            renumber[t["id"]] = n + len(renumber)
            t["id"] = renumber[t["id"]]

    def remap(x):
        if isinstance(x, dict):
            return {k: ([renumber.get(i, i) for i in v] if k == "ids" else remap(v)) for k, v in x.items()}
        return [remap(v) for v in x] if isinstance(x, list) else x
    j["post_processor"] = remap(j["post_processor"])
    json.dump(j, open(dst, "w", encoding="utf-8"), ensure_ascii=False)


def varint(b, pos):
    v, shift = 0, 0
    while True:
        c = b[pos]
        pos += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, pos


def cut_sentencepiece(src, dst, n):
    """A tokenizer.model (protobuf ModelProto) with its first n pieces (field 1) and every other field."""
    b = open(src, "rb").read()
    out, pos, pieces = bytearray(), 0, 0
    while pos < len(b):
        start = pos
        key, pos = varint(b, pos)
        wire = key & 7
        if wire == 0:
            _, pos = varint(b, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            size, pos = varint(b, pos)
            pos += size
        if key >> 3 == 1:
            pieces += 1
            if pieces > n:
                continue
        out.extend(b[start:pos])
    open(dst, "wb").write(bytes(out))


# --- Jinja ------------------------------------------------------------------------------------------------------

def feature_templates():
    """The feature templates of tests/e2e/test_chat_templates.py (its FEATURES literal, read without running it)."""
    tree = ast.parse(open(os.path.join(REPO, "tests", "e2e", "test_chat_templates.py"), encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "FEATURES" for t in node.targets):
            # Values are string literals, some joined with + or built with a comprehension: evaluated with no names
            # in scope, so only such constant expressions give a template.
            out = {}
            for k, v in zip(node.value.keys, node.value.values):
                try:
                    out[ast.literal_eval(k)] = eval(compile(ast.Expression(v), "FEATURES", "eval"), {"__builtins__": {}})
                except Exception:  # a value that needs a name from the test: not a seed
                    pass
            return out
    sys.exit("fuzz_corpus: FEATURES not found in tests/e2e/test_chat_templates.py")


# --- the corpus -----------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--ascent", required=True, help="the ascent program (convert, quantize)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    sh = os.path.abspath(a.shared)
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    for t in TARGETS + ["work"]:
        os.makedirs(os.path.join(out, t))
    work = os.path.join(out, "work")  # intermediate files, not a corpus

    def seed(target, name, data=None, src=None):
        path = os.path.join(out, target, name)
        if src is not None:
            shutil.copyfile(src, path)
        else:
            open(path, "wb").write(data if isinstance(data, bytes) else data.encode("utf-8"))

    def ascent(*args):
        # Warnings (a q8_0 model requantized) are expected here and say nothing about the seeds.
        subprocess.run([a.ascent, *args], check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, ASCENT_LOG="error"))

    stories = os.path.join(sh, "models", "stories260K")
    story = os.path.join(sh, "models", "story-656K")

    # llama2.c: stories260K cut to 2 layers of width 32 (4 heads of 8), vocabulary 512 shared or 64 apart.
    small_bin = os.path.join(work, "stories-small.bin")
    slice_llama2c(os.path.join(stories, "stories260K.bin"), small_bin, 32, 32, 2, 4, 2, 512, 32)
    seed("llama2c", "stories-small.bin", src=small_bin)
    slice_llama2c(os.path.join(stories, "stories260K.bin"), os.path.join(out, "llama2c", "stories-classifier.bin"),
                  16, 24, 1, 2, 1, 64, 8, shared=False)

    # safetensors: story-656K cut to HF_SLICE, in f32 (tied), f16 (untied) and bf16.
    for dtype, untied in (("F32", False), ("F16", True), ("BF16", False)):
        d = os.path.join(work, f"hf-{dtype.lower()}")
        slice_hf(story, d, dtype, untied)
        seed("safetensors", f"story-small-{dtype.lower()}.safetensors", src=os.path.join(d, "model.safetensors"))

    # GGUF: the small llama2.c model converted to each written type, the small HF one (rotate-half rows permuted),
    # one with a vocabulary, and the vocabularies of ../shared/vocab cut to 1000 tokens.
    for t in ("f32", "f16", "bf16", "q8_0", "q4_0"):
        ascent("convert", "-m", small_bin, "-o", os.path.join(out, "gguf", f"stories-small-{t}.gguf"), "--type", t)
    ascent("convert", "-m", os.path.join(work, "hf-f32"), "-o", os.path.join(out, "gguf", "story-small-q8_0.gguf"),
           "--type", "q8_0")
    spm = Gguf(os.path.join(sh, "vocab", "ggml-vocab-llama-spm.gguf"))
    model = Gguf(os.path.join(out, "gguf", "stories-small-q8_0.gguf"))
    cut_vocab(spm, 512)
    model.kv.update({k: v for k, v in spm.kv.items() if k.startswith("tokenizer.")})
    with_vocab = os.path.join(out, "gguf", "stories-small-q8_0-vocab.gguf")
    model.write(with_vocab)
    for name in ("llama-spm", "llama-bpe", "qwen2"):
        g = Gguf(os.path.join(sh, "vocab", f"ggml-vocab-{name}.gguf"))
        cut_vocab(g, 1000)
        g.write(os.path.join(out, "gguf", f"vocab-{name}-1000.gguf"))

    # Ascent files: the small llama2.c model quantized to each type with tok512.bin inside, and the GGUF one with
    # its vocabulary inside.
    tok = os.path.join(stories, "tok512.bin")
    for t, extra in (("int8", []), ("int4", ["--group", "32"]), ("bf16", [])):
        ascent("quantize", "-m", small_bin, "--tokenizer", tok, "-o",
               os.path.join(out, "ascent_file", f"stories-small-{t}.safetensors"), "--type", t, *extra)
    ascent("quantize", "-m", with_vocab, "-o", os.path.join(out, "ascent_file", "stories-small-gguf-vocab.safetensors"),
           "--type", "int8")

    # Tokenizers.
    seed("tokenizer_json", "story-656K.json", src=os.path.join(story, "tokenizer.json"))
    for name in ("llama3", "qwen3"):
        cut_tokenizer_json(os.path.join(sh, "tokenizers", name, "tokenizer.json"),
                           os.path.join(out, "tokenizer_json", f"{name}-2000.json"), 2000)
    seed("sentencepiece", "tok512.model", src=os.path.join(stories, "tok512.model"))
    cut_sentencepiece(os.path.join(sh, "tokenizers", "llama2-spm", "tokenizer.model"),
                      os.path.join(out, "sentencepiece", "llama2-1000.model"), 1000)
    seed("llama2c_vocab", "tok512.bin", src=tok)

    # Jinja: the model templates of ../shared and the e2e test's feature templates.
    for name in ("llama3", "qwen3"):
        template = json.load(open(os.path.join(sh, "tokenizers", name, "tokenizer_config.json")))["chat_template"]
        for target in ("jinja_parse", "jinja_render"):
            seed(target, f"{name}.jinja", template)
    for i, (name, source) in enumerate(feature_templates().items()):
        for target in ("jinja_parse", "jinja_render"):
            seed(target, f"feature-{i}.jinja", source)

    # Configs: fuzz_config.cc reads the first byte as the file (0 config.json, 1 generation_config.json,
    # 2 tokenizer_config.json).
    configs = [(0, os.path.join(story, "config.json")), (0, os.path.join(work, "hf-f16", "config.json")),
               (1, os.path.join(story, "generation_config.json")), (2, os.path.join(story, "tokenizer_config.json")),
               (2, os.path.join(sh, "tokenizers", "llama3", "tokenizer_config.json")),
               (2, os.path.join(sh, "tokenizers", "qwen3", "tokenizer_config.json"))]
    for i, (kind, path) in enumerate(configs):
        seed("config", f"{i}-{os.path.basename(path)}", bytes([kind]) + open(path, "rb").read())

    shutil.rmtree(work)
    for target in TARGETS:
        # seeds/jinja serves both Jinja targets.
        folders = [("seeds", target), ("regressions", target)] + [("seeds", "jinja")] * target.startswith("jinja")
        for sub, name in folders:
            d = os.path.join(FUZZ, sub, name)
            if os.path.isdir(d):
                for f in sorted(os.listdir(d)):
                    seed(target, f"{sub}-{f}", src=os.path.join(d, f))
    for target in TARGETS:
        files = os.listdir(os.path.join(out, target))
        size = sum(os.path.getsize(os.path.join(out, target, f)) for f in files)
        print(f"fuzz_corpus: {target}: {len(files)} inputs, {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
