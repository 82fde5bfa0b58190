#!/usr/bin/env python3
"""The docs say what the code does. Fails, naming the line and the fix, when:

- a magic in `src/magics.rs` (its usage line) or a word that leaves the session is
  not in README.md, or a README table row starts with a `:word` that is neither;
- a `PLACELAB_*` variable the code, tests or tools read is not in one of README.md's tables,
  or is in more than one row (INTERNAL, the few placelab sets for its own child processes, need
  only be named); or one the program reads is not in `placelab --help`;
- a README command (`placelab …`, `cargo run --release -- …` with `--help` appended and run;
  `cargo test --test X WORD`; `cargo bench --bench X`; a script under tests/, benches/, .ci/)
  names a subcommand, flag or value the binary's --help refuses, a test, bench or script that
  does not exist, a filter WORD that is in no test's name (a `#[test]` fn of tests/X.rs or, as
  `module::fn`, tests/X/*.rs; a pytest `test_…`/`Test…` in tests/X/*.py), a `--flag` that is not
  in the script's text, or is a `cargo install` that ignores Cargo.lock (no `--locked`);
- a figure for a measured quantity (a time or a size in README's prose) is not linked to the
  section of benches/RESULTS.md that holds it, a number with a unit in the link is not in the
  section with that unit (`676 MiB`, `**676 MiB**`, `131 / 678 MiB`, `11.7–14.3 MiB`), a number
  without one is not in it at all, or the same figure is given twice;
- an error quoted in a ``` block under "Troubleshooting" is not what the code prints;
- benches/RESULTS.md cites a path outside the repository, or README.md says TODO;
- a picture the README shows is missing, or over PICTURE_MAX_BYTES (it is committed).

What it does NOT check:

- flags together: `--help` is appended to each placelab command, so clap checks the names of
  subcommands and flags and the values it parses, but not flags that conflict or are required;
- the tables' descriptions and defaults: a variable's row is required, not compared with the code;
- the figures in NOT_MEASURED (settings and constants): exempt everywhere, linked or not;
- an error quoted anywhere but a ``` block under "Troubleshooting";
- a bench's filter words, beyond being in its source (benches parse their own arguments).

    python3 .ci/docs-check.py [--bin target/debug/placelab] [--self-test]
"""

import argparse
import bisect
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RESULTS = ROOT / "benches" / "RESULTS.md"

# `PLACELAB_*` strings that are markers in the cell process's output, not variables.
MARKERS = {
    "PLACELAB_CARD_BEGIN", "PLACELAB_CARD_PLAIN", "PLACELAB_CARD_HTML", "PLACELAB_CARD_END",
    "PLACELAB_CELL_FAILED", "PLACELAB_CELL_FAILED_END", "PLACELAB_CLEAR_OUTPUT", "PLACELAB_SYNC",
    "PLACELAB_FOLD_OUTPUT",
}
# Variables placelab sets for its own child processes: in README's prose, not in `--help`.
# (What the tests set for theirs, PLACELAB_OWN_PROCESS among them, has a row in a table.)
INTERNAL = {"PLACELAB_PROBE", "PLACELAB_CORE_FIXED", "PLACELAB_CUDA_UNUSABLE"}

# Times and sizes in README's prose that are not measurements, with why.
NOT_MEASURED = {
    "2 s": "the default interrupt grace (src/interrupter.rs), and how long a Tab waits (src/repl.rs)",
    "30 s": "how long a second Tab on the same line waits for its completions (src/repl.rs)",
    "16 MiB": "the size of second_start's small tmpfs (tests/second_start.rs)",
    "8 MiB": "the long session test's bound on the session's growth (tests/repl.rs)",
    "192 KiB": "the long session test's bound on the cell process's growth a cell (tests/repl.rs)",
    "512 MiB": "the CUDA context a simulated GPU's capacity leaves out (cuda.rs CONTEXT_RESERVE)",
    "4 KiB": "the smallest size notebook 03 copies",
    "256 MiB": "the largest size notebook 03 copies",
    "30 minutes": "the classroom's idle-kernel timeout (jupyterhub_config.py)",
    "two minutes": "how long rust-analyzer stays loaded (frontend/evaluator.rs ANALYZER_QUIET)",
    "32 MiB": "PyTorch's cuBLAS workspace on Hopper, by PyTorch's rule (gpu/runtime.rs)",
    "512 MB": "values.yaml's memory guarantee, a setting",
    "2 GB": "values.yaml's memory limit, a setting",
    "10 µs": "the cost model's assumed copy latency (cost/model.rs)",
    "4 µs": "the cost model's assumed launch latency (cost/model.rs)",
    "40 GB": "part of a GPU's name (A100 40GB)",
    "900 s": "the browser test's default wait for its cell, a setting",
}

NUMBER = r"\d[\d,]*(?:\.\d+)?"
UNIT = r"(?:µs|us|ms|s|min|minutes|seconds|hours|h|B|KiB|MiB|GiB|TiB|kB|KB|MB|GB|TB)"
FIGURE = re.compile(rf"(?<![\w.])({NUMBER}(?:\s*[–-]\s*{NUMBER})?)\s?({UNIT})(?![\w/])")
# Amounts in words ("about two minutes", "a few seconds") are figures too.
WORDS = re.compile(r"\b((?:one|two|three|four|five|six|seven|eight|nine|ten|a few|several)) "
                   r"(seconds|minutes|hours)\b", re.I)

failures = []


def fail(where, what, fix):
    failures.append(f"{where}: {what}\n    fix: {fix}")


def read(p):
    return p.read_text(encoding="utf-8")


def source_files(*dirs, exts=(".rs", ".py", ".sh", ".mjs", ".toml", ".yaml")):
    """The files under `dirs` with those suffixes, and .ci's scripts; never this file."""
    for d in dirs:
        p = ROOT / d
        for f in [p] if p.is_file() else sorted(p.rglob("*")):
            if not f.is_file() or f == Path(__file__).resolve():
                continue
            if "target" in f.parts or "node_modules" in f.parts:
                continue
            if f.suffix in exts or (f.suffix == "" and f.parent.name == ".ci"):
                yield f


def fenced_blocks(text, commands_only=False):
    """(start line, lines) of each ``` block; with `commands_only`, not those marked ```text
    (what a command prints), ```rust or ```toml."""
    blocks, inside, start, lines, info = [], False, 0, [], ""
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            if inside and not (commands_only and info in ("text", "rust", "toml")):
                blocks.append((start, lines))
            inside, start, lines = not inside, n + 1, []
            info = line.strip()[3:].strip()
        elif inside:
            lines.append(line)
    return blocks


def prose_lines(text):
    """(line number, text) outside ``` blocks."""
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            yield n, line


def sections(text):
    """heading slug → that section's text, as GitHub makes anchors."""
    out, slug, body = {}, None, []
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*)", line)
        if m:
            if slug is not None:
                out[slug] = "\n".join(body)
            slug, body = github_slug(m.group(1)), []
        else:
            body.append(line)
    if slug is not None:
        out[slug] = "\n".join(body)
    return out


def github_slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


# ---- magics -------------------------------------------------------------------------------

def exit_words(magics_rs):
    """The words `magics::is_exit` accepts, `()` left off."""
    m = re.search(r"fn is_exit.*?matches!\((.*?)\)\s*\}", magics_rs, re.S)
    return {w.removesuffix("()") for w in re.findall(r'"([^"]+)"', m.group(1))} if m else set()


def check_magics(readme):
    """Catches a magic or an exit word the README leaves out, and a table row for a `:word`
    that is no command (a magic renamed or removed in the code, or a typo in the README)."""
    text = read(ROOT / "src/magics.rs")
    flat = readme.replace("\\|", "|")
    for usage in re.findall(r'usage:\s*"([^"]+)"', text):
        if usage not in flat:
            fail("README.md", f"the magic `{usage}` (src/magics.rs) is not in the README",
                 "add it, exactly as its usage line reads, to the commands table under 'The REPL'")
    words = exit_words(text)
    if not words:
        fail("src/magics.rs", "cannot read the words `is_exit` accepts", "update .ci/docs-check.py")
    for w in sorted(words):
        if f"`{w}`" not in readme:
            fail("README.md", f"`{w}` leaves the session (magics::is_exit) but the README does not say so",
                 "list it beside Ctrl-D under 'The REPL'")
    commands = set(re.findall(r'name:\s*"(:[^"]+)"', text)) | words
    for n, line in enumerate(readme.splitlines(), 1):
        m = re.match(r"\|\s*`(:\w+)", line)
        if m and m.group(1) not in commands:
            fail(f"README.md:{n}", f"the README lists `{m.group(1)}`, which is no command",
                 "name a magic of src/magics.rs (its `name:`) or an exit word, or remove the row")


# ---- environment variables ----------------------------------------------------------------

def variables_in(*dirs, pattern=r"PLACELAB_[A-Z0-9_]*[A-Z0-9]"):
    found = {}
    for f in source_files(*dirs):
        for v in re.findall(pattern, read(f)):
            found.setdefault(v, f.relative_to(ROOT))
    return {v: f for v, f in found.items() if v not in MARKERS}


def check_variables(readme, help_text):
    """Catches a `PLACELAB_*` variable with no row (or two) in README's tables, one the program
    reads that `--help` leaves out, and one `--help` names that nothing reads."""
    rows = [(n, l) for n, l in enumerate(readme.splitlines(), 1) if l.startswith("|")]
    everywhere = variables_in("src", "engine", "tests", "benches", "kernelspec", ".ci")
    for var, first in sorted(everywhere.items()):
        if var in INTERNAL:
            if var not in readme:
                fail("README.md", f"{var} ({first}) is not mentioned",
                     "name it with the variables placelab sets for its own processes, under 'Settings'")
            continue
        in_rows = [n for n, l in rows if re.search(rf"`{var}`", l.split("|")[1] if l.count("|") > 2 else "")]
        if not in_rows:
            fail("README.md", f"{var} is read by {first} but is in no table of the README",
                 "add a row for it under 'Settings' saying what it does and its default")
        elif len(in_rows) > 1:
            fail("README.md", f"{var} has rows at lines {in_rows}", "keep one row per variable")
    if help_text is None:
        return
    # What the program reads: a name that is a whole string literal (`var("PLACELAB_X")`).
    for var, first in sorted(variables_in("src", "engine/src", pattern=r'"(PLACELAB_[A-Z0-9_]*[A-Z0-9])"').items()):
        if var not in INTERNAL and var not in help_text:
            fail("placelab --help", f"{var} (read by {first}) is not in the help's footer",
                 "add it to `after_help` in src/main.rs")
    for var in sorted(set(re.findall(r"PLACELAB_[A-Z0-9_]*[A-Z0-9]", help_text))):
        if var not in everywhere:
            fail("placelab --help", f"{var} is in the help but no code reads it", "remove it from src/main.rs")


# ---- command lines ------------------------------------------------------------------------

PLACELAB = re.compile(r"^(?:placelab|\./target/(?:debug|release)/placelab|target/(?:debug|release)/placelab|cargo run --release --)\s+(.*)$")


def code_spans(readme):
    """(line, text) of each `code` span outside ``` blocks, one that goes on to the next line
    of its paragraph included (its line break read as a space)."""
    paragraph = []
    for n, line in [*prose_lines(readme), (0, "")]:
        if line.strip():
            paragraph.append((n, line))
            continue
        text = " ".join(l for _, l in paragraph)
        ends = list(itertools.accumulate(len(l) + 1 for _, l in paragraph))
        for m in re.finditer(r"`([^`]+)`", text):
            yield paragraph[bisect.bisect_right(ends, m.start())][0], " ".join(m.group(1).split())
        paragraph = []


def command_lines(readme):
    """(line, command) for each command in a shell block or an inline code span."""
    for start, lines in fenced_blocks(readme, commands_only=True):
        for i, line in enumerate(lines):
            if line.startswith((">>", "──", "freed", "//")):
                continue
            yield start + i, line.split("  #")[0].strip()
    for n, span in code_spans(readme):
        if re.match(r"(?:[A-Z_]+=\S+\s+)*(placelab |cargo (test|bench|run|install) |tests/|benches/|\.ci/)", span):
            yield n, span


def check_commands(readme, binary):
    """Catches a README command that would not run as written (see the module's docstring)."""
    for n, cmd in command_lines(readme):
        where = f"README.md:{n}"
        for part in re.split(r"\s*&&\s*", cmd):
            part = re.sub(r"^(?:[A-Z_]+=\S+\s+)+", "", part)  # VAR=value before a command
            m = PLACELAB.match(part)
            if m and binary:
                args = m.group(1).split()
                r = subprocess.run([str(binary), *args, "--help"], capture_output=True, text=True)
                if r.returncode != 0:
                    fail(where, f"`{part}` is refused: {(r.stderr or r.stdout).strip().splitlines()[0:2]}",
                         "write the command as `placelab --help` says")
                continue
            if part.startswith("cargo install") and "--locked" not in part.split():
                # Without it cargo resolves the newest versions, and evcxr's rust-analyzer
                # crates then fail to compile: Cargo.lock is what builds.
                fail(where, f"`{part}` ignores Cargo.lock", "write `cargo install --locked --path .`")
                continue
            m = re.match(r"cargo (test|bench)\b(.*)", part)
            if m:
                check_cargo_target(where, m.group(1), m.group(2).split())
                continue
            m = re.match(r"(?:node\s+)?((?:engine/tests|tests|benches|\.ci)/[\w./*-]+)(.*)", part)
            if m:
                check_script(where, m.group(1), m.group(2))


def check_script(where, script, args):
    """Catches a script path that does not exist or cannot run, and a `--flag` passed to it
    that its text (usage line, argument parsing) never mentions."""
    path = ROOT / script
    if "*" in script:  # a pattern (`tests/cuda_gpu*.rs`): something must match it
        if not any(ROOT.glob(script)):
            fail(where, f"`{script}` matches no file", "fix the pattern")
        return
    if not path.exists():
        fail(where, f"`{script}` does not exist", "fix the path")
        return
    if path.suffix in (".sh", "") and not os.access(path, os.X_OK):
        fail(where, f"`{script}` is not executable", f"chmod +x {script}")
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    for flag in re.findall(r"(?<!\S)(--\w[\w-]*)", args):
        if flag not in text:
            fail(where, f"`{script} {flag}`: the script takes no {flag} (it is nowhere in its text)",
                 f"pass a flag that {script}'s usage lists, or add {flag} to the script")


# A `#[test]` fn, with the attributes and doc comments between them.
RUST_TEST = re.compile(r"#\[test\]\s*(?:(?:#\[|///)[^\n]*\s*)*(?:pub\s+)?(?:async\s+)?fn\s+(\w+)")
# A pytest test: `def test_…` or `class Test…`.
PY_TEST = re.compile(r"^\s*(?:def|class)\s+(test_\w+|Test\w+)", re.M)


def test_folder(name):
    """Where tests/NAME.rs is: the front end's tests/, or the engine's engine/tests/."""
    return ROOT / "tests" if (ROOT / "tests" / f"{name}.rs").exists() else ROOT / "engine/tests"


def test_names(name):
    """The names a filter of `cargo test --test NAME` is matched against: the `#[test]` fns of
    tests/NAME.rs, those of tests/NAME/M.rs as `M::fn`, and the pytest tests of tests/NAME/*.py
    (tests that run pytest files, named as `-k` would)."""
    tests = test_folder(name)
    folder = tests / name
    names = RUST_TEST.findall(read(tests / f"{name}.rs"))
    for f in sorted(folder.glob("*.rs")):
        names += [f"{f.stem}::{fn}" for fn in RUST_TEST.findall(read(f))]
    for f in sorted(folder.glob("*.py")):
        names += PY_TEST.findall(read(f))
    return names


def check_cargo_target(where, kind, args):
    """Catches `cargo test --test X` / `cargo bench --bench X` naming no file, and a filter word
    after it that picks nothing, so the command would run zero tests: for a test, the word is in
    no test's name (test_names); for a bench, which parses its own arguments, not in its source."""
    flag = f"--{kind}"
    if flag not in args[:-1]:
        return
    i = args.index(flag)
    name = args[i + 1]
    folder = str(test_folder(name).relative_to(ROOT)) if kind == "test" else "benches"
    if not (ROOT / folder / f"{name}.rs").exists():
        fail(where, f"`cargo {kind} {flag} {name}`: there is no {folder}/{name}.rs", "fix the name")
        return
    words = [a for a in args[i + 2:] if a != "--" and not a.startswith("-")]
    if kind == "test":
        names, what = test_names(name), "no test's name"
        fix = f"name a test that exists: part of a `#[test]` fn's name, or of a pytest test's in {folder}/{name}/*.py"
    else:
        names, what = [read(ROOT / folder / f"{name}.rs")], "nothing"
        fix = f"pass what benches/{name}.rs's argument parsing takes"
    for word in words:
        if not any(word in n for n in names):
            fail(where, f"`cargo {kind} {flag} {name} {word}` runs nothing: {what} in {folder}/{name} "
                 f"has {word!r} in it", fix)


# ---- measured figures ---------------------------------------------------------------------

LINK = re.compile(r"\[([^\]]+)\]\(benches/RESULTS\.md(#[\w-]+)?\)")
# Numbers with a unit: `676 MiB`, `**676** MiB`, and each of a pair or range that ends in one
# (`131 / 678 MiB`, `11.7–14.3 MiB`).
MEASURE_UNIT = r"(?:µs|ms|min|MiB|GiB|KiB|MB|GB|kB|B|s|%)"
MEASURES = re.compile(rf"(?<![\w.,])({NUMBER}(?:\s*[/–-]\s*{NUMBER})*)"
                      rf"(?:\*\*)?\s?(?:\*\*)?({MEASURE_UNIT})(?!\w)")


def with_units(text):
    """{(number, unit)} for each number `text` gives with a unit (MEASURES)."""
    return {(n, m.group(2)) for m in MEASURES.finditer(text) for n in re.findall(NUMBER, m.group(1))}


def check_figure_in_section(where, text, anchor, body):
    """Catches a linked figure its section does not hold: a number with a unit in the link must
    be in the section with that same unit (so `676 GB` for 676 MiB fails); a number without its
    own unit (`0.354` of `0.354 → 0.395 ms`) must be in the section at all."""
    measured = with_units(body)
    given = with_units(text)
    for number, unit in sorted(given - measured):
        fail(where, f"{number} {unit} (in [{text}]) is not in RESULTS.md's '{anchor}' with that unit",
             "give the figure and its unit as that section measured it, or record the new measurement there")
    for number in set(re.findall(NUMBER, text)) - {n for n, _ in given}:
        if not re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", body):
            fail(where, f"{number} (in [{text}]) is not in RESULTS.md's '{anchor}'",
                 "give the figure as that section measured it, or record the new measurement there")


def check_figures(readme, results):
    """Catches a measured figure with no source, a link to no section, a linked figure its
    section does not hold (check_figure_in_section), a figure given twice, and a TODO."""
    anchors = sections(results)
    seen = {}
    for n, line in prose_lines(readme):
        for text, anchor in LINK.findall(line):
            if not FIGURE.search(text):
                continue
            where = f"README.md:{n}"
            if not anchor or anchor[1:] not in anchors:
                fail(where, f"[{text}] links to benches/RESULTS.md{anchor}, which has no such section",
                     "link to the heading of the section that holds the measurement")
                continue
            check_figure_in_section(where, text, anchor[1:], anchors[anchor[1:]])
            key = text.strip()
            if key in seen:
                fail(where, f"the figure {key} is given again (first at line {seen[key]})",
                     "give a measured figure once and refer to it elsewhere")
            seen.setdefault(key, n)
        rest = LINK.sub("", re.sub(r"`[^`]*`", "", line))
        for m in [*FIGURE.finditer(rest), *WORDS.finditer(rest)]:
            fig = f"{m.group(1)} {m.group(2)}"
            if fig not in NOT_MEASURED:
                fail(f"README.md:{n}", f"'{fig}' reads as a measured figure but has no source",
                     "link it to its section of benches/RESULTS.md ([figure](benches/RESULTS.md#section)), "
                     "or, if it is a setting or a constant, add it to NOT_MEASURED in .ci/docs-check.py")
    if "../" in results:
        for n, line in enumerate(results.splitlines(), 1):
            if "../" in line:
                fail(f"benches/RESULTS.md:{n}", "cites a path outside the repository",
                     "cite the public source itself")
    for n, line in enumerate(readme.splitlines(), 1):
        if "TODO" in line:
            fail(f"README.md:{n}", "says TODO", "write what is true")


# ---- quoted errors ------------------------------------------------------------------------

def rust_strings():
    """Every .rs file of both crates, with string continuations (`\\` + newline + indent) joined."""
    return "".join(re.sub(r"\\\n\s*", "", read(f))
                   for d in ("src", "engine/src") for f in source_files(d, exts=(".rs",)))


# The README's pictures are committed with it: small enough for a repository and a page.
PICTURE_MAX_BYTES = 240_000  # tests/jupyter/browser.rs and tests/browser/lab.mjs say the same


def check_pictures(readme):
    """Each `![…](path)` in the README exists and is at most PICTURE_MAX_BYTES."""
    for n, line in prose_lines(readme):
        for path in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", line):
            if re.match(r"https?://", path):
                continue
            file = ROOT / path
            if not file.is_file():
                fail(f"README.md:{n}", f"the picture {path} does not exist",
                     "take it with the browser test (tests/browser/README.md) or fix the path")
            elif file.stat().st_size > PICTURE_MAX_BYTES:
                fail(f"README.md:{n}", f"the picture {path} is {file.stat().st_size} bytes",
                     f"keep it under {PICTURE_MAX_BYTES} bytes (fewer colours or pixels)")


def check_quoted_errors(readme, binary):
    """Catches an error quoted in a ``` block under "Troubleshooting" that nothing in src/
    prints (or, for `placelab devices`, that the binary does not print)."""
    section = sections(readme).get("troubleshooting", "")
    code = rust_strings()
    devices = None
    if binary:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PLACELAB_")}
        devices = subprocess.run([str(binary), "devices"], capture_output=True, text=True, env=env).stdout
    for _, lines in fenced_blocks(section):
        for line in filter(None, (l.strip() for l in lines)):
            if line.startswith("placelab ") and "devices:" in line:
                if devices is None or "no CUDA:" not in devices:
                    continue  # a machine with a GPU prints its devices instead
                norm = lambda s: re.sub(r"placelab [\d.]+|cpu \(\d+ threads\)", "", s).strip()
                if norm(line) != norm(devices.strip().splitlines()[0]):
                    fail("README.md (Troubleshooting)", f"quotes `{line}`",
                         f"`placelab devices` prints `{devices.strip()}`: quote that")
            elif line not in code:
                fail("README.md (Troubleshooting)", f"quotes `{line}`, which nothing in src/ prints",
                     "quote the message as the code writes it")


def run_checks(readme, results, binary):
    failures.clear()
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout
    check_magics(readme)
    check_variables(readme, help_text)
    check_commands(readme, binary)
    check_figures(readme, results)
    check_quoted_errors(readme, binary)
    check_pictures(readme)
    return list(failures)


# Each mistake the check exists to catch, made once in README.md's text: (what, the text, what
# it becomes, a part of the failure it must bring). Caught only when a new failure says that part.
MISTAKES = [
    ("a variable's row renamed", "| `PLACELAB_HISTORY` |", "| `PLACELAB_HISTRY` |", "PLACELAB_HISTORY"),
    ("a measured figure changed", "[33 MiB]", "[9.5 MiB]", "9.5"),
    ("a figure without its source", "## Requirements\n", "## Requirements\n\nIt starts in 3 min.\n", "3 min"),
    ("a figure given twice", "[33 MiB]", "[33 MiB](benches/RESULTS.md#a-class-on-one-machine-2026-11-27) or [33 MiB]",
     "given again"),
    ("a figure with the wrong unit", "[33 MiB]", "[33 GB]", "33 GB"),
    ("a flag --help refuses", "placelab install-kernel --user", "placelab install-kernel --usr", "--usr"),
    ("a test that does not exist", "cargo test --test jupyter tutorial_notebooks",
     "cargo test --test jupyter tutorial_notebookz", "tutorial_notebookz"),
    ("a filter in the test's text that names no test", "cargo test --test jupyter tutorial_notebooks",
     "cargo test --test jupyter venv", "venv"),
    ("a flag the script does not take", "tests/classroom/run.sh --learners N",
     "tests/classroom/run.sh --pupils N", "--pupils"),
    ("a quoted error the code does not print", "the Rust evaluator has stopped; start placelab again",
     "the Rust evaluator has stopped; restart placelab", "restart placelab"),
    ("a magic left out", "| `:transfers` |", "| `:transfer` |", ":transfers"),
    ("a table row for no command", "| `:transfers` |", "| `:gpu` |", "`:gpu`"),
    ("a word that leaves left out", "`:q`, ", "", "`:q`"),
    ("a figure in words", "## Requirements\n", "## Requirements\n\nIt builds in about ten minutes.\n",
     "ten minutes"),
    ("cargo install without Cargo.lock", "cargo install --locked --path .", "cargo install --path .", "--locked"),
    ("a picture that is not there", "](notebooks/screenshot.png)", "](notebooks/screenshot-x.png)",
     "does not exist"),
    ("a link to no section", "(benches/RESULTS.md#profiling-cost)", "(benches/RESULTS.md#profiling)",
     "no such section"),
]


def self_test(readme, results, binary):
    """Makes each of MISTAKES in the README's text and checks that a new failure then says
    what the mistake is (not merely that something else broke)."""
    clean = set(run_checks(readme, results, binary))
    missed = []
    for name, before, after, says in MISTAKES:
        if before not in readme:
            missed.append(f"{name}: the README no longer has {before!r}; update MISTAKES")
            continue
        new = set(run_checks(readme.replace(before, after, 1), results, binary)) - clean
        if not any(says in f for f in new):
            got = "".join(f"\n    {f.splitlines()[0]}" for f in sorted(new)) or " nothing"
            missed.append(f"{name}: no new failure says {says!r}; new failures:{got}")
    for m in missed:
        print(f"docs-check --self-test: {m}", file=sys.stderr)
    if not missed:
        print(f"docs-check --self-test: all {len(MISTAKES)} mistakes caught")
    return 1 if missed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=str(ROOT / "target/debug/placelab"),
                    help="the placelab binary whose --help the commands are checked against")
    ap.add_argument("--self-test", action="store_true",
                    help="make each mistake the check should catch and see that it fails")
    args = ap.parse_args()
    binary = Path(args.bin)
    if not binary.exists():
        print(f"docs-check: {binary} is missing: build it (`cargo build`) first", file=sys.stderr)
        return 2
    readme, results = read(README), read(RESULTS)
    if args.self_test:
        return self_test(readme, results, binary)
    found = run_checks(readme, results, binary)
    if found:
        print(f"docs-check: {len(found)} problem(s)\n" + "\n".join(found), file=sys.stderr)
        return 1
    print("docs-check: README.md, --help and benches/RESULTS.md agree with the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
