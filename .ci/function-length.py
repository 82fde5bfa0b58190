#!/usr/bin/env python3
"""Fails when a function in the given directories is longer than the limit (the rule for all
of src/: a function a reader takes in at once, ARCHITECTURE.md). Lines are counted from `fn` to
the closing brace; comments, strings and char literals are blanked first, so their braces do
not count. Nested functions and closures count inside the function that holds them, and alone.

Usage: python3 .ci/function-length.py [--limit N] DIR...      (from the repository root)
"""
import argparse, os, re, sys

TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?\'(?:\\.|[^\\\'])\'', re.S)


def blank(text):
    """`text` with comments, strings and char literals replaced by spaces (lines kept)."""
    return TOKEN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def functions(text):
    """(name, first line, number of lines) of each function with a body."""
    code = blank(text)
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace < 0 or 0 <= semi < brace:
            continue  # a declaration without a body (a trait's)
        depth, i = 0, brace
        while i < len(code):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            if depth == 0:
                break
            i += 1
        first, last = code.count("\n", 0, m.start()) + 1, code.count("\n", 0, i) + 1
        yield m.group(1), first, last - first + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    long = []
    for top in args.dirs:
        for root, _, names in os.walk(top):
            for name in sorted(n for n in names if n.endswith(".rs")):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    long += [(n, path, line, size) for n, line, size in functions(f.read())
                             if size > args.limit]
    for fn, path, line, size in sorted(long, key=lambda x: -x[3]):
        print(f"{path}:{line}: fn {fn} is {size} lines (at most {args.limit}): split it into "
              "named steps", file=sys.stderr)
    if long:
        sys.exit(1)
    print(f"function length: every function in {', '.join(args.dirs)} is at most {args.limit} lines")


if __name__ == "__main__":
    main()
