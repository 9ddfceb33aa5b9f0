#!/usr/bin/env bash
# Builds the console's assets: the planner component the `fleet` binary embeds, and the
# module plugins the page may meet, transpiled by jco for JavaScript, into the console
# directory beside the binary (target/<profile>/console/, gitignored; the server's
# default --console-dir). host/build.rs runs it on every build when Node.js and npm are
# installed; run it by hand for another binary or other plugins. Nothing here is
# committed.
#
#   console/build.sh [PLUGIN.wasm ...]
#
# Plugins: those named, else every plugin the workspace builds beside the binary
# (target/<profile>/plugins/*.wasm). Each goes to plugins/<sha256 of the file>/, the
# name the server gives it in the snapshot, so the page runs exactly the plugin the
# server loaded (docs/decisions/0011).
#
#   FLEET_BIN=path/to/fleet     the binary whose planner to transpile (default: the
#                               release build, made with cargo)
#   FLEET_COMPONENT=file.wasm   the planner component itself (what host/build.rs passes)
#   CONSOLE_OUT=dir             write elsewhere (then serve with --console-dir dir)
#
# The page's npm packages (jco, js-yaml) are installed first when they are missing or
# older than package-lock.json.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"

if [[ -z "${FLEET_COMPONENT:-}" && -z "${FLEET_BIN:-}" ]]; then
  # The release binary, the one the README's `cargo run --release` serves with.
  (cd "$repo" && cargo build --release --locked --quiet --bin fleet)
  FLEET_BIN="${CARGO_TARGET_DIR:-$repo/target}/release/fleet"
fi
out="${CONSOLE_OUT:-$(dirname "${FLEET_BIN:-$repo/target/release/fleet}")/console}"

installed="$here/node_modules/.package-lock.json"
if [[ ! -f "$installed" || "$here/package-lock.json" -nt "$installed" ]]; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi
jco="$here/node_modules/.bin/jco"
if [[ ! -x "$jco" ]]; then
  echo "jco is not installed: run 'npm ci' in $here first" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ -n "${FLEET_COMPONENT:-}" ]]; then
  cp "$FLEET_COMPONENT" "$work/fleet_planner.wasm"
else
  "$FLEET_BIN" component -o "$work/fleet_planner.wasm"
fi

# transpile COMPONENT NAME DIR
# --instantiation async: the page passes the WIT imports (the module adapters) in.
# --no-nodejs-compat: browser output (the tests give Node.js compiled modules themselves).
# No WASI shim is needed: the planner imports only compute:fleet, plugins nothing.
transpile() {
  "$jco" transpile "$1" --name "$2" --out-dir "$3" \
    --instantiation async --no-nodejs-compat --no-typescript --no-wasi-shim --quiet
}

transpile "$work/fleet_planner.wasm" fleet_planner "$work/out"

# Module plugins: those named, else those built beside the binary.
plugins=("$@")
if [[ ${#plugins[@]} -eq 0 && -n "${FLEET_BIN:-}" ]]; then
  shopt -s nullglob
  plugins=("$(dirname "$FLEET_BIN")"/plugins/*.wasm)
  shopt -u nullglob
fi
for plugin in "${plugins[@]}"; do
  digest="$(sha256sum "$plugin" | cut -d' ' -f1)"
  transpile "$plugin" plugin "$work/out/plugins/$digest"
  echo "plugin $plugin -> plugins/$digest/"
done

# YAML documents in the page: js-yaml's one-file ES module (pinned in package-lock.json).
cp "$here/node_modules/js-yaml/dist/js-yaml.mjs" "$work/out/js-yaml.mjs"

# Replace the output whole, so a server never serves a half-written mix.
mkdir -p "$(dirname "$out")"
rm -rf "$out.new"
mv "$work/out" "$out.new"
rm -rf "$out"
mv "$out.new" "$out"
echo "console assets in $out:"
ls -l "$out" | tail -n +2
