//! The posture API end to end, through kube-apiserver's aggregation layer: the operator serves
//! `posture.security.nimbus.com` on a loopback TLS port, an APIService (ExternalName Service
//! `localhost`) routes kube-apiserver's front proxy to it, and every client — kubectl, kube-rs —
//! talks to kube-apiserver only. Plus what must not work: callers without the front-proxy
//! certificate, users RBAC does not grant.

mod common;

use common::browser::{self, attr, headless};
use common::{CONVERGE, apply, bare_pod, binding, create_intent, tools_dir, unique};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    DeleteParams, DynamicObject, ListParams, Patch, PatchParams, WatchEvent, WatchParams,
};
use kube::{Api, Client};
use nimbus_api::posture::{NamespacePosture, VERDICT_LABEL, Verdict, WorkloadPosture};
use nimbus_api::{MODE_LABEL, MODE_SHADOW, NimbusPolicy, SecurityIntentBinding};
use nimbus_testenv::{ControlPlane, LocalApiService, ServingCert, eventually};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

const SERVICE: (&str, &str) = ("nimbus-system", "nimbus-posture");

/// The shared control plane (engines installed) with an operator serving the posture API
/// registered through an APIService and reported Available.
struct Posture {
    cp: &'static ControlPlane,
    port: u16,
    cert: ServingCert,
    _dir: tempfile::TempDir,
}

fn posture() -> &'static Posture {
    static POSTURE: OnceLock<Posture> = OnceLock::new();
    POSTURE.get_or_init(|| {
        let cp = common::cluster_with_engines();
        let port = nimbus_testenv::free_port().expect("a free port");
        let server_name = api_service(port).server_name();
        let cert = nimbus_testenv::serving_cert(&[&server_name]).expect("serving certificate");
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert_file, &cert.cert_pem).expect("tls.crt");
        std::fs::write(&key_file, &cert.key_pem).expect("tls.key");

        common::run_operator(
            cp,
            nimbus_operator::Config {
                posture: Some(nimbus_operator::posture::Config {
                    addr: ([127, 0, 0, 1], port).into(),
                    certificate: nimbus_operator::posture::ServingCertificate {
                        cert_file,
                        key_file,
                    },
                    reports: Default::default(),
                }),
                ..Default::default()
            },
        );

        let posture = Posture {
            cp,
            port,
            cert,
            _dir: dir,
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Runtime::new()
                    .expect("runtime")
                    .block_on(register(&posture))
            })
            .join()
            .expect("registering the APIService")
        });
        posture
    })
}

/// The Service and APIService a release installs, pointed at the loopback port.
async fn register(posture: &Posture) {
    api_service(posture.port)
        .register(posture.cp, &posture.cert.ca_pem, CONVERGE)
        .await
        .expect("registering the posture API");
}

fn api_service(port: u16) -> LocalApiService<'static> {
    LocalApiService {
        group: nimbus_api::posture::GROUP,
        version: nimbus_api::posture::VERSION,
        namespace: SERVICE.0,
        service: SERVICE.1,
        port,
    }
}

/// Runs kubectl against kube-apiserver; returns (success, stdout, stderr).
fn kubectl(cp: &ControlPlane, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(tools_dir().join("kubectl"))
        .args(args)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running kubectl: {e}"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Whether some line names `object` with `verdict` as whole columns.
fn shows(output: &str, object: &str, verdict: &str) -> bool {
    output.lines().any(|line| {
        let cells: Vec<&str> = line.split_whitespace().collect();
        cells.contains(&object) && cells.contains(&verdict)
    })
}

async fn deployment(client: &Client, ns: &str, name: &str, replicas: i32) {
    apply(
        &Api::<Deployment>::namespaced(client.clone(), ns),
        name,
        &json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}
                }
            }
        }),
    )
    .await;
}

/// kubectl, through kube-apiserver: columns, `explain`, and `get -w` following a workload from
/// Unprotected to Protected (a binding arrives) to Partial (an engine's CRD goes away).
#[tokio::test]
async fn kubectl_follows_a_workload_from_unprotected_to_protected_to_partial() {
    let posture = posture();
    let cp = posture.cp;
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("posture").await.expect("namespace");
    deployment(&client, ns.name(), "web", 2).await;

    let listed = eventually(
        "kubectl lists the Deployment as Unprotected",
        CONVERGE,
        async |seen| {
            let (ok, out, err) = kubectl(cp, &["get", "workloadpostures", "-A"]);
            *seen = format!("{out}{err}");
            (ok && shows(&out, "deployment-web", "Unprotected")).then_some(out)
        },
    )
    .await;
    let header: Vec<&str> = listed
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "NAME",
            "WORKLOAD",
            "PODS",
            "VERDICT",
            "INTENTS",
            "REASONS",
            "AGE"
        ],
        "{listed}"
    );
    let row = listed
        .lines()
        .find(|l| l.contains("deployment-web") && l.contains(ns.name()))
        .expect("the row");
    assert!(
        row.contains("Deployment/web") && row.contains("NotSelected"),
        "{row}"
    );

    // `kubectl get -w` from now on (stopped when dropped).
    let logs = tempfile::tempdir().expect("temp dir");
    let watch = nimbus_testenv::Child::spawn(
        "kubectl-get-w",
        &tools_dir().join("kubectl"),
        &["get", "workloadpostures", "-n", ns.name(), "-w"].map(str::to_owned),
        &[("KUBECONFIG", cp.kubeconfig_path().as_os_str())],
        logs.path(),
    )
    .expect("kubectl get -w");
    let watched = async |verdict: &str| {
        eventually(
            &format!("kubectl get -w shows deployment-web {verdict}"),
            CONVERGE,
            async |seen| {
                *seen = watch.output();
                shows(seen, "deployment-web", verdict).then_some(())
            },
        )
        .await
    };
    watched("Unprotected").await;

    // A binding of dnsManipulation (NetworkPolicy + KubeArmor) selecting the Deployment's pods.
    let intent = create_intent(&client, "dnsManipulation", "Block").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    apply(
        &bindings,
        "dns",
        &binding("dns", &[&intent], json!({"app": "web"})),
    )
    .await;
    watched("Protected").await;

    // The typed view agrees, per engine.
    let api: Api<WorkloadPosture> = Api::namespaced(client.clone(), ns.name());
    // Waited for, not read once: the watch saw Protected, maybe before both pods were counted.
    let web = eventually(
        "deployment-web Protected with 2 pods",
        CONVERGE,
        async |seen| {
            let web = api.get("deployment-web").await.ok()?;
            *seen = format!("{:?}, {} pods", web.verdict, web.workload.pods);
            (web.verdict == Verdict::Protected && web.workload.pods == 2).then_some(web)
        },
    )
    .await;
    let coverage = &web.intents[0];
    assert_eq!(coverage.intent.as_deref(), Some(intent.as_str()));
    assert_eq!(
        coverage.binding.as_ref().map(|b| b.name.as_str()),
        Some("dns")
    );
    let engines: Vec<&str> = coverage.engines.iter().map(|e| e.engine.as_str()).collect();
    assert_eq!(engines, ["netpol", "kubearmor"], "{coverage:#?}");
    assert!(coverage.engines.iter().all(|e| !e.objects.is_empty()));

    // KubeArmor goes away: the intent is left to NetworkPolicy alone.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(
        "kubearmorpolicies.security.kubearmor.com",
        &DeleteParams::default(),
    )
    .await
    .expect("deleting the KubeArmorPolicy CRD");
    watched("Partial").await;
    // Its objects vanish with the CRD (Pending) a moment before the CRD stops being served.
    eventually(
        "deployment-web reports KubeArmor not installed",
        CONVERGE,
        async |seen| {
            let web = api.get("deployment-web").await.ok()?;
            *seen = format!("{:?}", web.reasons);
            (web.verdict == Verdict::Partial
                && web.reasons.iter().any(|r| r.reason == "EngineNotInstalled"))
            .then_some(())
        },
    )
    .await;
    let namespace = Api::<NamespacePosture>::all(client.clone())
        .get(ns.name())
        .await
        .expect("the namespace's posture");
    assert_eq!(
        (namespace.workloads.total, namespace.workloads.partial),
        (1, 1),
        "{namespace:#?}"
    );
    assert_eq!(namespace.bindings[0].name, "dns");
    drop(watch);
    common::install_engine_crd(&client, nimbus_testenv::upstream::KUBEARMOR_POLICY).await;

    let (ok, out, err) = kubectl(cp, &["get", "namespacepostures", ns.name()]);
    assert!(ok && shows(&out, ns.name(), "Partial"), "{out}{err}");
}

/// The posture judges a policy as its status does: one no binding generates protects nothing,
/// even while it selects a workload and the operator has seen it.
#[tokio::test]
async fn a_policy_no_binding_generates_protects_nothing() {
    let posture = posture();
    let client = posture.cp.client().expect("client");
    let ns = posture
        .cp
        .test_namespace("posture-direct")
        .await
        .expect("namespace");
    deployment(&client, ns.name(), "api", 1).await;
    let policies: Api<NimbusPolicy> = Api::namespaced(client.clone(), ns.name());
    let direct = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
        "metadata": {"name": "direct"},
        "spec": {"selector": {"matchLabels": {"app": "api"}},
                 "rules": [{"id": "dnsManipulation", "rule": {"action": "Block"}}]}
    });
    apply(&policies, "direct", &direct).await;
    // An object carrying our label with the name the policy's translation would give it: not
    // the policy's, so it proves nothing either.
    let lookalike = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "direct-dnsmanipulation",
                     "labels": {"app.kubernetes.io/managed-by": "nimbus-netpol"}},
        "spec": {"podSelector": {"matchLabels": {"app": "api"}}, "policyTypes": ["Egress"]}
    });
    let netpols: Api<NetworkPolicy> = Api::namespaced(client.clone(), ns.name());
    apply(&netpols, "direct-dnsmanipulation", &lookalike).await;
    eventually(
        "the operator reports the policy NotBound",
        CONVERGE,
        async |seen| {
            let status = policies.get("direct").await.ok()?.status?;
            *seen = format!("{status:?}");
            status
                .conditions
                .iter()
                .any(|c| c.reason == "NotBound")
                .then_some(())
        },
    )
    .await;
    // A workload created after that is computed with the policy in the caches.
    deployment(&client, ns.name(), "marker", 1).await;
    let api: Api<WorkloadPosture> = Api::namespaced(client.clone(), ns.name());
    eventually("the marker's posture", CONVERGE, async |_| {
        api.get("deployment-marker").await.ok()
    })
    .await;
    // The api Deployment's pods may come after the marker's on a busy machine: its posture is
    // waited for too (computed, like the marker's, with the policy in the caches).
    let posture = eventually("the api's posture", CONVERGE, async |_| {
        api.get("deployment-api").await.ok()
    })
    .await;
    assert_eq!(posture.verdict, Verdict::Unprotected, "{posture:#?}");
}

/// A namespace with intents bound and no workload has nothing to protect: `NoWorkloads`, in
/// its verdict, its label and what kubectl prints, not `Unprotected`.
#[tokio::test]
async fn a_namespace_without_workloads_has_nothing_to_protect() {
    let posture = posture();
    let cp = posture.cp;
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("posture-empty").await.expect("namespace");
    let dns = create_intent(&client, "dnsManipulation", "Block").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    apply(
        &bindings,
        "dns",
        &binding("dns", &[&dns], json!({"app": "web"})),
    )
    .await;
    let namespaces = Api::<NamespacePosture>::all(client.clone());
    let posture = eventually("the namespace's intents", CONVERGE, async |_| {
        let p = namespaces.get(ns.name()).await.ok()?;
        (!p.intents.is_empty()).then_some(p)
    })
    .await;
    assert_eq!(posture.verdict, Verdict::NoWorkloads, "{posture:#?}");
    assert_eq!(posture.workloads.total, 0);
    let labels = posture.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get(nimbus_api::posture::VERDICT_LABEL)
            .map(String::as_str),
        Some("NoWorkloads")
    );
    let (ok, out, err) = kubectl(cp, &["get", "namespacepostures", ns.name()]);
    assert!(ok && shows(&out, ns.name(), "NoWorkloads"), "{out}{err}");
}

/// A workload's posture follows its pods, which alone recompute their namespace: scaled, it
/// counts them; gone, its posture goes and its namespace has no workloads. A namespace whose
/// pods did not change keeps its postures as they were, resourceVersion and all.
#[tokio::test]
async fn a_workloads_posture_follows_its_pods() {
    let posture = posture();
    let client = posture.cp.client().expect("client");
    let ns = posture
        .cp
        .test_namespace("posture-pods")
        .await
        .expect("namespace");
    let other = posture
        .cp
        .test_namespace("posture-still")
        .await
        .expect("namespace");
    let dns = create_intent(&client, "dnsManipulation", "Block").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    apply(
        &bindings,
        "dns",
        &binding("dns", &[&dns], json!({"app": "web"})),
    )
    .await;
    deployment(&client, ns.name(), "web", 1).await;
    deployment(&client, other.name(), "db", 1).await;
    let workloads = Api::<WorkloadPosture>::namespaced(client.clone(), ns.name());
    let others = Api::<WorkloadPosture>::namespaced(client.clone(), other.name());
    let namespaces = Api::<NamespacePosture>::all(client.clone());
    let pods_of = async |count: u32| {
        eventually(
            &format!("deployment-web protected with {count} pods"),
            CONVERGE,
            async |seen| {
                let web = workloads.get("deployment-web").await.ok()?;
                *seen = format!("{} pods, {:?}", web.workload.pods, web.verdict);
                (web.workload.pods == count && web.verdict == Verdict::Protected).then_some(())
            },
        )
        .await
    };
    pods_of(1).await;
    let db = eventually("deployment-db's posture", CONVERGE, async |_| {
        others.get("deployment-db").await.ok()
    })
    .await;

    deployment(&client, ns.name(), "web", 3).await;
    pods_of(3).await;
    Api::<Deployment>::namespaced(client.clone(), ns.name())
        .delete("web", &DeleteParams::foreground())
        .await
        .expect("deleting the Deployment");
    common::gone(&workloads, "deployment-web").await;
    let namespace = eventually("the namespace without workloads", CONVERGE, async |seen| {
        let p = namespaces.get(ns.name()).await.ok()?;
        *seen = format!("{:?} {:?}", p.verdict, p.workloads);
        (p.verdict == Verdict::NoWorkloads).then_some(p)
    })
    .await;
    assert_eq!(namespace.workloads.total, 0, "{namespace:#?}");

    let still = others.get("deployment-db").await.expect("deployment-db");
    assert_eq!(
        still.metadata.resource_version, db.metadata.resource_version,
        "rewritten though its pods did not change"
    );
}

/// A list above 128 KiB comes gzip-compressed through kube-apiserver to a client that accepts
/// gzip, as kube-apiserver's own lists do, and reads the same as the uncompressed list; kubectl
/// (which accepts gzip) reads it whole.
#[tokio::test]
async fn a_large_list_arrives_gzipped_through_kube_apiserver() {
    use futures::AsyncReadExt as _;
    use std::io::Read as _;
    const PODS: usize = 60;
    let cp = posture().cp;
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("posture-gzip").await.expect("namespace");
    // Each posture carries its pods' labels: 40 long ones make it about 3 KiB.
    let labels: serde_json::Map<String, serde_json::Value> = (0..40)
        .map(|i| (format!("label-{i:02}"), json!("v".repeat(60))))
        .collect();
    let pods = Api::<Pod>::namespaced(client.clone(), ns.name());
    futures::stream::iter(0..PODS)
        .for_each_concurrent(8, async |i| {
            let name = format!("app-{i:02}");
            let mut labels = labels.clone();
            labels.insert("app".into(), json!(name));
            apply(
                &pods,
                &name,
                &json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}}),
            )
            .await;
        })
        .await;
    let path = format!(
        "/apis/{}/{}/namespaces/{}/workloadpostures",
        nimbus_api::posture::GROUP,
        nimbus_api::posture::VERSION,
        ns.name()
    );
    let list = async |gzip: bool| -> Vec<u8> {
        let mut request = http::Request::get(path.as_str());
        if gzip {
            request = request.header(http::header::ACCEPT_ENCODING, "gzip");
        }
        let mut body = Vec::new();
        client
            .request_stream(request.body(Vec::new()).expect("request"))
            .await
            .expect("listing WorkloadPostures")
            .read_to_end(&mut body)
            .await
            .expect("reading the list");
        body
    };
    let plain: serde_json::Value = eventually("every pod's posture", CONVERGE, async |seen| {
        let list: serde_json::Value = serde_json::from_slice(&list(false).await).ok()?;
        let items = list["items"].as_array().map_or(0, Vec::len);
        *seen = format!("{items} postures");
        (items == PODS).then_some(list)
    })
    .await;
    let plain_len = serde_json::to_vec(&plain).expect("JSON").len();
    assert!(plain_len > 128 * 1024, "the list is only {plain_len} bytes");

    let compressed = list(true).await;
    assert!(
        compressed.starts_with(&[0x1f, 0x8b]),
        "not gzip: {:?}",
        String::from_utf8_lossy(&compressed[..compressed.len().min(200)])
    );
    assert!(
        compressed.len() < plain_len / 4,
        "{} bytes",
        compressed.len()
    );
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&compressed[..])
        .read_to_end(&mut unzipped)
        .expect("gunzip");
    let unzipped: serde_json::Value = serde_json::from_slice(&unzipped).expect("JSON");
    assert_eq!(unzipped["items"], plain["items"]);

    let (ok, out, err) = kubectl(cp, &["get", "wp", "-n", ns.name(), "-o", "name"]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), PODS, "{out}");
}

/// `kubectl explain` reads the fields from the OpenAPI the server publishes.
#[tokio::test]
async fn kubectl_explains_the_fields() {
    let cp = posture().cp;
    // kube-apiserver fetches the documents a moment after the APIService turns Available.
    let out = eventually("kubectl explain finds the kind", CONVERGE, async |seen| {
        let (ok, out, err) = kubectl(cp, &["explain", "workloadpostures.intents.engines"]);
        *seen = err;
        ok.then_some(out)
    })
    .await;
    assert!(out.contains("state") && out.contains("Enforcing"), "{out}");
    let (ok, out, err) = kubectl(cp, &["explain", "namespacepostures.workloads"]);
    assert!(ok, "{err}");
    assert!(out.contains("unprotected"), "{out}");
}

/// kube-apiserver's RBAC and the server's own SubjectAccessReview both decide: a user sees
/// only the namespaces they are granted.
#[tokio::test]
async fn a_user_sees_only_what_rbac_grants() {
    let posture = posture();
    let cp = posture.cp;
    let client = cp.client().expect("client");
    let granted = cp.test_namespace("granted").await.expect("namespace");
    let other = cp.test_namespace("other").await.expect("namespace");
    let user = unique("reader");
    apply(
        &Api::<Role>::namespaced(client.clone(), granted.name()),
        "posture-reader",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "posture-reader"},
            "rules": [{"apiGroups": ["posture.security.nimbus.com"],
                       "resources": ["workloadpostures"], "verbs": ["get", "list", "watch"]}]
        }),
    )
    .await;
    apply(
        &Api::<RoleBinding>::namespaced(client.clone(), granted.name()),
        "posture-reader",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "posture-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "posture-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
        }),
    )
    .await;
    let as_user = format!("--as={user}");

    // Through kube-apiserver.
    eventually(
        "the granted user lists its namespace",
        CONVERGE,
        async |seen| {
            let (ok, out, err) = kubectl(
                cp,
                &["get", "workloadpostures", "-n", granted.name(), &as_user],
            );
            *seen = format!("{out}{err}");
            ok.then_some(())
        },
    )
    .await;
    for args in [
        vec!["get", "workloadpostures", "-n", other.name(), &as_user],
        vec!["get", "workloadpostures", "-A", &as_user],
        vec![
            "get",
            "workloadpostures",
            "-n",
            granted.name(),
            "--as=nobody-at-all",
        ],
    ] {
        let (ok, out, err) = kubectl(cp, &args);
        assert!(!ok && err.contains("Forbidden"), "{args:?}: {out}{err}");
    }

    // Straight to the server as the front proxy (kube-apiserver's authorization bypassed): the
    // server's own SubjectAccessReview still decides.
    let as_proxy = direct_client(posture, Some(&user), true);
    let granted_list = Api::<WorkloadPosture>::namespaced(as_proxy.clone(), granted.name())
        .list(&Default::default())
        .await;
    assert!(granted_list.is_ok(), "{granted_list:?}");
    match Api::<WorkloadPosture>::namespaced(as_proxy, other.name())
        .list(&Default::default())
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("expected 403 from the server itself, got {other:?}"),
    }
}

/// A caller that is not the front proxy is turned away before anything is read.
#[tokio::test]
async fn only_the_front_proxy_may_call() {
    let posture = posture();
    // No client certificate (even with a user header, which only the proxy may set).
    let anonymous = direct_client(posture, Some("system:admin"), false);
    match Api::<NamespacePosture>::all(anonymous)
        .list(&Default::default())
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 401 => {}
        other => panic!("expected 401 without the front-proxy certificate, got {other:?}"),
    }
    // A certificate from another CA fails the TLS handshake.
    let stranger = nimbus_testenv::serving_cert(&[]).expect("another CA");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("c.crt"), &stranger.cert_pem).expect("cert");
    std::fs::write(dir.path().join("c.key"), &stranger.key_pem).expect("key");
    let mut config = direct_config(posture, Some("system:admin"));
    config.auth_info.client_certificate = Some(dir.path().join("c.crt").display().to_string());
    config.auth_info.client_key = Some(dir.path().join("c.key").display().to_string());
    let client = Client::try_from(config).expect("client");
    let refused = Api::<NamespacePosture>::all(client)
        .list(&Default::default())
        .await;
    assert!(
        matches!(refused, Err(ref e) if !matches!(e, kube::Error::Api(_))),
        "a foreign client certificate must fail the handshake: {refused:?}"
    );
}

/// kube-rs watches through kube-apiserver: from a list's version, changes only; from a version
/// the server never handed out, 410 Gone. A missing object is a 404.
#[tokio::test]
async fn watches_resume_from_a_list_and_expire_when_unknown() {
    let posture = posture();
    let client = posture.cp.client().expect("client");
    let ns = posture.cp.test_namespace("watch").await.expect("namespace");
    let api: Api<WorkloadPosture> = Api::namespaced(client.clone(), ns.name());
    let listed = api.list(&Default::default()).await.expect("list");
    let version = listed.metadata.resource_version.expect("a list version");
    let mut events = api
        .watch(&WatchParams::default().timeout(60), &version)
        .await
        .expect("watch")
        .boxed();
    deployment(&client, ns.name(), "batch", 1).await;
    let first = tokio::time::timeout(CONVERGE, events.try_next())
        .await
        .expect("an event in time")
        .expect("a watch event");
    match first {
        Some(WatchEvent::Added(added)) => {
            assert_eq!(added.metadata.name.as_deref(), Some("deployment-batch"))
        }
        other => panic!("expected the new workload ADDED, got {other:?}"),
    }

    match api.get("deployment-nonexistent").await {
        Err(kube::Error::Api(status)) if status.code == 404 && status.reason == "NotFound" => {}
        other => panic!("expected 404 NotFound, got {other:?}"),
    }

    let mut expired = api
        .watch(&WatchParams::default().timeout(10), "1")
        .await
        .expect("watch")
        .boxed();
    match tokio::time::timeout(Duration::from_secs(10), expired.next()).await {
        Ok(Some(Ok(WatchEvent::Error(status)))) => assert_eq!(status.code, 410, "{status:?}"),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

fn direct_config(posture: &Posture, user: Option<&str>) -> kube::Config {
    common::posture_direct(
        posture.port,
        &posture.cert.ca_pem,
        None,
        user.map(|u| (u, "system:authenticated")),
    )
}

/// A client calling the server directly, with the front proxy's certificate when `as_proxy`.
fn direct_client(posture: &Posture, user: Option<&str>, as_proxy: bool) -> Client {
    let mut config = direct_config(posture, user);
    if as_proxy {
        config = common::with_front_proxy_certificate(posture.cp, config);
    }
    Client::try_from(config).expect("direct client")
}

/// A pod of the preview test: `(namespace index, name, IP, container ports (name, port))`.
/// Addresses are data only: nothing is sent anywhere.
type TestPod = (
    usize,
    &'static str,
    &'static str,
    &'static [(&'static str, u16)],
);

/// Shadow mode, then promotion. While the binding is in shadow the operator writes no
/// NetworkPolicy, and the posture previews what enforcing would block; once the shadow label is
/// removed, the NetworkPolicies it writes are judged by cyclonus on every connection through
/// every Service of the test: the connections cyclonus denies are exactly those the preview
/// listed, at the same workloads and in the same direction.
#[tokio::test]
async fn the_preview_lists_exactly_what_promotion_then_denies() {
    let cp = posture().cp;
    let client = cp.client().expect("client");
    let (bound, other) = (
        cp.test_namespace("preview").await.expect("namespace"),
        cp.test_namespace("preview-peer").await.expect("namespace"),
    );
    let namespaces = [bound.name(), other.name()];
    // 100.64.0.0/10 (shared address space) is neither private nor a pod network here, so
    // denyExternalNetworkAccess refuses its ingress.
    let pods: [TestPod; 5] = [
        (0, "web", "10.244.7.10", &[("http", 8080)]),
        (0, "db", "10.244.7.11", &[("pg", 5432)]),
        (1, "api", "10.244.8.10", &[("http", 8080)]),
        (1, "peer", "10.244.8.11", &[]),
        (1, "client", "100.64.0.10", &[]),
    ];
    // (namespace index, Service, selected app, port, targetPort)
    let services = [
        (0, "web", "web", 80, json!("http")),
        (0, "db", "db", 5432, json!(5432)),
        (1, "api", "api", 8080, json!(8080)),
    ];
    for (ns, name, ip, ports) in pods {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespaces[ns]);
        let ports: Vec<_> = ports
            .iter()
            .map(|(n, p)| json!({"name": n, "containerPort": p}))
            .collect();
        common::pod_with_ip(&api, name, ip, json!(ports)).await;
    }
    for (ns, name, app, port, target) in &services {
        apply(
            &Api::<Service>::namespaced(client.clone(), namespaces[*ns]),
            name,
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                    "spec": {"selector": {"app": app},
                             "ports": [{"port": port, "targetPort": target}]}}),
        )
        .await;
    }

    let intents = [
        create_intent(&client, "dnsManipulation", "Block").await,
        create_intent(&client, "denyExternalNetworkAccess", "Block").await,
    ];
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), bound.name());
    let mut shadowed = binding("web", &[&intents[0], &intents[1]], json!({"app": "web"}));
    shadowed["metadata"]["labels"][MODE_LABEL] = json!(MODE_SHADOW);
    apply(&bindings, "web", &shadowed).await;

    // In shadow: the preview, and nothing written.
    let postures: Api<WorkloadPosture> = Api::namespaced(client.clone(), bound.name());
    let web = eventually(
        "the web pod's posture previews what enforcing would block",
        CONVERGE,
        async |seen| {
            let web = postures.get("pod-web").await.ok()?;
            *seen = format!("{web:#?}");
            (web.verdict == Verdict::Audited
                && web.preview.as_ref().is_some_and(|p| !p.blocked.is_empty()))
            .then_some(web)
        },
    )
    .await;
    let netpols = |ns: &str| Api::<NetworkPolicy>::namespaced(client.clone(), ns);
    let written = netpols(bound.name())
        .list(&Default::default())
        .await
        .expect("listing NetworkPolicies");
    assert!(written.items.is_empty(), "shadow mode wrote {written:?}");
    let not_previewed: Vec<&str> = web.preview.as_ref().map_or(Vec::new(), |p| {
        p.not_previewed.iter().map(|r| r.reason.as_str()).collect()
    });
    assert_eq!(not_previewed, ["DecidedAtRunTime"], "{web:#?}");

    // The binding's status sums it up: one workload, every connection the web pod lists.
    let listed = web.preview.as_ref().map_or(0, |p| p.blocked.len());
    let summary = eventually("the binding's status.preview", CONVERGE, async |seen| {
        let preview = bindings.get("web").await.ok()?.status?.preview?;
        *seen = format!("{preview:?}");
        (preview.connections as usize == listed).then_some(preview)
    })
    .await;
    assert_eq!(summary.workloads, 1, "{summary:?}");
    assert_eq!(summary.not_previewed, ["DecidedAtRunTime"], "{summary:?}");
    assert!(
        summary.examples.len() == listed.min(5)
            && summary.examples.iter().all(|e| e.starts_with("Pod ")),
        "{summary:?}"
    );

    // Every listed connection, across both namespaces: (workload, direction, Service, port,
    // client). A posture names nothing of another namespace: a Service or client there reads
    // `another namespace`, and connections that differ only in which one it is are listed once.
    // Only this test's pods have IPs, so every connection listed is this test's.
    let named = |r: &nimbus_api::posture::Reference| {
        if r.name.is_empty() {
            assert!(r.namespace.is_none(), "{r:?}");
            "another namespace".to_owned()
        } else {
            format!("{}/{}", r.namespace.as_deref().unwrap_or(""), r.name)
        }
    };
    let mut previewed = std::collections::BTreeSet::new();
    for ns in namespaces {
        let list = Api::<WorkloadPosture>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .expect("listing postures");
        for posture in list.items {
            for b in posture.preview.iter().flat_map(|p| &p.blocked) {
                assert!(!b.intents.is_empty(), "no intent named for {b:?}");
                for r in std::iter::once(&b.service).chain(&b.client) {
                    assert!(
                        r.name.is_empty() || r.namespace.as_deref() == Some(ns),
                        "the posture of {ns}/{} names {r:?}",
                        posture.workload.name
                    );
                }
                previewed.insert((
                    format!("{ns}/{}", posture.workload.name),
                    b.direction.clone(),
                    named(&b.service),
                    b.port,
                    b.client.as_ref().map(named),
                ));
            }
        }
    }

    // Promotion: the label goes, the NetworkPolicies come.
    bindings
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {MODE_LABEL: null}}})),
        )
        .await
        .expect("removing the shadow label");
    let policies = eventually(
        "promotion writes both NetworkPolicies",
        CONVERGE,
        async |seen| {
            let list = netpols(bound.name()).list(&Default::default()).await.ok()?;
            *seen = format!("{} NetworkPolicies", list.items.len());
            (list.items.len() == 2).then_some(list.items)
        },
    )
    .await;

    eventually(
        "the promoted binding's status has no preview",
        CONVERGE,
        async |seen| {
            let status = bindings.get("web").await.ok()?.status?;
            *seen = format!("{:?}", status.preview);
            status.preview.is_none().then_some(())
        },
    )
    .await;

    // Every connection through every Service, judged by cyclonus with what promotion wrote.
    let peer = |(ns, name, ip, _): &TestPod| {
        json!({"ip": ip, "namespace": namespaces[*ns],
               "namespaceLabels": {"kubernetes.io/metadata.name": namespaces[*ns]},
               "podLabels": {"app": name}})
    };
    let mut traffic = Vec::new();
    let mut cells = BTreeMap::new();
    for source in &pods {
        for (ns, service, app, port, target) in &services {
            let backend = pods
                .iter()
                .find(|p| p.0 == *ns && p.1 == *app)
                .expect("a backend");
            let target = match target.as_str() {
                Some(name) => backend.3.iter().find(|(n, _)| *n == name).expect("port").1,
                None => u16::try_from(target.as_u64().expect("a number")).expect("a port"),
            };
            let name = format!("{}/{}->{}/{service}", source.0, source.1, ns);
            traffic.push(json!({"name": name, "source": peer(source),
                                "destination": peer(backend), "port": target,
                                "protocol": "TCP"}));
            cells.insert(name, (source, *ns, *service, *port, backend));
        }
    }
    let decided: BTreeMap<String, serde_json::Value> =
        common::netpol_decide(&json!({"policies": policies, "traffic": traffic}));
    let mut denied = std::collections::BTreeSet::new();
    // `ns/name` as the posture of a workload in namespace `from` names it.
    let seen_from = |from: usize, ns: usize, name: &str| {
        if from == ns {
            format!("{}/{name}", namespaces[ns])
        } else {
            "another namespace".to_owned()
        }
    };
    for (name, (source, ns, service, port, backend)) in &cells {
        let verdict = &decided[name];
        if verdict["egress"] == json!(false) {
            let at = format!("{}/{}", namespaces[source.0], source.1);
            let service = seen_from(source.0, *ns, service);
            denied.insert((at, "Egress".to_owned(), service, *port, None));
        }
        if verdict["ingress"] == json!(false) {
            let at = format!("{}/{}", namespaces[backend.0], backend.1);
            let client = seen_from(backend.0, source.0, source.1);
            let service = seen_from(backend.0, *ns, service);
            denied.insert((at, "Ingress".to_owned(), service, *port, Some(client)));
        }
    }
    assert!(!denied.is_empty(), "cyclonus denied nothing: {decided:?}");
    assert_eq!(
        previewed, denied,
        "the preview (left) and what cyclonus denies after promotion (right) differ"
    );
}

/// The posture as OpenReports `Report`s, accepted by kube-apiserver under the upstream CRD:
/// one per workload a bound intent selects, whose results say what the posture API says of it,
/// through shadow mode and unbinding, and nothing written while nothing changes.
#[tokio::test]
async fn reports_say_what_the_posture_says() {
    let cp = posture().cp;
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("reports").await.expect("namespace");
    for app in ["web", "db"] {
        bare_pod(&client, ns.name(), app).await;
    }
    let intents = [
        create_intent(&client, "dnsManipulation", "Block").await,
        create_intent(&client, "escapeToHost", "Block").await,
    ];
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    let mut web = binding("web", &[&intents[0], &intents[1]], json!({"app": "web"}));
    apply(&bindings, "web", &web).await;

    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("openreports.io", "v1alpha1", "Report"),
        "reports",
    );
    let reports: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns.name(), &resource);
    let postures: Api<WorkloadPosture> = Api::namespaced(client.clone(), ns.name());
    // What the report says of each intent, and what the posture API says.
    let agree = |expected: &'static str| {
        let (reports, postures) = (reports.clone(), postures.clone());
        async move {
            eventually(
                &format!(
                    "the web pod's report to say {expected} for both intents, as its posture does"
                ),
                CONVERGE,
                async |seen| {
                    let report = reports.get("nimbus-pod-web").await.ok()?;
                    let posture = postures.get("pod-web").await.ok()?;
                    let said: Vec<(String, String)> = report.data["results"]
                        .as_array()?
                        .iter()
                        .map(|r| {
                            (
                                r["rule"].as_str().unwrap_or_default().to_owned(),
                                r["result"].as_str().unwrap_or_default().to_owned(),
                            )
                        })
                        .collect();
                    let judged: Vec<(String, String)> = posture
                        .intents
                        .iter()
                        .map(|i| {
                            (
                                i.id.clone(),
                                match i.verdict {
                                    Verdict::Protected => "pass",
                                    Verdict::Audited => "warn",
                                    _ => "fail",
                                }
                                .to_owned(),
                            )
                        })
                        .collect();
                    *seen = format!("report {said:?}, posture {judged:?}");
                    let mut sorted = judged.clone();
                    sorted.sort();
                    (said == sorted
                        && said.len() == 2
                        && said.iter().all(|(_, r)| r == expected)
                        && report.data["scope"]["name"] == "web"
                        && report.data["source"] == "nimbus")
                        .then_some(report)
                },
            )
            .await
        }
    };
    let enforced = agree("pass").await;
    assert_eq!(enforced.data["summary"]["pass"], 2, "{:?}", enforced.data);
    let owner = &enforced.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Pod", "web"));
    assert!(
        reports
            .get_opt("nimbus-pod-db")
            .await
            .expect("reading")
            .is_none(),
        "a workload no intent selects has no report"
    );

    // A report is written only when a result changes: over a quiet spell, every version of it
    // says something the one before did not (other tests of this binary remove and restore
    // engine CRDs meanwhile, which changes results legitimately).
    let version = enforced
        .metadata
        .resource_version
        .clone()
        .expect("a version");
    let params = WatchParams::default().timeout(10);
    let events: Vec<_> = reports
        .watch(&params, &version)
        .await
        .expect("watching reports")
        .try_collect()
        .await
        .expect("the watch");
    let without_timestamps = |report: &DynamicObject| {
        let mut results = report.data["results"].clone();
        for r in results.as_array_mut().into_iter().flatten() {
            r["timestamp"].take();
        }
        results
    };
    let mut before = without_timestamps(&enforced);
    for event in events {
        if let WatchEvent::Modified(report) = event {
            let now = without_timestamps(&report);
            assert_ne!(now, before, "rewritten with the same results");
            before = now;
        }
    }

    // Drift: a report deleted by hand, while nothing the posture reads changes, is written
    // again.
    reports
        .delete("nimbus-pod-web", &DeleteParams::default())
        .await
        .expect("deleting the report");
    let restored = agree("pass").await;
    assert_ne!(restored.metadata.uid, enforced.metadata.uid, "not deleted");

    // Shadow mode: warn.
    web["metadata"]["labels"][MODE_LABEL] = json!(MODE_SHADOW);
    apply(&bindings, "web", &web).await;
    agree("warn").await;

    // Unbound: the report goes.
    bindings
        .delete("web", &DeleteParams::default())
        .await
        .expect("deleting the binding");
    common::gone(&reports, "nimbus-pod-web").await;
}

/// What the book (docs/src/posture-api.md) promises of list and watch, through kube-apiserver as clients use it:
/// `limit`/`continue` pages through every object once, the verdict label and `metadata.name`
/// select, a streaming watch (`sendInitialEvents`) sends every object then a bookmark marking
/// the end of the initial events, and every write is refused with 405.
#[tokio::test]
async fn list_and_watch_keep_the_api_contract() {
    let cp = posture().cp;
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("contract").await.expect("namespace");
    let apps = ["cache", "db", "web"];
    for app in apps {
        bare_pod(&client, ns.name(), app).await;
    }
    let si = create_intent(&client, "dnsManipulation", "Block").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    apply(
        &bindings,
        "web",
        &binding("web", &[&si], json!({"app": "web"})),
    )
    .await;
    let api: Api<WorkloadPosture> = Api::namespaced(client.clone(), ns.name());
    let names = |items: &[WorkloadPosture]| -> Vec<String> {
        items
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    };
    let all: Vec<String> = apps.iter().map(|a| format!("pod-{a}")).collect();
    eventually(
        "web Protected, the others Unprotected",
        CONVERGE,
        async |seen| {
            let list = api.list(&Default::default()).await.ok()?;
            let verdicts: Vec<_> = list
                .items
                .iter()
                .map(|p| (p.metadata.name.clone(), p.verdict))
                .collect();
            *seen = format!("{verdicts:?}");
            (names(&list.items) == all
                && list.items.iter().all(|p| {
                    (p.verdict == Verdict::Protected)
                        == (p.metadata.name.as_deref() == Some("pod-web"))
                }))
            .then_some(())
        },
    )
    .await;

    // Pages of one, each object once, in order.
    let mut paged = Vec::new();
    let mut params = ListParams::default().limit(1);
    loop {
        let page = api.list(&params).await.expect("a page");
        assert!(page.items.len() <= 1, "a page of {}", page.items.len());
        paged.extend(names(&page.items));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = ListParams::default().limit(1).continue_token(&token),
            None => break,
        }
    }
    assert_eq!(paged, all);

    // Selectors.
    let selected = |params: ListParams| {
        let api = api.clone();
        async move { names(&api.list(&params).await.expect("a selected list").items) }
    };
    // Another test of this binary removes and restores KubeArmor's CRD, which moves verdicts:
    // the selector must pick exactly the postures whose own verdict matches, in one moment.
    let verdict = |v: &str| ListParams::default().labels(&format!("{VERDICT_LABEL}={v}"));
    eventually(
        "each verdict selector to select exactly the postures with that verdict",
        CONVERGE,
        async |seen| {
            let before = api.list(&Default::default()).await.ok()?.items;
            let mut found = Vec::new();
            for v in [Verdict::Protected, Verdict::Partial, Verdict::Unprotected] {
                let expected: Vec<String> = names(&before)
                    .into_iter()
                    .zip(&before)
                    .filter(|(_, p)| p.verdict == v)
                    .map(|(n, _)| n)
                    .collect();
                found.push((v, expected.clone(), selected(verdict(v.as_str())).await));
            }
            let after = api.list(&Default::default()).await.ok()?.items;
            *seen = format!("{found:?}");
            // Verdicts that moved meanwhile prove nothing: look again.
            let steady = before
                .iter()
                .map(|p| p.verdict)
                .eq(after.iter().map(|p| p.verdict));
            (steady && found.iter().all(|(_, expected, got)| expected == got)).then_some(())
        },
    )
    .await;
    assert_eq!(
        selected(ListParams::default().fields("metadata.name=pod-db")).await,
        ["pod-db"]
    );

    // A streaming list: every object, then the bookmark that ends the initial events.
    let mut events = api
        .watch(&WatchParams::streaming_lists().timeout(30), "0")
        .await
        .expect("a streaming watch")
        .boxed();
    let mut initial = Vec::new();
    loop {
        let event = tokio::time::timeout(CONVERGE, events.try_next())
            .await
            .expect("an event in time")
            .expect("a watch event")
            .expect("the watch to go on");
        match event {
            WatchEvent::Added(p) => initial.extend(p.metadata.name),
            WatchEvent::Bookmark(b) => {
                let end = b.metadata.annotations.get("k8s.io/initial-events-end");
                assert_eq!(
                    end.map(String::as_str),
                    Some("true"),
                    "{:?}",
                    b.metadata.annotations
                );
                break;
            }
            other => panic!("expected ADDED events then a bookmark, got {other:?}"),
        }
    }
    initial.sort();
    assert_eq!(initial, all);

    // Read-only: every write is refused.
    let refused = |result: Result<WorkloadPosture, kube::Error>| match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let some = api.get("pod-db").await.expect("pod-db");
    assert_eq!(refused(api.create(&Default::default(), &some).await), 405);
    assert_eq!(
        refused(api.replace("pod-db", &Default::default(), &some).await),
        405
    );
    let patch = Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}));
    assert_eq!(
        refused(api.patch("pod-db", &PatchParams::default(), &patch).await),
        405
    );
    match api.delete("pod-db", &DeleteParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 405, "{status:?}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A bundle applied as `nimbus bundle` prints it: the namespace's posture shows its
/// framework's controls covered on the selected workload, proven where an efficacy test proves
/// the enforcing engine (Kyverno, NetworkPolicy), unproven where none does (KubeArmor), and
/// `kubectl get` prints the score.
#[tokio::test]
async fn a_bundle_covers_its_frameworks_controls_on_the_selected_workloads() {
    let posture = posture();
    let cp = posture.cp;
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("bundle").await.expect("namespace");
    deployment(&client, ns.name(), "web", 1).await;
    deployment(&client, ns.name(), "other", 1).await;

    let bundle = Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(["bundle", "cis-kubernetes", "-n", ns.name(), "-l", "app=web"])
        .output()
        .expect("nimbus bundle");
    assert!(bundle.status.success(), "{bundle:?}");
    let mut apply = Command::new(tools_dir().join("kubectl"))
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", cp.kubeconfig_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl apply");
    std::io::Write::write_all(&mut apply.stdin.take().expect("stdin"), &bundle.stdout)
        .expect("writing the bundle");
    let applied = apply.wait_with_output().expect("kubectl apply");
    assert!(applied.status.success(), "{applied:?}");

    let api = Api::<NamespacePosture>::all(client.clone());
    let counts =
        |c: &nimbus_api::posture::ControlCoverage| (c.proven, c.unproven, c.audited, c.not_covered);
    let cis = eventually(
        "the namespace's posture shows CIS covered on web",
        CONVERGE,
        async |seen| {
            let posture = api.get(ns.name()).await.ok()?;
            let cis = posture
                .compliance
                .into_iter()
                .find(|f| f.framework == "cis-kubernetes")?;
            *seen = format!("{cis:#?}");
            let control = |id: &str| cis.controls.iter().find(|c| c.id == id).map(counts);
            (control("5.2.2") == Some((1, 0, 0, 1))
                && control("5.3.2") == Some((1, 0, 0, 1))
                && control("5.1.6") == Some((0, 1, 0, 1)))
            .then_some(cis)
        },
    )
    .await;
    // The covered workload is the selected one, bound by the bundle's binding.
    let web = Api::<WorkloadPosture>::namespaced(client.clone(), ns.name())
        .get("deployment-web")
        .await
        .expect("deployment-web");
    // The posture knows which bundle each intent came from, by the SecurityIntent's label.
    let bound: BTreeSet<(&str, &str, Option<&str>)> = web
        .intents
        .iter()
        .filter_map(|i| {
            Some((
                i.id.as_str(),
                i.binding.as_ref()?.name.as_str(),
                i.bundle.as_deref(),
            ))
        })
        .collect();
    let bundled = Some("cis-kubernetes");
    assert_eq!(
        bound,
        BTreeSet::from([
            ("denyExternalNetworkAccess", "cis-kubernetes", bundled),
            ("escapeToHost", "cis-kubernetes", bundled),
            ("unAuthorizedSaTokenAccess", "cis-kubernetes", bundled),
        ]),
        "{web:#?}"
    );
    // Nothing of the bundle addresses 5.7.1 (namespaceSandbox is never bundled).
    let sandbox = cis
        .controls
        .iter()
        .find(|c| c.id == "5.7.1")
        .expect("5.7.1");
    assert_eq!(counts(sandbox), (0, 0, 0, 2));
    let proofs = &cis
        .controls
        .iter()
        .find(|c| c.id == "5.2.2")
        .expect("5.2.2")
        .proofs;
    assert!(
        proofs
            .iter()
            .any(|p| p == "kyverno-escapeToHost-restricted"),
        "{proofs:?}"
    );
    // 10 controls on 2 workloads: 9 covered on web (8 proven), none on other.
    assert_eq!((cis.workloads, cis.score, cis.proven_score), (2, 45, 40));

    // As docs/src/compliance.md's "Coverage in the posture API" shows: ATT&CK 4 of 5 controls on web (T1190,
    // T1611 proven), CIS, NSA/CISA 7 of 7 (6 proven), FiGHT 1 of 4 (FGT1611, proven).
    let (ok, out, err) = kubectl(cp, &["get", "namespacepostures", ns.name()]);
    assert!(
        ok && out
            .contains("40% (20% proven)   45% (40% proven)   50% (42% proven)   12% (12% proven)"),
        "{out}{err}"
    );
    let header = out.lines().next().unwrap_or_default();
    assert!(
        header.contains("ATT&CK") && header.contains("CIS") && header.contains("FIGHT"),
        "{out}"
    );
}

/// `nimbus report` writes one self-contained HTML file from the live posture API; headless
/// Chromium renders it (a screenshot), its DOM read back shows the posture API's numbers in the
/// charts, and nothing was fetched from the network.
#[tokio::test]
async fn the_html_report_shows_the_posture_apis_numbers_in_a_browser() {
    let posture = posture();
    let cp = posture.cp;
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("report").await.expect("namespace");
    deployment(&client, ns.name(), "web", 1).await;
    deployment(&client, ns.name(), "other", 1).await;
    let bundle = Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(["bundle", "nsa-cisa", "-n", ns.name(), "-l", "app=web"])
        .output()
        .expect("nimbus bundle");
    let mut apply = Command::new(tools_dir().join("kubectl"))
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", cp.kubeconfig_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl apply");
    std::io::Write::write_all(&mut apply.stdin.take().expect("stdin"), &bundle.stdout)
        .expect("writing the bundle");
    assert!(
        apply
            .wait_with_output()
            .expect("kubectl apply")
            .status
            .success()
    );

    // The report is compared with the posture read just before and just after it was written,
    // the two equal: the posture of the other controls may still be settling when C-0057's is.
    let api = Api::<NamespacePosture>::all(client.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("report.html");
    let namespace = eventually(
        "the namespace's posture shows NSA/CISA covered on web, unchanged while reported",
        CONVERGE,
        async |seen| {
            let posture = api.get(ns.name()).await.ok()?;
            *seen = format!("{:#?}", posture.compliance);
            let nsa = posture
                .compliance
                .iter()
                .find(|f| f.framework == "nsa-cisa")?;
            let c = nsa.controls.iter().find(|c| c.id == "C-0057")?;
            if c.proven != 1 || posture.workloads.total != 2 {
                return None;
            }
            let report = Command::new(env!("CARGO_BIN_EXE_nimbus"))
                .args(["report", "-n", ns.name(), "-o"])
                .arg(&page)
                .env("KUBECONFIG", cp.kubeconfig_path())
                .output()
                .expect("nimbus report");
            assert!(report.status.success(), "{report:?}");
            let after = api.get(ns.name()).await.ok()?;
            (after.compliance == posture.compliance).then_some(posture)
        },
    )
    .await;

    let started = std::time::Instant::now();
    let screenshot = dir.path().join("report.png");
    headless(
        &page,
        &format!("--screenshot={}", screenshot.display()),
        &dir.path().join("net-screenshot.json"),
    );
    let png = std::fs::read(&screenshot).expect("the screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
    if std::env::var_os("NIMBUS_UPDATE_DOCS").is_some() {
        // The screenshot docs/src/reports.md shows.
        let docs = common::workspace_root().join("docs/src/compliance-report.png");
        std::fs::create_dir_all(docs.parent().expect("docs/src")).expect("docs/src/");
        std::fs::write(docs, &png).expect("writing the screenshot");
    }
    let dom = headless(&page, "--dump-dom", &dir.path().join("net-dom.json"));
    eprintln!("chromium rendered the report in {:?}", started.elapsed());

    // The charts, as the browser parsed them, against the posture API.
    let sections: Vec<&str> = dom.split("<section class=\"framework\"").skip(1).collect();
    assert_eq!(sections.len(), namespace.compliance.len(), "{dom}");
    for section in sections {
        let framework = attr(section, "data-framework").expect("data-framework");
        let api = namespace
            .compliance
            .iter()
            .find(|f| f.framework == framework)
            .unwrap_or_else(|| panic!("{framework} is not in the posture"));
        let score = section.split("class=\"score\"").nth(1).expect("score");
        assert!(score.starts_with(&format!(" data-score=\"{}\">{}%<", api.score, api.score)));
        let charted: Vec<(String, [u32; 4], String)> = section
            .split("<g class=\"control\"")
            .skip(1)
            .map(|g| {
                let n = |a: &str| attr(g, a).and_then(|v| v.parse().ok()).expect("a count");
                let shown = g
                    .split("class=\"counts\"")
                    .nth(1)
                    .and_then(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].to_owned()))
                    .expect("the counts shown");
                (
                    attr(g, "data-control").expect("data-control").to_owned(),
                    [
                        n("data-proven"),
                        n("data-unproven"),
                        n("data-audited"),
                        n("data-not-covered"),
                    ],
                    shown,
                )
            })
            .collect();
        let expected: Vec<(String, [u32; 4], String)> = api
            .controls
            .iter()
            .map(|c| {
                (
                    c.id.to_string(),
                    [c.proven, c.unproven, c.audited, c.not_covered],
                    format!(
                        "{} proven, {} unproven, {} audited, {} not covered",
                        c.proven, c.unproven, c.audited, c.not_covered
                    ),
                )
            })
            .collect();
        assert_eq!(charted, expected, "{framework}");
    }
    // The unprotected workload is listed, and the proof behind "proven".
    assert!(dom.contains("data-workload=\"Deployment/other\""), "{dom}");
    assert!(
        dom.contains("id=\"proof-kyverno-escapeToHost-restricted\""),
        "{dom}"
    );

    // Nothing was fetched for the page but the file itself.
    for log in ["net-screenshot.json", "net-dom.json"] {
        browser::assert_fetched_nothing(&dir.path().join(log), "report.html");
    }
}

/// The same report as OSCAL assessment results validates against NIST's OSCAL model
/// (compliance-trestle, pinned, in the venv `make test` caches) and carries the posture API's
/// numbers, one finding per control.
#[tokio::test]
async fn the_oscal_report_is_valid_oscal_with_the_posture_apis_numbers() {
    let posture = posture();
    let cp = posture.cp;
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("oscal").await.expect("namespace");
    deployment(&client, ns.name(), "web", 1).await;
    let api = Api::<NamespacePosture>::all(client.clone());
    let namespace = eventually("the namespace's posture", CONVERGE, async |_| {
        let p = api.get(ns.name()).await.ok()?;
        (p.workloads.total == 1 && !p.compliance.is_empty()).then_some(p)
    })
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("report.json");
    let report = Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(["report", "--format", "oscal", "-n", ns.name(), "-o"])
        .arg(&file)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .output()
        .expect("nimbus report");
    assert!(report.status.success(), "{report:?}");

    let cache = std::env::var_os("NIMBUS_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(|x| std::path::PathBuf::from(x).join("nimbus-rs"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/nimbus-rs"))
        })
        .expect("a cache directory");
    let python = cache.join("oscal/venv-trestle-5.2.0/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: `make test` installs compliance-trestle there \
         (hack/install-test-tools.sh)",
        python.display()
    );
    let validate = |path: &std::path::Path| {
        Command::new(&python)
            .arg(common::workspace_root().join("hack/validate-oscal.py"))
            .arg(path)
            .output()
            .expect("running the OSCAL validator")
    };
    let valid = validate(&file);
    assert!(
        valid.status.success(),
        "{}{}",
        String::from_utf8_lossy(&valid.stdout),
        String::from_utf8_lossy(&valid.stderr)
    );

    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("report")).expect("JSON");
    let result = &doc["assessment-results"]["results"][0];
    let controls: usize = namespace.compliance.iter().map(|f| f.controls.len()).sum();
    assert_eq!(result["findings"].as_array().map(Vec::len), Some(controls));
    let nsa = namespace
        .compliance
        .iter()
        .find(|f| f.framework == "nsa-cisa")
        .expect("nsa-cisa");
    let c = nsa
        .controls
        .iter()
        .find(|c| c.id == "C-0057")
        .expect("C-0057");
    let observation = result["observations"]
        .as_array()
        .expect("observations")
        .iter()
        .find(|o| {
            o["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("C-0057 "))
        })
        .expect("C-0057's observation");
    let prop = |name: &str| {
        observation["props"]
            .as_array()
            .and_then(|props| props.iter().find(|p| p["name"] == name))
            .and_then(|p| p["value"].as_str())
            .map(str::to_owned)
    };
    assert_eq!(prop("not-covered"), Some(c.not_covered.to_string()));
    assert_eq!(prop("proven"), Some(c.proven.to_string()));

    // The validator refuses what NIST's model refuses, so the check above can fail.
    let mut broken = doc.clone();
    broken["assessment-results"]["results"][0]["findings"][0]["target"]["type"] =
        serde_json::json!("not-a-target-type");
    let bad = dir.path().join("broken.json");
    std::fs::write(&bad, broken.to_string()).expect("broken.json");
    assert!(!validate(&bad).status.success());
}

/// A SecurityIntentException in force shows on the workloads it lets out, in the posture and in
/// their reports, named with its reason and expiry, and never as Protected; at its expiry they
/// are judged as before. Every engine enforcing the intent there honours it (Kyverno with a
/// PolicyException, KubeArmor leaving the pods out of its selector): the intent is `Excepted`
/// on them (`Partial` where an engine does not honour it: `core::posture::excepted`).
#[tokio::test]
async fn an_exception_shows_on_the_workloads_it_lets_out_until_it_expires() {
    use k8s_openapi::jiff::{SignedDuration, Timestamp, Unit};
    let cp = posture().cp;
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("excepted").await.expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    for tier in ["web", "legacy"] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": tier, "labels": {"app": "shop", "tier": tier}},
            "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}});
        apply(&pods, tier, &pod).await;
    }
    let escape = create_intent(&client, "escapeToHost", "Block").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    let both = binding("both", &[&escape], json!({"app": "shop"}));
    apply(&bindings, "both", &both).await;
    let postures: Api<WorkloadPosture> = Api::namespaced(client.clone(), ns.name());
    let judged = async |pod: &str, verdict: Verdict, exceptions: &[&str]| {
        eventually(
            &format!("{pod}: escapeToHost {verdict:?}, excepted by {exceptions:?}"),
            CONVERGE,
            async |seen| {
                let p = postures.get(pod).await.ok()?;
                let intent = p.intents.iter().find(|i| i.id == "escapeToHost")?;
                let named: Vec<&str> = intent.exceptions.iter().map(|e| e.name.as_str()).collect();
                *seen = format!("{:?} {named:?} {:?}", intent.verdict, intent.reasons);
                (intent.verdict == verdict && named == exceptions).then(|| intent.clone())
            },
        )
        .await
    };
    judged("pod-legacy", Verdict::Protected, &[]).await;

    let expires_at = Timestamp::now()
        .round(Unit::Second)
        .expect("rounded")
        .checked_add(SignedDuration::from_secs(20))
        .expect("expiry");
    let exceptions: Api<nimbus_api::SecurityIntentException> =
        Api::namespaced(client.clone(), ns.name());
    apply(
        &exceptions,
        "vendor-agent",
        &json!({
            "apiVersion": "exceptions.security.nimbus.com/v1alpha1",
            "kind": "SecurityIntentException",
            "metadata": {"name": "vendor-agent"},
            "spec": {
                "binding": {"kind": "SecurityIntentBinding", "name": "both"},
                "intents": [escape],
                "selector": {"matchLabels": {"tier": "legacy"}},
                "reason": "the vendor's agent until 2.4",
                "expiresAt": expires_at.to_string(),
            }
        }),
    )
    .await;
    // Every engine honours it: Excepted, and never Protected.
    let excepted = judged("pod-legacy", Verdict::Excepted, &["vendor-agent"]).await;
    assert!(
        Timestamp::now() < expires_at,
        "honoured only after it expired"
    );
    assert_eq!(
        excepted.exceptions[0].reason,
        "the vendor's agent until 2.4"
    );
    assert_eq!(excepted.exceptions[0].expires_at.0, expires_at);
    let reasons: BTreeSet<&str> = excepted.reasons.iter().map(|r| r.reason.as_str()).collect();
    assert!(
        reasons.contains("Excepted") && !reasons.contains("ExceptionNotHonoured"),
        "{reasons:?}"
    );
    judged("pod-web", Verdict::Protected, &[]).await;
    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("openreports.io", "v1alpha1", "Report"),
        "reports",
    );
    let reports: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns.name(), &resource);
    eventually("the report names the exception", CONVERGE, async |seen| {
        let report = reports.get("nimbus-pod-legacy").await.ok()?;
        let result = report.data["results"].as_array()?.first()?.clone();
        *seen = format!("{result}");
        result["properties"]["exceptions"]
            .as_str()?
            .starts_with("SecurityIntentException vendor-agent (until ")
            .then_some(())
    })
    .await;

    // At expiry: judged as before.
    judged("pod-legacy", Verdict::Protected, &[]).await;
    assert!(
        Timestamp::now() >= expires_at,
        "the exception ended before it expired"
    );
}
