//! escapeToHost, cocoWorkload and virtualPatch, enforced by the real Kyverno: its admission,
//! background and reports controllers (v1.19.1, built from the Go module pinned in tools/kyverno
//! by hack/build-kyverno.sh) run as processes beside a control plane of their own, the admission
//! controller registered as webhooks the API server calls on 127.0.0.1. Workloads are created
//! through the API server (dry run: nothing is scheduled) in a namespace bound by a
//! SecurityIntentBinding, one bound by a ClusterSecurityIntentBinding, and one nothing binds;
//! the matrices show what Kyverno made of each. In audit and shadow mode the pods are stored
//! (nothing schedules them either), and Kyverno's own PolicyReports, written by its reports
//! controller, say which of them break the policy.

use crate::common::{
    CONVERGE, VIRTUAL_PATCH_DB, built_by, install_engine_crd, install_virtual_patch_db,
};
use crate::matrix::Matrix;
use crate::{Selecting, bind_cluster, bind_namespaced, intent, unbind_cluster};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use nimbus_api::{ClusterSecurityIntentBinding, SecurityIntentBinding};
use nimbus_core::engines::{self, KyvernoApi, KyvernoKinds};
use nimbus_testenv::{
    Child, ControlPlane, Options, Supervised, TestNamespace, apply_yaml, eventually, free_port,
};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Kyverno starts slowly on two busy cores (it syncs informers for ~20 kinds first).
const KYVERNO_START: Duration = Duration::from_secs(180);
const NAMESPACE: &str = "kyverno";
const BACKGROUND_SA: &str = "system:serviceaccount:kyverno:kyverno-background-controller";
const REPORTS_SA: &str = "system:serviceaccount:kyverno:kyverno-reports-controller";

/// What Kyverno needs besides its CRDs (its configuration, and the grants it checks before it
/// accepts a policy with generate or mutate-existing rules).
const SETUP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: kyverno}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: kyverno, namespace: kyverno}
data:
  updateRequestThreshold: "1000"
  webhooks: '{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","kyverno"]}]}}'
  resourceFilters: '[Event,*,*][*/*,kube-system,*][*/*,kube-public,*][*/*,kube-node-lease,*][*/*,kyverno,*][Node,*,*][Node/?*,*,*][APIService,*,*][TokenReview,*,*][SubjectAccessReview,*,*][SelfSubjectAccessReview,*,*][Binding,*,*][Pod/binding,*,*][ReplicaSet,*,*][ReplicaSet/?*,*,*][EphemeralReport,*,*][ClusterEphemeralReport,*,*]'
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kyverno-efficacy}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
  - {kind: ServiceAccount, name: kyverno-admission-controller, namespace: kyverno}
  - {kind: ServiceAccount, name: kyverno-background-controller, namespace: kyverno}
  - {kind: ServiceAccount, name: kyverno-reports-controller, namespace: kyverno}
"#;

pub(crate) struct Kyverno {
    pub(crate) control_plane: ControlPlane,
    /// The admission controller (its webhooks); `probes.rs` stops and restarts it.
    pub(crate) admission: Child,
    /// How the admission controller was started: binary, arguments, environment, directory.
    admission_command: (
        PathBuf,
        Vec<String>,
        Vec<(&'static str, &'static str)>,
        PathBuf,
    ),
    background: Child,
    reports: Child,
}

/// A [`Kyverno`] that every test of the process shares: its controllers are started again when
/// they exit, as their Deployments' pods would be (Kyverno exits on purpose, e.g. when it
/// regains a lease lost under load and its informers do not sync in time).
struct Shared {
    control_plane: ControlPlane,
    controllers: [Supervised; 3],
}

fn shared(api: KyvernoApi) -> &'static OnceLock<Shared> {
    static LEGACY: OnceLock<Shared> = OnceLock::new();
    static CEL: OnceLock<Shared> = OnceLock::new();
    match api {
        KyvernoApi::Legacy => &LEGACY,
        KyvernoApi::Cel => &CEL,
    }
}

/// How many times the shared Kyverno of `api` was started again. Kyverno's webhooks answer
/// before its policies are loaded again (its readiness checks only its certificates), so what it
/// answered around a restart is no verdict.
pub(crate) fn restarts(api: KyvernoApi) -> u64 {
    shared(api).get().map_or(0, |shared| {
        shared.controllers.iter().map(Supervised::restarts).sum()
    })
}

/// The control plane with Kyverno and the operator running on it, writing Kyverno policies in
/// `api` (each started once per process).
pub(crate) fn cluster(api: KyvernoApi) -> &'static ControlPlane {
    let kyverno = shared(api).get_or_init(|| {
        std::thread::spawn(move || {
            let kyverno = tokio::runtime::Runtime::new()
                .expect("runtime")
                .block_on(stack());
            let kinds = match api {
                KyvernoApi::Legacy => KyvernoKinds::Legacy,
                KyvernoApi::Cel => KyvernoKinds::Cel,
            };
            // Runs for the rest of the process.
            drop(operator(
                &kyverno.control_plane,
                kinds,
                CancellationToken::new(),
            ));
            Shared {
                control_plane: kyverno.control_plane,
                controllers: [
                    kyverno.admission.supervise(),
                    kyverno.background.supervise(),
                    kyverno.reports.supervise(),
                ],
            }
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    &kyverno.control_plane
}

/// A control plane of its own with Kyverno running on it (and the engines' CRDs), no operator.
pub(crate) async fn stack() -> Kyverno {
    let bin = kyverno_dir();
    let control_plane = ControlPlane::start(Options::default())
        .await
        .expect("control plane");
    let client = control_plane.client().expect("client");
    let nimbus = nimbus_api::crds_yaml().expect("Nimbus CRDs");
    apply_yaml(&client, &nimbus).await.expect("Nimbus CRDs");
    for crd in yaml_files(&bin.join("crds")) {
        let yaml = std::fs::read_to_string(&crd).expect("Kyverno CRD");
        apply_yaml(&client, &yaml)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", crd.display()));
    }
    apply_yaml(&client, SETUP).await.expect("Kyverno's setup");
    // What virtualPatch generates includes KubeArmorPolicies, from the test database.
    install_engine_crd(&client, nimbus_testenv::upstream::KUBEARMOR_POLICY).await;
    install_virtual_patch_db(&client).await;

    let dir = control_plane.work_dir().to_owned();
    let admin = control_plane.kubeconfig_path().to_owned();
    let background = impersonating(&admin, BACKGROUND_SA, &dir.join("background.kubeconfig"));
    let reports = impersonating(&admin, REPORTS_SA, &dir.join("reports.kubeconfig"));
    let port = free_port().expect("port");
    let common = |kubeconfig: &Path| -> Vec<String> {
        [
            format!("--kubeconfig={}", kubeconfig.display()),
            "--disableMetrics=true".into(),
            "--otelConfig=grpc".into(),
            // Renewing a lease may take 5 retry periods: on two loaded cores 5 s (1 s periods)
            // was once too short, and Kyverno exits when it leads again and its informers do not
            // sync in time (cmd/kyverno/main.go). Kubernetes' own components allow 10 s.
            "--leaderElectionRetryPeriod=3s".into(),
            "--loggingFormat=text".into(),
            "--autoMemLimitEnabled=false".into(),
            // What SecurityIntentExceptions become (tests/efficacy/exceptions.rs), in the
            // excepted workloads' namespaces.
            "--enablePolicyException=true".into(),
            "--exceptionNamespace=*".into(),
        ]
        .into()
    };
    // The reports controller has no controller-runtime metrics server, nor this flag.
    let no_runtime_metrics = || "--controllerRuntimeMetricsAddress=0".to_owned();
    let mut admission_args = common(&admin);
    admission_args.extend([
        no_runtime_metrics(),
        format!("--serverIP=127.0.0.1:{port}"),
        "--webhookServerHost=127.0.0.1".into(),
        format!("--webhookServerPort={port}"),
        "--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca".into(),
        "--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair".into(),
        // Reports come from the reports controller's background scans alone: one scan of a pod
        // evaluates every policy of its namespace at once (admission writes audit and enforce
        // results apart), which is what lets a report say a policy has no result for a pod.
        "--admissionReports=false".into(),
        format!("--backgroundServiceAccountName={BACKGROUND_SA}"),
        format!("--reportsServiceAccountName={REPORTS_SA}"),
    ]);
    let env = |pod: &'static str, account: &'static str| {
        [
            ("KYVERNO_NAMESPACE", OsStr::new(NAMESPACE)),
            ("KYVERNO_SERVICEACCOUNT_NAME", OsStr::new(account)),
            ("KYVERNO_DEPLOYMENT", OsStr::new("kyverno")),
            ("KYVERNO_POD_NAME", OsStr::new(pod)),
            ("INIT_CONFIG", OsStr::new("kyverno")),
            ("METRICS_CONFIG", OsStr::new("kyverno-metrics")),
        ]
    };
    let admission_env = env("kyverno-0", "kyverno-admission-controller")
        .map(|(k, v)| (k, v.to_str().expect("ASCII")))
        .to_vec();
    let admission_command = (
        bin.join("kyverno"),
        admission_args,
        admission_env,
        dir.clone(),
    );
    let admission = spawn_admission(&admission_command);
    let background = Child::spawn(
        "kyverno-background",
        &bin.join("background-controller"),
        &[common(&background), vec![no_runtime_metrics()]].concat(),
        &env("kyverno-background-0", "kyverno-background-controller"),
        &dir,
    )
    .expect("starting Kyverno's background controller");
    // Scans what the policies with `background: true` match and aggregates the results into
    // PolicyReports (wgpolicyk8s.io/v1alpha2, crds/policyreport: openreports.io only with
    // --openreportsEnabled). A pod is scanned 30 s after it appears and its report written
    // 10 s after the scan (constants of v1.19.1, no flag shortens them); the rescan interval
    // (--backgroundScanInterval, 1 h) plays no part in the tests.
    let mut reports_args = common(&reports);
    reports_args.push("--admissionReports=false".into());
    let reports = Child::spawn(
        "kyverno-reports",
        &bin.join("reports-controller"),
        &reports_args,
        &env("kyverno-reports-0", "kyverno-reports-controller"),
        &dir,
    )
    .expect("starting Kyverno's reports controller");

    // Ready: its policy webhook is registered at our port, and the background controller leads.
    let webhooks = dynamic(
        &client,
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    );
    let url = format!("https://127.0.0.1:{port}/policyvalidate");
    eventually("Kyverno's webhooks", KYVERNO_START, async |seen| {
        let cfg = webhooks
            .get_opt("kyverno-policy-validating-webhook-cfg")
            .await
            .ok()??;
        *seen = format!("{}", cfg.data["webhooks"]);
        (cfg.data["webhooks"][0]["clientConfig"]["url"] == url.as_str()).then_some(())
    })
    .await;
    let leases =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), NAMESPACE);
    for (lease, holder, child) in [
        (
            "kyverno-background-controller",
            "kyverno-background-0",
            &background,
        ),
        ("kyverno-reports-controller", "kyverno-reports-0", &reports),
    ] {
        eventually(&format!("{lease} to lead"), KYVERNO_START, async |seen| {
            // On a timeout, the controller's last words say why it does not lead.
            let output = child.output();
            let tail: Vec<&str> = output.lines().rev().take(5).collect();
            *seen = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
            let lease = leases.get_opt(lease).await.ok()??;
            (lease.spec?.holder_identity? == holder).then_some(())
        })
        .await;
    }

    Kyverno {
        control_plane,
        admission,
        admission_command,
        background,
        reports,
    }
}

impl Kyverno {
    /// Starts the admission controller again, as [`stack`] first did (after a kill).
    pub(crate) fn restart_admission(&mut self) {
        self.admission = spawn_admission(&self.admission_command);
    }
}

#[allow(clippy::type_complexity)]
fn spawn_admission(
    (binary, args, env, dir): &(
        PathBuf,
        Vec<String>,
        Vec<(&'static str, &'static str)>,
        PathBuf,
    ),
) -> Child {
    let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, OsStr::new(*v))).collect();
    Child::spawn("kyverno", binary, args, &env, dir).expect("starting Kyverno")
}

/// Whether an API server's refusal says Kyverno's webhook did not answer (`Some` of the message),
/// rather than what Kyverno decided: a shared Kyverno being started again by its supervisor.
pub(crate) fn unreachable(message: &str) -> Option<String> {
    message
        .contains("failed calling webhook")
        .then(|| message.to_owned())
}

/// `request`'s answer once a webhook answered it: sent again, for as long as Kyverno may take
/// to start, while it returns `Err` (the webhook unreachable). A loop, not `eventually`: its
/// async closure would make the futures of callers running in spawned tasks not `Send`.
pub(crate) async fn answered<T, F>(mut request: impl FnMut() -> F) -> T
where
    F: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + KYVERNO_START;
    loop {
        match request().await {
            Ok(answer) => return answer,
            Err(unreachable) if tokio::time::Instant::now() >= deadline => {
                panic!("Kyverno's webhooks did not answer in {KYVERNO_START:?}: {unreachable}")
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Runs the operator on `control_plane`, writing Kyverno policies in `kinds`, in a thread of its
/// own until `shutdown`.
fn operator(
    control_plane: &ControlPlane,
    kinds: KyvernoKinds,
    shutdown: CancellationToken,
) -> std::thread::JoinHandle<()> {
    // The posture computes the bindings' previews from Kyverno's reports; nothing reads its
    // API here, so it is not registered with kube-apiserver.
    let dir = control_plane.work_dir().to_owned();
    let cert = nimbus_testenv::serving_cert(&[]).expect("serving certificate");
    let (cert_file, key_file) = (dir.join("posture.crt"), dir.join("posture.key"));
    std::fs::write(&cert_file, &cert.cert_pem).expect("posture.crt");
    std::fs::write(&key_file, &cert.key_pem).expect("posture.key");
    let posture = nimbus_operator::posture::Config {
        addr: ([127, 0, 0, 1], free_port().expect("port")).into(),
        certificate: nimbus_operator::posture::ServingCertificate {
            cert_file,
            key_file,
        },
        reports: Default::default(),
    };
    let config = control_plane.config().clone();
    // `NIMBUS_TEST_LOG=warn,nimbus_operator=debug` shows what the operator did.
    if let Ok(filter) = std::env::var("NIMBUS_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("operator runtime");
        runtime.block_on(async move {
            let client = Client::try_from(config).expect("operator client");
            let (ns, name) = VIRTUAL_PATCH_DB;
            let config = nimbus_operator::Config {
                virtual_patch_db: Some((ns.into(), name.into())),
                kyverno_kinds: kinds,
                posture: Some(posture),
                ..Default::default()
            };
            let result = nimbus_operator::run(client, config, shutdown).await;
            if let Err(e) = result {
                panic!("operator failed: {e}");
            }
        });
    })
}

/// Where hack/build-kyverno.sh put Kyverno (building it on first use).
fn kyverno_dir() -> PathBuf {
    built_by("hack/build-kyverno.sh").unwrap_or_else(|e| panic!("Kyverno is needed: {e}"))
}

/// Every `*.yaml` under `dir` that holds a CustomResourceDefinition.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("Kyverno's CRDs").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(yaml_files(&path));
        } else if path.extension().is_some_and(|e| e == "yaml")
            && std::fs::read_to_string(&path)
                .is_ok_and(|t| t.contains("kind: CustomResourceDefinition"))
        {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// A copy of the admin kubeconfig at `to` whose user acts as `user`.
fn impersonating(admin: &Path, user: &str, to: &Path) -> PathBuf {
    let text = std::fs::read_to_string(admin).expect("admin kubeconfig");
    let mut config: Value = serde_yaml_ng::from_str(&text).expect("kubeconfig YAML");
    for u in config["users"].as_array_mut().expect("users") {
        u["user"]["as"] = json!(user);
    }
    std::fs::write(to, serde_yaml_ng::to_string(&config).expect("YAML")).expect("kubeconfig");
    to.to_owned()
}

fn dynamic(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::all_with(client.clone(), &resource)
}

pub(crate) async fn namespace(cp: &ControlPlane, prefix: &str) -> TestNamespace {
    let ns = cp.test_namespace(prefix).await.expect("namespace");
    // Pods are admitted only once the namespace's default ServiceAccount exists.
    let accounts = Api::<ServiceAccount>::namespaced(cp.client().expect("client"), ns.name());
    eventually("the default ServiceAccount", CONVERGE, async |_| {
        accounts.get_opt("default").await.ok()?.map(drop)
    })
    .await;
    ns
}

/// Waits until every Kyverno policy in `namespaces` (and every cluster-wide one), of the legacy
/// and the CEL kinds, is Ready: Kyverno enforces a policy only from then on.
pub(crate) async fn kyverno_policies_ready(client: &Client, namespaces: &[&str]) {
    eventually("the Kyverno policies to be Ready", CONVERGE, async |seen| {
        let mut all = Vec::new();
        // Its policies (its PolicyExceptions have no status).
        for kind in engines::Engine::Kyverno
            .spec()
            .kinds
            .iter()
            .filter(|k| k.listed)
        {
            let resource = kind.api_resource();
            let apis = if kind.namespaced {
                namespaces
                    .iter()
                    .map(|ns| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource))
                    .collect()
            } else {
                vec![Api::<DynamicObject>::all_with(client.clone(), &resource)]
            };
            for api in apis {
                all.extend(api.list(&ListParams::default()).await.ok()?.items);
            }
        }
        // Legacy kinds say so in a Ready condition, the CEL kinds in `conditionStatus`.
        let pending: Vec<String> = all
            .iter()
            .filter(|p| {
                let status = &p.data["status"];
                status["conditionStatus"]["ready"] != true
                    && !status["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
            })
            .map(|p| format!("{:?}/{:?}", p.metadata.namespace, p.metadata.name))
            .collect();
        *seen = format!("not ready: {pending:?}");
        (!all.is_empty() && pending.is_empty()).then_some(())
    })
    .await;
}

/// A bound setup: the intent bound by a SecurityIntentBinding in one namespace, by a
/// ClusterSecurityIntentBinding in another, and a third namespace unbound.
struct Bound {
    client: Client,
    by_sib: TestNamespace,
    by_csib: TestNamespace,
    unbound: TestNamespace,
    csib: String,
}

async fn bound(api: KyvernoApi, id: &str, action: &str, params: Value) -> Bound {
    let mut b = Bound::namespaces(api).await;
    b.bind(id, action, params).await;
    b
}

impl Bound {
    /// The three namespaces, nothing bound yet.
    async fn namespaces(api: KyvernoApi) -> Bound {
        let cp = cluster(api);
        Bound {
            client: cp.client().expect("client"),
            by_sib: namespace(cp, "eff-kyv-sib").await,
            by_csib: namespace(cp, "eff-kyv-csib").await,
            unbound: namespace(cp, "eff-kyv-unbound").await,
            csib: String::new(),
        }
    }

    /// Binds the intent through both kinds of binding; returns once Kyverno enforces it.
    async fn bind(&mut self, id: &str, action: &str, params: Value) {
        let si = intent(&self.client, id, action, params).await;
        let selecting = Selecting {
            labels: json!({"app": "web"}),
            allow_sensitive: None,
            shadow: false,
        };
        bind_namespaced(&self.client, self.by_sib.name(), &si, &selecting).await;
        self.csib = bind_cluster(&self.client, self.by_csib.name(), &si, &selecting).await;
        kyverno_policies_ready(&self.client, &[self.by_sib.name(), self.by_csib.name()]).await;
    }

    /// `(column, namespace, app label)` of the workloads tried.
    fn subjects(&self) -> [(&'static str, &str, &'static str); 5] {
        [
            ("selected, SecurityIntentBinding", self.by_sib.name(), "web"),
            (
                "unselected, SecurityIntentBinding",
                self.by_sib.name(),
                "db",
            ),
            (
                "selected, ClusterSecurityIntentBinding",
                self.by_csib.name(),
                "web",
            ),
            (
                "unselected, ClusterSecurityIntentBinding",
                self.by_csib.name(),
                "db",
            ),
            ("in an unbound namespace", self.unbound.name(), "web"),
        ]
    }

    async fn done(self) {
        unbind_cluster(&self.client, &self.csib).await;
    }
}

/// A pod spec to try, by name.
pub(crate) type PodCase = (&'static str, fn() -> Value);

/// Pod specs, from most to least privileged.
pub(crate) const PODS: &[PodCase] = &[
    (
        "privileged container",
        || json!({"containers": [container(json!({"privileged": true}))]}),
    ),
    ("hostPath volume", || {
        json!({"containers": [container(json!({}))],
        "volumes": [{"name": "host", "hostPath": {"path": "/etc"}}]})
    }),
    (
        "hostNetwork",
        || json!({"hostNetwork": true, "containers": [container(json!({}))]}),
    ),
    (
        "runs as root, no seccomp profile (baseline)",
        || json!({"containers": [container(json!({}))]}),
    ),
    ("restricted", || {
        json!({"containers": [container(json!({
        "runAsNonRoot": true, "runAsUser": 1000, "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}))]})
    }),
];

pub(crate) fn container(security_context: Value) -> Value {
    // Never pulled: nothing runs the pod.
    json!({"name": "app", "image": "registry.invalid/app:1", "securityContext": security_context})
}

/// `admitted`, or `denied (<Pod Security reason>)` with the reason from Kyverno's message
/// (dry run: the pod is not stored).
async fn admission(client: &Client, ns: &str, app: &str, spec: Value) -> String {
    match try_create_pod(client, ns, app, spec, true).await {
        Ok(_) => "admitted".to_owned(),
        Err(denied) => denied,
    }
}

/// Creates a pod (`dry_run`: only admission sees it); returns it as stored, or the cell
/// `denied (<Pod Security reason>)` when Kyverno refused it (by a legacy or a CEL policy).
async fn try_create_pod(
    client: &Client,
    ns: &str,
    app: &str,
    spec: Value,
    dry_run: bool,
) -> Result<Pod, String> {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "eff-", "labels": {"app": app}},
        "spec": spec,
    }))
    .expect("pod");
    let params = PostParams {
        dry_run,
        ..Default::default()
    };
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let created = answered(|| async {
        match pods.create(&params, &pod).await {
            Err(kube::Error::Api(e)) => match unreachable(&e.message) {
                Some(unreachable) => Err(unreachable),
                None => Ok(Err(kube::Error::Api(e))),
            },
            other => Ok(other),
        }
    })
    .await;
    match created {
        Ok(pod) => Ok(pod),
        Err(kube::Error::Api(e)) if e.message.contains("blocked due to the following policies") => {
            let reason = e
                .message
                .split("(Forbidden reason: ")
                .nth(1)
                .and_then(|r| r.split(", field error list").next())
                .unwrap_or(&e.message);
            Err(format!("denied ({reason})"))
        }
        // A CEL policy's refusal: the message of the first check the pod fails.
        Err(kube::Error::Api(e)) if e.message.contains("denied the request: Policy ") => {
            let reason = e.message.split(" failed: ").nth(1).unwrap_or(&e.message);
            Err(format!("denied ({})", reason.trim_end_matches([':', ' '])))
        }
        Err(e) => panic!("creating a pod in {ns}: {e}"),
    }
}

/// Whether Kyverno's Pod Security check at `level` forbids `pod`: a selected pod is denied
/// under Block, and reported failing under Audit; pods the binding does not select are not
/// checked.
fn forbidden(level: &str, pod: &str) -> bool {
    match pod {
        "restricted" => false,
        "runs as root, no seccomp profile (baseline)" => level == "restricted",
        _ => true,
    }
}

/// How the matrices name the kinds Kyverno enforces.
fn kinds(api: KyvernoApi) -> &'static str {
    match api {
        KyvernoApi::Legacy => "legacy Policy and ClusterPolicy kinds",
        KyvernoApi::Cel => "CEL policy kinds",
    }
}

/// escapeToHost at `level` with action Block, by admission (dry run); the matrix `id`.
async fn escape_to_host(api: KyvernoApi, id: &str, level: &'static str) {
    let b = bound(api, "escapeToHost", "Block", json!({"psaLevel": [level]})).await;
    let subjects = b.subjects();
    let mut rows = Vec::new();
    let mut expected = Vec::new();
    for (name, spec) in PODS {
        let mut cells = Vec::new();
        let mut promised = Vec::new();
        for (_, ns, app) in &subjects {
            cells.push(admission(&b.client, ns, app, spec()).await);
            let selected = *app == "web" && *ns != b.unbound.name();
            let promise = if selected && forbidden(level, name) {
                "denied"
            } else {
                "admitted"
            };
            promised.push(promise.to_owned());
        }
        rows.push(((*name).to_owned(), cells));
        expected.push(((*name).to_owned(), promised));
    }
    let matrix = Matrix {
        id: id.into(),
        title: format!(
            "escapeToHost psaLevel={level}, action Block (Kyverno v1.19.1 admission controller, {})",
            kinds(api)
        ),
        case_header: "pod",
        subjects: subjects.iter().map(|(s, ..)| (*s).to_owned()).collect(),
        rows,
        expected,
    };
    b.done().await;
    matrix.assert();
}

#[tokio::test]
async fn escape_to_host_baseline_denies_privileged_pods_where_bound() {
    escape_to_host(
        KyvernoApi::Legacy,
        "kyverno-escapeToHost-baseline",
        "baseline",
    )
    .await;
}

#[tokio::test]
async fn escape_to_host_restricted_denies_root_pods_where_bound() {
    escape_to_host(
        KyvernoApi::Legacy,
        "kyverno-escapeToHost-restricted",
        "restricted",
    )
    .await;
}

#[tokio::test]
async fn escape_to_host_baseline_in_cel_kinds_denies_privileged_pods_where_bound() {
    escape_to_host(
        KyvernoApi::Cel,
        "kyverno-cel-escapeToHost-baseline",
        "baseline",
    )
    .await;
}

#[tokio::test]
async fn escape_to_host_restricted_in_cel_kinds_denies_root_pods_where_bound() {
    escape_to_host(
        KyvernoApi::Cel,
        "kyverno-cel-escapeToHost-restricted",
        "restricted",
    )
    .await;
}

/// How long Kyverno takes to report on a new pod: the reports controller scans a pod 30 s after
/// it appears and aggregates the scan into its PolicyReport 10 s later (v1.19.1's constants; a
/// new or changed policy rescans at once). Measured: 40 s; the rest is for two busy cores.
pub(crate) const REPORTED: Duration = Duration::from_secs(90);

/// The policy every pod passes, in each namespace of the report matrix. A pod's report holds
/// its result once Kyverno has scanned the pod, and one scan evaluates every policy of the
/// pod's namespace: a report with this result and none of Nimbus's policy means Kyverno found
/// nothing to say, not that it has not looked yet.
const SENTINEL: &str = "report-sentinel";

async fn install_sentinel(client: &Client, ns: &str) {
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kyverno.io/v1", "kind": "Policy",
        "metadata": {"name": SENTINEL, "namespace": ns},
        "spec": {
            "validationFailureAction": "Audit",
            "background": true,
            "rules": [{
                "name": "every-pod-passes",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"message": "a pod has a name", "pattern": {"metadata": {"name": "?*"}}},
            }],
        },
    }))
    .expect("sentinel policy");
    Api::<DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &engines::KYVERNO_POLICY.api_resource(),
    )
    .create(&PostParams::default(), &policy)
    .await
    .unwrap_or_else(|e| panic!("creating the sentinel policy in {ns}: {e}"));
}

/// What the PolicyReports of `ns` say about each pod scanned so far (by pod UID): the results
/// of every policy but the sentinel, `none` when there are none.
async fn reported(client: &Client, ns: &str) -> HashMap<String, String> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("wgpolicyk8s.io", "v1alpha2", "PolicyReport"),
        "policyreports",
    );
    let reports = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource)
        .list(&ListParams::default())
        .await
        .expect("listing PolicyReports");
    let sentinel = format!("{ns}/{SENTINEL}");
    let mut out = HashMap::new();
    for report in reports.items {
        let results = report.data["results"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !results.iter().any(|r| r["policy"] == sentinel.as_str()) {
            continue;
        }
        // Nimbus's policy is the only other one whose scope can include the pod (a `Policy` of
        // its namespace or the `ClusterPolicy` of a cluster binding selecting it).
        let verdicts: BTreeSet<&str> = results
            .iter()
            .filter(|r| r["policy"] != sentinel.as_str())
            .filter_map(|r| r["result"].as_str())
            .collect();
        let verdict = if verdicts.is_empty() {
            "none".to_owned()
        } else {
            verdicts.into_iter().collect::<Vec<_>>().join(", ")
        };
        if let Some(uid) = report.data["scope"]["uid"].as_str() {
            out.insert(uid.to_owned(), verdict);
        }
    }
    out
}

/// How a namespace of the report matrix is bound.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Audit,
    Shadow,
    Block,
    Unbound,
}

/// What a pod gets under escapeToHost psaLevel=baseline: in audit and shadow every selected pod
/// is admitted and Kyverno's report says whether it breaks the level; an enforcing binding
/// denies the pods that break it; Nimbus's policy says nothing about the pods it does not
/// select.
fn reported_promise(mode: Mode, selected: bool, pod: &str) -> String {
    let violates = forbidden("baseline", pod);
    match (mode, selected && mode != Mode::Unbound, violates) {
        (_, false, _) => "admitted, report: none",
        (Mode::Block, true, true) => "denied",
        (_, true, true) => "admitted, report: fail",
        (_, true, false) => "admitted, report: pass",
    }
    .to_owned()
}

/// escapeToHost in audit (a SecurityIntentBinding and a ClusterSecurityIntentBinding of an
/// `action: Audit` intent) and in shadow (a binding of an `action: Block` intent labelled
/// shadow), beside the same Block intent enforcing and a namespace nothing binds. Pods are
/// created for real and the cell is what Kyverno did at admission, then what its own
/// PolicyReport (from the reports controller's background scan) says of the pod for Nimbus's
/// policy.
#[tokio::test]
async fn escape_to_host_audit_and_shadow_admit_and_report() {
    escape_to_host_audit_and_shadow(KyvernoApi::Legacy, "kyverno-escapeToHost-audit").await;
}

#[tokio::test]
async fn escape_to_host_in_cel_kinds_audit_and_shadow_admit_and_report() {
    escape_to_host_audit_and_shadow(KyvernoApi::Cel, "kyverno-cel-escapeToHost-audit").await;
}

async fn escape_to_host_audit_and_shadow(api: KyvernoApi, id: &str) {
    let cp = cluster(api);
    let client = cp.client().expect("client");
    let params = json!({"psaLevel": ["baseline"]});
    let audit = intent(&client, "escapeToHost", "Audit", params.clone()).await;
    let block = intent(&client, "escapeToHost", "Block", params).await;
    let selecting = |shadow| Selecting {
        labels: json!({"app": "web"}),
        allow_sensitive: None,
        shadow,
    };
    let by_sib = namespace(cp, "eff-kyv-audit").await;
    let by_csib = namespace(cp, "eff-kyv-audit-csib").await;
    let shadowed = namespace(cp, "eff-kyv-shadow").await;
    let enforced = namespace(cp, "eff-kyv-block").await;
    let unbound = namespace(cp, "eff-kyv-unbound").await;
    let sib = bind_namespaced(&client, by_sib.name(), &audit, &selecting(false)).await;
    let csib = bind_cluster(&client, by_csib.name(), &audit, &selecting(false)).await;
    let shadow = bind_namespaced(&client, shadowed.name(), &block, &selecting(true)).await;
    drop(bind_namespaced(&client, enforced.name(), &block, &selecting(false)).await);
    let all = [&by_sib, &by_csib, &shadowed, &enforced, &unbound].map(|ns| ns.name());
    for ns in all {
        install_sentinel(&client, ns).await;
    }
    kyverno_policies_ready(&client, &all).await;

    // (column, mode, namespace, app label)
    let subjects = [
        (
            "selected, SecurityIntentBinding, action Audit",
            Mode::Audit,
            by_sib.name(),
            "web",
        ),
        (
            "unselected, SecurityIntentBinding, action Audit",
            Mode::Audit,
            by_sib.name(),
            "db",
        ),
        (
            "selected, ClusterSecurityIntentBinding, action Audit",
            Mode::Audit,
            by_csib.name(),
            "web",
        ),
        (
            "selected, SecurityIntentBinding in shadow mode, action Block",
            Mode::Shadow,
            shadowed.name(),
            "web",
        ),
        (
            "unselected, SecurityIntentBinding in shadow mode, action Block",
            Mode::Shadow,
            shadowed.name(),
            "db",
        ),
        (
            "selected, SecurityIntentBinding, action Block",
            Mode::Block,
            enforced.name(),
            "web",
        ),
        (
            "in an unbound namespace",
            Mode::Unbound,
            unbound.name(),
            "web",
        ),
    ];
    // Per row, per subject: the admitted pod's UID and name, or the denial's cell.
    let mut created = Vec::new();
    let mut expected = Vec::new();
    for (name, spec) in PODS {
        let mut cells = Vec::new();
        let mut promised = Vec::new();
        for (_, mode, ns, app) in &subjects {
            let pod = try_create_pod(&client, ns, app, spec(), false).await;
            cells.push(pod.map(|p| (p.metadata.uid.expect("uid"), p.metadata.name.expect("name"))));
            promised.push(reported_promise(*mode, *app == "web", name));
        }
        created.push((*name, cells));
        expected.push(((*name).to_owned(), promised));
    }
    let rows = eventually(
        "Kyverno's reports of the admitted pods",
        REPORTED,
        async |seen| {
            let mut reports = HashMap::new();
            for ns in all {
                reports.extend(reported(&client, ns).await);
            }
            let mut rows = Vec::new();
            let mut pending = Vec::new();
            for (name, cells) in &created {
                let mut row = Vec::new();
                for (cell, (subject, ..)) in cells.iter().zip(&subjects) {
                    row.push(match cell {
                        Err(denied) => denied.clone(),
                        Ok((uid, _)) => match reports.get(uid) {
                            Some(verdict) => format!("admitted, report: {verdict}"),
                            None => {
                                pending.push(format!("{name} / {subject}"));
                                continue;
                            }
                        },
                    });
                }
                rows.push(((*name).to_owned(), row));
            }
            *seen = format!("no report yet of {pending:?}");
            pending.is_empty().then_some(rows)
        },
    )
    .await;
    // What enforcing would refuse, by the preview each audited or shadowed binding shows: the
    // cases whose pods it names are exactly those the enforcing column denies.
    let enforcing = subjects
        .iter()
        .position(|(_, mode, _, app)| *mode == Mode::Block && *app == "web")
        .expect("an enforcing column");
    let denied: BTreeSet<&str> = rows
        .iter()
        .filter(|(_, row)| row[enforcing].starts_with("denied"))
        .map(|(case, _)| case.as_str())
        .collect();
    let case_of = |pod: &str| {
        created
            .iter()
            .find(|(_, cells)| cells.iter().flatten().any(|(_, name)| name == pod))
            .map(|(case, _)| *case)
    };
    let sibs = |ns: &str| Api::<SecurityIntentBinding>::namespaced(client.clone(), ns);
    let csibs = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    for (binding, ns) in [
        (sib.as_str(), by_sib.name()),
        (csib.as_str(), by_csib.name()),
        (shadow.as_str(), shadowed.name()),
    ] {
        let what =
            format!("the preview of binding {binding} to name the pods Kyverno reported failing");
        let previewed = eventually(&what, CONVERGE, async |seen| {
            let preview = if binding == csib {
                csibs.get(binding).await.ok()?.status?.preview?
            } else {
                sibs(ns).get(binding).await.ok()?.status?.preview?
            };
            *seen = format!("{preview:?}");
            let cases: BTreeSet<&str> = preview
                .examples
                .iter()
                .filter_map(|e| e.strip_prefix(&format!("Pod {ns}/"))?.split(':').next())
                .filter_map(case_of)
                .collect();
            (preview.refused as usize == denied.len() && cases.len() == denied.len())
                .then_some(cases)
        })
        .await;
        assert_eq!(previewed, denied, "binding {binding}");
    }
    // Promotion: the shadow mark removed, exactly what the preview named is refused.
    let shadow_api = sibs(shadowed.name());
    shadow_api
        .patch(
            &shadow,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {nimbus_api::MODE_LABEL: null}}})),
        )
        .await
        .expect("promoting the shadowed binding");
    // Kyverno takes a moment to move the policy to its enforcing webhook: until then pods
    // are admitted; what it then refuses must be exactly the preview.
    let what = "the promoted binding to refuse exactly what its preview named";
    eventually(what, CONVERGE, async |seen| {
        let mut refused = BTreeSet::new();
        for (name, spec) in PODS {
            if try_create_pod(&client, shadowed.name(), "web", spec(), true)
                .await
                .is_err()
            {
                refused.insert(*name);
            }
        }
        *seen = format!("refused {refused:?}, previewed {denied:?}");
        (refused == denied).then_some(())
    })
    .await;

    let matrix = Matrix {
        id: id.into(),
        title: format!(
            "escapeToHost psaLevel=baseline in audit and shadow mode (Kyverno v1.19.1 admission and reports controllers, {})",
            kinds(api)
        ),
        case_header: "pod",
        subjects: subjects.iter().map(|(s, ..)| (*s).to_owned()).collect(),
        rows,
        expected,
    };
    unbind_cluster(&client, &csib).await;
    matrix.assert();
}

/// Our Kyverno policies of `kinds` in `namespaces` (of the namespaced kinds) and cluster-wide.
async fn ours(
    client: &Client,
    kinds: &[&'static engines::NativeKind],
    namespaces: &[&str],
) -> Vec<DynamicObject> {
    let params = ListParams::default().labels(&format!("{}=nimbus-kyverno", engines::MANAGED_BY));
    let mut found = Vec::new();
    for kind in kinds {
        let resource = kind.api_resource();
        let apis = if kind.namespaced {
            namespaces
                .iter()
                .map(|ns| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource))
                .collect()
        } else {
            vec![Api::<DynamicObject>::all_with(client.clone(), &resource)]
        };
        for api in apis {
            found.extend(
                api.list(&params)
                    .await
                    .expect("listing Kyverno policies")
                    .items,
            );
        }
    }
    found
}

/// Moving from Kyverno's legacy kinds to its CEL kinds (an operator upgraded, or
/// `--kyverno-kinds` changed) leaves no moment unprotected and nothing behind: the operator
/// writing the legacy kinds stops, one writing the CEL kinds starts, and a privileged pod tried
/// every 100 ms all along, in a namespace bound by a SecurityIntentBinding and in one bound by a
/// ClusterSecurityIntentBinding, is denied every time; once the CEL policies act, no legacy
/// policy of ours remains. virtualPatch, bound in a third namespace, moves too: the patches
/// generated for a pod before the move stay, and a pod created after it gets its own, from the
/// NamespacedGeneratingPolicies that replaced the legacy generators.
#[tokio::test]
async fn moving_to_the_cel_kinds_leaves_no_gap_and_no_legacy_policy() {
    let kyverno = stack().await;
    let cp = &kyverno.control_plane;
    let client = cp.client().expect("client");
    let stop_legacy = CancellationToken::new();
    let legacy = operator(cp, KyvernoKinds::Legacy, stop_legacy.clone());
    let by_sib = namespace(cp, "eff-kyv-move").await;
    let by_csib = namespace(cp, "eff-kyv-move-csib").await;
    let bound = [by_sib.name(), by_csib.name()];
    let si = intent(
        &client,
        "escapeToHost",
        "Block",
        json!({"psaLevel": ["baseline"]}),
    )
    .await;
    let selecting = Selecting {
        labels: json!({"app": "web"}),
        allow_sensitive: None,
        shadow: false,
    };
    bind_namespaced(&client, by_sib.name(), &si, &selecting).await;
    bind_cluster(&client, by_csib.name(), &si, &selecting).await;
    let by_vp = namespace(cp, "eff-kyv-move-vp").await;
    let vp = intent(
        &client,
        "virtualPatch",
        "Block",
        json!({"cveList": ["CVE-2024-4439"]}),
    )
    .await;
    bind_namespaced(&client, by_vp.name(), &vp, &selecting).await;
    let all = [by_sib.name(), by_csib.name(), by_vp.name()];
    kyverno_policies_ready(&client, &all).await;
    let cel_kinds = KyvernoApi::Cel.kinds();
    let generators = [&engines::KYVERNO_NAMESPACED_GENERATING_POLICY];
    // escapeToHost's Policy and ClusterPolicy, and virtualPatch's three generators.
    assert_eq!(
        ours(&client, KyvernoApi::Legacy.kinds(), &all).await.len(),
        5
    );
    assert!(ours(&client, cel_kinds, &all).await.is_empty());
    assert!(ours(&client, &generators, &all).await.is_empty());
    let before = create_pod(&client, by_vp.name(), "web", "nginx:latest").await;
    let patches = virtual_patches(&client, by_vp.name(), &before).await;

    let stop_trying = CancellationToken::new();
    let trying = {
        let (client, stop) = (client.clone(), stop_trying.clone());
        let namespaces = bound.map(str::to_owned);
        let (_, privileged) = PODS[0];
        tokio::spawn(async move {
            let mut tries = Vec::new();
            while !stop.is_cancelled() {
                for ns in &namespaces {
                    tries.push(admission(&client, ns, "web", privileged()).await);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tries
        })
    };
    stop_legacy.cancel();
    tokio::task::spawn_blocking(move || legacy.join())
        .await
        .expect("joining")
        .expect("the legacy operator stopped");
    let stop_cel = CancellationToken::new();
    let cel = operator(cp, KyvernoKinds::Auto, stop_cel.clone());
    eventually(
        "the CEL policies to act and the legacy ones to be gone",
        CONVERGE,
        async |seen| {
            let left = ours(&client, KyvernoApi::Legacy.kinds(), &all).await;
            let mut written = ours(&client, cel_kinds, &all).await;
            written.extend(ours(&client, &generators, &all).await);
            let acting = written
                .iter()
                .filter(|p| p.data["status"]["conditionStatus"]["ready"] == true)
                .count();
            *seen = format!(
                "{} legacy policies left, {acting} of {} CEL policies acting",
                left.len(),
                written.len()
            );
            // Per escapeToHost binding, a policy of pods and one of the ephemeral containers
            // added to them; virtualPatch's three generators.
            (left.is_empty() && written.len() == 7 && acting == 7).then_some(())
        },
    )
    .await;
    // What was generated before stays; a pod created now gets its patches from the CEL kinds.
    assert_eq!(
        virtual_patches(&client, by_vp.name(), &before).await,
        patches
    );
    let after = create_pod(&client, by_vp.name(), "web", "nginx:latest").await;
    virtual_patches(&client, by_vp.name(), &after).await;
    // A few more tries with the CEL policies alone.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_trying.cancel();
    let tries = trying.await.expect("the tries");
    let admitted: Vec<&String> = tries.iter().filter(|t| !t.starts_with("denied")).collect();
    assert!(tries.len() > 20, "only {} tries", tries.len());
    assert!(
        admitted.is_empty(),
        "{} of {} tries admitted a privileged pod: {admitted:?}",
        admitted.len(),
        tries.len()
    );
    stop_cel.cancel();
    tokio::task::spawn_blocking(move || cel.join())
        .await
        .expect("joining")
        .expect("the operator stopped");
}

/// Waits for the patches the test database promises for `pod` (a selected pod running
/// nginx:latest) in `ns`: its KubeArmorPolicy, the NetworkPolicy and the Kyverno Policy; returns
/// their UIDs, which say whether they were generated again.
async fn virtual_patches(client: &Client, ns: &str, pod: &str) -> Vec<String> {
    let patches = [
        (
            engines::KUBEARMOR_POLICY.api_resource(),
            format!("block-pkg-mgmt-tools-exec-{pod}"),
        ),
        (
            engines::NETWORK_POLICY.api_resource(),
            "test-network-policy".to_owned(),
        ),
        (
            engines::KYVERNO_POLICY.api_resource(),
            "disallow-latest-tag".to_owned(),
        ),
    ];
    eventually(
        "the patches of the pod to be generated",
        CONVERGE,
        async |seen| {
            let mut uids = Vec::new();
            let mut missing = Vec::new();
            for (resource, name) in &patches {
                let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, resource);
                match api.get_opt(name).await.ok().flatten() {
                    Some(found) => uids.push(found.metadata.uid.unwrap_or_default()),
                    None => missing.push(format!("{} {name}", resource.kind)),
                }
            }
            *seen = format!("missing: {missing:?}");
            missing.is_empty().then_some(uids)
        },
    )
    .await
}

fn deployment(app: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"generateName": "eff-", "labels": {"app": app}},
        "spec": {"selector": {"matchLabels": {"app": app}},
                 "template": {"metadata": {"labels": {"app": app}},
                              "spec": {"containers": [container(json!({}))]}}},
    }))
    .expect("deployment")
}

/// Creates a Deployment in `ns` (`dry_run`: only admission sees it); returns it as stored.
async fn create_deployment(client: &Client, ns: &str, app: &str, dry_run: bool) -> Deployment {
    let params = PostParams {
        dry_run,
        ..Default::default()
    };
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&params, &deployment(app))
        .await
        .unwrap_or_else(|e| panic!("creating a Deployment in {ns}: {e}"))
}

fn runtime_class(d: &Deployment) -> String {
    match d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.runtime_class_name.as_deref())
    {
        Some(class) => format!("runtimeClassName {class}"),
        None => "unchanged".to_owned(),
    }
}

#[tokio::test]
async fn coco_workload_sets_the_runtime_class_of_selected_deployments() {
    coco_workload(KyvernoApi::Legacy, "kyverno-cocoWorkload").await;
}

#[tokio::test]
async fn coco_workload_in_cel_kinds_sets_the_runtime_class_of_selected_deployments() {
    coco_workload(KyvernoApi::Cel, "kyverno-cel-cocoWorkload").await;
}

async fn coco_workload(api: KyvernoApi, id: &str) {
    let mut b = Bound::namespaces(api).await;
    // Deployments that exist before the binding: Kyverno's background controller patches them.
    let mut existing = Vec::new();
    for (_, ns, app) in b.subjects() {
        let created = create_deployment(&b.client, ns, app, false).await;
        existing.push((ns.to_owned(), created.metadata.name.expect("name")));
    }
    b.bind(
        "cocoWorkload",
        "Block",
        json!({"runtimeClass": ["kata-qemu"]}),
    )
    .await;
    let subjects = b.subjects();
    let promised: Vec<String> = subjects
        .iter()
        .map(|(_, ns, app)| {
            let selected = *app == "web" && *ns != b.unbound.name();
            if selected {
                "runtimeClassName kata-qemu"
            } else {
                "unchanged"
            }
            .to_owned()
        })
        .collect();

    let mut created = Vec::new();
    for (_, ns, app) in &subjects {
        created.push(runtime_class(
            &create_deployment(&b.client, ns, app, true).await,
        ));
    }
    // The background controller works asynchronously.
    let patched = eventually(
        "the Deployments that existed before the binding to be patched as promised",
        CONVERGE,
        async |seen| {
            let mut patched = Vec::new();
            for (ns, name) in &existing {
                let api = Api::<Deployment>::namespaced(b.client.clone(), ns);
                patched.push(runtime_class(&api.get(name).await.expect("Deployment")));
            }
            *seen = format!("{patched:?}");
            (patched == promised).then_some(patched)
        },
    )
    .await;
    let rows = vec![
        ("Deployment created after the binding".to_owned(), created),
        (
            "Deployment that existed before the binding".to_owned(),
            patched,
        ),
    ];
    let expected = rows
        .iter()
        .map(|(case, _)| (case.clone(), promised.clone()))
        .collect();
    let matrix = Matrix {
        id: id.into(),
        title: format!(
            "cocoWorkload runtimeClass=kata-qemu (Kyverno v1.19.1 admission and background controllers, {})",
            kinds(api)
        ),
        case_header: "Deployment",
        subjects: subjects.iter().map(|(s, ..)| (*s).to_owned()).collect(),
        rows,
        expected,
    };
    b.done().await;
    matrix.assert();
}

/// A pod that stays (nothing schedules it): the trigger of virtualPatch's generate rules.
async fn create_pod(client: &Client, ns: &str, app: &str, image: &str) -> String {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "eff-", "labels": {"app": app}},
        "spec": {"containers": [{"name": "app", "image": image}]},
    }))
    .expect("pod");
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("creating a pod in {ns}: {e}"))
        .metadata
        .name
        .expect("name")
}

/// virtualPatch for CVE-2024-4439 (the test database patches `nginx:latest` with a
/// KubeArmorPolicy per pod, a Kyverno Policy and a NetworkPolicy): what Kyverno's background
/// controller generated in each namespace once a pod was created there.
#[tokio::test]
async fn virtual_patch_generates_the_patches_where_a_selected_pod_runs_the_image() {
    virtual_patch(KyvernoApi::Legacy, "kyverno-virtualPatch").await;
}

/// The same with the generators written as NamespacedGeneratingPolicies: the same cells.
#[tokio::test]
async fn virtual_patch_in_cel_kinds_generates_the_patches_where_a_selected_pod_runs_the_image() {
    virtual_patch(KyvernoApi::Cel, "kyverno-cel-virtualPatch").await;
}

async fn virtual_patch(api: KyvernoApi, id: &str) {
    let cp = cluster(api);
    let client = cp.client().expect("client");
    let si = intent(
        &client,
        "virtualPatch",
        "Block",
        json!({"cveList": ["CVE-2024-4439"]}),
    )
    .await;
    let selecting = Selecting {
        labels: json!({"app": "web"}),
        allow_sensitive: None,
        shadow: false,
    };
    // (column, binding, pod's app label, pod's image)
    let cases = [
        (
            "selected pod running nginx:latest, SecurityIntentBinding",
            Some(false),
            "web",
            "nginx:latest",
        ),
        (
            "unselected pod running nginx:latest, SecurityIntentBinding",
            Some(false),
            "db",
            "nginx:latest",
        ),
        (
            "selected pod running another image, SecurityIntentBinding",
            Some(false),
            "web",
            "registry.invalid/app:1",
        ),
        (
            "selected pod running nginx:latest, ClusterSecurityIntentBinding",
            Some(true),
            "web",
            "nginx:latest",
        ),
        (
            "pod running nginx:latest in an unbound namespace",
            None,
            "web",
            "nginx:latest",
        ),
    ];
    let mut namespaces = Vec::new();
    let mut csibs = Vec::new();
    for (_, binding, ..) in &cases {
        let ns = namespace(cp, "eff-kyv-vp").await;
        match binding {
            Some(false) => drop(bind_namespaced(&client, ns.name(), &si, &selecting).await),
            Some(true) => csibs.push(bind_cluster(&client, ns.name(), &si, &selecting).await),
            None => {}
        }
        namespaces.push(ns);
    }
    let bound: Vec<&str> = namespaces.iter().map(|n| n.name()).collect();
    kyverno_policies_ready(&client, &bound).await;
    let mut pods = Vec::new();
    for ((_, _, app, image), ns) in cases.iter().zip(&namespaces) {
        pods.push(create_pod(&client, ns.name(), app, image).await);
    }

    // What the patches promise: everything where a selected pod runs the patched image; the
    // Kyverno policy wherever a selected pod runs (its own rules check the image).
    let generated = |yes: bool| if yes { "generated" } else { "none" }.to_owned();
    // (row, kind, its name beside the pod `pod`, whether the patches promise it for a pod of
    // (app, image))
    type Patch = (
        &'static str,
        ApiResource,
        fn(&str) -> String,
        fn(&str, &str) -> bool,
    );
    let runs_nginx: fn(&str, &str) -> bool = |app, image| app == "web" && image == "nginx:latest";
    let patches: [Patch; 3] = [
        (
            "KubeArmorPolicy block-pkg-mgmt-tools-exec-{pod}",
            engines::KUBEARMOR_POLICY.api_resource(),
            |pod| format!("block-pkg-mgmt-tools-exec-{pod}"),
            runs_nginx,
        ),
        (
            "NetworkPolicy test-network-policy",
            engines::NETWORK_POLICY.api_resource(),
            |_| "test-network-policy".to_owned(),
            runs_nginx,
        ),
        (
            "Kyverno Policy disallow-latest-tag",
            engines::KYVERNO_POLICY.api_resource(),
            |_| "disallow-latest-tag".to_owned(),
            |app, _| app == "web",
        ),
    ];
    let expected: Vec<(String, Vec<String>)> = patches
        .iter()
        .map(|(row, _, _, promise)| {
            let cells = cases
                .iter()
                .map(|(_, binding, app, image)| generated(binding.is_some() && promise(app, image)))
                .collect();
            ((*row).to_owned(), cells)
        })
        .collect();
    let rows = eventually(
        "the background controller to generate the patches",
        CONVERGE,
        async |seen| {
            let mut rows = Vec::new();
            for (row, resource, name, _) in &patches {
                let mut cells = Vec::new();
                for (ns, pod) in namespaces.iter().zip(&pods) {
                    let api =
                        Api::<DynamicObject>::namespaced_with(client.clone(), ns.name(), resource);
                    let found = api.get_opt(&name(pod)).await.expect("reading");
                    cells.push(generated(found.is_some()));
                }
                rows.push(((*row).to_owned(), cells));
            }
            *seen = format!("{rows:?}");
            (rows == expected).then_some(rows)
        },
    )
    .await;
    let matrix = Matrix {
        id: id.to_owned(),
        title: format!(
            "virtualPatch cveList=[CVE-2024-4439] (Kyverno v1.19.1 admission and background controllers, {})",
            kinds(api)
        ),
        case_header: "generated in the pod's namespace",
        subjects: cases.iter().map(|(s, ..)| (*s).to_owned()).collect(),
        rows,
        expected,
    };
    for csib in csibs {
        unbind_cluster(&client, &csib).await;
    }
    matrix.assert();
}

/// What the operator told to write the CEL kinds (`--kyverno-kinds cel`) says where the API
/// server does not serve a kind virtualPatch needs (no Kyverno runs: the kinds served are the
/// CRDs installed). With only the legacy kinds served, Kyverno is not installed and the
/// NimbusPolicy says which kinds are missing; without NamespacedGeneratingPolicy, virtualPatch is
/// not enforced and the NimbusPolicy names that kind; without the legacy `Policy` kind (Kyverno
/// 1.21), the Kyverno patch is not generated, the KubeArmor and NetworkPolicy patches are, and
/// the policy says what is left out.
#[tokio::test]
async fn virtual_patch_in_cel_kinds_names_the_kyverno_kinds_not_served() {
    // (case, the CRD files left out, Ready's status and reason, its message, generators written
    // where their kind is served)
    type Case = (
        &'static str,
        fn(&Path) -> bool,
        &'static str,
        &'static str,
        &'static str,
    );
    let cases: [(Case, Option<usize>); 3] = [
        (
            (
                "only the legacy kinds",
                |crd| {
                    crd.parent()
                        .is_some_and(|dir| dir.ends_with("policies.kyverno.io"))
                },
                "False",
                "EngineNotInstalled",
                "intent `virtualPatch` is not enforced: kyverno (not installed: --kyverno-kinds \
                 cel asks for its CEL policy kinds, NamespacedValidatingPolicy, ValidatingPolicy, \
                 NamespacedMutatingPolicy, MutatingPolicy not served; its legacy kinds are served \
                 (--kyverno-kinds auto writes those))",
            ),
            None,
        ),
        (
            (
                "no NamespacedGeneratingPolicy",
                |crd| crd.ends_with("policies.kyverno.io_namespacedgeneratingpolicies.yaml"),
                "False",
                "EngineNotInstalled",
                "kyverno enforces intent `virtualPatch` with a NamespacedGeneratingPolicy, which the \
             API server does not serve (policies.kyverno.io/v1)",
            ),
            None,
        ),
        (
            (
                "no legacy Policy kind",
                // Path::ends_with compares whole file names.
                |crd| crd.ends_with("kyverno.io_policies.yaml"),
                "True",
                "Ready",
                "CVE-2024-4439, image nginx:latest: kyverno patch not generated: it is a Kyverno \
             Policy (kyverno.io/v1), which the API server does not serve",
            ),
            Some(2),
        ),
    ];
    for ((case, left_out, status, reason, message), written) in cases {
        let cp = ControlPlane::start(Options::default())
            .await
            .expect("control plane");
        let client = cp.client().expect("client");
        let nimbus = nimbus_api::crds_yaml().expect("Nimbus CRDs");
        apply_yaml(&client, &nimbus).await.expect("Nimbus CRDs");
        for crd in yaml_files(&kyverno_dir().join("crds")) {
            if !left_out(&crd) {
                let yaml = std::fs::read_to_string(&crd).expect("Kyverno CRD");
                apply_yaml(&client, &yaml).await.expect("Kyverno CRD");
            }
        }
        install_engine_crd(&client, nimbus_testenv::upstream::KUBEARMOR_POLICY).await;
        install_virtual_patch_db(&client).await;
        let stop = CancellationToken::new();
        let running = operator(&cp, KyvernoKinds::Cel, stop.clone());
        let ns = namespace(&cp, "eff-kyv-unserved").await;
        let vp = intent(
            &client,
            "virtualPatch",
            "Block",
            json!({"cveList": ["CVE-2024-4439"]}),
        )
        .await;
        // Not `bind_namespaced`: it waits for a Ready binding.
        let name = crate::common::unique("eff");
        let binding = json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
            "metadata": {"name": name},
            "spec": {"intents": [{"name": vp}],
                     "selector": {"workloadSelector": {"matchLabels": {"app": "web"}}}},
        });
        let bindings = Api::<SecurityIntentBinding>::namespaced(client.clone(), ns.name());
        crate::common::apply(&bindings, &name, &binding).await;
        let policies = Api::<nimbus_api::NimbusPolicy>::namespaced(client.clone(), ns.name());
        let ready = eventually(
            &format!("{case}: the NimbusPolicy to say why"),
            CONVERGE,
            async |seen| {
                let policy = policies.get_opt(&name).await.ok()??;
                let conditions = policy.status?.conditions;
                let ready = conditions.into_iter().find(|c| c.type_ == "Ready")?;
                *seen = format!("{ready:?}");
                (ready.message.contains(message)).then_some(ready)
            },
        )
        .await;
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            (status, reason),
            "{case}: {ready:?}"
        );
        if let Some(written) = written {
            let generators = ours(
                &client,
                &[&engines::KYVERNO_NAMESPACED_GENERATING_POLICY],
                &[ns.name()],
            )
            .await;
            assert_eq!(generators.len(), written, "{case}");
        }
        stop.cancel();
        tokio::task::spawn_blocking(move || running.join())
            .await
            .expect("joining")
            .expect("the operator stopped");
    }
}
