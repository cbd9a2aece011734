//! `nimbus dev`: the whole product on a throwaway local control plane.
//!
//! Everything it installs is compiled in (the examples, the engines' CRDs, the k8tls
//! environment, the intent-catalog admission policy), so an installed binary works from any
//! directory.

use crate::table::table;
use anyhow::Context as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use nimbus_api::posture::{self, WorkloadPosture};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntentBinding,
    condition,
};
use nimbus_testenv::{ControlPlane, LocalApiService, Options, apply_yaml, upstream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The repository's `examples/`, applied in this order.
const EXAMPLES: [(&str, &str); 7] = [
    (
        "00-namespaces.yaml",
        include_str!("../../../examples/00-namespaces.yaml"),
    ),
    (
        "10-intents.yaml",
        include_str!("../../../examples/10-intents.yaml"),
    ),
    (
        "20-namespaced-binding.yaml",
        include_str!("../../../examples/20-namespaced-binding.yaml"),
    ),
    (
        "30-cel-binding.yaml",
        include_str!("../../../examples/30-cel-binding.yaml"),
    ),
    (
        "40-cluster-binding.yaml",
        include_str!("../../../examples/40-cluster-binding.yaml"),
    ),
    (
        "50-team-sandboxes.yaml",
        include_str!("../../../examples/50-team-sandboxes.yaml"),
    ),
    (
        "60-workloads.yaml",
        include_str!("../../../examples/60-workloads.yaml"),
    ),
];

/// Where the posture API's Service and APIService go (as the chart installs them).
const POSTURE_SERVICE: (&str, &str) = ("nimbus-system", "nimbus-posture");

/// What the Helm chart installs beside the operator for the k8tls engine.
const K8TLS_ENVIRONMENT: &str = include_str!("../../../charts/nimbus/files/k8tls/environment.yaml");

/// How long to wait for every binding to report on its current generation before printing.
const SETTLE: Duration = Duration::from_secs(60);
/// How long the bindings' reports must stay the same to count as settled.
const STABLE: Duration = Duration::from_secs(2);

#[derive(clap::Args)]
pub struct DevArgs {
    /// Manifests to apply once the operator runs (a file or a directory of *.yaml) instead of
    /// the built-in examples.
    #[arg(long, conflicts_with = "fleet")]
    examples: Option<PathBuf>,
    /// Also copy the admin kubeconfig here, for `KUBECONFIG=<path> kubectl ...`; with
    /// `--fleet`, the hub's, and each managed cluster's beside it as
    /// `<name>-<cluster>.kubeconfig`.
    #[arg(long, default_value = "nimbus-dev.kubeconfig")]
    pub(crate) kubeconfig: PathBuf,
    /// Stop after printing what exists instead of running until Ctrl-C (for smoke tests).
    #[arg(long)]
    pub(crate) once: bool,
    /// Start an Open Cluster Management fleet instead: a hub running OCM's policy propagator
    /// and CLUSTERS managed control planes (2 when no number is given), each with OCM's
    /// framework addon and the operator, the first a canary in shadow mode; apply the fleet
    /// examples (examples/fleet/) on the hub and print the compliance roll-up.
    #[arg(
        long,
        value_name = "CLUSTERS",
        num_args = 0..=1,
        default_missing_value = "2",
        value_parser = clap::value_parser!(u8).range(1..=MAX_FLEET_CLUSTERS),
    )]
    pub(crate) fleet: Option<u8>,
    #[command(flatten)]
    pub(crate) engines: crate::engine_args::EngineArgs,
}

/// Each managed cluster is another etcd, kube-apiserver, kube-controller-manager, framework
/// addon and operator on this machine.
const MAX_FLEET_CLUSTERS: i64 = 5;

/// The admission policies the chart installs (Kubernetes 1.36 serves them all).
async fn install_admission_policies(client: &kube::Client) -> anyhow::Result<()> {
    use nimbus_core::admission;
    for (policy, objects) in [
        (
            "intent-catalog",
            admission::intent_catalog_policy().to_vec(),
        ),
        (
            "sensitive-intents",
            admission::sensitive_intents_policy().to_vec(),
        ),
        ("intent-author", admission::intent_author_policy().to_vec()),
        (
            "exception-requester",
            admission::exception_requester_policy().to_vec(),
        ),
        (
            "exception-approval",
            admission::exception_approval_policy().to_vec(),
        ),
    ] {
        apply_yaml(client, &crate::generated::admission_policy_yaml(objects)?)
            .await
            .with_context(|| format!("installing the {policy} admission policy"))?;
    }
    Ok(())
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    tracing::info!(
        "starting a local control plane (the first run builds it from Go modules: ~10-30 min)"
    );
    let control_plane = ControlPlane::start(Options::default())
        .await
        .context("starting the local control plane")?;
    let client = control_plane.client()?;
    std::fs::copy(control_plane.kubeconfig_path(), &args.kubeconfig)
        .with_context(|| format!("writing {}", args.kubeconfig.display()))?;

    let shutdown = crate::shutdown::shutdown_on_signal();
    let operator = start_operator(&control_plane, &args.engines, shutdown.clone()).await?;
    for (name, yaml) in examples(args.examples.as_deref())? {
        apply_yaml(&client, &yaml)
            .await
            .with_context(|| format!("applying {name}"))?;
        tracing::info!(file = %name, "applied");
    }
    settle(&client).await?;
    print!("{}", summary(&client).await?);
    println!(
        "\nThe control plane is up. Try:\n  KUBECONFIG={0} kubectl get si,sib,csib,np,cwnp -A\n  \
         KUBECONFIG={0} kubectl get workloadpostures,namespacepostures -A\n  \
         curl http://127.0.0.1:{health}/readyz\n",
        args.kubeconfig.display(),
        health = operator.health_port,
    );

    if args.once {
        shutdown.cancel();
    } else {
        println!("Press Ctrl-C to stop and clean up.");
    }
    operator.task.await.context("operator task")??;
    drop(control_plane);
    let _ = std::fs::remove_file(&args.kubeconfig);
    Ok(())
}

/// The operator as `nimbus dev` runs it, in this process.
pub(crate) struct DevOperator {
    /// Ends when the shutdown token given to [`start_operator`] is cancelled.
    pub task: tokio::task::JoinHandle<Result<(), nimbus_operator::Error>>,
    /// Where its `/healthz` and `/readyz` answer, on loopback.
    pub health_port: u16,
}

/// Installs on `control_plane` what the chart installs beside the operator (the Nimbus CRDs,
/// the engines' CRDs, the k8tls environment, the admission policies), runs the operator with
/// `engines` until `shutdown`, and registers its posture API (on a loopback port, aggregated
/// into kube-apiserver).
pub(crate) async fn start_operator(
    control_plane: &ControlPlane,
    engines: &crate::engine_args::EngineArgs,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<DevOperator> {
    let client = control_plane.client()?;
    apply_yaml(&client, &nimbus_api::crds_yaml()?)
        .await
        .context("installing the Nimbus CRDs")?;
    upstream::install_engine_crds(&client)
        .await
        .context("installing the KubeArmor and Kyverno CRDs")?;
    apply_yaml(&client, K8TLS_ENVIRONMENT)
        .await
        .context("installing the k8tls environment")?;
    install_admission_policies(&client).await?;

    let posture_api = LocalApiService {
        group: posture::GROUP,
        version: posture::VERSION,
        namespace: POSTURE_SERVICE.0,
        service: POSTURE_SERVICE.1,
        port: nimbus_testenv::free_port().context("a port for the posture API")?,
    };
    let certificate = nimbus_testenv::serving_cert(&[&posture_api.server_name()])
        .context("a serving certificate for the posture API")?;
    let certificate_file = |name: &str, pem: &str| -> anyhow::Result<PathBuf> {
        let path = control_plane.work_dir().join(name);
        std::fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    };

    let health_port = nimbus_testenv::free_port().context("a port for /healthz and /readyz")?;
    let mut config = nimbus_operator::Config {
        health_addr: Some(([127, 0, 0, 1], health_port).into()),
        posture: Some(nimbus_operator::posture::Config {
            addr: ([127, 0, 0, 1], posture_api.port).into(),
            certificate: nimbus_operator::posture::ServingCertificate {
                cert_file: certificate_file("posture-tls.crt", &certificate.cert_pem)?,
                key_file: certificate_file("posture-tls.key", &certificate.key_pem)?,
            },
            reports: Default::default(),
        }),
        ..Default::default()
    };
    engines.apply(&mut config, None);
    let task = tokio::spawn(nimbus_operator::run(client, config, shutdown));
    posture_api
        .register(control_plane, &certificate.ca_pem, SETTLE)
        .await
        .context("registering the posture API")?;
    Ok(DevOperator { task, health_port })
}

/// The manifests to apply, as (name, YAML): the built-in examples or the files at `path`.
fn examples(path: Option<&std::path::Path>) -> anyhow::Result<Vec<(String, String)>> {
    let Some(path) = path else {
        return Ok(EXAMPLES
            .iter()
            .map(|(name, yaml)| (format!("examples/{name}"), (*yaml).to_owned()))
            .collect());
    };
    crate::offline::manifest_files(path)?
        .into_iter()
        .map(|file| {
            let yaml = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            Ok((file.display().to_string(), yaml))
        })
        .collect()
}

/// Waits until every binding has reported on its current generation and the reports have not
/// changed for [`STABLE`], or [`SETTLE`] passed. A first verdict can be transient: a binding
/// reconciled before the operator's cache held the intents just applied says `IntentNotFound`
/// until the intents arrive.
async fn settle(client: &kube::Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + SETTLE;
    let mut last = Vec::new();
    let mut unchanged_since = Instant::now();
    loop {
        let rows = bindings(client).await?;
        let reported = rows.iter().all(|b| {
            ready(&b.conditions).is_some_and(|c| {
                c.observed_generation == b.generation && c.reason != condition::REASON_RECONCILING
            })
        });
        let mut verdicts: Vec<(String, Option<String>)> = rows
            .iter()
            .map(|b| {
                (
                    b.label.clone(),
                    ready(&b.conditions).map(|c| c.reason.clone()),
                )
            })
            .collect();
        // The posture API may still be computing: 503 until then.
        verdicts.extend(
            workloads(client)
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w[0].clone(), Some(w[1].clone()))),
        );
        if verdicts != last {
            last = verdicts;
            unchanged_since = Instant::now();
        }
        let stable = unchanged_since.elapsed() >= STABLE;
        if (reported && stable) || Instant::now() > deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn ready(conditions: &[Condition]) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == condition::READY)
}

/// What the summary shows of a binding or a policy.
struct Row {
    /// `Kind namespace/name`, or `Kind name`.
    label: String,
    generation: Option<i64>,
    /// Bound intents of a binding, rules of a policy.
    count: usize,
    conditions: Vec<Condition>,
    /// A policy's native objects (`status.adapterPolicies`).
    natives: Vec<String>,
}

async fn list<K>(client: &kube::Client) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {}", K::kind(&())))?
        .items)
}

fn label<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    match &obj.meta().namespace {
        Some(ns) => format!("{} {ns}/{}", K::kind(&()), obj.name_any()),
        None => format!("{} {}", K::kind(&()), obj.name_any()),
    }
}

async fn bindings(client: &kube::Client) -> anyhow::Result<Vec<Row>> {
    let sibs = list::<SecurityIntentBinding>(client)
        .await?
        .into_iter()
        .map(|b| {
            let status = b.status.clone().unwrap_or_default();
            (
                label(&b),
                b.metadata.generation,
                status.number_of_bound_intents,
                status.conditions,
            )
        });
    let csibs = list::<ClusterSecurityIntentBinding>(client)
        .await?
        .into_iter()
        .map(|b| {
            let status = b.status.clone().unwrap_or_default();
            (
                label(&b),
                b.metadata.generation,
                status.number_of_bound_intents,
                status.conditions,
            )
        });
    Ok(sibs
        .chain(csibs)
        .map(|(label, generation, count, conditions)| Row {
            label,
            generation,
            count: usize::try_from(count).unwrap_or_default(),
            conditions,
            natives: Vec::new(),
        })
        .collect())
}

async fn policies(client: &kube::Client) -> anyhow::Result<Vec<Row>> {
    let row = |label, generation, count, status: Option<nimbus_api::NimbusPolicyStatus>| {
        let status = status.unwrap_or_default();
        Row {
            label,
            generation,
            count,
            conditions: status.conditions,
            natives: status.adapter_policies.unwrap_or_default(),
        }
    };
    let nps = list::<NimbusPolicy>(client).await?.into_iter().map(|p| {
        row(
            label(&p),
            p.metadata.generation,
            p.spec.rules.len(),
            p.status,
        )
    });
    let cnps = list::<ClusterNimbusPolicy>(client)
        .await?
        .into_iter()
        .map(|p| {
            row(
                label(&p),
                p.metadata.generation,
                p.spec.rules.len(),
                p.status,
            )
        });
    Ok(nps.chain(cnps).collect())
}

/// `[namespace/name, verdict, intents]` of each WorkloadPosture, read through kube-apiserver.
async fn workloads(client: &kube::Client) -> anyhow::Result<Vec<Vec<String>>> {
    Ok(list::<WorkloadPosture>(client)
        .await?
        .iter()
        .map(|w| {
            let mut intents: Vec<&str> = w.intents.iter().map(|i| i.id.as_str()).collect();
            intents.dedup();
            vec![
                format!(
                    "{}/{}",
                    w.metadata.namespace.as_deref().unwrap_or_default(),
                    w.name_any()
                ),
                w.verdict.as_str().to_owned(),
                if intents.is_empty() {
                    "<none>".to_owned()
                } else {
                    intents.join(",")
                },
            ]
        })
        .collect())
}

/// Bindings, their policies, the native objects of each and the workloads' postures, as
/// `kubectl get`-style tables.
async fn summary(client: &kube::Client) -> anyhow::Result<String> {
    let columns = |r: &Row| {
        let (status, reason) = ready(&r.conditions)
            .map_or(("Unknown".to_owned(), String::new()), |c| {
                (c.status.clone(), c.reason.clone())
            });
        vec![r.label.clone(), r.count.to_string(), status, reason]
    };
    let bindings: Vec<Vec<String>> = bindings(client).await?.iter().map(columns).collect();
    let policies = policies(client).await?;
    let mut natives: Vec<Vec<String>> = policies
        .iter()
        .flat_map(|p| p.natives.iter().map(|n| vec![n.clone(), p.label.clone()]))
        .collect();
    natives.sort_by(|a, b| (&a[1], &a[0]).cmp(&(&b[1], &b[0])));
    let policies: Vec<Vec<String>> = policies.iter().map(columns).collect();

    let mut out = String::new();
    out += &table(&["BINDING", "INTENTS", "READY", "REASON"], &bindings);
    out += "\n";
    out += &table(&["POLICY", "RULES", "READY", "REASON"], &policies);
    out += "\n";
    out += &table(&["NATIVE OBJECT", "GENERATED FOR"], &natives);
    out += "\n";
    out += &table(
        &["WORKLOAD POSTURE", "VERDICT", "INTENTS"],
        &workloads(client).await?,
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_is_compiled_in() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        // Files only: examples/fleet/ is for an OCM hub (tests/fleet.rs applies it).
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("examples/")
            .map(|e| e.expect("entry"))
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let embedded: Vec<String> = EXAMPLES.iter().map(|(n, _)| (*n).to_owned()).collect();
        assert_eq!(embedded, on_disk);
    }
}
