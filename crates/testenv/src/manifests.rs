use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{self, ApiCapabilities, Scope};
use kube::{Api, Client};
use serde::Deserialize as _;

use crate::Error;

/// Field manager for server-side apply.
const FIELD_MANAGER: &str = "nimbus-testenv";

/// Establishing a CRD takes well under a second normally; the margin is for loaded machines.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);

/// Applies every object of a (multi-document) YAML manifest with server-side apply (forcing
/// conflicts), in order, and waits until the CustomResourceDefinitions among them are
/// Established. Returns the objects as the server stored them.
///
/// Kinds are resolved through discovery, so any built-in or custom resource works, including
/// custom resources whose CRD appears earlier in the same manifest. Namespaced objects without
/// a namespace go to the client's default namespace.
pub async fn apply_yaml(client: &Client, yaml: &str) -> Result<Vec<DynamicObject>, Error> {
    let mut applied = Vec::new();
    let mut crds = Vec::new();
    // Parsed up front: the YAML deserializer is not Send, and this future must be.
    let documents = serde_yaml_ng::Deserializer::from_str(yaml)
        .enumerate()
        .map(|(index, document)| {
            serde_json::Value::deserialize(document).map_err(|e| Error::Manifest {
                index,
                reason: e.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (index, value) in documents.into_iter().enumerate() {
        let invalid = |reason: String| Error::Manifest { index, reason };
        if value.is_null() {
            continue; // an empty document, e.g. after a trailing `---`
        }
        let object: DynamicObject =
            serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        let gvk = object
            .types
            .as_ref()
            .ok_or_else(|| invalid("no apiVersion/kind".to_owned()))
            .and_then(|t| GroupVersionKind::try_from(t).map_err(|e| invalid(e.to_string())))?;
        let name = object
            .metadata
            .name
            .clone()
            .ok_or_else(|| invalid("no metadata.name".to_owned()))?;

        let (resource, capabilities) = resolve(client, &gvk, &crds).await?;
        let api = match capabilities.scope {
            Scope::Cluster => Api::<DynamicObject>::all_with(client.clone(), &resource),
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                object
                    .metadata
                    .namespace
                    .as_deref()
                    .unwrap_or(client.default_namespace()),
                &resource,
            ),
        };
        let stored = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .map_err(|e| Error::kube(format!("applying {} {name}", gvk.kind), e))?;
        if gvk.group == "apiextensions.k8s.io" && gvk.kind == "CustomResourceDefinition" {
            crds.push(name);
        }
        applied.push(stored);
    }
    wait_crds_established(client, &crds, CRD_TIMEOUT).await?;
    Ok(applied)
}

/// Looks `gvk` up; if it is unknown but CRDs were just applied, it may be one of theirs, which
/// becomes discoverable once they are Established.
async fn resolve(
    client: &Client,
    gvk: &GroupVersionKind,
    applied_crds: &[String],
) -> Result<(ApiResource, ApiCapabilities), Error> {
    let context = || format!("discovering {}/{} {}", gvk.group, gvk.version, gvk.kind);
    match discovery::pinned_kind(client, gvk).await {
        Ok(found) => Ok(found),
        Err(_) if !applied_crds.is_empty() => {
            wait_crds_established(client, applied_crds, CRD_TIMEOUT).await?;
            // Established can precede the group's discovery document by a moment (a 404).
            let started = Instant::now();
            loop {
                match discovery::pinned_kind(client, gvk).await {
                    Ok(found) => return Ok(found),
                    Err(e) if started.elapsed() >= CRD_TIMEOUT => {
                        return Err(Error::kube(context(), e));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }
        Err(e) => Err(Error::kube(context(), e)),
    }
}

/// Waits until each named CustomResourceDefinition has the condition `Established=True`, i.e.
/// its resources can be used.
pub async fn wait_crds_established(
    client: &Client,
    names: &[impl AsRef<str>],
    timeout: Duration,
) -> Result<(), Error> {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let started = Instant::now();
    for name in names {
        let name = name.as_ref();
        loop {
            let crd = crds
                .get(name)
                .await
                .map_err(|e| Error::kube(format!("reading CRD {name}"), e))?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if started.elapsed() >= timeout {
                return Err(Error::Timeout {
                    what: format!("CRD {name} to become Established"),
                    timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}
