#!/usr/bin/env bash
# Installs what the compliance report tests need beyond the Go-built tools:
# - headless Chromium from Debian's package (renders the HTML report): apt-get as root, or
#   fails with the reason;
# - compliance-trestle, pinned, in a venv cached under ~/.cache/nimbus-rs/oscal (validates the
#   OSCAL output against NIST's OSCAL model).
# Cold: ~20 s for chromium (apt-get, on this machine) and ~40 s for the venv; warm: instant.
set -euo pipefail

TRESTLE_VERSION=5.2.0
cache="${NIMBUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbus-rs}/oscal"
log() { echo "[install-test-tools] $*" >&2; }

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    log "chromium is missing and this is not root: run 'apt-get install chromium' as root"
    exit 1
  fi
  log "installing chromium (Debian package)"
  start=$(date +%s)
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  log "chromium installed in $(( $(date +%s) - start )) s"
fi

venv="$cache/venv-trestle-$TRESTLE_VERSION"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import trestle' 2>/dev/null; then
  log "installing compliance-trestle $TRESTLE_VERSION into $venv"
  start=$(date +%s)
  rm -rf "$venv"
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "compliance-trestle==$TRESTLE_VERSION"
  log "compliance-trestle installed in $(( $(date +%s) - start )) s"
fi
