//! SecurityIntent: status `{id, action, status: Created}` plus conditions.

use super::Context;
use crate::error::Error;
use crate::write;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use nimbus_api::{STATUS_CREATED, SecurityIntent, SecurityIntentStatus, condition};
use nimbus_core::status::ready;
use std::sync::Arc;

pub async fn reconcile(si: Arc<SecurityIntent>, ctx: Arc<Context>) -> Result<Action, Error> {
    let status = SecurityIntentStatus {
        id: si.spec.intent.id.clone(),
        action: si.spec.intent.action.clone(),
        status: STATUS_CREATED.to_owned(),
        observed_generation: si.metadata.generation,
        conditions: vec![ready(
            true,
            condition::REASON_READY,
            "",
            si.metadata.generation,
        )],
    };
    let api: Api<SecurityIntent> = Api::all(ctx.client.clone());
    write::status::status(&api, &si, si.status.as_ref(), status, &ctx.written).await?;
    tracing::debug!(name = %si.name_any(), "intent reconciled");
    Ok(Action::requeue(ctx.resync))
}
