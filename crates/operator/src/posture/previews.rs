//! Writes each binding's `status.preview` (what enforcing its audited and shadowed intents would
//! block) from the posture computation. Only the leader writes, with a field manager of its
//! own, so the binding controllers' status writes neither carry nor remove the field; a preview
//! is written only when it changed, and removed when the binding audits nothing any more.

use super::writes::all_succeed;
use crate::context::Context;
use futures::future::BoxFuture;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Api, Resource, ResourceExt};
use nimbus_api::BindingPreview;
use nimbus_api::posture::Reference;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;

/// Owns `status.preview` of bindings, and nothing else.
pub const FIELD_MANAGER: &str = "nimbus-preview";

/// Writes the previews that differ from what the bindings hold; returns whether every write
/// succeeded (a failed one is retried at the next computation).
pub async fn write(ctx: &Context, previews: &BTreeMap<Reference, BindingPreview>) -> bool {
    let client = &ctx.client;
    let namespaced = sync(
        &ctx.bindings,
        previews,
        |b| b.status.as_ref().map(|s| s.preview.as_ref()),
        |ns| Api::namespaced(client.clone(), ns.unwrap_or_default()),
    );
    let cluster = sync(
        &ctx.cluster_bindings,
        previews,
        |b| b.status.as_ref().map(|s| s.preview.as_ref()),
        |_| Api::all(client.clone()),
    );
    let (namespaced, cluster) = futures::join!(namespaced, cluster);
    namespaced && cluster
}

async fn sync<K>(
    store: &Store<K>,
    previews: &BTreeMap<Reference, BindingPreview>,
    // `None` while the binding has no status yet (its controller writes the required fields
    // first; the write that adds them triggers another computation).
    current: fn(&K) -> Option<Option<&BindingPreview>>,
    api: impl Fn(Option<&str>) -> Api<K>,
) -> bool
where
    K: Resource<DynamicType = ()> + Clone + Serialize + serde::de::DeserializeOwned,
    K: std::fmt::Debug + Send + Sync + 'static,
{
    let mut requests = Vec::new();
    for binding in store.state() {
        let reference = Reference {
            kind: K::kind(&()).into_owned(),
            namespace: binding.namespace(),
            name: binding.name_any(),
        };
        let desired = previews.get(&reference);
        let Some(held) = current(&binding) else {
            continue;
        };
        if held == desired {
            continue;
        }
        // Applying without the field gives it up, which removes it: no other manager owns it.
        let status = match desired {
            Some(preview) => json!({ "preview": preview }),
            None => json!({}),
        };
        let body = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {"name": reference.name},
            "status": status,
        });
        let api = api(reference.namespace.as_deref());
        requests.push(Box::pin(async move {
            let params = PatchParams::apply(FIELD_MANAGER);
            let written = api
                .patch_status(&reference.name, &params, &Patch::Apply(body))
                .await;
            written
                .inspect_err(|error| tracing::warn!(binding = ?reference, %error, "writing the binding's preview"))
                .is_ok()
        }) as BoxFuture<'_, bool>);
    }
    all_succeed(requests).await
}
