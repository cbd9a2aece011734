//! `nimbus report`: the compliance coverage of the live cluster (or one namespace), read from
//! the posture API, as a self-contained HTML file or OSCAL assessment results.

use anyhow::Context as _;
use kube::api::ListParams;
use kube::{Api, Client};
use nimbus_api::posture::{NamespacePosture, WorkloadPosture};
use nimbus_core::compliance::report::{self, Input};
use std::path::PathBuf;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Html,
    Oscal,
}

#[derive(clap::Args)]
pub struct ReportArgs {
    /// `html` (one self-contained file) or `oscal` (OSCAL 1.2.1 assessment results, JSON).
    #[arg(long, value_enum, default_value_t = Format::Html)]
    format: Format,
    /// Only this namespace; the whole cluster when absent.
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Write here instead of standard output.
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
}

pub async fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("connecting to the cluster (kubeconfig or in-cluster config)")?;
    let namespaces = Api::<NamespacePosture>::all(client.clone());
    let (namespaces, workloads, scope) = match &args.namespace {
        Some(ns) => (
            vec![
                namespaces
                    .get(ns)
                    .await
                    .with_context(|| format!("reading the NamespacePosture {ns}"))?,
            ],
            Api::<WorkloadPosture>::namespaced(client, ns)
                .list(&ListParams::default())
                .await
                .context("listing WorkloadPostures")?
                .items,
            format!("namespace {ns}"),
        ),
        None => (
            namespaces
                .list(&ListParams::default())
                .await
                .context("listing NamespacePostures")?
                .items,
            Api::<WorkloadPosture>::all(client)
                .list(&ListParams::default())
                .await
                .context("listing WorkloadPostures")?
                .items,
            "the cluster".to_owned(),
        ),
    };
    let generated = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let input = Input {
        scope: &scope,
        generated: &generated,
        namespaces: &namespaces,
        workloads: &workloads,
    };
    let text = match args.format {
        Format::Html => report::html(&input),
        Format::Oscal => serde_json::to_string_pretty(&report::oscal(&input))? + "\n",
    };
    match &args.output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{text}"),
    }
    Ok(())
}
