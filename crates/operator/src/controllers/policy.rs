//! NimbusPolicy / ClusterNimbusPolicy → native policies. One mechanism for every engine:
//! translate (pure) → apply what differs → prune what is no longer wanted → write status once.

use super::{Context, publish, update_status};
use crate::apply::ready;
use crate::error::Error;
use crate::metrics::EngineLabels;
use crate::natives::{Key, Outcome};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, NimbusPolicy, NimbusPolicyStatus, STATUS_CREATED, condition,
};
use nimbus_core::engines::{self, PolicyInput, Problem};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;

pub async fn reconcile_namespaced(
    np: Arc<NimbusPolicy>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let uid = np
        .uid()
        .ok_or_else(|| Error::MissingField(np.name_any(), "metadata.uid"))?;
    let api = Api::namespaced(ctx.client.clone(), &np.namespace().unwrap_or_default());
    let input = PolicyInput::namespaced(&np, &uid);
    sync(&api, &*np, np.status.as_ref(), &input, &ctx).await
}

pub async fn reconcile_cluster(
    cwnp: Arc<ClusterNimbusPolicy>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let uid = cwnp
        .uid()
        .ok_or_else(|| Error::MissingField(cwnp.name_any(), "metadata.uid"))?;
    let input = PolicyInput::cluster(&cwnp, &uid);
    sync(
        &Api::all(ctx.client.clone()),
        &*cwnp,
        cwnp.status.as_ref(),
        &input,
        &ctx,
    )
    .await
}

async fn sync<K>(
    api: &Api<K>,
    policy: &K,
    current: Option<&NimbusPolicyStatus>,
    input: &PolicyInput<'_>,
    ctx: &Context,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
{
    let uid = &input.owner.uid;
    let engines = ctx.engine_set();
    let env = ctx.environment(input.rules);
    let translation = engines::translate(input, &env, &engines);
    let mut problems = translation.problems;

    let mut entries = Vec::new();
    let mut keep = BTreeSet::new();
    let mut written = 0;
    let mut failure = None;
    for generated in &translation.objects {
        keep.insert(Key::of(generated.kind, &generated.object));
        let entry = generated.entry();
        match ctx.natives.apply(generated, uid).await {
            Ok(outcome) => {
                if matches!(outcome, Outcome::Written) {
                    written += 1;
                    ctx.metrics
                        .applied
                        .get_or_create(&EngineLabels {
                            engine: generated.engine.name(),
                        })
                        .inc();
                }
                if matches!(outcome, Outcome::Conflict) {
                    problems.push(Problem {
                        intent: String::new(),
                        reason: condition::REASON_POLICY_CONFLICT,
                        message: format!("{entry} exists and is not owned by this policy"),
                        blocking: true,
                    });
                } else if generated.kind.listed {
                    entries.push(entry);
                }
            }
            Err(error) => {
                problems.push(Problem {
                    intent: String::new(),
                    reason: condition::REASON_APPLY_FAILED,
                    message: error.to_string(),
                    blocking: true,
                });
                failure.get_or_insert(error);
            }
        }
    }
    let pruned = ctx.natives.prune(uid, &keep).await?;
    for engine in &pruned {
        ctx.metrics
            .pruned
            .get_or_create(&EngineLabels {
                engine: engine.name(),
            })
            .inc();
    }
    let pruned = pruned.len();
    if written + pruned > 0 {
        let note = format!("{written} native policies applied, {pruned} removed");
        publish(ctx, policy, EventType::Normal, "NativePoliciesSynced", note).await;
    }

    let generation = policy.meta().generation;
    let status = NimbusPolicyStatus {
        status: STATUS_CREATED.to_owned(),
        last_updated: None,
        number_of_adapter_policies: entries.len() as i32,
        adapter_policies: (!entries.is_empty()).then_some(entries),
        observed_generation: generation,
        conditions: vec![readiness(&problems, generation)],
    };
    let action = update_status(ctx, api, policy, current, status).await?;
    failure.map_or(Ok(action), Err)
}

/// `Ready` from the problems of a translation: false with the first blocking problem's reason
/// when an intent is not enforced at all; true otherwise, with partial problems in the message.
pub fn readiness(problems: &[Problem], generation: Option<i64>) -> nimbus_api::Condition {
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
