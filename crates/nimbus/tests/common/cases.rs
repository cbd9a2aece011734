//! Random bindings for the fuzz tests (`validate`/`translate` offline in `src/offline.rs`, a
//! live operator in `tests/fuzz.rs`), each with what the API server would reject in it: random
//! names, namespaces, labels, selectors and `spec.cel` expressions, a chosen share made invalid
//! on purpose.
#![allow(dead_code)] // each user takes a different part

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use nimbus_core::validation::{
    OPERATORS, is_dns1123_label, is_dns1123_subdomain, is_qualified_name, is_valid_label_value,
};
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
        rng.pick(&OPERATORS).to_string()
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

/// One `spec.cel` expression; the keys and values it compiles to are added to `keys` and
/// `values`.
pub fn cel(rng: &mut Rng, keys: &mut Vec<String>, values: &mut Vec<String>) -> String {
    let (k, v, w) = (label_key(rng), label_value(rng), label_value(rng));
    let (term, vs, more_keys) = match rng.below(7) {
        0 => (format!(r#"labels["{k}"] == "{v}""#), vec![v], vec![]),
        1 => (format!(r#"labels["{k}"] != "{v}""#), vec![v], vec![]),
        2 => (
            format!(r#"labels["{k}"] in ["{v}", "{w}"]"#),
            vec![v, w],
            vec![],
        ),
        3 => (format!(r#"!(labels["{k}"] in ["{v}"])"#), vec![v], vec![]),
        4 => (format!(r#""{k}" in labels"#), vec![], vec![]),
        5 => (format!(r#"!("{k}" in labels)"#), vec![], vec![]),
        _ => {
            let other = label_key(rng);
            (
                format!(r#"labels["{k}"] == "{v}" && "{other}" in labels"#),
                vec![v],
                vec![other],
            )
        }
    };
    keys.push(k);
    keys.extend(more_keys);
    values.extend(vs);
    term
}

/// Whether the API server would accept every generated piece.
pub struct Oracle(pub Vec<String>);

impl Oracle {
    pub fn check(&mut self, what: &str, messages: Vec<String>) {
        if !messages.is_empty() {
            self.0.push(format!("{what}: {messages:?}"));
        }
    }
    pub fn labels(&mut self, labels: &BTreeMap<String, String>) {
        for (k, v) in labels {
            self.check(k, is_qualified_name(k));
            self.check(v, is_valid_label_value(v));
        }
    }
    pub fn selector(&mut self, s: &LabelSelector) {
        self.labels(s.match_labels.as_ref().unwrap_or(&BTreeMap::new()));
        for r in s.match_expressions.iter().flatten() {
            let values = r.values.as_deref().unwrap_or_default();
            let count_ok = match r.operator.as_str() {
                "In" | "NotIn" => !values.is_empty(),
                "Exists" | "DoesNotExist" => values.is_empty(),
                _ => false,
            };
            if !count_ok || !OPERATORS.contains(&r.operator.as_str()) {
                self.0.push(format!("operator {r:?}"));
            }
            self.check(&r.key, is_qualified_name(&r.key));
            for v in values {
                self.check(v, is_valid_label_value(v));
            }
        }
    }
}

/// One generated binding with the SecurityIntent it references.
pub struct Case {
    pub intent: Value,
    pub binding: Value,
    /// What the API server would reject; empty when it accepts both objects.
    pub problems: Vec<String>,
}

/// A case whose binding references a `dnsManipulation` intent (`dns`, or a random name). A
/// namespaced binding goes to `namespace` when given, else to a random (mostly valid) one or
/// none.
pub fn binding_case(rng: &mut Rng, namespace: Option<&str>) -> Case {
    rng.noise = *rng.pick(&[0, 0, 1, 2, 5, 10, 30]);
    let mut oracle = Oracle(Vec::new());
    let intent_name = if rng.chance(90) {
        "dns".to_owned()
    } else {
        dns_name(rng)
    };
    oracle.check("intent name", is_dns1123_subdomain(&intent_name));
    let name = dns_name(rng);
    oracle.check("binding name", is_dns1123_subdomain(&name));
    let binding_labels = if rng.chance(20) {
        labels(rng, 2)
    } else {
        BTreeMap::new()
    };
    oracle.labels(&binding_labels);
    let workload = rng.chance(90).then(|| selector(rng));
    if let Some(s) = &workload {
        oracle.selector(s);
    }
    let mut keys = Vec::new();
    let mut values = Vec::new();
    let exprs: Vec<String> = (0..rng.below(3))
        .map(|_| cel(rng, &mut keys, &mut values))
        .collect();
    let cluster = rng.chance(30);
    let mut metadata = json!({"name": name, "labels": binding_labels});
    let binding = if cluster {
        let node = rng.chance(20).then(|| labels(rng, 2));
        if let Some(n) = &node {
            oracle.labels(n);
        }
        // spec.cel is ignored on cluster bindings: its keys do not matter.
        json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "ClusterSecurityIntentBinding",
            "metadata": metadata,
            "spec": {"intents": [{"name": intent_name}], "cel": exprs, "selector": {
                "nsSelector": {"matchNames": ["*"]},
                "workloadSelector": workload,
                "nodeSelector": node.map(|n| json!({"matchLabels": n})),
            }},
        })
    } else {
        for k in &keys {
            oracle.check(k, is_qualified_name(k));
        }
        for v in &values {
            oracle.check(v, is_valid_label_value(v));
        }
        match namespace {
            Some(ns) => metadata["namespace"] = json!(ns),
            None if rng.chance(80) => {
                let ns = dns_label(rng);
                oracle.check("namespace", is_dns1123_label(&ns));
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
    let intent = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
        "metadata": {"name": intent_name},
        "spec": {"intent": {"id": "dnsManipulation", "action": "Block"}},
    });
    Case {
        intent,
        binding,
        problems: oracle.0,
    }
}
