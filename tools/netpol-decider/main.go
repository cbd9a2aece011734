// netpol-decider answers "is this traffic allowed?" for a set of NetworkPolicies, with
// cyclonus's NetworkPolicy matcher (github.com/mattfenwick/cyclonus/pkg/matcher, the evaluator
// policy-assistant of kubernetes-sigs/network-policy-api grew from): an implementation of the
// NetworkPolicy semantics independent of the operator that wrote the policies.
//
// Input (stdin, JSON): {"policies": [NetworkPolicy...], "traffic": [{"name", "source",
// "destination", "port", "protocol"}...]}, where a peer is {"ip", "namespace",
// "namespaceLabels", "podLabels"} (no namespace: a host outside the cluster).
// Output (stdout, JSON): {"<name>": {"ingress": bool, "egress": bool, "allowed": bool}...}.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

type peer struct {
	IP              string            `json:"ip"`
	Namespace       string            `json:"namespace"`
	NamespaceLabels map[string]string `json:"namespaceLabels"`
	PodLabels       map[string]string `json:"podLabels"`
}

type traffic struct {
	Name        string `json:"name"`
	Source      peer   `json:"source"`
	Destination peer   `json:"destination"`
	Port        int    `json:"port"`
	Protocol    string `json:"protocol"`
}

type input struct {
	Policies []*networkingv1.NetworkPolicy `json:"policies"`
	Traffic  []traffic                     `json:"traffic"`
}

type verdict struct {
	Ingress bool `json:"ingress"`
	Egress  bool `json:"egress"`
	Allowed bool `json:"allowed"`
}

func (p peer) traffic() *matcher.TrafficPeer {
	out := &matcher.TrafficPeer{IP: p.IP}
	if p.Namespace != "" {
		out.Internal = &matcher.InternalPeer{
			Namespace:       p.Namespace,
			NamespaceLabels: p.NamespaceLabels,
			PodLabels:       p.PodLabels,
		}
	}
	return out
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintf(os.Stderr, "netpol-decider: reading input: %v\n", err)
		os.Exit(2)
	}
	policy := matcher.BuildNetworkPolicies(false, in.Policies)
	out := map[string]verdict{}
	for _, t := range in.Traffic {
		result := policy.IsTrafficAllowed(&matcher.Traffic{
			Source:       t.Source.traffic(),
			Destination:  t.Destination.traffic(),
			ResolvedPort: t.Port,
			Protocol:     corev1.Protocol(t.Protocol),
		})
		out[t.Name] = verdict{
			Ingress: result.Ingress.IsAllowed(),
			Egress:  result.Egress.IsAllowed(),
			Allowed: result.IsAllowed(),
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "netpol-decider: writing output: %v\n", err)
		os.Exit(2)
	}
}
