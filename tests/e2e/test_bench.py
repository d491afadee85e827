"""`ascent bench` reports prefill and decode throughput like llama-bench: with --jsonl one object per test with
the median, range and share of the roofline; bad flags are refused with one line."""
import json
import os

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
    keys = {"test", "tps_median", "tps_min", "tps_max", "roofline_pct"}
    check(all(set(o) == keys for o in objs), "each object has exactly the documented keys")
    check(all(0 < o["tps_min"] <= o["tps_median"] <= o["tps_max"] and o["roofline_pct"] > 0 for o in objs),
          "min <= median <= max, roofline share positive")
    if len(objs) == 2:
        # f32 matrices: prefill against the FP32 peak given (200 GFLOP/s), decode against 20 GB/s; both shares
        # scale with the median by one model constant, so their ratio pins the two denominators used.
        pp, tg = objs
        ratio = (pp["roofline_pct"] / pp["tps_median"]) / (tg["roofline_pct"] / tg["tps_median"])
        check(abs(ratio - (2 / 200e9) / (4 / 20e9)) < 1e-3 * ratio,
              f"shares use the given roofline: 2 FLOP/param of 200 GFLOP/s vs 4 B/param of 20 GB/s ({ratio:.4f})")
    r = run(["bench", "-m", MODEL, "-p", 8, "-n", 2, "-r", 1] + ROOF)
    check(r.returncode == 0 and "| pp8 |" in r.stdout and "| tg2 |" in r.stdout and "roofline" in r.stdout,
          "table output names the tests and the roofline")
    r = run(["bench", "-m", MODEL, "-r", 0])
    check(r.returncode == 1 and "-r" in r.stderr and r.stderr.count("\n") == 1, f"-r 0 refused: {r.stderr.strip()}")
    r = run(["bench", "-m", MODEL, "-p", 8, "-n", 2, "-r", 1, "--roofline-int8-gops", -5] + ROOF[:4])
    check(r.returncode == 1 and "--roofline-" in r.stderr and r.stderr.count("\n") == 1,
          f"a negative roofline figure refused: {r.stderr.strip()}")
    finish()


if __name__ == "__main__":
    main()
