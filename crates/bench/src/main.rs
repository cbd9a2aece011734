//! `nimbus-bench`: the operator against a real local control plane, in three scenarios.
//!
//! A, cold convergence: intents, N namespaces with M bindings each and one cluster binding are
//! created; timed until every generated policy reports all its native policies. B, steady
//! state: nothing changes for a while. C, churn: every binding's workload label changes once.
//! For each: wall time, the operator's API requests by verb (from kube-apiserver's
//! `apiserver_request_total`, minus the bench's own requests), CPU time and memory of the
//! operator process. Printed as a table and written as JSON (`target/bench-results.json`).

mod converge;
mod floor;
mod latency;
mod posture;
mod procfs;
mod report;
mod requests;
mod workload;

use anyhow::{Context as _, bail};
use clap::Parser;
use converge::{Progress, Tracker};
use nimbus_testenv::{Child, ControlPlane, Options, apply_yaml, free_port, http_get};
use report::{Attributed, Results, Scenario, mib};
use requests::{Counts, Own};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};
use workload::{Ops, Plan};

#[derive(Parser, Debug)]
#[command(about = "Benchmark the Nimbus operator on a real local control plane")]
struct Args {
    /// Namespaces, each with its own bindings.
    #[arg(long, default_value_t = 50)]
    namespaces: usize,
    /// SecurityIntentBindings (each referencing all four intents), spread over the namespaces
    /// in turn.
    #[arg(long, default_value_t = 100)]
    bindings: usize,
    /// Intents of the ClusterSecurityIntentBinding over all namespaces (1-4: escapeToHost,
    /// dnsManipulation, swDeploymentTools, denyExternalNetworkAccess).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    cluster_intents: u8,
    /// Length of the steady-state measurement (scenario B).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    steady: Duration,
    /// Quiet time after A and C converge, counted with them, before the next scenario.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    settle: Duration,
    /// Give up when a scenario has not converged after this long.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Passed to `nimbus run --resync` (default: the operator's own default).
    #[arg(long)]
    resync: Option<String>,
    /// Passed to `nimbus run --reconcile-concurrency` (default: the operator's own default).
    #[arg(long)]
    reconcile_concurrency: Option<u16>,
    /// The `nimbus` binary to run; default: `cargo build --release -p nimbus` and use its
    /// output.
    #[arg(long, env = "NIMBUS_BENCH_OPERATOR")]
    nimbus_bin: Option<PathBuf>,
    /// Bindings created one at a time after C, each timed until its native objects exist.
    #[arg(long, default_value_t = 100)]
    latency_samples: usize,
    /// Requests in flight when the floor writes scenario A's objects directly.
    #[arg(long, default_value_t = 16)]
    floor_concurrency: usize,
    /// Where the JSON results go; default: `target/bench-results.json` in the workspace.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Another benchmark instead of the operator's scenarios.
    #[command(subcommand)]
    other: Option<Other>,
}

#[derive(clap::Subcommand, Debug)]
enum Other {
    /// The posture API with thousands of pods on kwok nodes: catch-up time, list latency
    /// through kube-apiserver, operator memory.
    Posture(posture::PostureArgs),
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

const COLD: &str = "A cold convergence";
const CHURN: &str = "C churn";

fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn step(message: impl AsRef<str>) {
    eprintln!("[bench] {}", message.as_ref());
}

async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.namespaces > 0, "--namespaces must be at least 1");
    anyhow::ensure!(
        args.latency_samples > 0,
        "--latency-samples must be at least 1"
    );
    procfs::check_available()?;
    let root = workspace_root();
    let nimbus = match &args.nimbus_bin {
        Some(path) => {
            anyhow::ensure!(
                path.is_file(),
                "--nimbus-bin {} is not a file",
                path.display()
            );
            path.clone()
        }
        None => tokio::task::spawn_blocking({
            let root = root.clone();
            move || build_operator(&root)
        })
        .await
        .context("building the operator")??,
    };
    step(format!("operator binary: {}", nimbus.display()));
    if let Some(Other::Posture(posture_args)) = args.other {
        return posture::run(posture_args, &nimbus).await;
    }

    let k8tls_env = root.join("charts/nimbus/files/k8tls/environment.yaml");
    let k8tls_env = std::fs::read_to_string(&k8tls_env)
        .with_context(|| format!("reading {}", k8tls_env.display()))?;

    step("starting the control plane (etcd, kube-apiserver, kube-controller-manager)");
    let cp = ControlPlane::start(Options::default())
        .await
        .context("starting the local control plane")?;
    let client = cp.client().context("building an admin client")?;
    step("installing the Nimbus CRDs, the engine CRDs and the k8tls environment");
    let nimbus_crds = nimbus_api::crds_yaml().context("rendering the Nimbus CRDs")?;
    apply_yaml(&client, &nimbus_crds)
        .await
        .context("installing the Nimbus CRDs")?;
    nimbus_testenv::upstream::install_engine_crds(&client)
        .await
        .context("installing the engine CRDs")?;
    apply_yaml(&client, &k8tls_env)
        .await
        .context("installing charts/nimbus/files/k8tls/environment.yaml")?;

    let ops = Ops {
        client: client.clone(),
        own: Own::default(),
    };
    wait_garbage_collector(&ops).await?;

    step("starting the operator");
    let (health, metrics) = (free_port()?, free_port()?);
    let mut operator_args: Vec<String> = vec![
        "run".into(),
        "--health-addr".into(),
        format!("127.0.0.1:{health}"),
        "--metrics-addr".into(),
        format!("127.0.0.1:{metrics}"),
    ];
    if let Some(resync) = &args.resync {
        operator_args.extend(["--resync".into(), resync.clone()]);
    }
    if let Some(n) = args.reconcile_concurrency {
        operator_args.extend(["--reconcile-concurrency".into(), n.to_string()]);
    }
    let spawned = Instant::now();
    let mut operator = spawn_operator(&cp, &nimbus, &operator_args, health).await?;
    let pid = operator.pid();
    let ready_secs = spawned.elapsed().as_secs_f64();
    let at_ready = procfs::Sample::read(pid)?;
    step(format!(
        "operator ready after {ready_secs:.2} s (pid {pid})"
    ));
    let startup = report::Startup {
        ready_secs,
        cpu_secs: procfs::ticks_to_secs(at_ready.cpu_ticks),
        rss_mib: mib(at_ready.rss_kib),
    };

    let mut plan = Plan::new(
        args.namespaces,
        args.bindings,
        usize::from(args.cluster_intents),
    );
    step(format!(
        "creating {} namespaces (before any measurement)",
        plan.namespaces.len()
    ));
    workload::create_namespaces(&ops, &plan).await?;
    plan.selected = wait_namespaces_settled(&ops, &plan).await?;

    let mut meter = Meter {
        ops: &ops,
        pid,
        control_plane: cp.pids(),
        peak_per_scenario: true,
    };
    let mut scenarios = Vec::new();

    // A: cold convergence.
    step(format!(
        "A: creating 4 SecurityIntents, {} SecurityIntentBindings and 1 \
         ClusterSecurityIntentBinding; waiting for {} policies",
        plan.bindings.len(),
        plan.expected_policies()
    ));
    let start = meter.mark().await?;
    let mut tracker = Tracker::start(&ops, &plan, 0);
    let began = Instant::now();
    workload::create_workload(&ops, &plan).await?;
    let (wall, progress) = converge(&mut tracker, began, &args, &mut operator).await?;
    drop(tracker);
    step(format!(
        "A: converged in {:.2} s ({} native policies); settling {:?}",
        wall.as_secs_f64(),
        progress.native_policies,
        args.settle
    ));
    let expected = report::Expected {
        policies: progress.expected,
        native_policies: progress.native_policies,
        adapter_policies_per_policy: progress.per_policy.clone(),
    };
    tokio::time::sleep(args.settle).await;
    let end = meter.mark().await?;
    scenarios.push(meter.scenario(
        COLD,
        format!(
            "create 4 SecurityIntents, {} SecurityIntentBindings in {} namespaces and 1 \
             ClusterSecurityIntentBinding; until all {} policies report their {} native policies",
            plan.bindings.len(),
            plan.namespaces.len(),
            progress.expected,
            progress.native_policies
        ),
        wall,
        Some((progress.done, progress.expected)),
        &start,
        &end,
    ));

    // B: steady state.
    step(format!("B: measuring {:?} without changes", args.steady));
    let start = end;
    tokio::time::sleep(args.steady).await;
    let end = meter.mark().await?;
    if operator.has_exited() {
        bail!(
            "the operator exited during the steady state; its log ends with:\n{}",
            tail(&operator.output(), 40)
        );
    }
    scenarios.push(meter.scenario(
        "B steady state",
        format!(
            "{:.1} s with no changes, after A settled",
            end.at.duration_since(start.at).as_secs_f64()
        ),
        end.at.duration_since(start.at),
        None,
        &start,
        &end,
    ));

    // C: churn.
    step(format!(
        "C: changing the workload label of all {} bindings",
        plan.bindings.len()
    ));
    let start = end;
    let mut tracker = Tracker::start(&ops, &plan, 1);
    let began = Instant::now();
    workload::relabel_bindings(&ops, &plan, 1).await?;
    let (wall, progress) = converge(&mut tracker, began, &args, &mut operator).await?;
    drop(tracker);
    step(format!(
        "C: converged in {:.2} s; settling {:?}",
        wall.as_secs_f64(),
        args.settle
    ));
    tokio::time::sleep(args.settle).await;
    let end = meter.mark().await?;
    scenarios.push(meter.scenario(
        CHURN,
        format!(
            "merge-patch the workload label of all {} SecurityIntentBindings; until every \
             policy reflects it",
            plan.bindings.len()
        ),
        wall,
        Some((progress.done, progress.expected)),
        &start,
        &end,
    ));

    // L: one binding at a time, on the quiet converged cluster.
    step(format!(
        "L: {} single bindings, one at a time, each until its native objects exist",
        args.latency_samples
    ));
    let latency = latency::measure(&client, args.latency_samples, args.timeout).await?;
    step(format!(
        "L: p50 {:.1} ms, p99 {:.1} ms",
        latency.p50_ms, latency.p99_ms
    ));

    // F: the floor, after the operator stopped.
    let wall_of = |name: &str| {
        scenarios
            .iter()
            .find(|s| s.name == name)
            .map_or(0.0, |s| s.wall_time_secs)
    };
    let (cold_wall, churn_wall) = (wall_of(COLD), wall_of(CHURN));
    drop(operator);
    let floor_plan = Plan::named(
        "floor",
        args.namespaces,
        args.bindings,
        usize::from(args.cluster_intents),
    );
    workload::create_namespaces(&ops, &floor_plan).await?;
    // The cluster binding also reached the cluster's own namespaces (default, kube-public, ...).
    let namespaces: Vec<String> = floor_plan
        .namespaces
        .iter()
        .cloned()
        .chain(
            plan.selected
                .iter()
                .filter(|n| !plan.namespaces.contains(n))
                .cloned(),
        )
        .collect();
    let objects = floor::objects(
        &floor_plan,
        0,
        Some((namespaces.as_slice(), "floor-all-namespaces")),
    )?;
    step(format!(
        "F: the floor: the operator stopped; server-side-applying its {} objects of A directly",
        objects.len()
    ));
    let control_plane = cp.pids();
    let cpu_start = procfs::cpu_ticks_of(&control_plane)?;
    let written = floor::write(&ops, objects, args.floor_concurrency).await?;
    let cpu_written = procfs::cpu_ticks_of(&control_plane)?;
    step(format!("F: {:.2} s", written.wall.as_secs_f64()));
    let changed = floor::objects(&floor_plan, 1, None)?;
    step(format!(
        "F: then the {} objects C changes, server-side-applied over them",
        changed.len()
    ));
    let cpu_churn_start = procfs::cpu_ticks_of(&control_plane)?;
    let churned = floor::write(&ops, changed, args.floor_concurrency).await?;
    let cpu_churned = procfs::cpu_ticks_of(&control_plane)?;
    step(format!("F: {:.2} s", churned.wall.as_secs_f64()));
    let floor = report::Floor {
        objects: written.objects,
        concurrency: args.floor_concurrency,
        wall_secs: written.wall.as_secs_f64(),
        cold_convergence_ratio: cold_wall / written.wall.as_secs_f64(),
        churn_objects: churned.objects,
        churn_wall_secs: churned.wall.as_secs_f64(),
        churn_ratio: churn_wall / churned.wall.as_secs_f64(),
        control_plane_cpu_secs: procfs::ticks_to_secs(cpu_written - cpu_start),
        churn_control_plane_cpu_secs: procfs::ticks_to_secs(cpu_churned - cpu_churn_start),
    };

    let results = Results {
        config: report::Config {
            namespaces: args.namespaces,
            security_intent_bindings: plan.bindings.len(),
            cluster_binding_intents: workload::cluster_intents(plan.cluster_intents)
                .iter()
                .map(|(_, id)| *id)
                .collect(),
            security_intents: workload::INTENTS.len(),
            cluster_security_intent_bindings: 1,
            steady_state_secs: args.steady.as_secs_f64(),
            settle_secs: args.settle.as_secs_f64(),
            operator_resync: args.resync.clone(),
            operator_reconcile_concurrency: args.reconcile_concurrency,
            operator_binary: nimbus.display().to_string(),
            bench_release_build: !cfg!(debug_assertions),
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            unix_time: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        },
        attribution: report::ATTRIBUTION,
        startup,
        expected,
        scenarios,
        latency,
        floor,
    };
    print!("{}", report::table(&results));
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| root.join("target/bench-results.json"));
    if let Some(dir) = output.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(&results).context("serializing the results")?;
    std::fs::write(&output, json + "\n")
        .with_context(|| format!("writing {}", output.display()))?;
    println!("\nJSON: {}", output.display());
    drop(cp);
    Ok(())
}

/// Builds `nimbus` in release mode (a no-op when it is up to date) and returns the path cargo
/// reports for it, so the binary matches the sources whatever the target directory.
fn build_operator(root: &Path) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    step("building the operator: cargo build --release -p nimbus --bin nimbus");
    let mut command = Command::new(&cargo);
    // `cargo run` describes the bench package to it in the environment; passed on, that would
    // look like a changed environment to some build scripts (ring's reads CARGO_MANIFEST_DIR)
    // and rebuild half the dependency tree on every other build.
    for (name, _) in std::env::vars_os() {
        let name_str = name.to_string_lossy();
        if name_str.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
            ]
            .contains(&name_str.as_ref())
        {
            command.env_remove(&name);
        }
    }
    let output = command
        .args([
            "build",
            "--release",
            "-p",
            "nimbus",
            "--bin",
            "nimbus",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            // No cargo (e.g. the bench binary was copied elsewhere): a sibling binary from the
            // same build is the next best thing.
            let sibling = std::env::current_exe()
                .context("locating the bench binary")?
                .with_file_name("nimbus");
            if sibling.is_file() {
                step(format!(
                    "cannot run {} ({e}); using {} from the same target directory",
                    cargo.to_string_lossy(),
                    sibling.display()
                ));
                return Ok(sibling);
            }
            return Err(anyhow::Error::new(e).context(format!(
                "running `{} build --release -p nimbus` (and no nimbus binary next to the bench \
                 binary; pass --nimbus-bin)",
                cargo.to_string_lossy()
            )));
        }
    };
    if !output.status.success() {
        bail!(
            "`cargo build --release -p nimbus` failed ({})",
            output.status
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "nimbus")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo built nimbus but reported no executable for it")
}

/// Runs `nimbus <args>` against `cp` (logging at `NIMBUS_LOG`, default info) and waits until
/// its `/readyz` on port `health` answers 200.
async fn spawn_operator(
    cp: &ControlPlane,
    nimbus: &Path,
    args: &[String],
    health: u16,
) -> anyhow::Result<Child> {
    let log_level = std::env::var_os("NIMBUS_LOG").unwrap_or_else(|| OsString::from("info"));
    let mut operator = Child::spawn(
        "nimbus-operator",
        nimbus,
        args,
        &[
            ("KUBECONFIG", cp.kubeconfig_path().as_os_str()),
            ("NIMBUS_LOG", log_level.as_os_str()),
        ],
        cp.work_dir(),
    )
    .with_context(|| format!("starting {}", nimbus.display()))?;
    wait_ready(&mut operator, health).await?;
    Ok(operator)
}

async fn wait_ready(operator: &mut Child, health: u16) -> anyhow::Result<()> {
    const LIMIT: Duration = Duration::from_secs(120);
    let started = Instant::now();
    loop {
        if http_get(health, "/readyz").await.map(|(code, _)| code) == Some(200) {
            return Ok(());
        }
        if operator.has_exited() {
            bail!(
                "the operator exited before becoming ready; its log ends with:\n{}",
                tail(&operator.output(), 40)
            );
        }
        if started.elapsed() > LIMIT {
            bail!(
                "the operator's /readyz (127.0.0.1:{health}) did not answer 200 within \
                 {LIMIT:?}; its log ends with:\n{}",
                tail(&operator.output(), 40)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until kube-controller-manager's garbage collector watches the just-installed kinds.
/// It discovers new CRDs only every 30 s; until then objects owned by objects of those kinds
/// make it look their owners up one by one (GETs the apiserver would count as the operator's).
/// Checked before the operator starts, so every watch on those kinds is the collector's.
async fn wait_garbage_collector(ops: &Ops) -> anyhow::Result<()> {
    const LIMIT: Duration = Duration::from_secs(120);
    let wanted = workload::watched_by_garbage_collector();
    step(format!(
        "waiting for kube-controller-manager's garbage collector to watch {} kinds (it \
         discovers CRDs every 30 s)",
        wanted.len()
    ));
    let started = Instant::now();
    loop {
        let open = requests::open_watches(&ops.client, &ops.own).await?;
        let missing: Vec<String> = wanted
            .iter()
            .filter(|k| open.0.get(k).copied().unwrap_or(0) == 0)
            .map(|k| k.resource.clone())
            .collect();
        if missing.is_empty() {
            step(format!(
                "  garbage collector ready after {:.1} s",
                started.elapsed().as_secs_f64()
            ));
            return Ok(());
        }
        if started.elapsed() > LIMIT {
            step(format!(
                "warning: after {LIMIT:?} nothing watches {}; the garbage collector's owner \
                 lookups may be counted as operator requests",
                missing.join(", ")
            ));
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until kube-controller-manager has populated every bench namespace, so its writes do
/// not land in a measurement window; returns the namespaces the cluster binding will select.
async fn wait_namespaces_settled(
    ops: &Ops,
    plan: &Plan,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    const LIMIT: Duration = Duration::from_secs(120);
    let started = Instant::now();
    loop {
        let (settled, selected) = workload::namespaces_settled(ops, plan).await?;
        if settled == plan.namespaces.len() {
            // Let the last reactions (events, the operator's namespace cache) pass.
            tokio::time::sleep(Duration::from_secs(2)).await;
            return Ok(selected);
        }
        if started.elapsed() > LIMIT {
            bail!(
                "after {LIMIT:?} only {settled} of {} namespaces have their default \
                 ServiceAccount and kube-root-ca.crt ConfigMap (is kube-controller-manager \
                 running?)",
                plan.namespaces.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until `tracker` sees every policy done; the time is taken the moment the last one is.
async fn converge(
    tracker: &mut Tracker,
    began: Instant,
    args: &Args,
    operator: &mut Child,
) -> anyhow::Result<(Duration, Progress)> {
    let mut checks = tokio::time::interval(Duration::from_secs(1));
    let mut last_report = Instant::now();
    loop {
        tokio::select! {
            converged = tracker.next() => {
                if converged? {
                    return Ok((began.elapsed(), tracker.progress()));
                }
            }
            _ = checks.tick() => {
                let elapsed = began.elapsed();
                if operator.has_exited() {
                    bail!(
                        "the operator exited; its log ends with:\n{}",
                        tail(&operator.output(), 40)
                    );
                }
                if elapsed > args.timeout {
                    let progress = tracker.progress();
                    bail!(
                        "not converged after {:?}: {} of {} policies done; for example:\n  {}\n\
                         the operator's log ends with:\n{}",
                        args.timeout,
                        progress.done,
                        progress.expected,
                        progress.pending.join("\n  "),
                        tail(&operator.output(), 40)
                    );
                }
                if last_report.elapsed() > Duration::from_secs(10) {
                    last_report = Instant::now();
                    let progress = tracker.progress();
                    step(format!(
                        "  {:.0} s: {} of {} policies done",
                        elapsed.as_secs_f64(),
                        progress.done,
                        progress.expected
                    ));
                }
            }
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A point in time with every counter the scenarios are measured by.
struct Mark {
    at: Instant,
    apiserver: Counts,
    own: Counts,
    process: procfs::Sample,
    control_plane_cpu_ticks: u64,
}

struct Meter<'a> {
    ops: &'a Ops,
    pid: u32,
    /// etcd, kube-apiserver, kube-controller-manager.
    control_plane: Vec<u32>,
    /// Whether the kernel lets us reset the peak RSS at every mark.
    peak_per_scenario: bool,
}

impl Meter<'_> {
    /// Ends one window and starts the next: process figures (peak RSS then reset), the bench's
    /// own requests so far, then the apiserver's counters (that scrape is counted as ours, in
    /// the next window, where the apiserver also counts it).
    async fn mark(&mut self) -> anyhow::Result<Mark> {
        // A request the bench just made may be counted by the apiserver a moment after its
        // response arrived.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let process = procfs::Sample::read(self.pid).context("reading the operator's /proc")?;
        let control_plane_cpu_ticks = procfs::cpu_ticks_of(&self.control_plane)?;
        if self.peak_per_scenario
            && let Err(e) = procfs::reset_peak(self.pid)
        {
            step(format!(
                "cannot reset the peak RSS ({e:#}); peaks are since operator start"
            ));
            self.peak_per_scenario = false;
        }
        let own = self.ops.own.snapshot();
        let apiserver = requests::scrape(&self.ops.client, &self.ops.own).await?;
        Ok(Mark {
            at: Instant::now(),
            apiserver,
            own,
            process,
            control_plane_cpu_ticks,
        })
    }

    fn scenario(
        &self,
        name: &'static str,
        description: String,
        wall: Duration,
        policies_done: Option<(usize, usize)>,
        start: &Mark,
        end: &Mark,
    ) -> Scenario {
        let apiserver = end.apiserver.since(&start.apiserver);
        let own = end.own.since(&start.own);
        let requests = Attributed::of(&apiserver, &own, workload::operator_resource);
        Scenario {
            name,
            description,
            wall_time_secs: wall.as_secs_f64(),
            window_secs: end.at.duration_since(start.at).as_secs_f64(),
            policies_done,
            operator_requests: requests.operator,
            operator_requests_by_kind: requests.operator_by_kind,
            bench_requests: requests.bench,
            background_requests: requests.background,
            background_requests_by_kind: requests.background_by_kind,
            non_resource_requests: requests.non_resource,
            attribution_mismatch: requests.mismatch,
            operator_cpu_secs: procfs::ticks_to_secs(
                end.process
                    .cpu_ticks
                    .saturating_sub(start.process.cpu_ticks),
            ),
            control_plane_cpu_secs: procfs::ticks_to_secs(
                end.control_plane_cpu_ticks - start.control_plane_cpu_ticks,
            ),
            operator_peak_rss_mib: mib(end.process.peak_rss_kib),
            operator_peak_rss_scope: if self.peak_per_scenario {
                "scenario"
            } else {
                "operator start"
            },
            operator_rss_mib: mib(end.process.rss_kib),
        }
    }
}
