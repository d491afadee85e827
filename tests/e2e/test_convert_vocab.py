"""`ascent convert` embeds the model's vocabulary in llama.cpp's tokenizer.ggml keys, so llama.cpp loads the file alone.
The files are read here by common.gguf_layout (written from the GGUF specification), and also by llama.cpp's gguf-py
where its anchor is built (../shared/anchors/llama.cpp/build.sh; said when it is not).
- stories260K with tok512.bin: model "llama", and tokens, scores, types and special ids are libsentencepiece's for
  tok512.model (its id_to_piece, get_score, is_*). `ascent tokenize` on the file gives libsentencepiece's ids, and the
  known greedy story comes out of it alone.
- story-656K (tokenizer.json, merges ranked, no scores): tokens and types are tokenizer.json's; scores rank each piece
  by the first merge making it. Its lines of Shakespeare tokenize as from the folder; the known greedy ids hold.
- A GGUF source's tokenizer.* keys are copied unchanged.
- Byte-level vocabularies (GPT-2's encoder.json, Llama-3's and Qwen3's tokenizer.json) on small random models: model
  "gpt2", merges as "a b", tokenizer.ggml.pre named by llama.cpp's names; a pre-tokenizer regex llama.cpp has no name
  for is refused, naming the file.
- A model without a vocabulary is written without one and says so."""
import json
import os
import shutil
import sys

import sentencepiece
import torch

from common import SHARED, check, finish, gguf_layout, run, tmpdir, write_safetensors

D = tmpdir()
S260 = os.path.join(SHARED, "models", "stories260K")
S656 = os.path.join(SHARED, "models", "story-656K")
SEP = "\x01SEP\x01"
SENTENCES = ["Once upon a time, there was a little girl named Lily.", "She loved to play outside in the park.",
             "One day, she saw a big, red ball!", "The cat sat on the mat; the dog did not.", "Tom and Sue ran home."]
KNOWN_656 = [1, 147, 201, 282, 215, 286, 598, 1662, 356, 499, 826, 1363]


def gguf_py():
    """llama.cpp's gguf-py module from the built anchor, or None (said once)."""
    cache = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    path = os.path.join(cache, "anchors", "llama.cpp-34af94cd9", "src", "gguf-py")
    if not os.path.isdir(path):
        print(f"skip gguf-py as a second reader: no {path} (../shared/anchors/llama.cpp/build.sh puts it there); "
              "common.gguf_layout reads every file")
        return None
    sys.path.insert(0, path)
    try:
        import gguf
        return gguf
    except ImportError as e:
        print(f"skip gguf-py as a second reader: {e}")
        return None


GGUF = gguf_py()


def tokenizer_meta(path):
    """The file's tokenizer.* keys, read by common.gguf_layout; where gguf-py is there, it must read the same."""
    with open(path, "rb") as f:
        meta = {k: v for k, v in gguf_layout(f.read())[0].items() if k.startswith("tokenizer.")}
    if GGUF is not None:
        r = GGUF.GGUFReader(path)
        theirs = {}
        for k, field in r.fields.items():
            if k.startswith("tokenizer."):
                v = field.contents()
                theirs[k] = v
        same = sorted(theirs) == sorted(meta) and all(
            (theirs[k] == meta[k]) if not isinstance(meta[k], float) else abs(theirs[k] - meta[k]) < 1e-6 for k in meta)
        check(same, f"{os.path.basename(path)}: gguf-py reads the same tokenizer keys")
    return meta


def tokenize(args, texts):
    path = os.path.join(D, "texts.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(SEP.join(texts))
    r = run(["tokenize"] + args + ["--text-file", path, "--separator", SEP])
    if r.returncode != 0:
        print(r.stderr.strip())
        return None
    return [[int(x) for x in line.split()] for line in r.stdout.split("\n")[:-1]]


def greedy_ids(model, n, extra=()):
    r = run(["generate", "-m", model, "--temp", 0, "-n", n, "--print-ids"] + list(extra))
    return [int(x) for x in r.stdout.split()] if r.returncode == 0 else r.stderr.strip()


def check_tok512():
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(S260, "tok512.model"))
    bin_path, out = os.path.join(S260, "stories260K.bin"), os.path.join(D, "s260.gguf")
    r = run(["convert", "-m", bin_path, "--tokenizer", os.path.join(S260, "tok512.bin"), "-o", out, "--type", "f32"])
    check(r.returncode == 0, f"convert stories260K --tokenizer tok512.bin ({r.stderr.strip()[:200]})")
    meta = tokenizer_meta(out)
    n = sp.vocab_size()
    check(meta.get("tokenizer.ggml.model") == "llama", "tok512: tokenizer.ggml.model is llama")
    tokens = meta.get("tokenizer.ggml.tokens", [])
    want = [sp.id_to_piece(i) for i in range(n)]
    check(tokens == want, f"tok512: the {n} tokens are libsentencepiece's pieces (first apart: "
          f"{next((i for i in range(min(len(tokens), n)) if tokens[i] != want[i]), len(tokens))})")
    check(meta.get("tokenizer.ggml.scores") == [sp.get_score(i) for i in range(n)],
          "tok512: the scores are libsentencepiece's")

    def kind(i):
        return 2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 5 if sp.is_unused(i) else 1
    check(meta.get("tokenizer.ggml.token_type") == [kind(i) for i in range(n)],
          "tok512: the token types are libsentencepiece's (unknown 2, control 3, byte 6, normal 1)")
    check((meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id"),
           meta.get("tokenizer.ggml.unknown_token_id")) == (sp.bos_id(), sp.eos_id(), sp.unk_id()),
          "tok512: BOS, EOS and unknown ids are libsentencepiece's")
    check((meta.get("tokenizer.ggml.add_bos_token"), meta.get("tokenizer.ggml.add_eos_token"),
           meta.get("tokenizer.ggml.add_space_prefix")) == (True, False, True),
          "tok512: adds BOS, no EOS, and a space prefix")
    got = tokenize(["-m", out], SENTENCES)
    check(got == [sp.encode(t) for t in SENTENCES], f"tok512: `ascent tokenize` on the GGUF gives libsentencepiece's "
          f"ids for {len(SENTENCES)} sentences")
    # Double spaces: tok512.model removes them (tok512.bin cannot say so); the file encodes as its source, tok512.bin.
    spaced = ["two  spaces", "  leading", "Ünïcödé — 你好 🦙", "tab\there"]
    check(got is not None and tokenize(["-m", out], spaced) == tokenize(["--vocab", os.path.join(S260, "tok512.bin")],
                                                                        spaced),
          "tok512: text with runs of spaces and Unicode encodes as tok512.bin does")
    r = run(["generate", "-m", out, "--temp", 0, "-n", 40])
    check(r.returncode == 0 and r.stdout.startswith("Once upon a time, there was a little girl named Lily."),
          f"stories260K's GGUF alone generates the known story ({r.stdout[:60]!r})")
    src = greedy_ids(bin_path, 40, ["--tokenizer", os.path.join(S260, "tok512.bin"), "-p", "The park"])
    check(greedy_ids(out, 40, ["-p", "The park"]) == src, "stories260K: the GGUF's greedy ids from a prompt are the "
          "source's")

    bare = os.path.join(D, "s260-bare.gguf")
    r = run(["convert", "-m", bin_path, "-o", bare, "--type", "f32"])
    check(r.returncode == 0 and "holds no vocabulary" in r.stdout and "llama.cpp will need one" in r.stdout,
          f"convert without a tokenizer writes the file and says it has no vocabulary ({r.stdout.strip()[-120:]!r})")
    check("tokenizer.ggml.tokens" not in tokenizer_meta(bare), "... and it holds no tokens")
    return out


def check_656():
    out = os.path.join(D, "s656.gguf")
    r = run(["convert", "-m", S656, "-o", out, "--type", "f32"])
    check(r.returncode == 0, f"convert story-656K ({r.stderr.strip()[:200]})")
    # HF matches its added tokens ("normalized": true) in the normalized text; llama.cpp's keys cannot say so.
    check("may tokenize some text otherwise" in r.stderr and "added-token matching" in r.stderr,
          f"story-656K: the difference GGUF cannot describe is named ({r.stderr.strip()[:160]!r})")
    with open(os.path.join(S656, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    model = tj["model"]
    n = 2048
    pieces, types = [""] * n, [5] * n
    for p, i in model["vocab"].items():
        pieces[i] = p
        is_byte = len(p) == 6 and p.startswith("<0x") and p.endswith(">")
        types[i] = 6 if is_byte and model["byte_fallback"] else 1
    for t in tj["added_tokens"]:
        pieces[t["id"]], types[t["id"]] = t["content"], 3 if t["special"] else 4
    first = {}
    for rank, m in enumerate(model["merges"]):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        first.setdefault(a + b, rank)
    scores = [float(-first.get(p, len(model["merges"]))) if types[i] in (1, 4, 5) else 0.0
              for i, p in enumerate(pieces)]
    meta = tokenizer_meta(out)
    check(meta.get("tokenizer.ggml.model") == "llama", "story-656K: tokenizer.ggml.model is llama")
    check(meta.get("tokenizer.ggml.tokens") == pieces, "story-656K: the tokens are tokenizer.json's, by id")
    check(meta.get("tokenizer.ggml.token_type") == types, "story-656K: the types are tokenizer.json's (special 3, "
          "byte fallback 6)")
    check(meta.get("tokenizer.ggml.scores") == scores, "story-656K: each piece scores minus its first merge's rank")
    check((meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id"),
           meta.get("tokenizer.ggml.unknown_token_id"), meta.get("tokenizer.ggml.add_bos_token")) == (1, 2, 0, True),
          "story-656K: BOS 1 (added, as its template says), EOS 2, unknown 0")
    with open(os.path.join(SHARED, "corpora", "tinyshakespeare.txt"), encoding="utf-8") as f:
        lines = [line for line in f.read().split("\n")[:3000] if line]
    src = tokenize(["-m", S656, "--add-special"], lines)
    check(src is not None and tokenize(["-m", out, "--add-special"], lines) == src,
          f"story-656K: {len(lines)} lines of Shakespeare tokenize from the GGUF as from the folder")
    check(greedy_ids(out, 11) == KNOWN_656, "story-656K's GGUF gives the known greedy ids")
    return out


def check_gguf_source(src):
    out = os.path.join(D, "s656-again.gguf")
    r = run(["convert", "-m", src, "-o", out, "--type", "q8_0"])
    check(r.returncode == 0, f"convert a GGUF ({r.stderr.strip()[:200]})")
    a, b = tokenizer_meta(src), tokenizer_meta(out)
    check(a == b and len(a) >= 8, f"a GGUF source's {len(a)} tokenizer keys are copied unchanged")


def tiny_llama(name, vocab_size, tokenizer_files):
    """A random 1-layer Llama of vocab_size rows with the given tokenizer files copied in."""
    folder = os.path.join(D, name)
    os.makedirs(folder)
    C, F = 8, 16
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C, "intermediate_size": F,
           "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": vocab_size,
           "rms_norm_eps": 1e-5, "max_position_embeddings": 64, "tie_word_embeddings": True, "bos_token_id": 0,
           "eos_token_id": 0}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    g = torch.Generator().manual_seed(1)
    w = {"model.embed_tokens.weight": torch.randn(vocab_size, C, generator=g), "model.norm.weight": torch.ones(C)}
    p = "model.layers.0."
    for n, shape in (("self_attn.q_proj", (C, C)), ("self_attn.k_proj", (C, C)), ("self_attn.v_proj", (C, C)),
                     ("self_attn.o_proj", (C, C)), ("mlp.gate_proj", (F, C)), ("mlp.up_proj", (F, C)),
                     ("mlp.down_proj", (C, F))):
        w[p + n + ".weight"] = torch.randn(*shape, generator=g) * 0.1
    w[p + "input_layernorm.weight"] = torch.ones(C)
    w[p + "post_attention_layernorm.weight"] = torch.ones(C)
    write_safetensors(os.path.join(folder, "model.safetensors"), w)
    for src, dst in tokenizer_files:
        if isinstance(src, dict):
            with open(os.path.join(folder, dst), "w", encoding="utf-8") as f:
                json.dump(src, f)
        else:
            shutil.copy(src, os.path.join(folder, dst))
    return folder


def check_byte_level():
    text = ["Hello world, it's 2024!", "  indented\tline\n\nnext", "Ünïcödé — 你好 🦙", "numbers 1234567 and 3.14"]
    gpt2 = os.path.join(SHARED, "tokenizers", "gpt2")
    with open(os.path.join(gpt2, "vocab.bpe"), encoding="utf-8") as f:
        merges = [line for line in f.read().split("\n") if line and not line.startswith("#version")]
    with open(os.path.join(gpt2, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    cases = [("gpt2", gpt2, [(os.path.join(gpt2, "encoder.json"), "encoder.json"),
                             (os.path.join(gpt2, "vocab.bpe"), "vocab.bpe")], "gpt-2"),
             ("llama3", os.path.join(SHARED, "tokenizers", "llama3", "tokenizer.json"), None, "llama-bpe"),
             ("qwen3", os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json"), None, "qwen2")]
    for name, source, files, pre in cases:
        n = len(encoder) if name == "gpt2" else None
        if files is None:
            with open(source, encoding="utf-8") as f:
                tj = json.load(f)
            n = 1 + max(max(tj["model"]["vocab"].values()), max(t["id"] for t in tj["added_tokens"]))
            files = [(source, "tokenizer.json")]
        folder = tiny_llama(name, n + 3, files)  # three rows more than tokens: padded as llama.cpp's converter pads
        out = os.path.join(D, name + ".gguf")
        r = run(["convert", "-m", folder, "-o", out, "--type", "f32"])
        check(r.returncode == 0, f"{name}: convert a model with a byte-level vocabulary ({r.stderr.strip()[:200]})")
        meta = tokenizer_meta(out) if r.returncode == 0 else {}
        tokens = meta.get("tokenizer.ggml.tokens", [])
        check(meta.get("tokenizer.ggml.model") == "gpt2" and meta.get("tokenizer.ggml.pre") == pre,
              f"{name}: tokenizer.ggml.model gpt2, pre {pre} ({meta.get('tokenizer.ggml.pre')})")
        check(len(tokens) == n + 3 and tokens[n:] == [f"[PAD{i}]" for i in range(n, n + 3)] and
              meta.get("tokenizer.ggml.token_type", [])[n:] == [5] * 3,
              f"{name}: {n} tokens padded to the model's {n + 3} rows with unused [PADi]")
        if name == "gpt2":
            check(tokens[:n] == sorted(encoder, key=encoder.get) and meta.get("tokenizer.ggml.merges") == merges,
                  "gpt2: tokens are encoder.json's by id and merges vocab.bpe's lines")
        got = tokenize(["-m", out], text)
        check(got is not None and got == tokenize(["-m", folder], text),
              f"{name}: `ascent tokenize` on the GGUF gives the folder's ids")
    # A GGUF whose tokenizer.ggml.pre Ascent's encoder does not run (llama.cpp's "bloom": the same length as
    # "qwen2", so the file's offsets hold) still converts, its keys copied as stored.
    with open(os.path.join(D, "qwen3.gguf"), "rb") as f:
        data = f.read()
    key = b"tokenizer.ggml.pre"
    at = data.find(len(key).to_bytes(8, "little") + key + (8).to_bytes(4, "little") + (5).to_bytes(8, "little"))
    bloom = os.path.join(D, "bloom.gguf")
    with open(bloom, "wb") as f:
        f.write(data[:at + 8 + len(key) + 12] + b"bloom" + data[at + 8 + len(key) + 17:])
    out = os.path.join(D, "bloom-again.gguf")
    r = run(["convert", "-m", bloom, "-o", out, "--type", "f32"])
    meta = tokenizer_meta(out) if r.returncode == 0 else {}
    check(at > 0 and meta.get("tokenizer.ggml.pre") == "bloom" and meta == tokenizer_meta(bloom),
          f"a GGUF with a pre-tokenizer Ascent does not run converts with its keys unchanged ({r.stderr.strip()[:160]})")
    # A split regex llama.cpp has no name for: refused, naming the file, and nothing written.
    with open(os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\p{N}+|[^\p{L}\p{N}]+"
    n = 1 + max(max(tj["model"]["vocab"].values()), max(t["id"] for t in tj["added_tokens"]))
    folder = tiny_llama("odd-split", n, [(tj, "tokenizer.json")])
    out = os.path.join(D, "odd-split.gguf")
    r = run(["convert", "-m", folder, "-o", out, "--type", "f32"])
    err = r.stderr.strip()
    check(r.returncode == 1 and folder + ":" in err and "tokenizer.ggml.pre has no name" in err and
          not os.path.exists(out), f"a pre-tokenizer llama.cpp cannot name is refused, naming the folder ({err[:200]})")


def main():
    check_tok512()
    check_gguf_source(check_656())
    check_byte_level()
    finish()


if __name__ == "__main__":
    main()
