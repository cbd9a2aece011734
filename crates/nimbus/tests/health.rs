//! GitOps health of live objects of all five kinds, judged by the consumers' own code
//! (tools/health-judge): kstatus (`sigs.k8s.io/cli-utils`), Argo CD's calling convention in
//! gopher-lua on the chart's `files/argocd/argocd-cm.yaml`, and Flux's CEL evaluator on the
//! chart's `files/flux/health-check-exprs.yaml`. Current/Healthy when in force,
//! InProgress/Progressing while the operator works or waits, Failed/Degraded for each problem
//! that only a change fixes. Its own test binary: it stops the operator to see a spec change
//! not observed yet, on a control plane without engine CRDs (so KubeArmor's intents wait).
//! Karmada's interpreter judges the same objects with the chart's customizations, and
//! aggregates them as two member clusters' copies (health/karmada.rs).

mod common;
#[path = "health/karmada.rs"]
mod karmada;

use common::{CONVERGE, apply, health_judge, intent, unique};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use nimbus_api::{
    ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent, SecurityIntentBinding,
};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Deserialize, Debug)]
struct Verdict {
    status: String,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize, Debug)]
struct Judgement {
    kind: String,
    name: String,
    kstatus: Option<Verdict>,
    argocd: Option<Verdict>,
    flux: Option<Verdict>,
    #[serde(default)]
    errors: Vec<String>,
}

impl Judgement {
    /// kstatus's, Argo CD's and Flux's verdicts.
    fn verdicts(&self) -> (&str, &str, &str) {
        (
            status(&self.kstatus),
            status(&self.argocd),
            status(&self.flux),
        )
    }
}

fn status(verdict: &Option<Verdict>) -> &str {
    verdict.as_ref().map_or("-", |v| v.status.as_str())
}

type Verdicts = (&'static str, &'static str, &'static str);
const CURRENT: Verdicts = ("Current", "Healthy", "Current");
const IN_PROGRESS: Verdicts = ("InProgress", "Progressing", "InProgress");
const FAILED: Verdicts = ("Failed", "Degraded", "Failed");

/// One live object and what every tool should make of it; `reason` is the reason its
/// Argo CD message starts with (the kstatus condition's).
struct Case {
    what: &'static str,
    kind: &'static str,
    namespace: Option<String>,
    name: String,
    expected: Verdicts,
    reason: &'static str,
}

const GROUP: &str = "intent.security.nimbus.com";

/// The API of a Nimbus kind, in `namespace` or cluster-wide.
fn api(client: &kube::Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource = kube::discovery::ApiResource {
        group: GROUP.into(),
        version: "v1alpha1".into(),
        api_version: format!("{GROUP}/v1alpha1"),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()).replace("policys", "policies"),
    };
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// The live object of `case`, as the API serves it (`None` while it does not exist).
async fn live(client: &kube::Client, case: &Case) -> Option<Value> {
    let api = api(client, case.kind, case.namespace.as_deref());
    let obj = api.get_opt(&case.name).await.ok()??;
    serde_json::to_value(obj).ok()
}

/// Waits until the tools judge every case as expected; on timeout the test fails with each
/// mismatch (what the tools said, and the object's conditions).
async fn judged_as_expected(client: &kube::Client, cases: &[Case]) {
    let last = std::sync::Mutex::new(String::new());
    let settled = tokio::time::timeout(2 * CONVERGE, async {
        loop {
            let mut objects = Vec::new();
            for case in cases {
                objects.push(live(client, case).await.unwrap_or(Value::Null));
            }
            let present: Vec<Value> = objects.iter().filter(|o| !o.is_null()).cloned().collect();
            let judged_all: Vec<Judgement> = health_judge(&present);
            let mut judged = judged_all.iter();
            let mut mismatches = Vec::new();
            for (case, obj) in cases.iter().zip(&objects) {
                if obj.is_null() {
                    mismatches.push(format!(
                        "{}: {} {} missing",
                        case.what, case.kind, case.name
                    ));
                    continue;
                }
                let j = judged.next().expect("one judgement per object");
                assert_eq!(
                    (j.kind.as_str(), j.name.as_str()),
                    (case.kind, case.name.as_str())
                );
                assert!(j.errors.is_empty(), "{}: {:?}", case.what, j.errors);
                let argocd = j.argocd.as_ref().map_or("", |v| v.message.as_str());
                if j.verdicts() != case.expected || !argocd.starts_with(case.reason) {
                    mismatches.push(format!(
                        "{}: {} {}: {:?} (Argo CD: {argocd:?}; kstatus: {:?}), expected {:?} \
                         with reason {}; conditions {}",
                        case.what,
                        case.kind,
                        case.name,
                        j.verdicts(),
                        j.kstatus.as_ref().map(|v| &v.message),
                        case.expected,
                        case.reason,
                        obj["status"]["conditions"],
                    ));
                }
            }
            mismatches.extend(karmada::health_mismatches(cases, &objects, &judged_all));
            if mismatches.is_empty() {
                return;
            }
            *last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = mismatches.join("\n");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    if settled.is_err() {
        let last = last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        panic!("the GitOps tools do not judge as expected:\n{last}");
    }
}

/// The operator, run in the test's runtime until [`Running::stop`].
struct Running {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), nimbus_operator::Error>>,
}

impl Running {
    fn start(client: &kube::Client) -> Self {
        let shutdown = CancellationToken::new();
        let config = nimbus_operator::Config {
            resync: Duration::from_secs(300),
            ..Default::default()
        };
        let task = tokio::spawn(nimbus_operator::run(
            client.clone(),
            config,
            shutdown.clone(),
        ));
        Self { shutdown, task }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task
            .await
            .expect("operator task")
            .expect("operator stopped cleanly");
    }
}

fn case(
    what: &'static str,
    kind: &'static str,
    namespace: Option<&str>,
    name: &str,
    expected: Verdicts,
    reason: &'static str,
) -> Case {
    Case {
        what,
        kind,
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
        expected,
        reason,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitops_tools_judge_every_kind_by_its_conditions() {
    let cp = common::cluster();
    let client = cp.client().expect("client");
    let operator = Running::start(&client);
    let ns = cp.test_namespace("health").await.expect("namespace");
    let ns = ns.name();
    let intents: Api<SecurityIntent> = Api::all(client.clone());
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns);
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    let policies: Api<NimbusPolicy> = Api::namespaced(client.clone(), ns);

    // Intents: one in force, one only KubeArmor enforces (not installed here), one the
    // catalog does not know, one with a parameter that is not applied as written, and a
    // sensitive one.
    let dns = unique("dns");
    let kubearmor_only = unique("tools");
    let unknown = unique("unknown");
    let bad_param = unique("badparam");
    let sandbox = unique("sandbox");
    let mut with_bad_param = intent(&bad_param, "dnsManipulation", "Block");
    with_bad_param["spec"]["intent"]["params"] = json!({"noSuchParam": ["x"]});
    let mut sandboxing = intent(&sandbox, "namespaceSandbox", "Block");
    sandboxing["spec"]["intent"]["params"] = json!({"group": ["team"], "clusterRole": ["view"]});
    for (name, body) in [
        (&dns, intent(&dns, "dnsManipulation", "Block")),
        (
            &kubearmor_only,
            intent(&kubearmor_only, "swDeploymentTools", "Block"),
        ),
        (&unknown, intent(&unknown, "noSuchIntent", "Block")),
        (&bad_param, with_bad_param),
        (&sandbox, sandboxing),
    ] {
        apply(&intents, name, &body).await;
    }

    // A NimbusPolicy nobody's binding owns, holding the name the `conflict` binding wants.
    let taken = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
        "metadata": {"name": "conflict"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "rules": [{"id": "dnsManipulation", "rule": {"action": "Block"}}]}
    });
    apply(&policies, "conflict", &taken).await;

    let sib = |name: &str, intent: &str| common::binding(name, &[intent], json!({"app": "web"}));
    for (name, body) in [
        ("ok", sib("ok", &dns)),
        ("waiting", sib("waiting", &kubearmor_only)),
        ("missing", sib("missing", "no-such-intent")),
        ("unsupported", sib("unsupported", &unknown)),
        ("badparam", sib("badparam", &bad_param)),
        ("conflict", sib("conflict", &dns)),
        (
            "badselector",
            json!({
                "apiVersion": "intent.security.nimbus.com/v1alpha1",
                "kind": "SecurityIntentBinding",
                "metadata": {"name": "badselector"},
                "spec": {"intents": [{"name": dns}], "selector": {"workloadSelector": null},
                         "cel": [r#"labels["app"].startsWith("ng")"#]}
            }),
        ),
    ] {
        apply(&bindings, name, &body).await;
    }
    let cluster_ok = unique("c-ok");
    let cluster_sensitive = unique("c-sensitive");
    let cluster_unsupported = unique("c-unsupported");
    let csib = |name: &str, intent: &str| {
        json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "ClusterSecurityIntentBinding",
            "metadata": {"name": name},
            "spec": {"intents": [{"name": intent}], "selector": {"nsSelector": {"matchNames": [ns]}}}
        })
    };
    apply(&csibs, &cluster_ok, &csib(&cluster_ok, &dns)).await;
    // namespaceSandbox without the allow-sensitive annotation.
    apply(
        &csibs,
        &cluster_sensitive,
        &csib(&cluster_sensitive, &sandbox),
    )
    .await;
    apply(
        &csibs,
        &cluster_unsupported,
        &csib(&cluster_unsupported, &unknown),
    )
    .await;
    let per_namespace = |binding: &str| format!("nimbus-ctlr-gen-{binding}");

    let n = Some(ns);
    let (ok_ns, sensitive_ns) = (
        per_namespace(&cluster_ok),
        per_namespace(&cluster_sensitive),
    );
    #[rustfmt::skip]
    let cases = vec![
        // In force.
        case("in force", "SecurityIntent", None, &dns, CURRENT, "Ready"),
        case("in force", "SecurityIntentBinding", n, "ok", CURRENT, "Ready"),
        case("in force", "NimbusPolicy", n, "ok", CURRENT, "Ready"),
        case("in force", "ClusterSecurityIntentBinding", None, &cluster_ok, CURRENT, "Ready"),
        case("in force", "ClusterNimbusPolicy", None, &cluster_ok, CURRENT, "Ready"),
        case("in force", "NimbusPolicy", n, &ok_ns, CURRENT, "Ready"),
        // Waiting for something the operator watches.
        case("engine not installed", "SecurityIntentBinding", n, "waiting", IN_PROGRESS, "EngineNotInstalled"),
        case("engine not installed", "NimbusPolicy", n, "waiting", IN_PROGRESS, "EngineNotInstalled"),
        case("intent not created yet", "SecurityIntentBinding", n, "missing", IN_PROGRESS, "IntentNotFound"),
        // Stalled until someone changes something.
        case("unknown intent ID", "SecurityIntent", None, &unknown, FAILED, "UnsupportedIntent"),
        case("unknown intent ID", "SecurityIntentBinding", n, "unsupported", FAILED, "UnsupportedIntent"),
        case("unknown intent ID", "NimbusPolicy", n, "unsupported", FAILED, "UnsupportedIntent"),
        case("unknown intent ID", "ClusterSecurityIntentBinding", None, &cluster_unsupported, FAILED, "UnsupportedIntent"),
        case("unknown intent ID", "ClusterNimbusPolicy", None, &cluster_unsupported, FAILED, "UnsupportedIntent"),
        case("bad parameter", "SecurityIntent", None, &bad_param, FAILED, "InvalidParameter"),
        case("bad parameter", "SecurityIntentBinding", n, "badparam", FAILED, "InvalidParameter"),
        case("bad parameter", "NimbusPolicy", n, "badparam", FAILED, "InvalidParameter"),
        case("selector", "SecurityIntentBinding", n, "badselector", FAILED, "InvalidSelector"),
        case("name taken", "SecurityIntentBinding", n, "conflict", FAILED, "PolicyConflict"),
        case("not bound", "NimbusPolicy", n, "conflict", FAILED, "NotBound"),
        case("sensitive", "ClusterSecurityIntentBinding", None, &cluster_sensitive, FAILED, "SensitiveIntentNotAllowed"),
        case("sensitive", "NimbusPolicy", n, &sensitive_ns, FAILED, "SensitiveIntentNotAllowed"),
    ];
    judged_as_expected(&client, &cases).await;

    // Karmada aggregating these objects as the copies of one template on two member clusters.
    let object = async |kind: &str, namespace: Option<&str>, name: &str| -> Value {
        let obj = api(&client, kind, namespace)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
        serde_json::to_value(obj).expect("an object")
    };
    let sib = "SecurityIntentBinding";
    let live = karmada::Live {
        binding_ok: object(sib, n, "ok").await,
        binding_waiting: object(sib, n, "waiting").await,
        binding_stalled: object(sib, n, "unsupported").await,
        cluster_ok: object("ClusterSecurityIntentBinding", None, &cluster_ok).await,
        cluster_stalled: object("ClusterSecurityIntentBinding", None, &cluster_unsupported).await,
        intent_ok: object("SecurityIntent", None, &dns).await,
        intent_stalled: object("SecurityIntent", None, &unknown).await,
    };
    karmada::aggregations_are_honest(&client, &live).await;

    // A change the operator has not observed yet: stopped, it cannot.
    operator.stop().await;
    let params = PatchParams::default();
    let severity = Patch::Merge(json!({"spec": {"intent": {"severity": "High"}}}));
    let selector = Patch::Merge(json!({
        "spec": {"selector": {"workloadSelector": {"matchLabels": {"tier": "front"}}}}
    }));
    intents
        .patch(&dns, &params, &severity)
        .await
        .expect("changing the intent");
    bindings
        .patch("ok", &params, &selector)
        .await
        .expect("changing the binding");
    csibs
        .patch(&cluster_ok, &params, &selector)
        .await
        .expect("changing the cluster binding");
    let not_observed = "Generation 2 is not observed yet";
    #[rustfmt::skip]
    let unobserved = [
        case("changed", "SecurityIntent", None, &dns, IN_PROGRESS, not_observed),
        case("changed", "SecurityIntentBinding", n, "ok", IN_PROGRESS, not_observed),
        case("changed", "ClusterSecurityIntentBinding", None, &cluster_ok, IN_PROGRESS, not_observed),
    ];
    judged_as_expected(&client, &unobserved).await;

    // Started again, the operator observes the changes and everything is as before.
    let operator = Running::start(&client);
    judged_as_expected(&client, &cases).await;
    operator.stop().await;
}

/// The argocd-cm snippet the chart ships carries health.lua, the script beside it, verbatim.
#[test]
fn the_argocd_snippet_carries_the_health_script() {
    let dir = common::workspace_root().join("charts/nimbus/files/argocd");
    let script = std::fs::read_to_string(dir.join("health.lua")).expect("health.lua");
    let snippet = std::fs::read_to_string(dir.join("argocd-cm.yaml")).expect("argocd-cm.yaml");
    let cm: Value = serde_yaml_ng::from_str(&snippet).expect("argocd-cm.yaml parses");
    assert_eq!(
        cm["data"]["resource.customizations.health.intent.security.nimbus.com_*"].as_str(),
        Some(script.as_str())
    );
}
