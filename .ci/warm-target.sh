#!/usr/bin/env bash
# Keeps a CI run's `target` folder for the next run on this machine at the same path: on a fresh
# clone, `take_warm_target` moves ~/.cache/placelab-ci/target-KEY into place as `target`, and
# `keep_warm_target` (on the way out, however the run ended) moves it back. KEY is made of what
# decides whether the compiled dependencies still fit: Cargo.lock, the toolchain (`rustc -vV`,
# `cargo -V`), the vendored evcxr's files, and the clone's absolute path. With the same key a
# run finds the dependencies compiled, the venvs and npm folders made with what they keep
# (NVRTC's CUBINs), and the cells' engine of target/placelab-session-cache built; of the
# workspace's own crates, those with a file changed since are compiled again
# (date_unchanged_files). With no folder for its key (the cold path) the run builds everything
# and leaves its target there.
#
# Why the path: what was compiled at one path names it, and Cargo does not see that as a change.
# A test binary holds `env!("CARGO_BIN_EXE_placelab")`, the venvs their own paths; a target
# built at /tmp/w5 and taken at /check/work/main with no source changed ran no test at all
# ("No such file or directory" for the binary: the refused landing of 1e7f595,
# benches/RESULTS.md "CI in lanes"). So a target is taken only at the path that built it.
#
# A move, not a link: relative paths through a linked `target` (a cell's run paths, `..` in
# the tests' paths) would resolve from the cache's folder. So the cache must be on the clone's
# file system; where it is not, nothing is kept. Two runs at once: the first takes the cache,
# the second runs cold; each move is one rename, and a run finding a newer keep leaves it.
#
#   . .ci/warm-target.sh; take_warm_target; trap keep_warm_target EXIT      (.ci/run)

warm_cache="${XDG_CACHE_HOME:-$HOME/.cache}/placelab-ci"
warm_dir=""
# Folders kept for other paths (another clone, CI's and a developer's), the newest first; older
# ones are removed. Each is a whole target/, about 4.3 GiB.
warm_other_paths_kept=1

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
    warm_dir="$warm_cache/target-$(warm_key)"
    if mv -T "$warm_dir" target 2>/dev/null; then
        echo "warm-target: warm: target/ from $warm_dir"
        date_unchanged_files
    else
        echo "warm-target: cold: no $warm_dir for $PWD (its target/ is kept there at the end)"
    fi
}

# What a kept target/ must have been built with to be taken here (see the top).
warm_key() {
    {
        cat Cargo.lock
        rustc -vV
        cargo -V
        find vendor -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
        printf 'built at %s\n' "$PWD"
    } | sha256sum | cut -c1-16
}

# Cargo judges the workspace's crates (and a cells' engine built from them) by their files'
# times, which a clone sets to now, so every crate would be compiled again. The last run wrote
# down each file's content hash (`git ls-files -s`) and the time its clone gave it
# (note_built_files); a file whose content is the same gets that time back, and one that changed
# keeps the clone's. Cargo then sees what it would see had the last run's checkout stayed and
# been updated in place: a crate is compiled again when one of its files changed, or when the
# last run ended before it built it. A commit that leaves engine/ alone compiles neither the
# engine nor its tests, nor the cells' engine in the tests' session cache.
date_unchanged_files() {
    local built=target/.placelab-ci-files
    if [ ! -f "$built" ]; then
        # Kept before the list was: the vendored crate only (its content is part of the key).
        find vendor -exec touch -h -d @1 {} +
        return 0
    fi
    local -A was
    local entry same=0 total=0
    while IFS= read -r -d '' entry; do
        was["${entry%$'\t'*}"]="${entry##*$'\t'}"
    done <"$built"
    while IFS= read -r -d '' entry; do
        total=$((total + 1))
        [ -n "${was[$entry]:-}" ] || continue
        touch -c -h -d "@${was[$entry]}" -- "${entry#*$'\t'}"
        same=$((same + 1))
    done < <(tracked_entries)
    echo "warm-target: $same of $total files and folders as the last run had them, with their times"
}

# Each tracked file's `git ls-files -s` entry (its content hash), and each folder's tree entry:
# a build script's `rerun-if-changed` on a folder (engine/build.rs: ../kernels) sees the
# folder's own time too, and a folder's tree hash is the same only when nothing below it changed.
tracked_entries() {
    git ls-files -s -z
    git ls-tree -r -d -z HEAD
}

# What target/ was built from: each tracked entry (tracked_entries) and its path's time.
note_built_files() {
    local entry
    tracked_entries | while IFS= read -r -d '' entry; do
        printf '%s\t%s\0' "$entry" "$(stat -c %.9Y -- "${entry#*$'\t'}")"
    done >target/.placelab-ci-files
}

keep_warm_target() {
    [ -n "$warm_dir" ] && [ -d target ] || return 0
    # Where target/ was built (forget_other_targets reads it) and from what: the next clone
    # dates its unchanged files from it.
    printf '%s\n' "$PWD" > target/.placelab-ci-clone
    note_built_files
    forget_other_targets
    if mv -T target "$warm_dir" 2>/dev/null; then
        echo "warm-target: target/ kept in $warm_dir for the next run"
    else
        echo "warm-target: $warm_dir was kept by another run meanwhile: this target/ stays here"
    fi
}

# Removes the kept folders no run will take: this path's under another key (an older Cargo.lock
# or toolchain) and any that does not say where it was built; of other paths' folders, all but
# the newest $warm_other_paths_kept (by when each was kept).
forget_other_targets() {
    local marker old others=0
    for old in "$warm_cache"/target-*; do
        [ -e "$old/.placelab-ci-clone" ] || [ "$old" = "$warm_dir" ] || rm -rf "$old"
    done
    local newest_first
    newest_first=$(ls -dt "$warm_cache"/target-*/.placelab-ci-clone 2>/dev/null || true)
    while IFS= read -r marker; do
        old="${marker%/*}"
        [ -n "$marker" ] && [ "$old" != "$warm_dir" ] || continue
        if [ "$(cat "$marker")" != "$PWD" ] && [ "$others" -lt "$warm_other_paths_kept" ]; then
            others=$((others + 1))
        else
            rm -rf "$old"
        fi
    done <<<"$newest_first"
}

# `.ci/warm-target.sh --self-test`: a target/ kept at one clone's path is taken at that path
# again and never at another; a third path forgets the older of the other two; and
# date_unchanged_files gives back the times of the unchanged files only.
self_test() {
    local tmp failed=""
    tmp=$(mktemp -d)
    git init -q "$tmp/origin"
    (
        cd "$tmp/origin" && printf 'lock\n' >Cargo.lock && mkdir vendor && printf 'v\n' >vendor/v &&
            git add . && git -c user.name=t -c user.email=t@t commit -qm 1
    )
    # A run as .ci/run makes it (its own shell, `set -e`, keeping target/ on the way out): a
    # fresh clone at $1 takes what is kept for it, says what it found, builds (a file naming its
    # path) and keeps its target/.
    local script
    script=$(realpath "${BASH_SOURCE[0]}")
    ci_run_at() {
        rm -rf "$1" && git clone -q "$tmp/origin" "$1" || return 1
        (cd "$1" && XDG_CACHE_HOME="$tmp" bash -c '
            set -euo pipefail
            . "$1"
            take_warm_target >/dev/null
            trap "keep_warm_target >/dev/null" EXIT
            cat target/built 2>/dev/null || true
            mkdir -p target
            printf "%s\n" "$PWD" >target/built' ci-run "$script")
    }
    [ -z "$(ci_run_at "$tmp/ci")" ] || failed+=" the first run was not cold;"
    [ -z "$(ci_run_at "$tmp/dev")" ] || failed+=" a target/ built at another path was taken;"
    [ "$(ci_run_at "$tmp/ci")" = "$tmp/ci" ] || failed+=" the target/ built at this path was not taken;"
    ci_run_at "$tmp/third" >/dev/null || failed+=" a run failed;"
    [ "$(ls -d "$tmp"/placelab-ci/target-* | wc -l)" = 2 ] || failed+=" not two folders kept after a third path;"
    [ "$(ci_run_at "$tmp/ci")" = "$tmp/ci" ] || failed+=" the newest other path's target/ was forgotten;"
    # A file the last run had with the same content gets its time back; a changed one keeps
    # the clone's.
    local repo="$tmp/repo"
    git init -q "$repo"
    (
        cd "$repo" && mkdir target kept && printf 'a\n' >same.rs && printf 'b\n' >changed.rs &&
            printf 'k\n' >kept/k.cu && git add . && git -c user.name=t -c user.email=t@t commit -qm 1 &&
            touch -d @1000.5 same.rs changed.rs kept && note_built_files &&
            touch same.rs changed.rs kept && printf 'c\n' >changed.rs &&
            git -c user.name=t -c user.email=t@t commit -qam 2 && date_unchanged_files >/dev/null
    )
    [ "$(stat -c %.9Y "$repo/same.rs")" = 1000.500000000 ] ||
        failed+=" an unchanged file did not get its time back;"
    [ "$(stat -c %.9Y "$repo/kept")" = 1000.500000000 ] ||
        failed+=" an unchanged folder did not get its time back;"
    [ "$(stat -c %Y "$repo/changed.rs")" != 1000 ] || failed+=" a changed file got the old time;"
    rm -rf "$tmp"
    if [ -n "$failed" ]; then
        echo "warm-target --self-test: FAILED:$failed" >&2
        return 1
    fi
    echo "warm-target --self-test: a kept target/ taken at its own path only, two paths kept;" \
        "the unchanged files and folders got their times back"
}

# Run rather than sourced: the self-test, or say how it is used.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    if [ "${1:-}" = --self-test ]; then
        set -euo pipefail
        self_test
        exit
    fi
    echo "usage: . .ci/warm-target.sh; take_warm_target; trap keep_warm_target EXIT (as .ci/run does)" >&2
    echo "       .ci/warm-target.sh --self-test" >&2
    exit 2
fi
