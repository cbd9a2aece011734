// knp-decider answers "is this traffic allowed?" for a set of ClusterNetworkPolicies
// (policy.networking.k8s.io/v1alpha2) and NetworkPolicies, with kube-network-policies' own
// userspace policy engine (sigs.k8s.io/kube-network-policies: pkg/networkpolicy's PolicyEngine,
// its StandardNetworkPolicy evaluator and plugins/npa-v1alpha2's ClusterNetworkPolicy
// evaluator): an implementation of the ClusterNetworkPolicy semantics independent of the
// operator that wrote the policies.
//
// Each traffic case is one packet through the engine, as the kube-network-policies agent
// (cmd/kube-network-policies/npa-v1alpha2) judges the first packet of a connection: the
// evaluators in the order that agent wires them (Admin-tier ClusterNetworkPolicies,
// NetworkPolicies, Baseline-tier ClusterNetworkPolicies), reading the policies from listers,
// and the pod information from the engine's own PodInfoProvider (pkg/podinfo, the informer
// provider and IP resolver the agent uses). The informers behind them are never started: their
// stores are filled from the input, as their watches would fill them from an API server.
//
// Input (stdin, JSON), one scenario: {"clusterNetworkPolicies": [ClusterNetworkPolicy...],
// "policies": [NetworkPolicy...], "nodes": [Node...], "traffic": [{"name", "source",
// "destination", "port", "portName", "protocol"}...]}, where a peer is {"ip", "namespace",
// "namespaceLabels", "podLabels", "ports"}: with a namespace it is a pod (labelled podLabels,
// in a namespace labelled namespaceLabels, both taken as written), without one it is an
// address that is not a pod's (a host outside the cluster, or a node: the egress `nodes` peers
// of ClusterNetworkPolicies match the addresses of the "nodes" given). "ports" (optional) are
// the pod's container ports, [{"name", "port", "protocol"}], which named ports in the policies
// (destinationNamedPort, NetworkPolicy named ports) resolve against; "portName" is accepted
// for netpol-decider's format and ignored (the engine resolves names from the container ports).
// The peers are the only pods of their traffic case: IPs need not be unique across cases.
// Output (stdout, JSON): {"<name>": {"ingress": bool, "egress": bool, "allowed": bool}...}:
// "allowed" is the engine's verdict on the packet; "egress" and "ingress" are the engine's
// verdict with the evaluators' other direction masked (answering "next", as an evaluator with
// no policy for the packet does).
//
// Or a batch, so one process judges many policy sets: {"scenarios": [{...}...]} answered by
// [{"<name>": {...}...}...], one object per scenario, in order.
//
// Policies are taken as the API server stores them: NetworkPolicies defaulted (policyTypes when
// absent, TCP for a port without a protocol: the engine dereferences it) and without empty
// ingress or egress lists (the engine reads `"ingress": []` as "allow all", but a stored policy
// cannot have one: it reads back absent, "allow none"); ClusterNetworkPolicies as written (their
// CRD has no defaults). `domainNames` egress peers never match (no DNS is observed).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/kube-network-policies/pkg/api"
	"sigs.k8s.io/kube-network-policies/pkg/network"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
	"sigs.k8s.io/kube-network-policies/pkg/podinfo"
	cnpplugin "sigs.k8s.io/kube-network-policies/plugins/npa-v1alpha2"
	npav1alpha2 "sigs.k8s.io/network-policy-api/apis/v1alpha2"
	cnplisters "sigs.k8s.io/network-policy-api/pkg/client/listers/apis/v1alpha2"
)

type containerPort struct {
	Name     string `json:"name"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol"`
}

type peer struct {
	IP              string            `json:"ip"`
	Namespace       string            `json:"namespace"`
	NamespaceLabels map[string]string `json:"namespaceLabels"`
	PodLabels       map[string]string `json:"podLabels"`
	Ports           []containerPort   `json:"ports"`
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
	ClusterNetworkPolicies []*npav1alpha2.ClusterNetworkPolicy `json:"clusterNetworkPolicies"`
	Policies               []*networkingv1.NetworkPolicy       `json:"policies"`
	Nodes                  []*corev1.Node                      `json:"nodes"`
	Traffic                []traffic                           `json:"traffic"`
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

// The informers the evaluators and the pod info provider are built on, as client-go's
// informer factories hand them out, over shared informers that are never started.
type podInformer struct{ cache.SharedIndexInformer }

func (i podInformer) Informer() cache.SharedIndexInformer { return i.SharedIndexInformer }
func (i podInformer) Lister() corelisters.PodLister       { return corelisters.NewPodLister(i.GetIndexer()) }

type namespaceInformer struct{ cache.SharedIndexInformer }

func (i namespaceInformer) Informer() cache.SharedIndexInformer { return i.SharedIndexInformer }
func (i namespaceInformer) Lister() corelisters.NamespaceLister {
	return corelisters.NewNamespaceLister(i.GetIndexer())
}

type nodeInformer struct{ cache.SharedIndexInformer }

func (i nodeInformer) Informer() cache.SharedIndexInformer { return i.SharedIndexInformer }
func (i nodeInformer) Lister() corelisters.NodeLister {
	return corelisters.NewNodeLister(i.GetIndexer())
}

type networkPolicyInformer struct{ cache.SharedIndexInformer }

func (i networkPolicyInformer) Informer() cache.SharedIndexInformer { return i.SharedIndexInformer }
func (i networkPolicyInformer) Lister() networkinglisters.NetworkPolicyLister {
	return networkinglisters.NewNetworkPolicyLister(i.GetIndexer())
}

type cnpInformer struct{ cache.SharedIndexInformer }

func (i cnpInformer) Informer() cache.SharedIndexInformer { return i.SharedIndexInformer }
func (i cnpInformer) Lister() cnplisters.ClusterNetworkPolicyLister {
	return cnplisters.NewClusterNetworkPolicyLister(i.GetIndexer())
}

func newInformer(example runtime.Object) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(&cache.ListWatch{}, example, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// Masks an evaluator's verdicts in one direction: it answers "next" there, as an evaluator
// with no policy for the packet does, so the engine's verdict is the other direction's.
type egressOnly struct{ api.PolicyEvaluator }

func (egressOnly) EvaluateIngress(context.Context, *network.Packet, *api.PodInfo, *api.PodInfo) (api.Verdict, error) {
	return api.VerdictNext, nil
}

type ingressOnly struct{ api.PolicyEvaluator }

func (ingressOnly) EvaluateEgress(context.Context, *network.Packet, *api.PodInfo, *api.PodInfo) (api.Verdict, error) {
	return api.VerdictNext, nil
}

// defaultPolicy is a NetworkPolicy as the API server stores it, and so as the agent's informer
// hands it over: defaulted (k8s.io/kubernetes/pkg/apis/networking/v1 SetDefaults_NetworkPolicy
// and SetDefaults_NetworkPolicyPort: policyTypes Ingress, and Egress when the policy has egress
// rules; TCP for a port without a protocol), and without empty rule lists (an empty list is
// not stored, so it reads back absent). The engine tells an absent list (no traffic allowed)
// from an empty one (all traffic allowed), so `"ingress": []` must reach it as a stored policy
// would.
func defaultPolicy(policy *networkingv1.NetworkPolicy) {
	if len(policy.Spec.Ingress) == 0 {
		policy.Spec.Ingress = nil
	}
	if len(policy.Spec.Egress) == 0 {
		policy.Spec.Egress = nil
	}
	if len(policy.Spec.PolicyTypes) == 0 {
		policy.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(policy.Spec.Egress) != 0 {
			policy.Spec.PolicyTypes = append(policy.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
	defaultPorts := func(ports []networkingv1.NetworkPolicyPort) {
		for i := range ports {
			if ports[i].Protocol == nil {
				tcp := corev1.ProtocolTCP
				ports[i].Protocol = &tcp
			}
		}
	}
	for i := range policy.Spec.Ingress {
		defaultPorts(policy.Spec.Ingress[i].Ports)
	}
	for i := range policy.Spec.Egress {
		defaultPorts(policy.Spec.Egress[i].Ports)
	}
}

func parseIP(ip string) (net.IP, error) {
	parsed := net.ParseIP(ip)
	if parsed == nil {
		return nil, fmt.Errorf("%q is not an IP address", ip)
	}
	return parsed, nil
}

// pod is the running pod a peer with a namespace stands for.
func (p peer) pod(name string, ip net.IP) *corev1.Pod {
	ports := []corev1.ContainerPort{}
	for _, port := range p.Ports {
		protocol := corev1.Protocol(port.Protocol)
		if protocol == "" {
			protocol = corev1.ProtocolTCP // the API server's default
		}
		ports = append(ports, corev1.ContainerPort{Name: port.Name, ContainerPort: port.Port, Protocol: protocol})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace, Labels: p.PodLabels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Ports: ports}}},
		Status: corev1.PodStatus{
			Phase:  corev1.PodRunning,
			PodIP:  ip.String(),
			PodIPs: []corev1.PodIP{{IP: ip.String()}},
		},
	}
}

// judge runs one traffic case through the engine.
func (s scenario) judge(t traffic) (verdict, error) {
	src, err := parseIP(t.Source.IP)
	if err != nil {
		return verdict{}, fmt.Errorf("source: %w", err)
	}
	dst, err := parseIP(t.Destination.IP)
	if err != nil {
		return verdict{}, fmt.Errorf("destination: %w", err)
	}

	pods := podInformer{newInformer(&corev1.Pod{})}
	namespaces := namespaceInformer{newInformer(&corev1.Namespace{})}
	nodes := nodeInformer{newInformer(&corev1.Node{})}
	networkPolicies := networkPolicyInformer{newInformer(&networkingv1.NetworkPolicy{})}
	cnps := cnpInformer{newInformer(&npav1alpha2.ClusterNetworkPolicy{})}

	// As cmd/kube-network-policies/npa-v1alpha2 wires them (without NRI, whose resolver asks
	// the container runtime, and without a DNS cache: domainNames peers match nothing).
	resolver, err := podinfo.NewInformerResolver(pods.Informer())
	if err != nil {
		return verdict{}, err
	}
	provider := podinfo.NewInformerProvider(pods, namespaces, nodes, []podinfo.IPResolver{resolver})
	evaluators := []api.PolicyEvaluator{
		cnpplugin.NewClusterNetworkPolicy(npav1alpha2.AdminTier, cnps, nil, nodes.Lister()),
		networkpolicy.NewStandardNetworkPolicy("node", namespaces, pods, networkPolicies),
		cnpplugin.NewClusterNetworkPolicy(npav1alpha2.BaselineTier, cnps, nil, nodes.Lister()),
	}

	add := func(store cache.Store, obj any) error { return store.Add(obj) }
	for _, cnp := range s.ClusterNetworkPolicies {
		if err := add(cnps.GetStore(), cnp); err != nil {
			return verdict{}, err
		}
	}
	for _, policy := range s.Policies {
		if err := add(networkPolicies.GetStore(), policy); err != nil {
			return verdict{}, err
		}
	}
	for _, node := range s.Nodes {
		if err := add(nodes.GetStore(), node); err != nil {
			return verdict{}, err
		}
	}
	peers := map[string]peer{}
	for _, end := range []struct {
		name string
		peer peer
		ip   net.IP
	}{{"source", t.Source, src}, {"destination", t.Destination, dst}} {
		if end.peer.Namespace == "" {
			continue
		}
		if other, seen := peers[end.ip.String()]; seen {
			// Traffic to itself: one pod.
			if !reflect.DeepEqual(other, end.peer) {
				return verdict{}, fmt.Errorf("source and destination share IP %s but differ", end.ip)
			}
			continue
		}
		peers[end.ip.String()] = end.peer
		if err := add(pods.GetStore(), end.peer.pod(end.name, end.ip)); err != nil {
			return verdict{}, err
		}
		obj, exists, err := namespaces.GetStore().GetByKey(end.peer.Namespace)
		if err != nil {
			return verdict{}, err
		}
		if exists {
			if !reflect.DeepEqual(obj.(*corev1.Namespace).Labels, end.peer.NamespaceLabels) {
				return verdict{}, fmt.Errorf("namespace %s has different labels at the source and the destination", end.peer.Namespace)
			}
			continue
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: end.peer.Namespace, Labels: end.peer.NamespaceLabels}}
		if err := add(namespaces.GetStore(), ns); err != nil {
			return verdict{}, err
		}
	}

	family := corev1.IPv4Protocol
	if src.To4() == nil {
		family = corev1.IPv6Protocol
	}
	packet := network.Packet{
		Family:  family,
		SrcIP:   src,
		DstIP:   dst,
		Proto:   corev1.Protocol(t.Protocol),
		DstPort: t.Port,
	}
	evaluate := func(evaluators []api.PolicyEvaluator) (bool, error) {
		return networkpolicy.NewPolicyEngine(provider, evaluators).EvaluatePacket(context.Background(), &packet)
	}
	var out verdict
	if out.Allowed, err = evaluate(evaluators); err != nil {
		return verdict{}, err
	}
	var egress, ingress []api.PolicyEvaluator
	for _, e := range evaluators {
		egress = append(egress, egressOnly{e})
		ingress = append(ingress, ingressOnly{e})
	}
	if out.Egress, err = evaluate(egress); err != nil {
		return verdict{}, err
	}
	if out.Ingress, err = evaluate(ingress); err != nil {
		return verdict{}, err
	}
	return out, nil
}

func (s scenario) decide() (map[string]verdict, error) {
	for _, p := range s.Policies {
		defaultPolicy(p)
	}
	out := map[string]verdict{}
	for _, t := range s.Traffic {
		v, err := s.judge(t)
		if err != nil {
			return nil, fmt.Errorf("traffic %q: %w", t.Name, err)
		}
		out[t.Name] = v
	}
	return out, nil
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "knp-decider: "+format+"\n", args...)
	os.Exit(2)
}

// decideNamed decides a scenario, naming it on an error or a panic.
func decideNamed(name string, s scenario) (verdicts map[string]verdict) {
	defer func() {
		if r := recover(); r != nil {
			fail("%s: %v", name, r)
		}
	}()
	verdicts, err := s.decide()
	if err != nil {
		fail("%s: %v", name, err)
	}
	return verdicts
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("reading input: %v", err)
	}
	var out any
	if in.Scenarios == nil {
		out = decideNamed("scenario", in.scenario)
	} else {
		verdicts := make([]map[string]verdict, 0, len(*in.Scenarios))
		for i, s := range *in.Scenarios {
			verdicts = append(verdicts, decideNamed(fmt.Sprintf("scenario %d", i), s))
		}
		out = verdicts
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("writing output: %v", err)
	}
}
