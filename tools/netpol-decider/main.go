// netpol-decider answers "is this traffic allowed?" for a set of NetworkPolicies, with
// cyclonus's NetworkPolicy matcher (github.com/mattfenwick/cyclonus/pkg/matcher, the evaluator
// policy-assistant of kubernetes-sigs/network-policy-api grew from): an implementation of the
// NetworkPolicy semantics independent of the operator that wrote the policies.
//
// Input (stdin, JSON), one scenario: {"policies": [NetworkPolicy...], "traffic": [{"name",
// "source", "destination", "port", "portName", "protocol"}...]}, where a peer is {"ip",
// "namespace", "namespaceLabels", "podLabels"} (no namespace: a host outside the cluster) and
// "portName" (optional) is the name of the destination's port, which named ports in the
// policies match.
// Output (stdout, JSON): {"<name>": {"ingress": bool, "egress": bool, "allowed": bool}...}.
//
// Or a batch, so one process judges many policy sets: {"scenarios": [{"policies", "traffic"}...]}
// answered by [{"<name>": {...}...}...], one object per scenario, in order.
//
// Policies are taken as written: a policy without policyTypes gets them as the API server
// defaults them (cyclonus expects stored policies, and panics on none).
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
	PortName    string `json:"portName"`
	Protocol    string `json:"protocol"`
}

type scenario struct {
	Policies []*networkingv1.NetworkPolicy `json:"policies"`
	Traffic  []traffic                     `json:"traffic"`
}

type input struct {
	scenario
	// Present (even empty): a batch; the top-level policies and traffic are then ignored.
	Scenarios *[]scenario `json:"scenarios"`
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

// defaultPolicyTypes is the API server's defaulting of policyTypes
// (k8s.io/kubernetes/pkg/apis/networking/v1 SetDefaults_NetworkPolicy): Ingress, and Egress
// when the policy has egress rules.
func defaultPolicyTypes(policy *networkingv1.NetworkPolicy) {
	if len(policy.Spec.PolicyTypes) == 0 {
		policy.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(policy.Spec.Egress) != 0 {
			policy.Spec.PolicyTypes = append(policy.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
}

func (s scenario) decide() map[string]verdict {
	for _, p := range s.Policies {
		defaultPolicyTypes(p)
	}
	policy := matcher.BuildNetworkPolicies(false, s.Policies)
	out := map[string]verdict{}
	for _, t := range s.Traffic {
		result := policy.IsTrafficAllowed(&matcher.Traffic{
			Source:           t.Source.traffic(),
			Destination:      t.Destination.traffic(),
			ResolvedPort:     t.Port,
			ResolvedPortName: t.PortName,
			Protocol:         corev1.Protocol(t.Protocol),
		})
		out[t.Name] = verdict{
			Ingress: result.Ingress.IsAllowed(),
			Egress:  result.Egress.IsAllowed(),
			Allowed: result.IsAllowed(),
		}
	}
	return out
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "netpol-decider: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("reading input: %v", err)
	}
	var out any
	if in.Scenarios == nil {
		out = in.decide()
	} else {
		verdicts := make([]map[string]verdict, 0, len(*in.Scenarios))
		for i, s := range *in.Scenarios {
			// cyclonus panics on policies the API server would reject: name the scenario.
			func() {
				defer func() {
					if r := recover(); r != nil {
						fail("scenario %d: %v", i, r)
					}
				}()
				verdicts = append(verdicts, s.decide())
			}()
		}
		out = verdicts
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("writing output: %v", err)
	}
}
