//! ClusterSecurityIntentBinding → one ClusterNimbusPolicy plus a NimbusPolicy
//! `nimbus-ctlr-gen-<binding>` in every selected, live namespace.

use super::{
    Context, PolicyChange, publish_changes, unless_left_behind, update_status, write_policy,
};
use crate::apply::is_controlled_by;
use crate::conditions::{Blocker, binding_ready, policy_result, ready};
use crate::error::Error;
use futures::{StreamExt, stream};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, ClusterSecurityIntentBindingStatus,
    NimbusPolicy, STATUS_CREATED, STATUS_VALIDATION_FAIL, condition,
};
use nimbus_core::{CompileError, names, plan};
use std::sync::Arc;

pub async fn reconcile(
    csib: Arc<ClusterSecurityIntentBinding>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let name = csib.name_any();
    let uid = csib.uid().unwrap_or_default();
    let generation = csib.metadata.generation;
    let cluster_api: Api<ClusterNimbusPolicy> = Api::all(ctx.client.clone());
    let observed = ctx.cluster_policies.get(&ObjectRef::new(&name));
    let observed = unless_left_behind(&cluster_api, &*csib, observed).await?;
    let ours = observed.as_deref().filter(|p| is_controlled_by(*p, &uid));

    let namespaces = ctx.namespaces.state();
    let plan = match plan::cluster_binding(
        &csib,
        |n| ctx.intents.get(&ObjectRef::new(n)),
        namespaces.iter().map(|ns| &**ns),
        &ctx.protected_namespaces,
    ) {
        Ok(plan) => plan,
        Err(err) => {
            // Re-evaluated on every change, so fixing the binding in place recovers it. What is
            // in force stays in force meanwhile.
            let reason = match err {
                CompileError::NamespaceSelector(_) => condition::REASON_INVALID_NAMESPACE_SELECTOR,
                CompileError::Cel(_) | CompileError::InvalidSelector(_) => {
                    condition::REASON_INVALID_SELECTOR
                }
            };
            let mut status = csib.status.clone().unwrap_or_default();
            status.status = STATUS_VALIDATION_FAIL.to_owned();
            status.observed_generation = generation;
            status.conditions = vec![ready(false, reason, err.to_string(), generation)];
            return write_status(&ctx, &csib, status).await;
        }
    };

    let mut conflicts = Vec::new();
    let mut failures = Vec::new();
    let mut results = Vec::new();
    let mut first_error = None;

    // The cluster-wide policy.
    let cluster_policy = if observed.is_some() && ours.is_none() {
        conflicts.push(format!(
            "ClusterNimbusPolicy {name} exists and is not owned by this binding"
        ));
        None
    } else {
        let desired = plan.cluster_policy.as_ref();
        match write_policy(
            &ctx,
            &cluster_api,
            desired,
            ours,
            &ctx.cluster_policies_created,
        )
        .await
        {
            Ok(change) => {
                if let Some(change) = change {
                    let changes = [(None, change)];
                    publish_changes::<_, ClusterNimbusPolicy>(&ctx, &*csib, &name, &changes);
                }
                if desired.is_some() {
                    let status = ours.and_then(|p| p.status.as_ref());
                    let result = policy_result(ours, status, change.is_some());
                    results.push((format!("ClusterNimbusPolicy {name}"), result));
                }
            }
            Err(e) => first_error = first_error.or(Some(e)),
        }
        desired
    };

    // The NimbusPolicy of every namespace; all of them are converged in this pass, a few at a
    // time (one namespace's write need not wait for another's).
    let policy_name = names::cluster_binding_policy_name(&name);
    // (By index: a closure taking a reference would have to be general over its lifetime.)
    let outcomes: Vec<_> = stream::iter(0..plan.namespaces.len())
        .map(|i| {
            let (ns_name, desired) = &plan.namespaces[i];
            namespace_policy(&ctx, &csib, &policy_name, ns_name, desired)
        })
        .buffered(FAN_OUT)
        .collect()
        .await;
    let mut in_force = Vec::new();
    let mut changes = Vec::new();
    for ((ns_name, desired), outcome) in plan.namespaces.iter().zip(outcomes) {
        match outcome {
            Ok(Some((ours, change))) => {
                if let Some(change) = change {
                    changes.push((Some(ns_name.clone()), change));
                }
                if desired.is_some() {
                    let status = ours.as_deref().and_then(|p| p.status.as_ref());
                    let result = policy_result(ours.as_deref(), status, change.is_some());
                    results.push((ns_name.clone(), result));
                    in_force.push(ns_name.clone());
                }
            }
            Ok(None) => conflicts.push(format!(
                "NimbusPolicy {ns_name}/{policy_name} exists and is not owned by this binding"
            )),
            Err(error) => {
                failures.push(error.to_string());
                first_error = first_error.or(Some(error));
            }
        }
    }
    publish_changes::<_, NimbusPolicy>(&ctx, &*csib, &policy_name, &changes);
    in_force.sort();

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
    if !conflicts.is_empty() {
        blockers.push(Blocker {
            reason: condition::REASON_POLICY_CONFLICT,
            message: conflicts.join("; "),
        });
    }
    if !failures.is_empty() {
        blockers.push(Blocker {
            reason: condition::REASON_APPLY_FAILED,
            message: failures.join("; "),
        });
    }
    if plan.has_namespace_policies && in_force.is_empty() && blockers.is_empty() {
        blockers.push(Blocker {
            reason: condition::REASON_NO_NAMESPACE_SELECTED,
            message: format!(
                "no namespace is selected, so per-namespace intents are enforced nowhere \
                 (protected namespaces never are: {})",
                ctx.protected_namespaces
            ),
        });
    }
    let condition = binding_ready(generation, blockers, &results);
    let bound = plan.bound_intents;
    let status = ClusterSecurityIntentBindingStatus {
        status: STATUS_CREATED.to_owned(),
        last_updated: None,
        number_of_bound_intents: cluster_policy.map_or(0, |p| p.spec.rules.len() as i32),
        bound_intents: (cluster_policy.is_some() && !bound.is_empty()).then_some(bound),
        cluster_nimbus_policy: cluster_policy.map(|p| p.name_any()).unwrap_or_default(),
        number_of_nimbus_policies: in_force.len() as i32,
        nimbus_policy_namespaces: (!in_force.is_empty()).then_some(in_force),
        observed_generation: generation,
        conditions: vec![condition],
    };
    let action = write_status(&ctx, &csib, status).await?;
    match first_error {
        Some(e) => Err(e),
        None => Ok(action),
    }
}

/// Policies of a cluster binding written at once, one per namespace. Each reconcile otherwise
/// sends its requests one after another (see `--reconcile-concurrency`); this one may have to
/// write thousands.
const FAN_OUT: usize = 16;

/// Converges the binding's NimbusPolicy `policy_name` in `namespace` to `desired`. Returns the
/// policy the binding owns there (before the write) and what changed, or `None` when another
/// object holds the name.
async fn namespace_policy(
    ctx: &Context,
    csib: &ClusterSecurityIntentBinding,
    policy_name: &str,
    namespace: &str,
    desired: &Option<NimbusPolicy>,
) -> Result<Option<(Option<Arc<NimbusPolicy>>, Option<PolicyChange>)>, Error> {
    let api: Api<NimbusPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    let observed = ctx
        .policies
        .get(&ObjectRef::new(policy_name).within(namespace));
    let observed = unless_left_behind(&api, csib, observed).await?;
    let uid = csib.uid().unwrap_or_default();
    let ours = match observed {
        Some(p) if !is_controlled_by(&*p, &uid) => {
            if desired.is_some() {
                return Ok(None);
            }
            None
        }
        observed => observed,
    };
    let change = write_policy(
        ctx,
        &api,
        desired.as_ref(),
        ours.as_deref(),
        &ctx.policies_created,
    )
    .await?;
    Ok(Some((ours, change)))
}

async fn write_status(
    ctx: &Context,
    csib: &ClusterSecurityIntentBinding,
    status: ClusterSecurityIntentBindingStatus,
) -> Result<Action, Error> {
    let api: Api<ClusterSecurityIntentBinding> = Api::all(ctx.client.clone());
    update_status(ctx, &api, csib, csib.status.as_ref(), status).await
}
