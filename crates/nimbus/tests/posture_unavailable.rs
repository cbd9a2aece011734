//! The hazard of every aggregated API: while no replica serves the posture API, its APIService
//! is unavailable, and kube-controller-manager's namespace controller cannot finish deleting a
//! namespace (it must know every namespaced resource of every group to empty it). Measured here
//! as the book states it (docs/src/operations.md, "Operational hazards"): a namespace deleted while the operator is down stays `Terminating`,
//! with the condition `NamespaceDeletionDiscoveryFailure` naming the posture group, and is
//! deleted once a replica serves again.
//!
//! A binary of its own: it takes its control plane's aggregated API down.

mod common;

use common::CONVERGE;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use nimbus_testenv::{LocalApiService, eventually};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long a deletion is watched while the API is down: longer than the namespace
/// controller's first retries.
const DOWN_FOR: Duration = Duration::from_secs(20);

/// The operator serving the posture API on `port` until the returned token is cancelled.
fn serve(cp: &nimbus_testenv::ControlPlane, port: u16, dir: &std::path::Path) -> CancellationToken {
    let certificate = nimbus_operator::posture::ServingCertificate {
        cert_file: dir.join("tls.crt"),
        key_file: dir.join("tls.key"),
    };
    let config = nimbus_operator::Config {
        posture: Some(nimbus_operator::posture::Config {
            addr: ([127, 0, 0, 1], port).into(),
            certificate,
            reports: Default::default(),
        }),
        ..Default::default()
    };
    let shutdown = CancellationToken::new();
    let (kube_config, token) = (cp.config().clone(), shutdown.clone());
    std::thread::spawn(move || {
        tokio::runtime::Runtime::new()
            .expect("operator runtime")
            .block_on(async move {
                let client = Client::try_from(kube_config).expect("operator client");
                nimbus_operator::run(client, config, token)
                    .await
                    .expect("the operator");
            });
    });
    shutdown
}

fn api_service(port: u16) -> LocalApiService<'static> {
    LocalApiService {
        group: nimbus_api::posture::GROUP,
        version: nimbus_api::posture::VERSION,
        namespace: "nimbus-system",
        service: "nimbus-posture",
        port,
    }
}

/// The namespace's `NamespaceDeletionDiscoveryFailure` condition, if True.
fn discovery_failure(ns: &Namespace) -> Option<String> {
    ns.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "NamespaceDeletionDiscoveryFailure" && c.status == "True")
        .map(|c| c.message.clone().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_deleted_while_no_replica_serves_waits_for_one() {
    let cp = common::cluster();
    let client = cp.client().expect("client");
    let port = nimbus_testenv::free_port().expect("a port");
    let service = api_service(port);
    let cert = nimbus_testenv::serving_cert(&[&service.server_name()]).expect("a certificate");
    let dir = tempfile::tempdir().expect("a directory");
    std::fs::write(dir.path().join("tls.crt"), &cert.cert_pem).expect("tls.crt");
    std::fs::write(dir.path().join("tls.key"), &cert.key_pem).expect("tls.key");

    // Installed and served, then every replica goes.
    let operator = serve(cp, port, dir.path());
    service
        .register(cp, &cert.ca_pem, CONVERGE)
        .await
        .expect("registering the posture API");
    operator.cancel();
    let api_services: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "apiregistration.k8s.io",
            "v1",
            "APIService",
        )),
    );
    let name = format!("{}.{}", service.version, service.group);
    eventually("the APIService to be unavailable", CONVERGE, async |seen| {
        let status = api_services.get(&name).await.ok()?.data["status"].clone();
        *seen = status.to_string();
        status["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Available" && c["status"] == "False")
            .then_some(())
    })
    .await;

    // A namespace with something in it is deleted meanwhile: it stays, and says why.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let doomed = "doomed";
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": doomed}})).expect("namespace"),
        )
        .await
        .expect("creating the namespace");
    Api::<ConfigMap>::namespaced(client.clone(), doomed)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "data"}})).expect("ConfigMap"),
        )
        .await
        .expect("creating a ConfigMap");
    namespaces
        .delete(doomed, &DeleteParams::default())
        .await
        .expect("deleting the namespace");
    let failure = eventually(
        "the namespace controller to report the discovery failure",
        CONVERGE,
        async |seen| {
            let ns = namespaces.get(doomed).await.ok()?;
            *seen = format!("{:?}", ns.status);
            discovery_failure(&ns)
        },
    )
    .await;
    assert!(
        failure.contains(nimbus_api::posture::GROUP),
        "the failure names another group: {failure}"
    );
    tokio::time::sleep(DOWN_FOR).await;
    let stuck = namespaces
        .get_opt(doomed)
        .await
        .expect("reading the namespace");
    assert!(
        stuck.is_some(),
        "the namespace was deleted while the posture API was down: the hazard is gone, update docs/src/operations.md"
    );

    // A replica serves again: the deletion completes.
    let started = Instant::now();
    let _operator = serve(cp, port, dir.path());
    eventually(
        "the namespace to be deleted once the posture API is back",
        Duration::from_secs(300),
        async |seen| {
            let ns = namespaces.get_opt(doomed).await.ok()?;
            *seen = format!("{:?}", ns.as_ref().and_then(|n| n.status.clone()));
            ns.is_none().then_some(())
        },
    )
    .await;
    eprintln!(
        "namespace deleted {:.1} s after the posture API was served again",
        started.elapsed().as_secs_f64()
    );
}
