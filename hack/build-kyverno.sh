#!/usr/bin/env bash
# Builds Kyverno's admission controller (`kyverno`), background controller
# (`background-controller`) and reports controller (`reports-controller`) from the release pinned
# in tools/kyverno, for the efficacy tests,
# into a cache outside the repo keyed by that module's content, with the release's CRDs
# (`crds/`, all of which the controllers watch). A warm cache makes this a
# no-op; a cold build downloads ~380 MB of modules and takes 15-30 minutes on 2 cores.
#
# Prints the directory holding the binaries on its last line of stdout.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
module="$root/tools/kyverno"

key="$(cat "$module"/go.{mod,sum} "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
base="${NIMBUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbus-rs}/kyverno"
cache="$base/$key"
bins=(kyverno background-controller reports-controller)

complete() { for b in "${bins[@]}"; do [[ -x "$cache/$b" ]] || return 1; done; }

if complete; then
  echo "$cache"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "error: Go (>= 1.26.6) is required to build Kyverno; install it from https://go.dev/dl or your distribution" >&2
  exit 1
fi

# Test binaries and `make` may run this at the same time: one builds, the others wait for it.
mkdir -p "$base"
exec 9>"$base/.lock"
flock 9
if complete; then
  echo "$cache"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
log() { echo "[build-kyverno] $*" >&2; }
version="$(cd "$module" && go list -m -f '{{.Version}}' github.com/kyverno/kyverno)"
rm -rf "$cache.partial"
mkdir -p "$cache.partial"
start=$SECONDS
log "building Kyverno $version: kyverno, background-controller, reports-controller (cold: 15-30 min on 2 cores)"
(cd "$module" && go build -ldflags "-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion=$version" \
  -o "$cache.partial/" github.com/kyverno/kyverno/cmd/kyverno github.com/kyverno/kyverno/cmd/background-controller \
  github.com/kyverno/kyverno/cmd/reports-controller)

cp -r "$(cd "$module" && go list -m -f '{{.Dir}}' github.com/kyverno/kyverno)/config/crds" \
  "$cache.partial/crds"
chmod -R u+w "$cache.partial/crds"

rm -rf "$cache"
mv "$cache.partial" "$cache"
log "done in $((SECONDS - start)) s"
echo "$cache"
