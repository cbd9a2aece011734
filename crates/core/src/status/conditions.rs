//! The conditions every status is made of: `Ready`, and kstatus's `Stalled` and `Reconciling`
//! beside it, with messages bounded.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use nimbus_api::{Condition, condition};

/// A `Ready` condition (the transition time is filled in when it is written).
pub fn ready(
    ok: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> Condition {
    condition(
        condition::READY,
        if ok { "True" } else { "False" },
        reason,
        message.into(),
        generation,
    )
}

/// `Ready=Unknown`: the outcome is not known yet.
pub fn reconciling(message: String, generation: Option<i64>) -> Condition {
    condition(
        condition::READY,
        "Unknown",
        condition::REASON_RECONCILING,
        message,
        generation,
    )
}

/// Whether a problem with this reason stalls its object, in kstatus's sense: nothing the
/// operator watches will fix it, only a change of the object (or of what it refers to, or of
/// the operator's configuration) will. kstatus, Flux and Argo CD then fail fast instead of
/// waiting for a timeout. The others are waited for (`Reconciling`):
///
/// | reason | stalls | because |
/// |---|---|---|
/// | `UnsupportedIntent` | yes | the intent ID is not in the catalog, or not for this kind of binding |
/// | `InvalidSelector`, `InvalidNamespaceSelector` | yes | the selector as written cannot be compiled |
/// | `UnsupportedSelector` | yes | no engine that enforces the intent can express the selector |
/// | `PolicyConflict` | yes | an object we do not own holds the name; it is never taken over |
/// | `SensitiveIntentNotAllowed` | yes | the binding must list the intent in its annotation |
/// | `InvalidParameter` | yes, even when the default is used instead | the parameter as written is not applied |
/// | `EngineDisabled` | yes | `--disable-engines` is the operator's configuration |
/// | `NotBound` | yes | no binding generates this policy |
/// | `EnforcementNotLive` | yes | a dry run of what the intent forbids was admitted: the engine does not act, and nothing the operator writes makes it |
/// | `IntentNotFound` | no | the intent may be applied after the binding (watched) |
/// | `EngineNotInstalled` | no | the operator starts an engine when its CRDs appear (watched) |
/// | `EngineNotReady` | no | the k8tls namespace or virtual-patch database may appear (watched) |
/// | `NoNamespaceSelected` | no | a namespace the selector selects may be created (watched) |
/// | `ApplyFailed` | no | writes are retried |
/// | `Reconciling` | no | the outcome is not known yet |
pub fn stalls(reason: &str) -> bool {
    [
        condition::REASON_UNSUPPORTED_INTENT,
        condition::REASON_INVALID_SELECTOR,
        condition::REASON_INVALID_NAMESPACE_SELECTOR,
        condition::REASON_UNSUPPORTED_SELECTOR,
        condition::REASON_POLICY_CONFLICT,
        condition::REASON_SENSITIVE_INTENT_NOT_ALLOWED,
        condition::REASON_INVALID_PARAMETER,
        condition::REASON_ENGINE_DISABLED,
        condition::REASON_NOT_BOUND,
        condition::REASON_ENFORCEMENT_NOT_LIVE,
    ]
    .contains(&reason)
}

/// Whether `conditions` end the change to `generation` of their object, as kstatus reads them:
/// `Ready=True` (Current) or `Stalled=True` (Failed), observed at that generation. While it
/// only waits for something the operator watches (`Reconciling`: an intent applied after the
/// binding, a refused write retried), the change is still under way.
pub fn change_ended(conditions: &[Condition], generation: Option<i64>) -> bool {
    conditions.iter().any(|c| {
        c.observed_generation == generation
            && c.status == "True"
            && [condition::READY, condition::STALLED].contains(&c.type_.as_str())
    })
}

/// What stalls an object: the reason of the first stalling problem, and every one's message.
#[derive(Debug, Default)]
pub(super) struct Stall {
    reason: Option<String>,
    messages: Vec<String>,
}

impl Stall {
    pub(super) fn add(&mut self, reason: &str, message: impl Into<String>) {
        self.reason.get_or_insert_with(|| reason.to_owned());
        self.messages.push(message.into());
    }
}

/// The conditions written beside `Ready`, as kstatus reads them: `Stalled=True` when something
/// stalls the object; otherwise `Reconciling=True` while `Ready` is not `True` (not known yet,
/// or waiting for something the operator watches). Both are "abnormal-true": absent rather than
/// `False`, so a healthy object carries `Ready` alone. Never both, so kstatus (which reads
/// `Reconciling` first), Flux and Argo CD agree.
pub(super) fn with_kstatus(ready: Condition, stall: Stall) -> Vec<Condition> {
    let generation = ready.observed_generation;
    let abnormal = match stall.reason {
        Some(reason) => Some(condition(
            condition::STALLED,
            "True",
            &reason,
            stall.messages.join("; "),
            generation,
        )),
        None if ready.status != "True" => Some(condition(
            condition::RECONCILING,
            "True",
            &ready.reason,
            ready.message.clone(),
            generation,
        )),
        None => None,
    };
    std::iter::once(ready).chain(abnormal).collect()
}

/// `text` cut at a character boundary so that, with the `… (N more bytes)` it then ends in, it
/// is at most `max` bytes long.
pub fn bounded(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    // Room for the suffix: the ellipsis (3 bytes), up to 20 digits and the words.
    let mut cut = max.saturating_sub(40);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let dropped = text.len() - cut;
    text.truncate(cut);
    text.push_str(&format!("… ({dropped} more bytes)"));
    text
}

/// Longest condition message written; longer ones are cut (an object's whole size is bounded
/// by etcd, and a list of thousands of names helps nobody).
const MAX_MESSAGE: usize = 4096;

pub(crate) fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    let message = bounded(message, MAX_MESSAGE);
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}
