//! Timing the posture API's lists, and watching the postures catch up with the pods.

use anyhow::{Context as _, bail};
use futures::{AsyncReadExt as _, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use nimbus_api::posture::{self, WorkloadPosture};
use std::io::Read as _;
use std::time::Instant;

/// How long lists of one form took.
pub struct Timing {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub objects: usize,
    pub mib: f64,
}

/// How a list asks for WorkloadPostures: as JSON or as the Table `kubectl get` asks for, and
/// whether it accepts gzip (kubectl and client-go do; kube-rs without its `gzip` feature not).
#[derive(Clone, Copy)]
pub struct ListForm {
    table: bool,
    gzip: bool,
}

impl ListForm {
    /// JSON and Table, each without and with gzip.
    pub const ALL: [Self; 4] = [
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

    pub fn label(self) -> &'static str {
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
pub async fn time_lists(client: &Client, n: usize, form: ListForm) -> anyhow::Result<Timing> {
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
pub async fn watch_catch_up(
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
