//! `nimbus-bench posture`: the posture API with thousands of pods on kwok's fake nodes. How
//! long until every pod's workload has its posture, how long a list through kube-apiserver's
//! aggregation layer takes once the posture has settled (JSON, and the Table `kubectl get`
//! asks for; and from the operator directly, to tell what the aggregation layer adds), how
//! long the operator's computations take, and its memory before and after the pods.

use crate::{procfs, report::mib, spawn_operator, step, tail};
use anyhow::{Context as _, bail};
use futures::{AsyncReadExt as _, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::PostParams;
use kube::{Api, Client};
use nimbus_api::posture::{self, WorkloadPosture};
use nimbus_api::{SecurityIntent, SecurityIntentBinding};
use nimbus_testenv::{
    ControlPlane, LocalApiService, Options, apply_yaml, create_fake_node, free_port,
};
use serde_json::json;
use std::ffi::OsString;
use std::io::Read as _;
use std::path::Path;
use std::time::{Duration, Instant};

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
    let nodes = pods.div_ceil(PODS_PER_NODE);
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
    let mut operator = spawn_operator(&cp, nimbus, &operator_args, health).await?;
    let pid = operator.pid();
    service
        .register(&cp, &certificate.ca_pem, Duration::from_secs(120))
        .await
        .context("registering the posture API")?;
    let before = procfs::Sample::read(pid)?;

    step(format!(
        "creating {deployments} Deployments of {} pods in {} namespaces, and a binding in each",
        args.replicas, args.namespaces
    ));
    // Timed by watches started before the first create: each event is timestamped as it
    // arrives, so the lag is not rounded to a polling period.
    let (listening, listed) = tokio::sync::oneshot::channel();
    let watched = tokio::spawn(watch_catch_up(client.clone(), pods, listening));
    listed
        .await
        .context("the watches ended before their initial lists")?;
    let began = Instant::now();
    create_workload(&client, &args, deployments).await?;
    let created = began.elapsed();
    let (pods_created, caught_up) = loop {
        if watched.is_finished() {
            let (pods_at, postures_at) = watched.await??;
            break (
                pods_at.saturating_duration_since(began),
                postures_at.saturating_duration_since(began),
            );
        }
        if operator.has_exited() {
            bail!(
                "the operator exited; its log ends with:\n{}",
                tail(&operator.output(), 40)
            );
        }
        if began.elapsed() > args.timeout {
            watched.abort();
            bail!(
                "after {:?} the postures do not count all {pods} pods",
                args.timeout
            );
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
    // The reads are timed at rest: kube-scheduler and kwok go on binding and starting pods
    // long after the last is created, and each change recomputes the posture. kwok's status
    // writes for pods it has not started yet also keep kube-apiserver busy on these 2 cores
    // after the posture no longer changes, so the reads wait for them too.
    let began = Instant::now();
    match all_running(&client).await? {
        true => step(format!(
            "kwok ran every pod {:.1} s after catching up",
            began.elapsed().as_secs_f64()
        )),
        false => step(format!(
            "pods still not running {} s after catching up; timing the reads anyway",
            SETTLE_LIMIT.as_secs()
        )),
    }
    let settled = settle(metrics).await?;
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
    let after = procfs::Sample::read(pid)?;

    let mut profiling = args.apiserver_profile.as_ref().map(|path| {
        // Over the first form's lists, plain JSON; sampling starts with the request.
        let secs = (args.lists as u64 / 10).max(1);
        step(format!(
            "profiling kube-apiserver for {secs} s into {}",
            path.display()
        ));
        crate::profile::start(&client, secs, path.clone())
    });
    let forms = ListForm::ALL;
    let mut timings = Vec::new();
    for form in forms {
        timings.push((
            form,
            "through kube-apiserver",
            time_lists(&client, args.lists, form).await?,
        ));
        if let Some(profiling) = profiling.take() {
            profiling.await.context("the profile task")??;
        }
    }
    // The same lists from the operator itself, as kube-apiserver's front proxy asks: what
    // the aggregation layer adds is the difference.
    let direct = service
        .front_proxy_client(&cp, &certificate.ca_pem)
        .context("a client of the posture server")?;
    for form in forms {
        timings.push((
            form,
            "from the operator directly",
            time_lists(&direct, args.lists, form).await?,
        ));
    }
    let after_lists = procfs::Sample::read(pid)?;
    let computations = Computations::scrape(metrics).await?;

    let per_thousand = (mib(after.rss_kib) - mib(before.rss_kib)) / (pods as f64 / 1000.0);
    println!(
        "posture API benchmark ({pods} pods, {deployments} workloads, {} namespaces, {nodes} kwok nodes)",
        args.namespaces
    );
    println!(
        "  caught up:   every pod in a posture {:.1} s after the first create; the last pod \
         existed at {:.1} s (kube-controller-manager's pace), so the postures lagged by {:.3} s \
         (both instants from watch events)",
        caught_up.as_secs_f64(),
        pods_created.as_secs_f64(),
        caught_up.saturating_sub(pods_created).as_secs_f64()
    );
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
    Ok(())
}

async fn create_workload(
    client: &Client,
    args: &PostureArgs,
    deployments: usize,
) -> anyhow::Result<()> {
    let namespaces: Vec<String> = (0..args.namespaces)
        .map(|n| format!("posture-bench-{n}"))
        .collect();
    let intents: Api<SecurityIntent> = Api::all(client.clone());
    let intent = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
        "metadata": {"name": "dns-manipulation"},
        "spec": {"intent": {"id": "dnsManipulation", "action": "Block"}}
    });
    intents
        .create(&PostParams::default(), &serde_json::from_value(intent)?)
        .await
        .context("creating the intent")?;
    for ns in &namespaces {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &serde_json::from_value(namespace)?)
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
        let binding = json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
            "metadata": {"name": "dns"},
            "spec": {
                "intents": [{"name": "dns-manipulation"}],
                "selector": {"workloadSelector": {"matchLabels": {"protected": "yes"}}}
            }
        });
        Api::<SecurityIntentBinding>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &serde_json::from_value(binding)?)
            .await
            .with_context(|| format!("creating the binding in {ns}"))?;
    }
    futures::stream::iter(0..deployments)
        .map(|d| {
            let ns = namespaces[d % namespaces.len()].clone();
            let client = client.clone();
            let replicas = args.replicas;
            async move {
                let name = format!("app-{d}");
                let protected = if d % 2 == 0 { "yes" } else { "no" };
                let deployment = json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": name},
                    "spec": {
                        "replicas": replicas,
                        "selector": {"matchLabels": {"app": name}},
                        "template": {
                            "metadata": {"labels": {"app": name, "protected": protected}},
                            "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}
                        }
                    }
                });
                Api::<Deployment>::namespaced(client, &ns)
                    .create(&PostParams::default(), &serde_json::from_value(deployment)?)
                    .await
                    .with_context(|| format!("creating Deployment {ns}/{name}"))
                    .map(drop)
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// How long without a posture computation counts as settled.
const QUIET: Duration = Duration::from_secs(5);
const SETTLE_LIMIT: Duration = Duration::from_secs(600);

/// Waits until the operator has not computed the posture for [`QUIET`]; how long that took,
/// or `None` after [`SETTLE_LIMIT`].
async fn settle(metrics: u16) -> anyhow::Result<Option<Duration>> {
    let began = Instant::now();
    let mut last = (Computations::total(metrics).await?, Instant::now());
    while began.elapsed() < SETTLE_LIMIT {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let count = Computations::total(metrics).await?;
        if count != last.0 {
            last = (count, Instant::now());
        } else if last.1.elapsed() >= QUIET {
            return Ok(Some(last.1.duration_since(began)));
        }
    }
    Ok(None)
}

/// Waits until no pod is in a phase other than Running; false after [`SETTLE_LIMIT`].
async fn all_running(client: &Client) -> anyhow::Result<bool> {
    let pods = Api::<Pod>::all(client.clone());
    let not_running = kube::api::ListParams::default()
        .fields("status.phase!=Running")
        .limit(1);
    let began = Instant::now();
    while began.elapsed() < SETTLE_LIMIT {
        let list = pods
            .list_metadata(&not_running)
            .await
            .context("listing pods not running")?;
        if list.items.is_empty() {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(false)
}

/// The operator's posture computations of one scope so far, from its histogram.
struct Computations {
    /// `all`, or `namespaces` (only those where pods changed).
    scope: &'static str,
    count: u64,
    mean_ms: f64,
    /// The smallest bucket bound that holds them all.
    longest_within_ms: f64,
}

impl Computations {
    /// Those of each scope.
    async fn scrape(port: u16) -> anyhow::Result<[Self; 2]> {
        let (_, body) = nimbus_testenv::http_get(port, "/metrics")
            .await
            .context("reading the operator's /metrics")?;
        anyhow::ensure!(
            body.contains("nimbus_posture_compute_seconds"),
            "nimbus_posture_compute_seconds is not in the operator's /metrics"
        );
        Ok(["all", "namespaces"].map(|scope| Self::parse(&body, scope)))
    }

    fn parse(body: &str, scope: &'static str) -> Self {
        let value = |line: &str| line.rsplit(' ').next()?.parse::<f64>().ok();
        let label = format!("scope=\"{scope}\"");
        let label = label.as_str();
        let series = |suffix: &str| {
            let name = format!("nimbus_posture_compute_seconds_{suffix}");
            body.lines()
                .filter(move |l| l.starts_with(&name) && l.contains(label))
        };
        let count = series("count").find_map(value).unwrap_or_default();
        let sum = series("sum").find_map(value).unwrap_or_default();
        // Buckets are cumulative: the first that counts every computation bounds the longest.
        let longest_within = series("bucket")
            .find(|l| value(l) == Some(count))
            .and_then(|l| {
                l.split("le=\"")
                    .nth(1)?
                    .split('"')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(f64::INFINITY);
        Self {
            scope,
            count: count as u64,
            mean_ms: if count > 0.0 {
                sum / count * 1000.0
            } else {
                0.0
            },
            longest_within_ms: longest_within * 1000.0,
        }
    }

    /// Computations of every scope.
    async fn total(port: u16) -> anyhow::Result<u64> {
        Ok(Self::scrape(port).await?.iter().map(|c| c.count).sum())
    }
}

struct Timing {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    objects: usize,
    mib: f64,
}

/// How a list asks for WorkloadPostures: as JSON or as the Table `kubectl get` asks for, and
/// whether it accepts gzip (kubectl and client-go do; kube-rs without its `gzip` feature not).
#[derive(Clone, Copy)]
struct ListForm {
    table: bool,
    gzip: bool,
}

impl ListForm {
    /// JSON and Table, each without and with gzip.
    const ALL: [Self; 4] = [
        Self {
            table: false,
            gzip: false,
        },
        Self {
            table: false,
            gzip: true,
        },
        Self {
            table: true,
            gzip: false,
        },
        Self {
            table: true,
            gzip: true,
        },
    ];

    fn label(self) -> &'static str {
        match (self.table, self.gzip) {
            (false, false) => "JSON       ",
            (false, true) => "JSON, gzip ",
            (true, false) => "Table      ",
            (true, true) => "Table, gzip",
        }
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Lists every WorkloadPosture `n` times through `client` in `form`; a gzip list is timed until
/// it is decompressed, as a Go client's transport does.
async fn time_lists(client: &Client, n: usize, form: ListForm) -> anyhow::Result<Timing> {
    let path = format!(
        "/apis/{}/{}/workloadpostures",
        posture::GROUP,
        posture::VERSION
    );
    let accept = if form.table {
        "application/json;as=Table;v=v1;g=meta.k8s.io, application/json"
    } else {
        "application/json"
    };
    let mut samples = Vec::with_capacity(n);
    let (mut objects, mut bytes) = (0, 0);
    for _ in 0..n.max(1) {
        // Read by kube-apiserver's front proxy as the user; ignored by kube-apiserver itself,
        // which authenticates the bench by its certificate.
        let mut request = http::Request::get(path.as_str())
            .header(http::header::ACCEPT, accept)
            .header("X-Remote-User", "nimbus-bench")
            .header("X-Remote-Group", "system:masters");
        if form.gzip {
            request = request.header(http::header::ACCEPT_ENCODING, "gzip");
        }
        let started = Instant::now();
        let mut received = Vec::new();
        client
            .request_stream(request.body(Vec::new())?)
            .await
            .context("listing WorkloadPostures")?
            .read_to_end(&mut received)
            .await
            .context("reading the list of WorkloadPostures")?;
        let unzipped;
        let body = if received.starts_with(&GZIP_MAGIC) {
            let mut decompressed = Vec::new();
            flate2::read::GzDecoder::new(&received[..])
                .read_to_end(&mut decompressed)
                .context("decompressing the list")?;
            unzipped = decompressed;
            &unzipped
        } else {
            anyhow::ensure!(
                !form.gzip,
                "a list of {} bytes asked for with gzip came uncompressed",
                received.len()
            );
            &received
        };
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        let value: serde_json::Value = serde_json::from_slice(body)?;
        let field = if form.table { "rows" } else { "items" };
        objects = value[field].as_array().map_or(0, Vec::len);
        bytes = received.len();
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Ok(Timing {
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        objects,
        mib: bytes as f64 / (1024.0 * 1024.0),
    })
}

/// When, as watches see it, the last of `pods` pods existed, and when the Deployments'
/// WorkloadPostures (through kube-apiserver's aggregation layer) first counted them all;
/// `listening` is told once both watches have their initial lists.
async fn watch_catch_up(
    client: Client,
    pods: usize,
    listening: tokio::sync::oneshot::Sender<()>,
) -> anyhow::Result<(Instant, Instant)> {
    use kube::ResourceExt;
    use kube::core::PartialObjectMeta;
    use kube::runtime::{WatchStreamExt, watcher};
    use std::collections::{HashMap, HashSet};
    // Each event is moved once, straight into the match: boxing would only add allocations.
    #[allow(clippy::large_enum_variant)]
    enum Seen {
        Pod(watcher::Event<PartialObjectMeta<Pod>>),
        Posture(watcher::Event<WorkloadPosture>),
    }
    let config = watcher::Config::default;
    let pod_events = watcher(Api::<PartialObjectMeta<Pod>>::all(client.clone()), config())
        .default_backoff()
        .map(|e| e.map(Seen::Pod));
    let posture_events = watcher(Api::<WorkloadPosture>::all(client), config())
        .default_backoff()
        .map(|e| e.map(Seen::Posture));
    let mut events = futures::stream::select(pod_events.boxed(), posture_events.boxed());
    let (mut existing, mut counted) = (HashSet::new(), HashMap::new());
    let (mut pods_at, mut postures_at) = (None, None);
    let (mut initial_lists, mut listening) = (0, Some(listening));
    while let Some(event) = events.next().await {
        let now = Instant::now();
        // A watch error is retried by the watcher (with backoff); its events carry on.
        let Ok(event) = event else { continue };
        match event {
            Seen::Pod(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                existing.insert(p.uid());
            }
            Seen::Pod(watcher::Event::Delete(p)) => {
                existing.remove(&p.uid());
            }
            Seen::Posture(watcher::Event::Apply(w) | watcher::Event::InitApply(w))
                if w.workload.kind == "Deployment" =>
            {
                counted.insert((w.namespace(), w.name_any()), w.workload.pods as usize);
            }
            Seen::Posture(watcher::Event::Delete(w)) => {
                counted.remove(&(w.namespace(), w.name_any()));
            }
            Seen::Pod(watcher::Event::InitDone) | Seen::Posture(watcher::Event::InitDone) => {
                initial_lists += 1;
                if initial_lists == 2 {
                    listening.take().map(|l| l.send(()));
                }
            }
            _ => {}
        }
        if pods_at.is_none() && existing.len() >= pods {
            pods_at = Some(now);
        }
        if postures_at.is_none() && counted.values().sum::<usize>() == pods {
            postures_at = Some(now);
        }
        if let (Some(p), Some(w)) = (pods_at, postures_at) {
            return Ok((p, w));
        }
    }
    bail!("the watches ended")
}
