//! The status of a NimbusPolicy or ClusterNimbusPolicy: what its translation and the writes of
//! its native objects did.

use super::conditions::{Stall, ready, stalls, with_kstatus};
use crate::engines::Problem;
use crate::policy::PolicyPlan;
use nimbus_api::{Condition, NimbusPolicyStatus, STATUS_CREATED, condition};

/// What executing a policy's translation did to one generated native object.
#[derive(Debug, Clone, PartialEq)]
pub enum NativeOutcome {
    /// It already was as generated.
    Unchanged,
    Written,
    /// An object of that name exists and is not the policy's: it was left alone.
    Conflict,
    /// Why the write failed.
    Failed(String),
}

/// One generated native object: its status entry (`Kind/name`, or `namespace/CronJob/name`),
/// whether the status lists its kind, and what writing it did.
#[derive(Debug, Clone)]
pub struct NativeResult {
    pub entry: String,
    pub listed: bool,
    pub outcome: NativeOutcome,
}

/// The status of a NimbusPolicy or ClusterNimbusPolicy at `generation`, planned `plan`, once
/// its native objects were written (`natives`): the problems of its translation, plus a
/// conflict or failure per native object; the entries of the native objects in force, after
/// those external adapters reported (they own them).
pub fn policy_status(
    plan: &PolicyPlan,
    generation: Option<i64>,
    natives: &[NativeResult],
) -> NimbusPolicyStatus {
    let mut problems = plan.translation.problems.clone();
    let mut entries = plan.external_entries.clone();
    for native in natives {
        match &native.outcome {
            NativeOutcome::Conflict => problems.push(Problem {
                intent: String::new(),
                reason: condition::REASON_POLICY_CONFLICT,
                message: format!("{} exists and is not owned by this policy", native.entry),
                blocking: true,
            }),
            NativeOutcome::Failed(message) => problems.push(Problem {
                intent: String::new(),
                reason: condition::REASON_APPLY_FAILED,
                message: message.clone(),
                blocking: true,
            }),
            NativeOutcome::Unchanged | NativeOutcome::Written => {
                if native.listed {
                    entries.push(native.entry.clone());
                }
            }
        }
    }
    NimbusPolicyStatus {
        status: STATUS_CREATED.to_owned(),
        last_updated: None,
        number_of_adapter_policies: entries.len() as i32,
        adapter_policies: (!entries.is_empty()).then_some(entries),
        observed_generation: generation,
        conditions: policy_conditions(&problems, generation),
    }
}

/// A policy's conditions: [`policy_ready`], and `Stalled` for the problems that stall it (see
/// [`stalls`]): those leaving an intent unenforced, and a parameter that is not applied as
/// written even where its default is enforced instead. A partial problem (another engine still
/// enforces the intent) does not stall.
pub(super) fn policy_conditions(problems: &[Problem], generation: Option<i64>) -> Vec<Condition> {
    let mut stall = Stall::default();
    for p in problems.iter().filter(|p| {
        stalls(p.reason) && (p.blocking || p.reason == condition::REASON_INVALID_PARAMETER)
    }) {
        stall.add(p.reason, p.message.clone());
    }
    with_kstatus(policy_ready(problems, generation), stall)
}

/// `Ready` from the problems of a translation: false with the first blocking problem's reason
/// when an intent is not enforced at all; true otherwise, with partial problems in the message.
pub fn policy_ready(problems: &[Problem], generation: Option<i64>) -> Condition {
    let message = problems
        .iter()
        .map(|p| p.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    match problems.iter().find(|p| p.blocking) {
        Some(p) => ready(false, p.reason, message, generation),
        None => ready(true, condition::REASON_READY, message, generation),
    }
}
