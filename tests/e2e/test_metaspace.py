"""SentencePiece-style tokenizer.json files that pre-tokenize by Hugging Face's Metaspace (Mistral's, and Llama's as
transformers converts them outside legacy mode) encode as the tokenizers library's Metaspace defines:

- the space prefix only where it puts one: never before a run of text that already starts with a space, and with
  prepend_scheme "first" only at the start of the text, not after a special token;
- with split true, each space starting a word that no merge crosses;
- the same inside a Sequence.

Read wrongly, each rule changes the ids without a word.

The files are story-656K's tokenizer.json (a SentencePiece-style BPE whose legacy normalizer, Prepend + Replace,
prefixes every run) with its normalizer swapped for a Metaspace pre-tokenizer. Expected ids are one of: a piece of the
vocabulary looked up here; the legacy file's ids, where Metaspace's rules make the two the same; or (split) the words as
Metaspace cuts them, cut here and encoded one at a time. Bad Metaspace steps are refused by name."""
import json
import os

from common import SHARED, check, finish, run, tmpdir

D = tmpdir()
SP = "\u2581"
STORY = json.load(open(os.path.join(SHARED, "models", "story-656K", "tokenizer.json")))
VOCAB = STORY["model"]["vocab"]
END = 2  # <|end_story|>, a special token
assert STORY["added_tokens"][END]["content"] == "<|end_story|>"


def metaspace(scheme, split=False, **extra):
    return dict({"type": "Metaspace", "replacement": SP, "prepend_scheme": scheme, "split": split}, **extra)


def variant(name, pre, decoder=None):
    path = os.path.join(D, name + ".json")
    with open(path, "w") as f:
        json.dump(dict(STORY, normalizer=None, pre_tokenizer=pre, decoder=decoder or STORY["decoder"]), f)
    return path


LEGACY = os.path.join(SHARED, "models", "story-656K", "tokenizer.json")
FIRST = variant("first", metaspace("first"))
ALWAYS = variant("always", metaspace("always"))
# Without prepend_scheme (older files), add_prefix_space true means "always".
OLD_ALWAYS = variant("old-always", {"type": "Metaspace", "replacement": SP, "add_prefix_space": True, "split": False})
# Older files have no split either: Metaspace then splits.
OLD_SPLIT = variant("old-split", {"type": "Metaspace", "replacement": SP, "add_prefix_space": True})
NEVER = variant("never", metaspace("never"), decoder={"type": "Sequence", "decoders": [
    {"type": "ByteFallback"}, {"type": "Fuse"}, metaspace("never")]})
SPLIT = variant("split", metaspace("first", split=True))
IN_SEQUENCE = variant("in-sequence", {"type": "Sequence", "pretokenizers": [metaspace("first")]})


def ids(vocab, texts, special=False):
    """Each text's ids, one run of the CLI (texts joined by a separator it splits on)."""
    sep = "\n@@@\n"
    path = os.path.join(D, "texts.txt")
    with open(path, "w") as f:
        f.write(sep.join(texts))
    r = run(["tokenize", "--vocab", vocab, "--text-file", path, "--separator", sep]
            + (["--parse-special"] if special else []), timeout=300)
    check(r.returncode == 0, f"{os.path.basename(vocab)}: tokenize ran: {r.stderr.strip()[:200]}")
    lines = r.stdout.split("\n") if r.returncode == 0 else []
    check(len(lines) == len(texts) + 1 and lines[-1] == "",
          f"{os.path.basename(vocab)}: one line of ids per text ({len(lines) - 1} for {len(texts)})")
    return [[int(x) for x in line.split()] for line in lines[:len(texts)]]


def main():
    with open(os.path.join(SHARED, "corpora", "tinyshakespeare.txt")) as f:
        lines = [l.strip() for l in f if l.strip()][:300]

    # Text that starts with no space: Metaspace's prefix is the legacy file's (prefixes agree, nothing else differs).
    legacy = ids(LEGACY, lines)
    for name, vocab in (("first", FIRST), ("always", ALWAYS), ("add_prefix_space", OLD_ALWAYS),
                        ("in a Sequence", IN_SEQUENCE)):
        got = ids(vocab, lines)
        same = sum(a == b for a, b in zip(got, legacy))
        check(same == len(lines), f"Metaspace {name}: {same} of {len(lines)} corpus lines give the legacy file's ids")

    # A run that starts with a space gets no second one: " text" encodes as the legacy file's "text" (the legacy
    # normalizer gives "▁▁text"; its ids differ, so the case tells the two apart).
    spaced = [" " + l for l in lines[:50]]
    legacy_spaced = ids(LEGACY, spaced)
    for name, vocab in (("first", FIRST), ("always", ALWAYS), ("in a Sequence", IN_SEQUENCE)):
        got = ids(vocab, spaced)
        same = sum(a == b for a, b in zip(got, legacy[:50]))
        check(same == 50, f"Metaspace {name}: text starting with a space is not prefixed again ({same} of 50)")
    check(sum(a != b for a, b in zip(legacy_spaced, legacy[:50])) == 50,
          "(the legacy file prefixes such text again: its ids differ on all 50)")

    # After a special token: "first" prefixes only the text's start, "always" every run, never prefixes none.
    the, sp_the = VOCAB["the"], ids(LEGACY, ["the"])[0]
    check(sp_the != [the], f"('the' and '{SP}the' encode differently: {sp_the} against {[the]})")
    cases = ["the<|end_story|>the", "<|end_story|>the"]
    expect = {
        "first": (FIRST, [sp_the + [END, the], [END, the]]),
        "always": (ALWAYS, [sp_the + [END] + sp_the, [END] + sp_the]),
        "never": (NEVER, [[the, END, the], [END, the]]),
    }
    for name, (vocab, want) in expect.items():
        got = ids(vocab, cases, special=True)
        check(got == want, f"{name}: around a special token {cases} -> {got} (want {want})")

    # split: each "▁" starts a word (merged with what follows), which is encoded alone. The words are cut here and
    # encoded by the file with no prefix and no split, one text each.
    texts = lines[:100] + ["a  b", "the   end ", "  two leading"]
    words = []
    for t in texts:
        s = t.replace(" ", SP) if t.startswith(" ") else SP + t.replace(" ", SP)  # no prefix before a space
        cut = [i for i, ch in enumerate(s) if ch == SP and i > 0]
        words.append([s[a:b] for a, b in zip([0] + cut, cut + [len(s)])])
    flat = [w for ws in words for w in ws]
    enc = iter(ids(NEVER, flat))
    want = [[i for _ in ws for i in next(enc)] for ws in words]
    for name, vocab in (("split", SPLIT), ("with no split field", OLD_SPLIT)):
        got = ids(vocab, texts)
        same = sum(a == b for a, b in zip(got, want))
        check(same == len(texts), f"Metaspace {name}: {same} of {len(texts)} texts give their words' ids, one by one")
    differ = sum(a != b for a, b in zip(got[:100], legacy[:100]))
    check(differ > 0, f"(split changes the ids of {differ} of 100 corpus lines: this vocabulary has pieces that "
                      f"cross a space)")

    # Refused by name: what the encoder would silently do otherwise.
    refused = {
        "split-without-bytelevel": ({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\d"}, "behavior": "Isolated", "invert": False},
            metaspace("first")]}, "Split without a ByteLevel step"),
        "two-metaspace": ({"type": "Sequence", "pretokenizers": [metaspace("first"), metaspace("first")]},
                          "two Metaspace steps"),
        "scheme-sometimes": (metaspace("sometimes"), "Metaspace prepend_scheme 'sometimes'"),
    }
    for name, (pre, needle) in refused.items():
        path = variant(name, pre)
        r = run(["tokenize", "--vocab", path, "-p", "hello"])
        msg = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(msg) == 1 and f"{name}.json" in msg[0] and needle in msg[0],
              f"refused ({name}): {msg[0] if msg else r.stdout[:80]!r}")
    qwen = json.load(open(os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json")))
    pre = qwen["pre_tokenizer"]
    path = os.path.join(D, "metaspace-bytelevel.json")
    with open(path, "w") as f:
        json.dump(dict(qwen, pre_tokenizer=dict(pre, pretokenizers=pre["pretokenizers"] + [metaspace("first")])), f)
    r = run(["tokenize", "--vocab", path, "-p", "hello"])
    msg = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(msg) == 1 and "metaspace-bytelevel.json" in msg[0] and
          "Metaspace beside ByteLevel" in msg[0], f"refused (Metaspace with ByteLevel): {msg[0] if msg else ''!r}")
    finish()


if __name__ == "__main__":
    main()
