//! Which engines can act: enabled by configuration, and with every native kind they write
//! served by the API server. CRD-backed kinds are tracked as their CRDs come and go.

use crate::cache::Driver;
use futures::{FutureExt, StreamExt, future};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{self, EngineSet, KyvernoKinds, NativeKind};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Native kinds currently served.
pub type Served = BTreeSet<&'static NativeKind>;

/// Resolves once `kind` is served: what a CRD-backed kind's watch waits for.
pub fn when_served(
    served: &watch::Receiver<Served>,
    kind: &'static NativeKind,
) -> impl Future<Output = ()> + Send + 'static {
    let mut served = served.clone();
    async move {
        let _ = served.wait_for(|s| s.contains(kind)).await;
    }
}

/// Engines enabled and served.
pub fn engine_set(enabled: &BTreeSet<Engine>, kyverno: KyvernoKinds, served: &Served) -> EngineSet {
    EngineSet {
        enabled: enabled.clone(),
        installed: Engine::ALL
            .into_iter()
            .filter(|e| engines::installed(*e, kyverno, |k| served.contains(k)))
            .collect(),
        ..EngineSet::default()
    }
}

/// The live set of served kinds, and whether it is known yet.
pub struct Availability {
    pub served: watch::Receiver<Served>,
    /// True once every CRD-backed kind has been looked up once. Until then a kind missing from
    /// `served` may well be served: nothing may be translated, pruned or reported from it.
    pub discovered: watch::Receiver<bool>,
}

/// Tracks the kinds of `engines`: built-in kinds are served from the start, CRD-backed ones
/// once their CRD exists and discovery lists them. Returns the live set and its driver.
pub fn track(client: Client, engines: &BTreeSet<Engine>) -> (Availability, Driver) {
    let kinds: BTreeSet<&'static NativeKind> = engines
        .iter()
        .flat_map(|e| engines::kinds(*e).iter().copied())
        .collect();
    track_kinds(client, kinds)
}

/// Tracks `kinds` as [`track`] does.
pub fn track_kinds(client: Client, kinds: BTreeSet<&'static NativeKind>) -> (Availability, Driver) {
    let builtin: Served = kinds.iter().filter(|k| k.crd.is_none()).copied().collect();
    let (tx, rx) = watch::channel(builtin);
    let crd_kinds: Vec<_> = kinds
        .into_iter()
        .filter_map(|kind| Some((kind, kind.crd?)))
        .collect();
    // Counts the CRD-backed kinds not looked up yet; `discovered` turns true at zero.
    let (discovered_tx, discovered) = watch::channel(crd_kinds.is_empty());
    let unknown = Arc::new(AtomicUsize::new(crd_kinds.len()));
    let trackers: Vec<Driver> = crd_kinds
        .into_iter()
        .map(|(kind, crd)| {
            let first_lookup = FirstLookup {
                unknown: unknown.clone(),
                discovered: discovered_tx.clone(),
            };
            track_crd(client.clone(), kind, crd, tx.clone(), first_lookup).boxed()
        })
        .collect();
    // With no CRD-backed kind there is nothing to track: the driver idles rather than end, and
    // keeps the sender so that subscribers' change streams stay open.
    let driver = future::join_all(trackers).then(move |_| async move {
        let _served = (tx, discovered_tx);
        future::pending::<()>().await
    });
    let availability = Availability {
        served: rx,
        discovered,
    };
    (availability, driver.boxed())
}

/// Reports one kind's first lookup; the last one makes availability known.
struct FirstLookup {
    unknown: Arc<AtomicUsize>,
    discovered: watch::Sender<bool>,
}

impl FirstLookup {
    fn done(self) {
        if self.unknown.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.discovered.send_replace(true);
        }
    }
}

/// Watches one CRD's metadata (not its schema, which can be megabytes) and marks `kind`
/// served while the CRD exists and discovery lists the resource.
async fn track_crd(
    client: Client,
    kind: &'static NativeKind,
    crd: &'static str,
    served: watch::Sender<Served>,
    first_lookup: FirstLookup,
) {
    let mut first_lookup = Some(first_lookup);
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
        if let Some(first) = first_lookup.take() {
            first.done();
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
