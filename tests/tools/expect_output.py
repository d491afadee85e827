"""Runs a command for a ctest that matches its output. It passes only when the command exits with the expected status
(0 unless --exit says otherwise), prints no sanitizer report, and its output matches the regular expression (stdout
and stderr together, as ctest's PASS_REGULAR_EXPRESSION reads them). PASS_REGULAR_EXPRESSION alone ignores the exit
status, so a crash or a sanitizer's abort after the matching lines passed.

    expect_output.py [--exit N] REGEX -- COMMAND [ARG...]"""
import re
import subprocess
import sys

# The reports of AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer (tests/e2e/common.py reads the same).
SANITIZER = re.compile(r"ERROR: \w*Sanitizer|: runtime error: |SUMMARY: \w*Sanitizer")


def main():
    # Read by position, not argparse: a regular expression may start with "--" ("--cpu 4096 is not a CPU").
    args, want = sys.argv[1:], 0
    if args[:1] == ["--exit"] and len(args) > 1:
        want, args = int(args[1]), args[2:]
    if len(args) < 3 or args[1] != "--":
        sys.exit("usage: " + __doc__.splitlines()[-1].strip())
    regex, cmd = args[0], args[2:]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = r.stdout.decode("utf-8", "replace")
    sys.stdout.write(out)
    problems = []
    if r.returncode != want:
        problems.append(f"exit status {r.returncode}, expected {want}")
    # CMake's regular expressions let '.' match a newline, as re.DOTALL does.
    if not re.search(regex, out, re.DOTALL):
        problems.append(f"output does not match {regex!r}")
    m = SANITIZER.search(out)
    if m:
        problems.append(f"sanitizer report: {out[out.rfind(chr(10), 0, m.start()) + 1:].splitlines()[0][:200]}")
    for problem in problems:
        print(f"expect_output: {cmd[0]}: {problem}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
