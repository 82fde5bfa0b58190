#!/usr/bin/env python3
"""Builds the emulated devices' kernels as a shared library that the emulator runs instead of
the kernels linked into placelab (`PLACELAB_EMULATOR_KERNELS=LIB`): with one change to a kernel
(a mutant the tests must catch), or under AddressSanitizer. It compiles what build.rs compiled,
from the compiler arguments build.rs wrote beside its output (`host-kernels.rsp`), so trying a
variant needs no rebuild of placelab or of the tests.

  .ci/kernel-library.py -o LIB [--mutation 'FILE|FROM|TO'] [--asan] [CARGO_TEST_ARGS...]

CARGO_TEST_ARGS pick the build whose kernels are used (default: `--test emulated`); run this in
that build's environment (`RUSTC_WORKSPACE_WRAPPER` and all), or cargo builds it anew first.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def build_output_dir(cargo_args: list[str]) -> Path:
    """placelab's OUT_DIR in the build `cargo test --no-run CARGO_ARGS` makes (or finds fresh)."""
    run = subprocess.run(
        ["cargo", "test", "--no-run", "--message-format=json", *cargo_args],
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    )
    for line in run.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "build-script-executed" and "#placelab@" in message["package_id"]:
            return Path(message["out_dir"])
    sys.exit("kernel-library: cargo ran no build script of placelab; is this placelab's checkout?")


def mutated_sources(out_dir: Path, mutation: str, into: Path) -> Path:
    """A copy of the kernel sources build.rs compiled, with `FROM` replaced by `TO` in `FILE`."""
    try:
        file, old, new = mutation.split("|", 2)
    except ValueError:
        sys.exit(f"kernel-library: --mutation takes FILE|FROM|TO, not {mutation!r}")
    shutil.copytree(out_dir / "kernels", into)
    target = into / file
    if not target.is_file():
        sys.exit(f"kernel-library: no kernel source {file} (in kernels/: {sorted(p.name for p in into.iterdir())})")
    text = target.read_text()
    if text.count(old) != 1:
        sys.exit(f"kernel-library: {old!r} occurs {text.count(old)} times in kernels/{file}; it must occur once")
    target.write_text(text.replace(old, new, 1))
    return into


def compile_library(out_dir: Path, output: Path, first_include: Path | None, asan: bool, work: Path) -> None:
    """Compiles each source as build.rs did (in parallel), then links them into `output`."""
    lines = [shlex.split(l)[0] for l in (out_dir / "host-kernels.rsp").read_text().splitlines() if l]
    flags = [l for l in lines if l.startswith("-")]
    sources = [Path(l) for l in lines if not l.startswith("-")]
    extra = ["-fPIC"]
    if first_include:
        extra.insert(0, f"-I{first_include}")
    if asan:
        extra += ["-fsanitize=address", "-fno-omit-frame-pointer"]
    compiler = os.environ.get("CXX", "c++")

    def compile_one(i_source: tuple[int, Path]) -> Path:
        i, source = i_source
        obj = work / f"{i}-{source.stem}.o"
        subprocess.run([compiler, *extra, *flags, "-c", str(source), "-o", str(obj)], check=True)
        return obj

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        objects = list(pool.map(compile_one, enumerate(sources)))
    # -Bsymbolic: the library calls its own functions, never the same-named ones linked into
    # the program that loads it.
    link = [compiler, "-shared", "-Wl,-Bsymbolic", *(["-fsanitize=address"] if asan else [])]
    subprocess.run([*link, *map(str, objects), "-o", str(output)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", required=True, type=Path)
    parser.add_argument("--mutation", help="FILE|FROM|TO: FROM, once in kernels/FILE, becomes TO")
    parser.add_argument("--asan", action="store_true", help="compile under AddressSanitizer")
    args, cargo_args = parser.parse_known_args()
    out_dir = build_output_dir(cargo_args or ["--test", "emulated"])
    with tempfile.TemporaryDirectory(prefix="kernel-library-") as tmp:
        work = Path(tmp)
        first = mutated_sources(out_dir, args.mutation, work / "src") if args.mutation else None
        compile_library(out_dir, args.output.resolve(), first, args.asan, work)


if __name__ == "__main__":
    main()
