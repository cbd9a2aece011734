//! The posture API, `posture.security.nimbus.com/v1alpha1`: read-only answers to "which
//! workloads are protected, by what, and where are the gaps". The operator computes them from
//! the caches it already keeps and serves them as an aggregated API (an `APIService`); nothing
//! is stored, so these are not CRDs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// API group of the posture kinds.
pub const GROUP: &str = "posture.security.nimbus.com";
/// The only served version.
pub const VERSION: &str = "v1alpha1";
/// Label every posture object carries with its verdict, so `-l` can select the gaps.
pub const VERDICT_LABEL: &str = "posture.security.nimbus.com/verdict";

/// How well something is protected by the intents bound to it.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum Verdict {
    /// Every intent that selects it is enforced by every engine that enforces that intent.
    Protected,
    /// Some intents, or some of their engines, are not in force.
    Partial,
    /// No intent selects it, or none of those that do is in force.
    Unprotected,
    /// Every intent that selects it is bound in audit (its action is `Audit`, or its binding or
    /// namespace is in shadow mode): engines at most report, nothing is enforced.
    Audited,
    /// Namespaces only: it has no workload, so there is nothing to protect (yet); the intents
    /// bound in it apply to the workloads it will have.
    NoWorkloads,
    /// Every intent that selects it lets it out, by a SecurityIntentException in force: nothing
    /// is enforced on it until the exceptions expire (`exceptions` says when, and why).
    Excepted,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Protected => "Protected",
            Verdict::Partial => "Partial",
            Verdict::Unprotected => "Unprotected",
            Verdict::Audited => "Audited",
            Verdict::NoWorkloads => "NoWorkloads",
            Verdict::Excepted => "Excepted",
        }
    }
}

/// Why something is not (fully) protected: a machine-readable reason and a sentence.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub struct Reason {
    /// CamelCase cause, e.g. `EngineNotInstalled`, `UnsupportedSelector`, `NotSelected`.
    pub reason: String,
    /// What happened, for people.
    pub message: String,
}

/// An object the posture refers to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub struct Reference {
    /// Kind of the object.
    pub kind: String,
    /// Its namespace; absent for cluster-scoped objects, and for an object of another
    /// namespace than the posture's, which a namespaced posture never names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name; empty for an object of another namespace than the posture's (a preview's
    /// Service or client: "a Service in another namespace").
    pub name: String,
}

/// The workload a posture describes: a pod's top-level controller, or the bare pod.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    /// API version of the workload, e.g. `apps/v1`.
    pub api_version: String,
    /// Kind of the workload, e.g. `Deployment`, `CronJob`, `Pod`.
    pub kind: String,
    /// Name of the workload.
    pub name: String,
    /// How many of its pods exist now.
    pub pods: u32,
}

/// How one engine enforces one intent on the workload.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum EngineState {
    /// Its native objects are in the cluster.
    Enforcing,
    /// Its native objects are in the cluster in their audit form: they report, never block.
    Auditing,
    /// Switched off in this operator; an external adapter reports enforcing it.
    External,
    /// Its CRDs are not installed, so it enforces nothing.
    NotInstalled,
    /// Some of its native objects are not (yet) in the cluster.
    Pending,
    /// It cannot enforce this intent here (see the intent's reasons).
    Failed,
    /// Its native objects are in the cluster, but a dry run of an object they forbid was
    /// admitted: it does not act on them (see the intent's `liveness`).
    NotLive,
}

/// What the last probe of an engine's enforcement found: the operator submits, as a
/// server-side dry run (nothing is stored), an object the intent forbids and sees whether the
/// engine refuses it.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum LiveState {
    /// The engine refused the probe with its own message: enforcement is live.
    Live,
    /// The probe was admitted: the engine's objects are in the cluster and do nothing.
    NotLive,
    /// The probe was refused by something else (a webhook that could not be called and fails
    /// closed, PodSecurity admission, another policy), or could not be sent: nothing violating
    /// was admitted, but the engine's own decision was not seen.
    Unverified,
    /// No probe is sent for this intent (its engines cannot be probed by a dry run, probes are
    /// off, or no probe object can be made): nothing is known either way.
    NotProbed,
}

/// Whether an intent's enforcement is live, by the last probe of each engine that enforces it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Liveness {
    /// The worst state of the engines probed (`NotLive` before `Unverified` before `Live`).
    pub state: LiveState,
    /// CamelCase cause, e.g. `EnforcementNotLive`, `DeniedElsewhere`, `NotProbeable`.
    pub reason: String,
    /// What the probe saw, for people.
    pub message: String,
    /// When the probe that decided it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probed_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// One engine's share in enforcing an intent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct EngineCoverage {
    /// The engine, as `--disable-engines` names it: `netpol`, `kubearmor`, `kyverno`, `k8tls`,
    /// `rbac`.
    pub engine: String,
    /// Whether it is in force.
    pub state: EngineState,
    /// The native objects it enforces the intent with (those it should have, while `Pending`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<Reference>,
}

/// One bound intent that selects the workload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntentCoverage {
    /// The SecurityIntent's name, when it still exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
    /// The intent's ID in the catalog, e.g. `dnsManipulation`.
    pub id: String,
    /// The bundle the SecurityIntent came from (its `intent.security.nimbus.com/bundle`
    /// label, as `nimbus bundle` prints it), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    /// `Block` prevents, `Audit` only reports.
    pub action: String,
    /// Who last created or updated the SecurityIntent (its
    /// `intent.security.nimbus.com/last-written-by` annotation); absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<String>,
    /// When the SecurityIntent was last created or updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The binding that binds the intent to the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<Reference>,
    /// The NimbusPolicy or ClusterNimbusPolicy the binding compiled to.
    pub policy: Reference,
    /// Whether the intent is in force on the workload.
    pub verdict: Verdict,
    /// The engines that enforce the intent, and how.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub engines: Vec<EngineCoverage>,
    /// Why it is not (fully) in force.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<Reason>,
    /// Whether the namespace's tenants (who may write NetworkPolicies and other namespaced
    /// objects there) can undo it: `true` when an engine enforcing it holds against them (the
    /// Admin tier of ClusterNetworkPolicy), `false` when one can be undone by them (a
    /// NetworkPolicy, which a tenant's allow-all reopens); absent when no engine in force has
    /// been measured either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_proof: Option<bool>,
    /// Whether its enforcement is live, by the operator's periodic dry-run probes; absent
    /// while probes are off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<Liveness>,
    /// The SecurityIntentExceptions in force that let the workload out of the intent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exceptions: Vec<ExceptionCoverage>,
}

/// What an [`ExceptionCoverage`] written before its `kind` was told stands for.
fn namespaced_exception() -> String {
    "SecurityIntentException".to_owned()
}

/// A SecurityIntentException or ClusterSecurityIntentException in force that lets a workload
/// out of an intent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionCoverage {
    /// `SecurityIntentException` (in the workload's namespace) or
    /// `ClusterSecurityIntentException`.
    #[serde(default = "namespaced_exception")]
    pub kind: String,
    /// The exception's name.
    pub name: String,
    /// Why it was granted.
    pub reason: String,
    /// When it ends: from then on the intent is enforced on the workload again.
    pub expires_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// Who asked for it (its `exceptions.security.nimbus.com/requested-by` annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// Who approved it (its `exceptions.security.nimbus.com/approved-by` annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// The Pod Security controls it lets the workload out of (its `podSecurityControls`): the
    /// workload stays held to the intent's other controls. Empty: the whole intent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controls: Vec<String>,
}

/// How well one workload is protected, by which intents, enforced by which engines.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPosture {
    /// `posture.security.nimbus.com/v1alpha1`.
    pub api_version: String,
    /// `WorkloadPosture`.
    pub kind: String,
    /// Named `<kind>-<workload name>` in lower case; carries the labels of the workload's pods
    /// and the verdict label `posture.security.nimbus.com/verdict`.
    pub metadata: ObjectMeta,
    /// The workload.
    pub workload: WorkloadRef,
    /// Whether the workload is protected.
    pub verdict: Verdict,
    /// The bound intents that select the workload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intents: Vec<IntentCoverage>,
    /// Why the workload is not (fully) protected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<Reason>,
    /// What enforcing its intents bound in audit or shadow mode would block; absent when none
    /// is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<Preview>,
}

/// What enforcing the intents a workload is bound to in audit or shadow mode would block,
/// computed from what the cluster holds now (pods, Services, NetworkPolicies).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    /// Connections inside the cluster, through a Service, that are allowed now and would be
    /// denied; at most 100, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<BlockedConnection>,
    /// How many more blocked connections were found than `blocked` lists.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u32,
    /// Validate rules the workload breaks, by the engine's own reports of its audit policies
    /// (Kyverno's background scan): enforcing would refuse these resources at their next
    /// admission (a new pod, a rollout); running pods keep running. One entry per rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refusal>,
    /// Engines of those intents whose effect cannot be previewed here, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_previewed: Vec<Reason>,
}

/// A validate rule that the engine's report says resources of the workload break.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// The ID of the intent the rule enforces.
    pub intent: String,
    /// The engine's policy, e.g. a Kyverno `Policy` or `ClusterPolicy`.
    pub policy: Reference,
    /// The rule, as the engine names it (Kyverno's `autogen-` rules judge pod controllers).
    pub rule: String,
    /// The engine's message for the first of `resources`.
    pub message: String,
    /// The resources reported breaking it: the workload itself or its pods; at most 5, in
    /// order.
    pub resources: Vec<Reference>,
    /// How many resources of the workload are reported breaking it.
    pub count: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One connection enforcement would cut.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockedConnection {
    /// `Egress`: the workload could no longer reach `service`. `Ingress`: `client` could no
    /// longer reach the workload through `service`.
    pub direction: String,
    /// The Service the connection goes through.
    pub service: Reference,
    /// The Service's port.
    pub port: u16,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// For `Ingress`: the workload that could no longer connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<Reference>,
    /// The IDs of the intents that would block it.
    pub intents: Vec<String>,
}

/// Workloads of a namespace by verdict.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct WorkloadCounts {
    /// Every workload of the namespace.
    pub total: u32,
    /// Those `Protected`.
    pub protected: u32,
    /// Those `Partial`.
    pub partial: u32,
    /// Those `Unprotected`.
    pub unprotected: u32,
    /// Those `Audited`: bound in audit or shadow mode, nothing enforced.
    #[serde(default)]
    pub audited: u32,
    /// Those `Excepted`: let out of every intent selecting them until exceptions expire.
    #[serde(default)]
    pub excepted: u32,
}

/// A workload of the namespace that is not fully protected.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct Gap {
    /// The workload as `Kind/name`.
    pub workload: String,
    /// `Partial`, `Unprotected`, `Audited` or `Excepted`.
    pub verdict: Verdict,
    /// The reasons, as in its WorkloadPosture.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// The posture of one namespace: which bindings and intents apply, how many of its workloads
/// they cover, and the gaps.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespacePosture {
    /// `posture.security.nimbus.com/v1alpha1`.
    pub api_version: String,
    /// `NamespacePosture`.
    pub kind: String,
    /// Named after the namespace; carries the verdict label.
    pub metadata: ObjectMeta,
    /// `Protected` when every workload is, `Unprotected` when none is, `NoWorkloads` when there
    /// are none.
    pub verdict: Verdict,
    /// The bindings whose intents apply in the namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Reference>,
    /// The IDs of the intents bound in the namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intents: Vec<String>,
    /// Workloads by verdict.
    pub workloads: WorkloadCounts,
    /// The workloads not fully protected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<Gap>,
    /// Per compliance framework, how its controls the intent catalog addresses are covered
    /// on the namespace's workloads; absent when it has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compliance: Vec<FrameworkCoverage>,
}

/// How the controls of one framework are covered on a set of workloads.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FrameworkCoverage {
    /// The framework as `nimbus frameworks` names it, e.g. `cis-kubernetes`.
    pub framework: String,
    /// Its title and version.
    pub title: String,
    /// The workloads counted.
    pub workloads: u32,
    /// Percent of (control, workload) pairs covered by an intent in force (proven or not),
    /// rounded down.
    pub score: u32,
    /// Percent of (control, workload) pairs covered with proven enforcement, rounded down.
    pub proven_score: u32,
    /// Each control of the framework the catalog addresses.
    pub controls: Vec<ControlCoverage>,
}

/// How one control is covered: workloads by how.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlCoverage {
    /// The control's ID in its framework, e.g. `T1611`, `5.2.2`, `C-0057`, `FGT1611`.
    /// Borrowed from the catalog when computed (every namespace's posture lists every control
    /// of every framework: owned copies would cost kilobytes per namespace).
    pub id: Cow<'static, str>,
    /// Its name in the framework.
    pub name: Cow<'static, str>,
    /// Workloads where an intent addressing it is enforced by an engine whose enforcement of
    /// that intent the efficacy tests prove.
    pub proven: u32,
    /// Workloads where an intent addressing it is enforced, by engines no efficacy test
    /// proves (e.g. KubeArmor).
    pub unproven: u32,
    /// Workloads where an intent addressing it is bound in audit or shadow mode only.
    pub audited: u32,
    /// Workloads where nothing addresses it.
    pub not_covered: u32,
    /// The efficacy matrices behind `proven` (the book's "What enforcement is proven", docs/src/proofs.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proofs: Vec<Cow<'static, str>>,
}

/// The kinds of the posture API, described once for discovery, OpenAPI and clients.
pub trait PostureKind: Serialize + JsonSchema {
    const KIND: &'static str;
    const PLURAL: &'static str;
    const SHORT_NAME: &'static str;
    const NAMESPACED: bool;
    fn metadata(&self) -> &ObjectMeta;
    fn metadata_mut(&mut self) -> &mut ObjectMeta;
}

macro_rules! posture_kind {
    ($ty:ident, $plural:literal, $short:literal, $namespaced:literal, $scope:ty) => {
        impl PostureKind for $ty {
            const KIND: &'static str = stringify!($ty);
            const PLURAL: &'static str = $plural;
            const SHORT_NAME: &'static str = $short;
            const NAMESPACED: bool = $namespaced;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        /// So kube clients get a typed `Api` with no CRD.
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;
            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$ty as PostureKind>::KIND)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

posture_kind!(
    WorkloadPosture,
    "workloadpostures",
    "wp",
    true,
    k8s_openapi::NamespaceResourceScope
);
posture_kind!(
    NamespacePosture,
    "namespacepostures",
    "nsp",
    false,
    k8s_openapi::ClusterResourceScope
);

/// `posture.security.nimbus.com/v1alpha1`.
pub fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}
