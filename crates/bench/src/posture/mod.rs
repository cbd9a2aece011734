//! `nimbus-bench posture`: the posture API with thousands of pods on kwok's fake nodes. How
//! long until every pod's workload has its posture, how long a list through kube-apiserver's
//! aggregation layer takes once the posture has settled (JSON, and the Table `kubectl get`
//! asks for; and from the operator directly, to tell what the aggregation layer adds), how
//! long the operator's computations take, its memory before and after the pods, and, the
//! operator restarted at rest, how long until its postures count every pod again and its peak
//! memory meanwhile.

mod computations;
mod lists;
mod workload;

use crate::operator::{spawn_operator, tail};
use crate::procfs;
use crate::progress::step;
use crate::report::mib;
use anyhow::{Context as _, bail};
use computations::Computations;
use kube::Client;
use lists::{ListForm, Timing, time_lists, watch_catch_up};
use nimbus_api::posture;
use nimbus_testenv::{
    Child, ControlPlane, LocalApiService, Options, ServingCert, apply_yaml, create_fake_node,
    free_port,
};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use workload::{QUIET, SETTLE_LIMIT, Workload, all_running, create_workload, settle};

#[derive(clap::Args, Debug)]
pub struct PostureArgs {
    /// Pods in all, as Deployments of `--replicas` pods each.
    #[arg(long, default_value_t = 5000)]
    pods: usize,
    #[arg(long, default_value_t = 5)]
    replicas: usize,
    /// Namespaces the Deployments are spread over; each has one binding selecting half of its
    /// Deployments.
    #[arg(long, default_value_t = 50)]
    namespaces: usize,
    /// Lists timed in each form.
    #[arg(long, default_value_t = 30)]
    lists: usize,
    /// Requests in flight while creating the workload.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Give up when the postures have not caught up after this long.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Write kube-apiserver's CPU profile over the JSON lists through it to this file
    /// (`go tool pprof -top <file>`).
    #[arg(long)]
    apiserver_profile: Option<std::path::PathBuf>,
}

/// Pods kwok runs per fake node (below the node's capacity of 110).
const PODS_PER_NODE: usize = 100;

pub async fn run(args: PostureArgs, nimbus: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.replicas > 0 && args.namespaces > 0,
        "--replicas and --namespaces must be at least 1"
    );
    let deployments = args.pods.div_ceil(args.replicas);
    let pods = deployments * args.replicas;
    let nodes = pods.div_ceil(PODS_PER_NODE);
    let mut cluster = start(&args, nodes, nimbus).await?;
    let pid = cluster.operator.pid();
    let before = procfs::Sample::read(pid)?;
    let workload = Workload {
        namespaces: args.namespaces,
        deployments,
        replicas: args.replicas,
        concurrency: args.concurrency,
    };
    let catch_up = catch_up(&mut cluster, &workload, pods, args.timeout).await?;
    wait_at_rest(&cluster).await?;
    let after = procfs::Sample::read(pid)?;
    let timings = time_reads(&cluster, &args).await?;
    let after_lists = procfs::Sample::read(pid)?;
    let computations = Computations::scrape(cluster.metrics).await?;
    let restart = restart(&mut cluster, pods, args.timeout).await?;

    let per_thousand = (mib(after.rss_kib) - mib(before.rss_kib)) / (pods as f64 / 1000.0);
    println!(
        "posture API benchmark ({pods} pods, {deployments} workloads, {} namespaces, {nodes} kwok nodes)",
        args.namespaces
    );
    catch_up.print();
    for (form, via, timing) in &timings {
        println!(
            "  list {}:  p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms over {} lists of {} objects ({:.2} MiB each), {via}, at rest",
            form.label(),
            timing.p50_ms,
            timing.p99_ms,
            timing.max_ms,
            args.lists,
            timing.objects,
            timing.mib
        );
    }
    for c in &computations {
        println!(
            "  computed:    {} times (scope {}), {:.0} ms on average, the longest within {} ms (nimbus_posture_compute_seconds)",
            c.count, c.scope, c.mean_ms, c.longest_within_ms
        );
    }
    println!(
        "  operator RSS: {:.1} MiB before the pods, {:.1} MiB after ({per_thousand:.1} MiB per 1,000 pods), {:.1} MiB after the lists (peak {:.1} MiB)",
        mib(before.rss_kib),
        mib(after.rss_kib),
        mib(after_lists.rss_kib),
        mib(after_lists.peak_rss_kib),
    );
    restart.print(after.rss_kib);
    Ok(())
}

/// The control plane with `nodes` kwok nodes, and the operator serving the posture API
/// through it.
struct Cluster {
    cp: ControlPlane,
    client: Client,
    operator: Child,
    service: LocalApiService<'static>,
    certificate: ServingCert,
    /// The operator's metrics port.
    metrics: u16,
    /// How the operator was started, to start it again.
    nimbus: PathBuf,
    operator_args: Vec<String>,
    health: u16,
}

/// Starts the control plane, its fake nodes and the operator with the posture API registered.
async fn start(args: &PostureArgs, nodes: usize, nimbus: &Path) -> anyhow::Result<Cluster> {
    step("starting the control plane with kube-scheduler and kwok");
    let cp = ControlPlane::start(Options {
        fake_nodes: true,
        profiling: args.apiserver_profile.is_some(),
        ..Options::default()
    })
    .await
    .context("starting the local control plane")?;
    let client = cp.client().context("building an admin client")?;
    apply_yaml(&client, &nimbus_api::crds_yaml()?)
        .await
        .context("installing the Nimbus CRDs")?;
    nimbus_testenv::upstream::install_engine_crds(&client)
        .await
        .context("installing the engine CRDs")?;
    step(format!("creating {nodes} fake nodes"));
    for n in 0..nodes {
        create_fake_node(&client, &format!("bench-node-{n}"))
            .await
            .context("creating a fake node")?;
    }

    step("starting the operator with the posture API");
    let port = free_port()?;
    let service = LocalApiService {
        group: posture::GROUP,
        version: posture::VERSION,
        namespace: "nimbus-system",
        service: "nimbus-posture",
        port,
    };
    let certificate = nimbus_testenv::serving_cert(&[&service.server_name()])?;
    let write = |name: &str, pem: &str| -> anyhow::Result<OsString> {
        let path = cp.work_dir().join(name);
        std::fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
        Ok(path.into_os_string())
    };
    let (health, metrics) = (free_port()?, free_port()?);
    let operator_args: Vec<String> = [
        "run".into(),
        format!("--health-addr=127.0.0.1:{health}"),
        format!("--metrics-addr=127.0.0.1:{metrics}"),
        format!("--posture-addr=127.0.0.1:{port}"),
        format!(
            "--posture-tls-cert-file={}",
            write("posture.crt", &certificate.cert_pem)?.to_string_lossy()
        ),
        format!(
            "--posture-tls-key-file={}",
            write("posture.key", &certificate.key_pem)?.to_string_lossy()
        ),
    ]
    .into();
    let operator = spawn_operator(&cp, nimbus, &operator_args, health).await?;
    service
        .register(&cp, &certificate.ca_pem, Duration::from_secs(120))
        .await
        .context("registering the posture API")?;
    Ok(Cluster {
        cp,
        client,
        operator,
        service,
        certificate,
        metrics,
        nimbus: nimbus.to_owned(),
        operator_args,
        health,
    })
}

/// When every pod was in a posture, from the first create.
struct CatchUp {
    /// Until kube-controller-manager had created every pod.
    pods_created: Duration,
    caught_up: Duration,
}

impl CatchUp {
    fn print(&self) {
        println!(
            "  caught up:   every pod in a posture {:.1} s after the first create; the last pod \
             existed at {:.1} s (kube-controller-manager's pace), so the postures lagged by {:.3} s \
             (both instants from watch events)",
            self.caught_up.as_secs_f64(),
            self.pods_created.as_secs_f64(),
            self.caught_up
                .saturating_sub(self.pods_created)
                .as_secs_f64()
        );
    }
}

/// Creates the workload, timed by watches until every pod is in a posture (at most
/// `timeout`).
async fn catch_up(
    cluster: &mut Cluster,
    workload: &Workload,
    pods: usize,
    timeout: Duration,
) -> anyhow::Result<CatchUp> {
    step(format!(
        "creating {} Deployments of {} pods in {} namespaces, and a binding in each",
        workload.deployments, workload.replicas, workload.namespaces
    ));
    // Timed by watches started before the first create: each event is timestamped as it
    // arrives, so the lag is not rounded to a polling period.
    let (listening, listed) = tokio::sync::oneshot::channel();
    let watched = tokio::spawn(watch_catch_up(cluster.client.clone(), pods, listening));
    listed
        .await
        .context("the watches ended before their initial lists")?;
    let began = Instant::now();
    create_workload(&cluster.client, workload).await?;
    let created = began.elapsed();
    let (pods_created, caught_up) = loop {
        if watched.is_finished() {
            let (pods_at, postures_at) = watched.await??;
            break (
                pods_at.saturating_duration_since(began),
                postures_at.saturating_duration_since(began),
            );
        }
        if cluster.operator.has_exited() {
            bail!(
                "the operator exited; its log ends with:\n{}",
                tail(&cluster.operator.output(), 40)
            );
        }
        if began.elapsed() > timeout {
            watched.abort();
            bail!("after {timeout:?} the postures do not count all {pods} pods");
        }
        // Only to notice an exit or the timeout: the instants come from the watches.
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    step(format!(
        "every pod is in a posture {:.1} s after the first create ({:.1} s creating the \
         Deployments, {:.1} s until kube-controller-manager created every pod)",
        caught_up.as_secs_f64(),
        created.as_secs_f64(),
        pods_created.as_secs_f64()
    ));
    Ok(CatchUp {
        pods_created,
        caught_up,
    })
}

/// Waits until kwok runs every pod and the posture no longer changes (or says it gave up).
async fn wait_at_rest(cluster: &Cluster) -> anyhow::Result<()> {
    // The reads are timed at rest: kube-scheduler and kwok go on binding and starting pods
    // long after the last is created, and each change recomputes the posture. kwok's status
    // writes for pods it has not started yet also keep kube-apiserver busy on these 2 cores
    // after the posture no longer changes, so the reads wait for them too.
    let began = Instant::now();
    match all_running(&cluster.client).await? {
        true => step(format!(
            "kwok ran every pod {:.1} s after catching up",
            began.elapsed().as_secs_f64()
        )),
        false => step(format!(
            "pods still not running {} s after catching up; timing the reads anyway",
            SETTLE_LIMIT.as_secs()
        )),
    }
    let settled = settle(cluster.metrics).await?;
    match settled {
        Some(after) => step(format!(
            "the posture settled {:.1} s after that (no computation for {} s)",
            after.as_secs_f64(),
            QUIET.as_secs()
        )),
        None => step(format!(
            "the posture still recomputed {} s after that; timing the reads anyway",
            SETTLE_LIMIT.as_secs()
        )),
    }
    Ok(())
}

/// Times the lists of each form through kube-apiserver (profiling it over the first form's,
/// if asked), then from the operator directly.
async fn time_reads(
    cluster: &Cluster,
    args: &PostureArgs,
) -> anyhow::Result<Vec<(ListForm, &'static str, Timing)>> {
    let mut profiling = args.apiserver_profile.as_ref().map(|path| {
        // Over the first form's lists, plain JSON; sampling starts with the request.
        let secs = (args.lists as u64 / 10).max(1);
        step(format!(
            "profiling kube-apiserver for {secs} s into {}",
            path.display()
        ));
        crate::profile::start(&cluster.client, secs, path.clone())
    });
    let forms = ListForm::ALL;
    let mut timings = Vec::new();
    for form in forms {
        timings.push((
            form,
            "through kube-apiserver",
            time_lists(&cluster.client, args.lists, form).await?,
        ));
        if let Some(profiling) = profiling.take() {
            profiling.await.context("the profile task")??;
        }
    }
    // The same lists from the operator itself, as kube-apiserver's front proxy asks: what
    // the aggregation layer adds is the difference.
    let direct = cluster
        .service
        .front_proxy_client(&cluster.cp, &cluster.certificate.ca_pem)
        .context("a client of the posture server")?;
    for form in forms {
        timings.push((
            form,
            "from the operator directly",
            time_lists(&direct, args.lists, form).await?,
        ));
    }
    Ok(timings)
}

/// The operator started again at rest, as after an upgrade or an eviction.
struct Restart {
    /// Until its `/readyz` answered 200.
    ready: Duration,
    /// Until a list of its postures counted every pod.
    caught_up: Duration,
    rss_kib: u64,
    peak_rss_kib: u64,
}

impl Restart {
    fn print(&self, at_rest_kib: u64) {
        println!(
            "  restart:     ready {:.1} s after the start, every pod in a posture again {:.1} s \
             after it; RSS {:.1} MiB once at rest, peak {:.1} MiB ({:.2}x the first process's \
             {:.1} MiB at rest)",
            self.ready.as_secs_f64(),
            self.caught_up.as_secs_f64(),
            mib(self.rss_kib),
            mib(self.peak_rss_kib),
            self.peak_rss_kib as f64 / at_rest_kib as f64,
            mib(at_rest_kib),
        );
    }
}

/// Stops the operator (SIGTERM) and starts it again: the new process lists every pod at once.
async fn restart(cluster: &mut Cluster, pods: usize, timeout: Duration) -> anyhow::Result<Restart> {
    step("restarting the operator");
    cluster.operator.terminate();
    let stopping = Instant::now();
    while !cluster.operator.has_exited() {
        if stopping.elapsed() > Duration::from_secs(30) {
            cluster.operator.kill();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let began = Instant::now();
    cluster.operator = spawn_operator(
        &cluster.cp,
        &cluster.nimbus,
        &cluster.operator_args,
        cluster.health,
    )
    .await?;
    let ready = began.elapsed();
    // The posture API answers 503 until its first computation: then it counts every pod.
    let postures = kube::Api::<posture::WorkloadPosture>::all(cluster.client.clone());
    loop {
        let counted: usize = match postures.list(&Default::default()).await {
            Ok(list) => list.items.iter().map(|w| w.workload.pods as usize).sum(),
            Err(_) => 0,
        };
        if counted >= pods {
            break;
        }
        if began.elapsed() > timeout {
            bail!("after {timeout:?} the restarted operator counts {counted} of {pods} pods");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let caught_up = began.elapsed();
    step(format!(
        "every pod is in a posture again {:.1} s after the restart",
        caught_up.as_secs_f64()
    ));
    settle(cluster.metrics).await?;
    let sample = procfs::Sample::read(cluster.operator.pid())?;
    Ok(Restart {
        ready,
        caught_up,
        rss_kib: sample.rss_kib,
        peak_rss_kib: sample.peak_rss_kib,
    })
}
