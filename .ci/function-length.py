#!/usr/bin/env python3
"""Fails when a function in the given directories is longer than the limit (the rule for all
of src/: a function a reader takes in at once, ARCHITECTURE.md). Lines are counted from `fn` to
the closing brace; comments, strings and char literals are blanked first, so their braces do
not count. Nested functions and closures count inside the function that holds them, and alone.

Usage: python3 .ci/function-length.py [--limit N] [--self-test] DIR...   (from the repository root)
"""
import argparse, os, re, sys

TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?\'(?:\\.|[^\\\'])\'', re.S)


def blank(text):
    """`text` with comments, strings and char literals replaced by spaces (lines kept)."""
    return TOKEN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def body_start(code, at):
    """Where the body of the function whose signature starts at `at` opens, or -1 for a
    declaration without a body (a trait's): its `;` comes first. Only a `{` or `;` outside
    parentheses and brackets counts, since a signature's types may hold one (`[T; 2]`)."""
    depth = 0
    for i in range(at, len(code)):
        c = code[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and c in "{;":
            return i if c == "{" else -1
    return -1


def functions(text):
    """(name, first line, number of lines) of each function with a body."""
    code = blank(text)
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        brace = body_start(code, m.end())
        if brace < 0:
            continue
        depth, i = 0, brace
        while i < len(code):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            if depth == 0:
                break
            i += 1
        first, last = code.count("\n", 0, m.start()) + 1, code.count("\n", 0, i) + 1
        yield m.group(1), first, last - first + 1


def self_test():
    """The rule on the signatures that fooled it: an array type's `;` (before the body, it was
    taken for a declaration's end, so `backend/cpu/optim.rs`'s 126-line `step` passed), a
    trait's declaration, braces in strings and comments."""
    body = "\n".join(["    x += 1;"] * 5)
    cases = [
        (f"fn step(slots: [Option<&mut [f32]>; 2], n: usize) {{\n{body}\n}}\n", [("step", 1, 7)]),
        ("trait T {\n    fn declared(&self) -> [u8; 4];\n}\n", []),
        (f"fn quoted() {{\n    let s = \"}}{{\"; // }}\n{body}\n}}\n", [("quoted", 1, 8)]),
        (f"fn outer() {{\n    fn inner() {{\n{body}\n    }}\n}}\n", [("outer", 1, 9), ("inner", 2, 7)]),
    ]
    for text, want in cases:
        got = list(functions(text))
        assert got == want, f"{text!r}: found {got}, want {want}"
    print(f"function length: self-test passed ({len(cases)} cases)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--self-test", action="store_true", help="check the rule on known cases first")
    ap.add_argument("dirs", nargs="*")
    args = ap.parse_args()
    if args.self_test:
        self_test()
    if not args.dirs:
        return
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
