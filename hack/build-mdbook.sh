#!/usr/bin/env bash
# Installs the pinned mdBook that builds docs/ (`make docs`, and the docs test in `make test`),
# from crates.io with its locked dependencies, into a cache outside the repo:
# ~/.cache/nimbus-rs/tools/mdbook. A warm cache (the binary there reports the pinned version)
# makes this a no-op; bumping MDBOOK_VERSION reinstalls.
#
# Without mdBook's `serve` and `watch` features (a local web server and a file watcher: neither
# is needed to build the book, and they are most of its dependencies); with `search`, so the
# built site keeps its search box.
#
# Prints the mdbook binary's path on its last line of stdout.
set -euo pipefail

MDBOOK_VERSION=0.5.4
root="${NIMBUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbus-rs}/tools/mdbook"
bin="$root/bin/mdbook"
log() { echo "[build-mdbook] $*" >&2; }

if [[ "$("$bin" --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]]; then
  log "installing mdbook $MDBOOK_VERSION into $root"
  # A target dir of its own: never one a worktree builds in, and gone once installed.
  target="$(mktemp -d)"
  trap 'rm -rf "$target"' EXIT
  CARGO_TARGET_DIR="$target" cargo install --locked --quiet --version "$MDBOOK_VERSION" \
    --no-default-features --features search --root "$root" mdbook
fi
echo "$bin"
