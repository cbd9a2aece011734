# The two commands of the README:
#   make dev   - local control plane + operator + examples, until Ctrl-C
#   make test  - the whole test suite (formatting, lints, unit and integration tests)

CARGO ?= cargo

.PHONY: dev test control-plane crds fmt lint

dev: control-plane
	$(CARGO) run -- dev

test: control-plane
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --workspace --no-fail-fast

# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok from pinned Go
# modules into ~/.cache/nimbus-rs (cold: ~10-30 min; warm: instant).
control-plane:
	bash hack/build-control-plane.sh

# Regenerates the committed CRDs (a test fails when they are stale).
crds:
	$(CARGO) run -q -- crds > config/crd/nimbus.yaml
# ...and the Helm chart's copy: Helm reads only files inside the chart.
	cp config/crd/nimbus.yaml charts/nimbus/files/crds.yaml

# The packaging tests (charts/nimbus, config/) run helm and kustomize, built from pinned Go
# modules into ~/.cache/nimbus-rs/tools (cold: ~4 min on 2 cores; warm: instant).
.PHONY: tools
test: tools
tools:
	bash hack/build-tools.sh

# Operator benchmark on a real local control plane: cold convergence, steady state, churn.
# Prints a table and writes target/bench-results.json; resize with e.g.
# BENCH_ARGS="--namespaces 10 --bindings-per-namespace 2 --steady 20s".
.PHONY: bench
bench: control-plane
	$(CARGO) run --release -p nimbus-bench -- $(BENCH_ARGS)
