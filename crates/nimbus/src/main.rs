//! `nimbus`: the operator and its tools in one binary.

mod dev;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "NIMBUS_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the operator against the cluster of the current kubeconfig or in-cluster config.
    Run(RunArgs),
    /// Print the CustomResourceDefinitions as multi-document YAML.
    Crds,
    /// Start a local control plane, install the CRDs, run the operator on it and apply the
    /// examples; runs until Ctrl-C.
    Dev(dev::DevArgs),
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// Address of the /healthz and /readyz endpoints.
    #[arg(long, default_value = "0.0.0.0:8081", env = "NIMBUS_HEALTH_ADDR")]
    health_addr: SocketAddr,
    /// How often unchanged objects are re-checked for drift.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    resync: Duration,
    /// Pod name, reported on events.
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
}

impl RunArgs {
    fn config(&self) -> nimbus_operator::Config {
        nimbus_operator::Config {
            health_addr: Some(self.health_addr),
            resync: self.resync,
            instance: self.instance.clone(),
            ..Default::default()
        }
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        match cli.command {
            Command::Crds => {
                print!("{}", nimbus_api::crds_yaml().context("rendering CRDs")?);
                Ok(())
            }
            Command::Run(args) => {
                let client = kube::Client::try_default()
                    .await
                    .context("connecting to the cluster (kubeconfig or in-cluster config)")?;
                let shutdown = shutdown_on_signal();
                nimbus_operator::run(client, args.config(), shutdown).await?;
                Ok(())
            }
            Command::Dev(args) => dev::run(args).await,
        }
    })
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("NIMBUS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// A token cancelled on SIGINT or SIGTERM.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM");
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate => {}
        }
        tracing::info!("shutting down");
        cancel.cancel();
    });
    token
}

/// The repository root, for `dev` defaults (examples, engine CRDs).
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}
