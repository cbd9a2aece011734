//! `nimbus dev --fleet`: the canary rollout of docs/src/fleet.md on throwaway local control
//! planes. An Open Cluster Management (OCM) hub runs OCM's policy propagator; each managed
//! cluster runs OCM's framework addon and the operator as `nimbus dev` runs it, with a workload
//! for the example binding to select. The fleet examples go to the hub, and the compliance
//! roll-up is printed as `nimbus fleet status` prints it.
//!
//! The hub and its controllers come from `nimbus_testenv::ocm`, which also stands in for what
//! no controller does here: registering the managed clusters, and deciding the Placement (for
//! every managed cluster, its predicate not evaluated).

use crate::dev::DevArgs;
use anyhow::Context as _;
use nimbus_core::fleet::rollup::{Row, Standing};
use nimbus_testenv::ocm::{self, ClusterPlan, Fleet};
use nimbus_testenv::{ControlPlane, apply_yaml};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The example Placement and its PlacementBinding, as (name, YAML).
const PLACEMENT_EXAMPLE: (&str, &str) = (
    "examples/fleet/placement.yaml",
    include_str!("../../../examples/fleet/placement.yaml"),
);
/// The example Policy, as (name, YAML).
const POLICY_EXAMPLE: (&str, &str) = (
    "examples/fleet/policy.yaml",
    include_str!("../../../examples/fleet/policy.yaml"),
);
/// The example PolicySet grouping the Policy, with its own PlacementBinding, as (name, YAML).
const POLICY_SET_EXAMPLE: (&str, &str) = (
    "examples/fleet/policyset.yaml",
    include_str!("../../../examples/fleet/policyset.yaml"),
);
/// The fleet examples the hub gets, in this order: the Placement first, decided as it is
/// applied, then the Policy it places, then the PolicySet grouping it.
/// `examples/fleet/hub-alerts.yaml` is left out: it is a PrometheusRule for the hub's
/// Prometheus, and neither Prometheus nor its Operator's CRD runs here.
const HUB_EXAMPLES: [(&str, &str); 3] = [PLACEMENT_EXAMPLE, POLICY_EXAMPLE, POLICY_SET_EXAMPLE];

/// The namespace the fleet examples put the Policy and its Placement in.
const POLICY_NAMESPACE: &str = "policies";

/// A workload on each managed cluster for the example binding to select (namespace `shop`,
/// label `app: web`). No kubelet runs here, so its pods stay Pending, without IPs: the posture
/// reads their labels and owners, and the canary's preview has no connection to list.
const SHOP: &str = r"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx:1.27}]}
";

/// The rollout label's value on the managed clusters after the first (the canary, in shadow
/// mode): what the example Placement selects besides `shadow`.
const ENFORCE: &str = "enforce";

/// How long the API server of a managed cluster may take to admit the Nimbus kinds once their
/// CRDs and admission policies are installed (a moment, normally).
const ADMITTED: Duration = Duration::from_secs(60);
/// How long to wait for every cluster to report every template of the Policy: the controllers
/// starting and listing, the templates delivered, the operators' verdicts settling (2 s) and
/// synced to the hub. A few seconds normally; the margin is for a busy machine.
const ROLLUP_SETTLE: Duration = Duration::from_secs(120);
/// How long the roll-up must stay the same to count as settled.
const STABLE: Duration = Duration::from_secs(2);

pub async fn run(args: DevArgs, clusters: u8) -> anyhow::Result<()> {
    tracing::info!(
        "starting an Open Cluster Management hub and {clusters} managed clusters (the first run \
         builds the control plane and OCM's controllers from Go modules: 10-30 min, and ~5 min \
         of CPU)"
    );
    let shutdown = crate::shutdown::shutdown_on_signal();
    let plans = cluster_plans(clusters);
    let start = Fleet::start(&plans, async |name: &str, control_plane: &ControlPlane| {
        let operator = crate::dev::start_operator(control_plane, &args.engines, shutdown.clone())
            .await
            .with_context(|| format!("starting the operator on {name}"))?;
        let client = control_plane.client()?;
        apply_yaml(&client, SHOP)
            .await
            .with_context(|| format!("applying the shop workload on {name}"))?;
        // The examples deliver Nimbus kinds: the addon reports a template error for any the
        // API server does not admit yet.
        ocm::wait_admitted(&client, &policy_example()?, name, ADMITTED).await?;
        Ok::<_, anyhow::Error>(operator)
    });
    // Ctrl-C while starting stops at once: what has started is dropped, and so stopped.
    let mut fleet = tokio::select! {
        started = start => started.context("starting the fleet")?,
        () = shutdown.cancelled() => return Ok(()),
    };
    let kubeconfigs = Kubeconfigs::write(&fleet, &args.kubeconfig)?;

    for (name, yaml) in hub_examples() {
        fleet
            .apply_to_hub(&yaml)
            .await
            .with_context(|| format!("applying {name} on the hub"))?;
        tracing::info!(file = %name, "applied on the hub");
    }
    let hub = fleet.hub.client()?;
    let names: Vec<&str> = fleet.managed.iter().map(|m| m.name.as_str()).collect();
    let rows = settle(&hub, &names).await?;
    if rows.is_empty() {
        println!("no Nimbus template of an OCM Policy is placed on any cluster");
    } else {
        print!("{}", crate::fleet::table(&rows));
    }
    print!("{}", usage(&kubeconfigs, &plans));

    if args.once {
        shutdown.cancel();
    } else {
        println!("Press Ctrl-C to stop and clean up.");
    }
    for cluster in &mut fleet.managed {
        (&mut cluster.operator.task)
            .await
            .with_context(|| format!("the operator task of {}", cluster.name))??;
    }
    drop(fleet);
    drop(kubeconfigs);
    Ok(())
}

/// `cluster1` … `cluster<count>`, the first labelled a canary (`shadow`), the others
/// `enforce`.
fn cluster_plans(count: u8) -> Vec<ClusterPlan> {
    (1..=count)
        .map(|n| {
            let mode = if n == 1 {
                nimbus_api::MODE_SHADOW
            } else {
                ENFORCE
            };
            ClusterPlan::new(&format!("cluster{n}"), [(nimbus_api::MODE_LABEL, mode)])
        })
        .collect()
}

/// The example Policy, as JSON.
fn policy_example() -> anyhow::Result<serde_json::Value> {
    let (name, yaml) = POLICY_EXAMPLE;
    serde_yaml_ng::from_str(yaml).with_context(|| format!("reading {name}"))
}

/// What the hub gets, as (name, YAML): the namespace of the examples, then the examples.
fn hub_examples() -> Vec<(String, String)> {
    let namespace =
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {POLICY_NAMESPACE}}}");
    let mut manifests = vec![(format!("namespace {POLICY_NAMESPACE}"), namespace)];
    manifests
        .extend((HUB_EXAMPLES.iter()).map(|(name, yaml)| ((*name).to_owned(), (*yaml).to_owned())));
    manifests
}

/// Waits until every one of `clusters` has reported every Nimbus template placed on it (no row
/// `Pending`) and the roll-up has not changed for [`STABLE`]; returns it. After
/// [`ROLLUP_SETTLE`], returns it as it is, with a warning saying what is missing.
async fn settle(hub: &kube::Client, clusters: &[&str]) -> anyhow::Result<Vec<Row>> {
    let deadline = Instant::now() + ROLLUP_SETTLE;
    let mut last: Option<Vec<Row>> = None;
    let mut unchanged_since = Instant::now();
    loop {
        let rows = crate::fleet::rows(hub.clone(), &crate::fleet::Selection::default()).await?;
        let reported = clusters
            .iter()
            .all(|cluster| rows.iter().any(|r| r.cluster == *cluster))
            && rows.iter().all(|r| r.compliance != Standing::Pending);
        if last.as_ref() != Some(&rows) {
            unchanged_since = Instant::now();
        }
        last = Some(rows);
        if reported && unchanged_since.elapsed() >= STABLE {
            return Ok(last.unwrap_or_default());
        }
        if Instant::now() > deadline {
            let rows = last.unwrap_or_default();
            let pending = rows
                .iter()
                .filter(|r| r.compliance == Standing::Pending)
                .count();
            tracing::warn!(
                rows = rows.len(),
                pending,
                "the roll-up has not settled after {ROLLUP_SETTLE:?}: not every cluster has \
                 reported every template; `nimbus fleet status` on the hub shows it as it changes"
            );
            return Ok(rows);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// How to reach the hub and each managed cluster.
fn usage(kubeconfigs: &Kubeconfigs, plans: &[ClusterPlan]) -> String {
    let hub = kubeconfigs.hub().display();
    let mut out = format!(
        "\nThe fleet is up: an Open Cluster Management hub and {} managed clusters. Try:\n  \
         KUBECONFIG={hub} nimbus fleet status\n  \
         KUBECONFIG={hub} kubectl get managedclusters,placements,policies -A\n",
        plans.len()
    );
    for (plan, kubeconfig) in plans.iter().zip(kubeconfigs.managed()) {
        let mode = plan
            .labels
            .get(nimbus_api::MODE_LABEL)
            .map_or("", String::as_str);
        out += &format!(
            "  KUBECONFIG={} kubectl get csib,kubearmorpolicies,networkpolicies -A   # {} ({mode})\n",
            kubeconfig.display(),
            plan.name
        );
    }
    if let Some(canary) = plans.first() {
        out += &format!(
            "Promote the canary:\n  KUBECONFIG={hub} kubectl label managedcluster {} \
             {}={ENFORCE} --overwrite\n\n",
            canary.name,
            nimbus_api::MODE_LABEL
        );
    }
    out
}

/// The admin kubeconfigs of the hub and the managed clusters, copied for the user; removed when
/// dropped (when `nimbus dev --fleet` stops, or fails).
struct Kubeconfigs(Vec<PathBuf>);

impl Kubeconfigs {
    /// The hub's at `hub`, each managed cluster's beside it: `<stem>-<cluster>.kubeconfig`.
    fn write<T>(fleet: &Fleet<T>, hub: &Path) -> anyhow::Result<Self> {
        let stem = hub
            .file_stem()
            .map_or_else(|| "nimbus-dev".into(), |s| s.to_string_lossy().into_owned());
        let beside = |cluster: &str| hub.with_file_name(format!("{stem}-{cluster}.kubeconfig"));
        let mut copies = vec![(fleet.hub.kubeconfig_path(), hub.to_owned())];
        copies.extend(
            (fleet.managed.iter()).map(|m| (m.control_plane.kubeconfig_path(), beside(&m.name))),
        );
        let mut written = Self(Vec::new());
        for (from, to) in copies {
            std::fs::copy(from, &to).with_context(|| format!("writing {}", to.display()))?;
            written.0.push(to);
        }
        Ok(written)
    }

    fn hub(&self) -> &Path {
        &self.0[0]
    }

    fn managed(&self) -> &[PathBuf] {
        &self.0[1..]
    }
}

impl Drop for Kubeconfigs {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fleet_example_for_the_hub_is_compiled_in() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fleet");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("examples/fleet/")
            .map(|e| {
                format!(
                    "examples/fleet/{}",
                    e.expect("entry").file_name().to_string_lossy()
                )
            })
            // See HUB_EXAMPLES: no Prometheus here.
            .filter(|name| name != "examples/fleet/hub-alerts.yaml")
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = HUB_EXAMPLES.iter().map(|(n, _)| (*n).to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
    }

    #[test]
    fn the_first_cluster_is_the_canary() {
        let modes: Vec<(String, String)> = cluster_plans(3)
            .into_iter()
            .map(|p| (p.name, p.labels[nimbus_api::MODE_LABEL].clone()))
            .collect();
        let expected = [
            ("cluster1", "shadow"),
            ("cluster2", "enforce"),
            ("cluster3", "enforce"),
        ];
        assert_eq!(
            modes,
            expected.map(|(n, m)| (n.to_owned(), m.to_owned())).to_vec()
        );
    }
}
