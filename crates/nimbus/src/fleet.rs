//! `nimbus fleet`: the compliance of the intents and bindings Open Cluster Management (OCM)
//! delivers, read from its hub. The roll-up itself is `nimbus_core::fleet::rollup`, the HTML
//! report `nimbus_core::fleet::report`.

use anyhow::Context as _;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};
use nimbus_core::fleet::report::{self, Input};
use nimbus_core::fleet::rollup::{self, ROOT_POLICY_LABEL, Row, Standing};
use nimbus_core::fleet::{POLICY_GROUP, POLICY_KIND, POLICY_VERSION, Workloads};
use serde_json::Value;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum FleetCommand {
    /// Each Nimbus template of the hub's Policies on each cluster: compliance, since when, why.
    ///
    /// One row per root Policy on the hub of the current kubeconfig, per cluster it is placed
    /// on, per SecurityIntent, SecurityIntentBinding and ClusterSecurityIntentBinding among its
    /// policy-templates (other templates are left out): the compliance the cluster last
    /// reported (Compliant, NonCompliant, or Pending while nothing is reported), of a binding
    /// its workloads protected, audited, excepted and not protected and the engines in force,
    /// when, and its message. The exit status is 0 whatever the compliance, unless
    /// --fail-on-noncompliant.
    Status(StatusArgs),
    /// The same for people: one self-contained HTML file covering every cluster.
    ///
    /// A summary (clusters; templates Compliant, NonCompliant, Pending), then per cluster each
    /// Nimbus template's compliance, since when, its message and the compliance history the
    /// hub keeps; ManagedClusters no chosen Policy places a Nimbus template on are listed
    /// apart. Per-workload detail is not on the hub: `nimbus report` on each cluster. Inline
    /// CSS and SVG: nothing is fetched when it is opened.
    Report(ReportArgs),
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Output {
    /// Columns POLICY, CLUSTER, TEMPLATE, COMPLIANCE, PROTECTED, AUDITED, EXCEPTED,
    /// UNPROTECTED, ENGINES, SINCE, MESSAGE.
    Table,
    /// A JSON array of rows.
    Json,
}

/// Which root Policies to read.
#[derive(clap::Args, Default)]
pub struct Selection {
    /// Only the Policies of this namespace on the hub; every namespace when absent.
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Only the Policy of this name.
    #[arg(long)]
    policy: Option<String>,
}

impl Selection {
    /// What the report says it covers.
    fn scope(&self) -> String {
        match (&self.namespace, &self.policy) {
            (None, None) => "every namespace of the hub".to_owned(),
            (Some(ns), None) => format!("namespace {ns} of the hub"),
            (None, Some(name)) => format!("Policies named {name}, every namespace of the hub"),
            (Some(ns), Some(name)) => format!("Policy {ns}/{name}"),
        }
    }
}

#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    selection: Selection,
    /// How to print the rows.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Exit with status 1 when a row is NonCompliant (Pending rows do not count).
    #[arg(long)]
    fail_on_noncompliant: bool,
}

#[derive(clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    selection: Selection,
    /// Write here instead of standard output.
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
}

/// `nimbus fleet <command>`; `false` when `--fail-on-noncompliant` found a NonCompliant row.
pub async fn run(command: &FleetCommand) -> anyhow::Result<bool> {
    match command {
        FleetCommand::Status(args) => status(args).await,
        FleetCommand::Report(args) => report(args).await.map(|()| true),
    }
}

async fn hub() -> anyhow::Result<Client> {
    Client::try_default()
        .await
        .context("connecting to the hub (kubeconfig or in-cluster config)")
}

async fn status(args: &StatusArgs) -> anyhow::Result<bool> {
    let rows = rows(hub().await?, &args.selection).await?;
    match args.output {
        Output::Table if rows.is_empty() => {
            eprintln!("no Nimbus template of an OCM Policy is placed on any cluster");
        }
        Output::Table => print!("{}", table(&rows)),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&rows).context("serializing the rows")?
        ),
    }
    let noncompliant = rows.iter().any(|r| r.compliance == Standing::NonCompliant);
    Ok(!(args.fail_on_noncompliant && noncompliant))
}

async fn report(args: &ReportArgs) -> anyhow::Result<()> {
    let client = hub().await?;
    let (roots, replicated) = read_policies(client.clone(), &args.selection).await?;
    let managed_clusters = managed_clusters(client).await?;
    let entries = report::entries(&roots, &replicated);
    let generated = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let html = report::html(&Input {
        scope: &args.selection.scope(),
        generated: &generated,
        entries: &entries,
        managed_clusters: &managed_clusters,
    });
    match &args.output {
        Some(path) => {
            std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{html}"),
    }
    Ok(())
}

/// The names of the hub's ManagedClusters.
async fn managed_clusters(client: Client) -> anyhow::Result<Vec<String>> {
    let gvk = GroupVersionKind::gvk("cluster.open-cluster-management.io", "v1", "ManagedCluster");
    let api: Api<DynamicObject> = Api::all_with(client, &ApiResource::from_gvk(&gvk));
    let clusters = (api.list_metadata(&ListParams::default()).await)
        .context("listing ManagedClusters (cluster.open-cluster-management.io/v1)")?;
    Ok(clusters
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect())
}

/// The roll-up of the hub `client` talks to: every Nimbus template of the root Policies
/// `selection` chooses, per cluster they are placed on. What `nimbus fleet status` prints, and
/// `nimbus dev --fleet`.
pub(crate) async fn rows(client: Client, selection: &Selection) -> anyhow::Result<Vec<Row>> {
    let (roots, replicated) = read_policies(client, selection).await?;
    Ok(rollup::rollup(&roots, &replicated))
}

/// The root Policies `args` choose and the replicated Policies (every cluster namespace's, or
/// only the chosen root's when `--namespace` and `--policy` name one), as JSON.
async fn read_policies(
    client: Client,
    args: &Selection,
) -> anyhow::Result<(Vec<Value>, Vec<Value>)> {
    let gvk = GroupVersionKind::gvk(POLICY_GROUP, POLICY_VERSION, POLICY_KIND);
    let resource = ApiResource::from_gvk(&gvk);
    let roots_api: Api<DynamicObject> = match &args.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let not_replicated = ListParams::default().labels(&format!("!{ROOT_POLICY_LABEL}"));
    let roots = list(&roots_api, &not_replicated).await?;
    let roots: Vec<Value> = roots
        .into_iter()
        .filter(|p| {
            args.policy.is_none() || p["metadata"]["name"].as_str() == args.policy.as_deref()
        })
        .collect();
    let replicated = match (&args.namespace, &args.policy) {
        (Some(ns), Some(name)) => format!("{ROOT_POLICY_LABEL}={ns}.{name}"),
        _ => ROOT_POLICY_LABEL.to_owned(),
    };
    let replicated = if roots.is_empty() {
        Vec::new()
    } else {
        let all: Api<DynamicObject> = Api::all_with(client, &resource);
        list(&all, &ListParams::default().labels(&replicated)).await?
    };
    Ok((roots, replicated))
}

async fn list(api: &Api<DynamicObject>, params: &ListParams) -> anyhow::Result<Vec<Value>> {
    let policies = api.list(params).await.with_context(|| {
        format!(
            "listing {POLICY_KIND}s ({POLICY_GROUP}/{POLICY_VERSION}; is this an Open Cluster \
             Management hub?)"
        )
    })?;
    policies
        .items
        .into_iter()
        .map(|p| serde_json::to_value(p).context("reading a Policy as JSON"))
        .collect()
}

/// The rows as a table, kubectl's way; `-` where nothing was reported or counted.
pub(crate) fn table(rows: &[Row]) -> String {
    let dash = || "-".to_owned();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let count = |n: fn(&Workloads) -> u32| {
                r.workloads.as_ref().map_or_else(dash, |w| n(w).to_string())
            };
            vec![
                format!("{}/{}", r.policy_namespace, r.policy),
                r.cluster.clone(),
                format!("{}/{}", r.kind, r.name),
                r.compliance.as_str().to_owned(),
                count(|w| w.protected),
                count(|w| w.audited),
                count(|w| w.excepted),
                count(|w| w.unprotected),
                r.engines
                    .as_ref()
                    .map_or_else(dash, |e| match e.as_slice() {
                        [] => "none".to_owned(),
                        // One word per cell: `kubearmor(auditing),netpol`.
                        engines => engines.join(",").replace(" (", "("),
                    }),
                r.since.clone().unwrap_or_else(dash),
                r.message.clone(),
            ]
        })
        .collect();
    let headers = [
        "POLICY",
        "CLUSTER",
        "TEMPLATE",
        "COMPLIANCE",
        "PROTECTED",
        "AUDITED",
        "EXCEPTED",
        "UNPROTECTED",
        "ENGINES",
        "SINCE",
        "MESSAGE",
    ];
    crate::table::table(&headers, &cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_header_and_aligned_columns() {
        let row = |cluster: &str, kind: &str, compliance, message: &str, since: Option<&str>| Row {
            policy_namespace: "policies".into(),
            policy: "nimbus-shop".into(),
            cluster: cluster.into(),
            kind: kind.into(),
            name: "shop-hardening".into(),
            compliance,
            message: message.into(),
            workloads: since.map(|_| Workloads {
                protected: 3,
                audited: 1,
                ..Workloads::default()
            }),
            engines: since.map(|_| vec!["kubearmor (auditing)".into(), "netpol".into()]),
            since: since.map(Into::into),
        };
        let rows = [
            row(
                "east",
                "ClusterSecurityIntentBinding",
                Standing::Compliant,
                "ClusterSecurityIntentBinding shop-hardening is Ready",
                Some("2026-11-29T10:00:03Z"),
            ),
            row(
                "north-1",
                "SecurityIntentBinding",
                Standing::Pending,
                rollup::NOT_REPLICATED,
                None,
            ),
        ];
        assert_eq!(
            table(&rows),
            "\
POLICY                 CLUSTER   TEMPLATE                                      COMPLIANCE   PROTECTED   AUDITED   EXCEPTED   UNPROTECTED   ENGINES                      SINCE                  MESSAGE
policies/nimbus-shop   east      ClusterSecurityIntentBinding/shop-hardening   Compliant    3           1         0          0             kubearmor(auditing),netpol   2026-11-29T10:00:03Z   ClusterSecurityIntentBinding shop-hardening is Ready
policies/nimbus-shop   north-1   SecurityIntentBinding/shop-hardening          Pending      -           -         -          -             -                            -                      no replicated Policy for the cluster yet
"
        );
    }
}
