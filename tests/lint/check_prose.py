#!/usr/bin/python3
"""Prose rules for comments and docs: they say what holds and why, briefly, and leave history to git.

Failures (one line each, exit status 1):
  - a work-log reference ("session" followed by a number, any case) in src, docs, bench, tests or README.md;
  - a comment block in src over 150 words, reported as FILE:LINE words. A block is a run of consecutive // lines
    (a code line's trailing // comment starts one) or one /* */ comment;
  - a paragraph or markdown table cell in docs/ARCHITECTURE.md over 150 words;
  - docs/ARCHITECTURE.md without a picture: a fenced text diagram or a reference to an .svg file;
  - bench/RESULTS.md over 400 lines.
Warnings (printed, not failures): a sentence over 40 words in a comment or docstring under src, bench or tests.

  tests/lint/check_prose.py [--root DIR] [--no-warnings]

The root defaults to the repository holding this script. Before checking it, the script runs its rules over a
small tree of known faults and fails if any rule misses its fault, so a silent rule cannot pass for a clean tree.
Python's standard library only.
"""
import argparse
import ast
import io
import os
import re
import sys
import tempfile
import tokenize

WORKLOG = re.compile(r"\bsessions? [0-9]+", re.IGNORECASE)
WORKLOG_DIRS = ("src", "docs", "bench", "tests")
WORKLOG_FILES = ("README.md",)
SKIPPED_DIRS = ("bench/models", "tests/serve/node_modules")  # generated models, npm packages (both git-ignored)
CPP_EXTENSIONS = (".cc", ".h", ".cpp", ".hpp")

BLOCK_WORDS = 150  # most words in one src comment block, one ARCHITECTURE.md paragraph or table cell
SENTENCE_WORDS = 40  # a comment sentence longer than this is flagged as a warning
RESULTS_LINES = 400  # most lines in bench/RESULTS.md


def count_words(text):
    """Words are whitespace-separated tokens holding a letter or digit (comment markers and bullets do not count)."""
    return sum(1 for token in text.split() if any(c.isalnum() for c in token))


def walk_files(root, folders, extensions=None):
    """Files under root/folder for each folder, sorted; only names ending in `extensions` when it is given."""
    for folder in folders:
        top = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith(".") and
                                 relative(root, os.path.join(dirpath, d)) not in SKIPPED_DIRS)
            for name in sorted(filenames):
                if extensions is None or name.endswith(extensions):
                    yield os.path.join(dirpath, name)


def is_text(path):
    """A file the work-log grep reads: not binary (no NUL byte in its first 8 KiB)."""
    with open(path, "rb") as f:
        return b"\0" not in f.read(8192)


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def relative(root, path):
    return os.path.relpath(path, root)


# ---- C++ comments ---------------------------------------------------------------------------------------------


def cpp_comments(text):
    """Yields (line, column, kind, body) for each comment in C++ source, kind '//' or '/*'.

    Skips string and character literals (raw strings included), so "http://x" is no comment. Line numbers count
    from 1; column is the comment's offset in its line.
    """
    i, n, line, line_start = 0, len(text), 1, 0
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            line_start = i + 1
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            yield line, i - line_start, "//", text[i + 2:end]
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end
            body = text[i + 2:end]
            yield line, i - line_start, "/*", body
            for j in range(i, end):
                if text[j] == "\n":
                    line += 1
                    line_start = j + 1
            i = end + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
                                                         or text[i - 1] in "uUL8"):
            open_paren = text.find("(", i + 2)
            delim = text[i + 2:open_paren]
            close = text.find(")" + delim + '"', open_paren)
            end = n if close < 0 or open_paren < 0 else close + len(delim) + 2
            line += text.count("\n", i, end)
            last = text.rfind("\n", i, end)
            if last >= 0:
                line_start = last + 1
            i = end
        elif c in "\"'":
            # A digit separator (1'000'000) is no character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1


def cpp_comment_blocks(text):
    """Groups the comments of a C++ file into blocks: (first line, body text).

    Consecutive lines whose // comment is the whole line, starting in the same column, form one block. A trailing //
    comment after code starts a block that comment-only lines right below it, aligned with it, continue. A /* */
    comment is a block of its own.
    """
    lines = text.split("\n")
    blocks = []
    current = None  # [first line, last line, column, [bodies]]
    for line, column, kind, body in cpp_comments(text):
        if kind == "/*":
            if current:
                blocks.append(current)
                current = None
            blocks.append([line, line, column, [body]])
            continue
        whole_line = lines[line - 1][:column].strip() == ""
        if current and whole_line and line == current[1] + 1 and column == current[2]:
            current[1] = line
            current[3].append(body)
        else:
            if current:
                blocks.append(current)
            current = [line, line, column, [body]]
    if current:
        blocks.append(current)
    return [(first, "\n".join(bodies)) for first, _, _, bodies in blocks]


# ---- Python comments and docstrings ---------------------------------------------------------------------------


def python_comment_blocks(text):
    """(first line, text) for each run of consecutive # comment lines and each docstring of a Python file."""
    blocks = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        tokens = []
    current = None
    for tok in tokens:
        if tok.type != tokenize.COMMENT or tok.string.startswith("#!"):
            continue
        line = tok.start[0]
        if current and line == current[1] + 1:
            current[1] = line
            current[2].append(tok.string[1:])
        else:
            if current:
                blocks.append(current)
            current = [line, line, [tok.string[1:]]]
    if current:
        blocks.append(current)
    result = [(first, "\n".join(bodies)) for first, _, bodies in blocks]
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return result
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                result.append((first.lineno, first.value.value))
    return sorted(result)


# ---- sentences --------------------------------------------------------------------------------------------------

ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|cf|no|approx|fig|eq|al)\.", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[^.][.!?])\s+")


def sentences(text):
    """Splits comment text into sentences: after . ! or ? followed by space (common abbreviations excepted).

    Blank comment lines, list items (lines starting with -, * or a number) and a ';' at a line's end end one too.
    """
    text = ABBREVIATIONS.sub(lambda m: m.group(0).replace(".", "\0"), text)
    pieces = []
    for paragraph in re.split(r"(?<=;)[ \t]*\n|\n\s*(?:\n|(?=[-*] )|(?=[0-9]+[.)] ))", text):
        paragraph = " ".join(paragraph.split())
        pieces.extend(s.replace("\0", ".") for s in SENTENCE_END.split(paragraph) if s.strip())
    return pieces


def long_sentences(text):
    return [s for s in sentences(text) if count_words(s) > SENTENCE_WORDS]


# ---- markdown ---------------------------------------------------------------------------------------------------


def markdown_paragraphs(text):
    """(first line, text) of each paragraph outside fenced code: headings, list items and blank lines end one."""
    paragraphs = []
    current = None
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if stripped.startswith("```") or stripped.startswith("~~~"):
            fenced = not fenced
            if current:
                paragraphs.append(current)
                current = None
            continue
        if fenced:
            continue
        starts_item = re.match(r"(?:[-*+]|[0-9]+[.)])\s", stripped) is not None
        if not stripped or stripped.startswith("#") or stripped.startswith("|") or starts_item:
            if current:
                paragraphs.append(current)
                current = None
            if stripped and not stripped.startswith("#") and not stripped.startswith("|"):
                current = [number, [stripped]]
            continue
        if current:
            current[1].append(stripped)
        else:
            current = [number, [stripped]]
    if current:
        paragraphs.append(current)
    return [(first, " ".join(lines)) for first, lines in paragraphs]


def markdown_table_cells(text):
    """(line, cell text) of each cell of each markdown table row outside fenced code."""
    cells = []
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if stripped.startswith("```") or stripped.startswith("~~~"):
            fenced = not fenced
            continue
        if fenced or not stripped.startswith("|"):
            continue
        # A pipe inside backticks or escaped (\|) separates no cells.
        row = re.sub(r"`[^`]*`", lambda m: m.group(0).replace("|", "\0"), stripped.replace("\\|", "\0"))
        for cell in row.strip("|").split("|"):
            cells.append((number, cell.replace("\0", "|")))
    return cells


DIAGRAM_CHARS = re.compile(r"-->|<--|->|<-|[─│┌┐└┘├┤┬┴┼▶▼◀▲→←↓↑]|\+--|--\+|\|\s*$|^\s*\|")
SVG_REFERENCE = re.compile(r"\.svg\b", re.IGNORECASE)


def has_picture(text):
    """True if the text references an .svg file or holds a fenced text block that draws (arrows, boxes)."""
    if SVG_REFERENCE.search(text):
        return True
    for match in re.finditer(r"^[ \t]*(```|~~~)[ \t]*([A-Za-z0-9_-]*)[^\n]*\n(.*?)^[ \t]*\1", text, re.M | re.S):
        info, body = match.group(2).lower(), match.group(3)
        if info not in ("", "text", "txt", "ascii", "diagram", "svgbob", "plain"):
            continue
        drawing_lines = sum(1 for line in body.split("\n") if DIAGRAM_CHARS.search(line))
        if drawing_lines >= 2:
            return True
    return False


# ---- the rules --------------------------------------------------------------------------------------------------


def check(root, warnings=True):
    """Returns (failures, warnings), each a list of lines 'FILE:LINE: message'."""
    failures, notes = [], []

    worklog_paths = [p for p in walk_files(root, WORKLOG_DIRS) if is_text(p)]
    worklog_paths += [os.path.join(root, f) for f in WORKLOG_FILES if os.path.isfile(os.path.join(root, f))]
    for path in worklog_paths:
        for number, line in enumerate(read_text(path).split("\n"), 1):
            for match in WORKLOG.finditer(line):
                failures.append(f"{relative(root, path)}:{number}: work-log reference '{match.group(0)}' "
                                "(history lives in git)")

    for path in walk_files(root, ("src",), CPP_EXTENSIONS):
        for first, body in cpp_comment_blocks(read_text(path)):
            words = count_words(body)
            if words > BLOCK_WORDS:
                failures.append(f"{relative(root, path)}:{first}: {words} words in one comment block "
                                f"(at most {BLOCK_WORDS})")

    architecture = os.path.join(root, "docs", "ARCHITECTURE.md")
    if os.path.isfile(architecture):
        text = read_text(architecture)
        name = relative(root, architecture)
        for first, paragraph in markdown_paragraphs(text):
            words = count_words(paragraph)
            if words > BLOCK_WORDS:
                failures.append(f"{name}:{first}: {words} words in one paragraph (at most {BLOCK_WORDS})")
        for number, cell in markdown_table_cells(text):
            words = count_words(cell)
            if words > BLOCK_WORDS:
                failures.append(f"{name}:{number}: {words} words in one table cell (at most {BLOCK_WORDS})")
        if not has_picture(text):
            failures.append(f"{name}:1: no picture (a fenced text diagram or an .svg reference)")
    else:
        failures.append("docs/ARCHITECTURE.md:1: missing")

    results = os.path.join(root, "bench", "RESULTS.md")
    if os.path.isfile(results):
        lines = read_text(results).count("\n")
        if lines > RESULTS_LINES:
            failures.append(f"{relative(root, results)}:{RESULTS_LINES + 1}: {lines} lines (at most {RESULTS_LINES})")

    if warnings:
        for path in walk_files(root, ("src", "bench", "tests"), CPP_EXTENSIONS + (".py",)):
            text = read_text(path)
            blocks = python_comment_blocks(text) if path.endswith(".py") else cpp_comment_blocks(text)
            for first, body in blocks:
                for sentence in long_sentences(body):
                    notes.append(f"{relative(root, path)}:{first}: warning: {count_words(sentence)}-word sentence "
                                 f"'{sentence[:60]}...'")
    return failures, notes


# ---- self-test ----------------------------------------------------------------------------------------------------


def self_test():
    """Runs the rules over a tree of known faults and a clean tree; returns a list of rules that misbehaved."""
    long_text = " ".join(f"word{i}" for i in range(BLOCK_WORDS + 1))
    long_sentence = " ".join(f"w{i}" for i in range(SENTENCE_WORDS + 5)) + "."
    faulty = {
        "src/a.cc": ("int x = 1;  // see " + "session" + " 12\nint z = 0;\n"
                     + "\n".join("// " + " ".join(f"w{i}" for i in range(j * 10, j * 10 + 10)) for j in range(16))
                     + '\nconst char* s = "// not a comment";\n/* ' + long_text + " */\n"
                     + "int y = 2;  // " + long_sentence + "\n"),
        "docs/ARCHITECTURE.md": "# A\n\n" + long_text + "\n\n| a | b |\n|---|---|\n| " + long_text + " | x |\n",
        "bench/RESULTS.md": "x\n" * (RESULTS_LINES + 1),
        "README.md": "Measured in " + "SESSION" + " 3.\n",
    }
    clean = {
        "src/a.cc": ('int x = 1;  // short\n// two lines\n// of comment\nconst char* s = "http://a/*b*/";\n'
                     "/* brief */\nchar c = '\"';  // still short\nint big = 1'000;\n"),
        "docs/ARCHITECTURE.md": ("# A\n\nShort.\n\n```text\nmodel --> graph --> kernels\n   |         |\n"
                                 "   +-------->+\n```\n\n| a | b |\n|---|---|\n| c `x|y` | d |\n"),
        "bench/RESULTS.md": "x\n" * RESULTS_LINES,
        "README.md": "Sessions of work are in git.\n",
    }
    expected = {
        "work-log in src": lambda f: any(x.startswith("src/a.cc:1: work-log") for x in f),
        "work-log in README": lambda f: any(x.startswith("README.md:1: work-log") for x in f),
        "// block over 150 words": lambda f: any(x.startswith("src/a.cc:3: 160 words") for x in f),
        "/* */ block over 150 words": lambda f: any(x.startswith("src/a.cc:20: 151 words") for x in f),
        "paragraph over 150 words": lambda f: any(x.startswith("docs/ARCHITECTURE.md:3: 151 words") for x in f),
        "table cell over 150 words": lambda f: any("ARCHITECTURE.md:7: 151 words in one table cell" in x for x in f),
        "no picture": lambda f: any("no picture" in x for x in f),
        "RESULTS.md length": lambda f: any(x.startswith("bench/RESULTS.md:") for x in f),
    }
    wrong = []
    for tree, want_faults in ((faulty, True), (clean, False)):
        with tempfile.TemporaryDirectory() as root:
            for name, content in tree.items():
                path = os.path.join(root, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(content)
            failures, notes = check(root)
            if want_faults:
                wrong += [f"missed: {rule}" for rule, found in expected.items() if not found(failures)]
                if not any(n.startswith("src/a.cc:21: warning: 45-word") for n in notes):
                    wrong.append("missed: long sentence warning")
                if len(failures) != len(expected):
                    wrong.append(f"{len(failures)} failures on the faulty tree, expected {len(expected)}: {failures}")
            else:
                wrong += [f"false finding on a clean tree: {x}" for x in failures + notes]
    return wrong


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        help="the repository to check (default: the one holding this script)")
    parser.add_argument("--no-warnings", action="store_true", help="report failures only")
    args = parser.parse_args()

    wrong = self_test()
    if wrong:
        for line in wrong:
            print(f"check_prose.py: self-test: {line}")
        return 2
    if not os.path.isdir(os.path.join(args.root, "src")):
        print(f"check_prose.py: error: {args.root}: no src/ folder (is --root the repository?)")
        return 2

    failures, notes = check(args.root, warnings=not args.no_warnings)
    for line in notes:
        print(line)
    for line in failures:
        print(line)
    print(f"check_prose.py: {len(failures)} failures, {len(notes)} warnings")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
