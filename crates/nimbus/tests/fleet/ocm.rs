//! A hub and a managed control plane with Open Cluster Management's policy framework between
//! them, and our operator on the managed one.

use crate::common::counted::Counted;
use crate::common::{self, built_by};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use nimbus_core::fleet::{POLICY_GROUP, POLICY_KIND, POLICY_VERSION};
use nimbus_testenv::{Child, ControlPlane, Options, apply_yaml, eventually, free_port};
use serde_json::json;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The managed clusters and their rollout label on the hub (see examples/fleet/): the first a
/// canary, the binding in shadow there; the second enforcing. Each name is also the cluster's
/// namespace, on the hub and on itself.
pub const CLUSTERS: [(&str, &str); 2] = [("cluster1", "shadow"), ("cluster2", "enforce")];
/// The label carrying each cluster's mode, which the Policy's hub template copies into the
/// binding.
pub const ROLLOUT_LABEL: &str = "intent.security.nimbus.com/mode";
/// Where the root Policy lives on the hub, and its name.
pub const ROOT_NAMESPACE: &str = "policies";
pub const ROOT_POLICY: &str = "nimbus-shop";
/// The propagator's name for the Policy it replicates into each cluster namespace.
pub const REPLICATED: &str = "policies.nimbus-shop";
/// The example Policy and its Placement.
pub const POLICY_YAML: &str = include_str!("../../../../examples/fleet/policy.yaml");
const PLACEMENT_YAML: &str = include_str!("../../../../examples/fleet/placement.yaml");
/// The hub's alert on OCM's compliance metric.
pub const HUB_ALERTS_YAML: &str = include_str!("../../../../examples/fleet/hub-alerts.yaml");
/// The Placement the example binds the Policy to.
const PLACEMENT: &str = "nimbus-rollout";

/// The operators' resync period, shortened from the chart's so that a test sees several.
pub const RESYNC: Duration = Duration::from_secs(5);

/// The controllers start slowly on two busy cores.
const CONTROLLERS_START: Duration = Duration::from_secs(120);

/// The hub's OCM objects besides the example's: the root namespace, and each managed cluster
/// with its namespace and rollout label.
fn hub_setup() -> String {
    let mut yaml = "apiVersion: v1\nkind: Namespace\nmetadata: {name: policies}\n".to_owned();
    for (cluster, mode) in CLUSTERS {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {cluster}}}\n\
             ---\napiVersion: cluster.open-cluster-management.io/v1\nkind: ManagedCluster\n\
             metadata: {{name: {cluster}, labels: {{{ROLLOUT_LABEL}: {mode}}}}}\n\
             spec: {{hubAcceptsClient: true}}\n"
        ));
    }
    yaml.push_str("---\n");
    yaml.push_str(PLACEMENT_YAML);
    yaml
}

/// A managed cluster's: the Deployment the framework addon checks for an uninstall annotation
/// (without it, the addon believes it is being uninstalled and syncs nothing), and the cluster
/// namespace apart. No replicas: the addon runs here as a process.
const MANAGED_SETUP: &str = r"
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

/// Dropped in field order: the managed clusters (each its operator and addon first), then the
/// propagator before the hub.
pub struct Fleet {
    pub managed: Vec<Managed>,
    propagator: Child,
    /// The propagator's metrics port (plain HTTP on loopback).
    pub propagator_metrics: u16,
    pub hub: ControlPlane,
}

/// One managed cluster: our operator, OCM's framework addon, and the control plane.
pub struct Managed {
    pub name: &'static str,
    /// Every request our operator sent, counted on its client.
    pub requests: Counted,
    /// Stops the operator when the test ends.
    _operator: OperatorGuard,
    addon: Child,
    pub cp: ControlPlane,
}

impl Managed {
    pub fn client(&self) -> Client {
        self.cp.client().expect("managed client")
    }
}

struct OperatorGuard(CancellationToken);

impl Drop for OperatorGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Fleet {
    /// The control planes, the OCM controllers and our operators, running.
    pub async fn start() -> Self {
        let ocm = built_by("hack/build-ocm.sh").unwrap_or_else(|e| panic!("OCM is needed: {e}"));
        let (hub, first, second) = tokio::join!(
            ControlPlane::start(Options::default()),
            ControlPlane::start(Options::default()),
            ControlPlane::start(Options::default())
        );
        let hub = hub.expect("hub");
        let hub_client = hub.client().expect("hub client");
        for crd in std::fs::read_dir(ocm.join("crds"))
            .expect("OCM's CRDs")
            .flatten()
        {
            let yaml = std::fs::read_to_string(crd.path()).expect("CRD");
            apply_yaml(&hub_client, &yaml)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", crd.path().display()));
        }
        apply_yaml(&hub_client, &hub_setup())
            .await
            .expect("hub setup");
        decide(&hub_client).await;

        let policy_crd = std::fs::read_to_string(
            ocm.join("crds/policy.open-cluster-management.io_policies.yaml"),
        )
        .expect("Policy CRD");
        let mut managed = Vec::new();
        for ((name, _), cp) in CLUSTERS.into_iter().zip([first, second]) {
            let cp = cp.expect("managed cluster");
            let client = cp.client().expect("managed client");
            let namespace = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}");
            for yaml in [policy_crd.as_str(), MANAGED_SETUP, namespace.as_str()] {
                apply_yaml(&client, yaml).await.expect("managed setup");
            }
            common::install_engine_crd(&client, nimbus_testenv::upstream::KUBEARMOR_POLICY).await;
            // Nimbus first, as on a cluster where it is installed before policies arrive: a
            // template of a kind not served yet is a template error in the Policy's history.
            let operator = OperatorGuard(CancellationToken::new());
            let requests = Counted::default();
            run_operator(&cp, &requests, operator.0.clone()).await;
            let addon = addon(&ocm, name, &hub, &cp);
            managed.push(Managed {
                name,
                requests,
                _operator: operator,
                addon,
                cp,
            });
        }
        let propagator_metrics = free_port().expect("port");
        let propagator = propagator(&ocm, &hub, propagator_metrics);
        let fleet = Self {
            managed,
            propagator,
            propagator_metrics,
            hub,
        };
        fleet.wait_ready().await;
        fleet
    }

    /// Policies in `namespace` on the hub.
    pub fn hub_policies(&self, namespace: &str) -> Api<DynamicObject> {
        let client = self.hub.client().expect("hub client");
        Api::namespaced_with(client, namespace, &policy_resource())
    }

    /// Waits until the controllers' managers run their workers (what they log then); on a
    /// timeout, their last words say why not.
    async fn wait_ready(&self) {
        eventually(
            "the OCM controllers to start",
            CONTROLLERS_START,
            async |seen| {
                let mut outputs = vec![("propagator", self.propagator.output())];
                outputs.extend(self.managed.iter().map(|m| (m.name, m.addon.output())));
                *seen = (outputs.iter())
                    .map(|(who, out)| format!("{who}: {}", tail(out)))
                    .collect::<Vec<_>>()
                    .join("\n");
                (outputs.iter())
                    .all(|(_, out)| out.contains("Starting workers"))
                    .then_some(())
            },
        )
        .await;
    }
}

fn tail(output: &str) -> String {
    let lines: Vec<&str> = output.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// The example Policy, as JSON.
pub fn root_policy() -> serde_json::Value {
    serde_yaml_ng::from_str(POLICY_YAML).expect("examples/fleet/policy.yaml")
}

pub fn policy_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        POLICY_GROUP,
        POLICY_VERSION,
        POLICY_KIND,
    ))
}

/// The Placement's decision: every managed cluster (each carries the rollout label its
/// predicate asks for), as OCM's placement controller would write it.
async fn decide(hub: &Client) {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.open-cluster-management.io",
        "v1beta1",
        "PlacementDecision",
    ));
    let decisions: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), ROOT_NAMESPACE, &resource);
    let name = format!("{PLACEMENT}-decision-1");
    let decision = json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
        "metadata": {"name": name, "labels": {"cluster.open-cluster-management.io/placement": PLACEMENT}}
    });
    decisions
        .create(
            &PostParams::default(),
            &serde_json::from_value(decision).expect("decision"),
        )
        .await
        .expect("the PlacementDecision");
    let chosen: Vec<_> = CLUSTERS
        .iter()
        .map(|(cluster, _)| json!({"clusterName": cluster, "reason": "chosen by the test"}))
        .collect();
    let status = json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
        "metadata": {"name": name},
        "status": {"decisions": chosen}
    });
    decisions
        .patch_status(
            &name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(status),
        )
        .await
        .expect("the PlacementDecision's status");
}

/// The propagator on the hub, watching every namespace, without webhooks or leader election,
/// exporting its compliance metric on `metrics`.
fn propagator(ocm: &Path, hub: &ControlPlane, metrics: u16) -> Child {
    let probes = free_port().expect("port");
    let args = [
        "--leader-elect=false".to_owned(),
        "--enable-webhooks=false".to_owned(),
        "--disable-placementrule".to_owned(),
        format!("--metrics-bind-address=127.0.0.1:{metrics}"),
        format!("--health-probe-bind-address=127.0.0.1:{probes}"),
    ];
    let env = [
        ("KUBECONFIG", hub.kubeconfig_path().as_os_str()),
        ("WATCH_NAMESPACE", OsStr::new("")),
    ];
    Child::spawn(
        "ocm-propagator",
        &ocm.join("governance-policy-propagator"),
        &args,
        &env,
        hub.work_dir(),
    )
    .expect("starting the propagator")
}

/// The framework addon: spec, template and status sync between the hub's cluster namespace and
/// the managed cluster's.
fn addon(ocm: &Path, cluster: &str, hub: &ControlPlane, managed: &ControlPlane) -> Child {
    let (metrics, probes) = (free_port().expect("port"), free_port().expect("port"));
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
    .expect("starting the framework addon")
}

/// Our operator on `cp` as the chart installs it, less the Deployment: the chart's CRDs (with
/// their policy-template label), and the operator in this process, authenticated only by a
/// token of the chart's ServiceAccount, so that its ClusterRole must grant every call the
/// compliance reports make; with leader election, as the chart runs it, and the posture
/// computed (the verdicts read it; its API is not registered, nothing reads it here); every
/// request counted in `requests`. Runs until `shutdown`.
async fn run_operator(cp: &ControlPlane, requests: &Counted, shutdown: CancellationToken) {
    let admin = cp.client().expect("managed client");
    let objects = common::install_chart_without_workload(&admin, &[]).await;
    let deployment = common::rendered(&objects, "Deployment", common::RELEASE);
    let (client, _) = common::service_account_config(cp, deployment).await;
    let client = requests.client(client);
    let mut config = common::operator_config_from(deployment, "nimbus-fleet-test");
    config.resync = RESYNC;
    let dir: PathBuf = cp.work_dir().to_owned();
    let cert = nimbus_testenv::serving_cert(&[]).expect("serving certificate");
    let (cert_file, key_file) = (dir.join("posture.crt"), dir.join("posture.key"));
    std::fs::write(&cert_file, &cert.cert_pem).expect("posture.crt");
    std::fs::write(&key_file, &cert.key_pem).expect("posture.key");
    config.posture = Some(nimbus_operator::posture::Config {
        addr: ([127, 0, 0, 1], free_port().expect("port")).into(),
        certificate: nimbus_operator::posture::ServingCertificate {
            cert_file,
            key_file,
        },
        reports: Default::default(),
    });
    if let Ok(filter) = std::env::var("NIMBUS_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
    tokio::spawn(async move {
        if let Err(e) = nimbus_operator::run(client, config, shutdown).await {
            panic!("operator failed: {e}");
        }
    });
    admitted(&admin).await;
}

/// Waits until the API server admits the kinds OCM will deliver: the chart's admission policies
/// on them answer `ServiceUnavailable` ("Resource kind … not found") until the API server has
/// caught up with the new CRDs, which the framework addon would report as template errors.
async fn admitted(admin: &Client) {
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    // The templates the test delivers, all cluster-scoped; without the binding's label, whose
    // value is a hub template until the propagator resolves it.
    let policy = root_policy();
    let templates = policy["spec"]["policy-templates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    eventually(
        "the chart's admission to know the Nimbus kinds",
        CONTROLLERS_START,
        async |seen| {
            for template in &templates {
                let mut object: DynamicObject =
                    serde_json::from_value(template["objectDefinition"].clone()).ok()?;
                object.metadata.labels = None;
                let types = object.types.clone()?;
                let gvk = GroupVersionKind::try_from(&types).ok()?;
                let api: Api<DynamicObject> =
                    Api::all_with(admin.clone(), &ApiResource::from_gvk(&gvk));
                if let Err(e) = api.create(&dry_run, &object).await {
                    *seen = format!("{}: {e}", gvk.kind);
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}
