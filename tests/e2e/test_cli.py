"""The command line's own usage errors and help: an unknown subcommand is an error naming it and listing the commands
(exit 2), with or without --help; `ascent` alone says a subcommand is required (exit 2); `ascent --help` and
`ascent SUBCOMMAND --help` print help and exit 0."""
import re

from common import check, finish, run

COMMANDS = ["generate", "info", "perplexity", "doctor", "convert", "tokenize", "logits", "chat-template", "profile",
            "bench", "quantize", "serve", "loadtest", "data", "train"]


def main():
    listed = "(commands: " + ", ".join(COMMANDS) + ")"
    for args in (["prune"], ["prune", "--help"], ["prune", "-h"], ["generat", "-m", "x"], ["--help", "prune"],
                 ["server", "--port", "8080"]):
        r = run(args, timeout=60)
        want = f"ascent: error: unknown command '{args[0] if args[0] != '--help' else args[1]}' {listed}"
        check(r.returncode == 2 and r.stderr.splitlines() == [want] and r.stdout == "",
              f"ascent {' '.join(args)}: exit {r.returncode}, {r.stderr.strip()!r}, stdout {r.stdout[:60]!r}")
    r = run([], timeout=60)
    check(r.returncode == 2 and r.stderr.splitlines() == ["ascent: error: A subcommand is required"] and r.stdout == "",
          f"ascent alone: exit {r.returncode}, {r.stderr.strip()!r}")
    r = run(["--help"], timeout=60)
    check(r.returncode == 0 and r.stderr == "" and all(re.search(rf"^  {c}\b", r.stdout, re.M) for c in COMMANDS),
          f"ascent --help: exit {r.returncode}, lists every command: {r.stdout[:200]!r}")
    for c in COMMANDS:
        r = run([c, "--help"], timeout=60)
        check(r.returncode == 0 and r.stderr == "" and f"ascent {c} [OPTIONS]" in r.stdout,
              f"ascent {c} --help: exit {r.returncode}, its usage line: {r.stdout.splitlines()[:2]}")
    finish()


if __name__ == "__main__":
    main()
