//go:build tools

// kubectl for the posture API's end-to-end test (kubectl get, explain, get -w through the
// aggregation layer), at the control plane's Kubernetes version.
package tools

import _ "k8s.io/kubernetes/cmd/kubectl"
