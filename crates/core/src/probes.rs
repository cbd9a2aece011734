//! Probes: proof that an engine's enforcement is live, not just written. A policy can be in the
//! cluster and do nothing: Kyverno's admission controller down behind `failurePolicy: Ignore`,
//! its webhook configuration deleted, a ValidatingAdmissionPolicy's binding removed by hand.
//! The leader therefore submits, as a server-side dry run (`dryRun=All`: admission runs in
//! full, nothing is stored), an object the intent forbids, and the answer says whether the
//! engine acted. Pure: what to probe, the probe object, how to read the answer, and what it
//! means for status and posture; the operator sends the requests.

use crate::engines::{Engine, Problem, Translation};
use crate::exceptions::{Excepted, workloads};
use crate::intents::id;
use crate::namespaces::{self, ProtectedNamespaces};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::core::{Selector, SelectorExt};
use nimbus_api::posture::{LiveState, Liveness};
use nimbus_api::{PodSecurityControl, condition};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Reasons the liveness of an intent carries.
pub mod reason {
    /// The probe was admitted.
    pub const NOT_LIVE: &str = nimbus_api::condition::REASON_ENFORCEMENT_NOT_LIVE;
    /// The engine refused the probe with its own message.
    pub const DENIED_BY_ENGINE: &str = "DeniedByEngine";
    /// Something else refused it first (PodSecurity admission, another policy or webhook).
    pub const DENIED_ELSEWHERE: &str = "DeniedElsewhere";
    /// The API server could not call the engine's webhook, which fails closed.
    pub const WEBHOOK_CALL_FAILED: &str = "WebhookCallFailed";
    /// The request could not be made or was not authorized.
    pub const PROBE_FAILED: &str = "ProbeFailed";
    /// None of the intent's engines can be probed by a dry run.
    pub const NOT_PROBEABLE: &str = "NotProbeable";
    /// No probe object satisfies the selector, or no namespace to send it to.
    pub const NO_PROBE_OBJECT: &str = "NoProbeObject";
    /// Probes are due but none has been answered yet.
    pub const NOT_PROBED_YET: &str = "NotProbedYet";
    /// This replica does not lead; the leader probes and found nothing not live.
    pub const PROBED_BY_LEADER: &str = "ProbedByLeader";
}

/// Label every probe object carries, so that audit logs and other admission policies can tell
/// it (it is never stored).
pub const PROBE_LABEL: &str = "intent.security.nimbus.com/probe";

/// Whether `engine`'s enforcement of intent `intent` can be proven by a dry run: the engine
/// decides at admission and refuses (validates). Mutations (cocoWorkload,
/// unauthorizedSaTokenAccess) could be read from the dry run's answer but are not probed yet;
/// KubeArmor, NetworkPolicy and ClusterNetworkPolicy act at run time, which no dry run reaches.
pub fn probeable(engine: Engine, intent: &str) -> bool {
    matches!(engine, Engine::Kyverno | Engine::Admission) && intent == id::ESCAPE_TO_HOST
}

/// What the probes found of an (intent ID, engine) of one policy.
pub type Lookup<'a> = &'a dyn Fn(&str, Engine) -> Probed;

/// What one probe is about: a policy's intent as one engine enforces it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub policy_uid: String,
    pub intent: String,
    pub engine: Engine,
}

/// A probe to send: `pod`, created as a dry run in `namespace`; the engine's native objects
/// (`natives`, by name) are those whose refusal proves it live.
#[derive(Clone, Debug, PartialEq)]
pub struct Probe {
    pub key: Key,
    pub namespace: String,
    pub pod: Value,
    pub natives: Vec<String>,
}

/// What the probes of one policy are: those to send, and the (intent, engine) that cannot be
/// probed with why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Planned {
    pub probes: Vec<Probe>,
    pub not_probed: Vec<(Key, String)>,
}

/// The policy a plan is for.
pub struct Target<'a> {
    pub uid: &'a str,
    /// `None` for a ClusterNimbusPolicy.
    pub namespace: Option<&'a str>,
    /// A ClusterNimbusPolicy's namespaces.
    pub namespaces: Option<&'a nimbus_api::NamespaceSelector>,
    pub selector: &'a LabelSelector,
    pub rules: &'a [nimbus_api::NimbusRule],
    pub translation: &'a Translation,
    /// The SecurityIntentExceptions in force for it: a probe they would let out proves nothing.
    pub exceptions: &'a [Excepted],
}

/// The probes of `target`: one per blocking rule and engine that writes objects for it and can
/// be probed; a ClusterNimbusPolicy's in one of `namespaces` (every namespace's name) it applies
/// in.
pub fn plan(target: &Target, namespaces: &[String], protected: &ProtectedNamespaces) -> Planned {
    let Target {
        uid,
        namespace,
        namespaces: cluster_namespaces,
        selector,
        rules,
        translation,
        exceptions,
    } = *target;
    let mut planned = Planned::default();
    for (index, rule) in rules.iter().enumerate() {
        if rule.rule.action != "Block" {
            continue;
        }
        let mut engines: Vec<Engine> = (translation.objects.iter())
            .filter(|g| g.rule == index && probeable(g.engine, &rule.id))
            .map(|g| g.engine)
            .collect();
        engines.dedup();
        for engine in engines {
            let key = Key {
                policy_uid: uid.to_owned(),
                intent: rule.id.clone(),
                engine,
            };
            let natives = (translation.objects.iter())
                .filter(|g| g.rule == index && g.engine == engine)
                .filter_map(|g| g.object.metadata.name.clone())
                .collect();
            let target = match namespace {
                Some(ns) => Some(ns.to_owned()),
                None => probe_namespace(cluster_namespaces, namespaces, protected),
            };
            let Some(target) = target else {
                let why = "no namespace the policy applies in to send the probe to";
                planned.not_probed.push((key, why.to_owned()));
                continue;
            };
            let excepting = |pod: &Value| {
                let labels: BTreeMap<String, String> =
                    serde_json::from_value(pod["metadata"]["labels"].clone()).unwrap_or_default();
                // The probe is a bare pod named by the API server (`generateName`): an exception
                // naming workloads cannot name it, and does not let it out, so it is sent.
                let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                exceptions.iter().find(|e| {
                    // The probe is a privileged pod: an exception of other controls still
                    // has it denied, so probing still proves the rest enforced.
                    e.namespace == target
                        && e.intents.contains(&rule.id)
                        && e.lets_out_of(Some(PodSecurityControl::PrivilegedContainers))
                        && Selector::try_from(e.selector.clone()).is_ok_and(|s| s.matches(&labels))
                        && workloads::names(e, "Pod", name)
                })
            };
            match probe_pod(selector, &key) {
                Some(pod) if let Some(e) = excepting(&pod) => planned.not_probed.push((
                    key,
                    format!("{} lets the probe object out of the intent", e.describe()),
                )),
                Some(pod) => planned.probes.push(Probe {
                    key,
                    namespace: target,
                    pod,
                    natives,
                }),
                None => planned.not_probed.push((
                    key,
                    "no set of labels satisfies the workload selector".to_owned(),
                )),
            }
        }
    }
    planned
}

/// Where a cluster policy's probe goes: `default` when it applies there (every cluster has it),
/// else the first namespace, by name, it applies in.
fn probe_namespace(
    selector: Option<&nimbus_api::NamespaceSelector>,
    namespaces: &[String],
    protected: &ProtectedNamespaces,
) -> Option<String> {
    let applies = |ns: &str| match selector {
        Some(s) => namespaces::selects(s, ns, protected),
        None => !protected.contains(ns),
    };
    let mut candidates: Vec<&String> = namespaces.iter().filter(|ns| applies(ns)).collect();
    candidates.sort();
    candidates
        .iter()
        .find(|ns| ns.as_str() == "default")
        .or(candidates.first())
        .map(|ns| (*ns).clone())
}

/// Labels the selector matches: its `matchLabels`, a value of each `In`, some value for each
/// `Exists`, another for each `NotIn`; `None` when none does (checked by the selector itself).
pub fn labels_for(selector: &LabelSelector) -> Option<BTreeMap<String, String>> {
    let mut labels: BTreeMap<String, String> = selector.match_labels.clone().unwrap_or_default();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" if !labels.contains_key(&e.key) => {
                labels.insert(e.key.clone(), values.first()?.clone());
            }
            "Exists" => {
                labels
                    .entry(e.key.clone())
                    .or_insert_with(|| "nimbus-probe".to_owned());
            }
            // A NotIn the labels break, or an operator no selector has: no probe (the
            // selector's own check below would refuse it too).
            "NotIn" if labels.get(&e.key).is_some_and(|v| values.contains(v)) => return None,
            _ => {}
        }
    }
    let parsed = Selector::try_from(selector.clone()).ok()?;
    parsed.matches(&labels).then_some(labels)
}

/// The probe: a privileged pod (it breaks every Pod Security level, so every psaLevel refuses
/// it) with labels the selector matches. Never stored: it is only ever sent as a dry run, and
/// its image is never pulled.
pub fn probe_pod(selector: &LabelSelector, key: &Key) -> Option<Value> {
    let mut labels = labels_for(selector)?;
    if !labels.contains_key(PROBE_LABEL) {
        labels.insert(PROBE_LABEL.to_owned(), key.engine.name().to_owned());
        // The probe's own label must not take it out of the selection (a DoesNotExist on it).
        let parsed = Selector::try_from(selector.clone()).ok()?;
        if !parsed.matches(&labels) {
            labels.remove(PROBE_LABEL);
        }
    }
    Some(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "nimbus-probe-",
            "labels": labels,
            "annotations": {PROBE_LABEL: format!("{}/{}", key.intent, key.engine.name())},
        },
        "spec": {
            "containers": [{
                "name": "probe",
                "image": "registry.k8s.io/pause:3.10",
                "securityContext": {"privileged": true},
            }],
        },
    }))
}

/// The API server's answer to a probe.
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    /// It would have been created.
    Admitted,
    /// It was refused: the status's code, reason and message.
    Refused {
        code: u16,
        reason: String,
        message: String,
    },
    /// No answer (the request failed on the way).
    Unsent(String),
}

/// What a probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The engine refused it, naming one of its objects: live.
    DeniedByEngine,
    /// It passed admission: the engine did not act.
    Admitted,
    /// The engine's webhook could not be called and fails closed: nothing violating gets in,
    /// but the engine decides nothing either.
    WebhookCallFailed(String),
    /// Refused by something other than the engine.
    DeniedElsewhere(String),
    /// The probe could not be made (transport, authorization).
    Failed(String),
}

/// What `response` says of `engine`, whose objects enforcing the intent are `natives`.
///
/// | answer | outcome |
/// |---|---|
/// | created (dry run) | `Admitted` |
/// | 409 AlreadyExists (admission passed, storage refused) | `Admitted` |
/// | Kyverno: `admission webhook … denied the request` naming one of its policies | `DeniedByEngine` |
/// | admission: `ValidatingAdmissionPolicy '<ours>' … denied request` | `DeniedByEngine` |
/// | `failed calling webhook` | `WebhookCallFailed` |
/// | 403 `cannot create resource` (the operator may not create pods) | `Failed` |
/// | any other refusal (PodSecurity, another webhook or policy) | `DeniedElsewhere` |
pub fn classify(engine: Engine, natives: &[String], response: &Response) -> Outcome {
    let (code, reason, message) = match response {
        Response::Admitted => return Outcome::Admitted,
        Response::Unsent(why) => return Outcome::Failed(why.clone()),
        Response::Refused {
            code,
            reason,
            message,
        } => (*code, reason.as_str(), message.as_str()),
    };
    if code == 409 && reason == "AlreadyExists" {
        return Outcome::Admitted;
    }
    let names = |n: &String| !n.is_empty() && message.contains(n.as_str());
    let ours = match engine {
        Engine::Kyverno => message.contains("denied the request") && natives.iter().any(names),
        Engine::Admission => natives
            .iter()
            .any(|n| message.contains(&format!("ValidatingAdmissionPolicy '{n}'"))),
        _ => false,
    };
    if ours {
        Outcome::DeniedByEngine
    } else if message.contains("failed calling webhook") {
        Outcome::WebhookCallFailed(message.to_owned())
    } else if code == 403 && message.contains("cannot create resource") {
        Outcome::Failed(message.to_owned())
    } else {
        Outcome::DeniedElsewhere(message.to_owned())
    }
}

/// How long an engine's object must have existed, and acted by its engine's own account (a
/// Kyverno policy Ready), before it is probed: kube-apiserver reloads its admission policies
/// about every second, and Kyverno loads a Ready policy into its webhook within a few. An object
/// just (re)written — by the operator's drift repair too — is not judged until then.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether an object created at `created` that `acts` has settled at `now` (see [`SETTLE`]).
pub fn settled(created: Option<&Time>, acts: bool, now: k8s_openapi::jiff::Timestamp) -> bool {
    let Some(created) = created else {
        return false;
    };
    let age = now.duration_since(created.0);
    acts && !age.is_negative() && age.unsigned_abs() >= SETTLE
}

/// A probe's outcome and when it was sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub outcome: Outcome,
    pub at: Option<Time>,
}

/// Whether the engine is proven not to act: only an admitted probe says so. A refusal by
/// something else, or a failed request, proves nothing either way and changes no verdict.
pub fn not_live(observed: Option<&Observed>) -> bool {
    observed.is_some_and(|o| o.outcome == Outcome::Admitted)
}

/// What is known of one engine's enforcement of an intent.
#[derive(Clone, Debug, PartialEq)]
pub enum Probed {
    /// The engine acts at run time, which a dry run does not reach.
    NotProbeable,
    /// No probe is sent for it, and why.
    NoProbe(String),
    /// Its probe is due and not answered yet.
    Due,
    /// This replica does not lead: the leader probes, and its statuses say only what is not
    /// live.
    OnLeader,
    Answered(Observed),
}

/// The liveness of an intent from what is known of each of its engines: the worst of those
/// probed (`NotLive`, then `Unverified`, then `Live`); `NotProbed` only when none was.
pub fn liveness(engines: &[(Engine, Probed)]) -> Liveness {
    let mut worst: Option<Liveness> = None;
    for (engine, probed) in engines {
        let name = engine.name();
        let (state, reason, message, at) = match probed {
            Probed::NotProbeable => (
                LiveState::NotProbed,
                reason::NOT_PROBEABLE,
                format!("engine {name} cannot be probed by a dry run"),
                None,
            ),
            Probed::NoProbe(why) => (
                LiveState::NotProbed,
                reason::NO_PROBE_OBJECT,
                format!("engine {name}: {why}"),
                None,
            ),
            Probed::Due => (
                LiveState::NotProbed,
                reason::NOT_PROBED_YET,
                format!("engine {name}: no probe answered yet"),
                None,
            ),
            Probed::OnLeader => (
                LiveState::NotProbed,
                reason::PROBED_BY_LEADER,
                format!(
                    "engine {name}: probed by the leader replica, whose statuses report no \
                     admitted probe"
                ),
                None,
            ),
            Probed::Answered(o) => {
                let (state, reason, message) = describe(name, &o.outcome);
                (state, reason, message, o.at.clone())
            }
        };
        let this = Liveness {
            state,
            reason: reason.to_owned(),
            message,
            probed_at: at,
        };
        if worst
            .as_ref()
            .is_none_or(|w| rank(this.state) > rank(w.state))
        {
            worst = Some(this);
        }
    }
    worst.unwrap_or_else(|| Liveness {
        state: LiveState::NotProbed,
        reason: reason::NOT_PROBEABLE.to_owned(),
        message: "no engine enforces it here".to_owned(),
        probed_at: None,
    })
}

/// The liveness of intent `id` by its engines' probes (the posture's); an enforcing engine whose probe was
/// admitted is `NotLive`, and counts as not in force.
pub fn judge(
    engines: &mut [nimbus_api::posture::EngineCoverage],
    id: &str,
    probes: Lookup,
) -> Liveness {
    let mut known = Vec::new();
    for coverage in engines.iter_mut() {
        let Ok(engine) = coverage.engine.parse::<Engine>() else {
            continue;
        };
        let probed = if probeable(engine, id) {
            probes(id, engine)
        } else {
            Probed::NotProbeable
        };
        if coverage.state == nimbus_api::posture::EngineState::Enforcing
            && matches!(&probed, Probed::Answered(o) if not_live(Some(o)))
        {
            coverage.state = nimbus_api::posture::EngineState::NotLive;
        }
        known.push((engine, probed));
    }
    liveness(&known)
}

fn rank(state: LiveState) -> u8 {
    match state {
        // An engine no probe reaches says nothing against one that was proven live.
        LiveState::NotProbed => 0,
        LiveState::Live => 1,
        LiveState::Unverified => 2,
        LiveState::NotLive => 3,
    }
}

fn describe(engine: &str, outcome: &Outcome) -> (LiveState, &'static str, String) {
    match outcome {
        Outcome::DeniedByEngine => (
            LiveState::Live,
            reason::DENIED_BY_ENGINE,
            format!("engine {engine} refused a dry-run privileged pod"),
        ),
        Outcome::Admitted => (
            LiveState::NotLive,
            reason::NOT_LIVE,
            not_live_message(engine),
        ),
        Outcome::WebhookCallFailed(m) => (
            LiveState::Unverified,
            reason::WEBHOOK_CALL_FAILED,
            format!("engine {engine}: its webhook could not be called and fails closed: {m}"),
        ),
        Outcome::DeniedElsewhere(m) => (
            LiveState::Unverified,
            reason::DENIED_ELSEWHERE,
            format!("engine {engine}: the probe was refused before or beside it: {m}"),
        ),
        Outcome::Failed(m) => (
            LiveState::Unverified,
            reason::PROBE_FAILED,
            format!("engine {engine}: the probe could not be sent: {m}"),
        ),
    }
}

/// What an admitted probe says of its engine.
pub const NOT_LIVE: &str =
    "its objects are in the cluster, but a dry-run privileged pod they forbid was admitted";

fn not_live_message(engine: &str) -> String {
    format!("engine {engine}: {NOT_LIVE}")
}

/// The status message of an admitted probe of `engine` enforcing `intent`.
fn problem_message(intent: &str, engine: Engine) -> String {
    format!("intent `{intent}`: {}", not_live_message(engine.name()))
}

/// What a replica that does not probe (a standby) knows of `engine` enforcing `intent`: what
/// the leader wrote in the policy's `conditions` (a `Stalled` condition naming it when its
/// probe was admitted). Standbys serve the posture too, and must not contradict the leader.
pub fn from_status(conditions: &[nimbus_api::Condition], intent: &str, engine: Engine) -> Probed {
    let stalled = conditions.iter().find(|c| {
        c.type_ == condition::STALLED
            && c.status == "True"
            && c.reason == condition::REASON_ENFORCEMENT_NOT_LIVE
    });
    let wanted = problem_message(intent, engine);
    match stalled {
        Some(c) if c.message.contains(&wanted) => Probed::Answered(Observed {
            outcome: Outcome::Admitted,
            at: None,
        }),
        _ => Probed::OnLeader,
    }
}

/// The status problems of a policy's rules whose probes were admitted (`not_live(intent,
/// engine)`): each leaves its intent unenforced (one engine of a mechanism writes), so it
/// stalls the policy until a probe is refused again.
pub fn problems(
    rules: &[nimbus_api::NimbusRule],
    translation: &Translation,
    not_live: impl Fn(&str, Engine) -> bool,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (index, rule) in rules.iter().enumerate() {
        let mut engines: Vec<Engine> = (translation.objects.iter())
            .filter(|g| g.rule == index)
            .map(|g| g.engine)
            .collect();
        engines.dedup();
        for engine in engines.into_iter().filter(|e| not_live(&rule.id, *e)) {
            problems.push(Problem {
                intent: rule.id.clone(),
                reason: condition::REASON_ENFORCEMENT_NOT_LIVE,
                message: problem_message(&rule.id, engine),
                blocking: true,
            });
        }
    }
    problems
}

/// Which of `due` (in a stable order) this period sends: at most `cap`, starting where the last
/// period stopped (`round` counts periods), so that every probe is sent within
/// ⌈due / cap⌉ periods.
pub fn schedule<T: Clone>(due: &[T], cap: usize, round: usize) -> Vec<T> {
    if due.len() <= cap {
        return due.to_vec();
    }
    let start = (round * cap) % due.len();
    due.iter().cycle().skip(start).take(cap).cloned().collect()
}

#[cfg(test)]
mod tests;
