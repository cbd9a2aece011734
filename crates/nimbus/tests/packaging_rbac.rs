//! The operator does its whole job with nothing but what the Helm chart grants it: it runs
//! in-process, authenticated only by a token of the chart's ServiceAccount, under the chart's
//! ClusterRole and leader-election Role, drives every engine, and none of its calls is refused.
//!
//! A binary of its own: it installs a process-wide tracing subscriber, and no other test may
//! make refused calls (or run an operator) in the same process.

mod common;

use common::{
    CONVERGE, RELEASE, RELEASE_NAMESPACE, apply, container_flag, create_intent, engine_crds,
    entry_object, get, install_engine_crd, rendered, unique,
};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, PostParams};
use kube::{Api, Client};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, NimbusPolicyStatus,
    SecurityIntent, SecurityIntentBinding,
};
use nimbus_core::engines::{
    CONFIG_MAP, CRON_JOB, KUBEARMOR_POLICY, KYVERNO_POLICY, MUTATING_ADMISSION_POLICY,
    MUTATING_ADMISSION_POLICY_BINDING, NETWORK_POLICY, NativeKind, ROLE_BINDING,
    VALIDATING_ADMISSION_POLICY, VALIDATING_ADMISSION_POLICY_BINDING,
};
use nimbus_testenv::eventually;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use tokio_util::sync::CancellationToken;

/// The operator's identity in the Lease (the pod name in a cluster).
const LEADER: &str = "nimbus-packaging-test";

/// API calls refused with 401 or 403, as `<status> <method> <url>`: the calls the
/// ServiceAccount lacks a permission for. The admin client used alongside is never refused.
static REFUSED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn refused_calls() -> Vec<String> {
    REFUSED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Records refused calls from kube-client's `HTTP` spans (which carry method, URL and status),
/// and prints the operator's warnings in the test's output to explain a failure (`NIMBUS_LOG`
/// for more). The subscriber is process-wide, which is why this test has a binary of its own.
fn record_refused_calls() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _, filter::Targets};
    let logs = tracing_subscriber::fmt::layer()
        .with_test_writer()
        .with_filter(
            EnvFilter::try_from_env("NIMBUS_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
        );
    let refusals = RefusalRecorder
        .with_filter(Targets::new().with_target("kube_client", tracing::Level::DEBUG));
    tracing_subscriber::registry()
        .with(logs)
        .with(refusals)
        .try_init()
        .expect("installing the tracing subscriber that records refused calls");
}

struct RefusalRecorder;

#[derive(Default)]
struct HttpCall {
    method: String,
    url: String,
    status: Option<u64>,
}

impl tracing::field::Visit for HttpCall {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if field.name() == "http.status_code" {
            self.status = Some(value);
        }
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.record_u64(field, u64::try_from(value).unwrap_or_default());
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "http.method" => self.method = format!("{value:?}"),
            "http.url" => self.url = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S> tracing_subscriber::Layer<S> for RefusalRecorder
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() != "HTTP" {
            return;
        }
        let mut call = HttpCall::default();
        attrs.record(&mut call);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(call);
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        let Some(call) = extensions.get_mut::<HttpCall>() else {
            return;
        };
        values.record(call);
        if let Some(status @ (401 | 403)) = call.status {
            REFUSED
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(format!("{status} {} {}", call.method, call.url));
        }
    }
}

/// Waits until a policy's status lists as many native policies of each kind as `expected`, and
/// returns them as they exist in the cluster. Their names follow Nimbus's scheme, which
/// engines.rs checks; what matters here is that the operator could write every kind.
async fn native_policies<K>(
    client: &Client,
    api: &Api<K>,
    name: &str,
    namespace: Option<&str>,
    expected: &[(&NativeKind, usize)],
) -> Vec<DynamicObject>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + serde::Serialize,
{
    let expected: BTreeMap<&str, usize> = expected.iter().map(|(k, n)| (k.entry, *n)).collect();
    let mut last = None;
    let entries = eventually(
        &format!("{name} to list {expected:?}"),
        CONVERGE,
        async |seen| {
            let status: Option<NimbusPolicyStatus> = get(api, name)
                .await
                .and_then(|p| serde_json::to_value(p).ok())
                .and_then(|p| serde_json::from_value(p["status"].clone()).ok());
            let entries = status
                .as_ref()
                .and_then(|s| s.adapter_policies.clone())
                .unwrap_or_default();
            let mut kinds = BTreeMap::new();
            for entry in &entries {
                *kinds.entry(entry_object(entry, None).0.entry).or_insert(0) += 1;
            }
            if kinds == expected {
                return Some(entries);
            }
            last = status.or(last.take());
            *seen = format!("status {last:#?}\nrefused calls: {:#?}", refused_calls());
            None
        },
    )
    .await;
    let mut found = Vec::new();
    for entry in &entries {
        let (kind, ns, native_name) = entry_object(entry, namespace);
        let obj = common::native(client, kind, ns, native_name).await;
        found.push(obj.unwrap_or_else(|| panic!("{name}: {entry} is listed but does not exist")));
    }
    found
}

/// Waits for `Ready=True` in a binding's status conditions.
async fn ready<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + serde::Serialize,
{
    let mut last = Value::Null;
    eventually(&format!("{name} to become Ready"), CONVERGE, async |seen| {
        if let Some(obj) = get(api, name).await {
            last = serde_json::to_value(obj).expect("json")["status"].clone();
            let is_ready = last["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            if is_ready {
                return Some(());
            }
        }
        *seen = format!("status {last:#}\nrefused calls: {:#?}", refused_calls());
        None
    })
    .await
}

/// The chart's ServiceAccount, ClusterRole and leader-election Role are all the operator needs:
/// it runs authenticated only by a token of that ServiceAccount, drives every engine, and no
/// call it makes is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_needs_nothing_but_the_charts_rbac() {
    record_refused_calls();
    let cp = nimbus_testenv::shared();
    let admin = cp.client().expect("client");

    // What `helm install` creates, except the workload itself, which runs in-process here.
    let objects = common::install_chart_without_workload(&admin, &[]).await;
    for crd in engine_crds() {
        install_engine_crd(&admin, crd).await;
    }

    let deployment = rendered(&objects, "Deployment", RELEASE);
    let (client, service_account) = common::service_account_client(cp, deployment).await;
    let whoami = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .expect("SelfSubjectReview");
    assert_eq!(
        whoami
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username),
        Some(format!(
            "system:serviceaccount:{RELEASE_NAMESPACE}:{service_account}"
        ))
    );

    // The posture API too, serving the certificate the chart generated.
    let certificate = tempfile::tempdir().expect("temp dir");
    let tls = rendered(&objects, "Secret", "nimbus-posture-tls");
    let pem = |key: &str| {
        use base64::Engine as _;
        let encoded = tls["data"][key].as_str().expect("a certificate field");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .expect("base64");
        String::from_utf8(decoded).expect("PEM")
    };
    for key in ["tls.crt", "tls.key"] {
        std::fs::write(certificate.path().join(key), pem(key)).expect("certificate file");
    }
    let posture_port = nimbus_testenv::free_port().expect("a free port");
    let mut config = common::operator_config_from(deployment, LEADER);
    // The admission engine preferred, so that it writes (through the chart's RBAC) beside the
    // Kyverno policies of namespaced bindings, which it does not act on.
    config.engine_preference = "admission,kyverno".parse().expect("a preference");
    assert!(container_flag(deployment, "--posture-addr").is_some());
    config.posture = Some(nimbus_operator::posture::Config {
        addr: ([127, 0, 0, 1], posture_port).into(),
        certificate: nimbus_operator::posture::ServingCertificate {
            cert_file: certificate.path().join("tls.crt"),
            key_file: certificate.path().join("tls.key"),
        },
        reports: Default::default(),
    });

    let shutdown = CancellationToken::new();
    let operator = tokio::spawn(nimbus_operator::run(
        client.clone(),
        config,
        shutdown.clone(),
    ));

    // A namespaced binding exercising the NetworkPolicy, KubeArmor and Kyverno engines.
    let ns = cp.test_namespace("pkg-rbac").await.expect("namespace");
    let dns = create_intent(&admin, "dnsManipulation", "Block").await;
    let escape = create_intent(&admin, "escapeToHost", "Block").await;
    let coco = create_intent(&admin, "cocoWorkload", "Block").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(admin.clone(), ns.name());
    let refs: Vec<Value> = [&dns, &escape, &coco]
        .iter()
        .map(|n| json!({"name": n}))
        .collect();
    apply(&bindings, "web", &json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
        "metadata": {"name": "web"},
        "spec": {"intents": refs, "selector": {"workloadSelector": {"matchLabels": {"app": "web"}}}}
    }))
    .await;
    native_policies(
        &admin,
        &Api::<NimbusPolicy>::namespaced(admin.clone(), ns.name()),
        "web",
        Some(ns.name()),
        &[
            (&NETWORK_POLICY, 1),
            (&KUBEARMOR_POLICY, 4),
            (&KYVERNO_POLICY, 3),
        ],
    )
    .await;
    ready(&bindings, "web").await;

    // The posture reads Kyverno's PolicyReports through the chart's RBAC: under a binding in
    // shadow mode, a pod is said not scanned yet (no Kyverno runs here), not unread.
    apply(&bindings, "shadow", &json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
        "metadata": {"name": "shadow", "labels": {nimbus_api::MODE_LABEL: nimbus_api::MODE_SHADOW}},
        "spec": {"intents": [{"name": escape}],
                 "selector": {"workloadSelector": {"matchLabels": {"app": "shadowed"}}}}
    }))
    .await;
    common::bare_pod(&admin, ns.name(), "shadowed").await;
    eventually(
        "the shadowed binding's preview to read Kyverno's reports",
        CONVERGE,
        async |seen| {
            let binding = bindings.get("shadow").await.ok()?;
            let preview = binding.status?.preview?;
            *seen = format!("{preview:?}");
            preview
                .not_previewed
                .contains(&"NotScannedYet".to_owned())
                .then_some(())
        },
    )
    .await;
    // And writes the posture as OpenReports.
    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("openreports.io", "v1alpha1", "Report"),
        "reports",
    );
    let reports = Api::<DynamicObject>::namespaced_with(admin.clone(), ns.name(), &resource);
    eventually("the shadowed pod's report", CONVERGE, async |_| {
        let report = reports.get_opt("nimbus-pod-shadowed").await.ok()??;
        (report.data["summary"]["warn"] == 1).then_some(())
    })
    .await;

    // A cluster binding exercising the k8tls, RBAC and admission engines (RoleBindings to
    // `view`, which the operator may only grant through `bind`; a ValidatingAdmissionPolicy for
    // escapeToHost and a MutatingAdmissionPolicy for cocoWorkload, each with its binding).
    let intents: Api<SecurityIntent> = Api::all(admin.clone());
    // External addresses make the operator write a ConfigMap (the address list) as well.
    let tls = unique("tls");
    let mut tls_intent = common::intent(&tls, "assessTLS", "Audit");
    tls_intent["spec"]["intent"]["params"] = json!({"external_addresses": ["example.org:443"]});
    apply(&intents, &tls, &tls_intent).await;
    let sandbox = unique("sandbox");
    let mut sandbox_intent = common::intent(&sandbox, "namespaceSandbox", "Block");
    sandbox_intent["spec"]["intent"]["params"] =
        json!({"group": ["team-{namespace}"], "clusterRole": ["view"]});
    apply(&intents, &sandbox, &sandbox_intent).await;
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(admin.clone());
    let csib = unique("pkg");
    apply(&csibs, &csib, &json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": csib, "annotations": {nimbus_api::ALLOW_SENSITIVE_ANNOTATION: "assessTLS,namespaceSandbox"}},
        "spec": {
            "intents": [{"name": tls}, {"name": sandbox}, {"name": escape}, {"name": coco}],
            "selector": {"nsSelector": {"matchNames": [ns.name()]}}
        }
    }))
    .await;
    let cron_jobs = native_policies(
        &admin,
        &Api::<ClusterNimbusPolicy>::all(admin.clone()),
        &csib,
        None,
        &[
            (&CRON_JOB, 1),
            (&VALIDATING_ADMISSION_POLICY, 1),
            (&MUTATING_ADMISSION_POLICY, 1),
        ],
    )
    .await;
    let cron_jobs: Vec<_> = cron_jobs
        .into_iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "CronJob"))
        .collect();
    // Each admission policy is bound (the bindings are not listed in status).
    for kind in [
        &VALIDATING_ADMISSION_POLICY_BINDING,
        &MUTATING_ADMISSION_POLICY_BINDING,
    ] {
        let name = format!(
            "{csib}-{}",
            if kind.kind.starts_with("Validating") {
                "escapetohost"
            } else {
                "cocoworkload"
            }
        );
        assert!(
            common::native(&admin, kind, None, &name).await.is_some(),
            "{} {name} is missing",
            kind.kind
        );
    }
    let k8tls = container_flag(deployment, "--k8tls-namespace");
    assert_eq!(cron_jobs[0].metadata.namespace.as_deref(), k8tls);
    // Its ConfigMaps: the chart's fips-config and fluent-bit-config, and the operator's
    // address list.
    let volumes = &cron_jobs[0].data["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"];
    let config_maps: Vec<&str> = volumes
        .as_array()
        .expect("volumes")
        .iter()
        .filter_map(|v| v["configMap"]["name"].as_str())
        .collect();
    assert!(
        config_maps.contains(&"fips-config")
            && config_maps.contains(&"fluent-bit-config")
            && config_maps.len() > 2,
        "{volumes:#}"
    );
    for name in config_maps {
        assert!(
            common::native(&admin, &CONFIG_MAP, k8tls, name)
                .await
                .is_some(),
            "ConfigMap {name} of the k8tls CronJob is missing"
        );
    }
    let role_bindings = native_policies(
        &admin,
        &Api::<NimbusPolicy>::namespaced(admin.clone(), ns.name()),
        &format!("nimbus-ctlr-gen-{csib}"),
        Some(ns.name()),
        // escapeToHost's KubeArmor policies in the namespace.
        &[(&ROLE_BINDING, 1), (&KUBEARMOR_POLICY, 3)],
    )
    .await;
    let role_bindings: Vec<_> = role_bindings
        .into_iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "RoleBinding"))
        .collect();
    assert_eq!(role_bindings[0].data["roleRef"]["name"], "view");
    ready(&csibs, &csib).await;

    let lease = Api::<Lease>::namespaced(admin.clone(), RELEASE_NAMESPACE)
        .get(container_flag(deployment, "--leader-elect-lease-name").expect("lease"))
        .await
        .expect("the Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some(LEADER),
        "the operator leads through the chart's leader-election Role"
    );

    // The posture API answers kube-apiserver's front proxy (certificate verified as the name
    // the APIService makes kube-apiserver dial), authenticating it and authorizing the user
    // with the chart's delegated-authentication RBAC.
    let service = rendered(
        &objects,
        "APIService",
        "v1alpha1.posture.security.nimbus.com",
    );
    let server_name = format!(
        "{}.{}.svc",
        service["spec"]["service"]["name"]
            .as_str()
            .expect("service name"),
        service["spec"]["service"]["namespace"]
            .as_str()
            .expect("service namespace"),
    );
    let as_proxy = Client::try_from(common::with_front_proxy_certificate(
        cp,
        common::posture_direct(
            posture_port,
            &pem("ca.crt"),
            Some(&server_name),
            Some(("posture-admin", "system:masters")),
        ),
    ))
    .expect("a client of the posture API");
    eventually(
        "the posture API lists the test namespace",
        CONVERGE,
        async |seen| {
            let list = Api::<nimbus_api::posture::NamespacePosture>::all(as_proxy.clone())
                .list(&Default::default())
                .await;
            *seen = format!("{list:?}");
            list.ok()?
                .items
                .iter()
                .any(|n| n.metadata.name.as_deref() == Some(ns.name()))
                .then_some(())
        },
    )
    .await;

    let refused = refused_calls();
    assert!(
        refused.is_empty(),
        "the operator made calls its RBAC does not allow: {refused:#?}"
    );
    // And the ServiceAccount is no administrator.
    let secrets = Api::<Secret>::all(client.clone())
        .list(&Default::default())
        .await;
    assert!(
        matches!(&secrets, Err(kube::Error::Api(s)) if s.code == 403),
        "the operator's ServiceAccount must not read Secrets: {secrets:?}"
    );

    shutdown.cancel();
    tokio::time::timeout(CONVERGE, operator)
        .await
        .expect("the operator stops when asked")
        .expect("the operator task")
        .expect("the operator ran without error");
    common::delete(&csibs, &csib).await;
    for intent in [&dns, &escape, &coco, &tls, &sandbox] {
        common::delete(&intents, intent).await;
    }
}
