//! Random bindings for the fuzz tests (`validate`/`translate` offline in `src/offline`, the
//! API server as their judge in `tests/server_oracle.rs`, a live operator in `tests/fuzz.rs`):
//! random names, namespaces, labels, selectors and `spec.cel` expressions, a chosen share made
//! invalid on purpose. The generator decides nothing about validity: it says which objects the
//! API server must judge for each piece the CRDs keep as plain text (see [`Case::probes`]).
#![allow(dead_code)] // each user takes a different part

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// splitmix64 (small, seeded, good enough to spread cases), with the chance in percent
/// that a generated piece is made invalid on purpose (chosen per case).
pub struct Rng {
    pub state: u64,
    pub noise: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed,
            noise: 0,
        }
    }
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    pub fn noisy(&mut self) -> bool {
        let noise = self.noise;
        self.chance(noise)
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    /// Each of `items` with even chance.
    pub fn subset<'a>(&mut self, items: &[&'a str]) -> Vec<&'a str> {
        items.iter().copied().filter(|_| self.chance(50)).collect()
    }
}

/// Characters valid inside every kind of name, and characters some or all reject (the
/// qualified-name extras, upper case, separators, blanks, control characters, unicode).
pub const INNER: &[char] = &['a', 'b', 'z', 'k', '0', '7', '-'];
pub const NOISE: &[char] = &[
    'A', 'Z', '_', '.', '/', ' ', '\u{1}', '\t', '\u{7}', '\u{e9}', '\u{3b1}', '%', '-', '.',
];

/// A string of one of `lengths` (or, when noisy, empty or of a length just over
/// `too_long`), starting and ending alphanumeric, with a noise character when noisy.
pub fn word(rng: &mut Rng, lengths: &[usize], too_long: usize) -> String {
    let len = if rng.noisy() {
        *rng.pick(&[0, too_long + 1, too_long + 2])
    } else {
        *rng.pick(lengths)
    };
    let mut out: Vec<char> = (0..len).map(|_| *rng.pick(INNER)).collect();
    if len > 0 {
        out[0] = *rng.pick(&['a', '1', 'q']);
        out[len - 1] = *rng.pick(&['z', '0', 'x']);
        if rng.noisy() {
            let at = rng.below(len);
            out[at] = *rng.pick(NOISE);
        }
        if len > 2 && rng.chance(20) {
            // Valid inside keys and values, not in DNS names: the callers' business.
            let at = 1 + rng.below(len - 2);
            out[at] = *rng.pick(&['_', '.', 'A']);
        }
    }
    out.into_iter().collect()
}

/// A DNS-1123 label, mostly valid.
pub fn dns_label(rng: &mut Rng) -> String {
    let w = word(rng, &[1, 2, 5, 13, 63], 63);
    if rng.noisy() {
        w
    } else {
        w.replace(['_', '.', 'A'], "-")
    }
}

/// A DNS-1123 subdomain, mostly valid: labels joined by dots, up to 253 (254) characters.
pub fn dns_name(rng: &mut Rng) -> String {
    let mut name = match rng.below(10) {
        0 => format!("{}.{}", dns_label(rng), dns_label(rng)),
        1 => {
            let last = if rng.noisy() { 62 } else { 61 };
            let abc = ["a", "b", "c"].map(|c| c.repeat(63)).join(".");
            format!("{abc}.{}", "d".repeat(last))
        }
        _ => dns_label(rng),
    };
    if rng.noisy() {
        name.push_str(rng.pick::<&str>(&[".", "-", "_x", "X", "..y"]));
    }
    name
}

pub fn label_key(rng: &mut Rng) -> String {
    const EDGE: &[&str] = &[
        "/a",
        "a/",
        "a/b/c",
        "Example.com/a",
        "a..b/c",
        "-a",
        "a-",
        "_a",
        "a_",
        ".a",
        "a.",
        "",
        "a b",
        "a\u{1}",
    ];
    if rng.noisy() && rng.chance(30) {
        return rng.pick(EDGE).to_string();
    }
    let name = word(rng, &[1, 3, 5, 8, 62, 63], 63);
    if rng.chance(30) {
        format!("{}/{name}", dns_name(rng))
    } else {
        name
    }
}

pub fn label_value(rng: &mut Rng) -> String {
    if rng.chance(10) {
        String::new()
    } else {
        word(rng, &[1, 2, 5, 8, 63], 63)
    }
}

pub fn labels(rng: &mut Rng, max: usize) -> BTreeMap<String, String> {
    (0..rng.below(max + 1))
        .map(|_| (label_key(rng), label_value(rng)))
        .collect()
}

pub fn requirement(rng: &mut Rng) -> LabelSelectorRequirement {
    let noisy = rng.noisy();
    let operator = if noisy && rng.chance(30) {
        rng.pick(&["in", "Equals", "", "exists", "Gt"]).to_string()
    } else {
        rng.pick(&["In", "NotIn", "Exists", "DoesNotExist"])
            .to_string()
    };
    let many = match operator.as_str() {
        _ if noisy => rng.below(3),
        "In" | "NotIn" => 1 + rng.below(3),
        _ => 0,
    };
    let values: Vec<String> = (0..many).map(|_| label_value(rng)).collect();
    LabelSelectorRequirement {
        key: label_key(rng),
        operator,
        values: (!values.is_empty() || rng.chance(10)).then_some(values),
    }
}

pub fn selector(rng: &mut Rng) -> LabelSelector {
    LabelSelector {
        match_labels: rng.chance(70).then(|| labels(rng, 3)),
        match_expressions: rng
            .chance(40)
            .then(|| (0..rng.below(3)).map(|_| requirement(rng)).collect()),
    }
}

/// One `spec.cel` expression, and the label-selector requirements it states (as the
/// generator wrote it, not as the product compiles it).
pub fn cel(rng: &mut Rng) -> (String, Vec<LabelSelectorRequirement>) {
    let (k, v, w) = (label_key(rng), label_value(rng), label_value(rng));
    let req = |key: &str, operator: &str, values: &[&String]| LabelSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).clone()).collect()),
    };
    match rng.below(7) {
        0 => (
            format!(r#"labels["{k}"] == "{v}""#),
            vec![req(&k, "In", &[&v])],
        ),
        1 => (
            format!(r#"labels["{k}"] != "{v}""#),
            vec![req(&k, "NotIn", &[&v])],
        ),
        2 => (
            format!(r#"labels["{k}"] in ["{v}", "{w}"]"#),
            vec![req(&k, "In", &[&v, &w])],
        ),
        3 => (
            format!(r#"!(labels["{k}"] in ["{v}"])"#),
            vec![req(&k, "NotIn", &[&v])],
        ),
        4 => (format!(r#""{k}" in labels"#), vec![req(&k, "Exists", &[])]),
        5 => (
            format!(r#"!("{k}" in labels)"#),
            vec![req(&k, "DoesNotExist", &[])],
        ),
        _ => {
            let other = label_key(rng);
            (
                format!(r#"labels["{k}"] == "{v}" && "{other}" in labels"#),
                vec![req(&k, "In", &[&v]), req(&other, "Exists", &[])],
            )
        }
    }
}

/// A NetworkPolicy selecting pods with `selector`: the API server's judgment of it is its
/// judgment of the selector's syntax (keys, values, operators and their value counts).
fn selector_probe(selector: &LabelSelector) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "selector-probe"},
        "spec": {"podSelector": selector},
    })
}

/// One generated binding with the SecurityIntent it references.
pub struct Case {
    pub intent: Value,
    pub binding: Value,
    /// Objects the API server judges for the pieces of the case the CRDs keep as plain text
    /// (dry-run in an existing namespace): a NetworkPolicy per label selector the binding
    /// states (its workload and node selectors, the requirements its `spec.cel` expressions
    /// state), and the Namespace the binding names, since a binding can only be created in a
    /// namespace that exists.
    pub probes: Vec<Value>,
}

impl Case {
    /// The intent and the binding, as a manifest file.
    pub fn manifest(&self) -> String {
        format!("{:#}\n---\n{:#}\n", self.intent, self.binding)
    }
}

/// A SecurityIntent named `name`: a non-sensitive catalog ID (`dnsManipulation` mostly),
/// `escapeToHost` with or without its parameter, and, when noisy, an unknown ID, an action the
/// CRD refuses, a parameter value out of range or an unknown parameter.
pub fn intent(rng: &mut Rng, name: &str) -> Value {
    let id = if rng.noisy() && rng.chance(30) {
        *rng.pick(&["dnsManipulaton", "DNSManipulation", ""])
    } else if rng.chance(70) {
        "dnsManipulation"
    } else {
        *rng.pick(&[
            "denyExternalNetworkAccess",
            "swDeploymentTools",
            "unAuthorizedSaTokenAccess",
            "preventExecutionFromTempOrLogsFolders",
            "escapeToHost",
        ])
    };
    let action = if rng.noisy() && rng.chance(30) {
        *rng.pick(&["block", "Deny", ""])
    } else {
        *rng.pick(&["Block", "Audit"])
    };
    let mut intent = json!({"id": id, "action": action});
    if id == "escapeToHost" && rng.chance(60) {
        let level = if rng.noisy() {
            *rng.pick(&["privileged", "Baseline", ""])
        } else {
            *rng.pick(&["baseline", "restricted"])
        };
        intent["params"]["psaLevel"] = json!([level]);
    }
    if rng.noisy() && rng.chance(20) {
        intent["params"]["colour"] = json!(["blue"]);
    }
    json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
        "metadata": {"name": name},
        "spec": {"intent": intent},
    })
}

/// A Namespace named `name`: the API server's judgment of a namespace name.
fn namespace_probe(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// A case whose binding references an intent named `dns` or at random ([`intent`]). A
/// namespaced binding goes to `namespace` when given, else to a random (mostly valid) one or
/// none; a cluster binding selects every namespace, or `namespace` when given, else some named
/// at random.
pub fn binding_case(rng: &mut Rng, namespace: Option<&str>) -> Case {
    // A quarter of the cases make only their intent noisy, so that the verdict on the case
    // hangs on the intent alone and is not masked by a broken binding.
    let intent_noise = rng.chance(25).then(|| *rng.pick(&[30, 60]));
    rng.noise = match intent_noise {
        Some(_) => 0,
        None => *rng.pick(&[0, 0, 1, 2, 5, 10, 30]),
    };
    let intent_name = if rng.chance(90) {
        "dns".to_owned()
    } else {
        dns_name(rng)
    };
    let name = dns_name(rng);
    let binding_labels = if rng.chance(20) {
        labels(rng, 2)
    } else {
        BTreeMap::new()
    };
    // Annotation keys follow the label-key rules; values are free.
    let annotations: BTreeMap<String, String> = if rng.chance(10) {
        let mut annotations = labels(rng, 2);
        annotations
            .values_mut()
            .for_each(|v| v.push_str(" free text: ?!"));
        annotations
    } else {
        BTreeMap::new()
    };
    let workload = rng.chance(90).then(|| selector(rng));
    let mut probes: Vec<Value> = workload.iter().map(selector_probe).collect();
    let (exprs, stated): (Vec<String>, Vec<_>) = (0..rng.below(3)).map(|_| cel(rng)).unzip();
    let cluster = rng.chance(30);
    let mut metadata = json!({"name": name, "labels": binding_labels, "annotations": annotations});
    let binding = if cluster {
        let node = rng.chance(20).then(|| labels(rng, 2));
        if let Some(n) = &node {
            probes.push(selector_probe(&LabelSelector {
                match_labels: Some(n.clone()),
                match_expressions: None,
            }));
        }
        // Names a cluster binding fans out to must be namespaces; the ones it excludes get
        // nothing, so no server ever sees them.
        let names: Vec<String> = match namespace {
            // On a live cluster, namespaces that exist.
            Some(ns) => vec![ns.to_owned()],
            None => (0..1 + rng.below(2)).map(|_| dns_label(rng)).collect(),
        };
        let ns_selector = match rng.below(4) {
            0 if namespace.is_some() => json!({"matchNames": names}),
            0 => {
                probes.extend(names.iter().map(|n| namespace_probe(n)));
                json!({"matchNames": names})
            }
            1 => json!({"matchNames": ["*"], "excludeNames": names}),
            _ => json!({"matchNames": ["*"]}),
        };
        // spec.cel is ignored on cluster bindings: what it states is not judged.
        json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "ClusterSecurityIntentBinding",
            "metadata": metadata,
            "spec": {"intents": [{"name": intent_name}], "cel": exprs, "selector": {
                "nsSelector": ns_selector,
                "workloadSelector": workload,
                "nodeSelector": node.map(|n| json!({"matchLabels": n})),
            }},
        })
    } else {
        let stated: Vec<_> = stated.into_iter().flatten().collect();
        if !stated.is_empty() {
            probes.push(selector_probe(&LabelSelector {
                match_labels: None,
                match_expressions: Some(stated),
            }));
        }
        match namespace {
            Some(ns) => metadata["namespace"] = json!(ns),
            None if rng.chance(80) => {
                let ns = dns_label(rng);
                probes.push(
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                );
                metadata["namespace"] = json!(ns);
            }
            None => {}
        }
        json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "SecurityIntentBinding",
            "metadata": metadata,
            "spec": {"intents": [{"name": intent_name}], "cel": exprs,
                     "selector": {"workloadSelector": workload}},
        })
    };
    rng.noise = intent_noise.unwrap_or(rng.noise);
    Case {
        intent: intent(rng, &intent_name),
        binding,
        probes,
    }
}
