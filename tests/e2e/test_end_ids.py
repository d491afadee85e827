"""Generation stops on every end id a model's files name, not only the first, as transformers' generate does:

- an HF config's eos_token_id list (Llama 3.1 Instruct lists <|end_of_text|>, <|eom_id|>, <|eot_id|> and ends chat turns
  with the last), and generation_config.json's ids; the list survives `ascent quantize`;
- a GGUF's eot/eom ids (llama.cpp's keys).

The expected output is the same model's greedy run without the extra id, cut before that id's first occurrence. Bad
lists fail naming the file and field."""
import json
import os
import struct

from common import SHARED, check, finish, run, tmpdir

SRC = os.path.join(SHARED, "models", "story-656K")
DIR = tmpdir()
PROMPT = "Once upon a time"


def folder(name, config_eos=None, generation_eos=None):
    """story-656K with its config's (generation config's) eos_token_id replaced where given."""
    d = os.path.join(DIR, name)
    os.makedirs(d)
    for f in ("model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"):
        os.symlink(os.path.join(SRC, f), os.path.join(d, f))
    for f, eos in (("config.json", config_eos), ("generation_config.json", generation_eos)):
        with open(os.path.join(SRC, f)) as src:
            j = json.load(src)
        if eos is not None:
            j["eos_token_id"] = eos
        with open(os.path.join(d, f), "w") as dst:
            json.dump(j, dst)
    return d


def greedy(model, n=16, prompt_ids=None):
    prompt = ["--prompt-ids", " ".join(map(str, prompt_ids))] if prompt_ids else ["-p", PROMPT]
    r = run(["generate", "-m", model] + prompt + ["-n", n, "--temp", 0, "--print-ids"])
    if r.returncode != 0:
        print(r.stderr.strip())
        return None
    return [int(v) for v in r.stdout.split()]


def gguf_with_u32(src, dst, key, value):
    """A copy of GGUF file src with one more uint32 metadata key (from the format: magic, version, tensor and
    key/value counts, the key/values, the tensor infos, then the data at the next multiple of general.alignment)."""
    with open(src, "rb") as f:
        data = f.read()
    pos = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    align = 32

    def skip_string():
        nonlocal pos
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]

    def skip_value(t):
        nonlocal pos
        if t in sizes:
            pos += sizes[t]
        elif t == 8:
            skip_string()
        else:  # array: element type, count, elements
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(n):
                skip_value(et)

    for _ in range(n_kv):
        k_start = pos
        skip_string()
        name = data[k_start + 8:pos].decode()
        t = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if name == "general.alignment":
            align = struct.unpack_from("<I", data, pos)[0]
        skip_value(t)
    kv_end = pos
    for _ in range(n_tensors):
        skip_string()
        nd = struct.unpack_from("<I", data, pos)[0]
        pos += 4 + 8 * nd + 4 + 8
    data_start = (pos + align - 1) // align * align
    kb = key.encode()
    head = (data[:16] + struct.pack("<Q", n_kv + 1) + data[24:kv_end] + struct.pack("<Q", len(kb)) + kb +
            struct.pack("<II", 4, value) + data[kv_end:pos])
    head += b"\0" * ((-len(head)) % align)
    with open(dst, "wb") as f:
        f.write(head + data[data_start:])


def cut_before(ids, n_prompt, stop):
    gen = ids[n_prompt:]
    return ids[:n_prompt + gen.index(stop)] if stop in gen else ids


def main():
    plain, prompt = greedy(folder("plain")), greedy(folder("prompt_only"), n=0)
    check(plain is not None and prompt is not None and len(plain) > len(prompt) + 4,
          f"story-656K greedy run: {plain} (prompt {prompt})")
    if plain is None or prompt is None:
        finish()
    n_prompt = len(prompt)
    stop = plain[n_prompt + 3]  # the 4th generated token, to be named as an end id
    want = cut_before(plain, n_prompt, stop)
    check(len(want) == n_prompt + plain[n_prompt:].index(stop), f"the run is cut before id {stop}: {len(want)} ids")

    got = greedy(folder("config_list", config_eos=[2, stop]))
    check(got == want, f"config.json eos_token_id [2, {stop}]: stops before {stop} ({got})")
    got = greedy(folder("generation_list", generation_eos=[2, stop]))
    check(got == want, f"generation_config.json eos_token_id [2, {stop}]: stops there too ({got})")
    got = greedy(folder("generation_int", generation_eos=stop))
    check(got == want, f"generation_config.json eos_token_id {stop} (an integer) adds it ({got})")

    # Ascent's quantized file keeps the list: its greedy run, cut before the listed id, as the same file made from
    # the plain folder gives uncut.
    q_plain, q_list = os.path.join(DIR, "plain.safetensors"), os.path.join(DIR, "list.safetensors")
    ok = run(["quantize", "-m", folder("q_plain"), "-o", q_plain, "--type", "int8"]).returncode == 0
    ids_q = greedy(q_plain) if ok else None
    check(ids_q is not None and len(ids_q) > n_prompt + 4, f"int8 quantized greedy run: {ids_q}")
    if ids_q is not None:
        q_stop = ids_q[n_prompt + 3]
        ok = run(["quantize", "-m", folder("q_list", config_eos=[2, q_stop]), "-o", q_list, "--type", "int8"])
        got = greedy(q_list) if ok.returncode == 0 else None
        check(got == cut_before(ids_q, n_prompt, q_stop),
              f"int8 file from a config listing [2, {q_stop}] stops before {q_stop} ({got})")

    # GGUF: llama.cpp's tokenizer.ggml.eot_token_id (Llama 3 Instruct's <|eot_id|>) and eom_token_id end it too.
    # (The prompt goes in as the ids the folder gave it.)
    gguf = os.path.join(DIR, "plain.gguf")
    ok = run(["convert", "-m", folder("g_plain"), "-o", gguf, "--type", "f32"]).returncode == 0
    ids_g = greedy(gguf, prompt_ids=prompt) if ok else None
    check(ids_g == plain, f"f32 GGUF of it: the same greedy run ({ids_g})")
    # convert keeps a config's end ids (in those two keys): the GGUF of a folder listing [2, stop] stops there too.
    listed = os.path.join(DIR, "listed.gguf")
    ok = run(["convert", "-m", folder("g_list", config_eos=[2, stop]), "-o", listed, "--type", "f32"]).returncode == 0
    got = greedy(listed, prompt_ids=prompt) if ok else None
    check(got == want, f"GGUF converted from a config listing [2, {stop}]: stops before {stop} ({got})")
    many = os.path.join(DIR, "many.gguf")
    r = run(["convert", "-m", folder("g_many", config_eos=[2, 3, 4, 5]), "-o", many, "--type", "f32"])
    check(r.returncode == 1 and "3 ids besides eos 2" in r.stderr and not os.path.exists(many),
          f"convert refuses end ids GGUF has no key for: {r.stderr.strip()[:120]}")
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        tagged = os.path.join(DIR, key + ".gguf")
        gguf_with_u32(gguf, tagged, key, stop)
        got = greedy(tagged, prompt_ids=prompt)
        check(got == want, f"GGUF with {key} = {stop}: stops before it ({got})")

    # An end id outside the vocabulary could never be sampled, so generation would run on without a word: refused.
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.bos_token_id"):
        tagged = os.path.join(DIR, key + "-out.gguf")
        gguf_with_u32(gguf, tagged, key, 5000)
        r = run(["generate", "-m", tagged, "-p", PROMPT, "-n", 2])
        err = r.stderr.strip()
        check(r.returncode == 1 and tagged in err and f"{key} 5000 is not a token id" in err,
              f"GGUF with {key} = 5000 (vocabulary of 2048): {err.splitlines()[-1] if err else 'no error'}")
    d = folder("gen_out", generation_eos=[2, 5000])
    r = run(["generate", "-m", d, "-p", PROMPT, "-n", 2])
    err = r.stderr.strip()
    check(r.returncode == 1 and "generation_config.json: eos_token_id 5000 is not a token id" in err,
          f"generation_config.json eos_token_id [2, 5000]: {err.splitlines()[-1] if err else 'no error'}")

    # Bad lists: a clear error naming the file and field.
    for name, cfg_eos, gen_eos in (("empty", [], None), ("text", [2, "x"], None), ("gen_text", None, [2, 1.5])):
        d = folder("bad_" + name, config_eos=cfg_eos, generation_eos=gen_eos)
        r = run(["generate", "-m", d, "-p", PROMPT, "-n", 2])
        bad_file = "generation_config.json" if gen_eos is not None else "config.json"
        check(r.returncode != 0 and bad_file in r.stderr and "eos_token_id" in r.stderr,
              f"eos_token_id {cfg_eos if gen_eos is None else gen_eos} in {bad_file}: "
              f"{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'no error'}")
    finish()


if __name__ == "__main__":
    main()
