//! SecurityIntentException → its status: the `Active` condition at this time
//! ([`nimbus_core::exceptions::standing`]), written when it changes, and looked at again when
//! the exception expires. The policies it concerns are re-translated by their own controllers
//! (see [`crate::exceptions`]).

use super::report::update_status;
use crate::context::Context;
use crate::error::Error;
use crate::exceptions::until;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use nimbus_api::SecurityIntentException;
use nimbus_core::exceptions;
use std::sync::Arc;

pub async fn reconcile(
    exception: Arc<SecurityIntentException>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let now = Timestamp::now();
    let standing = ctx.standing(&exception, now);
    let status = exceptions::status(&exception, &standing);
    let api: Api<SecurityIntentException> = Api::namespaced(
        ctx.client.clone(),
        &exception.namespace().unwrap_or_default(),
    );
    update_status(&ctx, &api, &*exception, exception.status.as_ref(), status).await?;
    let back = standing
        .changes_at()
        .map_or(ctx.resync, |at| until(at, now).min(ctx.resync));
    Ok(Action::requeue(back))
}
