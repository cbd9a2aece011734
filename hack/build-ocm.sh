#!/usr/bin/env bash
# Builds Open Cluster Management's policy propagator (`governance-policy-propagator`, for the
# hub) and policy framework addon (`governance-policy-framework-addon`, for a managed cluster)
# from the release pinned in tools/ocm, for the fleet tests (tests/fleet.rs), into a cache
# outside the repo keyed by that module's content, with the CRDs they need (`crds/`: Policy,
# PlacementBinding, PolicySet and PolicyAutomation from the propagator, ManagedCluster,
# Placement and PlacementDecision from the open-cluster-management.io/api module it is built
# with). The config-policy-controller, pinned beside them, is not built: the tests deliver
# intents and bindings as policy templates.
# A warm cache makes this a no-op; a cold build takes about 5 minutes of CPU: for
# `GOCACHE=$(mktemp -d) bash hack/build-ocm.sh` with the modules already downloaded, 1,025 s
# wall and 307 s of CPU (263 user, 44 system) on 2 cores that a Cargo release build kept busy
# throughout (load average 11), 2026-11-29 (see docs/src/fleet.md).
#
# Prints the directory holding the binaries on its last line of stdout.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
module="$root/tools/ocm"

key="$(cat "$module"/go.{mod,sum} "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
base="${NIMBUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbus-rs}/ocm"
cache="$base/$key"
bins=(governance-policy-propagator governance-policy-framework-addon)

complete() { for b in "${bins[@]}"; do [[ -x "$cache/$b" ]] || return 1; done; }

if complete; then
  echo "$cache"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "error: Go (>= 1.25.7) is required to build Open Cluster Management's controllers; install it from https://go.dev/dl or your distribution" >&2
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
log() { echo "[build-ocm] $*" >&2; }
dir() { (cd "$module" && go list -m -f '{{.Dir}}' "open-cluster-management.io/$1"); }
version="$(cd "$module" && go list -m -f '{{.Version}}' open-cluster-management.io/governance-policy-propagator)"
rm -rf "$cache.partial"
mkdir -p "$cache.partial/crds"
start=$SECONDS
log "building Open Cluster Management $version: governance-policy-propagator, governance-policy-framework-addon (cold: ~5 min of CPU)"
(cd "$module" && go build -ldflags "-s -w" -o "$cache.partial/" \
  open-cluster-management.io/governance-policy-propagator \
  open-cluster-management.io/governance-policy-framework-addon)

propagator="$(dir governance-policy-propagator)"
api="$(dir api)"
install -m 644 "$propagator"/deploy/crds/policy.open-cluster-management.io_{policies,placementbindings,policysets,policyautomations}.yaml \
  "$api"/cluster/v1/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml \
  "$api"/cluster/v1beta1/0000_0{2_clusters.open-cluster-management.io_placements,3_clusters.open-cluster-management.io_placementdecisions}.crd.yaml \
  "$cache.partial/crds/"

rm -rf "$cache"
mv "$cache.partial" "$cache"
log "done in $((SECONDS - start)) s"
echo "$cache"
