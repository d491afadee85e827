"""llama.cpp's tokenizer vectors: every case of every ../shared/vocab/*.inp, encoded through `ascent tokenize
--vocab` with its .gguf (no BOS, special-token text as plain text), gives the matching line of the .out exactly.
The same cases through the Hugging Face tokenizer.json files of Qwen3 and Llama-3 give the qwen2 and llama-bpe
ids (the vocabularies are the same)."""
import glob
import os

from common import SHARED, check, finish, run, tmpdir

SEP = "\n__ggml_vocab_test__\n"


def cases(inp):
    with open(inp, encoding="utf-8", newline="") as f:
        text = f.read()
    parts = text.split(SEP)
    if parts and parts[-1].endswith("\n__ggml_vocab_test__"):
        parts[-1] = parts[-1][: -len("\n__ggml_vocab_test__")]
    return parts


def expected(out):
    with open(out, encoding="utf-8", newline="") as f:
        return f.read().split("\n")


def encode_cases(vocab, texts):
    """Encodes every text in one run of ascent (one vocabulary load); returns one id list per text."""
    path = os.path.join(tmpdir(), "cases.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(SEP.join(texts))
    r = run(["tokenize", "--vocab", vocab, "--text-file", path, "--separator", SEP])
    if r.returncode != 0:
        print(r.stderr)
        return [None] * len(texts)
    lines = r.stdout.split("\n")[: len(texts)]
    return [[int(x) for x in line.split()] for line in lines]


def check_vocab(vocab, inp, out, label):
    texts, want = cases(inp), expected(out)
    got = encode_cases(vocab, texts)
    bad = [(i, t, g, want[i]) for i, (t, g) in enumerate(zip(texts, got)) if g != [int(x) for x in want[i].split()]]
    for i, text, g, w in bad[:5]:
        print(f"  case {i} {text!r}: got {g} want [{w}]")
    check(not bad and len(got) == len(texts), f"{label}: {len(texts) - len(bad)}/{len(texts)} cases exact")


def main():
    inps = sorted(glob.glob(os.path.join(SHARED, "vocab", "*.inp")))
    check(len(inps) >= 3, f"found {len(inps)} vector files")
    for inp in inps:
        gguf = inp[: -len(".inp")]
        check_vocab(gguf, inp, gguf + ".out", os.path.basename(gguf))
    pairs = [("qwen3", "ggml-vocab-qwen2.gguf"), ("llama3", "ggml-vocab-llama-bpe.gguf")]
    for name, vec in pairs:
        tj = os.path.join(SHARED, "tokenizers", name, "tokenizer.json")
        base = os.path.join(SHARED, "vocab", vec)
        check_vocab(tj, base + ".inp", base + ".out", f"{name}/tokenizer.json vs {vec} vectors")
    # Qwen3's tokenizer.json normalises to NFC: decomposed text encodes like the composed form.
    import unicodedata
    qwen = os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json")
    composed = "Cửa Việt, café, Ångström"
    decomposed = unicodedata.normalize("NFD", composed)
    a, b = encode_cases(qwen, [composed, decomposed])
    check(composed != decomposed and a == b and a is not None, f"qwen3 NFC normalizer: NFD input gives {b}, NFC {a}")
    # Special-token text is plain text by default and one token with --parse-special.
    r_plain = run(["tokenize", "--vocab", qwen, "-p", "<|im_start|>user"])
    r_special = run(["tokenize", "--vocab", qwen, "-p", "<|im_start|>user", "--parse-special"])
    check(r_special.returncode == 0 and r_plain.returncode == 0 and r_special.stdout.split() == ["151644", "872"]
          and len(r_plain.stdout.split()) > 2,
          f"--parse-special: {r_special.stdout.strip()} (plain: {r_plain.stdout.strip()})")
    # BOS comes from the file's post-processor, as in Hugging Face: story-656K's template adds it; this Llama-3
    # tokenizer.json's post-processor is ByteLevel only, so it adds none.
    story = os.path.join(SHARED, "models", "story-656K", "tokenizer.json")
    r = run(["tokenize", "--vocab", story, "-p", "Once", "--add-special"])
    plain = run(["tokenize", "--vocab", story, "-p", "Once"])
    check(r.returncode == 0 and plain.returncode == 0 and r.stdout.split()[:1] == ["1"] and
          plain.stdout.split()[:1] != ["1"],
          f"--add-special adds story-656K's BOS: {r.stdout.strip()}")
    llama3 = os.path.join(SHARED, "tokenizers", "llama3", "tokenizer.json")
    r = run(["tokenize", "--vocab", llama3, "-p", "Hi", "--add-special"])
    check(r.returncode == 0 and r.stdout.split() == ["13347"], f"--add-special on Llama-3's tokenizer.json adds nothing: {r.stdout.strip()}")
    finish()


if __name__ == "__main__":
    main()
