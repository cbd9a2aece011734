//! ClusterSecurityIntentBinding → one ClusterNimbusPolicy plus a NimbusPolicy
//! `nimbus-ctlr-gen-<binding>` in every selected, live namespace: observe → plan → execute →
//! report.

use super::keep::{
    Kept, announce_deletions, announce_intent_changes, binding_change_seen, keep_own_policy,
    keep_policy,
};
use super::report::update_status;
use crate::context::Context;
use crate::error::Error;
use crate::write::{Executed, is_controlled_by, unless_left_behind};
use futures::{StreamExt, TryStreamExt, stream};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use nimbus_api::{ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy};
use nimbus_core::status::{self, Outcome};
use nimbus_core::{names, plan};
use std::sync::Arc;
use std::time::Instant;

pub async fn reconcile(
    csib: Arc<ClusterSecurityIntentBinding>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let change_seen = binding_change_seen(
        &ctx,
        &*csib,
        csib.status.as_ref().map_or(&[], |s| &s.conditions),
    );
    let (ours, held) = observe_cluster_policy(&ctx, &csib).await?;

    let namespaces = ctx.namespaces.state();
    // A namespace being deleted takes its policies with it, and nothing may be created there:
    // it is left alone.
    let plan = plan::cluster_binding(
        &csib,
        |n| ctx.intents.get(&ObjectRef::new(n)),
        namespaces
            .iter()
            .filter(|ns| ns.metadata.deletion_timestamp.is_none())
            .map(|ns| &**ns),
        &ctx.protected_namespaces,
    );

    let mut executed = Executed::default();
    // Re-evaluated on every change, so fixing the binding in place recovers it. What is in
    // force stays in force meanwhile.
    let kept = match &plan {
        Ok(plan) => Some(
            execute(
                &ctx,
                &csib,
                plan,
                held,
                ours.clone(),
                change_seen,
                &mut executed,
            )
            .await?,
        ),
        Err(_) => None,
    };
    if kept.as_ref().is_some_and(KeptPolicies::stale) {
        // (See `Kept::stale`.)
        return executed.result(Action::requeue(ctx.resync));
    }
    let (cluster, namespaces) = match &kept {
        Some(kept) => kept.outcomes(),
        None => (Outcome::untouched(ours.as_deref()), Vec::new()),
    };

    let status = status::cluster_binding_status(
        &csib,
        &plan,
        cluster,
        &namespaces,
        &ctx.protected_namespaces,
    );
    let api: Api<ClusterSecurityIntentBinding> = Api::all(ctx.client.clone());
    let (action, written) = update_status(&ctx, &api, &*csib, csib.status.as_ref(), status).await?;
    if let (true, Some(before), Ok(plan)) = (written, csib.status.as_ref(), &plan) {
        announce_intent_changes(&ctx, &*csib, &before.intent_writers, &plan.writers);
    }
    executed.result(action)
}

/// The binding's ClusterNimbusPolicy as observed, and whether another object holds its name
/// (then it is left alone).
async fn observe_cluster_policy(
    ctx: &Context,
    csib: &ClusterSecurityIntentBinding,
) -> Result<(Option<Arc<ClusterNimbusPolicy>>, bool), Error> {
    let api: Api<ClusterNimbusPolicy> = Api::all(ctx.client.clone());
    let observed = ctx.cluster_policies.get(&ObjectRef::new(&csib.name_any()));
    let observed = unless_left_behind(&api, csib, observed).await?;
    let uid = csib.uid().unwrap_or_default();
    let ours = observed.clone().filter(|p| is_controlled_by(&**p, &uid));
    let held = observed.is_some() && ours.is_none();
    Ok((ours, held))
}

/// What a cluster binding's execute step kept: its ClusterNimbusPolicy (`None`: another
/// object holds the name, and nothing was written), and each namespace's NimbusPolicy in the
/// plan's order (likewise).
struct KeptPolicies {
    cluster: Option<Kept<ClusterNimbusPolicy>>,
    namespaces: Vec<Option<Kept<NimbusPolicy>>>,
}

impl KeptPolicies {
    /// Whether a status computed from them would be out of date (see [`Kept::stale`]).
    fn stale(&self) -> bool {
        self.cluster.as_ref().is_some_and(|k| k.stale)
            || self.namespaces.iter().flatten().any(|k| k.stale)
    }

    /// What they mean for the binding's status.
    fn outcomes(
        &self,
    ) -> (
        Outcome<'_, ClusterNimbusPolicy>,
        Vec<Outcome<'_, NimbusPolicy>>,
    ) {
        let cluster = self
            .cluster
            .as_ref()
            .map_or(Outcome::Conflict, Kept::outcome);
        let namespaces = self
            .namespaces
            .iter()
            .map(|kept| kept.as_ref().map_or(Outcome::Conflict, Kept::outcome))
            .collect();
        (cluster, namespaces)
    }
}

/// Keeps every policy of `plan`: the cluster policy (unless another object `held` its name;
/// `ours`: the binding's, as observed) and the namespaces' policies.
async fn execute(
    ctx: &Context,
    csib: &ClusterSecurityIntentBinding,
    plan: &plan::ClusterBindingPolicies,
    held: bool,
    ours: Option<Arc<ClusterNimbusPolicy>>,
    change_seen: Option<Instant>,
    executed: &mut Executed,
) -> Result<KeptPolicies, Error> {
    let cluster = if held {
        None
    } else {
        let api: Api<ClusterNimbusPolicy> = Api::all(ctx.client.clone());
        let desired = plan.cluster_policy.as_ref();
        Some(keep_own_policy(ctx, csib, &api, desired, ours, change_seen, executed).await?)
    };
    let namespaces = namespace_policies(ctx, csib, plan, change_seen, executed).await?;
    Ok(KeptPolicies {
        cluster,
        namespaces,
    })
}

/// Policies of a cluster binding written at once, one per namespace. Each reconcile otherwise
/// sends its requests one after another (see `--reconcile-concurrency`); this one may have to
/// write thousands.
const FAN_OUT: usize = 16;

/// Keeps the NimbusPolicy of every namespace of `plan`, a few at a time (one namespace's write
/// need not wait for another's), in the order of `plan.namespaces`; one Event for those
/// deleted. `None` where another object holds the name, and nothing was written.
async fn namespace_policies(
    ctx: &Context,
    csib: &ClusterSecurityIntentBinding,
    plan: &plan::ClusterBindingPolicies,
    change_seen: Option<Instant>,
    executed: &mut Executed,
) -> Result<Vec<Option<Kept<NimbusPolicy>>>, Error> {
    let policy_name = names::cluster_binding_policy_name(&csib.name_any());
    // (By index: a closure taking a reference would have to be general over its lifetime.)
    let results: Vec<_> = stream::iter(0..plan.namespaces.len())
        .map(|i| {
            let (namespace, desired) = &plan.namespaces[i];
            namespace_policy(
                ctx,
                csib,
                &policy_name,
                namespace,
                desired.as_ref(),
                change_seen,
            )
        })
        .buffered(FAN_OUT)
        .try_collect()
        .await?;
    let mut changes = Vec::new();
    let mut kept = Vec::new();
    for ((namespace, _), result) in plan.namespaces.iter().zip(results) {
        let result = result.map(|k| k.recorded(executed)).transpose()?;
        if let Some(Kept {
            change: Ok(Some(change)),
            ..
        }) = &result
        {
            changes.push((Some(namespace.clone()), *change));
        }
        kept.push(result);
    }
    announce_deletions::<_, NimbusPolicy>(ctx, csib, &policy_name, &changes);
    Ok(kept)
}

/// Keeps the binding's NimbusPolicy `policy_name` in `namespace` (see [`keep_policy`]); `None`
/// when another object holds the name.
async fn namespace_policy(
    ctx: &Context,
    csib: &ClusterSecurityIntentBinding,
    policy_name: &str,
    namespace: &str,
    desired: Option<&NimbusPolicy>,
    change_seen: Option<Instant>,
) -> Result<Option<Kept<NimbusPolicy, Error>>, Error> {
    let api: Api<NimbusPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    let observed = ctx
        .policies
        .get(&ObjectRef::new(policy_name).within(namespace));
    let observed = unless_left_behind(&api, csib, observed).await?;
    let ours = match observed {
        Some(p) if !is_controlled_by(&*p, &csib.uid().unwrap_or_default()) => {
            if desired.is_some() {
                return Ok(None);
            }
            None
        }
        observed => observed,
    };
    Ok(Some(
        keep_policy(ctx, &api, desired, ours, change_seen).await,
    ))
}
