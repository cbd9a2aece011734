//! SecurityIntentBinding → NimbusPolicy of the same name and namespace.

use super::{Context, publish_changes, unless_left_behind, update_status, write_policy};
use crate::apply::is_controlled_by;
use crate::conditions::{Blocker, binding_ready, policy_result, ready};
use crate::error::Error;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use nimbus_api::{
    NimbusPolicy, STATUS_CREATED, SecurityIntentBinding, SecurityIntentBindingStatus, condition,
};
use nimbus_core::plan;
use std::sync::Arc;

pub async fn reconcile(
    sib: Arc<SecurityIntentBinding>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = sib
        .namespace()
        .ok_or_else(|| Error::MissingField(sib.name_any(), "metadata.namespace"))?;
    let name = sib.name_any();
    let uid = sib.uid().unwrap_or_default();
    let generation = sib.metadata.generation;
    let policies: Api<NimbusPolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    let observed = ctx.policies.get(&ObjectRef::new(&name).within(&namespace));
    let observed = unless_left_behind(&policies, &*sib, observed).await?;
    let ours = observed.as_deref().filter(|p| is_controlled_by(*p, &uid));
    if observed.is_some() && ours.is_none() {
        let message =
            format!("NimbusPolicy {namespace}/{name} exists and is not owned by this binding");
        let status = status_of(
            None,
            Vec::new(),
            ready(
                false,
                condition::REASON_POLICY_CONFLICT,
                message,
                generation,
            ),
        );
        return write_status(&ctx, &sib, status).await;
    }

    let plan = match plan::binding(&sib, |n| ctx.intents.get(&ObjectRef::new(n))) {
        Ok(plan) => plan,
        Err(err) => {
            // Keep the policy in force: a typo in the selector must not drop protection.
            let condition = ready(
                false,
                condition::REASON_INVALID_SELECTOR,
                err.to_string(),
                generation,
            );
            let bound = sib
                .status
                .as_ref()
                .and_then(|s| s.bound_intents.clone())
                .unwrap_or_default();
            return write_status(&ctx, &sib, status_of(ours, bound, condition)).await;
        }
    };

    let policy = plan.policy;
    let synced = write_policy(
        &ctx,
        &policies,
        policy.as_ref(),
        ours,
        &ctx.policies_created,
    )
    .await;
    if let Ok(Some(change)) = synced {
        publish_changes::<_, NimbusPolicy>(&ctx, &*sib, &name, &[(None, change)]);
    }

    let mut blockers = Vec::new();
    if !plan.missing_intents.is_empty() {
        blockers.push(Blocker {
            reason: condition::REASON_INTENT_NOT_FOUND,
            message: format!(
                "SecurityIntents not found: {}",
                plan.missing_intents.join(", ")
            ),
        });
    }
    let (written, failure) = match synced {
        Ok(change) => (change.is_some(), None),
        Err(error) => {
            blockers.push(Blocker {
                reason: condition::REASON_APPLY_FAILED,
                message: error.to_string(),
            });
            (false, Some(error))
        }
    };
    let results = match &policy {
        Some(_) => vec![(
            format!("NimbusPolicy {name}"),
            policy_result(ours, ours.and_then(|p| p.status.as_ref()), written),
        )],
        None => Vec::new(),
    };
    let condition = binding_ready(generation, blockers, &results);
    let action = write_status(
        &ctx,
        &sib,
        status_of(policy.as_ref(), plan.bound_intents, condition),
    )
    .await?;
    failure.map_or(Ok(action), Err)
}

fn status_of(
    policy: Option<&NimbusPolicy>,
    bound: Vec<String>,
    ready: nimbus_api::Condition,
) -> SecurityIntentBindingStatus {
    SecurityIntentBindingStatus {
        status: STATUS_CREATED.to_owned(),
        last_updated: None,
        number_of_bound_intents: policy.map_or(0, |p| p.spec.rules.len() as i32),
        bound_intents: (policy.is_some() && !bound.is_empty()).then_some(bound),
        nimbus_policy: policy.map(|p| p.name_any()).unwrap_or_default(),
        observed_generation: ready.observed_generation,
        conditions: vec![ready],
    }
}

async fn write_status(
    ctx: &Context,
    sib: &SecurityIntentBinding,
    status: SecurityIntentBindingStatus,
) -> Result<Action, Error> {
    let api: Api<SecurityIntentBinding> =
        Api::namespaced(ctx.client.clone(), &sib.namespace().unwrap_or_default());
    update_status(ctx, &api, sib, sib.status.as_ref(), status).await
}
