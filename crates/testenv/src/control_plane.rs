use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_openapi::api::core::v1::{Namespace, Node, NodeStatus, ServiceAccount};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use tracing::instrument::WithSubscriber as _;

use crate::certs::{FRONT_PROXY_CLIENT, Pki};
use crate::process::Processes;
use crate::workdir::LockedDir;
use crate::{Error, binaries, free_port};

/// Attaches every process's output to stderr when set to `1` or `true`.
const LOG_ENV: &str = "NIMBUS_TESTENV_LOG";

/// Whole start-up attempts; only port races (see [`Error::is_port_conflict`]) are retried.
const START_ATTEMPTS: usize = 3;

/// A single probe request may hang while a server is still coming up.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The controllers tests and the operator rely on. Left out on purpose: node-lifecycle (it would
/// taint and evict as soon as kwok misses a heartbeat) and everything that needs cloud, CSI or
/// certificate-signing setup.
const CONTROLLERS: &[&str] = &[
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "daemonset-controller",
    "endpointslice-controller",
    "pod-garbage-collector-controller",
];

/// The annotation kwok is told to manage nodes by; see [`create_fake_node`].
const KWOK_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// How to start a [`ControlPlane`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Also run kube-scheduler and kwok, so that pods get scheduled onto fake nodes created
    /// with [`create_fake_node`] and are reported Running (or Succeeded, for Job pods) without
    /// any container runtime. Pod and node IPs are fake: never connect to them.
    pub fake_nodes: bool,
    /// Where the work directory (certificates, kubeconfig, logs) is created; defaults to the
    /// system temp directory. etcd's data goes to `/dev/shm` when it exists.
    pub base_dir: Option<PathBuf>,
    /// Send the processes' output to stderr instead of `<work dir>/<process>.log`. Also turned
    /// on by the environment variable `NIMBUS_TESTENV_LOG=1`.
    pub attach_output: bool,
    /// Serve kube-apiserver's `/debug/pprof` (for benchmarks that profile it).
    pub profiling: bool,
}

/// A running etcd + kube-apiserver + kube-controller-manager (+ kube-scheduler + kwok).
///
/// Dropping it stops all processes and removes its directories; if it is never dropped, the
/// processes still die with the process that started them (see the crate docs).
pub struct ControlPlane {
    // First field, so that the children stop before their directories are removed. Behind a
    // lock so that a shared control plane's components can be restarted.
    processes: std::sync::Mutex<Processes>,
    config: kube::Config,
    kubeconfig: PathBuf,
    _etcd_dir: Option<LockedDir>,
    work_dir: LockedDir,
}

impl ControlPlane {
    /// Starts a control plane and waits until it is usable: apiserver ready, the `default`
    /// namespace readable, and the `default` ServiceAccount created by the controller manager.
    ///
    /// Finds the binaries through `NIMBUS_CONTROL_PLANE_DIR` or by running
    /// `hack/build-control-plane.sh` (see the crate docs). Once the binaries are built this
    /// takes about 3-7 s on two busy cores, most of it waiting for kube-apiserver.
    pub async fn start(options: Options) -> Result<Self, Error> {
        let started = Instant::now();
        let attach_output = options.attach_output
            || std::env::var(LOG_ENV).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        let fake_nodes = options.fake_nodes;
        let bin_dir = match tokio::task::spawn_blocking(move || binaries::locate(fake_nodes)).await
        {
            Ok(located) => located?,
            Err(join_error) => std::panic::resume_unwind(join_error.into_panic()),
        };

        let base_dir = options.base_dir.unwrap_or_else(std::env::temp_dir);
        let work_dir = LockedDir::create_in(&base_dir)?;
        let shm = Path::new("/dev/shm");
        let etcd_dir = if shm.is_dir() {
            Some(LockedDir::create_in(shm)?)
        } else {
            None
        };
        let pki = Pki::generate(work_dir.path())?;
        let setup = Setup {
            bin_dir,
            work_dir: work_dir.path(),
            etcd_data: etcd_dir
                .as_ref()
                .unwrap_or(&work_dir)
                .path()
                .join("etcd-data"),
            pki: &pki,
            fake_nodes,
            attach_output,
            profiling: options.profiling,
        };

        let mut attempt = 1;
        let (processes, config, kubeconfig) = loop {
            match setup.launch().await {
                Ok(launched) => break launched,
                Err(e) if attempt < START_ATTEMPTS && e.is_port_conflict() => {
                    tracing::warn!(attempt, error = %e, "port race while starting; retrying");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        };
        tracing::info!(
            elapsed = ?started.elapsed(),
            work_dir = %work_dir.path().display(),
            "control plane ready"
        );
        Ok(Self {
            processes: std::sync::Mutex::new(processes),
            config,
            kubeconfig,
            _etcd_dir: etcd_dir,
            work_dir,
        })
    }

    /// An admin (`system:masters`) kubeconfig with embedded certificates, e.g. for
    /// `KUBECONFIG=... kubectl`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The front proxy's client certificate and key (PEM files): what kube-apiserver presents
    /// to aggregated API servers. A test holding them can call such a server as the front
    /// proxy would, bypassing kube-apiserver's own authorization.
    pub fn front_proxy_client(&self) -> (PathBuf, PathBuf) {
        let pki = self.work_dir.path().join("pki");
        (
            pki.join("front-proxy-client.crt"),
            pki.join("front-proxy-client.key"),
        )
    }

    /// The admin client configuration, for building clients with custom settings.
    pub fn config(&self) -> &kube::Config {
        &self.config
    }

    /// A new admin client.
    ///
    /// Each call builds a fresh client because a client is tied to the Tokio runtime it was
    /// created in, and every `#[tokio::test]` has its own runtime.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime.
    pub fn client(&self) -> Result<Client, Error> {
        Client::try_from(self.config.clone()).map_err(|e| Error::kube("building a client", e))
    }

    /// Process ids of all children (etcd, kube-apiserver, kube-controller-manager, and with
    /// [`Options::fake_nodes`] kube-scheduler and kwok).
    pub fn pids(&self) -> Vec<u32> {
        self.lock().pids()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Processes> {
        self.processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Kills one component (`etcd`, `kube-apiserver`, `kube-controller-manager`, ...) with
    /// SIGKILL, starts it again with the same flags and data, and waits until the apiserver is
    /// ready again. For chaos tests: clients see dropped connections and expired watches.
    pub async fn restart(&self, component: &str) -> Result<(), Error> {
        self.lock().restart(component)?;
        let client = self.client()?;
        let started = Instant::now();
        loop {
            let ready = get(&client, "/readyz")
                .with_subscriber(tracing::Dispatch::none())
                .await;
            if ready.is_ok() {
                return Ok(());
            }
            self.lock().check_alive()?;
            if started.elapsed() > crate::process::READY_TIMEOUT {
                return Err(Error::RestartTimeout {
                    component: component.to_owned(),
                    last_error: ready.err().unwrap_or_default(),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The directory holding certificates, the kubeconfig and process logs.
    pub fn work_dir(&self) -> &Path {
        self.work_dir.path()
    }
}

/// Everything one start-up attempt needs; attempts differ only in their ports.
struct Setup<'a> {
    bin_dir: PathBuf,
    work_dir: &'a Path,
    etcd_data: PathBuf,
    pki: &'a Pki,
    fake_nodes: bool,
    attach_output: bool,
    profiling: bool,
}

/// The flags a component serves its health endpoints with: our serving certificate, so probes
/// can verify them against our CA instead of skipping verification.
fn serving_args(pki: &Pki, port: u16) -> [String; 4] {
    [
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", path(&pki.serving_cert_file)),
        format!("--tls-private-key-file={}", path(&pki.serving_key_file)),
    ]
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

impl Setup<'_> {
    /// kube-apiserver's flags, serving on `api_port` (`api_url`) from etcd at `etcd_url`.
    fn apiserver_args(&self, etcd_url: &str, api_port: u16, api_url: &str) -> Vec<String> {
        let pki = self.pki;
        vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={api_port}"),
            // The default would be the address of the default route; the `kubernetes`
            // Service's endpoints may not be loopback, hence no endpoint reconciler. Nothing
            // here routes Service IPs anyway.
            "--advertise-address=127.0.0.1".to_owned(),
            "--endpoint-reconciler-type=none".to_owned(),
            format!("--tls-cert-file={}", path(&pki.serving_cert_file)),
            format!("--tls-private-key-file={}", path(&pki.serving_key_file)),
            format!("--client-ca-file={}", path(&pki.ca_file)),
            // Not AlwaysAllow: that disables anonymous auth, which health probes rely on.
            "--authorization-mode=RBAC".to_owned(),
            // New nodes would get `node.kubernetes.io/not-ready:NoSchedule`, which only the
            // node-lifecycle controller lifts (not run; see CONTROLLERS). Lifting it by hand
            // raced the scheduler: a pod it first found unschedulable on the tainted node
            // could wait minutes for a retry (a fake-node test saw a pod Pending for 60 s).
            "--disable-admission-plugins=TaintNodesByCondition".to_owned(),
            "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
            "--allow-privileged=true".to_owned(),
            format!("--service-account-issuer={api_url}"),
            format!("--service-account-key-file={}", path(&pki.sa_public_file)),
            format!(
                "--service-account-signing-key-file={}",
                path(&pki.sa_private_file)
            ),
            // Aggregation layer, so that APIServices can be tested.
            format!(
                "--requestheader-client-ca-file={}",
                path(&pki.front_proxy_ca_file)
            ),
            format!("--requestheader-allowed-names={FRONT_PROXY_CLIENT}"),
            "--requestheader-username-headers=X-Remote-User".to_owned(),
            "--requestheader-group-headers=X-Remote-Group".to_owned(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_owned(),
            format!(
                "--proxy-client-cert-file={}",
                path(&pki.front_proxy_cert_file)
            ),
            format!(
                "--proxy-client-key-file={}",
                path(&pki.front_proxy_key_file)
            ),
            // No request throttling: benchmarks should measure the operator, not APF.
            "--enable-priority-and-fairness=false".to_owned(),
            "--max-requests-inflight=0".to_owned(),
            "--max-mutating-requests-inflight=0".to_owned(),
            format!("--profiling={}", self.profiling),
        ]
    }

    /// etcd, from an empty data directory; its client URL.
    async fn start_etcd(&self, procs: &mut Processes) -> Result<String, Error> {
        let bin = |name: &str| self.bin_dir.join(name);
        // A failed attempt may have left data behind; etcd must start from an empty directory.
        match std::fs::remove_dir_all(&self.etcd_data) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io("removing", &self.etcd_data, e));
            }
            _ => {}
        }
        let etcd_url = format!("http://127.0.0.1:{}", free_port()?);
        let etcd_peer_url = format!("http://127.0.0.1:{}", free_port()?);
        procs.spawn(
            "etcd",
            &bin("etcd"),
            &[
                format!("--data-dir={}", path(&self.etcd_data)),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={etcd_peer_url}"),
                format!("--initial-advertise-peer-urls={etcd_peer_url}"),
                format!("--initial-cluster=default={etcd_peer_url}"),
                // Test data is disposable; fsync is most of etcd's latency.
                "--unsafe-no-fsync=true".to_owned(),
                "--log-level=warn".to_owned(),
            ],
        )?;
        let etcd = probe_client(&etcd_url, None)?;
        procs
            .wait_ready("etcd", "GET /health", async || get(&etcd, "/health").await)
            .await?;
        Ok(etcd_url)
    }

    /// kube-scheduler, and kwok running the fake nodes' pods.
    async fn start_fake_nodes(
        &self,
        procs: &mut Processes,
        kubeconfig: &Path,
    ) -> Result<(), Error> {
        let bin = |name: &str| self.bin_dir.join(name);
        let pki = self.pki;
        let scheduler_port = free_port()?;
        let mut scheduler_args = vec![
            format!("--kubeconfig={}", path(kubeconfig)),
            "--leader-elect=false".to_owned(),
        ];
        scheduler_args.extend(serving_args(pki, scheduler_port));
        procs.spawn("kube-scheduler", &bin("kube-scheduler"), &scheduler_args)?;
        let scheduler = probe_client(
            &format!("https://127.0.0.1:{scheduler_port}"),
            Some(pki.ca.der()),
        )?;
        procs
            .wait_ready("kube-scheduler", "GET /healthz", async || {
                get(&scheduler, "/healthz").await
            })
            .await?;

        let (key, value) = KWOK_NODE_ANNOTATION;
        let mut kwok_args = vec![
            format!("--kubeconfig={}", path(kubeconfig)),
            "--manage-all-nodes=false".to_owned(),
            format!("--manage-nodes-with-annotation-selector={key}={value}"),
            // Fake addresses that are never dialled (kwok serves no kubelet API unless
            // --server-address or --node-port is set, and neither is).
            "--cidr=10.244.0.0/16".to_owned(),
            "--node-ip=10.243.0.1".to_owned(),
        ];
        for stage in binaries::kwok_stages(&self.bin_dir)? {
            kwok_args.push(format!("--config={}", path(&stage)));
        }
        procs.spawn("kwok", &bin("kwok"), &kwok_args)?;
        Ok(())
    }
}

impl Setup<'_> {
    async fn launch(&self) -> Result<(Processes, kube::Config, PathBuf), Error> {
        let started = Instant::now();
        let bin = |name: &str| self.bin_dir.join(name);
        let pki = self.pki;
        let mut procs = Processes::new(self.work_dir, self.attach_output);

        let etcd_url = self.start_etcd(&mut procs).await?;
        tracing::debug!(elapsed = ?started.elapsed(), "etcd ready");

        let api_port = free_port()?;
        let api_url = format!("https://127.0.0.1:{api_port}");
        procs.spawn(
            "kube-apiserver",
            &bin("kube-apiserver"),
            &self.apiserver_args(&etcd_url, api_port, &api_url),
        )?;
        let kubeconfig = self.work_dir.join("kubeconfig");
        let config = write_kubeconfig(&kubeconfig, &api_url, pki).await?;
        let admin =
            Client::try_from(config.clone()).map_err(|e| Error::kube("building a client", e))?;
        procs
            .wait_ready("kube-apiserver", "GET /readyz", async || {
                get(&admin, "/readyz").await
            })
            .await?;
        tracing::debug!(elapsed = ?started.elapsed(), "kube-apiserver ready");

        let kcm_port = free_port()?;
        let mut kcm_args = vec![
            format!("--kubeconfig={}", path(&kubeconfig)),
            "--leader-elect=false".to_owned(),
            format!("--controllers={}", CONTROLLERS.join(",")),
            // Without this key the token controller silently disables itself.
            format!(
                "--service-account-private-key-file={}",
                path(&pki.sa_private_file)
            ),
            format!("--root-ca-file={}", path(&pki.ca_file)),
            "--kube-api-qps=1000".to_owned(),
            "--kube-api-burst=2000".to_owned(),
        ];
        kcm_args.extend(serving_args(pki, kcm_port));
        procs.spawn(
            "kube-controller-manager",
            &bin("kube-controller-manager"),
            &kcm_args,
        )?;
        let kcm = probe_client(&format!("https://127.0.0.1:{kcm_port}"), Some(pki.ca.der()))?;
        procs
            .wait_ready("kube-controller-manager", "GET /healthz", async || {
                get(&kcm, "/healthz").await
            })
            .await?;

        if self.fake_nodes {
            self.start_fake_nodes(&mut procs, &kubeconfig).await?;
        }

        let namespaces = Api::<Namespace>::all(admin.clone());
        procs
            .wait_ready("kube-apiserver", "GET namespace default", async || {
                namespaces
                    .get("default")
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
            .await?;
        // Created by the serviceaccount controller, so this proves KCM is talking to the
        // apiserver and running its controllers, not merely serving /healthz.
        let service_accounts = Api::<ServiceAccount>::namespaced(admin.clone(), "default");
        procs
            .wait_ready(
                "kube-controller-manager",
                "ServiceAccount default/default",
                async || match service_accounts.get_opt("default").await {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => Err("not created yet".to_owned()),
                    Err(e) => Err(e.to_string()),
                },
            )
            .await?;
        procs.check_alive()?;
        Ok((procs, config, kubeconfig))
    }
}

fn probe_client(url: &str, root_cert: Option<Vec<u8>>) -> Result<Client, Error> {
    let mut config = kube::Config::new(
        url.parse()
            .expect("a loopback URL with a numeric port is a valid URI"),
    );
    config.root_cert = root_cert.map(|der| vec![der]);
    config.connect_timeout = Some(PROBE_TIMEOUT);
    config.read_timeout = Some(PROBE_TIMEOUT);
    Client::try_from(config).map_err(|e| Error::kube(format!("building a client for {url}"), e))
}

/// GETs `path`, treating anything but a 2xx answer as not ready.
async fn get(client: &Client, path: &str) -> Result<(), String> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(PROBE_TIMEOUT, client.request_text(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// Writes an admin kubeconfig with embedded credentials and loads it back, so that the file
/// handed to users is exactly what our own clients are built from.
async fn write_kubeconfig(path: &Path, server: &str, pki: &Pki) -> Result<kube::Config, Error> {
    let yaml = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: nimbus-testenv
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: nimbus-testenv
  context:
    cluster: nimbus-testenv
    user: admin
    namespace: default
current-context: nimbus-testenv
",
        ca = BASE64.encode(pki.ca.pem()),
        cert = BASE64.encode(&pki.admin_cert_pem),
        key = BASE64.encode(&pki.admin_key_pem),
    );
    std::fs::write(path, &yaml).map_err(|e| Error::io("writing", path, e))?;
    let kubeconfig_error = |source| Error::Kubeconfig {
        path: path.to_owned(),
        source,
    };
    let kubeconfig = Kubeconfig::from_yaml(&yaml).map_err(kubeconfig_error)?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(kubeconfig_error)
}

/// Creates a Node that kwok (see [`Options::fake_nodes`]) manages: it is marked Ready and its
/// pods are reported Running without running anything. Returns once kwok has marked it Ready.
///
/// The node has no taints, 32 CPUs, 256 GiB of memory and room for 110 pods.
pub async fn create_fake_node(client: &Client, name: &str) -> Result<Node, Error> {
    let (key, value) = KWOK_NODE_ANNOTATION;
    let resources = || {
        [("cpu", "32"), ("memory", "256Gi"), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
            .collect::<BTreeMap<_, _>>()
    };
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".to_owned(), name.to_owned()),
                ("type".to_owned(), "kwok".to_owned()),
            ])),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            allocatable: Some(resources()),
            capacity: Some(resources()),
            ..NodeStatus::default()
        }),
        ..Node::default()
    };
    // Created untainted (the API server runs without the TaintNodesByCondition admission
    // plugin), so the scheduler may use it as soon as it sees it.
    let nodes = Api::<Node>::all(client.clone());
    nodes
        .create(&PostParams::default(), &node)
        .await
        .map_err(|e| Error::kube(format!("creating fake node {name}"), e))?;
    // Only once kwok manages the node does it act on the node's pods: a pod bound to the node
    // before that is passed over and stays Pending. kwok marking the node Ready says it does.
    const WAIT: Duration = Duration::from_secs(60);
    let deadline = Instant::now() + WAIT;
    loop {
        let node = nodes
            .get(name)
            .await
            .map_err(|e| Error::kube(format!("reading fake node {name}"), e))?;
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready {
            return Ok(node);
        }
        if Instant::now() >= deadline {
            return Err(Error::FakeNodeNotReady {
                name: name.to_owned(),
                waited: WAIT,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
