//! A managed cluster: what OCM's framework addon needs on it, and the addon.

use crate::{Child, ControlPlane, Error, apply_yaml, free_port, wait_until};
use kube::api::{DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

/// The CRD of the Policies the addon replicates onto the managed cluster.
const POLICY_CRD: &str = "policy.open-cluster-management.io_policies.yaml";

/// The Deployment the framework addon checks for an uninstall annotation (without it, the
/// addon believes it is being uninstalled and syncs nothing), and the namespace around it. No
/// replicas: the addon runs here as a process.
const ADDON_DEPLOYMENT: &str = r"
apiVersion: v1
kind: Namespace
metadata: {name: open-cluster-management-agent-addon}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: governance-policy-framework-addon, namespace: open-cluster-management-agent-addon}
spec:
  replicas: 0
  selector: {matchLabels: {app: addon}}
  template:
    metadata: {labels: {app: addon}}
    spec: {containers: [{name: addon, image: registry.invalid/addon:1}]}
";

/// What the addon needs on the managed cluster `cluster`: the Policy CRD, its Deployment, and
/// the cluster namespace the replicated Policies go to.
pub(super) async fn prepare(managed: &Client, ocm: &Path, cluster: &str) -> Result<(), Error> {
    let crd = ocm.join("crds").join(POLICY_CRD);
    let policy_crd = std::fs::read_to_string(&crd).map_err(|e| Error::io("reading", &crd, e))?;
    let namespace = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {cluster}}}");
    for yaml in [policy_crd.as_str(), ADDON_DEPLOYMENT, namespace.as_str()] {
        apply_yaml(managed, yaml).await?;
    }
    Ok(())
}

/// The framework addon: spec, template and status sync between the hub's cluster namespace and
/// the managed cluster's.
pub(super) fn addon(
    ocm: &Path,
    cluster: &str,
    hub: &ControlPlane,
    managed: &ControlPlane,
) -> Result<Child, Error> {
    let (metrics, probes) = (free_port()?, free_port()?);
    let args = [
        format!("--cluster-namespace={cluster}"),
        format!(
            "--hub-cluster-configfile={}",
            hub.kubeconfig_path().display()
        ),
        format!(
            "--managed-cluster-configfile={}",
            managed.kubeconfig_path().display()
        ),
        "--leader-elect=false".to_owned(),
        "--disable-gatekeeper-sync".to_owned(),
        format!("--metrics-bind-address=127.0.0.1:{metrics}"),
        format!("--health-probe-bind-address=127.0.0.1:{probes}"),
    ];
    // Not in a pod: the addon's default namespace for its uninstall watch.
    let env = [("OSDK_FORCE_RUN_MODE", OsStr::new("local"))];
    Child::spawn(
        "ocm-addon",
        &ocm.join("governance-policy-framework-addon"),
        &args,
        &env,
        managed.work_dir(),
    )
}

/// Waits until the API server of a managed cluster admits the objects `policy` (an OCM Policy,
/// as JSON) delivers, by creating each of its templates as a dry run, namespaced ones in
/// `cluster_namespace` (where the addon creates them). Right after CRDs are created, admission
/// policies on their kinds answer `ServiceUnavailable` ("Resource kind … not found") until the
/// API server has caught up, which the addon would report as template errors.
///
/// The templates' labels are left out: a label's value may be a hub template, which only the
/// propagator resolves.
pub async fn wait_admitted(
    client: &Client,
    policy: &serde_json::Value,
    cluster_namespace: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let templates = policy["spec"]["policy-templates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    wait_until(
        "the API server to admit the Policy's templates",
        timeout,
        async |seen| {
            for template in &templates {
                let mut object: DynamicObject =
                    serde_json::from_value(template["objectDefinition"].clone()).ok()?;
                object.metadata.labels = None;
                let gvk = GroupVersionKind::try_from(object.types.as_ref()?).ok()?;
                let (resource, capabilities) = match discovery::pinned_kind(client, &gvk).await {
                    Ok(found) => found,
                    Err(e) => {
                        *seen = format!("{}: {e}", gvk.kind);
                        return None;
                    }
                };
                let api: Api<DynamicObject> = match capabilities.scope {
                    Scope::Cluster => Api::all_with(client.clone(), &resource),
                    Scope::Namespaced => {
                        Api::namespaced_with(client.clone(), cluster_namespace, &resource)
                    }
                };
                if let Err(e) = api.create(&dry_run, &object).await {
                    *seen = format!("{}: {e}", gvk.kind);
                    return None;
                }
            }
            Some(())
        },
    )
    .await
}
