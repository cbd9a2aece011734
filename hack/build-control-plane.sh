#!/usr/bin/env bash
# Builds the local test control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok) from the pinned Go wrapper modules under tools/, into a cache outside
# the repo keyed by the modules' content. A warm cache makes this a no-op.
#
# Prints the directory holding the binaries on its last line of stdout.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/tools"
k8s_version="v1.36.3"

if ! command -v go >/dev/null 2>&1; then
  echo "error: Go (>= 1.26) is required to build the test control plane; install it from https://go.dev/dl or your distribution" >&2
  exit 1
fi

# Only this script's modules: tools/ also holds helm and kustomize (hack/build-tools.sh).
key="$(cat "$tools"/{etcd,k8s,kwok}/go.mod "$tools"/{etcd,k8s,kwok}/go.sum "${BASH_SOURCE[0]}" \
  | sha256sum | cut -c1-16)"
cache="${NIMBUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbus-rs}/control-plane/$k8s_version-$key"
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

complete() { for b in "${bins[@]}"; do [[ -x "$cache/$b" ]] || return 1; done; }

if complete; then
  echo "$cache"
  exit 0
fi

# Test binaries may run this at the same time: one builds, the others wait for it.
mkdir -p "$(dirname "$cache")"
exec 9>"$(dirname "$cache")/.lock"
flock 9
if complete; then
  echo "$cache"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
rm -rf "$cache.partial"
mkdir -p "$cache.partial"
log() { echo "[build-control-plane] $*" >&2; }

ldflags="-s -w"
for kv in "gitVersion=$k8s_version" gitMajor=1 gitMinor=36 gitTreeState=clean buildDate=1970-01-01T00:00:00Z; do
  ldflags="$ldflags -X k8s.io/component-base/version.$kv -X k8s.io/client-go/pkg/version.$kv"
done

start=$SECONDS
log "building etcd"
(cd "$tools/etcd" && go build -ldflags "-s -w" -o "$cache.partial/etcd" go.etcd.io/etcd/server/v3)
log "building kube-apiserver, kube-controller-manager, kube-scheduler $k8s_version (cold: ~20-30 min on 2 cores)"
(cd "$tools/k8s" && go build -ldflags "$ldflags" -o "$cache.partial/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler)
log "building kwok"
(cd "$tools/kwok" && go build -ldflags "-s -w" -o "$cache.partial/kwok" sigs.k8s.io/kwok/cmd/kwok)
# kwok has no built-in stages; keep the upstream "fast" stage configs next to the binary.
stages="$(cd "$tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage"
mkdir -p "$cache.partial/kwok-stages"
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  install -m 0644 "$stages/$f" "$cache.partial/kwok-stages/$(basename "$f")"
done

rm -rf "$cache"
mv "$cache.partial" "$cache"
log "done in $((SECONDS - start)) s"
echo "$cache"
