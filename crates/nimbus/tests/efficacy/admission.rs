//! escapeToHost, cocoWorkload and unAuthorizedSaTokenAccess enforced by the `admission` engine:
//! the ValidatingAdmissionPolicies and MutatingAdmissionPolicies the operator writes, evaluated
//! by kube-apiserver (v1.36) itself. The operator runs on a control plane of its own with every
//! engine's CRDs installed (Kyverno's too: the engine preference, `admission,kyverno`, is what
//! makes the admission engine write); pods and Deployments are created through that API server
//! with dry run, and each cell is what the API server answered: admitted, denied (with the
//! policy's message), admitted with a warning (Audit), or the object as mutated.

use crate::common::{CONVERGE, engine_crds, install_engine_crd};
// Pod specs, from most to least privileged: the same as the Kyverno matrices'.
use crate::kyverno::{PODS, container};
use crate::matrix::Matrix;
use crate::{Selecting, bind_cluster, intent, unbind_cluster};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use nimbus_api::ClusterNimbusPolicy;
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    self, MUTATING_ADMISSION_POLICY, MUTATING_ADMISSION_POLICY_BINDING, NativeKind, Preference,
    VALIDATING_ADMISSION_POLICY, VALIDATING_ADMISSION_POLICY_BINDING,
};
use nimbus_testenv::{ControlPlane, Options, TestNamespace, apply_yaml, eventually};
use serde_json::{Value, json};
use std::sync::OnceLock;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The kube-apiserver release deciding (the pinned control plane).
const DECIDER: &str = "kube-apiserver v1.36";

/// A control plane with the Nimbus and engine CRDs installed, no operator yet.
pub(crate) async fn control_plane() -> ControlPlane {
    let cp = ControlPlane::start(Options::default())
        .await
        .expect("control plane");
    let client = cp.client().expect("client");
    let nimbus = nimbus_api::crds_yaml().expect("Nimbus CRDs");
    apply_yaml(&client, &nimbus).await.expect("Nimbus CRDs");
    for crd in engine_crds() {
        install_engine_crd(&client, crd).await;
    }
    cp
}

/// The operator on `cp` with `preference`, on a thread and runtime of its own, until `stop` is
/// cancelled (the thread then ends).
fn run_operator(
    cp: &ControlPlane,
    preference: &str,
    stop: CancellationToken,
) -> std::thread::JoinHandle<()> {
    let config = cp.config().clone();
    let preference: Preference = preference.parse().expect("a preference");
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("operator runtime");
        runtime.block_on(async move {
            let client = Client::try_from(config).expect("operator client");
            let config = nimbus_operator::Config {
                engine_preference: preference,
                ..Default::default()
            };
            if let Err(e) = nimbus_operator::run(client, config, stop).await {
                panic!("operator failed: {e}");
            }
        });
    })
}

/// The control plane of the matrices, with the operator preferring the admission engine
/// (started once per process).
pub(crate) fn cluster() -> &'static ControlPlane {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    PLANE.get_or_init(|| {
        std::thread::spawn(|| {
            let cp = tokio::runtime::Runtime::new()
                .expect("runtime")
                .block_on(control_plane());
            // Runs for the rest of the process.
            std::mem::forget(run_operator(
                &cp,
                "admission,kyverno",
                CancellationToken::new(),
            ));
            cp
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
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

/// What the API server answered a dry-run write.
pub(crate) struct Answer {
    /// The object as it would be stored (mutations applied), or the refusal's Status.
    pub(crate) body: Value,
    pub(crate) allowed: bool,
    /// The `Warning` headers' texts.
    pub(crate) warnings: Vec<String>,
}

/// Sends `body` to `path` with dry run: only admission sees it. `method` `POST` creates
/// (`path` a collection); `PATCH` applies `body` to the object at `path`: a JSON Patch when it is
/// an array, else a JSON merge patch.
pub(crate) async fn dry_run(client: &Client, method: &str, path: &str, body: &Value) -> Answer {
    let content_type = match (method, body.is_array()) {
        ("PATCH", true) => "application/json-patch+json",
        ("PATCH", false) => "application/merge-patch+json",
        _ => "application/json",
    };
    let request = http::Request::builder()
        .method(method)
        .uri(format!("{path}?dryRun=All"))
        .header("content-type", content_type)
        .body(kube::client::Body::from(
            serde_json::to_vec(body).expect("json"),
        ))
        .expect("request");
    let response = client.send(request).await.expect("the API server answers");
    let allowed = response.status().is_success();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|w| w.to_str().ok())
        .map(|w| {
            // `299 - "text"`
            w.splitn(3, ' ')
                .nth(2)
                .unwrap_or(w)
                .trim_matches('"')
                .to_owned()
        })
        .collect();
    let bytes = response
        .into_body()
        .collect_bytes()
        .await
        .expect("a response body");
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        body,
        allowed,
        warnings,
    }
}

async fn dry_run_create(client: &Client, path: &str, object: &Value) -> Answer {
    dry_run(client, "POST", path, object).await
}

/// The setup of one matrix: the intent bound by a ClusterSecurityIntentBinding selecting the
/// `app: web` workloads of one namespace (in shadow mode, when asked); another namespace is
/// not bound.
struct Bound {
    client: Client,
    by_csib: TestNamespace,
    unbound: TestNamespace,
    csib: String,
}

impl Bound {
    async fn new(id: &str, action: &str, params: Value, shadow: bool) -> Bound {
        let mut b = Bound::namespaces().await;
        b.bind(id, action, params, shadow).await;
        b
    }

    /// The namespaces, nothing bound yet.
    async fn namespaces() -> Bound {
        let cp = cluster();
        Bound {
            client: cp.client().expect("client"),
            by_csib: namespace(cp, "eff-adm-csib").await,
            unbound: namespace(cp, "eff-adm-unbound").await,
            csib: String::new(),
        }
    }

    /// Binds the intent; returns once the API server enforces it (in shadow mode: once the
    /// binding's status is settled).
    async fn bind(&mut self, id: &str, action: &str, params: Value, shadow: bool) {
        let si = intent(&self.client, id, action, params).await;
        let selecting = Selecting {
            labels: json!({"app": "web"}),
            allow_sensitive: None,
            shadow,
        };
        self.csib = bind_cluster(&self.client, self.by_csib.name(), &si, &selecting).await;
        if !shadow {
            self.enforced(id, action).await;
        }
    }

    /// Waits until the API server enforces the admission engine's policy for `id`: its policy
    /// and binding exist, and the API server has loaded them (it refreshes its admission
    /// policies about every second), as a probe shows.
    async fn enforced(&self, id: &str, action: &str) {
        let kinds: [&NativeKind; 2] = if id == "escapeToHost" {
            [
                &VALIDATING_ADMISSION_POLICY,
                &VALIDATING_ADMISSION_POLICY_BINDING,
            ]
        } else {
            [
                &MUTATING_ADMISSION_POLICY,
                &MUTATING_ADMISSION_POLICY_BINDING,
            ]
        };
        let name = self.policy(id);
        for kind in kinds {
            let api = Api::<DynamicObject>::all_with(self.client.clone(), &kind.api_resource());
            eventually(&format!("{} {name}", kind.kind), CONVERGE, async |_| {
                api.get_opt(&name).await.ok()?.map(drop)
            })
            .await;
        }
        let ns = self.by_csib.name();
        eventually(&format!("{name} to be enforced"), CONVERGE, async |seen| {
            let answer = match id {
                "escapeToHost" => {
                    let path = format!("/api/v1/namespaces/{ns}/pods");
                    dry_run_create(&self.client, &path, &pod("web", PODS[0].1())).await
                }
                "cocoWorkload" => {
                    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments");
                    let spec = json!({"containers": [container(json!({}))]});
                    dry_run_create(&self.client, &path, &deployment("web", spec)).await
                }
                _ => {
                    let path = format!("/api/v1/namespaces/{ns}/pods");
                    let spec = json!({"containers": [container(json!({}))]});
                    dry_run_create(&self.client, &path, &pod("web", spec)).await
                }
            };
            *seen = format!("{} {:?}", answer.body, answer.warnings);
            let enforced = match (id, action) {
                ("escapeToHost", "Block") => !answer.allowed,
                ("escapeToHost", _) => !answer.warnings.is_empty(),
                ("cocoWorkload", _) => {
                    answer.body["spec"]["template"]["spec"]["runtimeClassName"].is_string()
                }
                _ => answer.body["spec"]["automountServiceAccountToken"] == false,
            };
            enforced.then_some(())
        })
        .await;
    }

    /// The policy's name (also its binding's).
    fn policy(&self, id: &str) -> String {
        format!("{}-{}", self.csib, id.to_lowercase())
    }

    /// `(column, namespace, app label)` of the workloads tried.
    fn subjects(&self, binding: &str) -> Vec<(String, String, &'static str)> {
        let (bound, unbound) = (self.by_csib.name(), self.unbound.name());
        vec![
            (format!("selected, {binding}"), bound.to_owned(), "web"),
            (format!("unselected, {binding}"), bound.to_owned(), "db"),
            (
                "in an unbound namespace".to_owned(),
                unbound.to_owned(),
                "web",
            ),
        ]
    }

    async fn done(self) {
        unbind_cluster(&self.client, &self.csib).await;
    }
}

// ---------------------------------------------------------------------------------------------
// escapeToHost: a ValidatingAdmissionPolicy

fn pod(app: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "eff-", "labels": {"app": app}},
        "spec": spec,
    })
}

/// A Deployment labelled `app` whose pods have `spec`.
fn deployment(app: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"generateName": "eff-", "labels": {"app": app}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": spec},
        },
    })
}

/// Whether the Pod Security check at `level` forbids `pod`.
fn forbidden(level: &str, pod: &str) -> bool {
    match pod {
        "restricted" => false,
        "runs as root, no seccomp profile (baseline)" => level == "restricted",
        _ => true,
    }
}

/// The text of a failed check in a message of policy `policy`: what follows
/// `Pod Security Standard): `. Panics when the message is not the policy's.
fn check_of(message: &str, policy: &str) -> String {
    assert!(
        message.contains(&format!("ValidatingAdmissionPolicy '{policy}'")),
        "not a message of {policy}: {message}"
    );
    message
        .split("Pod Security Standard): ")
        .nth(1)
        .unwrap_or(message)
        .to_owned()
}

/// `admitted`, `denied (<failed check>)`, or `admitted, warned (<failed check>)`.
fn verdict(answer: &Answer, policy: &str) -> String {
    if !answer.allowed {
        let message = answer.body["message"].as_str().unwrap_or_default();
        return format!("denied ({})", check_of(message, policy));
    }
    match answer.warnings.first() {
        Some(w) => format!("admitted, warned ({})", check_of(w, policy)),
        None => "admitted".to_owned(),
    }
}

/// escapeToHost at `level` with `action`: pods, and Deployments with the same pod templates.
async fn escape_to_host(id: &'static str, level: &'static str, action: &'static str) {
    let b = Bound::new("escapeToHost", action, json!({"psaLevel": [level]}), false).await;
    let subjects = b.subjects("ClusterSecurityIntentBinding");
    let policy = b.policy("escapeToHost");
    let mut rows = Vec::new();
    let mut expected = Vec::new();
    let cases = PODS
        .iter()
        .map(|(name, spec)| ((*name).to_owned(), *name, *spec, false))
        .chain([
            (
                "Deployment, privileged container".to_owned(),
                "privileged container",
                PODS[0].1,
                true,
            ),
            (
                "Deployment, restricted".to_owned(),
                "restricted",
                PODS[4].1,
                true,
            ),
        ]);
    for (row, pod_case, spec, is_deployment) in cases {
        let mut cells = Vec::new();
        let mut promised = Vec::new();
        for (_, ns, app) in &subjects {
            let answer = if is_deployment {
                let path = format!("/apis/apps/v1/namespaces/{ns}/deployments");
                dry_run_create(&b.client, &path, &deployment(app, spec())).await
            } else {
                let path = format!("/api/v1/namespaces/{ns}/pods");
                dry_run_create(&b.client, &path, &pod(app, spec())).await
            };
            cells.push(verdict(&answer, &policy));
            let selected = *app == "web" && ns.as_str() != b.unbound.name();
            let promise = match (selected && forbidden(level, pod_case), action) {
                (true, "Block") => "denied",
                (true, _) => "admitted, warned",
                (false, _) => "admitted",
            };
            promised.push(promise.to_owned());
        }
        rows.push((row.clone(), cells));
        expected.push((row, promised));
    }
    let matrix = Matrix {
        id: id.into(),
        title: format!(
            "escapeToHost psaLevel={level}, action {action} (ValidatingAdmissionPolicy, \
             decided by {DECIDER})"
        ),
        case_header: "created (dry run)",
        subjects: subjects.iter().map(|(s, ..)| s.clone()).collect(),
        rows,
        expected,
    };
    b.done().await;
    matrix.assert();
}

#[tokio::test]
async fn admission_escape_to_host_baseline_denies_privileged_pods_where_bound() {
    escape_to_host("admission-escapeToHost-baseline", "baseline", "Block").await;
}

#[tokio::test]
async fn admission_escape_to_host_restricted_denies_root_pods_where_bound() {
    escape_to_host("admission-escapeToHost-restricted", "restricted", "Block").await;
}

#[tokio::test]
async fn admission_escape_to_host_audit_admits_and_warns() {
    escape_to_host("admission-escapeToHost-audit", "baseline", "Audit").await;
}

/// A workload admitted before escapeToHost was bound is not refused for what it already was:
/// scaling or relabelling it is admitted (the policy judges an update only when it changes the
/// pod template, as its match condition says), and changing its template is judged. So is a
/// pod: relabelling a running one is admitted, adding a privileged ephemeral container is not.
#[tokio::test]
async fn admission_escape_to_host_judges_updates_only_when_they_change_what_runs() {
    let mut b = Bound::namespaces().await;
    let ns = b.by_csib.name().to_owned();
    let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let mut violating = deployment("web", PODS[0].1());
    violating["metadata"] = json!({"name": "before", "labels": {"app": "web"}});
    let created = dry_run(&b.client, "POST", &deployments, &violating).await;
    assert!(created.allowed, "before the binding: {}", created.body);
    let created = Api::<Deployment>::namespaced(b.client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(violating).expect("a Deployment"),
        )
        .await;
    created.expect("the Deployment created before the binding");
    let mut running = pod("web", json!({"containers": [container(json!({}))]}));
    running["metadata"] = json!({"name": "running", "labels": {"app": "web"}});
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(b.client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(running).expect("a pod"),
        )
        .await
        .expect("the pod");
    b.bind("escapeToHost", "Block", json!({}), false).await;

    let before = format!("{deployments}/before");
    let answers = [
        (
            "scaled",
            dry_run(
                &b.client,
                "PATCH",
                &before,
                &json!({"spec": {"replicas": 3}}),
            )
            .await,
            true,
        ),
        (
            "relabelled",
            dry_run(
                &b.client,
                "PATCH",
                &before,
                &json!({"metadata": {"labels": {"tier": "x"}}}),
            )
            .await,
            true,
        ),
        (
            "its template changed",
            dry_run(
                &b.client,
                "PATCH",
                &before,
                &json!({"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}}),
            )
            .await,
            false,
        ),
        (
            "a running pod relabelled",
            dry_run(
                &b.client,
                "PATCH",
                &format!("{pods}/running"),
                &json!({"metadata": {"labels": {"tier": "x"}}}),
            )
            .await,
            true,
        ),
        (
            "a privileged ephemeral container added to a running pod",
            dry_run(
                &b.client,
                "PATCH",
                &format!("{pods}/running/ephemeralcontainers"),
                &json!({"spec": {"ephemeralContainers": [{
                    "name": "debugger", "image": "registry.invalid/debug:1",
                    "securityContext": {"privileged": true}}]}}),
            )
            .await,
            false,
        ),
    ];
    for (what, answer, admitted) in answers {
        assert_eq!(answer.allowed, admitted, "{what}: {}", answer.body);
    }
    b.done().await;
}

// ---------------------------------------------------------------------------------------------
// cocoWorkload and unAuthorizedSaTokenAccess: MutatingAdmissionPolicies

/// The mutating matrices: each row a workload written (dry run) and the field the intent
/// sets, read from the object the API server would store. A binding in shadow mode audits,
/// and a mutation has no form that only reports: nothing is written for it.
async fn mutation(
    id: &'static str,
    intent_id: &'static str,
    params: Value,
    field: &'static str,
    value: &'static str,
) {
    let mut b = Bound::namespaces().await;
    let mut shadowed = Bound::namespaces().await;
    let mut subjects = b.subjects("ClusterSecurityIntentBinding");
    subjects.insert(
        2,
        (
            "selected, ClusterSecurityIntentBinding in shadow mode".to_owned(),
            shadowed.by_csib.name().to_owned(),
            "web",
        ),
    );
    let coco = intent_id == "cocoWorkload";
    let spec = || json!({"containers": [container(json!({}))]});
    // Deployments that exist before the binding (stored, not dry run).
    if coco {
        for (_, ns, app) in &subjects {
            let mut before = deployment(app, spec());
            before["metadata"] = json!({"name": format!("before-{app}"), "labels": {"app": app}});
            Api::<Deployment>::namespaced(b.client.clone(), ns)
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(before).expect("Deployment"),
                )
                .await
                .expect("creating a Deployment before the binding");
        }
    }
    b.bind(intent_id, "Block", params.clone(), false).await;
    shadowed.bind(intent_id, "Block", params, true).await;

    // What the intent changes, read from the object as it is or would be stored.
    let read = |object: &Value| -> String {
        let spec = if coco {
            &object["spec"]["template"]["spec"]
        } else {
            &object["spec"]
        };
        match &spec[field] {
            Value::Null => "unchanged".to_owned(),
            Value::String(s) => format!("{field} {s}"),
            other => format!("{field} {other}"),
        }
    };
    let selected = |column: &str| column == "selected, ClusterSecurityIntentBinding";
    let mutated = |column: &str| {
        if selected(column) {
            format!("{field} {value}")
        } else {
            "unchanged".to_owned()
        }
    };
    let kind = if coco { "Deployment" } else { "pod" };
    let mut rows = Vec::new();
    let mut expected = Vec::new();

    let mut cells = Vec::new();
    for (column, ns, app) in &subjects {
        let (path, object) = if coco {
            let path = format!("/apis/apps/v1/namespaces/{ns}/deployments");
            (path, deployment(app, spec()))
        } else {
            (format!("/api/v1/namespaces/{ns}/pods"), pod(app, spec()))
        };
        let answer = dry_run_create(&b.client, &path, &object).await;
        assert!(answer.allowed, "{column}: refused: {}", answer.body);
        cells.push(read(&answer.body));
    }
    let row = format!("{kind} created after the binding");
    expected.push((
        row.clone(),
        subjects.iter().map(|s| mutated(&s.0)).collect(),
    ));
    rows.push((row, cells));

    if coco {
        // Admission sees only writes: a Deployment that existed before the binding keeps its
        // pod template until it is next written.
        let mut existing = Vec::new();
        let mut updated = Vec::new();
        for (_, ns, app) in &subjects {
            let name = format!("before-{app}");
            let stored = Api::<Deployment>::namespaced(b.client.clone(), ns)
                .get(&name)
                .await
                .expect("the Deployment created before the binding");
            existing.push(read(&serde_json::to_value(stored).expect("json")));
            let path = format!("/apis/apps/v1/namespaces/{ns}/deployments/{name}");
            let patch = json!({"metadata": {"annotations": {"touched": "yes"}}});
            let answer = dry_run(&b.client, "PATCH", &path, &patch).await;
            assert!(answer.allowed, "{ns}/{name}: refused: {}", answer.body);
            updated.push(read(&answer.body));
        }
        let row = "Deployment that existed before the binding".to_owned();
        expected.push((row.clone(), vec!["unchanged".to_owned(); subjects.len()]));
        rows.push((row, existing));
        let row = "that Deployment, updated after the binding".to_owned();
        expected.push((
            row.clone(),
            subjects.iter().map(|s| mutated(&s.0)).collect(),
        ));
        rows.push((row, updated));
    }
    let title = if coco {
        format!("{intent_id} runtimeClass={value}")
    } else {
        intent_id.to_owned()
    };
    let matrix = Matrix {
        id: id.into(),
        title: format!("{title}, action Block (MutatingAdmissionPolicy, decided by {DECIDER})"),
        case_header: if coco { "Deployment" } else { "pod" },
        subjects: subjects.iter().map(|(s, ..)| s.clone()).collect(),
        rows,
        expected,
    };
    b.done().await;
    shadowed.done().await;
    matrix.assert();
}

#[tokio::test]
async fn admission_coco_workload_sets_the_runtime_class_of_new_deployments() {
    mutation(
        "admission-cocoWorkload",
        "cocoWorkload",
        json!({"runtimeClass": ["kata-qemu"]}),
        "runtimeClassName",
        "kata-qemu",
    )
    .await;
}

#[tokio::test]
async fn admission_sa_token_access_unmounts_the_token_of_new_pods() {
    mutation(
        "admission-unAuthorizedSaTokenAccess",
        "unAuthorizedSaTokenAccess",
        json!({}),
        "automountServiceAccountToken",
        "false",
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Switching engines

/// The objects of `kind` the admission engine manages.
async fn admission_objects(client: &Client, kind: &NativeKind) -> Vec<String> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &kind.api_resource());
    let params = ListParams::default().labels(&format!(
        "{}={}",
        engines::MANAGED_BY,
        Engine::Admission.manager()
    ));
    api.list(&params)
        .await
        .expect("listing")
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect()
}

/// Stops an operator started by [`run_operator`] and waits for it to end.
async fn stop(stop: CancellationToken, operator: std::thread::JoinHandle<()>) {
    stop.cancel();
    tokio::task::spawn_blocking(move || operator.join())
        .await
        .expect("joining")
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

/// How long a switch may take: the engine taking over writes at once, and the one standing by
/// keeps its objects [`engines::HANDOVER`] longer.
const SWITCH: Duration = Duration::from_secs(120);

/// The engine preference switched at run time, from Kyverno (the real one, v1.19.1, running
/// as in `kyverno.rs`, writing its CEL kinds) to the admission engine and back, while a violating pod is created (dry
/// run) every 100 ms: every try is denied, by one engine or the other, and each switch leaves
/// none of the other engine's objects behind.
#[tokio::test]
async fn switching_the_engine_preference_leaves_no_gap_and_no_leftovers() {
    let kyverno = crate::kyverno::stack().await;
    let cp = &kyverno.control_plane;
    let client = cp.client().expect("client");
    let token = CancellationToken::new();
    let mut operator = run_operator(cp, "kyverno,admission", token.clone());
    let mut token = token;

    let ns = namespace(cp, "eff-switch").await;
    let si = intent(&client, "escapeToHost", "Block", json!({})).await;
    let selecting = Selecting {
        labels: json!({"app": "web"}),
        allow_sensitive: None,
        shadow: false,
    };
    let csib = bind_cluster(&client, ns.name(), &si, &selecting).await;
    crate::kyverno::kyverno_policies_ready(&client, &[]).await;
    let policies = Api::<ClusterNimbusPolicy>::all(client.clone());
    let listed = async |want: &[String]| {
        eventually(&format!("{csib} to list {want:?}"), SWITCH, async |seen| {
            let status = policies.get(&csib).await.ok()?.status?;
            let entries = status.adapter_policies.unwrap_or_default();
            *seen = format!("{entries:?}");
            (entries == want).then_some(())
        })
        .await;
    };
    let name = format!("{csib}-escapetohost");
    // Kyverno's: a policy of pods and one of the ephemeral containers added to them.
    let kyverno_names = [name.clone(), format!("{name}-ephemeral")];
    let kyverno_entries = kyverno_names
        .clone()
        .map(|n| format!("KyvernoValidatingPolicy/{n}"));
    listed(&kyverno_entries).await;
    assert!(
        admission_objects(&client, &VALIDATING_ADMISSION_POLICY)
            .await
            .is_empty()
    );

    // A privileged pod, every 100 ms, from the moment Kyverno denies it.
    let path = format!("/api/v1/namespaces/{}/pods", ns.name());
    let violating = pod("web", PODS[0].1());
    eventually("Kyverno to deny the pod", CONVERGE, async |_| {
        (!dry_run_create(&client, &path, &violating).await.allowed).then_some(())
    })
    .await;
    let probing = CancellationToken::new();
    let prober = tokio::spawn({
        let (client, path, violating, probing) = (
            client.clone(),
            path.clone(),
            violating.clone(),
            probing.clone(),
        );
        async move {
            let mut tries = Vec::new();
            while !probing.is_cancelled() {
                let answer = dry_run_create(&client, &path, &violating).await;
                let message = answer.body["message"].as_str().unwrap_or_default();
                let by = if answer.allowed {
                    "admitted"
                } else if message.contains("ValidatingAdmissionPolicy") {
                    "admission"
                } else if message.contains("denied the request: Policy ") {
                    "kyverno"
                } else {
                    "other"
                };
                tries.push((by, message.to_owned()));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tries
        }
    });

    let kyverno_policy = Api::<DynamicObject>::all_with(
        client.clone(),
        &engines::KYVERNO_VALIDATING_POLICY.api_resource(),
    );
    for (preference, engine) in [
        ("admission,kyverno", Engine::Admission),
        ("kyverno,admission", Engine::Kyverno),
    ] {
        stop(token, operator).await;
        token = CancellationToken::new();
        operator = run_operator(cp, preference, token.clone());
        if engine == Engine::Admission {
            listed(&[format!("ValidatingAdmissionPolicy/{name}")]).await;
        } else {
            listed(&kyverno_entries).await;
        }
        // No leftovers: the other engine's objects are gone once handed over.
        eventually(
            &format!("{preference}: no leftovers"),
            SWITCH,
            async |seen| {
                let vaps = admission_objects(&client, &VALIDATING_ADMISSION_POLICY).await;
                let bindings =
                    admission_objects(&client, &VALIDATING_ADMISSION_POLICY_BINDING).await;
                let mut kyverno_policies = 0;
                for n in &kyverno_names {
                    kyverno_policies +=
                        usize::from(kyverno_policy.get_opt(n).await.ok()?.is_some());
                }
                *seen = format!("{vaps:?} {bindings:?} {kyverno_policies} Kyverno policies");
                let done = if engine == Engine::Admission {
                    vaps == [name.clone()] && bindings == [name.clone()] && kyverno_policies == 0
                } else {
                    vaps.is_empty() && bindings.is_empty() && kyverno_policies == 2
                };
                done.then_some(())
            },
        )
        .await;
        // A few more tries by the engine in force alone.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    probing.cancel();
    let tries = prober.await.expect("the prober");
    let count = |by: &str| tries.iter().filter(|(b, _)| *b == by).count();
    let not_denied: Vec<_> = tries
        .iter()
        .filter(|(by, _)| !matches!(*by, "admission" | "kyverno"))
        .collect();
    assert!(
        not_denied.is_empty(),
        "{} of {} tries were not denied by either engine: {not_denied:?}",
        not_denied.len(),
        tries.len()
    );
    assert!(
        count("admission") > 0 && count("kyverno") > 0,
        "both engines denied: {} by admission, {} by Kyverno",
        count("admission"),
        count("kyverno")
    );
    eprintln!(
        "{} tries, all denied: {} by the admission engine, {} by Kyverno",
        tries.len(),
        count("admission"),
        count("kyverno")
    );
    unbind_cluster(&client, &csib).await;
    stop(token, operator).await;
}
