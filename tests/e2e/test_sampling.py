"""`generate`'s sampling flags against a sampler written here from the contract in src/ascent/engine/sampler.h.
It takes the repetition penalty over the last --repeat-last-n tokens, then OpenAI's presence and frequency penalties
over the generated tokens and logit_bias (as OpenAI documents them). Then greedy at --temp 0, else top-k, softmax at
the temperature, top-p, min-p, and one splitmix64 draw per token. Tokens are predicted from PyTorch reference logits of story-656K
and must be the ones `ascent generate --print-ids` prints, for a pinned --seed over whole streams, and in cases where
top-k, top-p, min-p and the repetition window each change the token (predicted here, with and without the flag).

Ascent's logits differ from the reference by ~1e-5 and its probabilities are f32, so every decision the prediction
takes (a cut, a draw's place between two running sums, a greedy gap) must clear its threshold by MARGIN; a stream
that comes closer than that is reported, not guessed.

The sampler's log-probabilities (tests/tools/op_runner's sample op) are checked against torch.log_softmax of the
adjusted logits, and its field checks (check_sampling, the server's HTTP 400s) by the names they give."""
import json
import math
import os

import torch

import numpy as np

from common import SHARED, check, finish, load_npy, op_runner, read_safetensors, reference_logits, run, tmpdir

MODEL = os.path.join(SHARED, "models", "story-656K")
PROMPT = [1, 147, 201, 282, 215]  # BOS and the first tokens of the model's known greedy story
MARGIN = 1e-4  # in probability (cuts, draws) and in logits (top-k and greedy gaps)
LOGITS_TOL = 2e-5  # ascent against the reference along a stream (6e-6 measured); 2 x 2e-5 / 0.7 < MARGIN
MASK64 = (1 << 64) - 1
D = tmpdir()


class SplitMix64:
    """Vigna's splitmix64: the state starts at the seed; each output adds the golden-ratio increment and mixes."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self):
        """The top 53 bits as a double in [0, 1)."""
        return (self.next() >> 11) / float(1 << 53)


class Params:
    def __init__(self, temp=1.0, top_k=0, top_p=1.0, min_p=0.0, penalty=1.0, last_n=64, seed=0, presence=0.0,
                 frequency=0.0, bias=None):
        self.temp, self.top_k, self.top_p, self.min_p = temp, top_k, top_p, min_p
        self.penalty, self.last_n, self.seed = penalty, last_n, seed
        self.presence, self.frequency, self.bias = presence, frequency, bias or {}

    def flags(self):
        f = ["--temp", self.temp, "--top-k", self.top_k, "--top-p", self.top_p, "--min-p", self.min_p,
             "--repeat-penalty", self.penalty, "--repeat-last-n", self.last_n, "--seed", self.seed,
             "--presence-penalty", self.presence, "--frequency-penalty", self.frequency]
        if self.bias:
            f += ["--logit-bias", ",".join(f"{t}:{b}" for t, b in self.bias.items())]
        return f

    def __str__(self):
        """The flags that differ from Params()'s."""
        f, default = self.flags(), Params().flags()
        default = dict(zip(default[::2], default[1::2]))
        return " ".join(f"{f[i]} {f[i + 1]}" for i in range(0, len(f), 2) if default.get(f[i]) != f[i + 1])


def adjust(logits, history, generated_from, p):
    """The logits after the repetition penalty, then OpenAI's penalties over history[generated_from:] (logit -=
    presence * (count > 0) + frequency * count), then logit_bias added. Each step rounds to f32, as the contract
    says, so equal logits stay equal here exactly when they do in the sampler."""
    f = np.float32
    l = [f(x) for x in logits]
    if p.penalty != 1.0 and p.last_n != 0:
        window = history if p.last_n < 0 else history[max(0, len(history) - p.last_n):]
        for t in set(window):
            l[t] = l[t] / f(p.penalty) if l[t] > 0 else l[t] * f(p.penalty)
    counts = {}
    for t in history[generated_from:]:
        counts[t] = counts.get(t, 0) + 1
    for t, c in counts.items():
        l[t] = l[t] - (f(p.presence) * f(c > 0) + f(p.frequency) * f(c))
    for t, b in p.bias.items():
        l[t] = l[t] + f(b)
    return [float(x) for x in l]


def sample(logits, history, generated_from, p, rng):
    """One token as the contract defines it, and how close the prediction came to another token: the smallest gap a
    greedy or top-k choice had between logits, or the draw between running sums. A top-p or min-p cut within
    MARGIN of its threshold is tried both ways, and must draw the same token."""
    l = adjust(logits, history, generated_from, p)
    order = sorted(range(len(l)), key=lambda i: (-l[i], i))
    if p.temp <= 0:
        return order[0], l[order[0]] - l[order[1]]
    margin = math.inf
    keep = order
    if 0 < p.top_k < len(order):
        keep = order[:p.top_k]
        margin = l[order[p.top_k - 1]] - l[order[p.top_k]]
    e = [math.exp((l[i] - l[keep[0]]) / p.temp) for i in keep]
    total = sum(e)
    prob = [x / total for x in e]
    cuts = [len(prob)]  # how many candidates are kept; more than one where a cut is too close to call
    if p.top_p < 1.0:
        cum = 0.0
        for n, x in enumerate(prob, 1):
            if cum + x >= p.top_p:
                break
            cum += x
        cuts = [n] + [n - 1] * (p.top_p - cum < MARGIN) + [n + 1] * (cum + prob[n - 1] - p.top_p < MARGIN)
    if p.min_p > 0.0:
        floor = prob[0] * p.min_p
        n = 1
        while n < len(prob) and prob[n] >= floor:
            n += 1
        near = [n - 1] * (n > 1 and prob[n - 1] - floor < MARGIN) + [n + 1] * (n < len(prob) and floor - prob[n] < MARGIN)
        cuts = sorted({min(c, m) for c in cuts for m in [n] + near})
    u = rng.uniform()
    picks = set()
    for n in cuts:
        r, cum = u * sum(prob[:n]), 0.0
        for i in range(n):
            before, cum = cum, cum + prob[i]
            if r < cum or i == n - 1:
                picks.add(keep[i])
                margin = min(margin, r - before, cum - r if i < n - 1 else math.inf)
                break
    if len(picks) > 1:
        return None, 0.0
    return picks.pop(), margin


class Reference:
    def __init__(self):
        self.cfg = json.load(open(os.path.join(MODEL, "config.json")))
        self.w = read_safetensors(os.path.join(MODEL, "model.safetensors"))
        self.stop = {self.cfg["eos_token_id"]}
        self.cache = {}

    def all_logits(self, ids):
        return reference_logits(self.cfg, self.w, list(ids))

    def logits(self, ids):
        key = tuple(ids)
        if key not in self.cache:
            self.cache[key] = self.all_logits(ids)[-1]
        return self.cache[key]

    def stream(self, prompt, n, p):
        """The tokens `generate -n n` should print after prompt, and the closest call among their decisions."""
        rng, ids, out, margin = SplitMix64(p.seed), list(prompt), [], math.inf
        for _ in range(n):
            tok, m = sample(self.logits(ids), ids, len(prompt), p, rng)
            margin = min(margin, m)
            if tok is None or tok in self.stop:  # too close to call: the stream ends here, and margin says so
                break
            out.append(tok)
            ids.append(tok)
        return out, margin


def ascent_stream(prompt, n, p):
    r = run(["generate", "-m", MODEL, "--prompt-ids", " ".join(map(str, prompt)), "-n", n, "--print-ids"] + p.flags())
    ids = [int(x) for x in r.stdout.split()] if r.returncode == 0 else None
    if ids is None or ids[:len(prompt)] != list(prompt):
        return None, r.stderr.strip()
    return ids[len(prompt):], ""


def check_stream(ref, prompt, n, p, what, without=None):
    """A pinned stream: the predicted tokens, every decision clear by MARGIN, and ascent's logits along them within
    LOGITS_TOL of the reference (so its probabilities are within 2 LOGITS_TOL / T of the predicted ones, under
    MARGIN). With `without`, the same stream without a flag is predicted to differ: the flag matters in it."""
    want, margin = ref.stream(prompt, n, p)
    got, err = ascent_stream(prompt, n, p)
    first = next((i for i, (a, b) in enumerate(zip(got or [], want)) if a != b), None)
    out = os.path.join(D, "stream.npy")
    r = run(["logits", "-m", MODEL, "--prompt-ids", " ".join(map(str, prompt + want)), "-o", out])
    diff = (load_npy(out) - ref.all_logits(prompt + want)).abs().max().item() if r.returncode == 0 else math.inf
    differs = without is None or ref.stream(prompt, n, without)[0] != want
    check(margin > MARGIN and diff < LOGITS_TOL and got == want and differs,
          f"{what} ({p}): {len(want)} tokens as predicted (closest decision {margin:.1e} > {MARGIN:.0e}, logits "
          f"within {diff:.1e} < {LOGITS_TOL:.0e}; first difference at {first}"
          + ("" if without is None else f"; a stream apart from {without}'s: {differs}")
          + f") {got if got != want else ''} {err}")


def differing_case(ref, prompt, with_flag, without, what):
    """The first seed (of 200) whose first token the flag changes, every decision clear; then ascent must agree."""
    for seed in range(200):
        a, b = with_flag(seed), without(seed)
        ta, ma = ref.stream(prompt, 1, a)
        tb, mb = ref.stream(prompt, 1, b)
        if ta != tb and min(ma, mb) > MARGIN:
            ga, ea = ascent_stream(prompt, 1, a)
            gb, eb = ascent_stream(prompt, 1, b)
            check(ga == ta and gb == tb, f"{what} changes the token: seed {seed}, {ta} with it and {tb} without, as "
                                         f"predicted (ascent: {ga} and {gb}) {ea} {eb}")
            return
    check(False, f"{what}: no seed of 200 where it changes the first token with every decision clear")


def repeat_window_case(ref):
    """Greedy under a strong penalty: the smallest --repeat-last-n whose window changes the argmax (it reaches an
    earlier copy of the winner; a penalty only lowers a logit), predicted; then that window and one token less must
    give those two tokens, and -1 (the whole history) its own prediction."""
    ids = list(PROMPT)
    for _ in range(40):  # a greedy story soon repeats a token
        ids.append(ref.stream(ids, 1, Params(temp=0))[0][0])
        for n in range(1, len(ids) + 1):
            tok, m = ref.stream(ids, 1, Params(temp=0, penalty=3.0, last_n=n))
            prev, m_prev = ref.stream(ids, 1, Params(temp=0, penalty=3.0, last_n=n - 1))
            if tok != prev and min(m, m_prev) > MARGIN:
                inside, _ = ascent_stream(ids, 1, Params(temp=0, penalty=3.0, last_n=n))
                outside, _ = ascent_stream(ids, 1, Params(temp=0, penalty=3.0, last_n=n - 1))
                whole, _ = ascent_stream(ids, 1, Params(temp=0, penalty=3.0, last_n=-1))
                want_whole, _ = ref.stream(ids, 1, Params(temp=0, penalty=3.0, last_n=-1))
                check(inside == tok and outside == prev and whole == want_whole,
                      f"--repeat-last-n {n} reaches token {ids[-n]} {n} back and greedy moves from {prev} to {tok}; "
                      f"{n - 1} does not (ascent: {inside}, {outside}; -1: {whole}, predicted {want_whole})")
                return
    check(False, "--repeat-last-n: no window edge that changes a greedy token in 40 steps")


def penalties_skip_prompt(ref):
    """The presence and frequency penalties count generated tokens only. Along the greedy story, a prompt holds its
    own greedy next token, and counting the prompt would move greedy elsewhere (predicted); with both penalties at 2
    it must still give that token."""
    ids, p = list(PROMPT), Params(temp=0, presence=2.0, frequency=2.0)
    for _ in range(40):
        out, m = ref.stream(ids, 1, Params(temp=0))
        if not out:
            break
        tok = out[0]
        l = adjust(ref.logits(ids), ids, 0, p)  # as if the whole prompt were generated
        order = sorted(range(len(l)), key=lambda i: (-l[i], i))
        if tok in ids and order[0] != tok and m > MARGIN and l[order[0]] - l[order[1]] > MARGIN:
            got, err = ascent_stream(ids, 1, p)
            check(got == [tok], f"penalties skip the prompt: {len(ids)} prompt tokens holding {tok}, greedy {tok} "
                                f"({order[0]} if the prompt counted; ascent: {got}) {err}")
            return
        ids.append(tok)
    check(False, "penalties skip the prompt: no prompt along 40 greedy steps where counting it would matter")


def run_sample_op(x, p, history, generated_from, top):
    """op_runner's sample op over the rows of x; returns (id, logprob, top ids, top logprobs) per row, or None."""
    path, out = os.path.join(D, "logits.npy"), os.path.join(D, "sampled.npy")
    np.save(path, x.numpy())
    args = ["sample", out, path, f"temperature={p.temp}", f"top_k={p.top_k}", f"top_p={p.top_p}", f"min_p={p.min_p}",
            f"repeat_penalty={p.penalty}", f"repeat_last_n={p.last_n}", f"seed={p.seed}",
            f"presence_penalty={p.presence}", f"frequency_penalty={p.frequency}",
            "history=" + ",".join(map(str, history)), f"generated_from={generated_from}", f"top_logprobs={top}"]
    if p.bias:
        args.append("logit_bias=" + ",".join(f"{t}:{b}" for t, b in p.bias.items()))
    r = op_runner(args)
    if r.returncode != 0:
        return None
    y = np.load(out)
    return [(int(row[0]), float(row[1]), [int(v) for v in row[2:2 + top]], [float(v) for v in row[2 + top:]])
            for row in y]


def within_ulp(got, want):
    """got (an f32) is want rounded to f32, or one f32 step away: the sampler rounds a double once."""
    return abs(got - want) <= float(np.spacing(np.float32(abs(want))))


def logprob_case(x, p, history, generated_from, top, what):
    """Each row's drawn id as the contract predicts, its logprob and the top ids (most likely first, ties to the
    lower id) with theirs as torch.log_softmax of the adjusted logits gives them. The logits are exact here and
    adjust() rounds as the sampler does, so equal logits are decided by id on both sides. Only a draw's place
    between f32 running sums could differ; the inputs are fixed, so a margin under MARGIN is reported, not
    required."""
    rows = run_sample_op(x, p, history, generated_from, top)
    if rows is None:
        check(False, f"{what}: op_runner sample failed")
        return 0
    rng, hist, ties, bad = SplitMix64(p.seed), list(history), 0, []
    for t, (tok, lp, top_ids, top_lps) in enumerate(rows):
        l = adjust(x[t].tolist(), hist, generated_from, p)
        want_tok, margin = sample(x[t].tolist(), hist, generated_from, p, rng)
        ref = torch.log_softmax(torch.tensor(l, dtype=torch.float64), dim=0)
        order = sorted(range(len(l)), key=lambda i: (-l[i], i))[:top]
        ties += any(l[a] == l[b] for a, b in zip(order, order[1:]))
        if tok != want_tok or not within_ulp(lp, ref[tok].item()) or top_ids != order or \
                not all(within_ulp(g, ref[i].item()) for g, i in zip(top_lps, order)):
            bad.append(f"row {t}: id {tok} (predicted {want_tok}, margin {margin:.1e}), logprob {lp} "
                       f"({ref[tok].item():.9g}), top {top_ids} ({order})")
        hist.append(tok)
    check(not bad, f"{what}: {len(rows)} draws, logprobs and top-{top} lists as predicted (f32 within one step of "
                   f"torch.log_softmax in double; {ties} rows with tied logits among the top) {bad[:2]}")
    return ties


def logprob_cases():
    """Logits in eighths, so many are equal: ties among the top ids and (row 0) at the greedy choice itself."""
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(8, 600, generator=g) * 3 * 8).round() / 8
    x[0, 17] = x[0, 401] = x[0].max() + 0.5  # row 0: the two most likely, tied; greedy takes 17
    history, generated_from = [5, 9, 9, 33, 120, 9, 33, 250], 3  # the penalties count 33, 120, 9, 33, 250 and draws
    bias = {3: 2.5, 250: -1.25, 77: 6.0}
    sampled = Params(temp=0.9, top_k=50, top_p=0.95, min_p=0.02, penalty=1.25, last_n=6, seed=77, presence=0.5,
                     frequency=0.25, bias=bias)
    ties = logprob_case(x, sampled, history, generated_from, 5, "sampled with every setting")
    greedy = Params(temp=0, penalty=1.25, last_n=6, presence=0.5, frequency=0.25, bias=bias)
    ties += logprob_case(x, greedy, history, generated_from, 20, "greedy with every penalty")
    logprob_case(x, Params(temp=1.0, seed=5), [1], 1, 0, "top_logprobs 0: the drawn id's logprob alone")
    check(ties > 0, f"the logprob cases hold tied logits among the top ids ({ties} rows)")
    rows = run_sample_op(x[:1], greedy, history, generated_from, 2)
    check(rows is not None and rows[0][0] == 17 and rows[0][2] == [17, 401],
          f"a greedy tie goes to the lower id, first in the top list too: {rows and rows[0][:3]}")
    # logprobs are at temperature 1 whatever the settings: the same row under other settings gives the same values.
    a = run_sample_op(x[:1], Params(temp=0.3, top_k=2, seed=1), [1], 1, 4)
    b = run_sample_op(x[:1], Params(temp=0), [1], 1, 4)
    check(a is not None and b is not None and a[0][2:] == b[0][2:],
          f"the top logprobs do not depend on temperature or top-k: {a and a[0][2:]} and {b and b[0][2:]}")


def field_checks():
    """check_sampling names each field as the OpenAI API spells it (the server's 400 messages)."""
    x = torch.zeros(1, 16)
    np.save(os.path.join(D, "zeros.npy"), x.numpy())
    for attr, message in [("temperature=101", "temperature must be in [0, 100], got 101"),
                          ("temperature=-0.5", "temperature must be in [0, 100], got -0.5"),
                          ("top_p=0", "top_p must be in (0, 1], got 0"),
                          ("min_p=1.5", "min_p must be in [0, 1], got 1.5"),
                          ("top_k=-1", "top_k must be 0 (off) or more, got -1"),
                          ("presence_penalty=2.5", "presence_penalty must be in [-2, 2], got 2.5"),
                          ("frequency_penalty=-2.5", "frequency_penalty must be in [-2, 2], got -2.5"),
                          ("frequency_penalty=nan", "frequency_penalty must be in [-2, 2], got nan"),
                          ("logit_bias=4:-100.5", "logit_bias: the bias of token 4 must be in [-100, 100], got -100.5"),
                          ("logit_bias=16:1", "logit_bias: token id 16 is outside the vocabulary of 16 ids"),
                          ("logit_bias=4:1,4:2", "logit_bias: token id 4 is given twice"),
                          ("repeat_penalty=0", "repetition_penalty must be positive, got 0"),
                          ("repeat_last_n=-2", "repeat_last_n must be -1 (the whole history) or more, got -2")]:
        r = op_runner(["sample", os.path.join(D, "out.npy"), os.path.join(D, "zeros.npy"), attr])
        check(r.returncode == 1 and message in r.stderr, f"{attr} is refused: {r.stderr.strip()!r}")
    r = op_runner(["sample", os.path.join(D, "out.npy"), os.path.join(D, "zeros.npy"), "temperature=100",
                   "top_p=1", "min_p=1", "presence_penalty=-2", "frequency_penalty=2", "logit_bias=15:100,0:-100"])
    check(r.returncode == 0, f"the edges of every range are accepted: {r.stderr.strip()!r}")


def main():
    # The generator itself: the first outputs for seed 0 published with splitmix64 (Vigna's splitmix64.c).
    rng = SplitMix64(0)
    first = [rng.next() for _ in range(4)]
    check(first == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC],
          f"splitmix64 here gives the published outputs for seed 0: {[hex(x) for x in first]}")
    ref = Reference()
    # Pinned streams: every flag at once, and each sampling setting alone.
    check_stream(ref, PROMPT, 24, Params(temp=1.0, seed=1234), "plain temperature")
    check_stream(ref, PROMPT, 24, Params(temp=0.7, top_k=40, seed=99), "top-k", Params(temp=0.7, seed=99))
    check_stream(ref, PROMPT, 24, Params(temp=1.0, top_p=0.8, seed=2024), "top-p", Params(temp=1.0, seed=2024))
    check_stream(ref, PROMPT, 24, Params(temp=1.0, min_p=0.1, seed=33), "min-p", Params(temp=1.0, seed=33))
    check_stream(ref, PROMPT, 24, Params(temp=1.2, top_k=50, top_p=0.9, min_p=0.05, penalty=1.3, last_n=8, seed=7),
                 "all filters and the repetition penalty", Params(temp=1.2, seed=7))
    check_stream(ref, PROMPT, 16, Params(temp=0, penalty=1.5, last_n=-1), "greedy with a penalty on the whole history",
                 Params(temp=0))
    # Each filter changes a token somewhere, and the program agrees with the prediction on both sides.
    differing_case(ref, PROMPT, lambda s: Params(temp=1.0, top_k=5, seed=s), lambda s: Params(temp=1.0, seed=s),
                   "--top-k 5")
    differing_case(ref, PROMPT, lambda s: Params(temp=1.0, top_p=0.5, seed=s), lambda s: Params(temp=1.0, seed=s),
                   "--top-p 0.5")
    differing_case(ref, PROMPT, lambda s: Params(temp=1.0, min_p=0.2, seed=s), lambda s: Params(temp=1.0, seed=s),
                   "--min-p 0.2")
    differing_case(ref, PROMPT, lambda s: Params(temp=1.0, penalty=2.0, last_n=-1, seed=s),
                   lambda s: Params(temp=1.0, penalty=2.0, last_n=0, seed=s), "--repeat-last-n -1 (against 0)")
    repeat_window_case(ref)
    # OpenAI's penalties and logit_bias, each changing the stream it is in.
    check_stream(ref, PROMPT, 24, Params(temp=1.0, presence=1.5, seed=47), "presence penalty", Params(temp=1.0, seed=47))
    check_stream(ref, PROMPT, 24, Params(temp=0.8, frequency=0.75, seed=8), "frequency penalty",
                 Params(temp=0.8, seed=8))
    check_stream(ref, PROMPT, 16, Params(temp=0, presence=0.5, frequency=1.0), "greedy with both penalties",
                 Params(temp=0))
    first = ref.stream(PROMPT, 1, Params(temp=0))[0][0]
    check_stream(ref, PROMPT, 16, Params(temp=0, bias={first: -100, 300: 4.5}), "greedy with logit_bias",
                 Params(temp=0))
    check_stream(ref, PROMPT, 24, Params(temp=1.0, top_k=40, penalty=1.1, presence=0.5, frequency=0.5,
                                         bias={300: 3.0}, seed=3), "every setting at once", Params(temp=1.0, seed=3))
    penalties_skip_prompt(ref)
    logprob_cases()
    field_checks()
    # The seed is the whole stream: the same seed repeats it, another gives another.
    p = Params(temp=1.0, seed=5)
    a, _ = ascent_stream(PROMPT, 24, p)
    b, _ = ascent_stream(PROMPT, 24, p)
    c, _ = ascent_stream(PROMPT, 24, Params(temp=1.0, seed=6))
    check(a is not None and a == b and a != c, "--seed 5 twice gives one stream, --seed 6 another")
    finish()


if __name__ == "__main__":
    main()
