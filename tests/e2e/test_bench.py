"""`ascent bench` reports prefill and decode throughput like llama-bench: with --jsonl one object per test with
the median, range and share of the roofline; bad flags are refused with one line."""
import json
import os

from common import SHARED, check, finish, run

MODEL = os.path.join(SHARED, "models", "story-656K")


def main():
    r = run(["bench", "-m", MODEL, "-p", 32, "-n", 8, "-r", 3, "--jsonl", "--roofline-gbps", 20,
             "--roofline-gflops", 200])
    lines = r.stdout.strip().splitlines()
    check(r.returncode == 0 and len(lines) == 2, f"two JSON lines: {lines} {r.stderr.strip()}")
    objs = [json.loads(line) for line in lines] if r.returncode == 0 else []
    check([o.get("test") for o in objs] == ["pp32", "tg8"], "tests are pp32 and tg8")
    keys = {"test", "tps_median", "tps_min", "tps_max", "roofline_pct"}
    check(all(set(o) == keys for o in objs), "each object has exactly the documented keys")
    check(all(0 < o["tps_min"] <= o["tps_median"] <= o["tps_max"] and o["roofline_pct"] > 0 for o in objs),
          "min <= median <= max, roofline share positive")
    r = run(["bench", "-m", MODEL, "-p", 8, "-n", 2, "-r", 1, "--roofline-gbps", 20, "--roofline-gflops", 200])
    check(r.returncode == 0 and "| pp8 |" in r.stdout and "| tg2 |" in r.stdout and "roofline" in r.stdout,
          "table output names the tests and the roofline")
    r = run(["bench", "-m", MODEL, "-r", 0])
    check(r.returncode == 1 and "-r" in r.stderr and r.stderr.count("\n") == 1, f"-r 0 refused: {r.stderr.strip()}")
    finish()


if __name__ == "__main__":
    main()
