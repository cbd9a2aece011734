//! Which engines can act: enabled by configuration, and with every native kind they write
//! served by the API server. CRD-backed kinds are tracked as their CRDs come and go.

use crate::cache::Driver;
use futures::{FutureExt, StreamExt, future};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{self, EngineSet, NativeKind};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::watch;

/// Native kinds currently served.
pub type Served = BTreeSet<&'static NativeKind>;

/// Engines enabled and served.
pub fn engine_set(enabled: &BTreeSet<Engine>, served: &Served) -> EngineSet {
    EngineSet {
        enabled: enabled.clone(),
        installed: Engine::ALL
            .into_iter()
            .filter(|e| engines::kinds(*e).iter().all(|k| served.contains(k)))
            .collect(),
        ..EngineSet::default()
    }
}

/// Tracks the kinds of `engines`: built-in kinds are served from the start, CRD-backed ones
/// once their CRD exists and discovery lists them. Returns the live set and its driver.
pub fn track(client: Client, engines: &BTreeSet<Engine>) -> (watch::Receiver<Served>, Driver) {
    let kinds: BTreeSet<&'static NativeKind> = engines
        .iter()
        .flat_map(|e| engines::kinds(*e).iter().copied())
        .collect();
    let builtin: Served = kinds.iter().filter(|k| k.crd.is_none()).copied().collect();
    let (tx, rx) = watch::channel(builtin);
    let trackers: Vec<Driver> = kinds
        .into_iter()
        .filter_map(|kind| Some((kind, kind.crd?)))
        .map(|(kind, crd)| track_crd(client.clone(), kind, crd, tx.clone()).boxed())
        .collect();
    // With no CRD-backed kind there is nothing to track: the driver idles rather than end, and
    // keeps the sender so that subscribers' change streams stay open.
    let driver = future::join_all(trackers).then(move |_| async move {
        let _served = tx;
        future::pending::<()>().await
    });
    (rx, driver.boxed())
}

/// Watches one CRD's metadata (not its schema, which can be megabytes) and marks `kind`
/// served while the CRD exists and discovery lists the resource.
async fn track_crd(
    client: Client,
    kind: &'static NativeKind,
    crd: &'static str,
    served: watch::Sender<Served>,
) {
    let api: Api<PartialObjectMeta<CustomResourceDefinition>> = Api::all(client.clone());
    let mut events = watcher::watch_object(api, crd).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let exists = match event {
            Ok(crd) => crd.is_some(),
            Err(error) => {
                tracing::warn!(%crd, %error, "watching CRD failed; retrying");
                continue;
            }
        };
        let now = exists && discovered(&client, kind).await;
        let changed = served.send_if_modified(|set| {
            if now {
                set.insert(kind)
            } else {
                set.remove(kind)
            }
        });
        if changed {
            tracing::info!(
                kind = kind.kind,
                group = kind.group,
                served = now,
                "engine kind availability changed"
            );
        }
    }
}

/// Whether discovery lists `kind`, waiting a while for a just-created CRD to be established.
async fn discovered(client: &Client, kind: &NativeKind) -> bool {
    for _ in 0..120 {
        match client.list_api_group_resources(&kind.api_version()).await {
            Ok(list) if list.resources.iter().any(|r| r.name == kind.plural) => return true,
            Ok(_) => {}
            Err(error) => tracing::debug!(%error, kind = kind.kind, "discovery not ready"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}
