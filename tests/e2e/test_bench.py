"""`ascent bench` reports prefill and decode throughput like llama-bench. With --jsonl it prints one object per test
with the median, range and share of the roofline. Decode is judged token by token against reads measured beside it,
unless --roofline-gbps is given. -d runs each test after that many tokens in the KV cache; -p, -n, -d and -t take lists;
bad flags are refused with one line."""
import json
import os
import re

from common import SHARED, check, finish, run

MODEL = os.path.join(SHARED, "models", "story-656K")
# Given figures skip the measurement (seconds) and make the roofline share checkable.
ROOF = ["--roofline-gbps", 20, "--roofline-gflops", 200, "--roofline-int8-gops", 800, "--roofline-bf16-gflops", 400]


def main():
    r = run(["bench", "-m", MODEL, "-p", 32, "-n", 8, "-r", 3, "--jsonl"] + ROOF)
    lines = r.stdout.strip().splitlines()
    check(r.returncode == 0 and len(lines) == 2, f"two JSON lines: {lines} {r.stderr.strip()}")
    objs = [json.loads(line) for line in lines] if r.returncode == 0 else []
    check([o.get("test") for o in objs] == ["pp32", "tg8"], "tests are pp32 and tg8")
    keys = {"test", "n_prompt", "n_gen", "n_depth", "n_threads", "tps_median", "tps_min", "tps_max", "roofline_pct",
            "samples_tps"}
    check(len(objs) == 2 and set(objs[0]) == keys and set(objs[1]) == keys | {"token_bytes"},
          "each object has exactly the documented keys, decode's token_bytes too (no read_gbps: given)")
    check([(o.get("n_prompt"), o.get("n_gen"), o.get("n_depth")) for o in objs] == [(32, 0, 0), (0, 8, 0)] and
          all(o.get("n_threads", 0) >= 1 for o in objs), "n_prompt, n_gen, n_depth and n_threads as llama-bench's")
    check(all(0 < o["tps_min"] <= o["tps_median"] <= o["tps_max"] and o["roofline_pct"] > 0 for o in objs),
          "min <= median <= max, roofline share positive")
    check(all(len(o["samples_tps"]) == 3 and min(o["samples_tps"]) == o["tps_min"] and
              max(o["samples_tps"]) == o["tps_max"] and sorted(o["samples_tps"])[1] == o["tps_median"] for o in objs),
          f"samples_tps holds the 3 runs the median and range come from: {[o.get('samples_tps') for o in objs]}")
    with open(os.path.join(MODEL, "config.json")) as f:
        cfg = json.load(f)
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_row = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 4  # K and V, f32, per position
    if len(objs) == 2:
        # f32 matrices: prefill against the FP32 peak given (200 GFLOP/s: 2 FLOP per matrix element per token). Decode
        # against 20 GB/s: 4 bytes per element, plus the KV rows step i attends over (i + 1 of them, 4.5 on average over
        # 8 steps). Each share is the median times a model constant; the prefill one gives the element count, which pins
        # the decode one.
        pp, tg = objs
        elems = pp["roofline_pct"] / pp["tps_median"] / 100 * 200e9 / 2
        want = 100 * (4 * elems + 4.5 * kv_row) / 20e9
        got = tg["roofline_pct"] / tg["tps_median"]
        check(abs(got - want) < 1e-3 * want,
              f"shares use the given roofline: decode {got:.4e} %/(t/s) = (4 B x {elems:.0f} + KV {4.5 * kv_row:.0f} B)"
              f" / 20 GB/s")
        check(abs(tg["token_bytes"] - (4 * elems + 4.5 * kv_row)) < 1e-3 * tg["token_bytes"],
              f"token_bytes is what a decode step was judged by: {tg['token_bytes']} vs {4 * elems + 4.5 * kv_row:.0f}")
    r = run(["bench", "-m", MODEL, "-p", 16, "-n", 8, "-d", 40, "-r", 2, "--jsonl"] + ROOF)
    objs_d = [json.loads(line) for line in r.stdout.strip().splitlines()] if r.returncode == 0 else []
    check([o.get("test") for o in objs_d] == ["pp16 @ d40", "tg8 @ d40"],
          f"-d 40 names the tests as llama-bench does: {[o.get('test') for o in objs_d]} {r.stderr.strip()}")
    if len(objs) == 2 and len(objs_d) == 2:
        # 40 more cached positions read per decode step, nothing else changes.
        extra = objs_d[1]["roofline_pct"] / objs_d[1]["tps_median"] - objs[1]["roofline_pct"] / objs[1]["tps_median"]
        want = 100 * 40 * kv_row / 20e9
        check(abs(extra - want) < 1e-3 * want, f"decode at depth 40 counts 40 more KV rows ({extra:.4e} vs {want:.4e})")
        # With an f16 cache each of those rows is half the bytes: 44.5 rows of kv_row / 2 per step against 44.5 of
        # kv_row, the weights the same.
        r = run(["bench", "-m", MODEL, "-p", 0, "-n", 8, "-d", 40, "-r", 2, "--jsonl", "--kv-type", "f16"] + ROOF)
        h = [json.loads(line) for line in r.stdout.strip().splitlines()] if r.returncode == 0 else []
        check(len(h) == 1 and h[0].get("test") == "tg8 @ d40", f"-n 8 -d 40 --kv-type f16 runs: {r.stderr.strip()}")
        if len(h) == 1:
            less = objs_d[1]["roofline_pct"] / objs_d[1]["tps_median"] - h[0]["roofline_pct"] / h[0]["tps_median"]
            want = 100 * 44.5 * kv_row / 2 / 20e9
            check(abs(less - want) < 1e-3 * want,
                  f"an f16 cache's decode counts half the KV bytes ({less:.4e} vs {want:.4e} %/(t/s) fewer)")
    # Lists, as llama-bench takes them: every thread count runs, for each depth, each prefill and each decode length
    # (the model loaded once per thread count, its matrices placed for it).
    r = run(["bench", "-m", MODEL, "-p", "8,16", "-n", "2", "-d", "0,5", "-t", "1,2", "-r", 1, "--jsonl"] + ROOF)
    got = [(o["n_threads"], o["test"]) for o in map(json.loads, r.stdout.strip().splitlines())] if r.returncode == 0 else []
    want = [(t, name) for t in (1, 2) for name in ("pp8", "pp16", "tg2", "pp8 @ d5", "pp16 @ d5", "tg2 @ d5")]
    check(got == want, f"-p 8,16 -n 2 -d 0,5 -t 1,2 runs the 12 tests in order: {got} {r.stderr.strip()}")
    r = run(["bench", "-m", MODEL, "-p", "8,16", "-n", 2, "-t", "1,2", "-r", 1] + ROOF)
    check(r.returncode == 0 and "| 1 | pp16 |" in r.stdout and "| 2 | tg2 |" in r.stdout and
          "2 threads: roofline" in r.stdout, f"the table has a threads column and a roofline line per count: {r.stdout}")
    for flag, value, needle in (("-p", "8,-1", "-p and -n must be >= 0"), ("-d", "0,-3", "-d: the depth must be >= 0"),
                                ("-t", "1,100000", "-t 100000: at most"),
                                ("--profile", "t.json", "--profile and --memory-csv record one thread count")):
        extra = ["-t", "1,2"] if flag == "--profile" else []
        r = run(["bench", "-m", os.path.join(MODEL, "nope"), flag, value, "-r", 1] + extra + ROOF)
        check(r.returncode == 1 and needle in r.stderr and r.stderr.count("\n") == 1,
              f"{flag} {value} refused before the model loads: {r.stderr.strip()}")
    r = run(["bench", "-m", MODEL, "-p", 8, "-n", 8, "-d", 510, "-r", 1] + ROOF)
    check(r.returncode == 1 and "-d" in r.stderr and "512" in r.stderr and r.stderr.count("\n") == 1,
          f"a depth past the model's context refused: {r.stderr.strip()}")
    r = run(["bench", "-m", MODEL, "-p", 8, "-n", 2, "-r", 1] + ROOF)
    check(r.returncode == 0 and "| pp8 |" in r.stdout and "| tg2 |" in r.stdout and "roofline" in r.stdout,
          "table output names the tests and the roofline")
    # Without --roofline-gbps, each decode run is judged against the best of the reads measured between its tokens.
    # The table says over which range the runs' reads lie. The decode share lies between the slowest run on the
    # fastest read and the fastest on the slowest (matrix bytes as printed, plus the KV rows; printed figures are
    # rounded, hence the 5%).
    r = run(["bench", "-m", MODEL, "-p", 0, "-n", 8, "-r", 2, "--jsonl"] + ROOF[2:])
    objs_r = [json.loads(line) for line in r.stdout.strip().splitlines()] if r.returncode == 0 else []
    check(len(objs_r) == 1 and len(objs_r[0].get("read_gbps", [])) == 2 and min(objs_r[0]["read_gbps"]) > 0,
          f"without --roofline-gbps the decode object lists the read each run was judged against: {objs_r}")
    r = run(["bench", "-m", MODEL, "-p", 0, "-n", 8, "-r", 3] + ROOF[2:])
    m_bw = re.search(r"decode runs: each against the best read measured between its tokens, runs' reads ([\d.]+)-([\d.]+) GB/s", r.stdout)
    m_mb = re.search(r"([\d.]+) MiB of matrices", r.stdout)
    m_tg = re.search(r"\| tg8 \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)% \|", r.stdout)
    ok = r.returncode == 0 and m_bw and m_mb and m_tg
    if ok:
        lo_bw, hi_bw = float(m_bw[1]), float(m_bw[2])
        tps_min, tps_max, share = float(m_tg[2]), float(m_tg[3]), float(m_tg[4])
        nbytes = float(m_mb[1]) * 2**20 + 4.5 * kv_row
        lo, hi = 100 * nbytes * tps_min / (hi_bw * 1e9), 100 * nbytes * tps_max / (lo_bw * 1e9)
        ok = 0 < lo_bw <= hi_bw and 0.95 * lo <= share <= 1.05 * hi
    check(ok, f"decode runs judged against the reads measured beside their tokens: {r.stdout.strip()} {r.stderr.strip()}")
    r = run(["bench", "-m", MODEL, "-r", 0])
    check(r.returncode == 1 and "-r" in r.stderr and r.stderr.count("\n") == 1, f"-r 0 refused: {r.stderr.strip()}")
    r = run(["bench", "-m", MODEL, "-p", 8, "-n", 2, "-r", 1, "--roofline-int8-gops", -5] + ROOF[:4])
    check(r.returncode == 1 and "--roofline-" in r.stderr and r.stderr.count("\n") == 1,
          f"a negative roofline figure refused: {r.stderr.strip()}")
    # doctor measures the int8 dot peak of the instruction the integer kernels use on this CPU, named after the flags
    # /proc/cpuinfo lists: AVX-512 VNNI's vpdpbusd, else AVX2's vpmaddubsw. Without it, bench would judge an AVX2-only
    # CPU's integer prefill against FP32 FMA, reading above 100%.
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    want = "vpdpbusd" if {"avx512f", "avx512_vnni"} <= set(flags) else "vpmaddubsw" if "avx2" in flags else None
    r = run(["doctor", "-t", 1])
    m = re.search(r"int8 dot peak +([0-9.]+) GOP/s \(1 threads\), .*(vpdpbusd|vpmaddubsw)", r.stdout)
    check(want is None or (r.returncode == 0 and m is not None and float(m.group(1)) > 0 and m.group(2) == want),
          f"doctor's int8 dot peak names {want}: {m.group(0) if m else r.stdout.strip()[-200:]}")
    finish()


if __name__ == "__main__":
    main()
