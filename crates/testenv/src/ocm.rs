//! Open Cluster Management (OCM) on local control planes, for the fleet test
//! (crates/nimbus/tests/fleet.rs) and `nimbus dev --fleet`: a hub running OCM's policy
//! propagator, and managed clusters each running OCM's policy framework addon, both the real
//! controllers (the release pinned in tools/ocm, built by `hack/build-ocm.sh`) as processes.
//!
//! What OCM's other controllers would do is written here by hand: no registration agent runs
//! (each ManagedCluster and its namespace are created as a hub admin finds them once the
//! cluster has joined), and no placement controller (every Placement applied with
//! [`Fleet::apply_to_hub`] is decided for every managed cluster: its predicates are not
//! evaluated).
//!
//! ```no_run
//! # async fn example() -> Result<(), nimbus_testenv::Error> {
//! use nimbus_testenv::ControlPlane;
//! use nimbus_testenv::ocm::{ClusterPlan, Fleet};
//!
//! let clusters = [ClusterPlan::new("cluster1", [("rollout", "canary")])];
//! // What each cluster needs before its addon syncs policies (our operator), kept running in
//! // `fleet.managed[i].operator`.
//! let fleet = Fleet::start(&clusters, async |_name: &str, _cluster: &ControlPlane| {
//!     Ok::<_, nimbus_testenv::Error>(())
//! })
//! .await?;
//! // A Placement, decided for every managed cluster as it is applied.
//! let placement = "apiVersion: cluster.open-cluster-management.io/v1beta1
//! kind: Placement
//! metadata: {name: rollout, namespace: default}
//! spec: {}";
//! fleet.apply_to_hub(placement).await?;
//! # Ok(()) }
//! ```

mod hub;
mod managed;
mod plan;

pub use managed::wait_admitted;
pub use plan::ClusterPlan;

use crate::{Child, ControlPlane, Error, Options, apply_yaml, binaries, free_port, wait_until};
use kube::Client;
use kube::api::DynamicObject;
use std::time::Duration;

/// The controllers start slowly on two busy cores.
const CONTROLLERS_START: Duration = Duration::from_secs(120);

/// A running hub and its managed clusters. Dropped in field order: the managed clusters (each
/// its operator and addon first), then the propagator before the hub.
pub struct Fleet<T> {
    /// In the order they were planned.
    pub managed: Vec<ManagedCluster<T>>,
    propagator: Child,
    /// The propagator's metrics port (plain HTTP on loopback), where OCM's own compliance
    /// metric `policy_governance_info` is exported.
    pub propagator_metrics: u16,
    pub hub: ControlPlane,
}

/// One managed cluster: what the caller runs on it, OCM's framework addon, its control plane.
pub struct ManagedCluster<T> {
    pub name: String,
    /// What the caller started on the cluster before its addon (our operator), dropped first.
    pub operator: T,
    addon: Child,
    pub control_plane: ControlPlane,
}

impl<T> ManagedCluster<T> {
    /// A new admin client of the cluster (see [`ControlPlane::client`]).
    pub fn client(&self) -> Result<Client, Error> {
        self.control_plane.client()
    }
}

impl<T> Fleet<T> {
    /// Starts the hub and one control plane per planned cluster (at once), installs OCM's
    /// CRDs and the ManagedClusters on the hub, prepares each managed cluster for the addon,
    /// runs `before_addon` on it (it returns what [`ManagedCluster::operator`] keeps) and then
    /// its addon, then the propagator; returns once every controller runs its workers.
    ///
    /// `before_addon` runs first so that what serves the kinds the policies deliver (our
    /// operator's CRDs and admission) is in place when the addon syncs: a template of a kind not
    /// served yet is a template error in the Policy's compliance history.
    pub async fn start<E: From<Error>>(
        clusters: &[ClusterPlan],
        mut before_addon: impl AsyncFnMut(&str, &ControlPlane) -> Result<T, E>,
    ) -> Result<Self, E> {
        let ocm = match tokio::task::spawn_blocking(binaries::locate_ocm).await {
            Ok(located) => located?,
            Err(join_error) => std::panic::resume_unwind(join_error.into_panic()),
        };
        tracing::info!(
            clusters = clusters.len(),
            "starting an Open Cluster Management hub and its managed clusters"
        );
        let started = futures::future::join_all(
            (0..=clusters.len()).map(|_| ControlPlane::start(Options::default())),
        )
        .await;
        let mut control_planes = started.into_iter().collect::<Result<Vec<_>, _>>()?;
        let hub = control_planes.remove(0);
        hub::install(&hub.client()?, &ocm, clusters).await?;

        let mut managed = Vec::new();
        for (plan, control_plane) in clusters.iter().zip(control_planes) {
            managed::prepare(&control_plane.client()?, &ocm, &plan.name).await?;
            let operator = before_addon(&plan.name, &control_plane).await?;
            let addon = managed::addon(&ocm, &plan.name, &hub, &control_plane)?;
            managed.push(ManagedCluster {
                name: plan.name.clone(),
                operator,
                addon,
                control_plane,
            });
        }
        let propagator_metrics = free_port()?;
        let propagator = hub::propagator(&ocm, &hub, propagator_metrics)?;
        let fleet = Self {
            managed,
            propagator,
            propagator_metrics,
            hub,
        };
        fleet.wait_ready().await?;
        Ok(fleet)
    }

    /// Applies `yaml` on the hub (see [`apply_yaml`]) and decides each Placement among it for
    /// every managed cluster, as OCM's placement controller would if its predicates matched
    /// them all (nothing evaluates them here). Returns the objects as the hub stored them.
    pub async fn apply_to_hub(&self, yaml: &str) -> Result<Vec<DynamicObject>, Error> {
        let hub = self.hub.client()?;
        let applied = apply_yaml(&hub, yaml).await?;
        let clusters: Vec<&str> = self.managed.iter().map(|m| m.name.as_str()).collect();
        for placement in applied.iter().filter(|o| hub::is_placement(o)) {
            hub::decide(&hub, placement, &clusters).await?;
        }
        Ok(applied)
    }

    /// Waits until the controllers' managers run their workers (what they log then); on a
    /// timeout, their last words say why not.
    async fn wait_ready(&self) -> Result<(), Error> {
        wait_until(
            "the OCM controllers to start",
            CONTROLLERS_START,
            async |seen| {
                let mut outputs = vec![("propagator", self.propagator.output())];
                outputs.extend(
                    self.managed
                        .iter()
                        .map(|m| (m.name.as_str(), m.addon.output())),
                );
                *seen = (outputs.iter())
                    .map(|(who, out)| format!("{who}: {}", tail(out)))
                    .collect::<Vec<_>>()
                    .join("\n");
                (outputs.iter())
                    .all(|(_, out)| out.contains("Starting workers"))
                    .then_some(())
            },
        )
        .await
    }
}

/// The last lines of a controller's output.
fn tail(output: &str) -> String {
    let lines: Vec<&str> = output.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}
