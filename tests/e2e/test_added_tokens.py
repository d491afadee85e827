"""tokenizer.json added tokens keep their matching rules when special tokens are parsed, as Hugging Face's
AddedToken defines them: lstrip and rstrip take the whitespace on that side (Unicode White_Space, up to the previous
match) into the token, so out of the text around it; single_word matches only where no word character (letters,
marks, digits, '_') touches the token, and the text is then encoded as text. Before, the three flags were not read:
the whitespace stayed in the neighbouring text and single-word tokens matched inside words, without a word.

The files are story-656K's tokenizer.json with <|end_story|>'s flags set (its added tokens matched before
normalization, "normalized": false, where its Prepend normalizer prefixes every run). Expected ids: the special
token's id and the ids of the text around it as it must be cut, each run encoded alone (or, for a refused
single-word match, the whole text encoded without special tokens)."""
import json
import os

from common import SHARED, check, finish, run, tmpdir

D = tmpdir()
STORY = json.load(open(os.path.join(SHARED, "models", "story-656K", "tokenizer.json")))
END = 2
assert STORY["added_tokens"][END]["content"] == "<|end_story|>"
TOK = "<|end_story|>"


def variant(name, **flags):
    added = [dict(t, normalized=False) for t in STORY["added_tokens"]]
    added[END] = dict(added[END], **flags)
    path = os.path.join(D, name + ".json")
    with open(path, "w") as f:
        json.dump(dict(STORY, added_tokens=added), f)
    return path


PLAIN = variant("plain")
RSTRIP = variant("rstrip", rstrip=True)
LSTRIP = variant("lstrip", lstrip=True)
SINGLE = variant("single", single_word=True)


def ids(vocab, texts, special=True):
    sep = "\n@@@\n"
    path = os.path.join(D, "texts.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(sep.join(texts))
    r = run(["tokenize", "--vocab", vocab, "--text-file", path, "--separator", sep]
            + (["--parse-special"] if special else []), timeout=300)
    lines = r.stdout.split("\n") if r.returncode == 0 else []
    check(r.returncode == 0 and len(lines) == len(texts) + 1,
          f"{os.path.basename(vocab)}: one line of ids per text: {r.stderr.strip()[:200]}")
    return [[int(x) for x in line.split()] for line in lines[:len(texts)]]


def text_ids(*runs):
    """Each run of text encoded alone (no special tokens in them)."""
    return ids(PLAIN, list(runs), special=False)


def main():
    the, spaced_the, two_spaces, the_sp, sp_the = text_ids("the", "  the", "  ", "the ", " the")
    cases = {
        # (file, text, expected ids)
        "rstrip takes the spaces after": (RSTRIP, f"the{TOK}  \u3000the", the + [END] + the),
        "rstrip leaves the spaces before": (RSTRIP, f"the {TOK}the", the_sp + [END] + the),
        "lstrip takes the spaces before": (LSTRIP, f"the \t {TOK}the", the + [END] + the),
        "lstrip takes U+00A0 and U+3000": (LSTRIP, f"the\u00a0\u3000{TOK}the", the + [END] + the),
        "lstrip leaves the spaces after": (LSTRIP, f"the{TOK}  the", the + [END] + spaced_the),
        "lstrip stops at the previous match": (LSTRIP, f"{TOK}  {TOK}", [END, END]),
        "rstrip leaves nothing for the next match": (RSTRIP, f"{TOK}  {TOK}", [END, END]),
        "no flags: the spaces stay": (PLAIN, f"{TOK}  {TOK}", [END] + two_spaces + [END]),
        "no flags: both sides stay": (PLAIN, f"the {TOK} the", the_sp + [END] + sp_the),
        "single_word between spaces": (SINGLE, f"the {TOK} the", the_sp + [END] + sp_the),
        "single_word after punctuation": (SINGLE, f"\u2014{TOK}", text_ids("\u2014")[0] + [END]),
        "single_word at the text's ends": (SINGLE, TOK, [END]),
    }
    for name, (vocab, text, want) in cases.items():
        got = ids(vocab, [text])[0]
        check(got == want, f"{name}: {text!r} -> {got} (want {want})")
    # A single-word token touching a word character is text: the same ids as the text without special tokens.
    inside = [f"x{TOK} y", f"the {TOK}_", f"caf\u00e9{TOK}", f"{TOK}2"]
    got = ids(SINGLE, inside)
    want = ids(SINGLE, inside, special=False)
    for text, g, w in zip(inside, got, want):
        check(g == w and END not in g, f"single_word inside a word is text: {text!r} -> {g} (want {w})")
    # The same texts with the flag off still match the token.
    got = ids(PLAIN, inside)
    check(all(END in g for g in got), f"(without single_word they match: {got})")
    finish()


if __name__ == "__main__":
    main()
