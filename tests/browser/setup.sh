#!/usr/bin/env bash
# Installs what the browser test needs, idempotently, into target/ only:
#   target/browser-venv   JupyterLab from PyPI, pinned in requirements.txt
#   target/browser-node   playwright-core from npm, pinned in package.json/package-lock.json
#   /usr/bin/chromium     Debian's chromium, through apt-get, only when it is missing
# A second run with nothing changed does nothing (each part keeps a stamp of what it installed).
# Playwright never downloads a browser here: lab.mjs launches /usr/bin/chromium.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
repo="$(cd "$here/../.." && pwd -P)"
target="$repo/target"
venv="$target/browser-venv"
node_dir="$target/browser-node"
chromium="${PLACELAB_CHROMIUM:-/usr/bin/chromium}"

say() { echo "browser setup: $*"; }
# shellcheck source=../support/pinned.sh
source "$here/../support/pinned.sh"

# Chromium (Debian's package; the test is run as root on the project's machines).
if [ ! -x "$chromium" ]; then
    if [ "$chromium" != /usr/bin/chromium ]; then
        say "PLACELAB_CHROMIUM=$chromium is not an executable" >&2
        exit 1
    fi
    command -v apt-get >/dev/null || { say "no $chromium and no apt-get to install it" >&2; exit 1; }
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    say "installing Debian's chromium"
    if ! $sudo apt-get install -y -q chromium; then
        $sudo apt-get update -q
        $sudo apt-get install -y -q chromium
    fi
fi

# JupyterLab in a venv of its own; playwright-core (the library only, no browser download).
pinned_venv "$venv" "$here/requirements.txt"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 pinned_npm "$node_dir" "$here"

say "ready: jupyterlab $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("jupyterlab"))'),\
 playwright-core $(node -p "require('$node_dir/node_modules/playwright-core/package.json').version"),\
 $("$chromium" --version 2>/dev/null | head -1)"
