//! SecurityIntentExceptions, honoured by the engine enforcing escapeToHost and only until they
//! expire. The deciders are the real ones: Kyverno v1.19.1's admission controller, in both of
//! its policy APIs (PolicyExceptions the operator writes), and kube-apiserver's own admission
//! policies (a match condition the operator writes). An exception expiring 20 s into the test
//! lets a privileged pod in before, and not after; a pod it does not select is denied
//! throughout. The privileged pod admitted while it held runs on: Kyverno's reports controller
//! reports it once the exception has expired, and so does our report. An exception of one Pod
//! Security control lets the privileged pod in, and not the same pod sharing the host's PID
//! namespace.

use crate::common::{CONVERGE, apply, unique};
use crate::{Selecting, bind_cluster, intent, unbind_cluster};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::jiff::{SignedDuration, Timestamp, Unit};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use nimbus_api::SecurityIntentException;
use nimbus_core::engines::KyvernoApi;
use nimbus_testenv::{ControlPlane, eventually};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

mod named;

/// How long the exception lasts from its creation.
const LASTS: SignedDuration = SignedDuration::from_secs(20);

/// `Ok` when the API server admits a privileged pod labelled `labels` in `ns` (dry run: nothing
/// is stored), `Err` with its refusal otherwise.
async fn privileged_pod(
    client: &Client,
    ns: &str,
    labels: serde_json::Value,
) -> Result<(), String> {
    dry_run_pod(client, ns, labels, HostPid::No).await
}

/// Whether the pod [`dry_run_pod`] creates shares the host's PID namespace.
#[derive(Clone, Copy, Debug)]
enum HostPid {
    Yes,
    No,
}

/// As [`privileged_pod`], the pod also sharing the host's PID namespace when `host_pid` says:
/// another control of the Pod Security Standards (Host Namespaces) than its privileged
/// container's (Privileged Containers).
async fn dry_run_pod(
    client: &Client,
    ns: &str,
    labels: serde_json::Value,
    host_pid: HostPid,
) -> Result<(), String> {
    let mut spec = json!({"containers": [crate::kyverno::container(json!({"privileged": true}))]});
    if matches!(host_pid, HostPid::Yes) {
        spec["hostPID"] = true.into();
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "exc-", "labels": labels},
        "spec": spec,
    }))
    .expect("pod");
    admitted(&Api::<Pod>::namespaced(client.clone(), ns), &pod).await
}

/// `Ok` when the API server admits `object` into `api` (dry run: nothing is stored), `Err` with
/// its refusal otherwise.
async fn admitted<K>(api: &Api<K>, object: &K) -> Result<(), String>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match api.create(&dry_run, object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) => Err(e.message),
        Err(e) => panic!("creating a {}: {e}", K::kind(&())),
    }
}

/// `Ok` when the API server admits and stores `object` into `api` (or holds it already, from an
/// earlier admitted try), `Err` with its refusal otherwise.
async fn stored<K>(api: &Api<K>, object: &K) -> Result<(), String>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(kube::Error::Api(e)) => Err(e.message),
        Err(e) => panic!("creating a {}: {e}", K::kind(&())),
    }
}

/// Creates an exception in `api`'s namespace from `binding`'s intent `intent` for the pods
/// labelled `labels`, expiring [`LASTS`] from now; returns its name and expiry.
async fn except(
    api: &Api<SecurityIntentException>,
    binding: serde_json::Value,
    intent: &str,
    labels: serde_json::Value,
) -> (String, Timestamp) {
    except_controls(api, binding, intent, labels, &[]).await
}

/// As [`except`], out of only the Pod Security `controls` when it names any.
async fn except_controls(
    api: &Api<SecurityIntentException>,
    binding: serde_json::Value,
    intent: &str,
    labels: serde_json::Value,
    controls: &[&str],
) -> (String, Timestamp) {
    let name = unique("vendor");
    let expires_at = Timestamp::now()
        .round(Unit::Second)
        .expect("rounded")
        .checked_add(LASTS)
        .expect("expiry");
    let exception = json!({
        "apiVersion": "exceptions.security.nimbus.com/v1alpha1", "kind": "SecurityIntentException",
        "metadata": {"name": name},
        "spec": {
            "binding": binding,
            "intents": [intent],
            "selector": {"matchLabels": labels},
            "reason": "the vendor's agent until its 2.4 release",
            "expiresAt": expires_at.to_string(),
        }
    });
    let mut exception = exception;
    if !controls.is_empty() {
        exception["spec"]["podSecurityControls"] = json!(controls);
    }
    apply(api, &name, &exception).await;
    (name, expires_at)
}

/// The exception's `Active` condition: `(status, reason)`.
async fn active(api: &Api<SecurityIntentException>, name: &str) -> Option<(String, String)> {
    let e = api.get_opt(name).await.ok()??;
    let c = e
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Active")?;
    Some((c.status, c.reason))
}

/// Our report's result for escapeToHost by Kyverno on the pod `name` of `ns`, in whichever report kind
/// the operator writes (OpenReports where served, else `wgpolicyk8s.io`): `(result, message)`.
async fn our_result(client: &Client, ns: &str, name: &str) -> Option<(String, String)> {
    let kinds = [
        ("openreports.io", "v1alpha1", "Report", "reports"),
        (
            "wgpolicyk8s.io",
            "v1alpha2",
            "PolicyReport",
            "policyreports",
        ),
    ];
    for (group, version, kind, plural) in kinds {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let reports = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource);
        let Ok(Some(report)) = reports.get_opt(&format!("nimbus-pod-{name}")).await else {
            continue;
        };
        let results = report.data["results"].as_array()?;
        // A cluster binding's escapeToHost has a result per policy: Kyverno's is the cluster
        // policy's (KubeArmor's, the namespace's policy's).
        let result = results.iter().find(|r| {
            r["rule"] == "escapeToHost"
                && r["properties"]["engines"]
                    .as_str()
                    .is_some_and(|e| e.contains("kyverno"))
        })?;
        let text = |key: &str| result[key].as_str().map(str::to_owned);
        return Some((text("result")?, text("message")?));
    }
    None
}

/// Whether Kyverno's background scan judges running pods, so that a pod admitted while the
/// exception held is reported once it has expired (kube-apiserver's admission policies keep
/// no report of existing objects).
#[derive(Clone, Copy, PartialEq)]
enum Scanned {
    Yes,
    No,
}

/// escapeToHost (baseline) bound by a cluster binding to `app: web` in a new namespace
/// (`prefix`) of `cp`: a client, the namespace, and the intent's and binding's names.
async fn escape_bound(
    cp: &ControlPlane,
    prefix: &str,
) -> (Client, nimbus_testenv::TestNamespace, String, String) {
    let client = cp.client().expect("client");
    let ns = crate::kyverno::namespace(cp, prefix).await;
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
    let csib = bind_cluster(&client, ns.name(), &si, &selecting).await;
    (client, ns, si, csib)
}

/// escapeToHost (baseline) bound by a cluster binding to `app: web` in a namespace of `cp`,
/// whose operator enforces it with `engine`; an exception for the pods labelled
/// `tier: legacy` expires 20 s after it is created. Prints the lag from `expiresAt` to the
/// first denial of the excepted pod. Where the engine's background scan judges running pods
/// (`scanned`), a privileged pod created while the exception held runs on after it, and our
/// report fails it, from the scan.
async fn an_exception_holds_until_it_expires(cp: &ControlPlane, engine: &str, scanned: Scanned) {
    let (client, ns, si, csib) = escape_bound(cp, "exc").await;
    let excepted = json!({"app": "web", "tier": "legacy"});
    let held = json!({"app": "web"});
    eventually(
        &format!("{engine}: the bound pods denied"),
        CONVERGE,
        async |seen| {
            let results = (
                privileged_pod(&client, ns.name(), excepted.clone()).await,
                privileged_pod(&client, ns.name(), held.clone()).await,
            );
            *seen = format!("{results:?}");
            (results.0.is_err() && results.1.is_err()).then_some(())
        },
    )
    .await;

    let exceptions = Api::<SecurityIntentException>::namespaced(client.clone(), ns.name());
    let (name, expires_at) = except(
        &exceptions,
        json!({"kind": "ClusterSecurityIntentBinding", "name": csib}),
        &si,
        json!({"tier": "legacy"}),
    )
    .await;

    // Before expiry: the excepted pod is admitted, the other still denied, and the exception
    // says it is honoured. Where the engine's scan judges running pods, the excepted pod is
    // created for real, to run on after expiry: the first creation admitted is that pod (not a
    // dry run followed by a creation, which a busy machine may push past the expiry).
    let agent: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent", "labels": excepted},
        "spec": {"containers": [crate::kyverno::container(json!({"privileged": true}))]},
    }))
    .expect("pod");
    let pods = Api::<Pod>::namespaced(client.clone(), ns.name());
    let admit = async || match scanned {
        Scanned::No => privileged_pod(&client, ns.name(), excepted.clone()).await,
        Scanned::Yes => stored(&pods, &agent).await,
    };
    eventually(
        &format!("{engine}: the excepted pod admitted"),
        CONVERGE,
        async |seen| {
            let admitted = admit().await;
            let state = active(&exceptions, &name).await;
            *seen = format!("{admitted:?}, Active: {state:?}");
            (admitted.is_ok() && state == Some(("True".into(), "Active".into()))).then_some(())
        },
    )
    .await;
    assert!(
        Timestamp::now() < expires_at,
        "{engine}: the exception took its whole 20 s to be honoured"
    );
    privileged_pod(&client, ns.name(), held.clone())
        .await
        .expect_err("a pod the exception does not select is still denied");

    // At expiry: denied again, the exception says why it is no longer honoured.
    let wait = Duration::try_from(expires_at.duration_since(Timestamp::now())).unwrap_or_default();
    tokio::time::sleep(wait).await;
    let started = Instant::now();
    let denial = eventually(
        &format!("{engine}: the excepted pod denied after expiry"),
        CONVERGE,
        async |seen| {
            let admitted = privileged_pod(&client, ns.name(), excepted.clone()).await;
            *seen = format!("{admitted:?}");
            let denied = admitted.err()?;
            Some((Timestamp::now(), denied))
        },
    )
    .await;
    let lag = Duration::try_from(denial.0.duration_since(expires_at)).unwrap_or_default();
    eprintln!(
        "{engine}: denied {lag:?} after expiresAt ({:?} of polling): {}",
        started.elapsed(),
        denial.1
    );
    eventually(
        &format!("{engine}: the exception Expired"),
        CONVERGE,
        async |seen| {
            let state = active(&exceptions, &name).await;
            *seen = format!("{state:?}");
            (state == Some(("False".into(), "Expired".into()))).then_some(())
        },
    )
    .await;
    if scanned == Scanned::Yes {
        // Admission judges only what is created next: the pod admitted while the exception held
        // still runs privileged, Kyverno's scan reports it, and so does our report.
        let failed = eventually(
            &format!("{engine}: our report fails the privileged pod still running"),
            crate::kyverno::REPORTED,
            async |seen| {
                let (result, message) = our_result(&client, ns.name(), "agent").await?;
                *seen = format!("{result}: {message}");
                (result == "fail" && message.contains("RunningInViolation")).then(Timestamp::now)
            },
        )
        .await;
        let after = Duration::try_from(failed.duration_since(expires_at)).unwrap_or_default();
        eprintln!(
            "{engine}: our report failed the running privileged pod {after:?} after expiresAt"
        );
    }
    unbind_cluster(&client, &csib).await;
}

/// escapeToHost (baseline) bound by a cluster binding to `app: web`, enforced with `engine`, and
/// an exception for the pods labelled `tier: legacy` out of only Privileged Containers,
/// expiring 20 s after it is created. While it holds, the excepted workload's privileged pod is
/// admitted, but the same pod sharing the host's PID namespace (Host Namespaces, a control it
/// does not name) is denied, and so is a privileged pod it does not select; from expiry the
/// privileged pod is denied again.
async fn an_exception_of_one_control_holds_the_others(cp: &ControlPlane, engine: &str) {
    let (client, ns, si, csib) = escape_bound(cp, "exc-ctl").await;
    let excepted = json!({"app": "web", "tier": "legacy"});
    let held = json!({"app": "web"});
    let judged = async || {
        (
            dry_run_pod(&client, ns.name(), excepted.clone(), HostPid::No).await,
            dry_run_pod(&client, ns.name(), excepted.clone(), HostPid::Yes).await,
            dry_run_pod(&client, ns.name(), held.clone(), HostPid::No).await,
        )
    };
    eventually(
        &format!("{engine}: the bound pods denied"),
        CONVERGE,
        async |seen| {
            let results = judged().await;
            *seen = format!("{results:?}");
            (results.0.is_err() && results.1.is_err() && results.2.is_err()).then_some(())
        },
    )
    .await;

    let exceptions = Api::<SecurityIntentException>::namespaced(client.clone(), ns.name());
    let (name, expires_at) = except_controls(
        &exceptions,
        json!({"kind": "ClusterSecurityIntentBinding", "name": csib}),
        &si,
        json!({"tier": "legacy"}),
        &["Privileged Containers"],
    )
    .await;
    let (_, host_pid, other) = eventually(
        &format!("{engine}: the excepted privileged pod admitted"),
        CONVERGE,
        async |seen| {
            let results = judged().await;
            let state = active(&exceptions, &name).await;
            *seen = format!("{results:?}, Active: {state:?}");
            (results.0.is_ok() && state == Some(("True".into(), "Active".into())))
                .then_some(results)
        },
    )
    .await;
    assert!(
        Timestamp::now() < expires_at,
        "{engine}: the exception took its whole 20 s to be honoured"
    );
    let host_pid = host_pid.expect_err("the excepted workload sharing the host's PID namespace");
    eprintln!("{engine}: the excepted workload with hostPID denied: {host_pid}");
    assert!(
        host_pid.to_lowercase().contains("host"),
        "{engine}: denied for its host namespace: {host_pid}"
    );
    other.expect_err("a privileged pod the exception does not select");
    // Judged again, not only once: the hostPID pod stays denied while the privileged one is in.
    let again = judged().await;
    assert!(
        again.0.is_ok() && again.1.is_err() && again.2.is_err(),
        "{engine}: {again:?}"
    );

    let wait = Duration::try_from(expires_at.duration_since(Timestamp::now())).unwrap_or_default();
    tokio::time::sleep(wait).await;
    let denial = eventually(
        &format!("{engine}: the excepted privileged pod denied after expiry"),
        CONVERGE,
        async |seen| {
            let admitted = privileged_pod(&client, ns.name(), excepted.clone()).await;
            *seen = format!("{admitted:?}");
            admitted.err().map(|denied| (Timestamp::now(), denied))
        },
    )
    .await;
    let lag = Duration::try_from(denial.0.duration_since(expires_at)).unwrap_or_default();
    eprintln!(
        "{engine}: the privileged pod denied {lag:?} after expiresAt: {}",
        denial.1
    );
    unbind_cluster(&client, &csib).await;
}

#[tokio::test]
async fn kyverno_lets_an_exception_of_one_control_out_of_that_control_only() {
    let cp = crate::kyverno::cluster(KyvernoApi::Legacy);
    an_exception_of_one_control_holds_the_others(cp, "kyverno").await;
}

#[tokio::test]
async fn kyverno_in_cel_kinds_lets_an_exception_of_one_control_out_of_that_control_only() {
    let cp = crate::kyverno::cluster(KyvernoApi::Cel);
    an_exception_of_one_control_holds_the_others(cp, "kyverno (CEL)").await;
}

#[tokio::test]
async fn the_admission_engine_lets_an_exception_of_one_control_out_of_that_control_only() {
    let cp = crate::admission::cluster();
    an_exception_of_one_control_holds_the_others(cp, "admission").await;
}

#[tokio::test]
async fn kyverno_honours_an_exception_until_it_expires() {
    let cp = crate::kyverno::cluster(KyvernoApi::Legacy);
    an_exception_holds_until_it_expires(cp, "kyverno", Scanned::Yes).await;
}

#[tokio::test]
async fn kyverno_in_cel_kinds_honours_an_exception_until_it_expires() {
    let cp = crate::kyverno::cluster(KyvernoApi::Cel);
    an_exception_holds_until_it_expires(cp, "kyverno (CEL)", Scanned::Yes).await;
}

#[tokio::test]
async fn the_admission_engine_honours_an_exception_until_it_expires() {
    let cp = crate::admission::cluster();
    an_exception_holds_until_it_expires(cp, "admission", Scanned::No).await;
}

/// A ClusterSecurityIntentException lets out the workloads of the namespaces it names, and
/// only those, until it expires: escapeToHost (baseline) bound by a cluster binding to
/// `app: web` in three namespaces and enforced by kube-apiserver's admission policies; the
/// exception names two of them. The excepted privileged pod is admitted in those two and
/// denied in the third; after expiry it is denied in all three.
#[tokio::test]
async fn a_cluster_exception_lets_out_the_namespaces_it_names_until_it_expires() {
    use nimbus_api::{ClusterSecurityIntentBinding, ClusterSecurityIntentException};
    let cp = crate::admission::cluster();
    let client = cp.client().expect("client");
    let (a, b, c) = (
        crate::admission::namespace(cp, "cexc-a").await,
        crate::admission::namespace(cp, "cexc-b").await,
        crate::admission::namespace(cp, "cexc-c").await,
    );
    let si = intent(
        &client,
        "escapeToHost",
        "Block",
        json!({"psaLevel": ["baseline"]}),
    )
    .await;
    let csib = unique("eff");
    let bindings = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    let binding = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": csib},
        "spec": {"intents": [{"name": si}],
                 "selector": {"nsSelector": {"matchNames": [a.name(), b.name(), c.name()]},
                              "workloadSelector": {"matchLabels": {"app": "web"}}}}
    });
    apply(&bindings, &csib, &binding).await;
    crate::ready(&bindings, &csib, false).await;
    let excepted = json!({"app": "web", "tier": "legacy"});
    let admitted_in = async |labels: &serde_json::Value| {
        let mut admitted = Vec::new();
        for ns in [&a, &b, &c] {
            if privileged_pod(&client, ns.name(), labels.clone())
                .await
                .is_ok()
            {
                admitted.push(ns.name().to_owned());
            }
        }
        admitted
    };
    eventually("the bound pods denied everywhere", CONVERGE, async |seen| {
        let admitted = admitted_in(&excepted).await;
        *seen = format!("admitted in {admitted:?}");
        admitted.is_empty().then_some(())
    })
    .await;

    let name = unique("vendor");
    let expires_at = Timestamp::now()
        .round(Unit::Second)
        .expect("rounded")
        .checked_add(LASTS)
        .expect("expiry");
    let exceptions = Api::<ClusterSecurityIntentException>::all(client.clone());
    let exception = json!({
        "apiVersion": "exceptions.security.nimbus.com/v1alpha1",
        "kind": "ClusterSecurityIntentException",
        "metadata": {"name": name},
        "spec": {
            "binding": {"kind": "ClusterSecurityIntentBinding", "name": csib},
            "intents": [si],
            "namespaces": [a.name(), b.name()],
            "selector": {"matchLabels": {"tier": "legacy"}},
            "reason": "the vendor's agents until their 2.4 release",
            "expiresAt": expires_at.to_string(),
        }
    });
    apply(&exceptions, &name, &exception).await;
    let active = async || {
        let e = exceptions.get_opt(&name).await.ok()??;
        let c = e
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Active")?;
        Some((c.status, c.reason))
    };
    let named = vec![a.name().to_owned(), b.name().to_owned()];
    eventually(
        "the excepted pod admitted where named",
        CONVERGE,
        async |seen| {
            let admitted = admitted_in(&excepted).await;
            let state = active().await;
            *seen = format!("admitted in {admitted:?}, Active: {state:?}");
            (admitted == named && state == Some(("True".into(), "Active".into()))).then_some(())
        },
    )
    .await;
    assert!(
        Timestamp::now() < expires_at,
        "the exception took its whole 20 s to be honoured"
    );
    assert_eq!(
        admitted_in(&json!({"app": "web"})).await,
        Vec::<String>::new(),
        "a pod the exception does not select is still denied everywhere"
    );

    let wait = Duration::try_from(expires_at.duration_since(Timestamp::now())).unwrap_or_default();
    tokio::time::sleep(wait).await;
    eventually("denied everywhere after expiry", CONVERGE, async |seen| {
        let admitted = admitted_in(&excepted).await;
        let state = active().await;
        *seen = format!("admitted in {admitted:?}, Active: {state:?}");
        (admitted.is_empty() && state == Some(("False".into(), "Expired".into()))).then_some(())
    })
    .await;
    unbind_cluster(&client, &csib).await;
}

/// Whether each of `pods` (name, labels) in `ns` may reach an external address on 443/TCP,
/// by kube-network-policies' engine over the NetworkPolicies the API server holds there. (Not
/// cyclonus's matcher: it takes `NotIn` to fail on a pod without the key, where Kubernetes'
/// selectors, and the CNIs built on them, take it to hold.)
async fn external_egress(
    client: &Client,
    ns: &str,
    pods: &[(&'static str, serde_json::Value)],
) -> BTreeMap<&'static str, bool> {
    let policies = Api::<NetworkPolicy>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("listing NetworkPolicies")
        .items;
    let traffic: Vec<serde_json::Value> = pods
        .iter()
        .map(|(name, labels)| {
            json!({"name": name, "source": crate::netpol::pod(ns, "10.244.1.10", labels.clone()),
                   "destination": {"ip": crate::netpol::EXTERNAL_IP}, "port": 443,
                   "protocol": "TCP"})
        })
        .collect();
    let verdicts: BTreeMap<String, serde_json::Value> =
        crate::common::knp_decide(&json!({"policies": policies, "traffic": traffic}));
    pods.iter()
        .map(|(name, _)| (*name, verdicts[*name]["allowed"] == true))
        .collect()
}

/// denyExternalNetworkAccess enforced by NetworkPolicy on `app: web`, and an exception for the
/// pods labelled both `tier: legacy` and `team: vendor` (not one label: the selector left is
/// then a union of two NetworkPolicies) expiring 20 s after it is created. By
/// kube-network-policies' engine over what the API server holds: while it is in force only the excepted pod reaches
/// an external address; at expiry none does again.
#[tokio::test]
async fn network_policies_leave_out_what_an_exception_lets_out_until_it_expires() {
    let client = crate::cluster();
    let ns = crate::namespace("exc-np").await;
    let si = intent(&client, "denyExternalNetworkAccess", "Block", json!({})).await;
    let selecting = Selecting {
        labels: json!({"app": "web"}),
        allow_sensitive: None,
        shadow: false,
    };
    let sib = crate::bind_namespaced(&client, ns.name(), &si, &selecting).await;
    let pods = [
        (
            "excepted",
            json!({"app": "web", "tier": "legacy", "team": "vendor"}),
        ),
        ("legacy only", json!({"app": "web", "tier": "legacy"})),
        ("vendor only", json!({"app": "web", "team": "vendor"})),
        ("web", json!({"app": "web"})),
        (
            "not bound",
            json!({"app": "db", "tier": "legacy", "team": "vendor"}),
        ),
    ];
    let expect = |excepted: bool| -> BTreeMap<&'static str, bool> {
        pods.iter()
            .map(|(name, _)| {
                (
                    *name,
                    *name == "not bound" || (excepted && *name == "excepted"),
                )
            })
            .collect()
    };
    eventually("netpol: every bound pod cut off", CONVERGE, async |seen| {
        let allowed = external_egress(&client, ns.name(), &pods).await;
        *seen = format!("{allowed:?}");
        (allowed == expect(false)).then_some(())
    })
    .await;

    let exceptions = Api::<SecurityIntentException>::namespaced(client.clone(), ns.name());
    let (_, expires_at) = except(
        &exceptions,
        json!({"kind": "SecurityIntentBinding", "name": sib}),
        &si,
        json!({"tier": "legacy", "team": "vendor"}),
    )
    .await;
    eventually(
        "netpol: only the excepted pod reaches out",
        CONVERGE,
        async |seen| {
            let allowed = external_egress(&client, ns.name(), &pods).await;
            *seen = format!("{allowed:?}");
            (allowed == expect(true)).then_some(())
        },
    )
    .await;
    assert!(
        Timestamp::now() < expires_at,
        "netpol: the exception took its whole 20 s to be honoured"
    );

    let wait = Duration::try_from(expires_at.duration_since(Timestamp::now())).unwrap_or_default();
    tokio::time::sleep(wait).await;
    let cut = eventually(
        "netpol: every bound pod cut off again",
        CONVERGE,
        async |seen| {
            let allowed = external_egress(&client, ns.name(), &pods).await;
            *seen = format!("{allowed:?}");
            (allowed == expect(false)).then(Timestamp::now)
        },
    )
    .await;
    let lag = Duration::try_from(cut.duration_since(expires_at)).unwrap_or_default();
    eprintln!("netpol: the excepted pod cut off again {lag:?} after expiresAt");
}
