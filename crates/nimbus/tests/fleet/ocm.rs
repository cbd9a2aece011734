//! A hub and a managed control plane with Open Cluster Management's policy framework between
//! them, and our operator on the managed one.

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

/// The managed cluster's name, which is also its namespace on the hub and on itself.
pub const CLUSTER: &str = "cluster1";
/// Where the root Policy lives on the hub, and its name.
pub const ROOT_NAMESPACE: &str = "policies";
pub const ROOT_POLICY: &str = "nimbus-shop";
/// The propagator's name for the Policy it replicates into the cluster namespace.
pub const REPLICATED: &str = "policies.nimbus-shop";

/// The controllers start slowly on two busy cores.
const CONTROLLERS_START: Duration = Duration::from_secs(120);

/// The hub's OCM objects besides the Policy: the root namespace, the managed cluster and its
/// namespace, and the Placement with a PlacementBinding to it (the decision is written apart,
/// its status being a subresource).
const HUB_SETUP: &str = r"
apiVersion: v1
kind: Namespace
metadata: {name: policies}
---
apiVersion: v1
kind: Namespace
metadata: {name: cluster1}
---
apiVersion: cluster.open-cluster-management.io/v1
kind: ManagedCluster
metadata: {name: cluster1}
spec: {hubAcceptsClient: true}
---
apiVersion: cluster.open-cluster-management.io/v1beta1
kind: Placement
metadata: {name: fleet, namespace: policies}
spec: {}
---
apiVersion: cluster.open-cluster-management.io/v1beta1
kind: PlacementDecision
metadata:
  name: fleet-decision-1
  namespace: policies
  labels: {cluster.open-cluster-management.io/placement: fleet}
---
apiVersion: policy.open-cluster-management.io/v1
kind: PlacementBinding
metadata: {name: nimbus-shop, namespace: policies}
placementRef: {apiGroup: cluster.open-cluster-management.io, kind: Placement, name: fleet}
subjects:
  - {apiGroup: policy.open-cluster-management.io, kind: Policy, name: nimbus-shop}
";

/// The managed cluster's: its cluster namespace, and the Deployment the framework addon checks
/// for an uninstall annotation (without it, the addon believes it is being uninstalled and
/// syncs nothing). No replicas: the addon runs here as a process.
const MANAGED_SETUP: &str = r"
apiVersion: v1
kind: Namespace
metadata: {name: cluster1}
---
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

/// Dropped in field order: the operator and the controllers stop before the control planes.
pub struct Fleet {
    /// Stops the operator when the test ends.
    _operator: OperatorGuard,
    propagator: Child,
    addon: Child,
    pub hub: ControlPlane,
    pub managed: ControlPlane,
}

struct OperatorGuard(CancellationToken);

impl Drop for OperatorGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Fleet {
    /// Both control planes, the OCM controllers and our operator, running.
    pub async fn start() -> Self {
        let ocm = built_by("hack/build-ocm.sh").unwrap_or_else(|e| panic!("OCM is needed: {e}"));
        let (hub, managed) = tokio::join!(
            ControlPlane::start(Options::default()),
            ControlPlane::start(Options::default())
        );
        let (hub, managed) = (hub.expect("hub"), managed.expect("managed cluster"));
        let hub_client = hub.client().expect("hub client");
        let managed_client = managed.client().expect("managed client");

        for crd in std::fs::read_dir(ocm.join("crds"))
            .expect("OCM's CRDs")
            .flatten()
        {
            let yaml = std::fs::read_to_string(crd.path()).expect("CRD");
            apply_yaml(&hub_client, &yaml)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", crd.path().display()));
        }
        apply_yaml(&hub_client, HUB_SETUP).await.expect("hub setup");
        decide(&hub_client).await;

        let policy_crd = std::fs::read_to_string(
            ocm.join("crds/policy.open-cluster-management.io_policies.yaml"),
        )
        .expect("Policy CRD");
        for yaml in [policy_crd.as_str(), MANAGED_SETUP] {
            apply_yaml(&managed_client, yaml)
                .await
                .expect("managed setup");
        }
        crate::common::install_engine_crd(
            &managed_client,
            nimbus_testenv::upstream::KUBEARMOR_POLICY,
        )
        .await;

        // Nimbus first, as on a cluster where it is installed before policies arrive: a template
        // of a kind not served yet is a template error in the Policy's history.
        let operator = OperatorGuard(CancellationToken::new());
        run_operator(&managed, operator.0.clone()).await;
        let propagator = propagator(&ocm, &hub);
        let addon = addon(&ocm, &hub, &managed);
        let fleet = Self {
            _operator: operator,
            propagator,
            addon,
            hub,
            managed,
        };
        fleet.wait_ready().await;
        fleet
    }

    /// Policies in `namespace` on the hub.
    pub fn hub_policies(&self, namespace: &str) -> Api<DynamicObject> {
        let client = self.hub.client().expect("hub client");
        Api::namespaced_with(client, namespace, &policy_resource())
    }

    /// Waits until both controllers' managers run their workers (what they log then); on a
    /// timeout, their last words say why not.
    async fn wait_ready(&self) {
        eventually(
            "the OCM controllers to start",
            CONTROLLERS_START,
            async |seen| {
                let (p, a) = (self.propagator.output(), self.addon.output());
                *seen = format!("propagator: {}\naddon: {}", tail(&p), tail(&a));
                (p.contains("Starting workers") && a.contains("Starting workers")).then_some(())
            },
        )
        .await;
    }
}

fn tail(output: &str) -> String {
    let lines: Vec<&str> = output.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}

pub fn policy_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        POLICY_GROUP,
        POLICY_VERSION,
        POLICY_KIND,
    ))
}

/// The Placement's decision: the managed cluster, as OCM's placement controller would write it.
async fn decide(hub: &Client) {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.open-cluster-management.io",
        "v1beta1",
        "PlacementDecision",
    ));
    let decisions: Api<DynamicObject> = Api::namespaced_with(hub.clone(), "policies", &resource);
    let status = json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
        "metadata": {"name": "fleet-decision-1"},
        "status": {"decisions": [{"clusterName": CLUSTER, "reason": "chosen by the test"}]}
    });
    decisions
        .patch_status(
            "fleet-decision-1",
            &PatchParams::apply("test").force(),
            &Patch::Apply(status),
        )
        .await
        .expect("the PlacementDecision's status");
}

/// The propagator on the hub, watching every namespace, without webhooks or leader election.
fn propagator(ocm: &Path, hub: &ControlPlane) -> Child {
    let (metrics, probes) = (free_port().expect("port"), free_port().expect("port"));
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
        ("DISABLE_REPORT_METRICS", OsStr::new("true")),
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
fn addon(ocm: &Path, hub: &ControlPlane, managed: &ControlPlane) -> Child {
    let (metrics, probes) = (free_port().expect("port"), free_port().expect("port"));
    let args = [
        format!("--cluster-namespace={CLUSTER}"),
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
/// computed (the verdicts read it; its API is not registered, nothing reads it here). Runs
/// until `shutdown`.
async fn run_operator(cp: &ControlPlane, shutdown: CancellationToken) {
    let admin = cp.client().expect("managed client");
    let objects = common::install_chart_without_workload(&admin, &[]).await;
    let deployment = common::rendered(&objects, "Deployment", common::RELEASE);
    let (client, _) = common::service_account_client(cp, deployment).await;
    let mut config = common::operator_config_from(deployment, "nimbus-fleet-test");
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
    // The templates the test delivers, all cluster-scoped.
    let policy = crate::root_policy();
    let templates = policy["spec"]["policy-templates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    eventually(
        "the chart's admission to know the Nimbus kinds",
        CONTROLLERS_START,
        async |seen| {
            for template in &templates {
                let object: DynamicObject =
                    serde_json::from_value(template["objectDefinition"].clone()).ok()?;
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
