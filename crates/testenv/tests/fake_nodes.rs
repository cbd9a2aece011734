//! With `fake_nodes`, pods are scheduled onto kwok nodes and reported Running.

mod common;

use std::time::{Duration, Instant};

use common::TestResult;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use nimbus_testenv::{ControlPlane, Options, eventually};

#[tokio::test]
async fn pods_run_on_fake_nodes() -> TestResult {
    let started = Instant::now();
    let cluster = ControlPlane::start(Options {
        fake_nodes: true,
        ..Options::default()
    })
    .await?;
    eprintln!(
        "control plane with fake nodes started in {:?}",
        started.elapsed()
    );
    assert_eq!(cluster.pids().len(), 5);
    let client = cluster.client()?;
    let created = nimbus_testenv::create_fake_node(&client, "fake-0").await?;
    // Schedulable from the start: no not-ready taint to lift.
    let taints = created.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(taints.is_empty(), "{taints:?}");

    let pods = Api::<Pod>::namespaced(client, "default");
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("sleeper".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".to_owned(),
                // Never pulled: kwok only pretends to run containers.
                image: Some("registry.invalid/sleeper:1".to_owned()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    pods.create(&PostParams::default(), &pod).await?;

    let node = eventually("the pod to run", Duration::from_secs(60), async |seen| {
        let pod = pods.get("sleeper").await.expect("getting pod sleeper");
        let node = pod.spec.and_then(|s| s.node_name);
        let status = pod.status.unwrap_or_default();
        if status.phase.as_deref() != Some("Running") {
            // Which component stalled: the scheduler (no node) or kwok (scheduled, not running).
            *seen = format!(
                "phase {:?} on node {node:?}, conditions {:?}",
                status.phase, status.conditions
            );
            return None;
        }
        node
    })
    .await;
    assert_eq!(node, "fake-0");
    Ok(())
}
