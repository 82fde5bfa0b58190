#!/usr/bin/env bash
# Keeps a CI run's `target` folder for the next run on this machine: on a fresh clone,
# `take_warm_target` moves ~/.cache/placelab-ci/target-KEY into place as `target`, and
# `keep_warm_target` (on the way out, however the run ended) moves it back. KEY is made of what
# decides whether the compiled dependencies still fit: Cargo.lock, the toolchain (`rustc -vV`,
# `cargo -V`) and the vendored evcxr's files. With the same key a run finds the dependencies
# compiled, the venvs made (target/*-venv, remade if the clone is elsewhere: their markers hold
# their path) and the cells' engine of target/placelab-session-cache built; the workspace's own
# crates are compiled again, as their sources in a clone are newer than anything built. With an
# empty ~/.cache (the cold path) the run builds everything and leaves its target there.
#
# A move, not a link: relative paths through a linked `target` (a cell's run paths, `..` in
# the tests' paths) would resolve from the cache's folder. So the cache must be on the clone's
# file system; where it is not, nothing is kept. Two runs at once: the first takes the cache,
# the second runs cold; each move is one rename, and a run finding a newer keep leaves it.
#
#   . .ci/warm-target.sh; take_warm_target; trap keep_warm_target EXIT      (.ci/run)

warm_cache="${XDG_CACHE_HOME:-$HOME/.cache}/placelab-ci"
warm_dir=""

take_warm_target() {
    if [ -e target ] || [ -L target ]; then
        echo "warm-target: target/ exists (not a fresh clone): used as it is, and not kept"
        return 0
    fi
    mkdir -p "$warm_cache"
    if [ "$(stat -c %d "$warm_cache")" != "$(stat -c %d .)" ]; then
        echo "warm-target: $warm_cache is on another file system than $PWD: nothing is kept (cold)"
        return 0
    fi
    local key
    key=$({
        cat Cargo.lock
        rustc -vV
        cargo -V
        find vendor -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16)
    warm_dir="$warm_cache/target-$key"
    if mv -T "$warm_dir" target 2>/dev/null; then
        echo "warm-target: warm: target/ from $warm_dir"
        # The vendored crate is a path dependency, judged by its files' times, which a clone
        # sets to now: set them to long ago (its content is part of the key). The last run's
        # outputs of the workspace's own crates are stale: let them go, so that clones at other
        # paths (other hashes) do not pile up.
        find vendor -exec touch -h -d @1 {} +
        cargo clean -q -p placelab -p placelab-frontend
    else
        echo "warm-target: cold: no $warm_dir (its target/ is kept there at the end)"
    fi
}

keep_warm_target() {
    [ -n "$warm_dir" ] && [ -d target ] || return 0
    # Another key's folder is of no more use.
    local old
    for old in "$warm_cache"/target-*; do
        [ "$old" = "$warm_dir" ] || [ ! -e "$old" ] || rm -rf "$old"
    done
    if mv -T target "$warm_dir" 2>/dev/null; then
        echo "warm-target: target/ kept in $warm_dir for the next run"
    else
        echo "warm-target: $warm_dir was kept by another run meanwhile: this target/ stays here"
    fi
}

# Run rather than sourced: say how it is used.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    echo "usage: . .ci/warm-target.sh; take_warm_target; trap keep_warm_target EXIT (as .ci/run does)" >&2
    exit 2
fi
