//! escapeToHost held to Kubernetes' own PodSecurity admission, case for case.
//!
//! Every kube-apiserver runs the PodSecurity admission plugin (k8s.io/pod-security-admission,
//! v1.36 here). On each engine's control plane, per level, two namespaces:
//! - the oracle: labelled `pod-security.kubernetes.io/enforce=<level>` (and `warn=<level>`, whose
//!   warnings are PodSecurity's verdict on pod controllers, which it never refuses), no intent;
//! - the bound: escapeToHost at that level bound by a ClusterSecurityIntentBinding, through the
//!   engine under test: the admission engine (ValidatingAdmissionPolicy), Kyverno's CEL kinds or
//!   Kyverno's legacy kinds (the real Kyverno 1.19.1).
//!
//! Each case is submitted by server-side dry run to both, four ways (the cases long runs found
//! wrong first, then seeded random ones, `pod_specs.rs`): a pod created; an ephemeral container
//! added to a running compliant pod (the `pods/ephemeralcontainers` subresource, as `kubectl
//! debug` does); a Deployment created with the pod as its template; a compliant Deployment's
//! template replaced by it. The verdicts must agree, apart from the deliberate differences in
//! [`DIFFERENCES`] (the table in docs/src/proofs.md).
//!
//! `NIMBUS_PSS_CASES` (default 120 per level) and `NIMBUS_PSS_SEED` (default 1) size it; `make
//! pss-oracle` runs 10,000 per engine and level.

use crate::admission::{self, Answer, dry_run};
use crate::common::{CONVERGE, cases::Rng};
use crate::kyverno::{self, kyverno_policies_ready};
use crate::matrix::Matrix;
use crate::pod_specs::{PodCase, compliant_pod_spec, regressions};
use crate::{Selecting, bind_cluster, intent, unbind_cluster};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nimbus_core::engines::KyvernoApi;
use nimbus_testenv::{ControlPlane, TestNamespace, eventually};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt;

/// The engines escapeToHost is held to PodSecurity through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Engine {
    Admission,
    KyvernoCel,
    KyvernoLegacy,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Admission => "admission (ValidatingAdmissionPolicy)",
            Engine::KyvernoCel => "Kyverno, CEL kinds",
            Engine::KyvernoLegacy => "Kyverno, legacy kinds",
        }
    }
}

/// The four ways a pod reaches admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Way {
    PodCreated,
    EphemeralContainerAdded,
    DeploymentCreated,
    DeploymentTemplateReplaced,
}

/// What admission answered. For pod controllers PodSecurity only warns, and the engines refuse:
/// both count as `Violates`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Admitted,
    Violates,
    /// The API server's validation refused the object before any policy saw it.
    Invalid,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A deliberate difference from PodSecurity: which engine, why (docs/src/proofs.md's table says the
/// same), and the cases it covers.
struct Difference {
    engine: Engine,
    why: &'static str,
    covers: fn(&PodCase, Way, Verdict, Verdict) -> bool,
}

/// The deliberate differences. Everything else must agree.
const DIFFERENCES: &[Difference] = &[Difference {
    engine: Engine::KyvernoLegacy,
    why: "Kyverno 1.19's legacy podSecurity rule runs its own copy of pod-security-admission, \
          older than Kubernetes 1.35's relaxations for pods in a user namespace (hostUsers: \
          false): it still refuses them running as root or with an unmasked /proc",
    covers: |case, _, oracle, engine| {
        case.in_user_namespace() && oracle == Verdict::Admitted && engine == Verdict::Violates
    },
}];

const LABEL: &str = "pod-security.kubernetes.io";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One level's pair of namespaces on an engine's control plane.
struct Pair {
    client: Client,
    oracle: TestNamespace,
    bound: TestNamespace,
    binding: String,
}

async fn pair(engine: Engine, level: &str) -> Pair {
    let cp: &ControlPlane = match engine {
        Engine::Admission => admission::cluster(),
        Engine::KyvernoCel => kyverno::cluster(KyvernoApi::Cel),
        Engine::KyvernoLegacy => kyverno::cluster(KyvernoApi::Legacy),
    };
    let namespace = async |prefix| match engine {
        Engine::Admission => admission::namespace(cp, prefix).await,
        _ => kyverno::namespace(cp, prefix).await,
    };
    let oracle = namespace("pss-oracle").await;
    let bound = namespace("pss-bound").await;
    let client = cp.client().expect("client");
    let labels = json!({"metadata": {"labels": {
        format!("{LABEL}/enforce"): level, format!("{LABEL}/enforce-version"): "latest",
        format!("{LABEL}/warn"): level, format!("{LABEL}/warn-version"): "latest",
    }}});
    Api::<Namespace>::all(client.clone())
        .patch(
            oracle.name(),
            &PatchParams::default(),
            &Patch::Merge(&labels),
        )
        .await
        .expect("labelling the oracle namespace");

    let si = intent(
        &client,
        "escapeToHost",
        "Block",
        json!({"psaLevel": [level]}),
    )
    .await;
    let selecting = Selecting {
        labels: json!({"app": "web"}),
        allow_sensitive: None,
        shadow: false,
    };
    let binding = bind_cluster(&client, bound.name(), &si, &selecting).await;
    if engine != Engine::Admission {
        kyverno_policies_ready(&client, &[bound.name()]).await;
    }
    let pair = Pair {
        client,
        oracle,
        bound,
        binding,
    };
    // Enforced once a privileged pod is refused in both (the API server loads admission
    // policies, and Kyverno its webhooks, a moment after they are written).
    let privileged = json!({"containers": [{"name": "app", "image": "registry.invalid/app:1",
                                            "securityContext": {"privileged": true}}]});
    for ns in [pair.oracle.name(), pair.bound.name()] {
        eventually(
            &format!("escapeToHost enforced in {ns}"),
            CONVERGE,
            async |seen| {
                let answer = pair
                    .submit(ns, Way::PodCreated, &privileged, &json!({}))
                    .await;
                *seen = format!("{:?}", answer.body);
                (verdict(Way::PodCreated, &answer) == Verdict::Violates).then_some(())
            },
        )
        .await;
    }
    for ns in [pair.oracle.name(), pair.bound.name()] {
        pair.create_bases(ns).await;
    }
    pair
}

fn pod(spec: &Value, annotations: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "pss-", "labels": {"app": "web"}, "annotations": annotations},
           "spec": spec})
}

fn deployment(name: Option<&str>, spec: &Value, annotations: &Value) -> Value {
    let metadata = match name {
        Some(name) => json!({"name": name, "labels": {"app": "web"}}),
        None => json!({"generateName": "pss-", "labels": {"app": "web"}}),
    };
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}, "annotations": annotations},
                                 "spec": spec}}})
}

/// The compliant pod ephemeral containers are added to and the compliant Deployment whose
/// template is replaced, both named `base`.
const BASE: &str = "base";

impl Pair {
    async fn create_bases(&self, ns: &str) {
        let spec = compliant_pod_spec();
        let mut base = pod(&spec, &json!({}));
        base["metadata"]["name"] = json!(BASE);
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(self.client.clone(), ns);
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(base).expect("pod"),
        )
        .await
        .expect("the base pod");
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(self.client.clone(), ns);
        let base = deployment(Some(BASE), &spec, &json!({}));
        deployments
            .create(
                &PostParams::default(),
                &serde_json::from_value(base).expect("deployment"),
            )
            .await
            .expect("the base Deployment");
    }

    /// Submits `spec` (or, for an ephemeral container, `ephemeral`) to `ns` one `way`, again
    /// while a webhook is unreachable ([`kyverno::answered`]).
    async fn submit(&self, ns: &str, way: Way, spec: &Value, annotations: &Value) -> Answer {
        kyverno::answered(|| async {
            let answer = self.submit_once(ns, way, spec, annotations).await;
            let message = answer.body["message"].as_str().unwrap_or_default();
            kyverno::unreachable(message).map_or(Ok(answer), Err)
        })
        .await
    }

    async fn submit_once(&self, ns: &str, way: Way, spec: &Value, annotations: &Value) -> Answer {
        let pods = format!("/api/v1/namespaces/{ns}/pods");
        let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
        match way {
            Way::PodCreated => dry_run(&self.client, "POST", &pods, &pod(spec, annotations)).await,
            Way::EphemeralContainerAdded => {
                let path = format!("{pods}/{BASE}/ephemeralcontainers");
                let patch = json!({"spec": {"ephemeralContainers": [spec]}});
                dry_run(&self.client, "PATCH", &path, &patch).await
            }
            Way::DeploymentCreated => {
                let object = deployment(None, spec, annotations);
                dry_run(&self.client, "POST", &deployments, &object).await
            }
            Way::DeploymentTemplateReplaced => {
                let path = format!("{deployments}/{BASE}");
                let patch = json!([
                    {"op": "replace", "path": "/spec/template/spec", "value": spec},
                    {"op": "add", "path": "/spec/template/metadata/annotations",
                     "value": annotations},
                ]);
                dry_run(&self.client, "PATCH", &path, &patch).await
            }
        }
    }

    async fn done(self) {
        unbind_cluster(&self.client, &self.binding).await;
    }
}

/// The verdict in an answer. A refusal other than a policy's or a validation's (a webhook
/// unreachable, a server error) is not a verdict: the test fails.
fn verdict(way: Way, answer: &Answer) -> Verdict {
    if answer.allowed {
        let controller = matches!(
            way,
            Way::DeploymentCreated | Way::DeploymentTemplateReplaced
        );
        let warned = answer
            .warnings
            .iter()
            .any(|w| w.contains("would violate PodSecurity"));
        return if controller && warned {
            Verdict::Violates
        } else {
            Verdict::Admitted
        };
    }
    let code = answer.body["code"].as_u64().unwrap_or_default();
    let message = answer.body["message"].as_str().unwrap_or_default();
    match code {
        422 => Verdict::Invalid,
        400 | 403 if !message.contains("failed calling webhook") => Verdict::Violates,
        _ => panic!("not a verdict: {}", answer.body),
    }
}

/// A disagreement: the case, the way, and both verdicts.
struct Disagreement {
    index: usize,
    way: Way,
    oracle: Verdict,
    engine: Verdict,
    case: PodCase,
}

/// [`differential`], run again once if the engine's process was started again meanwhile: then
/// some answers were not its verdicts ([`kyverno::restarts`]).
async fn differential_without_restarts(engine: Engine, level: &'static str) -> Vec<Disagreement> {
    let restarts = || match engine {
        Engine::Admission => 0,
        Engine::KyvernoCel => kyverno::restarts(KyvernoApi::Cel),
        Engine::KyvernoLegacy => kyverno::restarts(KyvernoApi::Legacy),
    };
    let before = restarts();
    let disagreements = differential(engine, level).await;
    if restarts() == before {
        return disagreements;
    }
    eprintln!(
        "{}: started again during the run at {level}; running it again",
        engine.name()
    );
    let before = restarts();
    let disagreements = differential(engine, level).await;
    assert_eq!(
        restarts(),
        before,
        "{} was started again twice",
        engine.name()
    );
    disagreements
}

/// Runs the cases of `level` through `engine` and PodSecurity; returns the disagreements no
/// deliberate difference covers, and prints a summary.
async fn differential(engine: Engine, level: &'static str) -> Vec<Disagreement> {
    let cases = env_or("NIMBUS_PSS_CASES", 120) as usize;
    let seed = env_or("NIMBUS_PSS_SEED", 1);
    let pair = pair(engine, level).await;
    let mut rng = Rng::new(seed);
    let generated: Vec<PodCase> = regressions()
        .into_iter()
        .chain((0..cases).map(|_| PodCase::generate(&mut rng)))
        .collect();
    let ways = [
        Way::PodCreated,
        Way::EphemeralContainerAdded,
        Way::DeploymentCreated,
        Way::DeploymentTemplateReplaced,
    ];
    let judged: Vec<(usize, Way, Verdict, Verdict)> = futures::stream::iter(
        generated
            .iter()
            .enumerate()
            .flat_map(|(i, case)| ways.map(|way| (i, case, way))),
    )
    .map(|(i, case, way)| {
        let pair = &pair;
        async move {
            let (spec, annotations) = match way {
                Way::EphemeralContainerAdded => (&case.ephemeral, json!({})),
                _ => (&case.spec, Value::Object(case.annotations.clone())),
            };
            let oracle = pair
                .submit(pair.oracle.name(), way, spec, &annotations)
                .await;
            let bound = pair
                .submit(pair.bound.name(), way, spec, &annotations)
                .await;
            (i, way, verdict(way, &oracle), verdict(way, &bound))
        }
    })
    .buffer_unordered(8)
    .collect()
    .await;
    pair.done().await;

    let mut tally: BTreeMap<(Way, Verdict, Verdict), usize> = BTreeMap::new();
    let mut documented: BTreeMap<&str, usize> = BTreeMap::new();
    let mut disagreements = Vec::new();
    for (index, way, oracle, verdict) in judged {
        *tally.entry((way, oracle, verdict)).or_default() += 1;
        if oracle == verdict {
            continue;
        }
        let case = &generated[index];
        let covered = DIFFERENCES
            .iter()
            .find(|d| d.engine == engine && (d.covers)(case, way, oracle, verdict));
        match covered {
            Some(d) => *documented.entry(d.why).or_default() += 1,
            None => disagreements.push(Disagreement {
                index,
                way,
                oracle,
                engine: verdict,
                case: case.clone(),
            }),
        }
    }
    let name = engine.name();
    eprintln!("pod security: {name} at {level}, {cases} cases, seed {seed}");
    for ((way, oracle, verdict), n) in &tally {
        eprintln!("  {way:?}: PodSecurity {oracle}, {name} {verdict}: {n}");
    }
    for (why, n) in &documented {
        eprintln!("  deliberate difference ({n}): {why}");
    }
    disagreements
}

/// docs/src/proofs.md's table of the deliberate differences.
fn differences_in_docs() {
    let rows: Vec<(String, Vec<String>)> = DIFFERENCES
        .iter()
        .map(|d| (d.engine.name().to_owned(), vec![d.why.to_owned()]))
        .collect();
    Matrix {
        id: "pss-differences".into(),
        title: "Deliberate differences from Kubernetes' PodSecurity admission".into(),
        case_header: "engine",
        subjects: vec!["difference".into()],
        expected: rows.clone(),
        rows,
    }
    .assert();
}

/// Both levels through `engine`: no disagreement outside the deliberate differences.
async fn agrees_with_pod_security(engine: Engine) {
    differences_in_docs();
    let mut failures = Vec::new();
    for level in ["baseline", "restricted"] {
        for d in differential_without_restarts(engine, level).await {
            let submitted = match d.way {
                Way::EphemeralContainerAdded => format!(
                    "ephemeral container {} added to a compliant pod",
                    d.case.ephemeral
                ),
                _ => format!(
                    "pod spec {}\n  annotations {:?}",
                    d.case.spec, d.case.annotations
                ),
            };
            failures.push(format!(
                "{level} case {} {:?}: PodSecurity {}, {} {}\n  {submitted}",
                d.index,
                d.way,
                d.oracle,
                engine.name(),
                d.engine
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} disagreements with PodSecurity admission; the first:\n{}",
        failures.len(),
        failures
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test]
async fn admission_escape_to_host_agrees_with_pod_security_admission() {
    agrees_with_pod_security(Engine::Admission).await;
}

#[tokio::test]
async fn kyverno_cel_escape_to_host_agrees_with_pod_security_admission() {
    agrees_with_pod_security(Engine::KyvernoCel).await;
}

#[tokio::test]
async fn kyverno_legacy_escape_to_host_agrees_with_pod_security_admission() {
    agrees_with_pod_security(Engine::KyvernoLegacy).await;
}
