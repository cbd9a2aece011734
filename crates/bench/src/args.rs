//! The benchmark's command line.

use crate::posture;
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "Benchmark the Nimbus operator on a real local control plane")]
pub struct Args {
    /// Namespaces, each with its own bindings.
    #[arg(long, default_value_t = 50)]
    pub namespaces: usize,
    /// SecurityIntentBindings (each referencing all four intents), spread over the namespaces
    /// in turn.
    #[arg(long, default_value_t = 100)]
    pub bindings: usize,
    /// Intents of the ClusterSecurityIntentBinding over all namespaces (1-4: escapeToHost,
    /// dnsManipulation, swDeploymentTools, denyExternalNetworkAccess).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub cluster_intents: u8,
    /// Length of the steady-state measurement (scenario B).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub steady: Duration,
    /// Quiet time after A and C converge, counted with them, before the next scenario.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    /// Give up when a scenario has not converged after this long.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Passed to `nimbus run --resync` (default: the operator's own default).
    #[arg(long)]
    pub resync: Option<String>,
    /// Passed to `nimbus run --reconcile-concurrency` (default: the operator's own default).
    #[arg(long)]
    pub reconcile_concurrency: Option<u16>,
    /// The `nimbus` binary to run; default: `cargo build --release -p nimbus` and use its
    /// output.
    #[arg(long, env = "NIMBUS_BENCH_OPERATOR")]
    pub nimbus_bin: Option<PathBuf>,
    /// Bindings created one at a time after C, each timed until its native objects exist.
    #[arg(long, default_value_t = 100)]
    pub latency_samples: usize,
    /// Requests in flight when the floors write the scenarios' objects directly (at the default
    /// size, 64 wrote A's objects in 1.83 s where 16 took 2.55 s).
    #[arg(long, default_value_t = 64)]
    pub floor_concurrency: usize,
    /// Write kube-apiserver's CPU profiles of A and of A's floor (`A.pprof`, `floor-A.pprof`,
    /// `--apiserver-profile-secs` from each one's start) into this directory.
    #[arg(long)]
    pub apiserver_profile: Option<PathBuf>,
    #[arg(long, default_value_t = 6)]
    pub apiserver_profile_secs: u64,
    /// Where the JSON results go; default: `target/bench-results.json` in the workspace.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Another benchmark instead of the operator's scenarios.
    #[command(subcommand)]
    pub other: Option<Other>,
}

#[derive(clap::Subcommand, Debug)]
pub enum Other {
    /// The posture API with thousands of pods on kwok nodes: catch-up time, list latency
    /// through kube-apiserver, operator memory.
    Posture(posture::PostureArgs),
}
