//! Which engines can act: enabled by configuration, and with every native kind they write
//! served by the API server. CRD-backed kinds are tracked as their CRDs come and go.

use crate::cache::Driver;
use futures::{FutureExt, StreamExt, future};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{self, EngineSet, KyvernoKinds, NativeKind, Preference};
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

/// Engines enabled and served: an engine is installed when every kind it writes is served
/// (see [`engines::installed`]: Kyverno's are those of the API `kyverno` puts in force), but
/// for its optional kinds (MutatingAdmissionPolicy: an API server that does not serve it still
/// enforces the admission engine's validating policies); those of the enabled engines not
/// served are `unserved`.
pub fn engine_set(
    enabled: &BTreeSet<Engine>,
    kyverno: KyvernoKinds,
    served: &Served,
    preference: &Preference,
) -> EngineSet {
    EngineSet {
        enabled: enabled.clone(),
        installed: Engine::ALL
            .into_iter()
            .filter(|e| engines::installed(*e, kyverno, |k| served.contains(k)))
            .collect(),
        preference: preference.clone(),
        unserved: enabled
            .iter()
            .flat_map(|e| e.spec().optional_kinds.iter().copied())
            .filter(|k| !served.contains(k))
            .collect(),
        not_installed: kyverno
            .missing(|k| served.contains(k))
            .map(|why| (Engine::Kyverno, why))
            .into_iter()
            .collect(),
        ..EngineSet::default()
    }
}

/// Built-in kinds some engine declares optional: looked up by discovery, as not every API
/// server serves them.
fn optional_builtin(kind: &NativeKind) -> bool {
    kind.crd.is_none()
        && Engine::ALL
            .into_iter()
            .any(|e| e.spec().optional_kinds.contains(&kind))
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
    let builtin: Served = kinds
        .iter()
        .filter(|k| k.crd.is_none() && !optional_builtin(k))
        .copied()
        .collect();
    let (tx, rx) = watch::channel(builtin);
    let probed: Vec<_> = kinds
        .iter()
        .filter(|k| optional_builtin(k))
        .copied()
        .collect();
    let crd_kinds: Vec<_> = kinds
        .into_iter()
        .filter_map(|kind| Some((kind, kind.crd?)))
        .collect();
    // Counts the kinds not looked up yet; `discovered` turns true at zero.
    let lookups = crd_kinds.len() + probed.len();
    let (discovered_tx, discovered) = watch::channel(lookups == 0);
    let unknown = Arc::new(AtomicUsize::new(lookups));
    let first_lookup = || FirstLookup {
        unknown: unknown.clone(),
        discovered: discovered_tx.clone(),
    };
    let mut trackers: Vec<Driver> = crd_kinds
        .into_iter()
        .map(|(kind, crd)| track_crd(client.clone(), kind, crd, tx.clone(), first_lookup()).boxed())
        .collect();
    trackers.extend(
        probed
            .into_iter()
            .map(|kind| track_builtin(client.clone(), kind, tx.clone(), first_lookup()).boxed()),
    );
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
        record(kind, now, &served, &mut first_lookup, false);
    }
}

/// Marks `kind` served or not, logs a change (or the first answer, when `log_first`), and
/// counts the first lookup done.
fn record(
    kind: &'static NativeKind,
    now: bool,
    served: &watch::Sender<Served>,
    first_lookup: &mut Option<FirstLookup>,
    log_first: bool,
) {
    let changed = served.send_if_modified(|set| {
        if now {
            set.insert(kind)
        } else {
            set.remove(kind)
        }
    });
    if changed || (log_first && first_lookup.is_some()) {
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

/// How often an optional built-in kind is looked up again: only an API server upgrade (or a
/// change of its `--runtime-config`) serves it, which the operator may well outlive.
const BUILTIN_RECHECK: Duration = Duration::from_secs(300);

/// Marks the built-in `kind` served while discovery lists it (looked up every
/// [`BUILTIN_RECHECK`]; until a lookup answers, every few seconds).
async fn track_builtin(
    client: Client,
    kind: &'static NativeKind,
    served: watch::Sender<Served>,
    first_lookup: FirstLookup,
) {
    let mut first_lookup = Some(first_lookup);
    loop {
        let now = match client.list_api_group_resources(&kind.api_version()).await {
            Ok(list) => Some(list.resources.iter().any(|r| r.name == kind.plural)),
            // The group version itself is not served.
            Err(kube::Error::Api(status)) if status.code == 404 => Some(false),
            Err(error) => {
                tracing::warn!(%error, kind = kind.kind, "discovery failed; retrying");
                None
            }
        };
        let Some(now) = now else {
            tokio::time::sleep(Duration::from_secs(2)).await;
            continue;
        };
        record(kind, now, &served, &mut first_lookup, true);
        tokio::time::sleep(BUILTIN_RECHECK).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use nimbus_core::engines::{
        KUBEARMOR_POLICY, KYVERNO_CLUSTER_POLICY, KYVERNO_NAMESPACED_GENERATING_POLICY,
        KYVERNO_POLICY, KyvernoApi, MUTATING_ADMISSION_POLICY, MUTATING_ADMISSION_POLICY_BINDING,
        VALIDATING_ADMISSION_POLICY, VALIDATING_ADMISSION_POLICY_BINDING,
    };

    #[test]
    fn an_unserved_optional_kind_leaves_its_engine_installed_and_is_reported() {
        let enabled: BTreeSet<Engine> = Engine::ALL.into();
        let validating = [
            &VALIDATING_ADMISSION_POLICY,
            &VALIDATING_ADMISSION_POLICY_BINDING,
        ];
        let mutating = [
            &MUTATING_ADMISSION_POLICY,
            &MUTATING_ADMISSION_POLICY_BINDING,
        ];
        let kyverno = [&KYVERNO_POLICY, &KYVERNO_CLUSTER_POLICY];
        let cel = KyvernoApi::Cel.kinds();
        let generating = [&KYVERNO_NAMESPACED_GENERATING_POLICY];
        // (served, admission installed, kyverno installed, unserved)
        let table: &[(
            Vec<&'static NativeKind>,
            bool,
            bool,
            Vec<&'static NativeKind>,
        )] = &[
            // Kubernetes 1.36 with Kyverno.
            (
                [&validating[..], &mutating, &kyverno, cel, &generating].concat(),
                true,
                true,
                vec![],
            ),
            // An older API server: no MutatingAdmissionPolicy, validating still enforced.
            (
                [&validating[..], &kyverno, cel, &generating].concat(),
                true,
                true,
                mutating.to_vec(),
            ),
            // Without the validating kinds the engine is not installed at all.
            ([&mutating[..], &generating].concat(), false, false, vec![]),
            // Kyverno needs both of its legacy kinds, or all four of its CEL ones.
            (
                [
                    &validating[..],
                    &mutating,
                    &[&KYVERNO_POLICY, &KUBEARMOR_POLICY],
                    &cel[..3],
                    &generating,
                ]
                .concat(),
                true,
                false,
                vec![],
            ),
            // A Kyverno serving its CEL kinds but not NamespacedGeneratingPolicy: installed
            // (escapeToHost and cocoWorkload are enforced), that kind unserved (virtualPatch is
            // reported, see nimbus_core's translate).
            (
                [&validating[..], &mutating, cel].concat(),
                true,
                true,
                generating.to_vec(),
            ),
            // Only the legacy kinds: the same (nothing is written in it there).
            (
                [&validating[..], &mutating, &kyverno].concat(),
                true,
                true,
                generating.to_vec(),
            ),
        ];
        for (i, (served, admission, kyverno, unserved)) in table.iter().enumerate() {
            let served: Served = served.iter().copied().collect();
            let set = engine_set(
                &enabled,
                KyvernoKinds::Auto,
                &served,
                &Preference::default(),
            );
            assert_eq!(
                set.installed.contains(&Engine::Admission),
                *admission,
                "row {i}"
            );
            assert_eq!(
                set.installed.contains(&Engine::Kyverno),
                *kyverno,
                "row {i}"
            );
            let want: BTreeSet<&NativeKind> = unserved.iter().copied().collect();
            assert_eq!(set.unserved, want, "row {i}");
        }
        // A disabled engine's optional kinds are nobody's concern.
        let enabled: BTreeSet<Engine> = [Engine::Kyverno].into();
        let set = engine_set(
            &enabled,
            KyvernoKinds::Auto,
            &Served::new(),
            &Preference::default(),
        );
        assert_eq!(set.unserved, BTreeSet::from(generating));
    }

    #[test]
    fn optional_builtin_kinds_are_looked_up() {
        assert!(optional_builtin(&MUTATING_ADMISSION_POLICY));
        assert!(!optional_builtin(&VALIDATING_ADMISSION_POLICY));
        assert!(!optional_builtin(&KYVERNO_POLICY));
    }
}
