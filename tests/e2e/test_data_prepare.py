"""`ascent data prepare` end to end: the token files hold what libsentencepiece (python3-sentencepiece) makes of each
document on stories260K's tok512.model, with BOS before and EOS after; the folder's files agree with index.json;
output is the same for one seed whatever the worker count; bad input gives one line naming the culprit and leaves no
index.json; a terminal gets a progress bar.

The sampler (train/dataset.h) is checked by tests/unit/dataset_test.cc."""
import json
import os
import pty
import subprocess

import numpy as np
import sentencepiece

from common import ASCENT, SHARED, check, finish, run, tmpdir

D = tmpdir()
TOK512 = os.path.join(SHARED, "models", "stories260K", "tok512.model")
STORY = os.path.join(SHARED, "models", "story-656K")


def documents(text):
    """Documents as the command documents them: runs of lines that are not blank (empty or only spaces, tabs, CRs),
    joined by newlines, without the last line's line end."""
    docs, cur = [], []
    for line in text.split("\n"):
        if line.strip(" \t\r") == "":
            if cur:
                docs.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    if cur:
        docs.append("\n".join(cur))
    return [d[:-1] if d.endswith("\r") else d for d in docs]


def corpus(name, source, nbytes, skip=0):
    with open(os.path.join(SHARED, "corpora", source), encoding="utf-8") as f:
        text = f.read()[skip:skip + nbytes]
    path = os.path.join(D, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path, text


def prepare(out, inputs, tokenizer, *extra):
    return run(["data", "prepare", "--input", *inputs, "--tokenizer", tokenizer, "--out", out, *extra], timeout=120)


def split_docs(folder, split):
    """The split's documents as id lists, read with numpy from the documented layout."""
    index = json.load(open(os.path.join(folder, "index.json")))
    dtype = {"uint16": "<u2", "int32": "<i4"}[index["dtype"]]
    ids = np.fromfile(os.path.join(folder, f"{split}.bin"), dtype=dtype)
    starts = np.fromfile(os.path.join(folder, f"{split}.idx"), dtype="<i8")
    return [ids[starts[i]:starts[i + 1]].tolist() for i in range(len(starts) - 1)], ids, starts, index


def expect_error(what, args, must_contain, code=1):
    r = run(args, timeout=120)
    lines = r.stderr.strip().splitlines()
    ok = r.returncode == code and len(lines) == 1 and all(s in lines[0] for s in must_contain)
    check(ok, f"{what}: exit {r.returncode}, {len(lines)} line(s): {lines[0] if lines else ''!r}")


def main():
    shakespeare, text_a = corpus("shakespeare.txt", "tinyshakespeare.txt", 30000)
    bible, text_b = corpus("bible.txt", "kjv-bible.txt", 30000, skip=100000)

    # Against libsentencepiece: every document of both files, in order, each split keeping the file order.
    sp = sentencepiece.SentencePieceProcessor(model_file=TOK512)
    ref = [[sp.bos_id()] + sp.encode(d) + [sp.eos_id()] for d in documents(text_a) + documents(text_b)]
    out = os.path.join(D, "tok512")
    r = prepare(out, [shakespeare, bible], TOK512, "--val-fraction", "0.1", "--workers", "2", "--seed", "3")
    check(r.returncode == 0, f"prepare with tok512.model: exit {r.returncode} {r.stderr.strip()[-200:]}")
    train, _, _, index = split_docs(out, "train")
    val, _, _, _ = split_docs(out, "val")
    check(len(train) + len(val) == len(ref) and len(val) == round(0.1 * len(ref)),
          f"{len(train)} train + {len(val)} val documents of {len(ref)}, val a tenth")
    # Walk the reference in order: each document is the next of one split or the other.
    ti = vi = 0
    matched = True
    for doc in ref:
        if ti < len(train) and train[ti] == doc:
            ti += 1
        elif vi < len(val) and val[vi] == doc:
            vi += 1
        else:
            matched = False
            break
    check(matched and ti == len(train) and vi == len(val),
          f"the splits interleave to libsentencepiece's ids of every document (stopped at train {ti}, val {vi})")
    check(index["dtype"] == "uint16" and index["tokenizer"]["vocab_size"] == sp.get_piece_size(),
          f"tok512: dtype {index['dtype']}, vocab {index['tokenizer']['vocab_size']}")
    check(r.stdout.startswith(f"{out}: train {sum(map(len, train))} tokens in {len(train)} documents, val "
                              f"{sum(map(len, val))} tokens in {len(val)} documents"),
          f"summary line: {r.stdout.strip()!r}")

    # story-656K: the index agrees with the files; workers 1 and 2 give the same bytes; another seed other splits.
    outs = {}
    for name, extra in (("w1", ["--workers", "1"]), ("w2", ["--workers", "2"]),
                        ("seed2", ["--workers", "2", "--seed", "2"])):
        outs[name] = os.path.join(D, f"story-{name}")
        r = prepare(outs[name], [shakespeare, bible], STORY, *extra)
        check(r.returncode == 0, f"prepare story-656K {name}: exit {r.returncode} {r.stderr.strip()[-200:]}")
    for split in ("train", "val"):
        docs, ids, starts, index = split_docs(outs["w1"], split)
        s = index["splits"][split]
        check(s["tokens"] == len(ids) == starts[-1] and s["documents"] == len(docs) and starts[0] == 0,
              f"story-656K {split}: index says {s}, files hold {len(ids)} tokens, {len(docs)} documents")
        check(all(d[0] == 1 and d[-1] == 2 and 1 not in d[1:] and 2 not in d[:-1] for d in docs),
              f"story-656K {split}: each document is BOS, text, EOS (ids 1 and 2 nowhere else)")
    same = all(open(os.path.join(outs["w1"], f), "rb").read() == open(os.path.join(outs["w2"], f), "rb").read()
               for f in ("train.bin", "val.bin", "train.idx", "val.idx", "index.json"))
    check(same, "workers 1 and 2: identical files")
    differ = open(os.path.join(outs["w1"], "val.bin"), "rb").read() != open(os.path.join(outs["seed2"], "val.bin"),
                                                                           "rb").read()
    check(differ, "--seed 2 draws other val documents")

    # A vocabulary past 65536 pieces gives int32 files. This Llama-3 tokenizer.json adds no BOS, so none is written.
    out = os.path.join(D, "llama3")
    r = prepare(out, [bible], os.path.join(SHARED, "tokenizers", "llama3"), "--workers", "2")
    check(r.returncode == 0, f"prepare llama3: exit {r.returncode} {r.stderr.strip()[-200:]}")
    docs, ids, starts, index = split_docs(out, "train")
    size = os.path.getsize(os.path.join(out, "train.bin"))
    check(index["dtype"] == "int32" and size == 4 * len(ids) == 4 * index["splits"]["train"]["tokens"],
          f"llama3: dtype {index['dtype']}, train.bin {size} bytes for {len(ids)} tokens")
    check(not index["tokenizer"]["bos_per_document"] and ids.max() < 128256
          and all(d[-1] == 128001 and 128000 not in d and 128001 not in d[:-1] for d in docs),
          "llama3: each document is its text then <|end_of_text|>, no BOS")

    # A terminal gets a progress bar on stderr; the summary stays on stdout.
    master, slave = pty.openpty()
    p = subprocess.run([ASCENT, "data", "prepare", "--input", shakespeare, "--tokenizer", STORY, "--out",
                        os.path.join(D, "tty")], stdout=subprocess.PIPE, stderr=slave, timeout=120)
    os.close(slave)
    bar = os.read(master, 65536).decode("utf-8", "replace")
    os.close(master)
    shown = all(s in bar for s in ("data prepare [", "100%", "tokens/s"))
    check(p.returncode == 0 and "Sanitizer" not in bar and shown,
          f"progress bar on a terminal: {bar.strip()[-120:]!r}")

    # Errors: one line naming the culprit. A run refused before it writes leaves the folder alone; once it writes, the
    # old index.json is gone first, so the half-replaced folder is refused by readers.
    folder = outs["w2"]
    expect_error("missing input", ["data", "prepare", "--input", os.path.join(D, "nope.txt"), "--tokenizer", STORY,
                                   "--out", folder], ["nope.txt", "cannot open"])
    check(os.path.exists(os.path.join(folder, "index.json")),
          "a prepare refused before writing leaves the folder as it was")
    binary = os.path.join(D, "binary.txt")
    open(binary, "wb").write(b"fine\n\nstill fine\nbut \xff here\n")
    expect_error("not UTF-8", ["data", "prepare", "--input", shakespeare, binary, "--tokenizer", STORY, "--out",
                               folder], [f"{binary}:4: not UTF-8"])
    check(not os.path.exists(os.path.join(folder, "index.json")),
          "a prepare that fails while writing leaves the folder without index.json")
    empty = os.path.join(D, "empty.txt")
    open(empty, "w").close()
    expect_error("empty input", ["data", "prepare", "--input", empty, "--tokenizer", STORY, "--out", folder],
                 [empty, "empty"])
    blank = os.path.join(D, "blank.txt")
    open(blank, "w").write("\n \n\t\n")
    expect_error("blank input", ["data", "prepare", "--input", blank, "--tokenizer", STORY, "--out", folder],
                 [blank, "no text"])
    expect_error("missing tokenizer", ["data", "prepare", "--input", shakespeare, "--tokenizer",
                                       os.path.join(D, "no-model"), "--out", folder],
                 ["--tokenizer", "no-model", "no such file"])
    expect_error("a text file as tokenizer", ["data", "prepare", "--input", shakespeare, "--tokenizer", shakespeare,
                                              "--out", folder], ["--tokenizer", shakespeare])
    expect_error("folder without a tokenizer", ["data", "prepare", "--input", shakespeare, "--tokenizer", D,
                                                "--out", folder], [D, "no tokenizer.json"])
    expect_error("out under a file", ["data", "prepare", "--input", shakespeare, "--tokenizer", STORY, "--out",
                                      os.path.join(shakespeare, "sub")], ["--out", "cannot create"])
    locked = os.path.join(D, "locked")
    os.makedirs(locked)
    os.chmod(locked, 0o500)
    if os.access(locked, os.W_OK):
        print("skip out not writable: this user writes in a read-only folder (root)")
    else:
        expect_error("out not writable", ["data", "prepare", "--input", shakespeare, "--tokenizer", STORY, "--out",
                                          locked], ["--out", locked, "cannot write"])
    expect_error("val fraction 1", ["data", "prepare", "--input", shakespeare, "--tokenizer", STORY, "--out", folder,
                                    "--val-fraction", "1"], ["--val-fraction"])
    expect_error("no --tokenizer", ["data", "prepare", "--input", shakespeare, "--out", folder], ["--tokenizer"],
                 code=2)
    finish()


if __name__ == "__main__":
    main()
