"""Runs the OpenAI-client suite (tests/serve/*.test.js, node:test) against `ascent serve` on story-656K.

It starts the server with --port 0 and an API key, waits for its listening line, runs `node --test` with the
server's URL, key and expected model name in the environment, then stops the server with SIGTERM. The run fails when
a test fails, when the server does not exit 0 within 60 s of SIGTERM, or when it printed a sanitizer report. With
ASCENT_SERVE_URL (and ASCENT_SERVE_API_KEY, ASCENT_SERVE_MODEL) set it runs the suite against that server instead.

The suite needs the official `openai` package in tests/serve/node_modules, which `scripts/setup.sh --test` installs
(npm ci from package-lock.json); without it the run fails, saying so."""
import glob
import os
import subprocess
import sys

from server import MODEL, Server

HERE = os.path.dirname(os.path.abspath(__file__))
API_KEY = "ascent-test-key"


def main():
    if not os.path.isfile(os.path.join(HERE, "node_modules", "openai", "package.json")):
        print(f"FAIL {HERE}/node_modules has no openai package: run scripts/setup.sh --test (it runs npm ci there)")
        return 1
    tests = sorted(glob.glob(os.path.join(HERE, "*.test.js")))
    env = dict(os.environ)
    external = bool(env.get("ASCENT_SERVE_URL"))
    args = ["-m", MODEL, "--port", "0", "--api-key", API_KEY, "-t", "2", "--max-seqs", "8", "--max-queued", "64"]
    try:
        server = Server(args)
    except RuntimeError as e:
        print(f"FAIL {e}")
        return 1
    if not external:
        # The default served name is the model folder's base name.
        env.update(ASCENT_SERVE_URL=server.url, ASCENT_SERVE_API_KEY=API_KEY,
                   ASCENT_SERVE_MODEL=os.path.basename(MODEL))
    cmd = ["node", "--test", "--test-concurrency=1", "--test-reporter=spec", *tests]
    print(" ".join(cmd))
    sys.stdout.flush()
    try:
        node = subprocess.run(cmd, cwd=HERE, env=env, timeout=600).returncode
    except subprocess.TimeoutExpired:
        print("FAIL node --test ran past 600 s")
        node = 1
    failed = node != 0
    code = server.stop()
    if code != "external":
        ok = code == 0
        print(f"{'ok  ' if ok else 'FAIL'} SIGTERM: the server exited with {code} (expected 0)")
        report = server.sanitizer_report()
        if report:
            print(f"FAIL the server printed a sanitizer report: {report}")
        if not ok or report:
            print("server stderr ends:\n" + server.tail())
        failed = failed or not ok or bool(report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
