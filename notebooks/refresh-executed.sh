#!/usr/bin/env bash
# Refreshes notebooks/executed/: the ten tutorials, each run top to bottom through the kernel
# by the notebook tests (which check what each teaches), kept with their outputs so that they
# can be read on GitHub or in any viewer without running anything.
#
#   notebooks/refresh-executed.sh
#
# Run it after changing a notebook or what it shows: the notebook tests fail while an executed
# copy's cells differ from its notebook's, or its outputs from what the notebook shows now
# (numbers, times and paths masked). The copies are what ran on this machine: simulated GPUs
# where it has none (each notebook's first cell decides which), its real GPU where it has one.
# Execution times and this checkout's path are left out, so a refresh changes only what the
# cells showed.
set -euo pipefail
cd "$(dirname "$0")/.."

rm -rf target/notebooks
PLACELAB_REFRESHING_EXECUTED=1 cargo test --test jupyter tutorial_notebooks_run_and_teach_their_facts -- --exact

python3 notebooks/keep-executed.py target/notebooks notebooks/executed
