//! SecurityIntentExceptions: whether one is in force at a given time, and which of those in
//! force a policy's translation honours. Pure: the clock is an argument, so the operator, the
//! CLI and the tests decide alike given the same time.

use crate::intents::id::ESCAPE_TO_HOST;
use crate::status::condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Resource;
use kube::ResourceExt;
use nimbus_api::{
    APPROVED_BY_ANNOTATION, ClusterSecurityIntentBinding, ClusterSecurityIntentException,
    ExceptedBinding, ExceptedWorkload, MatchIntent, PodSecurityControl, REQUESTED_BY_ANNOTATION,
    SecurityIntentBinding, SecurityIntentException, SecurityIntentExceptionStatus,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

mod selectors;
pub mod workloads;
pub use selectors::{MAX_SELECTORS, excluding};

/// How long an exception may last unless the operator is configured otherwise
/// (`--exception-max-duration`): long enough for a fix to ship, short enough to be reviewed.
pub const DEFAULT_MAX_DURATION: SignedDuration = SignedDuration::from_hours(30 * 24);

/// The exception's condition type: whether engines honour it now.
pub const ACTIVE: &str = "Active";

/// `Active`'s reasons (the exception's status condition).
pub mod reason {
    /// Engines honour it until `expiresAt`.
    pub const ACTIVE: &str = "Active";
    /// `expiresAt` has passed: every engine enforces the intents again.
    pub const EXPIRED: &str = "Expired";
    /// `expiresAt` is further from the exception's creation than the operator allows.
    pub const TOO_LONG: &str = "TooLong";
    /// The binding it names does not exist.
    pub const BINDING_NOT_FOUND: &str = "BindingNotFound";
    /// None of the intents it names is bound by the binding.
    pub const INTENT_NOT_BOUND: &str = "IntentNotBound";
    /// The operator honours only approved exceptions, and nobody has approved it.
    pub const NOT_APPROVED: &str = "NotApproved";
    /// It names Pod Security controls and an intent the binding binds that has none: the
    /// controls scope escapeToHost alone, and letting the workloads out of the other intent
    /// wholly is more than it says.
    pub const CONTROLS_NOT_APPLICABLE: &str = "ControlsNotApplicable";
}

/// Whether the operator honours an exception nobody has approved (`--exception-approval`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Approval {
    /// Honoured without approval.
    #[default]
    Optional,
    /// Honoured only once [`APPROVED_BY_ANNOTATION`] names its approver; until then `Inactive`
    /// with [`reason::NOT_APPROVED`].
    Required,
}

impl Approval {
    const NAMES: [&str; 2] = ["optional", "required"];
}

/// A value of `--exception-approval` that is neither of [`Approval`]'s.
#[derive(Debug, thiserror::Error)]
#[error("unknown exception approval `{0}` (known: optional, required)")]
pub struct UnknownApproval(String);

impl FromStr for Approval {
    type Err = UnknownApproval;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "optional" => Ok(Approval::Optional),
            "required" => Ok(Approval::Required),
            _ => Err(UnknownApproval(s.to_owned())),
        }
    }
}

impl fmt::Display for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::NAMES[*self as usize])
    }
}

/// What the operator asks of every exception besides its own terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// The longest an exception may last from its creation (`--exception-max-duration`).
    pub max_duration: SignedDuration,
    /// Whether it must be approved (`--exception-approval`).
    pub approval: Approval,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            max_duration: DEFAULT_MAX_DURATION,
            approval: Approval::Optional,
        }
    }
}

/// Who asked for and who approved an exception, by its annotations (the admission policies
/// stamp and guard them); `None` when it names none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signatures {
    pub requested_by: Option<String>,
    pub approved_by: Option<String>,
}

impl Signatures {
    pub fn of<'a>(exception: impl Into<Exception<'a>>) -> Self {
        let exception = exception.into();
        let annotation = |key: &str| {
            exception
                .meta()
                .annotations
                .iter()
                .flatten()
                .find(|(k, _)| *k == key)
                .map(|(_, user)| user)
                .filter(|user| !user.is_empty())
                .cloned()
        };
        Self {
            requested_by: annotation(REQUESTED_BY_ANNOTATION),
            approved_by: annotation(APPROVED_BY_ANNOTATION),
        }
    }
}

/// The binding a policy enforces, as an exception names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BindingRef {
    /// `SecurityIntentBinding` or `ClusterSecurityIntentBinding`.
    pub kind: String,
    pub name: String,
    /// A SecurityIntentBinding's namespace; `None` for a cluster binding.
    pub namespace: Option<String>,
}

impl BindingRef {
    /// The binding `exception` names: a SecurityIntentBinding in its own namespace, or a
    /// cluster binding.
    pub fn of<'a>(exception: impl Into<Exception<'a>>) -> Self {
        let exception = exception.into();
        let binding = exception.binding();
        let cluster = binding.kind == ClusterSecurityIntentBinding::kind(&());
        Self {
            kind: binding.kind.clone(),
            name: binding.name.clone(),
            namespace: (!cluster)
                .then(|| exception.meta().namespace.clone())
                .flatten(),
        }
    }

    pub fn namespaced(name: &str, namespace: &str) -> Self {
        Self {
            kind: SecurityIntentBinding::kind(&()).into_owned(),
            name: name.to_owned(),
            namespace: Some(namespace.to_owned()),
        }
    }

    pub fn cluster(name: &str) -> Self {
        Self {
            kind: ClusterSecurityIntentBinding::kind(&()).into_owned(),
            name: name.to_owned(),
            namespace: None,
        }
    }
}

/// The two kinds of exception: one namespace's, or several named namespaces' (a cluster
/// binding's only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExceptionKind {
    #[default]
    Namespaced,
    Cluster,
}

impl fmt::Display for ExceptionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&match self {
            ExceptionKind::Namespaced => SecurityIntentException::kind(&()),
            ExceptionKind::Cluster => ClusterSecurityIntentException::kind(&()),
        })
    }
}

/// An exception of either kind, as the decisions here read it.
#[derive(Debug, Clone, Copy)]
pub enum Exception<'a> {
    Namespaced(&'a SecurityIntentException),
    Cluster(&'a ClusterSecurityIntentException),
}

impl<'a> From<&'a SecurityIntentException> for Exception<'a> {
    fn from(e: &'a SecurityIntentException) -> Self {
        Exception::Namespaced(e)
    }
}

impl<'a> From<&'a ClusterSecurityIntentException> for Exception<'a> {
    fn from(e: &'a ClusterSecurityIntentException) -> Self {
        Exception::Cluster(e)
    }
}

impl<'a> From<&'a std::sync::Arc<SecurityIntentException>> for Exception<'a> {
    fn from(e: &'a std::sync::Arc<SecurityIntentException>) -> Self {
        Exception::Namespaced(e)
    }
}

impl<'a> From<&'a std::sync::Arc<ClusterSecurityIntentException>> for Exception<'a> {
    fn from(e: &'a std::sync::Arc<ClusterSecurityIntentException>) -> Self {
        Exception::Cluster(e)
    }
}

impl<'a> Exception<'a> {
    pub fn kind(&self) -> ExceptionKind {
        match self {
            Exception::Namespaced(_) => ExceptionKind::Namespaced,
            Exception::Cluster(_) => ExceptionKind::Cluster,
        }
    }

    pub fn meta(&self) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            Exception::Namespaced(e) => &e.metadata,
            Exception::Cluster(e) => &e.metadata,
        }
    }

    pub fn name(&self) -> String {
        self.meta().name.clone().unwrap_or_default()
    }

    /// How `kubectl` and messages name it: `Kind namespace/name` or `Kind name`.
    pub fn describe(&self) -> String {
        match self {
            Exception::Namespaced(e) => format!(
                "{} {}/{}",
                self.kind(),
                e.namespace().unwrap_or_default(),
                e.name_any()
            ),
            Exception::Cluster(e) => format!("{} {}", self.kind(), e.name_any()),
        }
    }

    pub fn binding(&self) -> &'a ExceptedBinding {
        match self {
            Exception::Namespaced(e) => &e.spec.binding,
            Exception::Cluster(e) => &e.spec.binding,
        }
    }

    pub fn intents(&self) -> &'a [String] {
        match self {
            Exception::Namespaced(e) => &e.spec.intents,
            Exception::Cluster(e) => &e.spec.intents,
        }
    }

    pub fn selector(&self) -> &'a LabelSelector {
        match self {
            Exception::Namespaced(e) => &e.spec.selector,
            Exception::Cluster(e) => &e.spec.selector,
        }
    }

    /// The workloads it names; empty: every workload its selector selects.
    pub fn workloads(&self) -> &'a [ExceptedWorkload] {
        match self {
            Exception::Namespaced(e) => &e.spec.workloads,
            Exception::Cluster(e) => &e.spec.workloads,
        }
    }

    pub fn reason(&self) -> &'a str {
        match self {
            Exception::Namespaced(e) => &e.spec.reason,
            Exception::Cluster(e) => &e.spec.reason,
        }
    }

    /// When it ends.
    pub fn expires_at(&self) -> Timestamp {
        match self {
            Exception::Namespaced(e) => e.spec.expires_at.0,
            Exception::Cluster(e) => e.spec.expires_at.0,
        }
    }

    /// The Pod Security controls it narrows escapeToHost to, when it names any.
    pub fn pod_security_controls(&self) -> Option<&'a [PodSecurityControl]> {
        match self {
            Exception::Namespaced(e) => e.spec.pod_security_controls.as_deref(),
            Exception::Cluster(e) => e.spec.pod_security_controls.as_deref(),
        }
    }

    /// The namespaces whose workloads it lets out: its own, or those it names.
    pub fn namespaces(&self) -> Vec<String> {
        match self {
            Exception::Namespaced(e) => vec![e.namespace().unwrap_or_default()],
            Exception::Cluster(e) => {
                let unique: BTreeSet<&String> = e.spec.namespaces.iter().collect();
                unique.into_iter().cloned().collect()
            }
        }
    }
}

/// An exception in force in one namespace, as translations read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Excepted {
    /// Which kind of exception it is (a cluster exception is in force in each namespace it
    /// names).
    pub kind: ExceptionKind,
    pub name: String,
    /// Where its workloads are (the exception's namespace).
    pub namespace: String,
    /// Which of them, by their own labels.
    pub selector: LabelSelector,
    /// Of those, the ones it names by kind and name; empty: every one the selector selects
    /// ([`workloads::names`]).
    pub workloads: Vec<ExceptedWorkload>,
    /// IDs of the intents it lets them out of.
    pub intents: BTreeSet<String>,
    pub reason: String,
    pub expires_at: Timestamp,
    /// Who asked for it and who approved it, when it says.
    pub signatures: Signatures,
    /// The Pod Security controls (of escapeToHost) it lets them out of; `None`: the whole
    /// intents.
    pub controls: Option<BTreeSet<PodSecurityControl>>,
}

impl Excepted {
    /// Whether it lets its workloads out of a check of `control` (`None`: a check no control
    /// name covers, which only an exception of the whole intent lets them out of).
    pub fn lets_out_of(&self, control: Option<PodSecurityControl>) -> bool {
        match &self.controls {
            None => true,
            Some(controls) => control.is_some_and(|c| controls.contains(&c)),
        }
    }

    /// The names of the controls it lets them out of, for messages: empty for the whole
    /// intents.
    pub fn control_names(&self) -> Vec<&'static str> {
        self.controls.iter().flatten().map(|c| c.name()).collect()
    }
}

impl Excepted {
    /// How messages about its namespace's workloads name the exception it stands for.
    pub fn describe(&self) -> String {
        format!("{} {}", self.kind, self.name)
    }

    /// What an engine's object standing for it in its namespace is named after: its name, and
    /// for a cluster exception a digest of its kind and name too, so that it never takes the
    /// name of a SecurityIntentException of that namespace.
    pub fn key(&self) -> String {
        match self.kind {
            ExceptionKind::Namespaced => self.name.clone(),
            ExceptionKind::Cluster => {
                let digest = crate::names::digest(&format!("{}/{}", self.kind, self.name));
                format!("{}-{digest}", self.name)
            }
        }
    }
}

/// Where an exception stands at a given time.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing {
    /// In force until `expires_at`, in each namespace it lets workloads of out (one for a
    /// SecurityIntentException).
    Active(Vec<Excepted>),
    /// Not in force: a [`reason`] and a sentence.
    Inactive {
        reason: &'static str,
        message: String,
    },
}

impl Standing {
    /// When it changes by itself: an active exception's expiry.
    pub fn changes_at(&self) -> Option<Timestamp> {
        match self {
            Standing::Active(each) => each.iter().map(|e| e.expires_at).min(),
            Standing::Inactive { .. } => None,
        }
    }
}

/// Where `exception` stands at `now`: `bound` maps the names of the SecurityIntents its binding
/// binds to their intent IDs (`None`: no such binding); `rules` say how long an exception may
/// last from its creation and whether it must be approved. An exception that would be in force
/// but for its approval is `NotApproved`: the reasons before it say what to fix before anyone
/// approves it.
pub fn standing<'a>(
    exception: impl Into<Exception<'a>>,
    bound: Option<&BTreeMap<String, String>>,
    now: Timestamp,
    rules: Rules,
) -> Standing {
    let exception = exception.into();
    let max = rules.max_duration;
    let inactive = |reason, message: String| Standing::Inactive { reason, message };
    let binding = exception.binding();
    let expires_at = exception.expires_at();
    if expires_at <= now {
        return inactive(reason::EXPIRED, format!("expired at {expires_at}"));
    }
    let created = exception
        .meta()
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    if expires_at.duration_since(created) > max {
        return inactive(
            reason::TOO_LONG,
            format!(
                "expiresAt {expires_at} is more than {max:#} after its creation ({created}), \
                 the longest the operator allows"
            ),
        );
    }
    let Some(bound) = bound else {
        return inactive(
            reason::BINDING_NOT_FOUND,
            format!("{} {} not found", binding.kind, binding.name),
        );
    };
    let intents: BTreeSet<String> = exception
        .intents()
        .iter()
        .filter_map(|name| bound.get(name).cloned())
        .collect();
    if intents.is_empty() {
        return inactive(
            reason::INTENT_NOT_BOUND,
            format!(
                "{} {} binds none of {}",
                binding.kind,
                binding.name,
                exception.intents().join(", ")
            ),
        );
    }
    let controls: Option<BTreeSet<PodSecurityControl>> = exception
        .pod_security_controls()
        .map(|c| c.iter().copied().collect());
    if controls.is_some()
        && let Some(other) = intents.iter().find(|id| *id != ESCAPE_TO_HOST)
    {
        return inactive(
            reason::CONTROLS_NOT_APPLICABLE,
            format!(
                "podSecurityControls scope only {ESCAPE_TO_HOST}, and {} {} binds {other}: \
                 let the workloads out of it by an exception of its own",
                binding.kind, binding.name
            ),
        );
    }
    let signatures = Signatures::of(exception);
    if rules.approval == Approval::Required && signatures.approved_by.is_none() {
        let asked = signatures
            .requested_by
            .as_deref()
            .map_or_else(String::new, |user| format!(", asked for by {user}"));
        return inactive(
            reason::NOT_APPROVED,
            format!(
                "the operator honours only approved exceptions (--exception-approval=required) \
                 and none has approved this one{asked}: an approver sets {APPROVED_BY_ANNOTATION}"
            ),
        );
    }
    let each = exception
        .namespaces()
        .into_iter()
        .map(|namespace| Excepted {
            kind: exception.kind(),
            name: exception.name(),
            namespace,
            selector: exception.selector().clone(),
            workloads: exception.workloads().to_vec(),
            intents: intents.clone(),
            reason: exception.reason().to_owned(),
            expires_at,
            signatures: signatures.clone(),
            controls: controls.clone(),
        });
    Standing::Active(each.collect())
}

/// The status of `exception`, standing as `standing`: its `Active` condition, and who asked for
/// and approved it.
pub fn status<'a>(
    exception: impl Into<Exception<'a>>,
    standing: &Standing,
) -> SecurityIntentExceptionStatus {
    let exception = exception.into();
    let (active, reason, message) = match standing {
        Standing::Active(_) => (
            "True",
            reason::ACTIVE,
            format!("honoured until {}", exception.expires_at()),
        ),
        Standing::Inactive { reason, message } => ("False", *reason, message.clone()),
    };
    let generation = exception.meta().generation;
    let Signatures {
        requested_by,
        approved_by,
    } = Signatures::of(exception);
    SecurityIntentExceptionStatus {
        observed_generation: generation,
        conditions: vec![condition(ACTIVE, active, reason, message, generation)],
        requested_by,
        approved_by,
    }
}

/// Of the exceptions in force for a binding, those a policy of it honours: all of them for the
/// binding's own policy, those of `namespace` for a cluster binding's policy in that namespace.
pub fn for_policy<'a>(
    active: impl IntoIterator<Item = &'a Excepted>,
    namespace: Option<&str>,
) -> Vec<Excepted> {
    active
        .into_iter()
        .filter(|e| namespace.is_none_or(|ns| e.namespace == ns))
        .cloned()
        .collect()
}

/// The SecurityIntents a binding binds (`names`, its `spec.intents`), by name, with their intent
/// IDs; `intent_id` gives an existing SecurityIntent's ID by its name, and those that do not
/// exist bind nothing.
pub fn bound_intents(
    names: &[MatchIntent],
    intent_id: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    names
        .iter()
        .filter_map(|m| Some((m.name.clone(), intent_id(&m.name)?)))
        .collect()
}

/// The exceptions in force at `now` for a policy enforcing `binding` (in `namespace`, for a
/// cluster binding's policy there), and when that next changes by itself (the first of their
/// expiries). `exceptions`: every exception known; `bound`: the intents `binding` binds
/// ([`bound_intents`]; `None`: no such binding), asked only when an exception names it.
pub fn in_force<'a, E: Into<Exception<'a>>>(
    exceptions: impl IntoIterator<Item = E>,
    binding: &BindingRef,
    bound: impl FnOnce() -> Option<BTreeMap<String, String>>,
    namespace: Option<&str>,
    now: Timestamp,
    rules: Rules,
) -> (Vec<Excepted>, Option<Timestamp>) {
    let naming: Vec<Exception> = exceptions
        .into_iter()
        .map(Into::into)
        .filter(|e| BindingRef::of(*e) == *binding)
        .collect();
    if naming.is_empty() {
        return (Vec::new(), None);
    }
    let bound = bound();
    let active: Vec<Excepted> = naming
        .into_iter()
        .flat_map(|e| match standing(e, bound.as_ref(), now, rules) {
            Standing::Active(each) => each,
            Standing::Inactive { .. } => Vec::new(),
        })
        .collect();
    let in_force = for_policy(&active, namespace);
    let next = in_force.iter().map(|e| e.expires_at).min();
    (in_force, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use nimbus_api::{ExceptedBinding, SecurityIntentExceptionSpec};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).expect("timestamp")
    }

    fn exception(created: i64, expires: i64, intents: &[&str]) -> SecurityIntentException {
        let mut e = SecurityIntentException::new(
            "legacy",
            SecurityIntentExceptionSpec {
                binding: ExceptedBinding {
                    kind: "ClusterSecurityIntentBinding".into(),
                    name: "no-escape".into(),
                },
                intents: intents.iter().map(|i| (*i).to_owned()).collect(),
                selector: LabelSelector::default(),
                workloads: Vec::new(),
                reason: "vendor agent needs host access until 2.4".into(),
                expires_at: Time(at(expires)),
                pod_security_controls: None,
            },
        );
        e.metadata.namespace = Some("shop".into());
        e.metadata.creation_timestamp = Some(Time(at(created)));
        e
    }

    fn bound() -> BTreeMap<String, String> {
        BTreeMap::from([("escape".into(), "escapeToHost".into())])
    }

    #[test]
    fn an_exception_stands_as_its_time_binding_and_intents_say() {
        let day = 86_400;
        let max = SignedDuration::from_hours(24 * 7);
        let cases: &[(&str, SecurityIntentException, bool, i64, &str)] = &[
            (
                "in force",
                exception(0, day, &["escape"]),
                true,
                10,
                reason::ACTIVE,
            ),
            (
                "at expiry",
                exception(0, day, &["escape"]),
                true,
                day,
                reason::EXPIRED,
            ),
            (
                "after expiry",
                exception(0, day, &["escape"]),
                true,
                day + 1,
                reason::EXPIRED,
            ),
            (
                "longer than allowed",
                exception(0, 8 * day, &["escape"]),
                true,
                10,
                reason::TOO_LONG,
            ),
            (
                "exactly as long as allowed",
                exception(0, 7 * day, &["escape"]),
                true,
                10,
                reason::ACTIVE,
            ),
            (
                "no binding",
                exception(0, day, &["escape"]),
                false,
                10,
                reason::BINDING_NOT_FOUND,
            ),
            (
                "intent not bound",
                exception(0, day, &["other"]),
                true,
                10,
                reason::INTENT_NOT_BOUND,
            ),
        ];
        for (case, e, has_binding, now, want) in cases {
            let bound = bound();
            let rules = Rules {
                max_duration: max,
                approval: Approval::Optional,
            };
            let got = standing(e, has_binding.then_some(&bound), at(*now), rules);
            let status = status(e, &got);
            assert_eq!(status.conditions[0].reason, *want, "{case}: {got:?}");
            let active = if *want == reason::ACTIVE {
                "True"
            } else {
                "False"
            };
            assert_eq!(status.conditions[0].status, active, "{case}");
        }
    }

    #[test]
    fn with_approval_required_only_an_approved_exception_is_honoured() {
        let day = 86_400;
        let signed = |requested: Option<&str>, approved: Option<&str>| {
            let mut e = exception(0, day, &["escape"]);
            let annotations = [
                (REQUESTED_BY_ANNOTATION, requested),
                (APPROVED_BY_ANNOTATION, approved),
            ]
            .into_iter()
            .filter_map(|(key, user)| Some((key.to_owned(), user?.to_owned())))
            .collect();
            e.metadata.annotations = Some(annotations);
            e
        };
        // (case, exception, approval, now, reason)
        let cases = [
            (
                "optional, unapproved",
                signed(Some("alice"), None),
                Approval::Optional,
                10,
                reason::ACTIVE,
            ),
            (
                "required, unapproved",
                signed(Some("alice"), None),
                Approval::Required,
                10,
                reason::NOT_APPROVED,
            ),
            (
                "required, approved",
                signed(Some("alice"), Some("bob")),
                Approval::Required,
                10,
                reason::ACTIVE,
            ),
            (
                "required, an empty approval",
                signed(Some("alice"), Some("")),
                Approval::Required,
                10,
                reason::NOT_APPROVED,
            ),
            (
                "required, approved but expired",
                signed(Some("alice"), Some("bob")),
                Approval::Required,
                day,
                reason::EXPIRED,
            ),
            (
                "required, unapproved and expired: expiry first",
                signed(None, None),
                Approval::Required,
                day,
                reason::EXPIRED,
            ),
            (
                "required, unapproved and binding nothing it names: that first",
                {
                    let mut e = signed(None, None);
                    e.spec.intents = vec!["other".into()];
                    e
                },
                Approval::Required,
                10,
                reason::INTENT_NOT_BOUND,
            ),
        ];
        for (case, e, approval, now, want) in cases {
            let rules = Rules {
                approval,
                ..Rules::default()
            };
            let got = standing(&e, Some(&bound()), at(now), rules);
            let status = status(&e, &got);
            let condition = &status.conditions[0];
            assert_eq!(condition.reason, want, "{case}: {got:?}");
            let active = if want == reason::ACTIVE {
                "True"
            } else {
                "False"
            };
            assert_eq!(condition.status, active, "{case}");
            let signatures = Signatures::of(&e);
            assert_eq!(status.requested_by, signatures.requested_by, "{case}");
            assert_eq!(status.approved_by, signatures.approved_by, "{case}");
            if let Standing::Active(each) = &got {
                assert_eq!(each[0].signatures, signatures, "{case}");
            }
        }
        let unapproved = signed(Some("alice"), None);
        let required = Rules {
            approval: Approval::Required,
            ..Rules::default()
        };
        let Standing::Inactive { message, .. } =
            standing(&unapproved, Some(&bound()), at(10), required)
        else {
            panic!("an unapproved exception is honoured")
        };
        assert!(
            message.contains("asked for by alice") && message.contains(APPROVED_BY_ANNOTATION),
            "{message}"
        );
        let (none, _) = in_force(
            [&unapproved],
            &BindingRef::cluster("no-escape"),
            || Some(bound()),
            None,
            at(10),
            required,
        );
        assert_eq!(none, vec![], "an unapproved exception is in force");
    }

    #[test]
    fn an_exception_of_pod_security_controls_scopes_escape_to_host_alone() {
        use PodSecurityControl::{HostNamespaces, PrivilegedContainers};
        let bound = BTreeMap::from([
            ("escape".to_owned(), "escapeToHost".to_owned()),
            ("dns".to_owned(), "dnsManipulation".to_owned()),
        ]);
        let scoped = |intents: &[&str], controls: Option<Vec<PodSecurityControl>>| {
            let mut e = exception(0, 100, intents);
            e.spec.pod_security_controls = controls;
            standing(&e, Some(&bound), at(1), Rules::default())
        };
        // (case, intents, controls, reason, controls in force)
        let cases = [
            (
                "the whole intents",
                &["escape", "dns"][..],
                None,
                reason::ACTIVE,
                None,
            ),
            (
                "one control of escapeToHost",
                &["escape"],
                Some(vec![PrivilegedContainers]),
                reason::ACTIVE,
                Some(vec![PrivilegedContainers]),
            ),
            (
                "two, in any order",
                &["escape"],
                Some(vec![PrivilegedContainers, HostNamespaces]),
                reason::ACTIVE,
                Some(vec![HostNamespaces, PrivilegedContainers]),
            ),
            (
                "controls, and an intent that has none",
                &["escape", "dns"],
                Some(vec![PrivilegedContainers]),
                reason::CONTROLS_NOT_APPLICABLE,
                None,
            ),
            (
                "controls, and an intent not bound: ignored as ever",
                &["escape", "gone"],
                Some(vec![PrivilegedContainers]),
                reason::ACTIVE,
                Some(vec![PrivilegedContainers]),
            ),
        ];
        for (case, intents, controls, want, in_force) in cases {
            let got = scoped(intents, controls);
            let e = exception(0, 100, intents);
            assert_eq!(
                status(&e, &got).conditions[0].reason,
                want,
                "{case}: {got:?}"
            );
            if let Standing::Active(active) = &got {
                let in_force = in_force.map(|c| c.into_iter().collect::<BTreeSet<_>>());
                assert_eq!(active[0].controls, in_force, "{case}");
            }
        }
        // A cluster exception narrows escapeToHost alike, in each namespace it names.
        let mut cluster = cluster_exception(&["shop", "web"]);
        cluster.spec.pod_security_controls = Some(vec![PrivilegedContainers]);
        let Standing::Active(each) = standing(&cluster, Some(&bound), at(1), Rules::default())
        else {
            panic!("a cluster exception of one control is not honoured")
        };
        let controls: Vec<_> = each.iter().map(|e| e.controls.clone()).collect();
        let one = Some(BTreeSet::from([PrivilegedContainers]));
        assert_eq!(controls, vec![one.clone(), one]);
    }

    #[test]
    fn approval_reads_and_prints_as_the_flag_says() {
        for approval in [Approval::Optional, Approval::Required] {
            assert_eq!(
                approval.to_string().parse::<Approval>().ok(),
                Some(approval)
            );
        }
        assert_eq!(Approval::default(), Approval::Optional);
        assert!("always".parse::<Approval>().is_err());
    }

    #[test]
    fn an_active_exception_names_the_bound_intent_ids_and_changes_at_expiry() {
        let e = exception(0, 100, &["escape", "other"]);
        let got = standing(&e, Some(&bound()), at(1), Rules::default());
        let Standing::Active(each) = &got else {
            panic!("not active: {got:?}")
        };
        let [active] = each.as_slice() else {
            panic!("active in {} namespaces", each.len())
        };
        assert_eq!(active.kind, ExceptionKind::Namespaced);
        assert_eq!(active.intents, BTreeSet::from(["escapeToHost".to_owned()]));
        assert_eq!(active.namespace, "shop");
        assert_eq!(got.changes_at(), Some(at(100)));
    }

    #[test]
    fn a_cluster_binding_policy_in_a_namespace_honours_only_that_namespace_exceptions() {
        let Standing::Active(each) = standing(
            &exception(0, 100, &["escape"]),
            Some(&bound()),
            at(1),
            Rules::default(),
        ) else {
            panic!("not active")
        };
        let shop = each[0].clone();
        let mut web = shop.clone();
        web.namespace = "web".into();
        let all = [shop.clone(), web.clone()];
        assert_eq!(for_policy(&all, None), all.to_vec());
        assert_eq!(for_policy(&all, Some("web")), vec![web]);
        assert_eq!(for_policy(&all, Some("other")), vec![]);
    }

    fn cluster_exception(namespaces: &[&str]) -> ClusterSecurityIntentException {
        let e = exception(0, 100, &["escape"]);
        let mut cluster = ClusterSecurityIntentException::new(
            "fleet-agent",
            nimbus_api::ClusterSecurityIntentExceptionSpec {
                binding: e.spec.binding,
                intents: e.spec.intents,
                namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
                selector: e.spec.selector,
                workloads: e.spec.workloads,
                reason: e.spec.reason,
                expires_at: e.spec.expires_at,
                pod_security_controls: e.spec.pod_security_controls,
            },
        );
        cluster.metadata.creation_timestamp = e.metadata.creation_timestamp;
        cluster
    }

    #[test]
    fn a_cluster_exception_is_in_force_in_each_namespace_it_names_and_only_there() {
        let cluster = cluster_exception(&["shop", "web", "shop"]);
        assert_eq!(BindingRef::of(&cluster), BindingRef::cluster("no-escape"));
        let got = standing(&cluster, Some(&bound()), at(1), Rules::default());
        let Standing::Active(each) = &got else {
            panic!("not active: {got:?}")
        };
        let names: Vec<String> = each.iter().map(Excepted::describe).collect();
        assert_eq!(
            names,
            [
                "ClusterSecurityIntentException fleet-agent",
                "ClusterSecurityIntentException fleet-agent"
            ]
        );
        let namespaces: Vec<&str> = each.iter().map(|e| e.namespace.as_str()).collect();
        assert_eq!(namespaces, ["shop", "web"], "each named namespace, once");
        assert_eq!(got.changes_at(), Some(at(100)));
        assert_eq!(status(&cluster, &got).conditions[0].reason, reason::ACTIVE);
        // Beside a SecurityIntentException of the same name in one of its namespaces: both in
        // force there, told apart by their kinds.
        let namespaced = exception(0, 100, &["escape"]);
        let exceptions: [Exception; 2] = [(&cluster).into(), (&namespaced).into()];
        let binding = BindingRef::cluster("no-escape");
        let in_ns = |ns: Option<&str>| {
            let (got, _) = in_force(
                exceptions,
                &binding,
                || Some(bound()),
                ns,
                at(1),
                Rules::default(),
            );
            got.iter()
                .map(|e| format!("{}@{}", e.describe(), e.namespace))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            in_ns(Some("shop")),
            [
                "ClusterSecurityIntentException fleet-agent@shop",
                "SecurityIntentException legacy@shop"
            ]
        );
        assert_eq!(
            in_ns(Some("web")),
            ["ClusterSecurityIntentException fleet-agent@web"]
        );
        assert_eq!(in_ns(Some("other")), Vec::<String>::new());
        let (expired, _) = in_force(
            [&cluster],
            &binding,
            || Some(bound()),
            None,
            at(100),
            Rules::default(),
        );
        assert_eq!(expired, vec![], "expired everywhere at once");
    }

    #[test]
    fn a_binding_binds_the_intents_that_exist_by_their_ids() {
        let names: Vec<MatchIntent> = ["escape", "gone"]
            .map(|name| MatchIntent { name: name.into() })
            .into();
        let id = |name: &str| (name == "escape").then(|| "escapeToHost".to_owned());
        assert_eq!(bound_intents(&names, id), bound());
        assert_eq!(bound_intents(&[], id), BTreeMap::new());
    }

    #[test]
    fn a_policy_honours_the_active_exceptions_naming_its_binding_until_the_first_expiry() {
        let day = 86_400;
        let in_shop = exception(0, day, &["escape"]);
        let mut later = exception(0, 2 * day, &["escape"]);
        later.metadata.name = Some("later".into());
        let mut in_web = exception(0, day, &["escape"]);
        in_web.metadata.namespace = Some("web".into());
        let mut other_binding = exception(0, day, &["escape"]);
        other_binding.spec.binding.name = "other".into();
        let mut namespaced = exception(0, day, &["escape"]);
        namespaced.spec.binding.kind = "SecurityIntentBinding".into();
        let all = [in_shop, later, in_web, other_binding, namespaced];
        let binding = BindingRef::cluster("no-escape");
        let names = |got: &[Excepted]| -> Vec<String> {
            got.iter()
                .map(|e| format!("{}/{}", e.namespace, e.name))
                .collect()
        };
        struct Case {
            case: &'static str,
            /// The policy's namespace (`None`: the cluster binding's own policy).
            namespace: Option<&'static str>,
            now: i64,
            in_force: &'static [&'static str],
            changes_at: Option<i64>,
        }
        let cases = [
            Case {
                case: "cluster policy, before expiry",
                namespace: None,
                now: 10,
                in_force: &["shop/legacy", "shop/later", "web/legacy"],
                changes_at: Some(day),
            },
            Case {
                case: "policy in shop, before expiry",
                namespace: Some("shop"),
                now: 10,
                in_force: &["shop/legacy", "shop/later"],
                changes_at: Some(day),
            },
            Case {
                case: "policy in shop, after the first expiry",
                namespace: Some("shop"),
                now: day,
                in_force: &["shop/later"],
                changes_at: Some(2 * day),
            },
            Case {
                case: "after every expiry",
                namespace: None,
                now: 2 * day,
                in_force: &[],
                changes_at: None,
            },
            Case {
                case: "policy in another namespace",
                namespace: Some("other"),
                now: 10,
                in_force: &[],
                changes_at: None,
            },
        ];
        for c in cases {
            let (got, changes) = in_force(
                &all,
                &binding,
                || Some(bound()),
                c.namespace,
                at(c.now),
                Rules::default(),
            );
            assert_eq!(names(&got), c.in_force, "{}", c.case);
            assert_eq!(changes, c.changes_at.map(at), "{}", c.case);
        }
        let (none, _) = in_force(&all, &binding, || None, None, at(10), Rules::default());
        assert_eq!(none, vec![], "no such binding: nothing in force");
        let (none, _) = in_force(
            &all,
            &BindingRef::cluster("unnamed"),
            || panic!("asked for a binding no exception names"),
            None,
            at(10),
            Rules::default(),
        );
        assert_eq!(none, vec![]);
    }

    #[test]
    fn a_binding_ref_is_the_exception_namespace_binding_or_a_cluster_one() {
        let mut e = exception(0, 1, &["escape"]);
        assert_eq!(BindingRef::of(&e), BindingRef::cluster("no-escape"));
        e.spec.binding.kind = "SecurityIntentBinding".into();
        assert_eq!(
            BindingRef::of(&e),
            BindingRef::namespaced("no-escape", "shop")
        );
    }
}
