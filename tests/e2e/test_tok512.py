"""stories260K's tokenizer in both its files against libsentencepiece (python3-sentencepiece) on tok512.model, over
every line of tinyshakespeare.txt, Unicode and whitespace cases.

The two files hold the same pieces and scores, but tok512.model's normalizer spec also asks for SentencePiece's
remove_extra_whitespaces (leading and trailing spaces dropped, runs of spaces made one), which llama2.c's
tokenizer.bin has no field for: llama2.c encodes spaces as they stand. So:
- tok512.model, read by our own protobuf reader, encodes every text as libsentencepiece does;
- tok512.bin encodes every text as libsentencepiece does with that one normalizer flag turned off (the model's
  protobuf edited here), and so differs from tok512.model exactly on the texts that the flag changes;
- tok512.bin's pieces and scores are tok512.model's, "▁" written as " ", except BOS and EOS, which llama2.c's export
  writes as "\\n<s>\\n" and "\\n</s>\\n"."""
import os
import struct

import sentencepiece

from common import SHARED, check, finish, run, tmpdir

DIR = os.path.join(SHARED, "models", "stories260K")
D = tmpdir()
SEP = "\x01SEP\x01"
EXTRA = ["", " ", "  ", "\t", "\n", "a", " a", "a ", "  leading", "trailing  ", "two  spaces", "a \t b", "a  \n  b",
         " \u00a0 ", "tab\there", "line\r\nbreak", "Ünïcödé — 你好 🦙", "Ａｂｃ ﬁne ① ½ ™", "e\u0301 vs é", "日本語のテキスト",
         "emoji 👩‍👩‍👧 flags 🇫🇷", "\u200b zero width", "x" * 200, " ".join(["word"] * 100), "Once upon a time"]


def varint(data, pos):
    v, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, pos


def put_varint(v):
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def fields(data):
    """A protobuf message's (field number, wire type, raw value) in order, from the wire format."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        wire = key & 7
        if wire == 0:
            start = pos
            _, pos = varint(data, pos)
            yield key >> 3, wire, data[start:pos]
        elif wire == 2:
            n, pos = varint(data, pos)
            yield key >> 3, wire, data[pos:pos + n]
            pos += n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            yield key >> 3, wire, data[pos:pos + n]
            pos += n
        else:
            raise ValueError(f"wire type {wire}")


def normalizer(model):
    """NormalizerSpec (ModelProto field 3): its name and remove_extra_whitespaces (field 4, proto2 default true)."""
    spec = next(v for f, w, v in fields(model) if f == 3)
    name = next((v.decode() for f, w, v in fields(spec) if f == 1), "")
    remove = [varint(v, 0)[0] for f, w, v in fields(spec) if f == 4]
    return name, bool(remove[-1]) if remove else True


def without_whitespace_removal(model):
    """The model with remove_extra_whitespaces = false appended to its NormalizerSpec (the last value wins)."""
    out = bytearray()
    for f, w, v in fields(model):
        if f == 3:
            v = v + put_varint(4 << 3) + put_varint(0)
        out += put_varint(f << 3 | w) + (put_varint(len(v)) if w == 2 else b"") + v
    return bytes(out)


def tokenizer_bin(path):
    with open(path, "rb") as f:
        data = f.read()
    pos, pieces, scores = 4, [], []
    while pos < len(data):
        score, n = struct.unpack_from("<fi", data, pos)
        pieces.append(data[pos + 8:pos + 8 + n].decode("utf-8", "surrogateescape"))
        scores.append(score)
        pos += 8 + n
    return pieces, scores


def ours(vocab, texts):
    path = os.path.join(D, "texts.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(SEP.join(texts))
    r = run(["tokenize", "--vocab", vocab, "--text-file", path, "--separator", SEP])
    lines = r.stdout.split("\n")[:-1] if r.returncode == 0 else []
    return [[int(x) for x in line.split()] for line in lines]


def main():
    with open(os.path.join(DIR, "tok512.model"), "rb") as f:
        model = f.read()
    sp = sentencepiece.SentencePieceProcessor(model_proto=model)
    literal = sentencepiece.SentencePieceProcessor(model_proto=without_whitespace_removal(model))
    name, remove = normalizer(model)
    check(remove and not normalizer(without_whitespace_removal(model))[1],
          f"tok512.model's normalizer ({name!r}) removes extra whitespace; the edited copy does not")

    pieces, scores = tokenizer_bin(os.path.join(DIR, "tok512.bin"))
    want = [sp.id_to_piece(i).replace("\u2581", " ") for i in range(sp.vocab_size())]
    apart = [i for i in range(len(want)) if i >= len(pieces) or pieces[i] != want[i]]
    check(len(pieces) == sp.vocab_size() and apart == [sp.bos_id(), sp.eos_id()] and
          pieces[sp.bos_id()] == "\n<s>\n" and pieces[sp.eos_id()] == "\n</s>\n",
          f"tok512.bin holds tok512.model's {sp.vocab_size()} pieces (' ' for '▁'), BOS and EOS as llama2.c writes "
          f"them: differ at {apart[:5]}")
    check(scores == [sp.get_score(i) for i in range(sp.vocab_size())], "tok512.bin holds tok512.model's scores")

    with open(os.path.join(SHARED, "corpora", "tinyshakespeare.txt"), encoding="utf-8") as f:
        texts = f.read().split("\n") + EXTRA
    from_model, from_bin = ours(os.path.join(DIR, "tok512.model"), texts), ours(os.path.join(DIR, "tok512.bin"), texts)
    ref, ref_literal = [sp.encode(t) for t in texts], [literal.encode(t) for t in texts]
    bad_model = [i for i in range(len(texts)) if i >= len(from_model) or from_model[i] != ref[i]]
    bad_bin = [i for i in range(len(texts)) if i >= len(from_bin) or from_bin[i] != ref_literal[i]]
    for i in (bad_model + bad_bin)[:5]:
        print(f"  {texts[i]!r}: sentencepiece {ref[i]}, without whitespace removal {ref_literal[i]}")
    check(not bad_model, f"tok512.model encodes {len(texts) - len(bad_model)}/{len(texts)} texts as libsentencepiece")
    check(not bad_bin, f"tok512.bin encodes {len(texts) - len(bad_bin)}/{len(texts)} texts as libsentencepiece does "
                       f"without remove_extra_whitespaces")
    differ = [i for i in range(len(texts)) if i < len(from_bin) and i < len(from_model) and from_bin[i] != from_model[i]]
    extra_spaces = [i for i, t in enumerate(texts) if " ".join(t.split(" ")) != " ".join(filter(None, t.split(" ")))]
    check(differ == extra_spaces and len(differ) > 10,
          f"tok512.bin and tok512.model differ on exactly the {len(extra_spaces)} texts with a leading, trailing or "
          f"repeated space (differ on {len(differ)})")
    finish()


if __name__ == "__main__":
    main()
