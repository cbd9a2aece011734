#!/usr/bin/env bash
# Builds the test tools from pinned Go modules, into a cache outside the repo keyed by the
# modules' content: helm and kustomize (packaging tests; wrapper modules tools/helm and
# tools/kustomize), netpol-decider (efficacy tests; tools/netpol-decider, cyclonus's
# NetworkPolicy matcher), kubectl (posture API tests; tools/kubectl, at the control plane's
# Kubernetes version), health-judge (GitOps health tests; tools/health-judge, kstatus, Argo
# CD's Lua convention in gopher-lua and Flux's CEL health evaluator), promtool (alert rule
# tests; tools/promtool, Prometheus's module) and knp-decider (ClusterNetworkPolicy tests;
# tools/knp-decider, kube-network-policies' policy engine) and karmada-judge (Karmada interpreter
# tests; tools/karmada-judge, Karmada's declarative resource interpreter). A warm cache makes this
# a no-op; a cold build takes a few minutes on 2 cores.
#
# Each tool is cached on its own (tools/by-tool/<tool>/<key of its module and build recipe>),
# so adding or bumping one tool rebuilds that tool only; the directory printed holds them all
# (hard links) and is keyed by all of them.
#
# Prints the directory holding the binaries on its last line of stdout.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/tools"
base="${NIMBUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbus-rs}/tools"
bins=(helm kustomize netpol-decider kubectl health-judge promtool knp-decider karmada-judge)

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
log() { echo "[build-tools] $*" >&2; }
version() { (cd "$tools/$1" && go list -m -f '{{.Version}}' "$2"); }

# One function per tool: `build_<tool> <output file>`, run in tools/<tool>.

# As helm's own Makefile does: stamp its version, and the Kubernetes version `helm template` and
# `helm lint` assume without a cluster (otherwise v1.20, which fails `kubeVersion: >=1.28`),
# taken from the client-go it is built with.
build_helm() {
  local helm_version k8s_minor ldflags pkg
  helm_version="$(version helm helm.sh/helm/v3)"
  k8s_minor="$(version helm k8s.io/client-go | cut -d. -f2)"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
  for pkg in pkg/chartutil pkg/lint/rules; do
    ldflags="$ldflags -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
  done
  log "building helm $helm_version (Kubernetes 1.$k8s_minor)"
  go build -ldflags "$ldflags" -o "$1" helm.sh/helm/v3/cmd/helm
}

build_kustomize() {
  local kustomize_version
  kustomize_version="$(version kustomize sigs.k8s.io/kustomize/kustomize/v5)"
  log "building kustomize $kustomize_version"
  go build -ldflags "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=$kustomize_version" \
    -o "$1" sigs.k8s.io/kustomize/kustomize/v5
}

build_netpol-decider() {
  log "building netpol-decider (cyclonus $(version netpol-decider github.com/mattfenwick/cyclonus))"
  go build -ldflags "-s -w" -o "$1" .
}

build_kubectl() {
  local k8s_version ldflags pkg
  k8s_version="$(version kubectl k8s.io/kubernetes)"
  log "building kubectl $k8s_version"
  ldflags="-s -w"
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$k8s_version")"
  done
  go build -ldflags "$ldflags" -o "$1" k8s.io/kubernetes/cmd/kubectl
}

build_health-judge() {
  log "building health-judge (cli-utils $(version health-judge sigs.k8s.io/cli-utils)," \
    "gopher-lua $(version health-judge github.com/yuin/gopher-lua)," \
    "fluxcd/pkg/runtime $(version health-judge github.com/fluxcd/pkg/runtime))"
  go build -ldflags "-s -w" -o "$1" .
}

# As Prometheus's release build does (.promu.yml): netgo, and the release version stamped; the
# module's v0.3MM.P is Prometheus 3.MM.P. Without the optional service discoveries (upstream's
# remove_all_sd tag; rule checks and tests use none): the cloud SDKs they pull in took 30 min
# of a cold build on a busy 2-core machine, 5.5 without.
build_promtool() {
  local module minor release
  module="$(version promtool github.com/prometheus/prometheus)"
  minor="${module#v0.}"
  release="3.$((${minor%%.*} - 300)).${minor#*.}"
  log "building promtool $release"
  go build -tags netgo,remove_all_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" \
    -o "$1" github.com/prometheus/prometheus/cmd/promtool
}

build_knp-decider() {
  log "building knp-decider (kube-network-policies $(version knp-decider sigs.k8s.io/kube-network-policies)," \
    "network-policy-api $(version knp-decider sigs.k8s.io/network-policy-api))"
  go build -ldflags "-s -w" -o "$1" .
}

build_karmada-judge() {
  log "building karmada-judge (karmada $(version karmada-judge github.com/karmada-io/karmada))"
  go build -ldflags "-s -w" -o "$1" .
}

# A tool's key: its module (go.mod, go.sum, sources) and its build function.
tool_key() {
  { cat "$tools/$1"/go.{mod,sum}; cat "$tools/$1"/*.go 2>/dev/null || true; declare -f "build_$1"; } |
    sha256sum | cut -c1-16
}

declare -A entry
for b in "${bins[@]}"; do entry[$b]="$base/by-tool/$b/$(tool_key "$b")"; done
key="$(for b in "${bins[@]}"; do echo "${entry[$b]}"; done | sha256sum | cut -c1-16)"
cache="$base/$key"

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

rm -rf "$cache.partial"
mkdir -p "$cache.partial"
for b in "${bins[@]}"; do
  dir="${entry[$b]}"
  if [[ ! -x "$dir/$b" ]]; then
    start=$SECONDS
    rm -rf "$dir.partial"
    mkdir -p "$dir.partial"
    (cd "$tools/$b" && "build_$b" "$dir.partial/$b")
    rm -rf "$dir"
    mv "$dir.partial" "$dir"
    log "$b built in $((SECONDS - start)) s"
  fi
  ln "$dir/$b" "$cache.partial/$b" 2>/dev/null || cp "$dir/$b" "$cache.partial/$b"
done
rm -rf "$cache"
mv "$cache.partial" "$cache"
echo "$cache"
