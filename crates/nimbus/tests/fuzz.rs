//! Random bindings against a live operator: the shipped binary as its own process, on the real
//! control plane. Every case `nimbus validate` accepts is admitted and enforced; every case
//! it rejects is rejected at admission or admitted and reported invalid in status (the schema
//! cannot check label syntax inside selectors), never enforced; the operator never panics or
//! exits, and still enforces a well-formed binding afterwards. `NIMBUS_FUZZ_CASES` sets the number of cases (default 300;
//! the closing note of the security work quotes a 20,000-case run).

mod common;

use common::cases::{Rng, binding_case};
use common::{CONVERGE, get, unique};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use nimbus_api::{
    ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent, SecurityIntentBinding, condition,
};
use nimbus_testenv::eventually;
use nimbus_testenv::{Child, free_port, http_get};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

/// Accepted bindings kept alive at once: the operator works on several, the cluster stays small.
const WINDOW: usize = 40;

fn cases() -> usize {
    std::env::var("NIMBUS_FUZZ_CASES")
        .ok()
        .map(|n| n.parse().expect("NIMBUS_FUZZ_CASES must be a number"))
        .unwrap_or(300)
}

/// The operator and the port of its metrics.
fn start_operator(kubeconfig: &Path, dir: &Path) -> (Child, u16) {
    let port = || free_port().expect("a free loopback port");
    let metrics = port();
    let args = [
        "run".to_owned(),
        "--health-addr".to_owned(),
        format!("127.0.0.1:{}", port()),
        "--metrics-addr".to_owned(),
        format!("127.0.0.1:{metrics}"),
    ];
    let child = Child::spawn(
        "fuzz-operator",
        Path::new(env!("CARGO_BIN_EXE_nimbus")),
        &args,
        &[
            ("KUBECONFIG", kubeconfig.as_os_str()),
            (
                "NIMBUS_LOG",
                OsStr::new(&std::env::var("NIMBUS_FUZZ_LOG").unwrap_or_else(|_| "info".into())),
            ),
        ],
        dir,
    )
    .expect("starting the operator");
    (child, metrics)
}

/// Native objects the operator has written so far.
async fn native_writes(metrics: u16) -> f64 {
    let (_, body) = http_get(metrics, "/metrics")
        .await
        .expect("the operator's /metrics");
    body.lines()
        .filter(|l| l.starts_with("nimbus_native_objects_applied_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Whether `a` and `b` name the same object.
fn same_object(a: &Value, b: &Value) -> bool {
    a["kind"] == b["kind"]
        && a["metadata"]["namespace"] == b["metadata"]["namespace"]
        && a["metadata"]["name"] == b["metadata"]["name"]
}

/// The API of `object`'s kind and namespace, and its name.
fn api_for<'a>(
    client: &Client,
    resource: &ApiResource,
    object: &'a Value,
) -> (Api<DynamicObject>, &'a str) {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let api = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    (api, name)
}

/// Server-side applies `object` as the fuzzing user; any error is a rejection.
async fn apply(client: &Client, resource: &ApiResource, object: &Value) -> Result<(), String> {
    let (api, name) = api_for(client, resource, object);
    api.patch(
        name,
        &PatchParams::apply("fuzz").force(),
        &Patch::Apply(object),
    )
    .await
    .map(drop)
    .map_err(|e| e.to_string())
}

/// A binding the API server admitted, and whether `nimbus validate` found it valid.
struct Admitted {
    case: usize,
    resource: ApiResource,
    binding: Value,
    valid: bool,
}

/// The binding's Ready condition once it is about its current generation.
fn ready(binding: &DynamicObject) -> Option<Value> {
    let generation = binding.metadata.generation;
    binding.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| {
            c["type"] == condition::READY
                && c["observedGeneration"].as_i64() == generation
                && c["reason"] != condition::REASON_RECONCILING
        })
        .cloned()
}

/// What is wrong with the operator's verdict on an admitted binding: a valid one must come in
/// force (passing through transient states such as an intent not yet seen), an invalid one the
/// API server let through must be reported as such, never enforced.
async fn verdict(client: &Client, admitted: &Admitted) -> Option<String> {
    let (api, name) = api_for(client, &admitted.resource, &admitted.binding);
    let deadline = Instant::now() + CONVERGE;
    loop {
        let last = get(&api, name).await;
        let ready = last.as_ref().and_then(ready);
        let settled = ready.as_ref().is_some_and(|r| {
            if admitted.valid {
                r["status"] == "True"
            } else {
                r["status"] == "False"
                    && INVALID_INPUT.contains(&r["reason"].as_str().unwrap_or(""))
            }
        });
        if settled {
            return None;
        }
        if Instant::now() > deadline {
            return Some(format!(
                "case {} (valid: {}): no verdict to match after {CONVERGE:?}; status {:#}\n{:#}",
                admitted.case,
                admitted.valid,
                last.map(|b| b.data["status"].clone()).unwrap_or_default(),
                admitted.binding
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reasons that say the binding itself is invalid.
const INVALID_INPUT: [&str; 2] = [
    condition::REASON_INVALID_SELECTOR,
    condition::REASON_INVALID_NAMESPACE_SELECTOR,
];

#[tokio::test]
async fn random_bindings_are_rejected_reported_or_enforced_and_never_crash_the_operator() {
    let cp = common::cluster();
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("fuzz").await.expect("namespace");
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut operator, metrics) = start_operator(cp.kubeconfig_path(), dir.path());

    let intent = ApiResource::erase::<SecurityIntent>(&());
    let sib = ApiResource::erase::<SecurityIntentBinding>(&());
    let csib = ApiResource::erase::<ClusterSecurityIntentBinding>(&());
    let mut rng = Rng::new(0x6c69_7665);
    let case_file = dir.path().join("case.yaml");
    let total = cases();
    let (mut admitted, mut reported_invalid) = (0, 0);
    let mut mismatches = Vec::new();
    let mut alive: VecDeque<Admitted> = VecDeque::new();
    for case in 0..total {
        let mut generated = binding_case(&mut rng, Some(ns.name()));
        // The bindings vary here; the intents' variety is the server oracle's
        // (tests/server_oracle.rs): every case's intent can be enforced, so a binding's
        // verdict is about the binding.
        let intent_name = generated.intent["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        generated.intent = common::intent(&intent_name, "dnsManipulation", "Block");
        let resource = match generated.binding["kind"].as_str() {
            Some("ClusterSecurityIntentBinding") => &csib,
            _ => &sib,
        };
        let result = match apply(&client, &intent, &generated.intent).await {
            Ok(()) => apply(&client, resource, &generated.binding).await,
            Err(e) => Err(e),
        };
        // What `nimbus validate` says (the API server judges it: tests/server_oracle.rs).
        let valid = common::oracle::validate(&case_file, &generated.manifest()).is_ok();
        match result {
            Ok(()) => {
                admitted += 1;
                reported_invalid += usize::from(!valid);
                // A repeated name updated the earlier binding: only the latest verdict counts.
                alive.retain(|a| !same_object(&a.binding, &generated.binding));
                alive.push_back(Admitted {
                    case,
                    resource: resource.clone(),
                    binding: generated.binding,
                    valid,
                });
            }
            Err(_) if !valid => {}
            Err(e) => mismatches.push(format!(
                "case {case}: valid, but the API server said {e}\n{:#}",
                generated.binding
            )),
        }
        while alive.len() > WINDOW {
            let oldest = alive.pop_front().expect("non-empty");
            mismatches.extend(verdict(&client, &oldest).await);
            delete(&client, &oldest.resource, &oldest.binding).await;
        }
        assert!(
            !operator.has_exited(),
            "the operator exited at case {case}:\n{}",
            operator.output()
        );
    }
    for admitted in &alive {
        mismatches.extend(verdict(&client, admitted).await);
    }
    if !mismatches.is_empty() {
        let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-operator.log");
        std::fs::write(&log, operator.output()).expect("saving the operator's log");
        eprintln!("the operator's log: {}", log.display());
    }
    assert!(
        mismatches.is_empty(),
        "{} of {total} cases mishandled:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    // Every outcome exercised: rejected at admission, admitted and enforced, admitted and
    // reported invalid.
    assert!(admitted < total, "nothing rejected at admission");
    assert!(admitted > reported_invalid, "nothing enforced");
    assert!(reported_invalid > 0, "nothing reported invalid");

    // And the operator still enforces a well-formed binding.
    let canary = unique("canary");
    let sibs: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    let binding = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
        "metadata": {"name": canary, "namespace": ns.name()},
        "spec": {"intents": [{"name": "dns"}], "selector": {"workloadSelector": {"matchLabels": {"app": "web"}}}},
    });
    apply(&client, &sib, &binding)
        .await
        .expect("canary binding");
    let nps: Api<NimbusPolicy> = Api::namespaced(client.clone(), ns.name());
    eventually("the canary's policy in force", CONVERGE, async |_| {
        let ready = get(&sibs, &canary)
            .await?
            .status?
            .conditions
            .into_iter()
            .any(|c| c.type_ == condition::READY && c.status == "True");
        (ready && get(&nps, &canary).await.is_some()).then_some(())
    })
    .await;

    // Converged means quiet: whatever it was given, nothing is rewritten over and over. The
    // last writes of the churn may still be in flight on a busy machine, so what is asserted
    // is that a quiet 3 s comes, not that the first one is.
    eventually(
        "3 s without native writes while nothing changes",
        CONVERGE,
        async |seen| {
            let before = native_writes(metrics).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let after = native_writes(metrics).await;
            *seen = format!("{before} then {after} native writes");
            (before == after).then_some(())
        },
    )
    .await;

    let log = operator.output();
    assert!(!operator.has_exited(), "the operator exited:\n{log}");
    let panics: Vec<&str> = log.lines().filter(|l| l.contains("panicked")).collect();
    assert!(
        panics.is_empty(),
        "panic lines in the operator's log: {panics:#?}"
    );
    println!(
        "fuzz: {total} cases: {} rejected at admission, {} admitted and enforced, \
         {reported_invalid} admitted and reported invalid in status; 0 crashes, 0 panic lines",
        total - admitted,
        admitted - reported_invalid
    );
}

async fn delete(client: &Client, resource: &ApiResource, binding: &Value) {
    let (api, name) = api_for(client, resource, binding);
    match api.delete(name, &DeleteParams::background()).await {
        // The generator repeats some names: an earlier entry deleted it already.
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting {} {name}: {e}", resource.kind),
    }
}
