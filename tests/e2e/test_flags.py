"""Flags of docs/COMMANDS.md that no other test exercises, each against an independent check:
- `tokenize --pieces`: libsentencepiece's pieces for tokenizer.model, and the vocabulary's own strings (read here
  from tokenizer.json and from llama2.c's tokenizer.bin) for the ids `tokenize` prints;
- `chat-template --add-generation-prompt`: python3-jinja2 rendering the same template with add_generation_prompt;
- `convert --type bf16`: the file's matrices are PyTorch's bf16 rounding of a random model's, and `ascent logits`
  on it matches the PyTorch reference run on those weights with bf16-rounded matmul inputs;
- `bench --cold`: no untimed warm-up run, seen as the forward passes the run makes (--memory-csv samples each)."""
import json
import math
import os
import struct

import sentencepiece
import torch

from common import ACTIVATIONS, SHARED, check, finish, hf_from_gguf, load_npy, read_gguf, reference_logits, run, tmpdir
from test_chat_templates import reference as jinja2_reference
from test_models import MODELS, write_hf

D = tmpdir()
S656 = os.path.join(SHARED, "models", "story-656K")
SEP = "\n@@SEP@@\n"
TEXTS = ["Hello world", "Once upon a time, there was a little girl named Lily.", " two  spaces and a tab\there",
         "Ünïcödé — 你好 🦙", "numbers 3.14159 and 2024-01-01", "'quotes' \"double\" (parens) [brackets]", "x",
         "   leading spaces", "trailing spaces   "]


def write(name, text):
    path = os.path.join(D, name)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return path


def tokenize(vocab, *flags):
    r = run(["tokenize", "--vocab", vocab, "--text-file", write("texts.txt", SEP.join(TEXTS)), "--separator", SEP]
            + list(flags))
    return r.stdout.split("\n")[:-1] if r.returncode == 0 else [r.stderr.strip()]


def tokenizer_bin_pieces(path):
    """llama2.c's tokenizer.bin: int32 max token length, then per token a float score, an int32 length, its bytes."""
    with open(path, "rb") as f:
        data = f.read()
    pos, pieces = 4, []
    while pos < len(data):
        n = struct.unpack_from("<i", data, pos + 4)[0]
        pieces.append(data[pos + 8:pos + 8 + n].decode("utf-8", "surrogateescape"))
        pos += 8 + n
    return pieces


def check_pieces():
    spm = os.path.join(SHARED, "tokenizers", "llama2-spm", "tokenizer.model")
    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    got, want = tokenize(spm, "--pieces"), [" ".join(sp.encode(t, out_type=str)) for t in TEXTS]
    check(got == want, f"tokenize --pieces with tokenizer.model prints libsentencepiece's pieces "
                       f"({sum(a == b for a, b in zip(got, want))}/{len(TEXTS)} texts) {got[:2]}")
    for vocab in (os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json"),
                  os.path.join(SHARED, "models", "stories260K", "tok512.bin")):
        if vocab.endswith(".json"):
            inverse = {i: p for p, i in json.load(open(vocab, encoding="utf-8"))["model"]["vocab"].items()}
        else:
            inverse = dict(enumerate(tokenizer_bin_pieces(vocab)))
        ids = tokenize(vocab)
        got = tokenize(vocab, "--pieces")
        want = [" ".join(inverse[int(i)] for i in line.split()) for line in ids]
        name = os.path.relpath(vocab, SHARED)
        check(len(got) == len(TEXTS) and got == want,
              f"tokenize --pieces with {name} prints the vocabulary's string of each id "
              f"({sum(a == b for a, b in zip(got, want))}/{len(TEXTS)} texts) {got[:2]}")


def check_generation_prompt():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]
    context = write("messages.json", json.dumps(messages))
    for model in ("qwen3", "llama3"):
        folder = os.path.join(SHARED, "tokenizers", model)
        config = os.path.join(folder, "tokenizer_config.json")
        outputs = {}
        for flag in (True, False):
            want = jinja2_reference(config, {"messages": messages, "add_generation_prompt": flag})
            for where in (config, folder):
                r = run(["chat-template", "--config", where, "--context", context] +
                        (["--add-generation-prompt"] if flag else []))
                outputs[flag] = r.stdout
                check(r.returncode == 0 and r.stdout == want,
                      f"{model}: chat-template --config {os.path.basename(where)} "
                      f"{'--add-generation-prompt ' if flag else ''}equals jinja2 with add_generation_prompt={flag}"
                      + ("" if r.stdout == want else f"\n    want {want!r}\n    got  {r.stdout!r} {r.stderr.strip()}"))
        # Qwen3's template ends with the assistant's header only when asked; Llama 3's base template always does.
        check((outputs[True] != outputs[False]) == (model == "qwen3"),
              f"{model}: the flag {'adds' if model == 'qwen3' else 'does not change'} the assistant's header: "
              f"{outputs[True][-40:]!r}")


def check_bf16_convert():
    # A random model: story-656K's f32 weights are all bf16 values already, so they would not show the rounding.
    cfg, w = MODELS["llama"]
    folder, gguf = os.path.join(D, "llama"), os.path.join(D, "llama-bf16.gguf")
    write_hf(folder, cfg, w)
    r = run(["convert", "-m", folder, "-o", gguf, "--type", "bf16"])
    check(r.returncode == 0, f"convert --type bf16: {r.stderr.strip()}")
    if r.returncode != 0:
        return
    stored = hf_from_gguf(cfg, read_gguf(gguf)[1])
    # Matrices (the embedding included) round to nearest even, as PyTorch does; norms stay f32, as llama.cpp's.
    rounded = {k: v.to(torch.bfloat16).float() if v.dim() == 2 else v for k, v in w.items()}
    truncated = [k for k, v in w.items() if v.dim() == 2 and
                 not torch.equal((v.view(torch.int32) & -65536).view(torch.float32), rounded[k])]
    same = [k for k, v in rounded.items() if k in stored and torch.equal(stored[k], v)]
    check(len(same) == len(rounded) == len(stored) and truncated,
          f"the GGUF holds PyTorch's bf16 rounding of every matrix and the f32 norms ({len(same)}/{len(rounded)} "
          f"tensors bitwise; truncation would differ in {len(truncated)})")
    ids = torch.randint(3, cfg["vocab_size"], (48,), generator=torch.Generator().manual_seed(11)).tolist()
    out = os.path.join(D, "bf16.npy")
    r = run(["logits", "-m", gguf, "--prompt-ids", " ".join(map(str, ids)), "-o", out])
    ours = load_npy(out) if r.returncode == 0 else torch.full((len(ids), cfg["vocab_size"]), math.inf)
    # Matmul inputs rounded to bf16 make a position's logits jump by ~1e-2 wherever a 1e-7 difference in summation
    # order carries an input across a rounding boundary (the f32 and f64 references differ so). Most positions meet
    # no such input and match to 1e-5; the f32 weights, unrounded inputs or truncated inputs match at none.
    per_position = (ours - reference_logits(cfg, rounded, ids, act=ACTIVATIONS["bf16"])).abs().amax(dim=1)
    close = int((per_position < 1e-5).sum())
    check(close >= 3 * len(ids) // 4 and per_position.max() < 2e-2,
          f"convert --type bf16: logits match PyTorch on the bf16 weights with bf16 matmul inputs at {close}/"
          f"{len(ids)} positions within 1e-5 (at least 3/4), all within {per_position.max():.1e} < 2e-2")


def check_bench_cold():
    """Each run is one prefill forward, and n decode forwards; the warm-up is one prefill and min(n, 8) decode
    forwards. Prefill and decode forwards differ by their arena (the plan's bucket: 8 tokens or 1)."""
    roof = ["--roofline-gbps", 20, "--roofline-gflops", 200, "--roofline-int8-gops", 800, "--roofline-bf16-gflops", 400]
    counts = {}
    for cold in (False, True):
        csv = os.path.join(D, f"bench-{cold}.csv")
        r = run(["bench", "-m", S656, "-p", 8, "-n", 10, "-r", 2, "--jsonl", "--memory-csv", csv] + roof +
                (["--cold"] if cold else []))
        objs = [json.loads(line) for line in r.stdout.splitlines()] if r.returncode == 0 else []
        arenas = [line.split(",")[1] for line in open(csv).read().splitlines()[1:]] if r.returncode == 0 else []
        prefill = arenas[:1] * arenas.count(arenas[0]) if arenas else []
        counts[cold] = (len(prefill), len(arenas) - len(prefill))
        check(r.returncode == 0 and [len(o["samples_tps"]) for o in objs] == [2, 2] and arenas[:len(prefill)] == prefill,
              f"bench {'--cold ' if cold else ''}-p 8 -n 10 -r 2: two timed runs of each test, prefill forwards "
              f"first: {counts[cold]} prefill and decode forwards {r.stderr.strip()}")
    check(counts[False] == (3, 28) and counts[True] == (2, 20),
          f"--cold drops the untimed warm-up (1 prefill, 8 decode forwards): {counts[False]} -> {counts[True]}")


def main():
    check_pieces()
    check_generation_prompt()
    check_bf16_convert()
    check_bench_cold()
    finish()


if __name__ == "__main__":
    main()
