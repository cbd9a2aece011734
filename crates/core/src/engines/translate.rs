//! Translation: a NimbusPolicy or ClusterNimbusPolicy, plus what the cluster looks like,
//! becomes the native objects every active engine wants, and the problems that keep an intent
//! from being enforced.

use super::{
    AUDIT, AuditForm, DEFAULT_K8TLS_IMAGE, DEFAULT_K8TLS_NAMESPACE, DEFAULT_SANDBOX_CLUSTER_ROLES,
    Engine, KyvernoApi, MANAGED_BY, NativeKind, Preference, VirtualPatches, enforcing,
};
use crate::intents::{self, BindingKind, Origin};
use crate::names;
use crate::namespaces::ProtectedNamespaces;
use crate::objects::controller_reference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::core::{DynamicObject, TypeMeta};
use kube::{Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NamespaceSelector, NimbusPolicy, NimbusRule,
    condition,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The engine-neutral policy being translated (a NimbusPolicy or a ClusterNimbusPolicy).
#[derive(Debug, Clone)]
pub struct PolicyInput<'a> {
    pub origin: Origin,
    pub name: String,
    /// `None` for a ClusterNimbusPolicy.
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Controller reference every generated object carries.
    pub owner: OwnerReference,
    /// Pods (or Deployments) the rules apply to.
    pub selector: LabelSelector,
    /// Namespaces of a ClusterNimbusPolicy.
    pub namespaces: Option<NamespaceSelector>,
    pub rules: &'a [NimbusRule],
    /// Sensitive intent IDs the binding's author accepted (its allow-sensitive annotation,
    /// carried over to the policy); others are not enforced.
    pub allowed_sensitive: BTreeSet<String>,
}

impl<'a> PolicyInput<'a> {
    /// A NimbusPolicy; its origin follows from its controlling owner. `uid` is the policy's
    /// (offline callers have none and pass a placeholder).
    pub fn namespaced(np: &'a NimbusPolicy, uid: &str) -> Self {
        let from_cluster_binding = np.owner_references().iter().any(|o| {
            o.controller == Some(true) && o.kind == ClusterSecurityIntentBinding::kind(&())
        });
        Self {
            origin: if from_cluster_binding {
                Origin::ClusterBindingNamespace
            } else {
                Origin::Binding
            },
            name: np.name_any(),
            namespace: np.namespace(),
            labels: np.labels().clone(),
            owner: controller_reference::<NimbusPolicy>(&np.name_any(), uid),
            selector: np.spec.selector.clone(),
            namespaces: None,
            rules: &np.spec.rules,
            allowed_sensitive: intents::allowed_sensitive(np.annotations()),
        }
    }

    pub fn cluster(cwnp: &'a ClusterNimbusPolicy, uid: &str) -> Self {
        Self {
            origin: Origin::Cluster,
            name: cwnp.name_any(),
            namespace: None,
            labels: cwnp.labels().clone(),
            owner: controller_reference::<ClusterNimbusPolicy>(&cwnp.name_any(), uid),
            selector: cwnp.spec.workload_selector.clone().unwrap_or_default(),
            namespaces: cwnp.spec.ns_selector.clone(),
            rules: &cwnp.spec.rules,
            allowed_sensitive: intents::allowed_sensitive(cwnp.annotations()),
        }
    }
}

/// What the translators need to know about the cluster and the operator's settings.
#[derive(Debug, Clone)]
pub struct Environment {
    /// `spec.podCIDR(s)` of every node, for the NetworkPolicy engine.
    pub node_pod_cidrs: BTreeSet<String>,
    /// Namespace of the k8tls CronJobs.
    pub k8tls_namespace: String,
    /// Whether that namespace exists (k8tls needs its ServiceAccount and ConfigMaps there).
    pub k8tls_namespace_exists: bool,
    /// Image of the k8tls scanner.
    pub k8tls_image: String,
    pub virtual_patches: VirtualPatches,
    /// The only ClusterRoles namespaceSandbox may grant (the operator's RBAC `bind` grant
    /// must cover the same names).
    pub sandbox_cluster_roles: BTreeSet<String>,
    /// Namespaces cluster bindings never reach; cluster-wide admission rules exclude them.
    pub protected_namespaces: ProtectedNamespaces,
    /// Which of Kyverno's policy APIs the Kyverno engine writes in.
    pub kyverno: KyvernoApi,
}

impl Default for Environment {
    fn default() -> Self {
        Self {
            node_pod_cidrs: BTreeSet::new(),
            k8tls_namespace: DEFAULT_K8TLS_NAMESPACE.to_owned(),
            k8tls_namespace_exists: true,
            k8tls_image: DEFAULT_K8TLS_IMAGE.to_owned(),
            virtual_patches: VirtualPatches::NotConfigured,
            sandbox_cluster_roles: DEFAULT_SANDBOX_CLUSTER_ROLES
                .iter()
                .map(|r| (*r).to_owned())
                .collect(),
            protected_namespaces: ProtectedNamespaces::default(),
            kyverno: KyvernoApi::default(),
        }
    }
}

/// Which engines may act: switched on by configuration, and with their CRDs installed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineSet {
    pub enabled: BTreeSet<Engine>,
    pub installed: BTreeSet<Engine>,
    /// Engines switched off here whose objects an external adapter reports in the policy's
    /// status (Nimbus's adapter contract): they count as enforcing.
    pub external: BTreeSet<Engine>,
    /// Which of the engines of one mechanism writes ([`Preference`]).
    pub preference: Preference,
    /// Optional kinds ([`super::EngineSpec::optional_kinds`]) the cluster does not serve.
    pub unserved: BTreeSet<&'static NativeKind>,
}

impl EngineSet {
    /// Every engine enabled and installed (offline translation).
    pub fn all() -> Self {
        Self {
            enabled: Engine::ALL.into(),
            installed: Engine::ALL.into(),
            ..Self::default()
        }
    }

    pub fn active(&self, engine: Engine) -> bool {
        self.enabled.contains(&engine) && self.installed.contains(&engine)
    }

    /// Whether `engine` acts on policies of `origin`: it is active and no engine preferred to
    /// it writes in its place.
    pub fn acts(&self, engine: Engine, origin: Origin) -> bool {
        self.active(engine) && !self.preference.stands_by(engine, origin, self)
    }
}

/// One generated native object.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// Index of the rule (in the policy's `rules`) the object enforces.
    pub rule: usize,
    pub engine: Engine,
    pub kind: &'static NativeKind,
    pub object: DynamicObject,
}

impl Generated {
    /// The policy-status entry: `Kind/name`, or `namespace/CronJob/name` for CronJobs (the
    /// only kind Nimbus lists with its namespace).
    pub fn entry(&self) -> String {
        let name = self.object.name_any();
        match (&self.kind.entry, self.object.namespace()) {
            (&"CronJob", Some(ns)) => format!("{ns}/CronJob/{name}"),
            (entry, _) => format!("{entry}/{name}"),
        }
    }
}

/// Why an intent is not (fully) enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub intent: String,
    /// A condition reason from [`condition`].
    pub reason: &'static str,
    pub message: String,
    /// Whether the intent is left without any enforcement (as opposed to enforced by fewer
    /// engines than it could be).
    pub blocking: bool,
}

impl Problem {
    fn new(rule: &NimbusRule, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            intent: rule.id.clone(),
            reason,
            message: message.into(),
            blocking: true,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Translation {
    pub objects: Vec<Generated>,
    pub problems: Vec<Problem>,
}

/// Translates `policy` with every active engine, in rule order and, within a rule, engine
/// order. Each rule is checked against the catalog: unknown IDs, bad parameters and intents
/// no active engine can enforce become problems.
pub fn translate(policy: &PolicyInput, env: &Environment, engines: &EngineSet) -> Translation {
    let mut out = Translation::default();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, rule) in policy.rules.iter().enumerate() {
        // Names derive from `<policy>-<lowercase id>`; a second rule with the same ID (another
        // intent of the same kind) gets `-2`, and so on, so no two rules share an object.
        let count = seen.entry(rule.id.as_str()).or_default();
        *count += 1;
        let key = match *count {
            1 => rule.id.to_lowercase(),
            n => format!("{}-{n}", rule.id.to_lowercase()),
        };
        out.problems
            .extend(check_rule(rule, policy.origin.binding_kind(), engines));
        let Some(spec) = intents::intent(&rule.id) else {
            continue;
        };
        // Reported only where an engine would act: a cluster binding's namespace policies
        // carry assessTLS too, but only its cluster policy runs the scanner.
        let acts = Engine::ALL
            .into_iter()
            .any(|e| engines.acts(e, policy.origin) && e.handles(spec.id, policy.origin));
        if acts && let Some(problem) = sensitive_problem(rule, &policy.allowed_sensitive) {
            out.problems.push(problem);
            continue;
        }
        let mut enforced = false;
        let mut failures = Vec::new();
        let mut no_audit_form = Vec::new();
        for engine in Engine::ALL {
            if !engines.acts(engine, policy.origin) || !engine.handles(spec.id, policy.origin) {
                continue;
            }
            if rule.rule.action == AUDIT
                && engine
                    .spec()
                    .enforcing(&rule.id)
                    .is_some_and(|e| e.audit == AuditForm::None)
            {
                no_audit_form.push(engine.name());
                continue;
            }
            let rule = Rule {
                spec: rule,
                key: &key,
            };
            match (engine.spec().translate)(policy, &rule, env)
                .and_then(|emitted| served(emitted, engine, &rule, engines))
            {
                Ok(emitted) => {
                    enforced |= !emitted.objects.is_empty();
                    out.problems.extend(emitted.warnings);
                    out.objects
                        .extend(emitted.objects.into_iter().map(|(kind, object)| Generated {
                            rule: index,
                            engine,
                            kind,
                            object,
                        }))
                }
                Err(problem) => failures.push(problem),
            }
        }
        if !no_audit_form.is_empty() {
            failures.push(Problem::new(
                rule,
                condition::REASON_NO_AUDIT_FORM,
                format!(
                    "intent `{}` is audited: {} cannot report without enforcing, so {} nothing \
                     for it",
                    rule.id,
                    no_audit_form.join(", "),
                    if no_audit_form.len() == 1 {
                        "it writes"
                    } else {
                        "they write"
                    },
                ),
            ));
        }
        // An engine that cannot act leaves the intent unenforced only if no other engine
        // enforces it (KubeArmor cannot express a selector NetworkPolicy can, for example).
        out.problems.extend(failures.into_iter().map(|p| Problem {
            blocking: !enforced,
            ..p
        }));
    }
    out
}

/// An engine's objects for a rule, unless one is of an optional kind the API server does not
/// serve: then the engine does not enforce the rule, and says why.
fn served(emitted: Emitted, engine: Engine, rule: &Rule, engines: &EngineSet) -> Output {
    match emitted
        .objects
        .iter()
        .find(|(kind, _)| engines.unserved.contains(kind))
    {
        Some((kind, _)) => Err(rule.problem(
            condition::REASON_ENGINE_NOT_INSTALLED,
            format!(
                "{engine} enforces intent `{}` with a {}, which the API server does not serve \
                 ({})",
                rule.spec.id,
                kind.kind,
                kind.api_version()
            ),
        )),
        None => Ok(emitted),
    }
}

/// What keeps `rule`, bound by a binding of `kind`, from being enforced before any engine runs:
/// what [`check_intent`] finds, or no active engine for it.
pub fn check_rule(rule: &NimbusRule, kind: BindingKind, engines: &EngineSet) -> Vec<Problem> {
    let mut problems = check_intent(rule);
    if let Some(spec) = intents::intent(&rule.id) {
        problems.extend(coverage(spec, rule, kind, engines));
    }
    problems
}

/// What is wrong with an intent whatever binds it: an ID missing from the catalog, or bad
/// parameters.
pub fn check_intent(rule: &NimbusRule) -> Vec<Problem> {
    if intents::intent(&rule.id).is_none() {
        return vec![Problem::new(
            rule,
            condition::REASON_UNSUPPORTED_INTENT,
            format!("intent `{}` is not in the catalog", rule.id),
        )];
    }
    intents::check_params(rule)
        .into_iter()
        .map(|p| Problem {
            blocking: p.blocking,
            ..Problem::new(
                rule,
                condition::REASON_INVALID_PARAMETER,
                format!("intent `{}`: {p}", rule.id),
            )
        })
        .collect()
}

/// Why `rule` is not enforced when its intent is sensitive and `allowed` (the binding's
/// allow-sensitive annotation) does not list it. Binding controllers call this with the
/// binding's own annotations to report it on the binding.
pub fn sensitive_problem(rule: &NimbusRule, allowed: &BTreeSet<String>) -> Option<Problem> {
    let spec = intents::intent(&rule.id)?;
    (spec.sensitive && !allowed.contains(&rule.id)).then(|| {
        Problem::new(
            rule,
            condition::REASON_SENSITIVE_INTENT_NOT_ALLOWED,
            format!(
                "intent `{}` is sensitive and not enforced: the binding must list it in its \
                 {} annotation",
                rule.id,
                nimbus_api::ALLOW_SENSITIVE_ANNOTATION
            ),
        )
    })
}

/// Problems with who enforces `spec` for a binding of `kind`: nobody can (wrong binding kind),
/// every engine that could is switched off or not installed, or only some are.
fn coverage(
    spec: &intents::IntentSpec,
    rule: &NimbusRule,
    kind: BindingKind,
    engines: &EngineSet,
) -> Vec<Problem> {
    let candidates = enforcing(spec.id, Some(kind));
    if candidates.is_empty() {
        let other = match kind {
            BindingKind::Namespaced => "a ClusterSecurityIntentBinding",
            BindingKind::Cluster => "a SecurityIntentBinding",
        };
        return vec![Problem::new(
            rule,
            condition::REASON_UNSUPPORTED_INTENT,
            format!("intent `{}` is enforced only through {other}", rule.id),
        )];
    }
    // Of one mechanism, only the engine preferred at an origin is a candidate there; it stands
    // in for those preferred to it that are not in force, which the status says.
    let mut replaced: Vec<(Engine, Engine)> = Vec::new();
    for origin in kind.origins() {
        let Some(chosen) = engines.preference.in_force(*origin, engines) else {
            continue;
        };
        if !chosen.handles(spec.id, *origin) {
            continue;
        }
        for engine in engines.preference.preferred_to(chosen, *origin) {
            if engine.handles(spec.id, *origin) && !replaced.contains(&(engine, chosen)) {
                replaced.push((engine, chosen));
            }
        }
    }
    let candidates: BTreeSet<Engine> = candidates
        .into_iter()
        .filter(|e| {
            !kind
                .origins()
                .iter()
                .filter(|o| e.handles(spec.id, **o))
                .all(|o| engines.preference.stands_by(*e, *o, engines))
        })
        .collect();
    if candidates.is_empty() {
        return vec![Problem::new(
            rule,
            condition::REASON_UNSUPPORTED_INTENT,
            format!(
                "intent `{}` is not enforced: the engines that can enforce it stand by for the \
                 one in force (engine preference {})",
                rule.id, engines.preference
            ),
        )];
    }
    let external: Vec<String> = candidates
        .iter()
        .filter(|e| !engines.active(**e) && engines.external.contains(*e))
        .map(|e| e.to_string())
        .collect();
    let missing: Vec<String> = candidates
        .iter()
        .filter(|e| !engines.active(**e) && !engines.external.contains(*e))
        .map(|e| {
            let why = if engines.enabled.contains(e) {
                "not installed"
            } else {
                "disabled"
            };
            format!("{e} ({why})")
        })
        .collect();
    let mut problems = Vec::new();
    if !external.is_empty() {
        problems.push(Problem {
            blocking: false,
            ..Problem::new(
                rule,
                condition::REASON_ENGINE_DISABLED,
                format!(
                    "intent `{}` is enforced by an external adapter: {}",
                    rule.id,
                    external.join(", ")
                ),
            )
        });
    }
    for (engine, chosen) in replaced {
        let (reason, why) = if engines.enabled.contains(&engine) {
            (condition::REASON_ENGINE_NOT_INSTALLED, "not installed")
        } else {
            (condition::REASON_ENGINE_DISABLED, "disabled")
        };
        problems.push(Problem {
            blocking: false,
            ..Problem::new(
                rule,
                reason,
                format!(
                    "intent `{}` is enforced by {chosen} in place of {engine} ({why}; engine \
                     preference {})",
                    rule.id, engines.preference
                ),
            )
        });
    }
    if missing.is_empty() {
        return problems;
    }
    let none_left = missing.len() == candidates.len();
    let reason = if candidates.iter().any(|e| !engines.enabled.contains(e)) {
        condition::REASON_ENGINE_DISABLED
    } else {
        condition::REASON_ENGINE_NOT_INSTALLED
    };
    let message = if none_left {
        format!(
            "intent `{}` is not enforced: {}",
            rule.id,
            missing.join(", ")
        )
    } else {
        format!(
            "intent `{}` is enforced only in part: {}",
            rule.id,
            missing.join(", ")
        )
    };
    problems.push(Problem {
        blocking: none_left,
        ..Problem::new(rule, reason, message)
    });
    problems
}

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

/// `<policy>-<suffix>`, shortened deterministically when longer than `max`.
pub(super) fn native_name(policy: &PolicyInput, suffix: &str, max: usize) -> String {
    names::fit(&format!("{}-{suffix}", policy.name), max)
}

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
