#!/usr/bin/env python3
"""Ports network-policy-api's ClusterNetworkPolicy conformance tests into
crates/nimbus/tests/data/cnp_conformance.json, the vectors crates/nimbus/tests/cnp_conformance.rs
runs through tools/knp-decider.

Source: sigs.k8s.io/network-policy-api at the version tools/knp-decider's go.mod pins (v0.3.0),
from the Go module cache (`go mod download`, checked against tools/knp-decider/go.sum):
- the policies: conformance/base/{admin_tier,baseline_tier,api_integration}/*.yaml, as each
  conformance test's `Manifests` names them, rendered as the suite renders them (its default
  host-network ports, 34345 to 34352);
- the cluster: conformance/base/manifests.yaml (namespaces and their labels, the StatefulSets'
  pods, their labels and container ports);
- the expectations: conformance/tests/*.go, read statement by statement: every
  `kubernetes.PokeServer` is a traffic cell (client pod → server pod's IP, protocol, port,
  shouldConnect), in the state the statements before it left the cluster in (CNP patches,
  NetworkPolicy deletion, namespace and pod label changes, t.Cleanup at a subtest's end). A
  statement the reader does not know stops the script: a new upstream version must be read
  again, not guessed at.

The cluster as the vectors model it:
- each conformance pod has a stable fake IP, 10.244.<namespace>.<10 + ordinal> (gryffindor 1,
  slytherin 2, hufflepuff 3, ravenclaw 4), its template's labels plus the StatefulSet
  controller's `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index` (not
  `controller-revision-hash`: no policy reads it and its value is random), and its containers'
  ports (web 80/TCP, dns 53/UDP), for the named-port cases;
- namespaces carry `kubernetes.io/metadata.name` (the API server sets it) and their manifest
  labels;
- two nodes, kind-worker 172.18.0.2 and kind-worker2 172.18.0.3 (InternalIP, labels
  kubernetes.io/os=linux, kubernetes.io/arch=amd64, kubernetes.io/hostname), each vector's
  "nodes"; the host-network centaur-<n> pods (forbidden-forrest) run on the n-th, so a probe
  to centaur-<n> is a peer without a namespace at that node's address (a host-network pod is
  not a pod to the policies: its IP is the node's).
- ClusterNetworkPolicies are written as policy.networking.k8s.io/v1alpha2, the version
  kube-network-policies reads: the suite's manifests are v1beta1, whose types are identical to
  v1alpha2's in v0.3.0 (apis/v1alpha2 and apis/v1beta1 differ in the package name and the
  storage-version marker only; the CRD serves both without conversion).
- NetworkPolicies are written as the API server stores them: a null podSelector is {}.

A vector is one subtest ("<ShortName>/<subtest title>"); were a subtest to patch a policy after
it has probed, the probes after the patch would form another vector ("... [2]") (none of
v0.3.0's does). Every conformance test of those directories is ported, the extended features'
(named ports, node peers) too.

Skipped: nothing. v0.3.0's admin_tier, baseline_tier and api_integration tests use no
domainNames peers, and the node peers are modelled (above). What a vector does not say: a
denied probe must also time out in the suite (dropped, not refused), which an allow/deny
verdict does not tell apart; and a probe is a connection's first packet (replies are the
dataplane's connection tracking's).

Usage: python3 hack/port-cnp-conformance.py   (rewrites the JSON file)
"""

import copy
import json
import os
import re
import subprocess
import sys

import yaml  # PyYAML, Debian's python3-yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates/nimbus/tests/data/cnp_conformance.json")
MODULE = "sigs.k8s.io/network-policy-api"

# The suite's defaults (conformance/utils/suite/suite.go: HostNetworkPortRangeStart 34345,
# hostNetworkPortsAmount 8).
HOST_NETWORK_PORTS = list(range(34345, 34345 + 8))
NAMESPACE_OCTET = {"gryffindor": 1, "slytherin": 2, "hufflepuff": 3, "ravenclaw": 4}
NODES = [("kind-worker", "172.18.0.2"), ("kind-worker2", "172.18.0.3")]
NS_NAME = "kubernetes.io/metadata.name"


def die(msg):
    sys.exit(f"port-cnp-conformance: {msg}")


def module_dir():
    out = subprocess.run(
        ["go", "mod", "download", "-json", MODULE],
        cwd=os.path.join(ROOT, "tools/knp-decider"),
        env={**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    info = json.loads(out)
    print(f"{MODULE} {info['Version']} from {info['Dir']}", file=sys.stderr)
    return info["Dir"], info["Version"]


def render(text):
    """The suite's template data: {{ index .HostNetworkPorts N }}."""
    text = re.sub(
        r"\{\{\s*index \.HostNetworkPorts (\d+)\s*\}\}",
        lambda m: str(HOST_NETWORK_PORTS[int(m.group(1))]),
        text,
    )
    if "{{" in text:
        die("unrendered template left")
    return text


def load_yaml(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(render(f.read())) if d]


# --- the cluster ------------------------------------------------------------------------------


class Cluster:
    """Namespaces, pods and nodes of conformance/base/manifests.yaml."""

    def __init__(self, manifests):
        self.ns_labels = {}  # namespace -> labels
        self.pods = {}  # (namespace, name) -> {"ip", "labels", "ports", "host_network"}
        for doc in manifests:
            kind, meta = doc["kind"], doc["metadata"]
            if kind == "Namespace":
                self.ns_labels[meta["name"]] = {NS_NAME: meta["name"], **meta.get("labels", {})}
            elif kind == "StatefulSet":
                ns, spec = meta["namespace"], doc["spec"]
                template = spec["template"]
                ports = [
                    {"name": p["name"], "port": p["containerPort"], "protocol": p.get("protocol", "TCP")}
                    for c in template["spec"]["containers"]
                    for p in c.get("ports", [])
                    if "name" in p
                ]
                host_network = template["spec"].get("hostNetwork", False)
                for i in range(spec["replicas"]):
                    name = f"{meta['name']}-{i}"
                    labels = {
                        **template["metadata"]["labels"],
                        "statefulset.kubernetes.io/pod-name": name,
                        "apps.kubernetes.io/pod-index": str(i),
                    }
                    if host_network:
                        _, ip = NODES[i]
                    else:
                        house = labels["conformance-house"]
                        ip = f"10.244.{NAMESPACE_OCTET[house]}.{10 + i}"
                    pod = {"ip": ip, "labels": labels, "ports": ports, "host_network": host_network}
                    self.pods[(ns, name)] = pod
            else:
                die(f"unexpected {kind} in manifests.yaml")

    def peer(self, ns, name):
        pod = self.pods[(ns, name)]
        if pod["host_network"]:
            return {"ip": pod["ip"]}
        peer = {
            "ip": pod["ip"],
            "namespace": ns,
            "namespaceLabels": dict(sorted(self.ns_labels[ns].items())),
            "podLabels": dict(sorted(pod["labels"].items())),
        }
        if pod["ports"]:
            peer["ports"] = pod["ports"]
        return peer


def nodes():
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                },
            },
            "status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}]},
        }
        for name, ip in NODES
    ]


# --- reading the Go tests ---------------------------------------------------------------------


def strip_comments(src):
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c in "\"`":
            j = i + 1
            while src[j] != c:
                j += 2 if (c == '"' and src[j] == "\\") else 1
            out.append(src[i : j + 1])
            i = j + 1
        elif src.startswith("//", i):
            i = src.index("\n", i)
        elif src.startswith("/*", i):
            i = src.index("*/", i) + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching(src, open_at):
    """Index of the bracket closing the one at open_at (strings skipped)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack, i = [], open_at
    while True:
        c = src[i]
        if c == '"':
            i += 1
            while src[i] != '"':
                i += 2 if src[i] == "\\" else 1
        elif c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if stack.pop() != c:
                die(f"unbalanced {c!r}")
            if not stack:
                return i
        i += 1


def statements(body):
    """Top-level statements of a block body: newline-separated outside brackets, as written."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(body):
        c = body[i]
        if c == '"':
            i += 1
            while body[i] != '"':
                i += 2 if body[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c in "\n;" and depth == 0:
            if body[start:i].strip():
                out.append(body[start:i].strip())
            start = i + 1
        i += 1
    if body[start:].strip():
        out.append(body[start:].strip())
    return out


def norm(stmt):
    return " ".join(stmt.split())


def conformance_tests(src):
    """(ShortName, manifests, test body) of each suite.ConformanceTest in a file."""
    src = strip_comments(src)
    for m in re.finditer(r"var (\w+) = suite\.ConformanceTest\{", src):
        block = src[m.end() - 1 : matching(src, m.end() - 1) + 1]
        short = re.search(r'ShortName:\s*"(\w+)"', block).group(1)
        manifests = re.findall(r'"([^"]+\.yaml)"', re.search(r"Manifests:\s*\[\]string\{([^}]*)\}", block).group(1))
        t = re.search(r"Test: func\(t \*testing\.T, s \*suite\.ConformanceTestSuite\) \{", block)
        body = block[t.end() : matching(block, t.end() - 1)]
        yield short, manifests, body


Q = r'"([^"]*)"'
TIMEOUT = r"s\.TimeoutConfig\.GetTimeout"
RE = {
    # Matched as written (their bodies are blocks); the other statements with their white space
    # collapsed.
    "run": re.compile(r"^t\.Run\(" + Q + r",\s*func\(t \*testing\.T\)\s*\{(.*)\}\)$", re.S),
    "cleanup": re.compile(r"^t\.Cleanup\(func\(\)\s*\{(.*)\}\)$", re.S),
    "get_pod": re.compile(r"^(\w+) :?= kubernetes\.GetPod\(t, s\.Client, " + Q + ", " + Q + ", " + TIMEOUT + r"\)$"),
    "get_cnp": re.compile(r"^(\w+) :?= kubernetes\.GetClusterNetworkPolicy\(t, s\.Client, " + Q + ", " + TIMEOUT + r"\)$"),
    "deep_copy": re.compile(r"^(\w+) :?= (\w+)\.DeepCopy\(\)$"),
    "patch_cnp": re.compile(r"^kubernetes\.PatchClusterNetworkPolicy\(t, s\.Client, (\w+), (\w+), " + TIMEOUT + r"\)$"),
    "poke": re.compile(
        r"^kubernetes\.PokeServer\(t, s\.ClientSet, &s\.KubeConfig, "
        + Q + ", " + Q + ", " + Q
        + r", (\w+)\.Status\.PodIP, int32\((\d+|s\.HostNetworkPorts\[(\d+)\])\), s\.TimeoutConfig, (true|false)\)$"
    ),
    "set_label": re.compile(r"^kubernetes\.SetPodLabel\(t, s\.Client, " + Q + ", " + Q + r", (\w+), " + Q + ", " + TIMEOUT + r"\)$"),
    "remove_label": re.compile(r"^kubernetes\.RemovePodLabel\(t, s\.Client, " + Q + ", " + Q + r", (\w+), " + TIMEOUT + r"\)$"),
    "get_ns": re.compile(r"^(\w+) :?= kubernetes\.GetNamespace\(t, s\.Client, " + Q + ", " + TIMEOUT + r"\)$"),
    "ns_set_labels": re.compile(r"^(\w+)\.SetLabels\(map\[string\]string\{(.*)\}\)$"),
    "patch_ns": re.compile(r"^kubernetes\.PatchNamespace\(t, s\.Client, (\w+), (\w+), " + TIMEOUT + r"\)$"),
    # The NetworkPolicy deletion of CNPAdminTierIntegration, one statement at a time.
    "ctx": re.compile(r"^ctx, cancel := context\.WithTimeout\(context\.Background\(\), " + TIMEOUT + r"\)$"),
    "defer_cancel": re.compile(r"^defer cancel\(\)$"),
    "new_np": re.compile(r"^(\w+) := &networkingv1\.NetworkPolicy\{\}$"),
    "get_np": re.compile(
        r"^err :?= s\.Client\.Get\(ctx, client\.ObjectKey\{ Namespace: " + Q + r", Name: " + Q + r", \}, (\w+)\)$"
    ),
    "require": re.compile(r"^require\.NoErrorf\(t, err, " + Q + r"\)$"),
    "delete_np": re.compile(r"^err :?= s\.Client\.Delete\(ctx, (\w+)\)$"),
}


def go_string_map(text):
    pairs = re.findall(Q + r"\s*:\s*" + Q, text)
    if re.sub(Q + r"\s*:\s*" + Q, "", text).strip(" ,"):
        die(f"unread map literal {text!r}")
    return dict(pairs)


class Mutation:
    """The statements between `mutate := cnp.DeepCopy()` and the patch, on a copy of the CNP."""

    def __init__(self, cnp, pod_vars):
        self.cnp, self.vars, self.pod_vars = cnp, {}, pod_vars

    def rules(self, direction):
        return self.cnp["spec"][direction.lower()]

    def run(self, stmt):
        m = re.fullmatch(r"(\w+) := mutate(?:\.DeepCopy\(\))?\.Spec\.(Egress|Ingress)\[(\d+)\]", stmt)
        if m:
            self.vars[m.group(1)] = copy.deepcopy(self.rules(m.group(2))[int(m.group(3))])
            return
        m = re.fullmatch(r"mutate\.Spec\.(Egress|Ingress)\[(\d+)\] = mutate\.Spec\.(Egress|Ingress)\[(\d+)\]", stmt)
        if m and m.group(1) == m.group(3):
            rules = self.rules(m.group(1))
            rules[int(m.group(2))] = copy.deepcopy(rules[int(m.group(4))])
            return
        m = re.fullmatch(r"mutate\.Spec\.(Egress|Ingress)\[(\d+)\] = (\w+)", stmt)
        if m:
            self.rules(m.group(1))[int(m.group(2))] = copy.deepcopy(self.vars[m.group(3)])
            return
        m = re.fullmatch(r"(\w+) := " + Q, stmt)
        if m:
            self.vars[m.group(1)] = m.group(2)
            return
        m = re.fullmatch(
            r"(\w+)\.Protocols = \[\]api\.ClusterNetworkPolicyProtocol\{ \{ DestinationNamedPort: (\w+), \}, \}", stmt
        )
        if m:
            self.vars[m.group(1)]["protocols"] = [{"destinationNamedPort": self.vars[m.group(2)]}]
            return
        m = re.fullmatch(r"mutate\.Spec\.(Egress|Ingress)\[(\d+)\]\.Action = api\.ClusterNetworkPolicyRuleAction(\w+)", stmt)
        if m:
            self.rules(m.group(1))[int(m.group(2))]["action"] = m.group(3)
            return
        m = re.fullmatch(r"mutate\.Spec\.Priority = (\d+)", stmt)
        if m:
            self.cnp["spec"]["priority"] = int(m.group(1))
            return
        if stmt == "var mask string":
            return
        m = re.fullmatch(
            r"if net\.IsIPv4String\((\w+)\.Status\.PodIP\) \{ mask = \"/32\" \} else \{ mask = \"/128\" \}", stmt
        )
        if m:
            self.vars["mask"] = "/32" if ":" not in self.pod_vars[m.group(1)]["ip"] else "/128"
            return
        m = re.fullmatch(
            r"(\w+) := \[\]api\.ClusterNetworkPolicyEgressRule\{ \{ Name: " + Q + r", Action: " + Q
            + r", To: \[\]api\.ClusterNetworkPolicyEgressPeer\{ \{ Networks: \[\]api\.CIDR\{ (.*?) \}, \}, \}, \}, \}",
            stmt,
        )
        if m:
            cidr = r"api\.CIDR\((\w+)\.Status\.PodIP \+ mask\),"
            networks = m.group(4) + ","
            cidrs = [self.pod_vars[pod]["ip"] + self.vars["mask"] for pod in re.findall(cidr, networks)]
            if not cidrs or re.sub(cidr, "", networks).strip(" ,"):
                die(f"unread networks in {stmt!r}")
            self.vars[m.group(1)] = [{"name": m.group(2), "action": m.group(3), "to": [{"networks": cidrs}]}]
            return
        m = re.fullmatch(r"mutate\.Spec\.Egress = append\((\w+), mutate\.Spec\.Egress\.\.\.\)", stmt)
        if m:
            self.cnp["spec"]["egress"] = copy.deepcopy(self.vars[m.group(1)]) + self.rules("Egress")
            return
        die(f"unread mutation statement {stmt!r}")


class Run:
    """One conformance test: its policies, its cluster state, its vectors."""

    def __init__(self, short, manifests, module, cluster, consts):
        self.short, self.cluster, self.consts = short, copy.deepcopy(cluster), consts
        self.cnps, self.nps = {}, {}
        for manifest in manifests:
            for doc in load_yaml(os.path.join(module, "conformance", manifest)):
                if doc["kind"] == "ClusterNetworkPolicy":
                    if doc["apiVersion"] not in ("policy.networking.k8s.io/v1beta1", "policy.networking.k8s.io/v1alpha2"):
                        die(f"{doc['apiVersion']} in {manifest}")
                    doc["apiVersion"] = "policy.networking.k8s.io/v1alpha2"
                    self.cnps[doc["metadata"]["name"]] = doc
                elif doc["kind"] == "NetworkPolicy":
                    if doc["spec"].get("podSelector") is None:
                        doc["spec"]["podSelector"] = {}
                    self.nps[(doc["metadata"]["namespace"], doc["metadata"]["name"])] = doc
                else:
                    die(f"unexpected {doc['kind']} in {manifest}")
        self.vectors = []
        self.vars = {}  # Go variable -> ("pod", pod) | ("cnp", name) | ("ns", name) | ...

    def vector(self, title):
        name = f"{self.short}/{title}"
        n = sum(1 for v in self.vectors if v["name"] == name or v["name"].startswith(name + " ["))
        vector = {
            "name": name if n == 0 else f"{name} [{n + 1}]",
            "clusterNetworkPolicies": [copy.deepcopy(self.cnps[k]) for k in sorted(self.cnps)],
            "policies": [copy.deepcopy(self.nps[k]) for k in sorted(self.nps)],
            "nodes": nodes(),
            "traffic": [],
        }
        self.vectors.append(vector)
        return vector

    def block(self, stmts, title, scope):
        """Runs a block's statements; `scope` is the current vector holder (a one-element list)."""
        cleanups = []
        i = 0
        while i < len(stmts):
            raw = stmts[i]
            i += 1
            if m := RE["run"].match(raw):
                self.block(statements(m.group(2)), m.group(1), [None])
                continue
            if m := RE["cleanup"].match(raw):
                cleanups.append(statements(m.group(1)))
                continue
            stmt = norm(raw)
            if m := RE["get_pod"].match(stmt):
                ns, name = m.group(2), m.group(3)
                self.vars[m.group(1)] = ("pod", (ns, name))
                continue
            if m := RE["get_cnp"].match(stmt):
                self.vars[m.group(1)] = ("cnp", m.group(2))
                continue
            if (m := RE["deep_copy"].match(stmt)) and self.vars.get(m.group(2), ("",))[0] == "cnp":
                # Up to the patch: a mutation of the CNP as it is now.
                name = self.vars[m.group(2)][1]
                mutation = Mutation(
                    copy.deepcopy(self.cnps[name]),
                    {v: self.cluster.pods[k[1]] for v, k in self.vars.items() if k[0] == "pod"},
                )
                while not (p := RE["patch_cnp"].match(norm(stmts[i]))):
                    mutation.run(norm(stmts[i]))
                    i += 1
                if p.group(1) != m.group(2) or p.group(2) != m.group(1):
                    die(f"patch of {p.group(1)} with {p.group(2)} after copying {m.group(2)} to {m.group(1)}")
                i += 1
                self.cnps[name] = mutation.cnp
                self.changed(scope)
                continue
            if m := RE["get_ns"].match(stmt):
                self.vars[m.group(1)] = ("ns", m.group(2))
                continue
            if (m := RE["deep_copy"].match(stmt)) and self.vars.get(m.group(2), ("",))[0] == "ns":
                self.vars[m.group(1)] = ("ns-copy", self.vars[m.group(2)][1], None)
                continue
            if m := RE["ns_set_labels"].match(stmt):
                kind, ns, _ = self.vars[m.group(1)]
                self.vars[m.group(1)] = (kind, ns, go_string_map(m.group(2)))
                continue
            if m := RE["patch_ns"].match(stmt):
                _, ns = self.vars[m.group(1)]
                _, ns2, labels = self.vars[m.group(2)]
                if ns != ns2 or labels is None:
                    die(f"namespace patch {stmt!r}")
                # SetLabels replaces them; the API server keeps kubernetes.io/metadata.name.
                self.cluster.ns_labels[ns] = {NS_NAME: ns, **labels}
                continue
            if m := RE["set_label"].match(stmt):
                self.cluster.pods[(m.group(1), m.group(2))]["labels"][self.consts[m.group(3)]] = m.group(4)
                continue
            if m := RE["remove_label"].match(stmt):
                self.cluster.pods[(m.group(1), m.group(2))]["labels"].pop(self.consts[m.group(3)], None)
                continue
            if m := RE["poke"].match(stmt):
                self.poke(m, title, scope)
                continue
            if RE["ctx"].match(stmt) or RE["defer_cancel"].match(stmt) or RE["require"].match(stmt):
                continue
            if m := RE["new_np"].match(stmt):
                self.vars[m.group(1)] = ("np", None)
                continue
            if m := RE["get_np"].match(stmt):
                if (m.group(1), m.group(2)) not in self.nps:
                    die(f"no NetworkPolicy {m.group(1)}/{m.group(2)}")
                self.vars[m.group(3)] = ("np", (m.group(1), m.group(2)))
                continue
            if m := RE["delete_np"].match(stmt):
                del self.nps[self.vars[m.group(1)][1]]
                self.changed(scope)
                continue
            die(f"{self.short}/{title}: unread statement {stmt!r}")
        for cleanup in reversed(cleanups):  # t.Cleanup runs last-registered first
            self.block(cleanup, title, scope)

    def changed(self, scope):
        """The policies changed: later probes of this subtest need a vector of their own."""
        scope[0] = None

    def poke(self, m, title, scope):
        client_ns, client_pod, protocol, server_var = m.group(1), m.group(2), m.group(3), m.group(4)
        port = HOST_NETWORK_PORTS[int(m.group(6))] if m.group(6) else int(m.group(5))
        kind, (server_ns, server_pod) = self.vars[server_var]
        if kind != "pod":
            die(f"poke at {server_var}")
        if scope[0] is None:
            scope[0] = self.vector(title)
        traffic = scope[0]["traffic"]
        traffic.append(
            {
                "name": f"{len(traffic) + 1}: {client_pod} -> {server_pod} {protocol.upper()}/{port}",
                "source": self.cluster.peer(client_ns, client_pod),
                "destination": self.cluster.peer(server_ns, server_pod),
                "port": port,
                "protocol": protocol.upper(),
                "expected": m.group(7) == "true",
            }
        )


def dump(vectors):
    """JSON with one line per vector field item: a policy, a node, a traffic cell."""
    line = lambda v: json.dumps(v, separators=(",", ":"))  # noqa: E731
    out = []
    for v in vectors:
        fields = [f'"name":{line(v["name"])}']
        for key in ("clusterNetworkPolicies", "policies", "nodes", "traffic"):
            items = ",\n   ".join(line(item) for item in v[key])
            fields.append(f'"{key}":[\n   {items}\n  ]' if items else f'"{key}":[]')
        out.append("{\n  " + ",\n  ".join(fields) + "\n }")
    text = "[\n " + ",\n ".join(out) + "\n]\n"
    if json.loads(text) != vectors:
        die("dump does not round-trip")
    return text


def main():
    module, version = module_dir()
    tests_dir = os.path.join(module, "conformance/tests")
    cluster = Cluster(load_yaml(os.path.join(module, "conformance/base/manifests.yaml")))
    sources = {}
    for f in sorted(os.listdir(tests_dir)):
        if f.endswith(".go") and f != "main.go":
            with open(os.path.join(tests_dir, f)) as fh:
                sources[f] = fh.read()
    consts = dict(re.findall(r"^const (\w+) = " + Q, "\n".join(sources.values()), re.M))
    wanted = ("base/admin_tier/", "base/baseline_tier/", "base/api_integration/")
    vectors, ported = [], []
    for f, src in sources.items():
        for short, manifests, body in conformance_tests(src):
            if not all(m.startswith(wanted) for m in manifests):
                die(f"{short} uses {manifests}")
            run = Run(short, manifests, module, cluster, consts)
            run.block(statements(body), "", [None])
            if not run.vectors:
                die(f"{short}: no probes")
            vectors.extend(run.vectors)
            ported.append(short)
    cells = sum(len(v["traffic"]) for v in vectors)
    # Every probe of the sources is a cell (none lost to a statement read wrongly).
    probes = sum(strip_comments(src).count("kubernetes.PokeServer(") for src in sources.values())
    if cells != probes:
        die(f"{cells} traffic cells from {probes} PokeServer calls")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(dump(vectors))
    print(
        f"{len(ported)} conformance tests of {MODULE} {version}, {len(vectors)} vectors, {cells} traffic cells "
        f"-> {os.path.relpath(OUT, ROOT)}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
