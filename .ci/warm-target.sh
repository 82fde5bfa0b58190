#!/usr/bin/env bash
# Keeps a CI run's `target` folder for the next run on this machine: on a fresh clone,
# `take_warm_target` moves ~/.cache/placelab-ci/target-KEY into place as `target`, and
# `keep_warm_target` (on the way out, however the run ended) moves it back. KEY is made of what
# decides whether the compiled dependencies still fit: Cargo.lock, the toolchain (`rustc -vV`,
# `cargo -V`) and the vendored evcxr's files. With the same key a run finds the dependencies
# compiled, the venvs and npm folders made (moved to this clone's path: relocate_installs) with
# what they keep (NVRTC's CUBINs), and the cells' engine of target/placelab-session-cache built;
# of the workspace's own crates, those with a file changed since are compiled again
# (date_unchanged_files). With an empty ~/.cache (the cold path) the run builds everything and
# leaves its target there.
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
        date_unchanged_files
        relocate_installs "$(cat target/.placelab-ci-clone 2>/dev/null)" "$PWD"
    else
        echo "warm-target: cold: no $warm_dir (its target/ is kept there at the end)"
    fi
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

# relocate_installs OLD NEW: the venvs and npm folders under target/ (each has a marker:
# placelab-install-complete from engine/tests/support/venv.rs, .placelab-stamp from
# tests/support/pinned.sh), made by a clone at OLD, now belong to the clone at NEW. A venv's
# scripts, its pyvenv.cfg and its marker name its path; nothing else in it does (pip writes
# relative paths), so rewriting those is the move. Without it each would be made again, and
# NVRTC's venv would lose the CUBINs it keeps (kernels_nvrtc took 210 s of a warm run that way,
# seconds with the venv moved: benches/RESULTS.md, "CI in lanes").
relocate_installs() {
    local old="$1" new="$2" marker dir
    [ -n "$old" ] && [ "$old" != "$new" ] || return 0
    local from to
    from=$(printf '%s/' "$old" | sed 's/[][\.*^$|]/\\&/g')
    to=$(printf '%s/' "$new" | sed 's/[\\&|]/\\&/g')
    find target -maxdepth 3 \( -name placelab-install-complete -o -name .placelab-stamp \) -type f |
        while IFS= read -r marker; do
            dir="${marker%/*}"
            {
                printf '%s\n' "$marker"
                [ -f "$dir/pyvenv.cfg" ] && printf '%s\n' "$dir/pyvenv.cfg"
                [ -d "$dir/bin" ] && find "$dir/bin" -maxdepth 1 -type f
            } | xargs -r -d '\n' grep -lIF -e "$old/" -- | xargs -r -d '\n' sed -i "s|$from|$to|g" -- ||
                true # grep finds none where nothing names the old path
        done
    echo "warm-target: the venvs and npm folders of $old moved to $new"
}

keep_warm_target() {
    [ -n "$warm_dir" ] && [ -d target ] || return 0
    # Where the venvs were made: the next clone moves them from here (relocate_installs). What
    # target/ was built from: the next clone dates its unchanged files from it.
    printf '%s\n' "$PWD" > target/.placelab-ci-clone
    note_built_files
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

# `.ci/warm-target.sh --self-test`: a venv and an npm folder made at one clone's path (a path
# with a dot and a bar in it: sed's pattern) work at another's after relocate_installs, and what
# does not name the old path is left as it was; date_unchanged_files gives back the times of the
# unchanged files only.
self_test() {
    local tmp old new
    tmp=$(mktemp -d)
    old="$tmp/ci.1|a" new="$tmp/clone&2"
    mkdir -p "$old/target/classroom" "$new"
    python3 -m venv --without-pip "$old/target/jupyter-venv"
    printf '#!%s\nprint("ran")\n' "$old/target/jupyter-venv/bin/python" >"$old/target/jupyter-venv/bin/tool"
    chmod +x "$old/target/jupyter-venv/bin/tool"
    printf 'pins\nat %s\n' "$old/engine/../target/jupyter-venv" >"$old/target/jupyter-venv/placelab-install-complete"
    mkdir -p "$old/target/classroom/node/node_modules/x"
    printf 'abc at %s\n' "$old/target/classroom/node" >"$old/target/classroom/node/.placelab-stamp"
    printf 'names %s/\n' "$old" >"$old/target/classroom/node/node_modules/x/index.js"
    mv "$old/target" "$new/target"
    (cd "$new" && relocate_installs "$old" "$new" >/dev/null)
    local venv="$new/target/jupyter-venv" failed=""
    [ "$("$venv/bin/tool")" = ran ] || failed+=" the script did not run from its new path;"
    grep -qxF "at $new/engine/../target/jupyter-venv" "$venv/placelab-install-complete" ||
        failed+=" the venv's marker;"
    grep -qF "$new/target/jupyter-venv" "$venv/pyvenv.cfg" || failed+=" pyvenv.cfg;"
    grep -qxF "abc at $new/target/classroom/node" "$new/target/classroom/node/.placelab-stamp" ||
        failed+=" the npm folder's stamp;"
    grep -qF "$old/" "$new/target/classroom/node/node_modules/x/index.js" ||
        failed+=" a package's file was rewritten;"
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
    echo "warm-target --self-test: a venv and an npm folder moved to a new clone's path; the" \
        "unchanged files and folders got their times back"
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
