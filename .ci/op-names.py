#!/usr/bin/env python3
"""Checks that every op is named in one place: `engine/src/base/op.rs`.

Autograd's records, profiles, the cost model's rows and errors name an op by its `Op` value
(`Op::Matmul`); `Op::name` gives its text. This fails on a string literal, anywhere in the
engine's and the front end's code outside `base/op.rs`, that is exactly an op's name (`"matmul"`):
write the `Op` instead (`Op::Matmul`, or `op.name()` where text is needed).

The names are read from op.rs's `named!` tables (`Variant => "name",`). Skipped: test modules
(everything after a file's first `#[cfg(test)]`; a test may compare what a user reads), comments,
an HTML element's or attribute's name (`el("div")`, `.attr("fill", …)`), and the literals of
EXEMPT: words that are something else there, each with why.

Usage: python3 .ci/op-names.py [--count]   (from the repository root; --count prints the
literals per name and per file instead of failing)
"""
import pathlib
import re
import sys

OPS = pathlib.Path("engine/src/base/op.rs")
ROOTS = [pathlib.Path("engine/src"), pathlib.Path("src")]
# (file, literal): why that literal there is not an op's name.
EXEMPT = {
    ("engine/src/cell/probe/wire.rs", "to"): "a field of the wire's transfer line",
    ("engine/src/display/lanes.rs", "copy"): "the word in a span's tooltip, beside `op`",
}
# A literal right after `el(` or `.attr(` names an HTML element or attribute (`el("div")`,
# `.attr("fill", …)`), not an op.
HTML = re.compile(r"(\bel|\.attr)\($")
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
COMMENT = re.compile(r"//.*$", re.MULTILINE)


def op_names():
    names = set(re.findall(r'^\s*\w+ => "([^"]+)",', OPS.read_text(), re.MULTILINE))
    if len(names) < 50:
        sys.exit(f"op-names: read only {len(names)} names from {OPS}: has its table changed shape?")
    return names


def code_of(path):
    text = path.read_text()
    text = text.split("#[cfg(test)]")[0]
    # Comments go, but not a `//` inside a string literal (a URL).
    lines = []
    for line in text.splitlines():
        strings = [m.span() for m in LITERAL.finditer(line)]
        at = line.find("//")
        while at >= 0 and any(a < at < b for a, b in strings):
            at = line.find("//", at + 2)
        lines.append(line if at < 0 else line[:at])
    return lines


def main():
    names = op_names()
    found = []
    for root in ROOTS:
        for path in sorted(root.rglob("*.rs")):
            if path == OPS:
                continue
            for number, line in enumerate(code_of(path), 1):
                for m in LITERAL.finditer(line):
                    if HTML.search(line[: m.start()]):
                        continue
                    if m.group(1) in names and (path.as_posix(), m.group(1)) not in EXEMPT:
                        found.append((path.as_posix(), number, m.group(1)))
    if "--count" in sys.argv:
        files = {f for f, _, _ in found}
        kinds = {n for _, _, n in found}
        print(f"{len(found)} literals of {len(kinds)} op names in {len(files)} files")
        return
    for path, number, name in found:
        print(f"{path}:{number}: the op name \"{name}\" as a string: write its `Op` (base/op.rs)")
    if found:
        sys.exit(1)
    print(f"op-names: {len(names)} op names, each written only in {OPS}")


if __name__ == "__main__":
    main()
