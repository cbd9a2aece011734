//! The computed posture objects of one kind, versioned so lists and watches have Kubernetes'
//! resourceVersion semantics: a list says at which version it was taken, and a watch from that
//! version sees every later change exactly once, or `410 Gone` when it is too old to replay.
//!
//! Versions count up from the process start time in microseconds, so a version handed out by
//! another replica (behind the same Service) is unknown here and answered with 410: the client
//! relists rather than missing changes.

use super::table::{Printed, Row};
use nimbus_api::posture::PostureKind;
use serde_json::value::RawValue;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;
use tokio::sync::broadcast;

/// How many changes a watch can resume across. A live watch needs none (it streams); only a
/// list-then-watch gap or a reconnect does, and beyond this the client relists (410), as with
/// kube-apiserver's watch cache. Each kept change holds its object's old and new versions.
const HISTORY: usize = 1_000;
/// How long a change is kept for a watch to resume across, at most: kube-apiserver's watch
/// cache sizes its history to about this (`eventFreshDuration`). Beyond it the versions a
/// change holds are let go ([`Store::expire`]), so that a store at rest holds its objects alone.
pub const FRESH: std::time::Duration = std::time::Duration::from_secs(75);

/// Versions shared by every kind's store (one version order per replica).
#[derive(Clone)]
pub struct Clock(Arc<AtomicU64>);

impl Clock {
    pub fn starting_now() -> Self {
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2));
        Self(Arc::new(AtomicU64::new(micros)))
    }

    fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Added => "ADDED",
            Change::Modified => "MODIFIED",
            Change::Deleted => "DELETED",
        }
    }
}

/// An object and what it is served as, serialized once as it changes: a list of thousands of
/// objects, as JSON or as a Table, is then a concatenation, not thousands of serializations.
#[derive(Debug)]
pub struct Stored<T> {
    pub object: Arc<T>,
    pub serialized: Arc<Serialized>,
}

impl<T> Clone for Stored<T> {
    fn clone(&self) -> Self {
        Self {
            object: self.object.clone(),
            serialized: self.serialized.clone(),
        }
    }
}

/// What an object is served as, serialized from it when it is stored: a changed object is
/// stored anew, so nothing here outlives the version it was serialized from.
#[derive(Debug)]
pub struct Serialized {
    /// Its JSON: a get, a list item, a watch event's object; and a Table row's object with
    /// `includeObject=Object`.
    pub json: Box<RawValue>,
    /// Its Table row, all but the Age (which changes with the time).
    pub row: Row,
}

impl Serialized {
    fn of<T: Printed>(object: &T) -> Self {
        let serialized =
            serde_json::value::to_raw_value(object).and_then(|json| Ok((json, Row::of(object)?)));
        match serialized {
            Ok((json, row)) => Self { json, row },
            Err(error) => {
                // Our own types always serialize; should one not, its readers see `null`.
                tracing::error!(%error, "serializing a posture object");
                Self {
                    json: RawValue::NULL.to_owned(),
                    row: Row::unserializable(),
                }
            }
        }
    }

    /// What a Table row is assembled from.
    pub fn table_row(&self) -> (&Row, &RawValue) {
        (&self.row, &self.json)
    }
}

impl<T: Printed> Stored<T> {
    fn new(object: T) -> Self {
        Self {
            serialized: Arc::new(Serialized::of(&object)),
            object: Arc::new(object),
        }
    }
}

#[derive(Debug)]
pub struct Event<T> {
    pub version: u64,
    pub change: Change,
    pub object: Stored<T>,
    /// The object before the change (a watch with a selector needs both sides).
    pub previous: Option<Arc<T>>,
}

impl<T> Clone for Event<T> {
    fn clone(&self) -> Self {
        Self {
            version: self.version,
            change: self.change,
            object: self.object.clone(),
            previous: self.previous.clone(),
        }
    }
}

/// `(namespace or "", name)`.
pub type Key = (String, String);

pub fn key_of<T: PostureKind>(object: &T) -> Key {
    let meta = object.metadata();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

pub struct Store<T> {
    clock: Clock,
    inner: RwLock<Inner<T>>,
    changes: broadcast::Sender<Event<T>>,
}

struct Inner<T> {
    objects: BTreeMap<Key, Stored<T>>,
    /// The changes after version `replayable_from`, oldest first, with when they were made.
    history: VecDeque<(Instant, Event<T>)>,
    replayable_from: u64,
    /// The version of the current contents.
    version: u64,
}

impl<T> Inner<T> {
    /// Drops the oldest changes while `stale(how many are kept, when the oldest was made)`.
    fn forget(&mut self, stale: impl Fn(usize, Instant) -> bool) {
        while let Some((at, _)) = self.history.front()
            && stale(self.history.len(), *at)
            && let Some((_, dropped)) = self.history.pop_front()
        {
            self.replayable_from = dropped.version;
        }
    }
}

/// The changes a watch replays, and the channel of the later ones.
pub type Watch<T> = (Vec<Event<T>>, broadcast::Receiver<Event<T>>);

/// A watch that cannot be served from `version`: it is older than the history kept, or was
/// never handed out here.
#[derive(Debug)]
pub struct Gone {
    pub version: u64,
}

impl<T: Printed + Clone + PartialEq + Send + Sync + 'static> Store<T> {
    pub fn new(clock: Clock) -> Self {
        let now = clock.now();
        Self {
            clock,
            inner: RwLock::new(Inner {
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                replayable_from: now,
                version: now,
            }),
            changes: broadcast::channel(4096).0,
        }
    }

    /// Replaces the contents with `objects`; only what differs gets a new version and an event.
    #[cfg(test)]
    pub fn replace(&self, objects: impl IntoIterator<Item = T>) {
        self.replace_within(|_| true, objects);
    }

    /// Replaces the objects whose key is `in_scope` with `objects` (all in scope) and keeps the
    /// others; only what differs gets a new version and an event.
    pub fn replace_within(
        &self,
        in_scope: impl Fn(&Key) -> bool,
        objects: impl IntoIterator<Item = T>,
    ) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        // Taken out in place: the objects out of scope (most, when few namespaces changed)
        // stay where they are.
        let mut previous = BTreeMap::new();
        inner.objects.retain(|key, stored| {
            let taken = in_scope(key);
            if taken {
                previous.insert(key.clone(), stored.clone());
            }
            !taken
        });
        let mut events = Vec::new();
        for mut object in objects {
            let key = key_of(&object);
            let old = previous.remove(&key);
            if let Some(old) = &old {
                object.metadata_mut().resource_version =
                    old.object.metadata().resource_version.clone();
                if *old.object == object {
                    inner.objects.insert(key, old.clone());
                    continue;
                }
            }
            let version = self.clock.tick();
            object.metadata_mut().resource_version = Some(version.to_string());
            let stored = Stored::new(object);
            inner.objects.insert(key, stored.clone());
            let change = if old.is_some() {
                Change::Modified
            } else {
                Change::Added
            };
            events.push(Event {
                version,
                change,
                object: stored,
                previous: old.map(|old| old.object),
            });
        }
        for (_, gone) in previous {
            let version = self.clock.tick();
            let mut object = (*gone.object).clone();
            object.metadata_mut().resource_version = Some(version.to_string());
            events.push(Event {
                version,
                change: Change::Deleted,
                object: Stored::new(object),
                previous: Some(gone.object),
            });
        }
        if let Some(last) = events.last() {
            inner.version = last.version;
        }
        let now = Instant::now();
        for event in events {
            // Sent under the lock: a watch that subscribes under it sees each change once.
            let _ = self.changes.send(event.clone());
            inner.history.push_back((now, event));
        }
        inner.forget(|kept, at| kept > HISTORY || at + FRESH <= now);
    }

    /// Lets go of the changes made [`FRESH`] or longer before `now`: a watch from before them
    /// is answered 410 (Gone), and its client relists.
    pub fn expire(&self, now: Instant) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        inner.forget(|_, at| at + FRESH <= now);
    }

    /// The current objects (in key order) and their version.
    pub fn list(&self) -> (u64, Vec<Stored<T>>) {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        (inner.version, inner.objects.values().cloned().collect())
    }

    pub fn get(&self, key: &Key) -> Option<Stored<T>> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.objects.get(key).cloned()
    }

    /// A watch from `version`: the changes after it still to replay, then every later one.
    /// `None` starts from now, with every current object replayed as added.
    pub fn watch(&self, version: Option<u64>) -> Result<Watch<T>, Gone> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        let backlog = match version {
            None => inner
                .objects
                .values()
                .map(|object| Event {
                    version: inner.version,
                    change: Change::Added,
                    object: object.clone(),
                    previous: None,
                })
                .collect(),
            Some(v) if v < inner.replayable_from || v > self.clock.now() => {
                return Err(Gone { version: v });
            }
            Some(v) => (inner.history.iter())
                .map(|(_, e)| e)
                .filter(|e| e.version > v)
                .cloned()
                .collect(),
        };
        Ok((backlog, self.changes.subscribe()))
    }

    /// The version of the current contents.
    pub fn version(&self) -> u64 {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use nimbus_api::posture::{NamespacePosture, Verdict, WorkloadCounts};

    fn posture(name: &str, verdict: Verdict) -> NamespacePosture {
        NamespacePosture {
            api_version: nimbus_api::posture::api_version(),
            kind: "NamespacePosture".to_owned(),
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            verdict,
            bindings: vec![],
            intents: vec![],
            workloads: WorkloadCounts::default(),
            gaps: vec![],
            compliance: Vec::new(),
        }
    }

    #[test]
    fn only_changes_get_versions_and_events() {
        let store = Store::new(Clock::starting_now());
        store.replace([
            posture("a", Verdict::Unprotected),
            posture("b", Verdict::Protected),
        ]);
        let (listed_at, listed) = store.list();
        assert_eq!(listed.len(), 2);
        let (_, mut rx) = store.watch(Some(listed_at)).expect("fresh version");

        // Same contents: no new version, no event.
        store.replace([
            posture("a", Verdict::Unprotected),
            posture("b", Verdict::Protected),
        ]);
        assert_eq!(store.version(), listed_at);
        assert!(rx.try_recv().is_err());

        store.replace([posture("a", Verdict::Protected)]);
        let modified = rx.try_recv().expect("a modified");
        assert_eq!(modified.change, Change::Modified);
        assert_eq!(modified.object.object.verdict, Verdict::Protected);
        // The JSON served is the object's, resourceVersion and all.
        let served: serde_json::Value =
            serde_json::from_str(modified.object.serialized.json.get()).expect("stored JSON");
        assert_eq!(
            served,
            serde_json::to_value(&*modified.object.object).expect("json")
        );
        assert_eq!(
            served["metadata"]["resourceVersion"],
            modified.version.to_string()
        );
        let deleted = rx.try_recv().expect("b deleted");
        assert_eq!(deleted.change, Change::Deleted);
        assert_eq!(deleted.object.object.metadata.name.as_deref(), Some("b"));
        assert!(deleted.version > modified.version);

        // A watch from the first list replays both changes; from now, none.
        let (backlog, _) = store.watch(Some(listed_at)).expect("replayable");
        assert_eq!(backlog.len(), 2);
        let (backlog, _) = store.watch(Some(store.version())).expect("current");
        assert!(backlog.is_empty());
        // From nothing: the current objects as added.
        let (backlog, _) = store.watch(None).expect("from now");
        assert_eq!(backlog.len(), 1);
        assert_eq!(backlog[0].change, Change::Added);
    }

    #[test]
    fn a_partial_replace_leaves_what_is_out_of_scope() {
        let store = Store::new(Clock::starting_now());
        store.replace([
            posture("a", Verdict::Unprotected),
            posture("b", Verdict::Protected),
            posture("c", Verdict::Protected),
        ]);
        let (listed_at, _) = store.list();
        let (_, mut rx) = store.watch(Some(listed_at)).expect("fresh version");

        // In scope: `a` (changed) and `b` (gone); `c` is out of scope though not given.
        store.replace_within(|(_, name)| name != "c", [posture("a", Verdict::Protected)]);
        let (_, listed) = store.list();
        let names: Vec<_> = listed
            .iter()
            .map(|s| {
                (
                    s.object.metadata.name.clone().unwrap_or_default(),
                    s.object.verdict,
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("a".to_owned(), Verdict::Protected),
                ("c".to_owned(), Verdict::Protected)
            ]
        );
        let changes: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| (e.change, e.object.object.metadata.name.clone()))
            .collect();
        assert_eq!(
            changes,
            [
                (Change::Modified, Some("a".to_owned())),
                (Change::Deleted, Some("b".to_owned()))
            ]
        );
    }

    /// A Table is assembled from the rows stored as each posture changed: it reads as the Table
    /// serialized whole from the postures stored now, also after one of them changed (its new
    /// row, not the one cached before).
    #[test]
    fn a_table_shows_each_posture_as_it_is_now() {
        use super::super::table::{Include, table, uncached};
        let store = Store::new(Clock::starting_now());
        let now = k8s_openapi::jiff::Timestamp::now();
        let tables = |store: &Store<NamespacePosture>, include| {
            let (version, listed) = store.list();
            let meta = serde_json::json!({"resourceVersion": version.to_string()});
            let assembled = table::<NamespacePosture>(
                listed.iter().map(|s| s.serialized.table_row()),
                &meta,
                include,
                true,
                now,
            )
            .expect("a Table");
            let whole =
                uncached::table(listed.iter().map(|s| &*s.object), meta, include, true, now);
            (String::from_utf8(assembled).expect("UTF-8"), whole)
        };
        let includes = [Include::None, Include::Metadata, Include::Object];
        store.replace([
            posture("a", Verdict::Unprotected),
            posture("b", Verdict::Protected),
        ]);
        for include in includes {
            let (assembled, whole) = tables(&store, include);
            assert_eq!(assembled, whole, "{include:?}");
        }
        store.replace([
            posture("a", Verdict::Protected),
            posture("b", Verdict::Protected),
        ]);
        for include in includes {
            let (assembled, whole) = tables(&store, include);
            assert_eq!(assembled, whole, "{include:?}, after a changed");
            let rows: serde_json::Value = serde_json::from_str(&assembled).expect("JSON");
            assert_eq!(rows["rows"][0]["cells"][0], "a");
            assert_eq!(
                rows["rows"][0]["cells"][1], "Protected",
                "a's row: {assembled}"
            );
        }
    }

    #[test]
    fn changes_are_kept_until_they_are_no_longer_fresh() {
        let store = Store::<NamespacePosture>::new(Clock::starting_now());
        let before = store.version();
        store.replace([posture("a", Verdict::Protected)]);
        let first = Arc::downgrade(&store.list().1[0].object);
        store.replace([posture("a", Verdict::Unprotected)]);
        let now = store.version();
        let replayed = |from| store.watch(Some(from)).map(|(backlog, _)| backlog.len());
        assert_eq!(replayed(before).ok(), Some(2));
        store.expire(Instant::now() + FRESH / 2);
        assert_eq!(replayed(before).ok(), Some(2), "fresh");
        store.expire(Instant::now() + FRESH);
        // The old versions are let go: a watch from before them relists; one from the current
        // version (a list's) resumes.
        assert!(replayed(before).is_err(), "expired");
        assert_eq!(replayed(now).ok(), Some(0));
        assert_eq!(store.list().1.len(), 1);
        assert!(first.upgrade().is_none(), "the first version is still held");
        // And no more than HISTORY of them, fresh or not.
        let from = store.version();
        for i in 0..=HISTORY {
            let verdict = [Verdict::Protected, Verdict::Unprotected][i % 2];
            store.replace([posture("a", verdict)]);
        }
        assert!(replayed(from).is_err(), "more than HISTORY changes kept");
        assert_eq!(replayed(from + 1).ok(), Some(HISTORY));
    }

    #[test]
    fn versions_from_elsewhere_are_gone() {
        let store = Store::<NamespacePosture>::new(Clock::starting_now());
        store.replace([posture("a", Verdict::Protected)]);
        let now = store.version();
        assert!(
            store.watch(Some(now - 1_000_000)).is_err(),
            "older than the history"
        );
        assert!(
            store.watch(Some(now + 1_000_000)).is_err(),
            "never handed out"
        );
    }
}
