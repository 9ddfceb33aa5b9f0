#!/usr/bin/env bash
# Builds the maintenance-windows module plugin (app.py) into a WebAssembly component.
#
#   plugins/maintenance-windows/build.sh OUT.wasm
#
# componentize-py (pinned in requirements.txt) is taken from $COMPONENTIZE_PY if set,
# else from PATH if it is the pinned version, else installed once into a venv under
# ${FLEET_TOOLS_DIR:-<repo>/target/plugin-tools}/venv and reused afterwards.
# `--stub-wasi` replaces every WASI import with a trapping stub, so the component
# imports nothing but the type-only `compute:module/types` interface.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="$(cd "$(dirname "$1")" 2>/dev/null && pwd)" || {
    echo "build.sh: the folder of $1 does not exist" >&2
    exit 1
}
out="$out_dir/$(basename "$1")"
version="$(sed -n 's/^componentize-py==//p' "$here/requirements.txt")"
wit="$repo/wit/module"

fail() {
    echo "build.sh: $*" >&2
    exit 1
}

componentize_py() {
    if [[ -n "${COMPONENTIZE_PY:-}" ]]; then
        echo "$COMPONENTIZE_PY"
        return
    fi
    if command -v componentize-py >/dev/null \
        && [[ "$(componentize-py --version 2>/dev/null)" == "componentize-py $version" ]]; then
        command -v componentize-py
        return
    fi
    local venv="${FLEET_TOOLS_DIR:-$repo/target/plugin-tools}/venv"
    # The venv is reused while it was made from the same requirements.txt.
    if ! cmp -s "$here/requirements.txt" "$venv/fleet-requirements.txt" 2>/dev/null \
        || [[ ! -x "$venv/bin/componentize-py" ]]; then
        command -v python3 >/dev/null \
            || fail "python3 not found: install Python 3.9 or later (apt-get install python3 python3-venv)"
        echo "build.sh: installing componentize-py $version into $venv" >&2
        rm -rf "$venv"
        python3 -m venv "$venv" >&2 \
            || fail "python3 -m venv failed: install the venv module (apt-get install python3-venv)"
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2 \
            || fail "pip install -r $here/requirements.txt failed"
        cp "$here/requirements.txt" "$venv/fleet-requirements.txt"
    fi
    echo "$venv/bin/componentize-py"
}

tool="$(componentize_py)"

# Build from a scratch copy: componentize-py writes __pycache__ beside the modules.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/app"
cp "$here/app.py" "$tmp/app/"

# -p: only the plugin's module is searched for (no VIRTUAL_ENV site-packages).
env -u VIRTUAL_ENV "$tool" --quiet -d "$wit" -w module-plugin \
    componentize --stub-wasi -p "$tmp/app" app -o "$out"
echo "built $out ($(wc -c <"$out") bytes)" >&2
