# Sourced by the test setup scripts (tests/browser/setup.sh, tests/classroom/run.sh): installs
# pinned packages into a directory under target/, idempotently. A stamp in the directory holds
# the fingerprint of the pin files it was made from and its own path; changed pins make it
# again, as does a move (a venv's scripts name its path), and a directory left half-made (no
# stamp) is made again too.

fingerprint() { cat "$@" | sha256sum | cut -d' ' -f1; }

# pinned_venv DIR REQUIREMENTS: a venv at DIR with `pip install -r REQUIREMENTS`.
pinned_venv() {
    local dir="$1" requirements="$2" want
    want="$(fingerprint "$requirements") at $dir"
    [ "$(cat "$dir/.placelab-stamp" 2>/dev/null)" = "$want" ] && return 0
    echo "installing $(basename "$requirements") into $dir" >&2
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check -r "$requirements"
    echo "$want" > "$dir/.placelab-stamp"
}

# pinned_npm DIR SOURCE: DIR/node_modules from SOURCE's package.json and package-lock.json.
pinned_npm() {
    local dir="$1" source="$2" want
    want="$(fingerprint "$source/package.json" "$source/package-lock.json") at $dir"
    [ "$(cat "$dir/.placelab-stamp" 2>/dev/null)" = "$want" ] && return 0
    echo "installing $source/package.json into $dir" >&2
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$source/package.json" "$source/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" > "$dir/.placelab-stamp"
}
