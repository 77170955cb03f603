#!/usr/bin/env python3
"""Lists C++/CUDA functions whose bodies are longer than a limit (default 80 lines).

    scripts/function_lengths.py [--max 80] [--exclude kernels/] PATH...

A function body is a brace block that a parameter list ends, opened outside any other function
body (lambdas and local classes count towards the function around them). Bodies of namespaces,
classes, enums and initialisers are not functions; control-flow blocks are part of their function.
Lines are counted between the braces, as clang-tidy's readability-function-size LineThreshold does.
Exit status 1 when a function is too long, so a test can run it (tests/cli: function_length).
"""
import argparse
import pathlib
import re
import sys

SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h", ".cc"}
NOT_FUNCTION = re.compile(r"\b(namespace|class|struct|enum|union)\b|=\s*$|^\s*(extern\s+\"C\")")
TEMPLATE = re.compile(r"\btemplate\s*<[^{;]*?>(?=\s*(?:requires\b[^{;]*)?(?:[\w:~\[]|$))")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try)\b")


def strip(text: str) -> str:
    """Blanks comments, string and character literals, keeping newlines (line numbers stay right)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text: str):
    """Yields (first body line, body line count, header) for each function body."""
    code = strip(text)
    stack = []  # per open brace: True when it opened a function body
    header_start = 0
    line = 1
    depth_in_function = 0
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            header = TEMPLATE.sub(" ", code[header_start:i])
            is_function = (depth_in_function == 0 and ")" in header and not NOT_FUNCTION.search(header.strip())
                           and not CONTROL.match(header))
            stack.append((is_function, line, header.strip()))
            if is_function or depth_in_function:
                depth_in_function += 1
            header_start = i + 1
        elif c == "}":
            if stack:
                is_function, open_line, header = stack.pop()
                if depth_in_function:
                    depth_in_function -= 1
                if is_function:
                    yield open_line, line - open_line - 1, " ".join(header.split())[:100]
            header_start = i + 1
        elif c == ";":
            header_start = i + 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--max", type=int, default=80)
    ap.add_argument("--exclude", action="append", default=[], help="path prefix to skip (repeatable)")
    args = ap.parse_args()
    too_long = 0
    for root in args.paths:
        root_path = pathlib.Path(root)
        files = [root_path] if root_path.is_file() else sorted(p for p in root_path.rglob("*") if p.suffix in SUFFIXES)
        for f in files:
            if any(str(f).startswith(e) or f"/{e}" in f"/{f}" for e in args.exclude):
                continue
            for start, length, header in functions(f.read_text(errors="replace")):
                if length > args.max:
                    too_long += 1
                    print(f"{f}:{start}: {length} lines (limit {args.max}): {header}")
    return 1 if too_long else 0


if __name__ == "__main__":
    sys.exit(main())
