#!/usr/bin/env python3
"""Encode speed of every tokenizer family on English text (MB/s on one thread, vocabulary load excluded):
the median and range of several runs of `ascent tokenize --timing` over ../shared/corpora.

  bench/bench_tokenize.py [--runs 5] [--ascent build/release/ascent]
"""
import argparse
import os
import re
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared")
# (label, vocabulary, extra flags): --parse-special looks for the vocabulary's special tokens in the text (a chat
# prompt's way), Llama-3's 256 of them.
VOCABS = [
    ("llama-spm (GGUF)", "vocab/ggml-vocab-llama-spm.gguf"),
    ("llama2 tokenizer.model", "tokenizers/llama2-spm/tokenizer.model"),
    ("llama-bpe (GGUF)", "vocab/ggml-vocab-llama-bpe.gguf"),
    ("llama3 tokenizer.json", "tokenizers/llama3/tokenizer.json"),
    ("llama3 tokenizer.json, --parse-special", "tokenizers/llama3/tokenizer.json", "--parse-special"),
    ("qwen2 (GGUF)", "vocab/ggml-vocab-qwen2.gguf"),
    ("qwen3 tokenizer.json", "tokenizers/qwen3/tokenizer.json"),
    ("gpt2 encoder.json", "tokenizers/gpt2"),
]
TEXTS = ["corpora/kjv-bible.txt", "corpora/tinyshakespeare.txt"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ascent", default=os.path.join(ROOT, "build", "release", "ascent"))
    a = ap.parse_args()
    print(f"| vocabulary | text | MB/s median | min | max |")
    print(f"|---|---|---|---|---|")
    for label, vocab, *flags in VOCABS:
        for text in TEXTS:
            speeds = []
            for _ in range(a.runs):
                r = subprocess.run([a.ascent, "tokenize", "--vocab", os.path.join(SHARED, vocab), "--text-file",
                                    os.path.join(SHARED, text), "--timing", *flags], capture_output=True, text=True,
                                   check=True)
                speeds.append(float(re.search(r"([\d.]+) MB/s", r.stdout).group(1)))
            print(f"| {label} | {os.path.basename(text)} | {statistics.median(speeds):.1f} | {min(speeds):.1f} "
                  f"| {max(speeds):.1f} |", flush=True)


if __name__ == "__main__":
    main()
