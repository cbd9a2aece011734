//! One real control plane and one in-process operator per test binary; each test works in its
//! own namespace(s) and with uniquely named cluster-scoped objects.
#![allow(dead_code)] // each test binary uses a different part of this module

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, Resource};
use nimbus_testenv::{ControlPlane, apply_yaml};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

/// The shared control plane with the operator running against it (started once, resyncing
/// every `resync`; the first caller's value wins).
pub fn operator(resync: Duration) -> &'static ControlPlane {
    static OPERATOR: OnceLock<()> = OnceLock::new();
    let cp = cluster();
    OPERATOR.get_or_init(|| {
        let config = cp.config().clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("operator runtime");
            runtime.block_on(async move {
                let client = Client::try_from(config).expect("operator client");
                let cfg = nimbus_operator::Config {
                    resync,
                    virtual_patch_db: Some((VIRTUAL_PATCH_DB.0.into(), VIRTUAL_PATCH_DB.1.into())),
                    ..Default::default()
                };
                if let Err(e) = nimbus_operator::run(client, cfg, Default::default()).await {
                    panic!("operator failed: {e}");
                }
            });
        });
    });
    cp
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

/// Polls `probe` until it returns `Some`, or panics with `what` after [`CONVERGE`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {CONVERGE:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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

/// The upstream KubeArmor and Kyverno CRDs (`../shared/reference/engine-crds`).
pub fn engine_crds_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/reference/engine-crds");
    assert!(
        dir.is_dir(),
        "engine CRDs not found at {} (the repository expects ../shared beside it)",
        dir.display()
    );
    dir
}

/// Installs the engine CRD in `file` (a file name in [`engine_crds_dir`]).
pub async fn install_engine_crd(client: &Client, file: &str) {
    let path = engine_crds_dir().join(file);
    let yaml = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    apply_yaml(client, &yaml)
        .await
        .unwrap_or_else(|e| panic!("installing {}: {e}", path.display()));
}

/// The CRDs of every engine, and what the k8tls engine needs in its namespace.
pub const ENGINE_CRDS: [&str; 3] = [
    "kubearmor_KubeArmorPolicy.yaml",
    "kyverno.io_policies.yaml",
    "kyverno.io_clusterpolicies.yaml",
];

/// [`cluster`] with every engine installed (before any operator starts).
pub fn cluster_with_engines() -> &'static ControlPlane {
    static ENGINES: OnceLock<()> = OnceLock::new();
    let cp = cluster();
    ENGINES.get_or_init(|| {
        on_own_runtime(async {
            let client = cp.client().expect("client");
            for file in ENGINE_CRDS {
                install_engine_crd(&client, file).await;
            }
            let k8tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../config/engines/k8tls.yaml");
            let yaml = std::fs::read_to_string(&k8tls).expect("config/engines/k8tls.yaml");
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
