//! Engine translators: a NimbusPolicy or ClusterNimbusPolicy, plus what the cluster looks like,
//! becomes the exact set of native objects every enabled engine wants, and the problems that
//! keep an intent from being enforced. Pure: no I/O, no clock, no panics on any input.

mod k8tls;
mod kubearmor;
mod kyverno;
mod netpol;
mod rbac;

use crate::catalog::{self, BindingKind, Origin};
use crate::names;
use crate::namespaces::ProtectedNamespaces;
use crate::objects::controller_reference;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::core::{ApiResource, DynamicObject, TypeMeta};
use kube::{Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NamespaceSelector, NimbusPolicy, NimbusRule,
    condition,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

pub use k8tls::{
    DEFAULT_IMAGE as DEFAULT_K8TLS_IMAGE, DEFAULT_NAMESPACE as DEFAULT_K8TLS_NAMESPACE,
};
pub use kyverno::virtual_patch::{self, VirtualPatches};
pub use rbac::{DEFAULT_SANDBOX_CLUSTER_ROLES, sandbox_violations};

/// A built-in engine. Everything about it is in its [`EngineSpec`] ([`Engine::spec`]), declared
/// by its module: adding an engine is a module with a `SPEC`, a variant here and its entry in
/// [`ENGINES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    NetworkPolicy,
    KubeArmor,
    Kyverno,
    K8tls,
    Rbac,
}

/// Every engine's registration, in [`Engine`] order (translation order within a rule).
static ENGINES: [&EngineSpec; 5] = [
    &netpol::SPEC,
    &kubearmor::SPEC,
    &kyverno::SPEC,
    &k8tls::SPEC,
    &rbac::SPEC,
];

impl Engine {
    pub const ALL: [Engine; 5] = [
        Engine::NetworkPolicy,
        Engine::KubeArmor,
        Engine::Kyverno,
        Engine::K8tls,
        Engine::Rbac,
    ];

    pub fn spec(self) -> &'static EngineSpec {
        ENGINES[self as usize]
    }

    /// Short name used on the command line (`--disable-engines kubearmor`) and in the Helm
    /// values (`engines.kubearmor`).
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// `nimbus-<engine>`: the `app.kubernetes.io/managed-by` value on everything the engine
    /// generates (as Nimbus's adapters set it) and its server-side-apply field manager.
    pub fn manager(self) -> &'static str {
        self.spec().manager
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Engine::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Engine::ALL.iter().map(|e| e.name()).collect();
                format!("unknown engine `{s}` (known: {})", names.join(", "))
            })
    }
}

/// An engine as one unit: the intents it enforces, the kinds it writes, what else it reads
/// from the cluster, and its translator. The catalog's "who enforces what", the operator's
/// watches, availability tracking and status, and the chart's RBAC all derive from these.
pub struct EngineSpec {
    pub engine: Engine,
    pub name: &'static str,
    pub manager: &'static str,
    /// The intents it enforces.
    pub enforces: &'static [Enforces],
    /// What it writes; it is installed when all of these are served.
    pub kinds: &'static [&'static NativeKind],
    /// Writes only into the k8tls namespace, so its kinds are watched (and writable) only there.
    pub confined_to_k8tls_namespace: bool,
    /// Objects (and problems) for one rule of an intent in `enforces`.
    translate: fn(&PolicyInput, &Rule, &Environment) -> Output,
}

/// An intent an engine enforces.
pub struct Enforces {
    pub intent: &'static str,
    /// The kinds of policy it acts on.
    pub origins: &'static [Origin],
    /// What its translation reads besides the policy: the operator watches a fact only while an
    /// engine reading it is enabled, reads it only for rules that need it, and re-translates
    /// when it changes.
    pub reads: &'static [Fact],
    /// What it writes when the intent's action is `Audit`.
    pub audit: AuditForm,
    /// What it does when the action is `Block`, in plain words (`nimbus explain`).
    pub effect: &'static str,
}

/// The action under which an intent reports and enforces nothing.
pub const AUDIT: &str = "Audit";

/// What an engine writes for an intent whose action is [`AUDIT`]: never anything that enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditForm {
    /// Objects that report and never block: its translator renders every action as `Audit`.
    Reports,
    /// The same objects as for `Block`: they only assess, and never block (k8tls's scans).
    AssessesOnly,
    /// Nothing: it has no form that reports without enforcing (a NetworkPolicy cuts traffic, a
    /// RoleBinding grants, a Kyverno mutate or generate rule acts). The policy says so
    /// ([`condition::REASON_NO_AUDIT_FORM`]).
    None,
}

impl EngineSpec {
    /// The origins it enforces `intent` from; `None` when it does not enforce it.
    pub fn origins(&self, intent: &str) -> Option<&'static [Origin]> {
        self.enforcing(intent).map(|e| e.origins)
    }

    fn enforcing(&self, intent: &str) -> Option<&'static Enforces> {
        self.enforces.iter().find(|e| e.intent == intent)
    }

    /// Whether any of its translations reads `fact`.
    pub fn reads(&self, fact: Fact) -> bool {
        self.enforces.iter().any(|e| e.reads.contains(&fact))
    }

    /// The RBAC rules its registration implies: full access to the kinds it writes (watched,
    /// applied, pruned), cluster-wide or only in the k8tls namespace, and reading the cluster
    /// facts it reads. Grants that depend on configuration (which ClusterRoles namespaceSandbox
    /// may bind, the virtual-patch database's name) are the Helm chart's.
    pub fn permissions(&self) -> Permissions {
        let mut by_group: Vec<(&str, Vec<String>)> = Vec::new();
        for kind in self.kinds {
            match by_group.iter_mut().find(|(g, _)| *g == kind.group) {
                Some((_, resources)) => resources.push(kind.plural.to_owned()),
                None => by_group.push((kind.group, vec![kind.plural.to_owned()])),
            }
        }
        let writes = by_group
            .into_iter()
            .map(|(group, resources)| rule(group, resources, &WRITE_VERBS));
        let mut permissions = Permissions::default();
        if self.confined_to_k8tls_namespace {
            permissions.k8tls_namespace.extend(writes);
        } else {
            permissions.cluster.extend(writes);
        }
        if self.reads(Fact::NodePodCidrs) {
            let nodes = rule("", vec!["nodes".to_owned()], &["list", "watch"]);
            permissions.cluster.insert(0, nodes);
        }
        permissions
    }
}

/// What the operator does with a kind it writes.
const WRITE_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "patch", "update", "delete",
];

/// RBAC rules an engine needs (see [`EngineSpec::permissions`]).
#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Permissions {
    pub cluster: Vec<PolicyRule>,
    /// Granted by a Role in the k8tls namespace.
    pub k8tls_namespace: Vec<PolicyRule>,
}

fn rule(group: &str, resources: Vec<String>, verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

/// Whether translating `rules` with any engine reads `fact`.
pub fn rules_read(rules: &[NimbusRule], fact: Fact) -> bool {
    rules.iter().any(|rule| {
        Engine::ALL.into_iter().any(|e| {
            e.spec()
                .enforcing(&rule.id)
                .is_some_and(|e| e.reads.contains(&fact))
        })
    })
}

/// A cluster fact an engine's translation reads (see [`Environment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fact {
    /// `spec.podCIDRs` of the nodes.
    NodePodCidrs,
    /// Whether the k8tls namespace exists.
    K8tlsNamespace,
    /// The virtual-patch database ConfigMap.
    VirtualPatchDb,
}

/// Origins, as engines declare them.
const NAMESPACED: &[Origin] = &[Origin::Binding, Origin::ClusterBindingNamespace];
const BINDING_OR_CLUSTER: &[Origin] = &[Origin::Binding, Origin::Cluster];
const CLUSTER: &[Origin] = &[Origin::Cluster];
const CLUSTER_BINDING_NAMESPACES: &[Origin] = &[Origin::ClusterBindingNamespace];

/// Annotation (and label, so the operator can watch only its own objects) naming the engine
/// that generated an object.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// A kind of native object an engine writes.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NativeKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    /// The CustomResourceDefinition that must be installed; `None` for built-in kinds.
    pub crd: Option<&'static str>,
    /// How the kind is named in a policy's `status.adapterPolicies` (Nimbus's vocabulary).
    pub entry: &'static str,
    /// Whether objects of the kind are policies listed in status (supporting objects, such as
    /// k8tls address lists, are not).
    pub listed: bool,
}

impl NativeKind {
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.into(),
            version: self.version.into(),
            api_version: self.api_version(),
            kind: self.kind.into(),
            plural: self.plural.into(),
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.into()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

pub const NETWORK_POLICY: NativeKind = NativeKind {
    group: "networking.k8s.io",
    version: "v1",
    kind: "NetworkPolicy",
    plural: "networkpolicies",
    namespaced: true,
    crd: None,
    entry: "NetworkPolicy",
    listed: true,
};
pub const KUBEARMOR_POLICY: NativeKind = NativeKind {
    group: "security.kubearmor.com",
    version: "v1",
    kind: "KubeArmorPolicy",
    plural: "kubearmorpolicies",
    namespaced: true,
    crd: Some("kubearmorpolicies.security.kubearmor.com"),
    entry: "KubeArmorPolicy",
    listed: true,
};
pub const KYVERNO_POLICY: NativeKind = NativeKind {
    group: "kyverno.io",
    version: "v1",
    kind: "Policy",
    plural: "policies",
    namespaced: true,
    crd: Some("policies.kyverno.io"),
    entry: "KyvernoPolicy",
    listed: true,
};
pub const KYVERNO_CLUSTER_POLICY: NativeKind = NativeKind {
    group: "kyverno.io",
    version: "v1",
    kind: "ClusterPolicy",
    plural: "clusterpolicies",
    namespaced: false,
    crd: Some("clusterpolicies.kyverno.io"),
    entry: "KyvernoClusterPolicy",
    listed: true,
};
pub const CRON_JOB: NativeKind = NativeKind {
    group: "batch",
    version: "v1",
    kind: "CronJob",
    plural: "cronjobs",
    namespaced: true,
    crd: None,
    entry: "CronJob",
    listed: true,
};
pub const CONFIG_MAP: NativeKind = NativeKind {
    group: "",
    version: "v1",
    kind: "ConfigMap",
    plural: "configmaps",
    namespaced: true,
    crd: None,
    entry: "ConfigMap",
    listed: false,
};
pub const ROLE_BINDING: NativeKind = NativeKind {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    kind: "RoleBinding",
    plural: "rolebindings",
    namespaced: true,
    crd: None,
    entry: "RoleBinding",
    listed: true,
};

/// The native kinds `engine` writes.
pub fn kinds(engine: Engine) -> &'static [&'static NativeKind] {
    engine.spec().kinds
}

/// Every native kind of every engine, each once.
pub fn all_kinds() -> Vec<&'static NativeKind> {
    let set: BTreeSet<&'static NativeKind> = Engine::ALL
        .into_iter()
        .flat_map(|e| kinds(e).iter().copied())
        .collect();
    set.into_iter().collect()
}

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
            allowed_sensitive: catalog::allowed_sensitive(np.annotations()),
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
            allowed_sensitive: catalog::allowed_sensitive(cwnp.annotations()),
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
}

impl EngineSet {
    /// Every engine enabled and installed (offline translation).
    pub fn all() -> Self {
        Self {
            enabled: Engine::ALL.into(),
            installed: Engine::ALL.into(),
            external: BTreeSet::new(),
        }
    }

    pub fn active(&self, engine: Engine) -> bool {
        self.enabled.contains(&engine) && self.installed.contains(&engine)
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
        let Some(spec) = catalog::intent(&rule.id) else {
            continue;
        };
        // Reported only where an engine would act: a cluster binding's namespace policies
        // carry assessTLS too, but only its cluster policy runs the scanner.
        let acts = Engine::ALL
            .into_iter()
            .any(|e| engines.active(e) && spec.handled_by(e, policy.origin));
        if acts && let Some(problem) = sensitive_problem(rule, &policy.allowed_sensitive) {
            out.problems.push(problem);
            continue;
        }
        let mut enforced = false;
        let mut failures = Vec::new();
        let mut no_audit_form = Vec::new();
        for engine in Engine::ALL {
            if !engines.active(engine) || !spec.handled_by(engine, policy.origin) {
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
            match (engine.spec().translate)(policy, &rule, env) {
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

/// What keeps `rule`, bound by a binding of `kind`, from being enforced before any engine runs:
/// an ID missing from the catalog, bad parameters, or no active engine for it.
pub fn check_rule(rule: &NimbusRule, kind: BindingKind, engines: &EngineSet) -> Vec<Problem> {
    let Some(spec) = catalog::intent(&rule.id) else {
        return vec![Problem::new(
            rule,
            condition::REASON_UNSUPPORTED_INTENT,
            format!("intent `{}` is not in the catalog", rule.id),
        )];
    };
    let mut problems: Vec<Problem> = catalog::check_params(rule)
        .into_iter()
        .map(|p| Problem {
            blocking: p.blocking,
            ..Problem::new(
                rule,
                condition::REASON_INVALID_PARAMETER,
                format!("intent `{}`: {p}", rule.id),
            )
        })
        .collect();
    problems.extend(coverage(spec, rule, kind, engines));
    problems
}

/// Why `rule` is not enforced when its intent is sensitive and `allowed` (the binding's
/// allow-sensitive annotation) does not list it. Binding controllers call this with the
/// binding's own annotations to report it on the binding.
pub fn sensitive_problem(rule: &NimbusRule, allowed: &BTreeSet<String>) -> Option<Problem> {
    let spec = catalog::intent(&rule.id)?;
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
    spec: &catalog::IntentSpec,
    rule: &NimbusRule,
    kind: BindingKind,
    engines: &EngineSet,
) -> Vec<Problem> {
    let candidates = spec.engines_for(kind);
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
struct Rule<'a> {
    spec: &'a NimbusRule,
    key: &'a str,
}

impl Rule<'_> {
    fn problem(&self, reason: &'static str, message: impl Into<String>) -> Problem {
        Problem::new(self.spec, reason, message)
    }

    /// The result of an engine asked for an intent it declares but has no translation of: the
    /// intent is reported unenforced instead of silently producing nothing.
    fn untranslated(&self, engine: Engine) -> Output {
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
fn native_name(policy: &PolicyInput, suffix: &str, max: usize) -> String {
    names::fit(&format!("{}-{suffix}", policy.name), max)
}

/// Metadata of a native object: its name and namespace, the managed-by annotation (plus
/// `extra_annotations`), the managed-by label (Nimbus sets none; the operator watches only
/// objects carrying it), and the controller reference to the policy.
fn metadata(
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

fn object(
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
struct Emitted {
    objects: Vec<(&'static NativeKind, DynamicObject)>,
    warnings: Vec<Problem>,
}

impl From<Vec<(&'static NativeKind, DynamicObject)>> for Emitted {
    fn from(objects: Vec<(&'static NativeKind, DynamicObject)>) -> Self {
        Self {
            objects,
            warnings: Vec::new(),
        }
    }
}

type Output = Result<Emitted, Problem>;

/// A label selector as engines write it: `{}` when it selects everything (no empty
/// `matchLabels: {}`), as Nimbus's Go types serialized it.
fn selector_json(selector: &LabelSelector) -> Value {
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
fn labels_only(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_is_registered_once_in_its_place() {
        for engine in Engine::ALL {
            assert_eq!(engine.spec().engine, engine);
            assert_eq!(engine.manager(), format!("nimbus-{}", engine.name()));
        }
    }

    #[test]
    fn engines_enforce_exactly_the_catalog_intents() {
        for engine in Engine::ALL {
            for Enforces {
                intent, origins, ..
            } in engine.spec().enforces
            {
                assert!(
                    catalog::intent(intent).is_some(),
                    "{engine}: unknown `{intent}`"
                );
                assert!(
                    !origins.is_empty(),
                    "{engine} enforces `{intent}` from nowhere"
                );
            }
        }
        for intent in catalog::INTENTS {
            assert!(
                !intent.engines().is_empty(),
                "nobody enforces {}",
                intent.id
            );
        }
    }
}
