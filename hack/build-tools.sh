#!/usr/bin/env bash
# Builds the test tools from pinned Go modules, into a cache outside the repo keyed by the
# modules' content: helm and kustomize (packaging tests; wrapper modules tools/helm and
# tools/kustomize), netpol-decider (efficacy tests; tools/netpol-decider, cyclonus's
# NetworkPolicy matcher) and kubectl (posture API tests; tools/kubectl, at the control plane's
# Kubernetes version) and promtool (alert rule tests; tools/promtool, Prometheus's module). A
# warm cache makes this a no-op; a cold build takes a few minutes on 2 cores.
#
# Prints the directory holding the binaries on its last line of stdout.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/tools"

key="$(cat "$tools"/{helm,kustomize,netpol-decider,kubectl,promtool}/go.{mod,sum} "$tools"/{netpol-decider,kubectl}/*.go \
  "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
base="${NIMBUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbus-rs}/tools"
cache="$base/$key"
bins=(helm kustomize netpol-decider kubectl promtool)

complete() { for b in "${bins[@]}"; do [[ -x "$cache/$b" ]] || return 1; done; }

if complete; then
  echo "$cache"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "error: Go (>= 1.26) is required to build the test tools; install it from https://go.dev/dl or your distribution" >&2
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
log() { echo "[build-tools] $*" >&2; }
version() { (cd "$tools/$1" && go list -m -f '{{.Version}}' "$2"); }
rm -rf "$cache.partial"
mkdir -p "$cache.partial"
start=$SECONDS

# As helm's own Makefile does: stamp its version, and the Kubernetes version `helm template` and
# `helm lint` assume without a cluster (otherwise v1.20, which fails `kubeVersion: >=1.28`),
# taken from the client-go it is built with.
helm_version="$(version helm helm.sh/helm/v3)"
k8s_minor="$(version helm k8s.io/client-go | cut -d. -f2)"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
for pkg in pkg/chartutil pkg/lint/rules; do
  ldflags="$ldflags -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
done
log "building helm $helm_version (Kubernetes 1.$k8s_minor)"
(cd "$tools/helm" && go build -ldflags "$ldflags" -o "$cache.partial/helm" helm.sh/helm/v3/cmd/helm)

kustomize_version="$(version kustomize sigs.k8s.io/kustomize/kustomize/v5)"
log "building kustomize $kustomize_version"
(cd "$tools/kustomize" && go build \
  -ldflags "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=$kustomize_version" \
  -o "$cache.partial/kustomize" sigs.k8s.io/kustomize/kustomize/v5)

log "building netpol-decider (cyclonus $(version netpol-decider github.com/mattfenwick/cyclonus))"
(cd "$tools/netpol-decider" && go build -ldflags "-s -w" -o "$cache.partial/netpol-decider" .)

k8s_version="$(version kubectl k8s.io/kubernetes)"
log "building kubectl $k8s_version"
kubectl_ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  kubectl_ldflags="$kubectl_ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$k8s_version")"
done
(cd "$tools/kubectl" && go build -ldflags "$kubectl_ldflags" -o "$cache.partial/kubectl" k8s.io/kubernetes/cmd/kubectl)

# As Prometheus's release build does (.promu.yml): netgo, and the release version stamped; the
# module's v0.3MM.P is Prometheus 3.MM.P. Without the optional service discoveries (upstream's
# remove_all_sd tag; rule checks and tests use none): the cloud SDKs they pull in took 30 min
# of a cold build on a busy 2-core machine, 5.5 without.
prometheus_module="$(version promtool github.com/prometheus/prometheus)"
prometheus_minor="${prometheus_module#v0.}"
prometheus_version="3.$((${prometheus_minor%%.*} - 300)).${prometheus_minor#*.}"
log "building promtool $prometheus_version"
(cd "$tools/promtool" && go build -tags netgo,remove_all_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$prometheus_version" \
  -o "$cache.partial/promtool" github.com/prometheus/prometheus/cmd/promtool)

rm -rf "$cache"
mv "$cache.partial" "$cache"
log "done in $((SECONDS - start)) s"
echo "$cache"
