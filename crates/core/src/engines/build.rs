//! What engine modules build their translations with: the rule being translated, native
//! names, metadata and objects, and what an engine gives back for a rule.

use super::translation::{Environment, PolicyInput, Problem};
use super::{Engine, MANAGED_BY, NativeKind};
use crate::exceptions::Excepted;
use crate::names;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::core::{DynamicObject, TypeMeta};
use nimbus_api::{NimbusRule, WORKLOAD_ALL_NAMESPACES, condition};
use serde_json::Value;
use std::collections::BTreeMap;

/// One rule being translated, with the key its objects are named after: its lowercase ID
/// (`-2`, `-3`... for further rules with the same ID).
pub(super) struct Rule<'a> {
    pub(super) spec: &'a NimbusRule,
    pub(super) key: &'a str,
}

impl Rule<'_> {
    pub(super) fn problem(&self, reason: &'static str, message: impl Into<String>) -> Problem {
        Problem::new(self.spec, reason, message)
    }

    /// The result of an engine asked for an intent it declares but has no translation of: the
    /// intent is reported unenforced instead of silently producing nothing.
    pub(super) fn untranslated(&self, engine: Engine) -> Output {
        Err(self.problem(
            condition::REASON_UNSUPPORTED_INTENT,
            format!(
                "{engine} has no translation of intent `{}` in this kind of policy",
                self.spec.id
            ),
        ))
    }
}

/// The namespaces a cluster policy reaches, as a namespace label selector: all of them, or
/// those it names, but the protected and the excluded ones.
pub(super) fn namespace_selector(policy: &PolicyInput, env: &Environment) -> Value {
    let namespaces = policy.namespaces.as_ref();
    let mut excluded: Vec<String> = env.protected_namespaces.iter().map(str::to_owned).collect();
    if let Some(names) = namespaces.and_then(|n| n.exclude_names.as_ref()) {
        excluded.extend(names.iter().cloned());
    }
    excluded.sort();
    excluded.dedup();
    let mut expressions = vec![serde_json::json!({
        "key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": excluded,
    })];
    let named = namespaces
        .and_then(|n| n.match_names.as_ref())
        .filter(|names| !names.iter().any(|n| n == WORKLOAD_ALL_NAMESPACES));
    if let Some(names) = named {
        expressions.push(serde_json::json!({
            "key": NAMESPACE_NAME_LABEL, "operator": "In", "values": names,
        }));
    }
    serde_json::json!({"matchExpressions": expressions})
}

/// The label every namespace carries with its own name, which namespace selectors match.
pub(super) const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// `<policy>-<suffix>`, shortened deterministically when longer than `max`.
pub(super) fn native_name(policy: &PolicyInput, suffix: &str, max: usize) -> String {
    names::fit(&format!("{}-{suffix}", policy.name), max)
}

/// The name of the `i`th of the objects one rule writes as `suffix` once per selector of
/// [`crate::exceptions::excluding`]: `<policy>-<suffix>` for the first, so that an exception's
/// coming and going updates it in place (and the others are pruned at its expiry), and
/// `<policy>-<suffix>-x<i>` for the others. Not `-<i>`: a policy's second rule of the same
/// intent is keyed `<id>-2`, and its object would take the name of the first rule's third.
pub(super) fn nth_name(policy: &PolicyInput, suffix: &str, i: usize) -> String {
    match i {
        0 => native_name(policy, suffix, names::MAX_NAME_LEN),
        // Room for `-x<i>`: i < 100 (below).
        _ => format!(
            "{}-x{i}",
            native_name(policy, suffix, names::MAX_NAME_LEN - 4)
        ),
    }
}

const _: () = assert!(
    crate::exceptions::MAX_SELECTORS < 100,
    "nth_name leaves room for -x99"
);

/// Metadata of a native object: its name and namespace, the managed-by annotation (plus
/// `extra_annotations`), the managed-by label (Nimbus sets none; the operator watches only
/// objects carrying it), and the controller reference to the policy.
pub(super) fn metadata(
    policy: &PolicyInput,
    engine: Engine,
    name: String,
    namespace: Option<String>,
    extra_annotations: &[(&str, &str)],
) -> ObjectMeta {
    let mut labels = BTreeMap::new();
    labels.insert(MANAGED_BY.to_owned(), engine.manager().to_owned());
    let mut annotations: BTreeMap<String, String> = extra_annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    annotations.insert(MANAGED_BY.into(), engine.manager().into());
    ObjectMeta {
        name: Some(name),
        namespace,
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: Some(vec![policy.owner.clone()]),
        ..Default::default()
    }
}

pub(super) fn object(
    kind: &'static NativeKind,
    metadata: ObjectMeta,
    body: Value,
) -> (&'static NativeKind, DynamicObject) {
    let object = DynamicObject {
        types: Some(TypeMeta {
            api_version: kind.api_version(),
            kind: kind.kind.into(),
        }),
        metadata,
        data: body,
    };
    (kind, object)
}

/// What an engine generates for one rule: its objects, and the problems that leave the rule
/// enforced only in part (a problem that leaves it unenforced is the engine's error instead).
#[derive(Default)]
pub(super) struct Emitted {
    pub(super) objects: Vec<(&'static NativeKind, DynamicObject)>,
    pub(super) warnings: Vec<Problem>,
}

impl From<Vec<(&'static NativeKind, DynamicObject)>> for Emitted {
    fn from(objects: Vec<(&'static NativeKind, DynamicObject)>) -> Self {
        Self {
            objects,
            warnings: Vec::new(),
        }
    }
}

pub(super) type Output = Result<Emitted, Problem>;

/// A label selector as engines write it: `{}` when it selects everything (no empty
/// `matchLabels: {}`), as Nimbus's Go types serialized it.
pub(super) fn selector_json(selector: &LabelSelector) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(labels) = selector.match_labels.as_ref().filter(|l| !l.is_empty()) {
        out.insert("matchLabels".into(), serde_json::json!(labels));
    }
    if let Some(exprs) = selector
        .match_expressions
        .as_ref()
        .filter(|e| !e.is_empty())
    {
        out.insert(
            "matchExpressions".into(),
            serde_json::to_value(exprs).unwrap_or_default(),
        );
    }
    Value::Object(out)
}

/// `matchLabels` of a selector that has no expressions; engines that select by labels only
/// cannot express the rest.
pub(super) fn labels_only(
    selector: &LabelSelector,
    rule: &Rule,
    engine: Engine,
) -> Result<BTreeMap<String, String>, Problem> {
    if selector
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(rule.problem(
            condition::REASON_UNSUPPORTED_SELECTOR,
            format!(
                "{engine} selects workloads by exact labels only; the selector has expressions"
            ),
        ));
    }
    Ok(selector.match_labels.clone().unwrap_or_default())
}

/// `selector` as CEL over the labels of the object being admitted (`object.metadata.labels`);
/// `None` when it selects everything.
pub(super) fn selector_cel(selector: &LabelSelector) -> Option<String> {
    let labels = "object.metadata.?labels.orValue({})";
    let literal = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let values = |v: &Option<Vec<String>>| {
        let quoted: Vec<String> = v.iter().flatten().map(|v| literal(v)).collect();
        format!("[{}]", quoted.join(", "))
    };
    let mut terms: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{labels}[?{}] == optional.of({})", literal(k), literal(v)))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let key = literal(&e.key);
        terms.push(match e.operator.as_str() {
            "In" => format!("{labels}[?{key}].orValue(null) in {}", values(&e.values)),
            "NotIn" => format!("!({labels}[?{key}].orValue(null) in {})", values(&e.values)),
            "Exists" => format!("{key} in {labels}"),
            // DoesNotExist (the API server admits no other operator).
            _ => format!("!({key} in {labels})"),
        });
    }
    (!terms.is_empty()).then(|| terms.join(" && "))
}

/// The exceptions in force for `rule`'s intent on `policy`'s workloads.
pub(super) fn excepted<'p>(policy: &'p PolicyInput, rule: &Rule) -> Vec<&'p Excepted> {
    policy
        .exceptions
        .iter()
        .filter(|e| e.intents.contains(&rule.spec.id))
        .collect()
}

/// Of the exceptions in force for `rule`'s intent, those an engine selecting pods by labels
/// only can leave out: not those naming workloads, whose siblings with the same labels it
/// cannot tell apart (it keeps enforcing on them; `translate` says so).
pub(super) fn by_labels<'p>(policy: &'p PolicyInput, rule: &Rule) -> Vec<&'p Excepted> {
    use crate::exceptions::workloads::{Reach, honoured};
    excepted(policy, rule)
        .into_iter()
        .filter(|e| honoured(Reach::Labels, e))
        .collect()
}

/// CEL true for an object `excepted` lets out: in an exception's namespace, selected by it,
/// and, where it names workloads, one of them or made by one
/// ([`crate::exceptions::workloads::cel`]). `None` when there is no exception.
pub(super) fn excepted_cel(excepted: &[&Excepted]) -> Option<String> {
    let literal = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let each: Vec<String> = excepted
        .iter()
        .map(|e| {
            let namespace = format!(
                "object.metadata.?namespace.orValue('') == {}",
                literal(&e.namespace)
            );
            let terms: Vec<String> = [
                Some(namespace),
                selector_cel(&e.selector),
                crate::exceptions::workloads::cel(&e.workloads),
            ]
            .into_iter()
            .flatten()
            .collect();
            format!("({})", terms.join(" && "))
        })
        .collect();
    (!each.is_empty()).then(|| each.join(" || "))
}
