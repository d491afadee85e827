"""Bad tokenizer input gets the right ids or a clear error, never a crash or a hang. Covered: invalid UTF-8 (byte
fallback in SentencePiece-style vocabularies; a one-line error in byte-level ones, as llama.cpp and Hugging Face refuse
it too), empty text, a 10 MB line (round-trips exactly), and malformed tokenizer files."""
import json
import os
import struct

from common import SHARED, check, finish, run, tmpdir

D = tmpdir()
VOCABS = {
    "llama-spm.gguf": os.path.join(SHARED, "vocab", "ggml-vocab-llama-spm.gguf"),
    "tokenizer.model": os.path.join(SHARED, "tokenizers", "llama2-spm", "tokenizer.model"),
    "llama-bpe.gguf": os.path.join(SHARED, "vocab", "ggml-vocab-llama-bpe.gguf"),
    "qwen3 tokenizer.json": os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json"),
    "gpt2": os.path.join(SHARED, "tokenizers", "gpt2"),
}
SPM = {"llama-spm.gguf", "tokenizer.model"}


def write(name, data):
    path = os.path.join(D, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def tokenize(vocab, path, *extra):
    return run(["tokenize", "--vocab", vocab, "--text-file", path, *extra], timeout=300)


def decode_bytes(vocab, ids):
    import subprocess
    from common import ASCENT, no_sanitizer_report
    p = write("ids.txt", " ".join(map(str, ids)).encode())
    r = subprocess.run([ASCENT, "tokenize", "--vocab", vocab, "--decode", "--text-file", p], capture_output=True)
    no_sanitizer_report(r, f"tokenize --decode with {os.path.basename(vocab)}")
    return r.stdout if r.returncode == 0 else None


def main():
    bad_utf8 = b"abc \xff\xfe def \xc3 caf\xc3\xa9 \xe2\x82"
    empty = write("empty.txt", b"")
    with open(os.path.join(SHARED, "corpora", "kjv-bible.txt"), "rb") as f:
        bible = f.read().replace(b"\n", b" ")
    long_line = write("line.txt", (bible * 3)[: 10 * 1024 * 1024])
    for name, vocab in VOCABS.items():
        r = tokenize(vocab, empty)
        check(r.returncode == 0 and r.stdout == "\n", f"{name}: empty text gives no ids")
        r = tokenize(vocab, write("bad.txt", bad_utf8))
        if name in SPM:
            ids = [int(x) for x in r.stdout.split()] if r.returncode == 0 else []
            check(r.returncode == 0 and decode_bytes(vocab, ids) == bad_utf8,
                  f"{name}: invalid UTF-8 falls back to byte tokens and decodes to the same bytes")
        else:
            lines = r.stderr.strip().splitlines()
            check(r.returncode == 1 and len(lines) == 1 and "not valid UTF-8" in lines[0] and "bad.txt" in lines[0],
                  f"{name}: invalid UTF-8 is a one-line error: {lines}")
        r = tokenize(vocab, long_line)
        ids = [int(x) for x in r.stdout.split()] if r.returncode == 0 else []
        with open(long_line, "rb") as f:
            original = f.read()
        check(len(ids) > 1_000_000 and decode_bytes(vocab, ids) == original,
              f"{name}: a 10 MB line encodes ({len(ids)} ids) and decodes back exactly")

    good = json.load(open(VOCABS["qwen3 tokenizer.json"]))
    broken = {
        "truncated": None,
        "model-not-object": dict(good, model=[1, 2]),
        "vocab-list": dict(good, model=dict(good["model"], vocab=["a", "b"])),
        "merge-number": dict(good, model=dict(good["model"], merges=[7])),
        "wordpiece": dict(good, model=dict(good["model"], type="WordPiece")),
        "empty-vocab": dict(good, model=dict(good["model"], vocab={}, merges=[]), added_tokens=[]),
        # A negative id would be written before the first piece (AddressSanitizer: out of bounds).
        "added-negative-id": dict(good, added_tokens=good["added_tokens"] + [{"id": -1, "content": "<x>",
                                                                              "special": True}]),
    }
    for name, content in broken.items():
        path = os.path.join(D, f"{name}.json")
        with open(path, "w") as f:
            f.write(json.dumps(good)[:1000] if content is None else json.dumps(content))
        r = run(["tokenize", "--vocab", path, "-p", "hello"])
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and f"{name}.json" in lines[0],
              f"malformed tokenizer.json ({name}): {lines[0] if lines else r.stdout[:80]!r}")
    # A normalizer or pre-tokenizer step the encoder does not carry out is refused by name: skipped, the text would
    # encode as if it were absent. So is an id given to two pieces, which would leave the first unreachable.
    pre = good["pre_tokenizer"]
    story_tok = json.load(open(os.path.join(SHARED, "models", "story-656K", "tokenizer.json")))
    split = pre["pretokenizers"][0]
    unsupported = {
        "normalizer-lowercase": (dict(good, normalizer={"type": "Lowercase"}), "normalizer type 'Lowercase'"),
        "normalizer-replace": (dict(good, normalizer={"type": "Sequence", "normalizers": [
            {"type": "NFC"}, {"type": "Replace", "pattern": {"String": "a"}, "content": "b"}]}),
            "normalizer Replace 'a' -> 'b'"),
        "pre-digits": (dict(good, pre_tokenizer=dict(pre, pretokenizers=[{"type": "Digits", "individual_digits": True}]
                                                     + pre["pretokenizers"])), "pre_tokenizer type 'Digits'"),
        "pre-two-splits": (dict(good, pre_tokenizer=dict(pre, pretokenizers=[split] + pre["pretokenizers"])),
                           "2 Split steps"),
        "pre-split-string": (dict(good, pre_tokenizer=dict(pre, pretokenizers=[dict(split, pattern={"String": " "})]
                                                           + pre["pretokenizers"][1:])), "Split on a plain string"),
        "vocab-duplicate-id": (dict(good, model=dict(good["model"], vocab=dict(good["model"]["vocab"], zzzq=5))),
                               "share id 5"),
        # Ids are integers: 5.5 would be truncated to 5 (then another piece's id), 2^63 would wrap to a negative one.
        "vocab-float-id": (dict(good, model=dict(good["model"], vocab=dict(good["model"]["vocab"], zzzq=5.5))),
                           "model.vocab 'zzzq' has id 5.5, not a token id"),
        # A piece holding a newline is quoted escaped, so the error stays one line.
        "vocab-newline-piece": (dict(story_tok, model=dict(story_tok["model"], vocab=dict(story_tok["model"]["vocab"],
                                                                                        **{"a\nb": -3}))),
                                "token 'a\\nb' has negative id"),
        # HF refuses a merge whose sides or result are not pieces; the encoder skipped one with an unknown side and
        # gave <unk> for a result it could not find ("the" encoded as "▁ th <unk>" here).
        "merge-unknown-side": (dict(story_tok, model=dict(story_tok["model"],
                                                          merges=story_tok["model"]["merges"] + ["zzq yyq"])),
                               f"model.merges {len(story_tok['model']['merges'])} 'zzq yyq': 'zzq' is not in the "
                               "vocabulary"),
        "merge-result-missing": (dict(story_tok, model=dict(story_tok["model"], vocab={
            k: i for k, i in story_tok["model"]["vocab"].items() if k != "e\u2581"})),
            "model.merges 0 'e \u2581': its result 'e\u2581' is not in the vocabulary"),
        "added-huge-id": (dict(good, added_tokens=good["added_tokens"] + [{"id": 2 ** 63, "content": "<x>",
                                                                          "special": True}]),
                          f"added token '<x>' has id {2 ** 63}, not a token id"),
        # Steps the encoder would read as another pipeline: a second ByteLevel (HF maps the mapped text again); Split
        # after ByteLevel (HF splits the mapped text); ByteLevel without a regex and no Split (HF does not pre-split,
        # where the encoder would split by GPT-2's regex).
        "normalizer-two-prepend": (dict(story_tok, normalizer=dict(story_tok["normalizer"], normalizers=[
            story_tok["normalizer"]["normalizers"][0]] + story_tok["normalizer"]["normalizers"])),
            "normalizer has two Prepend steps"),
        "normalizer-two-forms": (dict(good, normalizer={"type": "Sequence", "normalizers": [
            {"type": "NFKD"}, {"type": "NFC"}]}), "normalizer has two Unicode normalizations (the second NFC)"),
        "normalizer-nfkc-after-replace": (dict(story_tok, normalizer=dict(story_tok["normalizer"], normalizers=
            story_tok["normalizer"]["normalizers"] + [{"type": "NFKC"}])), "normalizer NFKC after Replace"),
        "pre-two-bytelevel": (dict(good, pre_tokenizer=dict(pre, pretokenizers=pre["pretokenizers"]
                                                            + [pre["pretokenizers"][1]])),
                              "pre_tokenizer has two ByteLevel steps"),
        "pre-split-after": (dict(good, pre_tokenizer=dict(pre, pretokenizers=pre["pretokenizers"][::-1])),
                            "pre_tokenizer Split after ByteLevel is not supported"),
        "pre-no-split": (dict(good, pre_tokenizer=dict(pre, pretokenizers=[pre["pretokenizers"][1]])),
                         "ByteLevel with use_regex false and no Split step (no pre-split) is not supported"),
        "pre-prefix-space": (dict(good, pre_tokenizer=dict(pre, pretokenizers=[split, dict(
            pre["pretokenizers"][1], add_prefix_space=True)])), "add_prefix_space true"),
    }
    # So is a decoder step decode does not carry out, since such a file would decode to other text than the tokenizer's
    # own. Checked in a byte-level file and in a SentencePiece-style one (story-656K's: Replace, ByteFallback, Fuse,
    # Strip).
    story = json.load(open(os.path.join(SHARED, "models", "story-656K", "tokenizer.json")))
    steps = story["decoder"]["decoders"]
    without = lambda kind: dict(story, decoder=dict(story["decoder"], decoders=[d for d in steps if d["type"] != kind]))
    unsupported.update({
        # Without Replace(" ", "▁") spaces stay spaces in HF; the encoder wrote them as "▁".
        "normalizer-no-replace": (dict(story, normalizer={"type": "Prepend", "prepend": "\u2581"}),
                                  "spaces stay spaces here"),
        "decoder-wordpiece": (dict(good, decoder={"type": "WordPiece", "prefix": "##"}), "decoder type 'WordPiece'"),
        "decoder-ctc": (dict(story, decoder={"type": "CTC"}), "decoder type 'CTC'"),
        "decoder-no-replace": (without("Replace"), "decoder leaves '\u2581' in the text"),
        "decoder-no-bytefallback": (without("ByteFallback"), "decoder has no ByteFallback"),
        "decoder-no-strip": (without("Strip"), "decoder keeps the leading space but the encoder prefixes one"),
        "decoder-strip-2": (dict(story, decoder=dict(story["decoder"], decoders=steps[:-1] + [dict(steps[-1], start=2)])),
                            "decoder Strip ' ' start 2 stop 0"),
    })
    for name, (content, needle) in unsupported.items():
        path = os.path.join(D, f"{name}.json")
        with open(path, "w") as f:
            f.write(json.dumps(content))
        r = run(["tokenize", "--vocab", path, "-p", "hello"])
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and f"{name}.json" in lines[0] and needle in lines[0],
              f"unsupported tokenizer.json step ({name}): {lines[0] if lines else r.stdout[:80]!r}")
    # A ByteFallback decoder writes the byte of a piece <0xNN> even where model.byte_fallback is false (the encoder
    # then takes such pieces as text): decode wrote the six characters.
    n = len(story["model"]["vocab"]) + len(story["added_tokens"])
    no_fallback = dict(story, model=dict(story["model"], byte_fallback=False,
                                         vocab=dict(story["model"]["vocab"], **{"<0x41>": n})))
    path = write("decoder-bytes-no-fallback.json", json.dumps(no_fallback).encode())
    got = decode_bytes(path, [n, n])
    check(got == b"AA", f"ByteFallback decoder without model.byte_fallback: <0x41> <0x41> decodes to {got!r} (b'AA')")
    # A character with no piece (story-656K has byte_fallback but no byte pieces): Hugging Face's BPE gives one
    # unknown token per character, and with fuse_unk (story-656K's) one for a run of them; the encoder gave one per
    # byte. Expected from the vocabulary: "▁a" 85, "b" 54, "▁" 80, <unk> 0.
    vocab = story["model"]["vocab"]
    assert (vocab["\u2581a"], vocab["b"], vocab["\u2581"], story["model"]["unk_token"]) == (85, 54, 80, "<unk>")
    no_fuse = write("no-fuse.json", json.dumps(dict(story, model=dict(story["model"], fuse_unk=False))).encode())
    story_path = os.path.join(SHARED, "models", "story-656K", "tokenizer.json")
    for vocab_path, text, want in ((story_path, "a\u2014b", [85, 0, 54]), (story_path, "\u00e9\u2014\u00e9", [80, 0]),
                                   (no_fuse, "\u00e9\u2014\u00e9", [80, 0, 0, 0])):
        r = run(["tokenize", "--vocab", vocab_path, "-p", text])
        got = [int(x) for x in r.stdout.split()] if r.returncode == 0 else None
        check(got == want, f"unknown characters in {os.path.basename(vocab_path)}: {text!r} -> {got} (want {want})")
    for name, field, value, needle in (
            ("model-prefix", "continuing_subword_prefix", "##", "model.continuing_subword_prefix '##'"),
            ("model-suffix", "end_of_word_suffix", "</w>", "model.end_of_word_suffix '</w>'"),
            ("model-dropout", "dropout", 0.1, "model.dropout 0.1")):
        path = write(f"{name}.json", json.dumps(dict(story, model=dict(story["model"], **{field: value}))).encode())
        r = run(["tokenize", "--vocab", path, "-p", "hello"])
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and f"{name}.json" in lines[0] and needle in lines[0],
              f"unsupported BPE option ({name}): {lines[0] if lines else r.stdout[:80]!r}")
    # The post-processor's BOS is read also inside a Sequence (Llama-3.1's files: ByteLevel, then TemplateProcessing),
    # where it would otherwise be lost. Tokens after the text are added after it, not dropped. What else adds tokens is
    # refused by name.
    llama3 = json.load(open(os.path.join(SHARED, "tokenizers", "llama3", "tokenizer.json")))
    bos, eot = "<|begin_of_text|>", "<|end_of_text|>"
    special = lambda name: {"SpecialToken": {"id": name, "type_id": 0}}
    text_a = {"Sequence": {"id": "A", "type_id": 0}}
    added_id = {t["content"]: t["id"] for t in llama3["added_tokens"]}

    def template(single, special_tokens=None):
        """A TemplateProcessing whose special_tokens give each SpecialToken its vocabulary id, unless given."""
        names = [x["SpecialToken"]["id"] for x in single if "SpecialToken" in x]
        if special_tokens is None:
            special_tokens = {n: {"id": n, "ids": [added_id[n]], "tokens": [n]} for n in names if n in added_id}
        return {"type": "TemplateProcessing", "single": single, "pair": [], "special_tokens": special_tokens}
    in_sequence = dict(llama3, post_processor={"type": "Sequence", "processors": [
        llama3["post_processor"], template([special(bos), text_a])]})
    path = write("post-sequence.json", json.dumps(in_sequence).encode())
    r = run(["tokenize", "--vocab", path, "-p", "hello", "--add-special"])
    check(r.returncode == 0 and r.stdout.split() == ["128000", "15339"],
          f"post_processor Sequence [ByteLevel, TemplateProcessing]: its BOS is added: {r.stdout.strip()!r} "
          f"(want '128000 15339')")
    path = write("post-eos-after.json",
                 json.dumps(dict(llama3, post_processor=template([special(bos), text_a, special(eot)]))).encode())
    r = run(["tokenize", "--vocab", path, "-p", "hello", "--add-special"])
    check(r.returncode == 0 and r.stdout.split() == ["128000", "15339", "128001"],
          f"post_processor template [BOS, $A, EOS]: both added: {r.stdout.strip()!r} (want '128000 15339 128001')")
    r = run(["tokenize", "--vocab", path, "-p", "hello"])
    check(r.returncode == 0 and r.stdout.split() == ["15339"], f"(and neither without --add-special: {r.stdout!r})")
    # As in HF, what is added is the ids of the SpecialToken's special_tokens entry, all of them; not the one id the
    # vocabulary gives its name.
    path = write("post-ids.json", json.dumps(dict(llama3, post_processor=template([special(bos), text_a, special(eot)], {
        bos: {"id": bos, "ids": [128002], "tokens": ["<|reserved_special_token_0|>"]},
        eot: {"id": eot, "ids": [128001, 128009], "tokens": [eot, "<|eot_id|>"]}}))).encode())
    r = run(["tokenize", "--vocab", path, "-p", "hello", "--add-special"])
    check(r.returncode == 0 and r.stdout.split() == ["128002", "15339", "128001", "128009"],
          f"post_processor special_tokens' ids are the ones added: {r.stdout.strip()!r} "
          f"(want '128002 15339 128001 128009')")
    nope = "<|nope|>"
    for name, pp, needle in (
            ("post-two-before", template([special(bos), special(eot), text_a]), "before the text"),
            ("post-two-ids-before", template([special(bos), text_a], {bos: {"id": bos, "ids": [128000, 128001]}}),
             f"post_processor adds 2 tokens before the text ('{bos}'); not supported (one)"),
            ("post-unknown", template([special(nope), text_a]), f"SpecialToken '{nope}' is not in its special_tokens"),
            ("post-no-ids", template([special(nope), text_a], {nope: {"id": nope}}),
             f"special_tokens '{nope}' has no list of ids"),
            ("post-outside", template([special(nope), text_a], {nope: {"id": nope, "ids": [999999]}}),
             "post_processor adds id 999999, which is not in the vocabulary (128256 tokens)"),
            ("post-roberta", {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]},
             "post_processor type 'RobertaProcessing'")):
        path = write(f"{name}.json", json.dumps(dict(llama3, post_processor=pp)).encode())
        r = run(["tokenize", "--vocab", path, "-p", "hello", "--add-special"])
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and f"{name}.json" in lines[0] and needle in lines[0],
              f"unsupported post_processor ({name}): {lines[0] if lines else r.stdout[:80]!r}")
    # A GGUF's pre-tokenizer name picks the split; one not known is refused, not split by GPT-2's regex. The file holds
    # no tensors, so its metadata may change length: the string value's length prefix is rewritten with it.
    data = open(VOCABS["llama-bpe.gguf"], "rb").read()
    key = b"tokenizer.ggml.pre"
    at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    kind, n = struct.unpack_from("<IQ", data, at)
    assert kind == 8, "tokenizer.ggml.pre is a string"
    at += 12
    path = write("pre-deepseek.gguf", data[:at - 8] + struct.pack("<Q", 12) + b"deepseek-llm" + data[at + n:])
    r = run(["tokenize", "--vocab", path, "-p", "hello 123"])
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(lines) == 1 and "pre-deepseek.gguf" in lines[0] and
          "tokenizer.ggml.pre 'deepseek-llm' is not supported" in lines[0],
          f"GGUF with tokenizer.ggml.pre deepseek-llm: {lines[0] if lines else r.stdout[:80]!r}")
    # A GGUF's tokenizer.ggml.add_eos_token puts EOS after the text with the special tokens, as llama.cpp does. The
    # file's value (type 7, bool) is flipped from 0 to 1 in place.
    data = open(VOCABS["llama-spm.gguf"], "rb").read()
    key = b"tokenizer.ggml.add_eos_token"
    at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    assert struct.unpack_from("<IB", data, at) == (7, 0), "add_eos_token is a bool, false"
    path = write("add-eos.gguf", data[:at + 4] + b"\x01" + data[at + 5:])
    r = run(["tokenize", "--vocab", path, "-p", "hello", "--add-special"])
    plain = run(["tokenize", "--vocab", VOCABS["llama-spm.gguf"], "-p", "hello", "--add-special"]).stdout.split()
    check(r.returncode == 0 and r.stdout.split() == plain + ["2"],
          f"GGUF add_eos_token: EOS (2) after the text: {r.stdout.strip()!r} (plain {' '.join(plain)!r})")
    for name, src, cut in (("tokenizer.model", VOCABS["tokenizer.model"], 5000),
                           ("tok512.bin", os.path.join(SHARED, "models", "stories260K", "tok512.bin"), 3001)):
        data = open(src, "rb").read()[:cut]
        path = write("cut-" + name, data)
        r = run(["tokenize", "--vocab", path, "-p", "hello"])
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and "cut-" + name in lines[0] and "truncated" in lines[0],
              f"truncated {name}: {lines[0] if lines else r.stdout[:80]!r}")
    # A GGUF vocabulary's token types are llama.cpp's 0-6 and its scores finite (SentencePiece-style merges rank by
    # them). Another type would be kept as one no code expects, and a NaN score would break the merge queue's ordering.
    spm = open(os.path.join(SHARED, "vocab", "ggml-vocab-llama-spm.gguf"), "rb").read()

    def patch_array(data, key, index, value):
        """data with element `index` of the 4-byte array metadata `key` replaced by `value` (packed)."""
        at = data.index(key.encode()) + len(key) + 4 + 4 + 8  # value type (array), element type, count
        return data[:at + 4 * index] + value + data[at + 4 * index + 4:]

    for name, data, needle in (
            ("type-255", patch_array(spm, "tokenizer.ggml.token_type", 10, struct.pack("<i", 255)),
             "metadata tokenizer.ggml.token_type: token 10 has type 255 (expected 0-6)"),
            ("score-nan", patch_array(spm, "tokenizer.ggml.scores", 10, struct.pack("<f", float("nan"))),
             "metadata tokenizer.ggml.scores: token 10 has score nan")):
        path = write(f"{name}.gguf", data)
        r = run(["tokenize", "--vocab", path, "-p", "hello"])
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and f"{name}.gguf" in lines[0] and needle in lines[0],
              f"GGUF vocabulary ({name}): {lines[0] if lines else r.stdout[:80]!r}")
    finish()


if __name__ == "__main__":
    main()
