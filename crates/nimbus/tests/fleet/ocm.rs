//! The fleet test's hub and two managed control planes with Open Cluster Management's policy
//! framework between them (started by nimbus_testenv::ocm), the example Placement on the hub,
//! and our operator on each managed cluster as the chart installs it.

use crate::common::counted::Counted;
use crate::common::{self};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use nimbus_core::fleet::{POLICY_GROUP, POLICY_KIND, POLICY_VERSION};
use nimbus_testenv::ocm::{self, ClusterPlan};
use nimbus_testenv::{ControlPlane, free_port};
use std::path::PathBuf;
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

/// The operators' resync period, shortened from the chart's so that a test sees several.
pub const RESYNC: Duration = Duration::from_secs(5);

/// How long the chart's admission may take to know the Nimbus kinds on two busy cores.
const ADMITTED: Duration = Duration::from_secs(120);

/// The hub, its controllers, and the managed clusters with our operator on each.
pub type Fleet = ocm::Fleet<Operator>;
pub type Managed = ocm::ManagedCluster<Operator>;

/// Our operator on a managed cluster: every request it sent, counted on its client; stopped
/// when the test ends.
pub struct Operator {
    pub requests: Counted,
    _stop: OperatorGuard,
}

struct OperatorGuard(CancellationToken);

impl Drop for OperatorGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// The control planes, the OCM controllers and our operators, running, with the example
/// Placement (and the namespace of the example Policy) on the hub.
pub async fn start() -> Fleet {
    let clusters: Vec<ClusterPlan> = (CLUSTERS.iter())
        .map(|(name, mode)| ClusterPlan::new(name, [(ROLLOUT_LABEL, *mode)]))
        .collect();
    let fleet = Fleet::start(&clusters, async |name: &str, cp: &ControlPlane| {
        let client = cp.client()?;
        common::install_engine_crd(&client, nimbus_testenv::upstream::KUBEARMOR_POLICY).await;
        // Nimbus first, as on a cluster where it is installed before policies arrive: a
        // template of a kind not served yet is a template error in the Policy's history.
        let stop = OperatorGuard(CancellationToken::new());
        let requests = Counted::default();
        run_operator(cp, name, &requests, stop.0.clone()).await;
        Ok::<_, nimbus_testenv::Error>(Operator {
            requests,
            _stop: stop,
        })
    })
    .await
    .unwrap_or_else(|e| panic!("starting the fleet: {e}"));
    let namespace =
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ROOT_NAMESPACE}}}");
    fleet
        .apply_to_hub(&format!("{namespace}\n---\n{PLACEMENT_YAML}"))
        .await
        .expect("the example Placement, decided");
    fleet
}

/// An admin client of a managed cluster.
pub fn client(cluster: &Managed) -> Client {
    cluster.client().expect("managed client")
}

/// Policies in `namespace` on the hub.
pub fn hub_policies(fleet: &Fleet, namespace: &str) -> Api<DynamicObject> {
    let client = fleet.hub.client().expect("hub client");
    Api::namespaced_with(client, namespace, &policy_resource())
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

/// Our operator on `cp` as the chart installs it, less the Deployment: the chart's CRDs (with
/// their policy-template label), and the operator in this process, authenticated only by a
/// token of the chart's ServiceAccount, so that its ClusterRole must grant every call the
/// compliance reports make; with leader election, as the chart runs it, and the posture
/// computed (the verdicts read it; its API is not registered, nothing reads it here); every
/// request counted in `requests`. Runs until `shutdown`; returns once the API server of the
/// cluster (`name`) admits the example Policy's templates.
async fn run_operator(
    cp: &ControlPlane,
    name: &str,
    requests: &Counted,
    shutdown: CancellationToken,
) {
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
    ocm::wait_admitted(&admin, &root_policy(), name, ADMITTED)
        .await
        .unwrap_or_else(|e| panic!("the chart's admission to know the Nimbus kinds: {e}"));
}

/// Writes on `cluster` what OCM's framework addon writes when it cannot sync the template
/// named `template` (v0.19.0's `emitTemplateError`): a compliance Event on the replicated
/// Policy saying `NonCompliant; template-error; ...`, which its status sync puts into the
/// template's history, there and on the hub. Returns its message, which names the moment.
pub async fn addon_cannot_sync(cluster: &Managed, template: &str) -> String {
    let policies: Api<DynamicObject> =
        Api::namespaced_with(client(cluster), &cluster.name, &policy_resource());
    let policy = (policies.get(REPLICATED).await).expect("the replicated Policy");
    let now = k8s_openapi::jiff::Timestamp::now();
    let message = format!(
        "NonCompliant; template-error; Failed to update policy template {template} at {now}: \
         Resource kind intent.security.nimbus.com/v1alpha1, Kind=SecurityIntent not found"
    );
    let event = serde_json::json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{REPLICATED}.{:x}", now.as_nanosecond())},
        "involvedObject": {
            "apiVersion": format!("{POLICY_GROUP}/{POLICY_VERSION}"), "kind": POLICY_KIND,
            "name": REPLICATED, "namespace": &cluster.name, "uid": policy.metadata.uid,
        },
        "reason": format!("policy: {template}"),
        "message": &message,
        "type": "Warning",
        "source": {"component": "policy-template-sync"},
        "firstTimestamp": now.to_string(), "lastTimestamp": now.to_string(), "count": 1,
    });
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(client(cluster), &cluster.name);
    let event = serde_json::from_value(event).expect("an Event");
    (events.create(&Default::default(), &event).await).expect("the addon's error Event");
    message
}
