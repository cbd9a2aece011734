//! SecurityIntent: status `{id, action, status: Created}` plus conditions, decided by
//! [`nimbus_core::status::intent_status`].

use crate::context::Context;
use crate::error::Error;
use crate::write;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use nimbus_api::SecurityIntent;
use std::sync::Arc;

pub async fn reconcile(si: Arc<SecurityIntent>, ctx: Arc<Context>) -> Result<Action, Error> {
    let status = nimbus_core::status::intent_status(&si);
    let api: Api<SecurityIntent> = Api::all(ctx.client.clone());
    write::status::status(&api, &si, si.status.as_ref(), status, &ctx.written).await?;
    tracing::debug!(name = %si.name_any(), "intent reconciled");
    Ok(Action::requeue(ctx.resync))
}
