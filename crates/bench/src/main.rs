//! `nimbus-bench`: the operator against a real local control plane, in six scenarios.
//!
//! A, cold convergence: intents, N namespaces with M bindings each and one cluster binding are
//! created; timed until every generated policy reports all its native policies. B, steady
//! state: nothing changes for a while. C, churn: every binding's workload label changes once.
//! D, narrowing: every binding drops one intent. E, removal: every binding is deleted (the
//! garbage collector deletes what they generated; the operator has nothing to write). L: single
//! bindings, one at a time. Each beside its floors: the same native objects and policies
//! written directly (natives-only), and everything a Nimbus-compatible operator must write
//! (compatible: owner references and statuses too; A, C and L).
//! For each: wall time, the operator's API requests by verb (from kube-apiserver's
//! `apiserver_request_total`, minus the bench's own requests), CPU time and memory of the
//! operator process. Printed as a table and written as JSON (`target/bench-results.json`).

// Shape rule (issue #43): no function longer than clippy.toml's `too-many-lines-threshold`.
// Non-test code only: a test reads best as one table or one story, and test builds
// (`cfg(test)`, tests/) do not see this line.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod args;
mod compatible;
mod compatible_floor;
mod converge;
mod floor;
mod latency;
mod meter;
mod operator;
mod posture;
mod procfs;
mod profile;
mod progress;
mod report;
mod requests;
mod scenarios;
mod workload;

use anyhow::{Context as _, bail};
use args::{Args, Other};
use clap::Parser;
use meter::Meter;
use nimbus_testenv::{ControlPlane, Options, apply_yaml, free_port};
use operator::{build_operator, spawn_operator};
use progress::step;
use report::{CHURN, COLD, NARROWING, Results, mib};
use requests::Own;
use scenarios::{changes, cold_convergence, profile_of, removal, steady_state};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use workload::{CREATED, NARROWED, Ops, Plan, RELABELLED};

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

fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.namespaces > 0, "--namespaces must be at least 1");
    anyhow::ensure!(
        args.latency_samples > 0,
        "--latency-samples must be at least 1"
    );
    procfs::check_available()?;
    if let Some(dir) = &args.apiserver_profile {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let root = workspace_root();
    let nimbus = operator_binary(&args, &root).await?;
    step(format!("operator binary: {}", nimbus.display()));
    if let Some(Other::Posture(posture_args)) = args.other {
        return posture::run(posture_args, &nimbus).await;
    }

    let (cp, client) = start_cluster(&args, &root).await?;
    let ops = Ops {
        client: client.clone(),
        own: Own::default(),
    };
    wait_garbage_collector(&ops).await?;

    let (mut operator, startup) = start_operator(&cp, &nimbus, &args).await?;
    let pid = operator.pid();

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

    // The API server's cost: kube-apiserver and etcd (kube-controller-manager's reactions, the
    // garbage collector's, are not what a writer pays for).
    let control_plane = procfs::named(&cp.pids(), &["kube-apiserver", "etcd"])?;
    let mut meter = Meter {
        ops: &ops,
        pid,
        control_plane: control_plane.clone(),
        peak_per_scenario: true,
    };
    let (cold, expected, end) =
        cold_convergence(&mut meter, &plan, &args, &client, &mut operator).await?;
    let (steady, end) = steady_state(&mut meter, &args, &mut operator, end).await?;
    let mut scenarios = vec![cold, steady];
    let (changed, end) = changes(&mut meter, &plan, &args, &mut operator, end).await?;
    scenarios.extend(changed);
    scenarios.push(removal(&mut meter, &plan, &args, &mut operator, end).await?);

    // L: one binding at a time, on the quiet converged cluster.
    step(format!(
        "L: {} single bindings, one at a time, each until its native objects exist",
        args.latency_samples
    ));
    let latency = latency::measure(
        &client,
        latency::Writer::Operator,
        args.latency_samples,
        args.timeout,
    )
    .await?;
    step(format!(
        "L: p50 {:.1} ms, p99 {:.1} ms",
        latency.p50_ms, latency.p99_ms
    ));

    // F: the floors, after the operator stopped.
    drop(operator);
    let floor = floors(&args, &ops, &plan, &control_plane).await?;
    let results = Results {
        config: config_of(&args, &plan, &nimbus),
        attribution: report::ATTRIBUTION,
        startup,
        expected,
        versus: report::versus(&scenarios, &latency, &floor),
        scenarios,
        latency,
        floor,
    };
    print!("{}", report::table(&results));
    write_results(&results, &args, &root)?;
    drop(cp);
    Ok(())
}

/// The `nimbus` binary: `--nimbus-bin`, or a release build of the workspace's.
async fn operator_binary(args: &Args, root: &Path) -> anyhow::Result<PathBuf> {
    Ok(match &args.nimbus_bin {
        Some(path) => {
            anyhow::ensure!(
                path.is_file(),
                "--nimbus-bin {} is not a file",
                path.display()
            );
            path.clone()
        }
        None => tokio::task::spawn_blocking({
            let root = root.to_path_buf();
            move || build_operator(&root)
        })
        .await
        .context("building the operator")??,
    })
}

/// The control plane, with the Nimbus CRDs, the engines' CRDs and the k8tls environment.
async fn start_cluster(args: &Args, root: &Path) -> anyhow::Result<(ControlPlane, kube::Client)> {
    let k8tls_env = root.join("charts/nimbus/files/k8tls/environment.yaml");
    let k8tls_env = std::fs::read_to_string(&k8tls_env)
        .with_context(|| format!("reading {}", k8tls_env.display()))?;

    step("starting the control plane (etcd, kube-apiserver, kube-controller-manager)");
    let cp = ControlPlane::start(Options {
        profiling: args.apiserver_profile.is_some(),
        ..Options::default()
    })
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
    Ok((cp, client))
}

/// The operator, ready; and what its start-up cost.
async fn start_operator(
    cp: &ControlPlane,
    nimbus: &Path,
    args: &Args,
) -> anyhow::Result<(nimbus_testenv::Child, report::Startup)> {
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
    let operator = spawn_operator(cp, nimbus, &operator_args, health).await?;
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
    Ok((operator, startup))
}

/// What was measured, as the results describe it.
fn config_of(args: &Args, plan: &Plan, nimbus: &Path) -> report::Config {
    report::Config {
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
    }
}

/// Writes the results as JSON (`--output`, or `target/bench-results.json`).
fn write_results(results: &Results, args: &Args, root: &Path) -> anyhow::Result<()> {
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| root.join("target/bench-results.json"));
    if let Some(dir) = output.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(results).context("serializing the results")?;
    std::fs::write(&output, json + "\n")
        .with_context(|| format!("writing {}", output.display()))?;
    println!("\nJSON: {}", output.display());
    Ok(())
}

/// The floors: what the operator wrote in A, C and D, and for single bindings in L, written
/// directly by the bench into namespaces of their own, with the operator stopped.
async fn floors(
    args: &Args,
    ops: &Ops,
    plan: &Plan,
    control_plane: &[u32],
) -> anyhow::Result<report::Floor> {
    let floor_plan = Plan::named(
        "floor",
        args.namespaces,
        args.bindings,
        usize::from(args.cluster_intents),
    );
    workload::create_namespaces(ops, &floor_plan).await?;
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
    let cold = floor::objects(
        &floor_plan,
        CREATED,
        Some((namespaces.as_slice(), "floor-all-namespaces")),
    )?;
    let relabelled = floor::objects(&floor_plan, RELABELLED, None)?;
    let narrowed = floor::objects(&floor_plan, NARROWED, None)?;
    let runs = [
        (
            COLD,
            cold.into_iter()
                .map(|(r, o)| floor::Op::Write(r, o))
                .collect(),
        ),
        (
            CHURN,
            floor::changes(
                &floor::objects(&floor_plan, CREATED, None)?,
                relabelled.clone(),
            ),
        ),
        (NARROWING, floor::changes(&relabelled, narrowed)),
    ];
    let mut versions = floor::Versions::default();
    let mut written = Vec::new();
    for (name, writes) in runs {
        step(format!(
            "F: the floor of {name}: {} writes, {} in flight",
            writes.len(),
            args.floor_concurrency
        ));
        let profiling = (name == COLD)
            .then(|| profile_of(args, &ops.client, "floor-A"))
            .flatten();
        let cpu_start = procfs::cpu_ticks_of(control_plane)?;
        let run = floor::write(ops, writes, args.floor_concurrency, &mut versions).await?;
        if let Some(profiling) = profiling {
            profiling.await.context("profiling kube-apiserver")??;
        }
        let cpu = procfs::ticks_to_secs(procfs::cpu_ticks_of(control_plane)? - cpu_start);
        step(format!("F: {:.2} s", run.wall.as_secs_f64()));
        written.push(report::FloorRun {
            scenario: name,
            writes: run.objects,
            writes_by_verb: Default::default(),
            others_gets: Vec::new(),
            wall_secs: run.wall.as_secs_f64(),
            api_cpu_secs: cpu,
        });
    }
    let latency = latency::measure_floor(
        &ops.client,
        latency::Writer::Direct,
        args.latency_samples,
        args.timeout,
        "the floor of L (the bindings' native objects)",
    )
    .await?;
    let compatible = compatible_floor(args, ops, plan, control_plane).await?;
    Ok(report::Floor {
        concurrency: args.floor_concurrency,
        runs: written,
        latency,
        compatible,
    })
}

/// The compatible floor (see `compatible.rs`) in namespaces of its own, created and settled
/// first; its cluster binding reaches them and the cluster's own namespaces, as the operator's
/// did.
async fn compatible_floor(
    args: &Args,
    ops: &Ops,
    plan: &Plan,
    control_plane: &[u32],
) -> anyhow::Result<report::CompatibleFloor> {
    let compat_plan = Plan::named(
        "compat",
        args.namespaces,
        args.bindings,
        usize::from(args.cluster_intents),
    );
    workload::create_namespaces(ops, &compat_plan).await?;
    wait_namespaces_settled(ops, &compat_plan).await?;
    let namespaces: Vec<String> = (compat_plan.namespaces.iter())
        .chain(
            plan.selected
                .iter()
                .filter(|n| !plan.namespaces.contains(n)),
        )
        .cloned()
        .collect();
    compatible_floor::measure(
        args,
        ops,
        &compat_plan,
        "compat-all-namespaces",
        &namespaces,
        control_plane,
    )
    .await
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
