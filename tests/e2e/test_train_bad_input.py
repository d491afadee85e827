"""`ascent train` on bad input: a config with an unknown key, a value of the wrong type or an impossible shape, a
missing key or file, YAML that does not parse, a data folder made with another tokenizer or left unfinished, an
init_from that does not exist, and a checkpoint that is truncated, corrupted, garbled or of another model shape
(with --resume). Each must exit 1 with one line on stderr, `ascent: error: ...`, naming the key, file or tensor at
fault, without a sanitizer report; a run refused before training creates no output folder, and a refused --resume
leaves every file of the run's folder byte-identical."""
import json
import os
import re
import shutil

from common import SHARED, check, finish, run, tmpdir

D = tmpdir()
STORY = os.path.join(SHARED, "models", "story-656K")
GPT2 = os.path.join(SHARED, "tokenizers", "gpt2")
CORPUS = os.path.join(SHARED, "corpora", "tinyshakespeare.txt")


def prepare(out, tokenizer, text_bytes=None):
    src = CORPUS
    if text_bytes:
        src = os.path.join(D, f"corpus-{text_bytes}.txt")
        with open(CORPUS, "rb") as f, open(src, "wb") as g:
            g.write(f.read()[:text_bytes])
    r = run(["data", "prepare", "--input", src, "--tokenizer", tokenizer, "--out", out], timeout=120)
    check(r.returncode == 0, f"data prepare {os.path.basename(out)}: exit {r.returncode} {r.stderr.strip()[-200:]}")
    return out


STORY_DATA = prepare(os.path.join(D, "story-data"), STORY, 200000)
GPT2_DATA = prepare(os.path.join(D, "gpt2-data"), GPT2, 20000)


def base():
    """The sections of a small, valid config, as YAML text per key (edited per case)."""
    return {
        "model": {"arch": "llama", "dim": "128", "n_layers": "2", "n_heads": "4", "n_kv_heads": "2",
                  "ffn_dim": "384", "max_seq": "256"},
        "tokenizer": STORY,
        "data": {"dir": STORY_DATA},
        "train": {"batch_size": "4", "seq_len": "32", "steps": "4"},
        "optimizer": {"lr": "3e-3", "warmup_steps": "1"},
        "eval": {"interval": "2", "batches": "1"},
        "checkpoint": {"interval": "2", "keep": "2"},
        "threads": "2",
    }


_n = 0


def write_config(cfg, output=None, name=None):
    """Writes cfg as block YAML; output defaults to a fresh folder that does not exist yet. Returns (path, output)."""
    global _n
    _n += 1
    name = name or f"case{_n}"
    if output is None and "output" not in cfg:
        output = os.path.join(D, "out-" + name)
    if output is not None:
        cfg = dict(cfg, output=output)
    lines = []
    for k, v in cfg.items():
        if isinstance(v, dict):
            lines.append(f"{k}:")
            lines += [f"  {kk}: {vv}" for kk, vv in v.items()]
        else:
            lines.append(f"{k}: {v}")
    path = os.path.join(D, name + ".yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path, cfg.get("output")


def one_error(what, r, must_contain):
    """Exit 1, stderr exactly one `ascent: error:` line holding every string of must_contain."""
    lines = r.stderr.strip().splitlines()
    line = lines[0] if lines else ""
    ok = (r.returncode == 1 and len(lines) == 1 and line.startswith("ascent: error: ")
          and all(s in line for s in must_contain))
    missing = [s for s in must_contain if s not in line]
    check(ok, f"{what}: exit {r.returncode}, {len(lines)} line(s): {r.stderr.strip()[-300:]!r}"
          + (f" (missing {missing})" if missing else ""))
    return line


def refused_before_training(what, cfg, must_contain, name=None):
    """A config refused before anything is written: the error names what it must, no output folder appears."""
    path, out = write_config(cfg, name=name)
    r = run(["train", path], timeout=60)
    one_error(what, r, [s.replace("CONFIG", path) for s in must_contain])
    if out:
        check(not os.path.exists(out), f"{what}: the output folder was not created")


def edit(**sections):
    """base() with keys replaced (a value of None removes the key); sections are dicts or whole values."""
    cfg = base()
    for sec, change in sections.items():
        if isinstance(change, dict):
            inner = dict(cfg.get(sec, {}))
            for k, v in change.items():
                if v is None:
                    inner.pop(k, None)
                else:
                    inner[k] = v
            cfg[sec] = inner
        elif change is None:
            cfg.pop(sec, None)
        else:
            cfg[sec] = change
    return cfg


# --- the config ---------------------------------------------------------------------------------------------------

# The control: the base config trains, so each refusal below is the edit's doing.
path, out = write_config(base(), name="control")
r = run(["train", path], timeout=120)
check(r.returncode == 0 and os.path.isdir(os.path.join(out, "checkpoints")),
      f"the unedited config trains (exit {r.returncode}{'' if r.returncode == 0 else ' ' + r.stderr.strip()[-200:]})")

cfg = base()
cfg["trian"] = {"steps": "4"}
refused_before_training("unknown top-level key", cfg, ["CONFIG", "trian", "did you mean train"])
cfg = base()
cfg["outptu"] = os.path.join(D, "x")
refused_before_training("unknown top-level scalar key", cfg, ["CONFIG", "outptu", "did you mean output"])
refused_before_training("unknown nested key", edit(train={"batchsize": "4"}),
                        ["CONFIG", "train.batchsize", "did you mean batch_size"])
refused_before_training("unknown nested key, nothing close", edit(model={"flash_attention": "true"}),
                        ["CONFIG", "model.flash_attention"])
refused_before_training("batch_size: eight", edit(train={"batch_size": "eight"}),
                        ["CONFIG", "train.batch_size", "eight"])
refused_before_training("lr: a list", edit(optimizer={"lr": "[1e-3, 2e-3]"}), ["CONFIG", "optimizer.lr", "list"])
refused_before_training("steps: 2.5", edit(train={"steps": "2.5"}), ["CONFIG", "train.steps", "2.5"])
refused_before_training("batch_size: 0", edit(train={"batch_size": "0"}), ["CONFIG", "train.batch_size"])
refused_before_training("lr: -1", edit(optimizer={"lr": "-1"}), ["CONFIG", "optimizer.lr"])
refused_before_training("model: a string", edit(model="llama"), ["CONFIG", "model"])
refused_before_training("arch: llama4", edit(model={"arch": "llama4"}), ["CONFIG", "model.arch", "llama4"])
refused_before_training("precision: O4", edit(precision="O4"), ["CONFIG", "precision", "O4"])
refused_before_training("recompute: some", edit(recompute="some"), ["CONFIG", "recompute", "some"])

# Shapes no model can have.
refused_before_training("dim not divisible by n_heads", edit(model={"dim": "130"}),
                        ["CONFIG", "model.dim", "model.n_heads"])
refused_before_training("n_heads not a multiple of n_kv_heads", edit(model={"n_kv_heads": "3"}),
                        ["CONFIG", "model.n_heads", "model.n_kv_heads"])
refused_before_training("seq_len longer than max_seq", edit(train={"seq_len": "512"}),
                        ["CONFIG", "train.seq_len", "model.max_seq"])
refused_before_training("odd head_dim for llama (120 / 8 = 15)", edit(model={"dim": "120", "n_heads": "8",
                                                                             "n_kv_heads": "4"}),
                        ["CONFIG", "model.head_dim", "15"])
refused_before_training("gpt2 with grouped-query heads", edit(model={"arch": "gpt2"}), ["CONFIG", "gpt2"])

# Required keys.
refused_before_training("no data.dir", edit(data=None), ["CONFIG", "data.dir"])
cfg = base()
path, _ = write_config(cfg, name="no-output")
with open(path) as f:
    text = f.read()
with open(path, "w") as f:
    f.write("".join(l + "\n" for l in text.splitlines() if not l.startswith("output:")))
one_error("no output", run(["train", path], timeout=60), [path, "output"])
refused_before_training("no model.arch and no init_from", edit(model={"arch": None}),
                        ["CONFIG", "model.arch", "init_from"])
refused_before_training("no model.dim", edit(model={"dim": None}), ["CONFIG", "model.dim"])
refused_before_training("no tokenizer", edit(tokenizer=None), ["CONFIG", "tokenizer"])

# Not YAML, not a map, not there.
path, out = write_config(base(), name="bad-yaml")
with open(path) as f:
    text = f.read()
with open(path, "w") as f:
    f.write(text.replace("  batch_size: 4", "  batch_size: [4").replace("model:\n", "model:\n   bad indent: {\n"))
one_error("invalid YAML", run(["train", path], timeout=60), [path, "YAML"])
check(not os.path.exists(out), "invalid YAML: the output folder was not created")
path = os.path.join(D, "list.yaml")
with open(path, "w") as f:
    f.write("- model\n- data\n")
one_error("a YAML list, not a map", run(["train", path], timeout=60), [path])
path = os.path.join(D, "empty.yaml")
open(path, "w").close()
one_error("an empty config", run(["train", path], timeout=60), [path])
missing = os.path.join(D, "no-such-config.yaml")
one_error("missing config file", run(["train", missing], timeout=60), [missing])

# --- data, tokenizer and init_from --------------------------------------------------------------------------------

gpt2_fp = json.load(open(os.path.join(GPT2_DATA, "index.json")))["tokenizer"]["fingerprint"]
story_fp = json.load(open(os.path.join(STORY_DATA, "index.json")))["tokenizer"]["fingerprint"]
check(gpt2_fp != story_fp, f"the two tokenizers' data folders record different fingerprints ({gpt2_fp}, {story_fp})")
refused_before_training("data made with the gpt2 tokenizer, config's tokenizer story-656K",
                        edit(data={"dir": GPT2_DATA}), [GPT2_DATA, gpt2_fp, story_fp])
refused_before_training("data made with story-656K, config's tokenizer gpt2",
                        edit(tokenizer=GPT2, model={"arch": "gpt2", "n_kv_heads": None}),
                        [STORY_DATA, gpt2_fp, story_fp])
unfinished = os.path.join(D, "unfinished-data")
shutil.copytree(STORY_DATA, unfinished)
os.remove(os.path.join(unfinished, "index.json"))
refused_before_training("data folder without index.json", edit(data={"dir": unfinished}),
                        [unfinished, "index.json"])
garbled = os.path.join(D, "garbled-data")
shutil.copytree(STORY_DATA, garbled)
with open(os.path.join(garbled, "index.json"), "r+b") as f:
    f.truncate(os.path.getsize(os.path.join(garbled, "index.json")) // 2)
refused_before_training("data folder with a cut-short index.json", edit(data={"dir": garbled}),
                        [os.path.join(garbled, "index.json")])
short = os.path.join(D, "short-data")
shutil.copytree(STORY_DATA, short)
with open(os.path.join(short, "train.bin"), "r+b") as f:
    f.truncate(os.path.getsize(os.path.join(short, "train.bin")) // 2)
refused_before_training("data folder with a truncated train.bin", edit(data={"dir": short}), ["train.bin"])
nodata = os.path.join(D, "no-such-data")
refused_before_training("data.dir that does not exist", edit(data={"dir": nodata}), [nodata])
notok = os.path.join(D, "no-such-tokenizer")
refused_before_training("tokenizer that does not exist", edit(tokenizer=notok), [notok])
noinit = os.path.join(D, "no-such-checkpoint")
refused_before_training("init_from that does not exist",
                        {"model": {"init_from": noinit}, "tokenizer": STORY, "data": {"dir": STORY_DATA},
                         "train": {"batch_size": "4", "seq_len": "32", "steps": "4"}}, [noinit])
refused_before_training("init_from with model.dim beside it",
                        {"model": {"init_from": STORY, "dim": "64"}, "data": {"dir": STORY_DATA}},
                        ["CONFIG", "model.dim", "init_from"])

# --- checkpoints (--resume) ---------------------------------------------------------------------------------------

RUN = os.path.join(D, "run")
path, _ = write_config(base(), output=RUN, name="run")
r = run(["train", path], timeout=120)
check(r.returncode == 0, f"a 4-step run writes checkpoints to resume from (exit {r.returncode})")
ckpts = sorted(os.listdir(os.path.join(RUN, "checkpoints")))
check(ckpts == ["step-00000002", "step-00000004"], f"checkpoints {ckpts}")
longer = base()
longer["train"] = dict(longer["train"], steps="8")


def snapshot(folder):
    out = {}
    for dirpath, _, files in os.walk(folder):
        for n in files:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, folder)] = f.read()
    return out


def resume_refused(what, damage, must_contain, cfg=None):
    """Copies the run, damages its newest checkpoint with damage(ckpt) and resumes it for 8 steps: refused naming
    must_contain (CKPT stands for the checkpoint's folder), every file left as it was."""
    global _n
    _n += 1
    folder = os.path.join(D, f"resume{_n}")
    shutil.copytree(RUN, folder)
    ckpt = os.path.join(folder, "checkpoints", "step-00000004")
    damage(ckpt)
    before = snapshot(folder)
    path, _ = write_config(cfg or longer, output=folder)
    r = run(["train", path, "--resume"], timeout=60)
    line = one_error(what, r, [s.replace("CKPT", ckpt) for s in must_contain])
    after = snapshot(folder)
    changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
    check(not changed, f"{what}: the run's folder is byte-identical afterwards (changed: {changed})")
    return line


def truncate(name, size=None):
    def f(ckpt):
        p = os.path.join(ckpt, name)
        os.truncate(p, os.path.getsize(p) // 2 if size is None else size)
    return f


def flip(name, offset=None):
    """XORs 4 bytes at byte `offset` with 0xff (default: 60% into the file, among the tensor data). A safetensors file
    begins with 8 bytes of header length, then the JSON header."""
    def f(ckpt):
        p = os.path.join(ckpt, name)
        at = int(os.path.getsize(p) * 0.6) if offset is None else offset
        with open(p, "r+b") as fh:
            fh.seek(at)
            b = fh.read(4)
            fh.seek(at)
            fh.write(bytes(x ^ 0xFF for x in b))
    return f


def remove(name):
    return lambda ckpt: os.remove(os.path.join(ckpt, name))


def rewrite(name, text):
    def f(ckpt):
        with open(os.path.join(ckpt, name), "w") as fh:
            fh.write(text)
    return f


for tensors in ("model.safetensors", "optimizer.safetensors"):
    resume_refused(f"{tensors} cut to half", truncate(tensors), [os.path.join("CKPT", tensors)])
    resume_refused(f"{tensors} cut to 5 bytes", truncate(tensors, 5), [os.path.join("CKPT", tensors)])
    resume_refused(f"{tensors} with flipped bytes in its data", flip(tensors), [os.path.join("CKPT", tensors)])
    resume_refused(f"{tensors} with flipped bytes in its header length", flip(tensors, 3),
                   [os.path.join("CKPT", tensors)])
    resume_refused(f"{tensors} with flipped bytes in its JSON header", flip(tensors, 20),
                   [os.path.join("CKPT", tensors)])
    resume_refused(f"{tensors} missing", remove(tensors), [os.path.join("CKPT", tensors)])
resume_refused("trainer_state.json missing", remove("trainer_state.json"), ["CKPT", "trainer_state.json"])
resume_refused("trainer_state.json garbled", truncate("trainer_state.json"), [os.path.join("CKPT",
                                                                                       "trainer_state.json")])
resume_refused("trainer_state.json empty", truncate("trainer_state.json", 0), [os.path.join("CKPT",
                                                                                        "trainer_state.json")])
resume_refused("trainer_state.json a JSON list", rewrite("trainer_state.json", "[1, 2, 3]\n"),
               [os.path.join("CKPT", "trainer_state.json")])


def drop_key(key):
    def f(ckpt):
        p = os.path.join(ckpt, "trainer_state.json")
        j = json.load(open(p))
        del j[key]
        with open(p, "w") as fh:
            json.dump(j, fh)
    return f


resume_refused("trainer_state.json without step", drop_key("step"), [os.path.join("CKPT", "trainer_state.json"),
                                                                     "step"])
resume_refused("config.json garbled", truncate("config.json"), [os.path.join("CKPT", "config.json")])



def fnv1a64(data):
    """trainer_state.json's file hash (FNV-1a 64, train/checkpoint.cc), for a damaged file it is made to accept."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def truncate_and_rehash(name, size, key):
    """Cuts `name` to `size` bytes (past its header, into the tensor data) and records the cut file's hash, so that
    the tensor reader, not the hash, has to notice."""
    def f(ckpt):
        p = os.path.join(ckpt, name)
        os.truncate(p, size)
        state = os.path.join(ckpt, "trainer_state.json")
        j = json.load(open(state))
        j[key] = fnv1a64(open(p, "rb").read())
        with open(state, "w") as fh:
            json.dump(j, fh)
    return f


resume_refused("model.safetensors cut into its data, hash made to match",
               truncate_and_rehash("model.safetensors", 4096, "model_hash"),
               [os.path.join("CKPT", "model.safetensors")])
resume_refused("optimizer.safetensors cut into its data, hash made to match",
               truncate_and_rehash("optimizer.safetensors", 8192, "optimizer_hash"),
               [os.path.join("CKPT", "optimizer.safetensors")])

# The checkpoint as a model: a cut model.safetensors is refused by the inference commands too, naming it.
cut = os.path.join(D, "cut-checkpoint")
shutil.copytree(os.path.join(RUN, "checkpoints", "step-00000004"), cut)
os.truncate(os.path.join(cut, "model.safetensors"), 4096)
for cmd in (["generate", "-m", cut, "-p", "Hello", "-n", "3"], ["info", "-m", cut]):
    one_error(f"ascent {cmd[0]} on a checkpoint with a cut model.safetensors", run(cmd, timeout=60),
              [os.path.join(cut, "model.safetensors")])

# Another model in the config than in the checkpoint: refused naming the checkpoint (or the tensor at fault) and
# saying how the two differ, nothing changed. The config's value must appear in the message (after the checkpoint's
# path, whose digits would otherwise count), or the tensor whose shape differs.
for what, model, value in (("dim 192", {"dim": "192"}, "192"), ("3 layers", {"n_layers": "3"}, "3"),
                           ("4 kv heads", {"n_kv_heads": "4"}, "4"), ("head_dim 16", {"head_dim": "16"}, "16"),
                           ("ffn_dim 256", {"ffn_dim": "256"}, "256"), ("arch qwen3", {"arch": "qwen3"}, "qwen3"),
                           ("tied embeddings", {"tied_embeddings": "true"}, "tied")):
    cfg = dict(longer, model=dict(longer["model"], **model))
    line = resume_refused(f"--resume with another model ({what})", lambda ckpt: None, ["CKPT"], cfg=cfg)
    rest = line.split("step-00000004", 1)[-1]
    says = re.search(rf"(?<![0-9.]){value}(?![0-9.])", rest) is not None or "tensor " in rest
    check(says, f"--resume with another model ({what}): the error says how the models differ ({rest.strip()!r})")

# An output that is a file: refused naming it, the file left as it was.
afile = os.path.join(D, "a-file")
with open(afile, "w") as f:
    f.write("not a folder\n")
path, _ = write_config(base(), output=afile)
one_error("output is a file", run(["train", path], timeout=60), [path, "output", afile, "not a folder"])
check(open(afile).read() == "not a folder\n", "output is a file: the file is unchanged")

finish()
