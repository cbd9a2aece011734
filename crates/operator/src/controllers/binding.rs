//! SecurityIntentBinding → NimbusPolicy of the same name and namespace: observe → plan →
//! execute → report.

use super::keep::{announce_intent_changes, binding_change_seen, keep_own_policy};
use super::report::update_status;
use crate::context::Context;
use crate::error::Error;
use crate::write::{Executed, is_controlled_by, unless_left_behind};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use nimbus_api::{NimbusPolicy, SecurityIntentBinding};
use nimbus_core::plan;
use nimbus_core::status::{self, Outcome};
use std::sync::Arc;

pub async fn reconcile(
    sib: Arc<SecurityIntentBinding>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = sib
        .namespace()
        .ok_or_else(|| Error::MissingField(sib.name_any(), "metadata.namespace"))?;
    let name = sib.name_any();
    let change_seen = binding_change_seen(
        &ctx,
        &*sib,
        sib.status.as_ref().map_or(&[], |s| &s.conditions),
    );
    let policies: Api<NimbusPolicy> = Api::namespaced(ctx.client.clone(), &namespace);

    let observed = ctx.policies.get(&ObjectRef::new(&name).within(&namespace));
    let observed = unless_left_behind(&policies, &*sib, observed).await?;
    let uid = sib.uid().unwrap_or_default();
    let ours = observed.clone().filter(|p| is_controlled_by(&**p, &uid));

    let ns = ctx.namespaces.get(&ObjectRef::new(&namespace));
    let plan = plan::binding(&sib, |n| ctx.intents.get(&ObjectRef::new(n)), ns.as_deref());

    let mut executed = Executed::default();
    let kept;
    let outcome = match &plan {
        _ if observed.is_some() && ours.is_none() => Outcome::Conflict,
        // A typo in the selector must not drop protection: what is in force stays.
        Err(_) => Outcome::untouched(ours.as_deref()),
        Ok(plan) => {
            let desired = plan.policy.as_ref();
            kept = keep_own_policy(
                &ctx,
                &*sib,
                &policies,
                desired,
                ours,
                change_seen,
                &mut executed,
            )
            .await?;
            if kept.stale {
                return executed.result(Action::requeue(ctx.resync));
            }
            kept.outcome()
        }
    };

    let status = status::binding_status(&sib, &plan, outcome);
    let api: Api<SecurityIntentBinding> = Api::namespaced(ctx.client.clone(), &namespace);
    let (action, written) = update_status(&ctx, &api, &*sib, sib.status.as_ref(), status).await?;
    if let (true, Some(before), Ok(plan)) = (written, sib.status.as_ref(), &plan) {
        announce_intent_changes(&ctx, &*sib, &before.intent_writers, &plan.writers);
    }
    executed.result(action)
}
