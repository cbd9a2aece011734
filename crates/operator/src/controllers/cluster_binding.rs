//! ClusterSecurityIntentBinding → one ClusterNimbusPolicy plus a NimbusPolicy
//! `nimbus-ctlr-gen-<binding>` in every selected, live namespace: observe → plan → execute →
//! report.

use super::{
    Context, binding_change_seen, policy_rewritten, publish_changes, update_status,
    write_own_policy,
};
use crate::error::Error;
use crate::write::{Change, Executed, is_controlled_by, unless_left_behind, write_policy};
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
    let name = csib.name_any();
    let change_seen = binding_change_seen(
        &ctx,
        &*csib,
        csib.status.as_ref().and_then(|s| s.observed_generation),
    );
    let cluster_api: Api<ClusterNimbusPolicy> = Api::all(ctx.client.clone());
    let observed = ctx.cluster_policies.get(&ObjectRef::new(&name));
    let observed = unless_left_behind(&cluster_api, &*csib, observed).await?;
    let ours = observed
        .as_deref()
        .filter(|p| is_controlled_by(*p, &csib.uid().unwrap_or_default()));

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
    let (cluster, attempts) = match &plan {
        // Re-evaluated on every change, so fixing the binding in place recovers it. What is
        // in force stays in force meanwhile.
        Err(_) => (Outcome::untouched(ours), Vec::new()),
        Ok(plan) => {
            let cluster = if observed.is_some() && ours.is_none() {
                Outcome::Conflict
            } else {
                let desired = plan.cluster_policy.as_ref();
                let created = &ctx.cluster_policies_created;
                write_own_policy(
                    &ctx,
                    &*csib,
                    &cluster_api,
                    desired,
                    ours,
                    created,
                    change_seen,
                    &mut executed,
                )
                .await?
            };
            let attempts =
                namespace_policies(&ctx, &csib, plan, change_seen, &mut executed).await?;
            (cluster, attempts)
        }
    };

    let (observed, writes): (Vec<_>, Vec<_>) = attempts.into_iter().unzip();
    let outcomes: Vec<Outcome<'_, NimbusPolicy>> = observed
        .iter()
        .zip(writes)
        .map(|(observed, write)| match write {
            None => Outcome::Conflict,
            Some(write) => Outcome::Owned {
                observed: observed.as_deref(),
                write,
            },
        })
        .collect();
    let status =
        status::cluster_binding_status(&csib, &plan, cluster, &outcomes, &ctx.protected_namespaces);
    let api: Api<ClusterSecurityIntentBinding> = Api::all(ctx.client.clone());
    let action = update_status(&ctx, &api, &*csib, csib.status.as_ref(), status).await?;
    executed.result(action)
}

/// Policies of a cluster binding written at once, one per namespace. Each reconcile otherwise
/// sends its requests one after another (see `--reconcile-concurrency`); this one may have to
/// write thousands.
const FAN_OUT: usize = 16;

/// What writing one namespace's policy did: the policy the binding owned there before, and the
/// write's result, `T` or failing with `E` (`None`: another object holds the name, and nothing
/// was written).
type Attempt<T, E> = (Option<Arc<NimbusPolicy>>, Option<Result<T, E>>);

/// Converges the NimbusPolicy of every namespace of `plan`, a few at a time (one namespace's
/// write need not wait for another's), in the order of `plan.namespaces`; one Event per kind
/// of change.
async fn namespace_policies(
    ctx: &Context,
    csib: &ClusterSecurityIntentBinding,
    plan: &plan::ClusterBindingPolicies,
    change_seen: Option<Instant>,
    executed: &mut Executed,
) -> Result<Vec<Attempt<bool, String>>, Error> {
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
    let mut writes = Vec::new();
    for ((namespace, _), (observed, write)) in plan.namespaces.iter().zip(results) {
        let write = match write {
            Some(write) => Some(executed.record(write)?),
            None => None,
        };
        if let Some(Ok(Some(change))) = write {
            changes.push((Some(namespace.clone()), change));
        }
        writes.push((observed, write.map(|w| w.map(|change| change.is_some()))));
    }
    publish_changes::<_, NimbusPolicy>(ctx, csib, &policy_name, &changes);
    Ok(writes)
}

/// Converges the binding's NimbusPolicy `policy_name` in `namespace` to `desired`. Returns the
/// policy the binding owns there (before the write) and the write's result, `None` when
/// another object holds the name. `change_seen`: as for [`write_own_policy`].
async fn namespace_policy(
    ctx: &Context,
    csib: &ClusterSecurityIntentBinding,
    policy_name: &str,
    namespace: &str,
    desired: Option<&NimbusPolicy>,
    change_seen: Option<Instant>,
) -> Result<Attempt<Option<Change>, Error>, Error> {
    let api: Api<NimbusPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    let observed = ctx
        .policies
        .get(&ObjectRef::new(policy_name).within(namespace));
    let observed = unless_left_behind(&api, csib, observed).await?;
    let ours = match observed {
        Some(p) if !is_controlled_by(&*p, &csib.uid().unwrap_or_default()) => {
            if desired.is_some() {
                return Ok((None, None));
            }
            None
        }
        observed => observed,
    };
    let write = write_policy(
        &ctx.written,
        &api,
        desired,
        ours.as_deref(),
        &ctx.policies_created,
    )
    .await;
    // At once, not after the whole fan-out: the policy controller may finish this one first.
    if let (Ok(Some(change)), Some(desired)) = (&write, desired) {
        policy_rewritten(ctx, desired, *change, change_seen);
    }
    Ok((ours, Some(write)))
}
