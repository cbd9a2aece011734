//! One real control plane and one in-process operator per test binary; each test works in its
//! own namespace(s) and with uniquely named cluster-scoped objects.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod browser;
pub mod cases;
pub mod counted;
pub mod fleet;
pub mod generated;
pub mod monitor;
pub mod oracle;
pub mod partition;
pub mod replica;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, Resource};
use nimbus_testenv::upstream::{EngineCrd, OPEN_REPORT, POLICY_REPORT};
use nimbus_testenv::{ControlPlane, apply_yaml};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

/// How long a reaction may take before a test fails; generous for 2 shared cores.
pub const CONVERGE: Duration = Duration::from_secs(30);

/// The shared control plane with the Nimbus CRDs installed (no operator).
pub fn cluster() -> &'static ControlPlane {
    static CRDS: OnceLock<Result<(), String>> = OnceLock::new();
    let cp = nimbus_testenv::shared();
    let installed = CRDS.get_or_init(|| {
        on_own_runtime(async {
            let yaml = nimbus_api::crds_yaml().map_err(|e| e.to_string())?;
            let client = cp.client().map_err(|e| e.to_string())?;
            apply_yaml(&client, &yaml)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        })
    });
    if let Err(e) = installed {
        panic!("installing the Nimbus CRDs failed: {e}");
    }
    cp
}

/// The ConfigMap (`namespace`, `name`) the test operator reads virtual patches from.
pub const VIRTUAL_PATCH_DB: (&str, &str) = ("kube-public", "nimbus-virtual-patches");

/// The virtual-patch database of every test in the workspace: patches of each engine for
/// CVE-2024-4439 (the example's second CVE is deliberately unknown).
pub const VIRTUAL_PATCHES: &str =
    include_str!("../../../core/tests/fixtures/virtual-patch-db.json");

/// Writes [`VIRTUAL_PATCHES`] to [`VIRTUAL_PATCH_DB`].
pub async fn install_virtual_patch_db(client: &Client) {
    let (ns, name) = VIRTUAL_PATCH_DB;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    apply(
        &cms,
        name,
        &serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"vp.json": VIRTUAL_PATCHES}
        }),
    )
    .await;
}

/// The shared control plane with the operator running against it (started once, resyncing
/// every `resync`; the first caller's value wins).
pub fn operator(resync: Duration) -> &'static ControlPlane {
    static OPERATOR: OnceLock<()> = OnceLock::new();
    let cp = cluster();
    OPERATOR.get_or_init(|| {
        // `NIMBUS_TEST_LOG=nimbus_operator=debug` shows what the operator did, for a failing test.
        if let Ok(filter) = std::env::var("NIMBUS_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_test_writer()
                .try_init();
        }
        run_operator(
            cp,
            nimbus_operator::Config {
                resync,
                virtual_patch_db: Some((VIRTUAL_PATCH_DB.0.into(), VIRTUAL_PATCH_DB.1.into())),
                ..Default::default()
            },
        );
    });
    cp
}

/// Runs the operator against `cp` on a thread and runtime of its own, for the rest of the test
/// process (a test's runtime ends with the test).
pub fn run_operator(cp: &ControlPlane, operator: nimbus_operator::Config) {
    run_operator_with(cp, operator, |config| {
        Client::try_from(config).expect("operator client")
    });
}

/// [`run_operator`], every request of the operator counted by verb, resource and response code
/// (see [`counted`]).
pub fn run_counted_operator(
    cp: &ControlPlane,
    operator: nimbus_operator::Config,
) -> counted::Counted {
    let counted = counted::Counted::default();
    let counting = counted.clone();
    run_operator_with(cp, operator, move |config| counting.client(config));
    counted
}

fn run_operator_with(
    cp: &ControlPlane,
    operator: nimbus_operator::Config,
    client: impl FnOnce(kube::Config) -> Client + Send + 'static,
) {
    let config = cp.config().clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("operator runtime");
        runtime.block_on(async move {
            let client = client(config);
            if let Err(e) = nimbus_operator::run(client, operator, Default::default()).await {
                panic!("operator failed: {e}");
            }
        });
    });
}

fn on_own_runtime<T: Send>(fut: impl Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(fut)
        })
        .join()
        .expect("setup thread")
    })
}

/// A name unique to this test process and call, for cluster-scoped objects.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Server-side applies a typed or JSON object as the "user".
pub async fn apply<K>(api: &Api<K>, name: &str, obj: &serde_json::Value) -> K
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    api.patch(
        name,
        &PatchParams::apply("test-user").force(),
        &Patch::Apply(obj),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {name}: {e}"))
}

pub async fn delete<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.delete(name, &DeleteParams::background())
        .await
        .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
}

/// `get_opt` that fails the test on errors other than NotFound.
pub async fn get<K>(api: &Api<K>, name: &str) -> Option<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("getting {name}: {e}"))
}

/// Waits until `name` is gone from `api`.
pub async fn gone<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    nimbus_testenv::eventually(&format!("{name} to go"), CONVERGE, async |_| {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await
}

/// Creates a uniquely named SecurityIntent and returns its name.
pub async fn create_intent(client: &Client, id: &str, action: &str) -> String {
    let name = unique("si");
    apply(
        &Api::<nimbus_api::SecurityIntent>::all(client.clone()),
        &name,
        &intent(&name, id, action),
    )
    .await;
    name
}

pub fn intent(name: &str, id: &str, action: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
        "metadata": {"name": name},
        "spec": {"intent": {"id": id, "action": action, "description": format!("{id} test")}}
    })
}

/// What most tests work with: a namespace of their own and the APIs around it, with the
/// operator running.
pub struct Env {
    pub client: Client,
    pub ns: nimbus_testenv::TestNamespace,
    pub intents: Api<nimbus_api::SecurityIntent>,
    pub bindings: Api<nimbus_api::SecurityIntentBinding>,
    pub policies: Api<nimbus_api::NimbusPolicy>,
}

pub async fn env(prefix: &str) -> Env {
    let cp = operator(Duration::from_secs(300));
    let client = cp.client().expect("client");
    let ns = cp.test_namespace(prefix).await.expect("namespace");
    Env {
        intents: Api::all(client.clone()),
        bindings: Api::namespaced(client.clone(), ns.name()),
        policies: Api::namespaced(client.clone(), ns.name()),
        client,
        ns,
    }
}

/// A SecurityIntentBinding of `intents` selecting pods labelled `labels`.
pub fn binding(name: &str, intents: &[&str], labels: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
        "metadata": {"name": name, "labels": {"team": "blue"}},
        "spec": {
            "intents": intents.iter().map(|n| serde_json::json!({"name": n})).collect::<Vec<_>>(),
            "selector": {"workloadSelector": {"matchLabels": labels}}
        }
    })
}

/// Creates a pod `name` labelled `app: <name>` in `ns` (nothing schedules or pulls it: it is a
/// workload for the posture to judge).
pub async fn bare_pod(client: &Client, ns: &str, name: &str) {
    apply(
        &Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns),
        name,
        &serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}}),
    )
    .await;
}

/// The CRDs of every engine the operator writes to (the vendored CRDs of the registered
/// engines' kinds), and of the reports the posture reads and writes.
pub fn engine_crds() -> Vec<EngineCrd> {
    let written: std::collections::BTreeSet<&str> = nimbus_core::engines::all_kinds()
        .into_iter()
        .filter_map(|kind| kind.crd)
        .collect();
    nimbus_testenv::upstream::ENGINE_CRDS
        .into_iter()
        .filter(|crd| {
            written.contains(crd.name().as_str()) || [POLICY_REPORT, OPEN_REPORT].contains(crd)
        })
        .collect()
}

/// Installs `crd`.
pub async fn install_engine_crd(client: &Client, crd: EngineCrd) {
    crd.install(client)
        .await
        .unwrap_or_else(|e| panic!("installing {}: {e}", crd.file));
}

/// Where the original Nimbus project's files are vendored (`upstream/nimbus`).
pub fn original_nimbus(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../upstream/nimbus")
        .join(path)
}

/// [`cluster`] with every engine installed (before any operator starts).
pub fn cluster_with_engines() -> &'static ControlPlane {
    static ENGINES: OnceLock<()> = OnceLock::new();
    let cp = cluster();
    ENGINES.get_or_init(|| {
        on_own_runtime(async {
            let client = cp.client().expect("client");
            for crd in engine_crds() {
                install_engine_crd(&client, crd).await;
            }
            let k8tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../charts/nimbus/files/k8tls/environment.yaml");
            let yaml = std::fs::read_to_string(&k8tls)
                .expect("charts/nimbus/files/k8tls/environment.yaml");
            apply_yaml(&client, &yaml).await.expect("k8tls environment");
        })
    });
    cp
}

/// A native object the engines generate, if it exists (`None` also while its kind is not
/// served).
pub async fn native(
    client: &Client,
    kind: &nimbus_core::engines::NativeKind,
    namespace: Option<&str>,
    name: &str,
) -> Option<kube::api::DynamicObject> {
    let resource = kind.api_resource();
    let api: Api<kube::api::DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    match api.get_opt(name).await {
        Ok(obj) => obj,
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => panic!("getting {name}: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Packaging (tests/packaging*.rs): helm, kustomize and rendered manifests.

/// The release namespace every chart render uses (the one config/ hard-codes).
pub const RELEASE_NAMESPACE: &str = "nimbus-system";
/// The release name whose objects carry the plain names config/ uses.
pub const RELEASE: &str = "nimbus";

pub fn workspace_root() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The test tools `hack/build-tools.sh` builds.
const TOOLS: [&str; 8] = [
    "helm",
    "kustomize",
    "netpol-decider",
    "kubectl",
    "health-judge",
    "promtool",
    "knp-decider",
    "karmada-judge",
];

/// The directory holding the test tools ([`TOOLS`]): `NIMBUS_TOOLS_DIR`, or what `hack/build-tools.sh`
/// builds (once per test binary; a cold build takes minutes). Panics with the reason when a
/// tool is missing: never a reason to skip a test.
pub fn tools_dir() -> &'static std::path::Path {
    static DIR: OnceLock<Result<std::path::PathBuf, String>> = OnceLock::new();
    match DIR.get_or_init(locate_tools) {
        Ok(dir) => dir,
        Err(reason) => {
            panic!("the test tools ({}) are needed: {reason}", TOOLS.join(", "))
        }
    }
}

/// Runs a `hack/build-*.sh` script (a no-op when its cache is warm) and returns the directory
/// it prints last, where it put what it built.
pub fn built_by(script: &str) -> Result<std::path::PathBuf, String> {
    use std::process::{Command, Stdio};
    let script = workspace_root().join(script);
    // stderr stays attached: a cold build should show progress, not look hung.
    let output = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed ({}); its error output is above",
            script.display(),
            output.status
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().map(str::trim).rfind(|l| !l.is_empty());
    Ok(std::path::PathBuf::from(last.ok_or_else(|| {
        format!("{} printed no directory", script.display())
    })?))
}

fn locate_tools() -> Result<std::path::PathBuf, String> {
    let dir = match std::env::var_os("NIMBUS_TOOLS_DIR") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => built_by("hack/build-tools.sh")?,
    };
    for tool in TOOLS {
        let path = dir.join(tool);
        let executable = std::fs::metadata(&path).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        });
        if !executable {
            let hint = if std::env::var_os("NIMBUS_TOOLS_DIR").is_some() {
                "NIMBUS_TOOLS_DIR must hold every test tool; unset it to build them"
            } else {
                "hack/build-tools.sh should have built it"
            };
            return Err(format!(
                "{} is missing or not executable: {hint}",
                path.display()
            ));
        }
    }
    Ok(dir)
}

/// Runs tools/netpol-decider (cyclonus's matcher) on `input`: `{"policies", "traffic"}`, answered
/// with `name → {"ingress", "egress", "allowed"}`, or `{"scenarios": [...]}`, answered with one
/// such map per scenario.
pub fn netpol_decide<T: serde::de::DeserializeOwned>(input: &serde_json::Value) -> T {
    judge_with("netpol-decider", &[], input)
}

/// Runs tools/knp-decider (kube-network-policies' policy engine: Admin-tier
/// ClusterNetworkPolicies, then NetworkPolicies, then Baseline-tier ones) on `input`:
/// `{"clusterNetworkPolicies", "policies", "nodes", "traffic"}`, answered with
/// `name → {"ingress", "egress", "allowed"}`, or `{"scenarios": [...]}`, answered with one such
/// map per scenario. Peers are netpol-decider's, with optional container `"ports"`.
pub fn knp_decide<T: serde::de::DeserializeOwned>(input: &serde_json::Value) -> T {
    judge_with("knp-decider", &[], input)
}

/// Runs tools/health-judge on `objects` with the health checks the chart ships: what kstatus,
/// Argo CD (the Lua script of `files/argocd/argocd-cm.yaml`) and Flux (the healthCheckExprs of
/// `files/flux/health-check-exprs.yaml`) make of each, in order.
pub fn health_judge<T: serde::de::DeserializeOwned>(objects: &[serde_json::Value]) -> T {
    let files = workspace_root().join("charts/nimbus/files");
    let argocd = files.join("argocd/argocd-cm.yaml");
    let flux = files.join("flux/health-check-exprs.yaml");
    judge_with(
        "health-judge",
        &[
            "--argocd-cm".as_ref(),
            argocd.as_os_str(),
            "--flux-exprs".as_ref(),
            flux.as_os_str(),
        ],
        &serde_json::Value::from(objects.to_vec()),
    )
}

/// Runs tools/karmada-judge (Karmada's declarative resource interpreter) with the
/// ResourceInterpreterCustomizations the chart ships (`files/karmada/interpreter.yaml`) on
/// `request`: `{"objects": [...], "fleets": [{"template", "members": [{"cluster", "object"}]}]}`,
/// answered with each script's compile check, each object's health and reflected status, and
/// each fleet's status items and aggregated template.
pub fn karmada_judge<T: serde::de::DeserializeOwned>(request: &serde_json::Value) -> T {
    let customizations = workspace_root().join("charts/nimbus/files/karmada/interpreter.yaml");
    judge_with(
        "karmada-judge",
        &["--customizations".as_ref(), customizations.as_os_str()],
        request,
    )
}

/// Runs a test tool that reads `input` (JSON) on stdin and answers JSON on stdout.
fn judge_with<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: &[&std::ffi::OsStr],
    input: &serde_json::Value,
) -> T {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let path = tools_dir().join(tool);
    let mut child = Command::new(&path)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", path.display()));
    // The tools read all of their input before they write: no deadlock on full pipes.
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("writing to {tool}: {e}"));
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{tool} output: {e}"));
    assert!(
        output.status.success(),
        "{tool} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{tool} JSON: {e}"))
}

/// A bare pod `name` labelled `app: <name>`, with `ports` (`[{name, containerPort}]`) and the
/// IP `ip` written into its status as a kubelet would: for previews and network oracles, which
/// take part only pods with an IP. Addresses are data only: nothing connects to them.
pub async fn pod_with_ip(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
    ip: &str,
    ports: serde_json::Value,
) {
    use kube::api::{Patch, PatchParams};
    apply(
        pods,
        name,
        &serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1",
                                         "ports": ports}]}}),
    )
    .await;
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}})),
    )
    .await
    .unwrap_or_else(|e| panic!("setting the IP of {name}: {e}"));
}

/// Runs a test tool (helm, kustomize, promtool…) in the workspace root and returns its stdout;
/// fails the test with its output when it fails.
pub fn run_tool(tool: &str, args: &[&str]) -> String {
    let output = std::process::Command::new(tools_dir().join(tool))
        .args(args)
        .current_dir(workspace_root())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {tool}: {e}"));
    assert!(
        output.status.success(),
        "`{tool} {}` failed ({}):\n{}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// `helm template` of charts/nimbus as release [`RELEASE`] in [`RELEASE_NAMESPACE`], with
/// `--set` values.
pub fn helm_template(set: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec![
        "template",
        RELEASE,
        "charts/nimbus",
        "--namespace",
        RELEASE_NAMESPACE,
    ];
    for value in set {
        args.extend(["--set", value]);
    }
    parse_documents(&run_tool("helm", &args))
}

/// `kustomize build <dir>` (relative to the workspace root).
pub fn kustomize_build(dir: &str) -> Vec<serde_json::Value> {
    parse_documents(&run_tool("kustomize", &["build", dir]))
}

fn parse_documents(yaml: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize as _;
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|doc| serde_json::Value::deserialize(doc).expect("rendered YAML parses"))
        .filter(|doc| !doc.is_null())
        .collect()
}

pub fn object_kind(obj: &serde_json::Value) -> &str {
    obj["kind"].as_str().expect("every object has a kind")
}

pub fn object_name(obj: &serde_json::Value) -> &str {
    obj["metadata"]["name"]
        .as_str()
        .expect("every object has a name")
}

/// The rendered object of this kind and name.
pub fn rendered<'a>(
    objects: &'a [serde_json::Value],
    kind: &str,
    name: &str,
) -> &'a serde_json::Value {
    objects
        .iter()
        .find(|o| object_kind(o) == kind && object_name(o) == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// The value of `--flag=value` among the first container's arguments of a Deployment.
pub fn container_flag<'a>(deployment: &'a serde_json::Value, flag: &str) -> Option<&'a str> {
    let prefix = format!("{flag}=");
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()?
        .iter()
        .filter_map(serde_json::Value::as_str)
        .find_map(|a| a.strip_prefix(prefix.as_str()))
}

/// Dependency order: what other objects live in or are checked against comes first.
fn apply_rank(obj: &serde_json::Value) -> u8 {
    match object_kind(obj) {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "ServiceAccount" => 2,
        "ClusterRole" | "Role" => 3,
        "ClusterRoleBinding" | "RoleBinding" => 4,
        "ConfigMap" | "Secret" => 5,
        "Service" => 6,
        "Deployment" => 7,
        _ => 8,
    }
}

/// Server-side applies rendered objects in dependency order, with strict field validation (a
/// misspelt field is an error, not silently dropped). Namespaces and CRDs are really created,
/// since the rest needs them; everything else only with `dryRun=All`, unless `really`.
pub async fn apply_rendered(
    client: &Client,
    objects: &[serde_json::Value],
    really: bool,
    what: &str,
) {
    use kube::api::{DynamicObject, GroupVersionKind};
    use kube::discovery::{self, Scope};
    let mut sorted: Vec<&serde_json::Value> = objects.iter().collect();
    sorted.sort_by_key(|o| apply_rank(o));
    for obj in sorted {
        let (kind, name) = (object_kind(obj), object_name(obj));
        let parsed: DynamicObject = serde_json::from_value(obj.clone()).expect("an object");
        let gvk = parsed
            .types
            .as_ref()
            .and_then(|t| GroupVersionKind::try_from(t).ok())
            .unwrap_or_else(|| panic!("{what}: {kind} {name}: bad apiVersion/kind"));
        let (resource, caps) = discovery::pinned_kind(client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{what}: the apiserver does not serve {gvk:?}: {e}"));
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &resource),
            Scope::Namespaced => {
                let ns = obj["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{what}: {kind} {name} has no namespace"));
                Api::namespaced_with(client.clone(), ns, &resource)
            }
        };
        let mut params = PatchParams::apply("nimbus-packaging-test")
            .force()
            .validation_strict();
        if !(really || apply_rank(obj) <= 1) {
            params = params.dry_run();
        }
        api.patch(name, &params, &Patch::Apply(obj))
            .await
            .unwrap_or_else(|e| panic!("{what}: the apiserver rejected {kind} {name}: {e}"));
    }
    let crds: Vec<&str> = objects
        .iter()
        .filter(|o| object_kind(o) == "CustomResourceDefinition")
        .map(object_name)
        .collect();
    nimbus_testenv::wait_crds_established(client, &crds, CONVERGE)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// The release namespace, which `helm install --create-namespace` would create.
pub async fn create_release_namespace(client: &Client) {
    let namespace = serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}
    });
    apply_rendered(client, &[namespace], true, "the release namespace").await;
}

/// The native object a policy-status entry names: its kind, namespace (the entry's own for
/// `namespace/CronJob/name`, else `namespace` for namespaced kinds) and name.
pub fn entry_object<'a>(
    entry: &'a str,
    namespace: Option<&'a str>,
) -> (
    &'static nimbus_core::engines::NativeKind,
    Option<&'a str>,
    &'a str,
) {
    let parts: Vec<&str> = entry.split('/').collect();
    let (entry_ns, kind, name) = match parts[..] {
        [ns, kind, name] => (Some(ns), kind, name),
        [kind, name] => (None, kind, name),
        _ => panic!("malformed entry {entry}"),
    };
    let kind = nimbus_core::engines::all_kinds()
        .into_iter()
        .find(|k| k.entry == kind)
        .unwrap_or_else(|| panic!("unknown kind in entry {entry}"));
    let ns = kind.namespaced.then(|| entry_ns.or(namespace)).flatten();
    (kind, ns, name)
}

/// A client that authenticates only with `token` (no client certificate).
pub fn token_client(admin: &kube::Config, token: &str) -> Client {
    Client::try_from(token_config(admin, token)).expect("token client")
}

/// The configuration of [`token_client`].
pub fn token_config(admin: &kube::Config, token: &str) -> kube::Config {
    let mut config = kube::Config::new(admin.cluster_url.clone());
    config.root_cert = admin.root_cert.clone();
    config.auth_info =
        serde_json::from_value(serde_json::json!({ "token": token })).expect("auth info");
    config
}

/// What `helm install` of the chart (with the `--set` values `set`) creates, except the
/// workload itself (tests run the operator in-process): applies it and returns every rendered
/// object.
pub async fn install_chart_without_workload(
    admin: &Client,
    set: &[&str],
) -> Vec<serde_json::Value> {
    create_release_namespace(admin).await;
    let objects = helm_template(set);
    let setup: Vec<serde_json::Value> = objects
        .iter()
        .filter(|o| {
            !matches!(
                object_kind(o),
                // An APIService without its server would stall discovery, and with it garbage
                // collection and namespace deletion, for every later test.
                "Deployment" | "Service" | "PodDisruptionBudget" | "ServiceMonitor" | "APIService"
            )
        })
        .cloned()
        .collect();
    apply_rendered(admin, &setup, true, "chart").await;
    objects
}

/// A client of the rendered Deployment's ServiceAccount (in [`RELEASE_NAMESPACE`]),
/// authenticated only by a token from a TokenRequest, and that ServiceAccount's name.
pub async fn service_account_client(
    cp: &ControlPlane,
    deployment: &serde_json::Value,
) -> (Client, String) {
    let (config, service_account) = service_account_config(cp, deployment).await;
    (
        Client::try_from(config).expect("token client"),
        service_account,
    )
}

/// The configuration of [`service_account_client`].
pub async fn service_account_config(
    cp: &ControlPlane,
    deployment: &serde_json::Value,
) -> (kube::Config, String) {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let admin = cp.client().expect("client");
    let service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin, RELEASE_NAMESPACE)
        .create_token_request(service_account, &Default::default(), &request)
        .await
        .expect("a ServiceAccount token (TokenRequest)")
        .status
        .and_then(|s| s.token)
        .expect("a token in the TokenRequest's status");
    (
        token_config(cp.config(), &token),
        service_account.to_owned(),
    )
}

/// The operator configuration the rendered Deployment asks for (what `nimbus run` would build
/// from these flags and POD_NAME/POD_NAMESPACE, the pod being `identity` in
/// [`RELEASE_NAMESPACE`]).
pub fn operator_config_from(
    deployment: &serde_json::Value,
    identity: &str,
) -> nimbus_operator::Config {
    let duration = |f: &str| {
        humantime::parse_duration(container_flag(deployment, f).unwrap_or_else(|| panic!("{f}")))
            .expect("a duration")
    };
    let leader_elect = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .is_some_and(|a| a.contains(&serde_json::json!("--leader-elect")));
    assert!(leader_elect, "the chart turns leader election on");
    nimbus_operator::Config {
        leader_election: Some(nimbus_operator::LeaderElection {
            namespace: RELEASE_NAMESPACE.to_owned(),
            lease_name: container_flag(deployment, "--leader-elect-lease-name")
                .expect("lease")
                .to_owned(),
            identity: identity.to_owned(),
            lease_duration: duration("--leader-elect-lease-duration"),
            renew_deadline: duration("--leader-elect-renew-deadline"),
            retry_period: duration("--leader-elect-retry-period"),
        }),
        resync: duration("--resync"),
        k8tls_namespace: container_flag(deployment, "--k8tls-namespace")
            .expect("k8tls namespace")
            .to_owned(),
        k8tls_image: container_flag(deployment, "--k8tls-image")
            .expect("k8tls image")
            .to_owned(),
        sandbox_cluster_roles: container_flag(deployment, "--sandbox-cluster-roles")
            .expect("sandbox roles")
            .split(',')
            .map(str::to_owned)
            .collect(),
        engine_preference: container_flag(deployment, "--engine-preference")
            .expect("engine preference")
            .parse()
            .expect("an engine preference"),
        exception_approval: container_flag(deployment, "--exception-approval")
            .expect("exception approval")
            .parse()
            .expect("optional or required"),
        ..nimbus_operator::Config::default()
    }
}

// ---------------------------------------------------------------------------------------------
// The posture API, called directly rather than through kube-apiserver.

/// A client configuration for the posture API on `127.0.0.1:port`, trusting `ca_pem` (for the
/// name `server_name`, else the IP), with `(user, group)` in the front proxy's headers.
pub fn posture_direct(
    port: u16,
    ca_pem: &str,
    server_name: Option<&str>,
    identity: Option<(&str, &str)>,
) -> kube::Config {
    let url = format!("https://127.0.0.1:{port}").parse().expect("URL");
    let mut config = kube::Config::new(url);
    let der = nimbus_testenv::certificate_der(ca_pem).expect("a PEM CA");
    config.root_cert = Some(vec![der]);
    config.tls_server_name = server_name.map(str::to_owned);
    if let Some((user, group)) = identity {
        for (header, value) in [("x-remote-user", user), ("x-remote-group", group)] {
            config.headers.push((
                http::HeaderName::from_static(header),
                http::HeaderValue::from_str(value).expect("header value"),
            ));
        }
    }
    config
}

/// `config` presenting the front proxy's client certificate, as kube-apiserver does.
pub fn with_front_proxy_certificate(cp: &ControlPlane, mut config: kube::Config) -> kube::Config {
    let (cert, key) = cp.front_proxy_client();
    config.auth_info.client_certificate = Some(cert.display().to_string());
    config.auth_info.client_key = Some(key.display().to_string());
    config
}

/// What the API server served, from its own `apiserver_request_total`: each series' labels and
/// count.
pub async fn apiserver_requests(client: &Client) -> Vec<(String, u64)> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client
        .request_text(request)
        .await
        .expect("apiserver /metrics");
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter_map(|l| {
            let (series, count) = l.rsplit_once(' ')?;
            Some((series.to_owned(), count.parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// Whether a series of `apiserver_request_total` counts writes.
pub fn is_write(series: &str) -> bool {
    ["POST", "PUT", "PATCH", "APPLY", "DELETE"]
        .iter()
        .any(|v| series.contains(&format!(r#"verb="{v}""#)))
}
