"""Llama-2's tokenizer.model, read by our own protobuf reader, encodes like libsentencepiece (the oracle, through
Debian's python3-sentencepiece) on llama.cpp's vector cases and on the whole of tinyshakespeare.txt, and
decode(encode(x)) == x for all of them. GPT-2's encoder.json + vocab.bpe and the tokenizer.json files round-trip too."""
import os

import sentencepiece

from common import SHARED, check, finish, run, tmpdir
from test_vocab_vectors import SEP, cases, encode_cases

MODEL = os.path.join(SHARED, "tokenizers", "llama2-spm", "tokenizer.model")
D = tmpdir()


def write(name, data):
    path = os.path.join(D, name)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(data)
    return path


def encode(vocab, text, name="t.txt"):
    r = run(["tokenize", "--vocab", vocab, "--text-file", write(name, text)])
    return [int(x) for x in r.stdout.split()] if r.returncode == 0 else None


def decode(vocab, ids):
    r = run(["tokenize", "--vocab", vocab, "--decode", "--text-file", write("ids.txt", " ".join(map(str, ids)))])
    return r.stdout if r.returncode == 0 else None


def decode_cases(vocab, id_lists):
    path = write("ids.txt", "\n".join(" ".join(map(str, ids)) for ids in id_lists))
    r = run(["tokenize", "--vocab", vocab, "--decode", "--text-file", path, "--separator", SEP])
    return r.stdout.split(SEP) if r.returncode == 0 else []


def main():
    sp = sentencepiece.SentencePieceProcessor(model_file=MODEL)
    texts = cases(os.path.join(SHARED, "vocab", "ggml-vocab-llama-spm.gguf.inp"))
    encoded = encode_cases(MODEL, texts)
    decoded = decode_cases(MODEL, [e or [] for e in encoded])
    bad_enc = [(i, t, e, sp.encode(t)) for i, (t, e) in enumerate(zip(texts, encoded)) if e != sp.encode(t)]
    bad_rt = [i for i, t in enumerate(texts) if i >= len(decoded) or decoded[i] != t]
    for b in bad_enc[:5]:
        print("  ", b)
    check(not bad_enc, f"tokenizer.model encodes {len(texts) - len(bad_enc)}/{len(texts)} cases as libsentencepiece")
    check(not bad_rt, f"tokenizer.model decode(encode(x)) == x for {len(texts) - len(bad_rt)}/{len(texts)} cases")

    with open(os.path.join(SHARED, "corpora", "tinyshakespeare.txt"), encoding="utf-8") as f:
        shakespeare = f.read()
    ours = encode(MODEL, shakespeare, "shakespeare.txt")
    ref = sp.encode(shakespeare)
    first = next((i for i, (a, b) in enumerate(zip(ours or [], ref)) if a != b), None)
    check(ours == ref, f"tinyshakespeare.txt: {len(ref)} ids equal libsentencepiece's (first difference: {first})")
    check(decode(MODEL, ours or []) == shakespeare, "tinyshakespeare.txt: decode(encode(x)) == x")

    for vocab in (os.path.join(SHARED, "tokenizers", "gpt2"), os.path.join(SHARED, "tokenizers", "llama3", "tokenizer.json"),
                  os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json")):
        name = os.path.relpath(vocab, SHARED)
        decoded = decode_cases(vocab, [e or [] for e in encode_cases(vocab, texts)])
        bad = [i for i, t in enumerate(texts) if i >= len(decoded) or decoded[i] != t]
        check(not bad, f"{name}: decode(encode(x)) == x for {len(texts) - len(bad)}/{len(texts)} cases")
    gpt2 = encode(os.path.join(SHARED, "tokenizers", "gpt2"), "Hello world, it's 2024!")
    check(gpt2 == [15496, 995, 11, 340, 338, 48609, 0], f"GPT-2 encoder.json + vocab.bpe: {gpt2}")
    finish()


if __name__ == "__main__":
    main()
