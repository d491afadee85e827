"""`make demo`: its run (the Makefile's demo-run target, against the build under test) prints the known stories260K
story of ../shared/README.md. Its build installs and configures without the tests, so a machine without GoogleTest or
the tests' Python packages can build it; a build folder that already has the tests keeps them."""
import os
import subprocess

from common import ASCENT, ROOT, SHARED, check, finish, tmpdir

KNOWN = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
         "she saw a big, red ball. She wanted to play with it, but it was too high.")


def make(*args, timeout=300):
    # Without the flags of a make that runs this suite (`make test` exports MAKEFLAGS to ctest and so to here).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "-C", ROOT] + list(args), capture_output=True, text=True, timeout=timeout, env=env)


def main():
    r = make("-s", "--no-print-directory", "demo-run", f"ASCENT={ASCENT}", f"SHARED={SHARED}")
    check(r.returncode == 0 and r.stdout.startswith(KNOWN + "\n"),
          f"make demo-run prints the known story first: exit {r.returncode}, {r.stdout[:200]!r} {r.stderr[-200:]!r}")
    r = make("-s", "--no-print-directory", "demo-run", f"ASCENT={ASCENT}", f"SHARED={tmpdir()}")
    check(r.returncode != 0 and "stories260K is missing" in r.stdout, f"without the model the demo fails: {r.stdout!r}")
    # The demo's build: setup without the test packages, configured with BUILD_TESTING off (tests/CMakeLists.txt, the
    # only place that looks for GoogleTest, is then not read). A build folder that already holds the tests keeps them,
    # and they are rebuilt, so that ctest never runs test binaries older than the program.
    work = tmpdir()
    with_tests = os.path.join(work, "CMakeCache.txt")
    with open(with_tests, "w") as f:
        f.write("CMAKE_BUILD_TYPE:STRING=Release\nBUILD_TESTING:BOOL=ON\n")
    for cache, value in ((os.path.join(work, "missing"), "OFF"), (with_tests, "ON")):
        r = make("-n", "--no-print-directory", "demo", f"RELEASE_CACHE={cache}")
        lines = r.stdout.splitlines()
        check("bash scripts/setup.sh" in lines and f"cmake --preset release -DBUILD_TESTING={value}" in lines,
              f"make demo installs without --test and configures BUILD_TESTING={value} ({cache}): {lines[:3]}")
    finish()


if __name__ == "__main__":
    main()
