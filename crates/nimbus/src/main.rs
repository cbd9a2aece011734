//! `nimbus`: the operator and its tools in one binary.

// Shape rule (issue #43): no function longer than clippy.toml's `too-many-lines-threshold`.
// Non-test code only: a test reads best as one table or one story, and test builds
// (`cfg(test)`, tests/) do not see this line.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

#[cfg(feature = "dev")]
mod dev;
#[cfg(feature = "dev")]
mod dev_fleet;
mod docs_reference;
mod engine_args;
mod fleet;
mod generated;
mod offline;
mod report;
mod shutdown;
mod table;

/// The fuzz tests' case generator, shared with the integration tests.
#[cfg(test)]
#[path = "../tests/common/cases.rs"]
mod cases;

use anyhow::Context as _;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use nimbus_core::catalog::Engine;
use nimbus_core::reports::ReportFormat;
use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
// The offline commands name these as `crate::SandboxArgs` and `crate::ExceptionArgs`.
use engine_args::{EngineArgs, ExceptionArgs, SandboxArgs};
use generated::{admission_policy_yaml, engine_rbac_yaml};
use shutdown::shutdown_on_signal;

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
    Run(Box<RunArgs>),
    /// Print the CustomResourceDefinitions as multi-document YAML.
    Crds,
    /// Print the ValidatingAdmissionPolicy that warns, at `kubectl apply`, about intent IDs and
    /// parameters the catalog does not know.
    #[command(group = clap::ArgGroup::new("policy").multiple(false))]
    AdmissionPolicy {
        /// Print instead the one that lets only who may create ClusterSecurityIntentBindings
        /// create or change sensitive SecurityIntents.
        #[arg(long, group = "policy")]
        sensitive_intents: bool,
        /// Print instead the MutatingAdmissionPolicy that stamps who last wrote each
        /// SecurityIntent (Kubernetes 1.36).
        #[arg(long, group = "policy")]
        intent_author: bool,
        /// Print instead the MutatingAdmissionPolicy that stamps who asked for each
        /// SecurityIntentException (Kubernetes 1.36).
        #[arg(long, group = "policy")]
        exception_requester: bool,
        /// Print instead the policies that withdraw an exception's approval when its spec
        /// changes and let only who may `approve` it, and did not ask for it, approve it
        /// (Kubernetes 1.36).
        #[arg(long, group = "policy")]
        exception_approval: bool,
    },
    /// Print every engine's RBAC rules, derived from its registration (the Helm chart's
    /// files/engine-rbac.yaml).
    #[command(hide = true)]
    EngineRbac,
    /// Print one of the book's reference pages (docs/src/reference/), generated from the code.
    #[command(hide = true)]
    DocsReference {
        #[arg(value_enum)]
        page: docs_reference::Page,
    },
    /// Start a local control plane, install the CRDs, run the operator on it and apply the
    /// examples; runs until Ctrl-C.
    #[cfg(feature = "dev")]
    Dev(dev::DevArgs),
    /// Print the NimbusPolicies and native policies the operator would create for the given
    /// manifests, without a cluster.
    Translate(offline::TranslateArgs),
    /// Check manifests against the schemas and the intent catalog (exit status 1 on problems).
    Validate(offline::ValidateArgs),
    /// List the intent catalog.
    Intents,
    /// Describe one intent: what it does, which engines enforce it, its parameters.
    Explain {
        /// Intent ID, e.g. escapeToHost.
        id: String,
    },
    /// List the compliance frameworks, the controls the intents address, and the bundles.
    Frameworks,
    /// Print a bundle's SecurityIntents and a binding of them, labelled with the bundle.
    Bundle(offline::BundleArgs),
    /// Write the compliance coverage of the live cluster, from the posture API, as one
    /// self-contained HTML file or as OSCAL assessment results.
    Report(report::ReportArgs),
    /// The compliance of the intents and bindings Open Cluster Management delivers, read from
    /// its hub (the current kubeconfig).
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// Address of the /healthz and /readyz endpoints.
    #[arg(long, default_value = "0.0.0.0:8081", env = "NIMBUS_HEALTH_ADDR")]
    health_addr: SocketAddr,
    /// How often unchanged objects are re-checked for drift.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    resync: Duration,
    /// Reconciles each controller runs at once (0: no limit); each sends one request at a
    /// time, so this bounds the operator's requests in flight (5 controllers).
    #[arg(long, default_value_t = nimbus_operator::DEFAULT_RECONCILE_CONCURRENCY)]
    reconcile_concurrency: u16,
    /// Whether the leader proves enforcement live: it sends, as a server-side dry run (nothing
    /// stored), a pod each enforced admission intent forbids, and reports an admitted one as
    /// `EnforcementNotLive` (needs `create` on pods, which the chart grants only then).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, env = "NIMBUS_ENFORCEMENT_PROBES")]
    enforcement_probes: bool,
    /// How often each enforced admission intent is probed.
    #[arg(long, default_value = "1m", value_parser = nonzero_duration)]
    enforcement_probe_period: Duration,
    /// Probes sent per period at most; the others come round in the next periods.
    #[arg(long, default_value_t = nimbus_operator::probes::DEFAULT_CAP, value_parser = clap::value_parser!(u16).range(1..))]
    enforcement_probe_cap: u16,
    #[command(flatten)]
    exceptions: ExceptionArgs,
    /// Threads running the operator's tasks besides the main one (default: one per core).
    /// Fewer cost fewer wake-ups across threads, more keep up with bigger clusters.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    worker_threads: Option<u16>,
    /// Address of the Prometheus /metrics endpoint.
    #[arg(long, default_value = "0.0.0.0:8080", env = "NIMBUS_METRICS_ADDR")]
    metrics_addr: SocketAddr,
    /// Pod name, reported on events and used as the leader-election identity.
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
    #[command(flatten)]
    election: ElectionArgs,
    #[command(flatten)]
    engines: EngineArgs,
    #[command(flatten)]
    posture: PostureArgs,
}

/// The posture API (an aggregated API: kube-apiserver proxies `posture.security.nimbus.com`
/// to it through an APIService).
#[derive(clap::Args, Debug)]
pub struct PostureArgs {
    /// Address of the posture API's TLS port; unset serves no posture API.
    #[arg(long, env = "NIMBUS_POSTURE_ADDR", requires_all = ["posture_tls_cert_file", "posture_tls_key_file"])]
    posture_addr: Option<SocketAddr>,
    /// PEM certificate (chain) the posture API serves; re-read when it changes. It must be
    /// valid for `<service>.<namespace>.svc`, the name kube-apiserver dials.
    #[arg(long, env = "NIMBUS_POSTURE_TLS_CERT_FILE")]
    posture_tls_cert_file: Option<std::path::PathBuf>,
    /// PEM private key of that certificate.
    #[arg(long, env = "NIMBUS_POSTURE_TLS_KEY_FILE")]
    posture_tls_key_file: Option<std::path::PathBuf>,
    /// The policy reports the posture is written as, one per workload a bound intent selects:
    /// OpenReports `Report`s where served, else `wgpolicyk8s.io` `PolicyReport`s (auto), one
    /// of them only, or none.
    #[arg(long, env = "NIMBUS_POSTURE_REPORTS", value_enum, default_value_t = Reports::Auto)]
    posture_reports: Reports,
}

/// `--posture-reports`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Reports {
    Auto,
    Openreports,
    Policyreports,
    Off,
}

impl From<Reports> for ReportFormat {
    fn from(reports: Reports) -> Self {
        match reports {
            Reports::Auto => Self::Auto,
            Reports::Openreports => Self::Openreports,
            Reports::Policyreports => Self::Policyreports,
            Reports::Off => Self::Off,
        }
    }
}

impl PostureArgs {
    fn config(&self) -> Option<nimbus_operator::posture::Config> {
        Some(nimbus_operator::posture::Config {
            addr: self.posture_addr?,
            certificate: nimbus_operator::posture::ServingCertificate {
                cert_file: self.posture_tls_cert_file.clone()?,
                key_file: self.posture_tls_key_file.clone()?,
            },
            reports: self.posture_reports.into(),
        })
    }
}

/// Leader election, so several replicas can run with one writing (hot standby).
#[derive(clap::Args)]
struct ElectionArgs {
    /// Elect a leader through a Lease; only the leader writes.
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the Lease (the operator's own namespace).
    #[arg(long, env = "POD_NAMESPACE", required_if_eq("leader_elect", "true"))]
    leader_elect_namespace: Option<String>,
    #[arg(long, default_value = "nimbus-operator")]
    leader_elect_lease_name: String,
    /// How long a standby waits for an unrenewed lease before taking it over.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    leader_elect_lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    leader_elect_renew_deadline: Duration,
    /// How often the lease is tried or renewed.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    leader_elect_retry_period: Duration,
}

impl ElectionArgs {
    fn config(
        &self,
        identity: Option<&str>,
    ) -> anyhow::Result<Option<nimbus_operator::LeaderElection>> {
        if !self.leader_elect {
            return Ok(None);
        }
        let namespace = self
            .leader_elect_namespace
            .clone()
            .context("--leader-elect needs --leader-elect-namespace (or POD_NAMESPACE)")?;
        anyhow::ensure!(
            self.leader_elect_renew_deadline < self.leader_elect_lease_duration
                && self.leader_elect_retry_period < self.leader_elect_renew_deadline,
            "leader election needs retry period < renew deadline < lease duration"
        );
        let identity = identity
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
        Ok(Some(nimbus_operator::LeaderElection {
            namespace,
            lease_name: self.leader_elect_lease_name.clone(),
            identity,
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }))
    }
}

/// A duration that is not zero.
fn nonzero_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be longer than zero".to_owned()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "nimbus".to_owned())
}

impl RunArgs {
    fn config(&self) -> anyhow::Result<nimbus_operator::Config> {
        let mut config = nimbus_operator::Config {
            health_addr: Some(self.health_addr),
            metrics_addr: Some(self.metrics_addr),
            leader_election: self.election.config(self.instance.as_deref())?,
            resync: self.resync,
            reconcile_concurrency: self.reconcile_concurrency,
            instance: self.instance.clone(),
            posture: self.posture.config(),
            probes: self
                .enforcement_probes
                .then_some(nimbus_operator::probes::Config {
                    period: self.enforcement_probe_period,
                    cap: self.enforcement_probe_cap,
                }),
            exception_max_duration: self.exceptions.exception_max_duration,
            exception_approval: self.exceptions.exception_approval,
            ..Default::default()
        };
        self.engines
            .apply(&mut config, self.election.leader_elect_namespace.as_deref());
        Ok(config)
    }
}

/// Errors are printed as one line with their causes, never with a backtrace. The offline
/// commands exit with 1 when their input is invalid.
fn main() -> ExitCode {
    match run_cli() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where the help names the registered engines (see [`command`]).
const ENGINE_NAMES: &str = "{engines}";

/// The command line, the registered engines named where its help lists them.
fn command() -> clap::Command {
    let names: Vec<&str> = Engine::ALL.iter().map(|e| e.name()).collect();
    let names = names.join(", ");
    let mut cli = Cli::command();
    let listing: Vec<String> = cli
        .get_subcommands()
        .filter(|c| c.get_arguments().any(|a| a.get_id() == "disable_engines"))
        .map(|c| c.get_name().to_owned())
        .collect();
    for name in listing {
        cli = cli.mut_subcommand(name, |c| {
            c.mut_arg("disable_engines", |a| {
                let help = a.get_help().map(ToString::to_string).unwrap_or_default();
                a.help(help.replace(ENGINE_NAMES, &names))
            })
        });
    }
    cli
}

/// Runs the command; `false` when the input it checked is invalid.
fn run_cli() -> anyhow::Result<bool> {
    // As `Cli::parse`, from [`command`].
    let mut matches = command().get_matches();
    let cli = Cli::from_arg_matches_mut(&mut matches)
        .map_err(|e| e.format(&mut command()))
        .unwrap_or_else(|e| e.exit());
    init_logging(cli.log_format);
    match cli.command {
        Command::Translate(args) => offline::translate(&args),
        Command::Validate(args) => offline::validate(&args),
        Command::Intents => {
            print!("{}", offline::intents());
            Ok(true)
        }
        Command::Explain { id } => {
            print!("{}", offline::explain(&id)?);
            Ok(true)
        }
        Command::Frameworks => {
            print!("{}", offline::frameworks());
            Ok(true)
        }
        Command::Bundle(args) if args.check => {
            block_on(None, async { offline::bundle_check(&args).await })
        }
        Command::Bundle(args) => {
            print!("{}", offline::bundle(&args)?);
            Ok(true)
        }
        Command::Crds => {
            print!("{}", nimbus_api::crds_yaml().context("rendering CRDs")?);
            Ok(true)
        }
        Command::AdmissionPolicy {
            sensitive_intents,
            intent_author,
            exception_requester,
            exception_approval,
        } => {
            use nimbus_core::admission;
            let objects = if sensitive_intents {
                admission::sensitive_intents_policy().to_vec()
            } else if intent_author {
                admission::intent_author_policy().to_vec()
            } else if exception_requester {
                admission::exception_requester_policy().to_vec()
            } else if exception_approval {
                admission::exception_approval_policy().to_vec()
            } else {
                admission::intent_catalog_policy().to_vec()
            };
            print!("{}", admission_policy_yaml(objects)?);
            Ok(true)
        }
        Command::EngineRbac => {
            print!("{}", engine_rbac_yaml()?);
            Ok(true)
        }
        Command::DocsReference { page } => {
            print!("{}", page.render(command())?);
            Ok(true)
        }
        Command::Report(args) => block_on(None, async { report::run(&args).await.map(|()| true) }),
        Command::Fleet(command) => block_on(None, fleet::run(&command)),
        Command::Run(args) => block_on(args.worker_threads.map(usize::from), async {
            let client = kube::Client::try_default()
                .await
                .context("connecting to the cluster (kubeconfig or in-cluster config)")?;
            let config = args.config()?;
            nimbus_operator::run(client, config, shutdown_on_signal()).await?;
            Ok(true)
        }),
        #[cfg(feature = "dev")]
        Command::Dev(args) => block_on(None, async {
            match args.fleet {
                Some(clusters) => dev_fleet::run(args, clusters).await,
                None => dev::run(args).await,
            }
            .map(|()| true)
        }),
    }
}

/// Runs `work` on a runtime with `worker_threads` (default: one per core).
fn block_on<T>(
    worker_threads: Option<usize>,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = worker_threads {
        runtime.worker_threads(n);
    }
    runtime
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(work)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The `--disable-engines` help names every registered engine, in registration order.
    #[test]
    fn the_disable_engines_help_lists_every_registered_engine() {
        let names: Vec<&str> = Engine::ALL.iter().map(|e| e.name()).collect();
        let listed = format!("(comma-separated: {})", names.join(", "));
        let cli = command();
        let mut found = 0;
        for command in cli.get_subcommands() {
            for arg in command.get_arguments() {
                if arg.get_long() == Some("disable-engines") {
                    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                    assert!(help.contains(&listed), "{}: {help}", command.get_name());
                    found += 1;
                }
            }
        }
        assert!(found > 0, "no command takes --disable-engines");
    }
}
