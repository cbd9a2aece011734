//! NimbusPolicy / ClusterNimbusPolicy status. Engines will add their entries here; until one is
//! enabled, a policy reports `status: Created` with no adapter policies.

use super::Context;
use crate::apply;
use crate::error::Error;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use nimbus_api::{ClusterNimbusPolicy, NimbusPolicy, NimbusPolicyStatus, STATUS_CREATED};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;

pub async fn reconcile_namespaced(
    np: Arc<NimbusPolicy>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let api = Api::namespaced(ctx.client.clone(), &np.namespace().unwrap_or_default());
    reconcile(&api, &*np, np.status.as_ref(), &ctx).await
}

pub async fn reconcile_cluster(
    cwnp: Arc<ClusterNimbusPolicy>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    reconcile(
        &Api::all(ctx.client.clone()),
        &*cwnp,
        cwnp.status.as_ref(),
        &ctx,
    )
    .await
}

async fn reconcile<K>(
    api: &Api<K>,
    policy: &K,
    current: Option<&NimbusPolicyStatus>,
    ctx: &Context,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
{
    let status = NimbusPolicyStatus {
        status: STATUS_CREATED.to_owned(),
        last_updated: None,
        number_of_adapter_policies: 0,
        adapter_policies: None,
        observed_generation: policy.meta().generation,
        conditions: Vec::new(),
    };
    apply::status(api, policy, current, status).await?;
    tracing::debug!(name = %policy.name_any(), "policy status reconciled");
    Ok(Action::requeue(ctx.resync))
}
