//! SecurityIntentException and ClusterSecurityIntentException → its status: the `Active`
//! condition at this time ([`nimbus_core::exceptions::standing`]), written when it changes, and
//! looked at again when the exception expires. The policies it concerns are re-translated by
//! their own controllers (see [`crate::exceptions`]).

use super::report::update_status;
use crate::context::Context;
use crate::error::Error;
use crate::exceptions::until;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use nimbus_api::{
    ClusterSecurityIntentException, SecurityIntentException, SecurityIntentExceptionStatus,
};
use nimbus_core::exceptions::{self, Exception};
use std::sync::Arc;

pub async fn reconcile(
    exception: Arc<SecurityIntentException>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let api = Api::namespaced(
        ctx.client.clone(),
        &exception.namespace().unwrap_or_default(),
    );
    let current = exception.status.as_ref();
    report(&ctx, &api, &*exception, (&*exception).into(), current).await
}

pub async fn reconcile_cluster(
    exception: Arc<ClusterSecurityIntentException>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let api = Api::all(ctx.client.clone());
    let current = exception.status.as_ref();
    report(&ctx, &api, &*exception, (&*exception).into(), current).await
}

/// Writes the status of `object` (`exception`) when it changes.
async fn report<K>(
    ctx: &Context,
    api: &Api<K>,
    object: &K,
    exception: Exception<'_>,
    current: Option<&SecurityIntentExceptionStatus>,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let now = Timestamp::now();
    let standing = ctx.standing(exception, now);
    let status = exceptions::status(exception, &standing);
    update_status(ctx, api, object, current, status).await?;
    let back = standing
        .changes_at()
        .map_or(ctx.resync, |at| until(at, now).min(ctx.resync));
    Ok(Action::requeue(back))
}
