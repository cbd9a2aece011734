module nimbus.invalid/tools/kyverno

go 1.26.0

// The Kyverno release whose CRDs upstream/kyverno/ holds (make upstream-kyverno).
require github.com/kyverno/kyverno v1.19.1
