//! What this process wrote that its store does not show yet: objects it created, objects it
//! deleted. A reconcile must not take the store's lag for the truth and write again.

use kube::Resource;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Where an object is: its namespace and name.
pub type Place = (Option<String>, String);

pub fn place<K: Resource>(obj: &K) -> Place {
    (
        obj.meta().namespace.clone(),
        obj.meta().name.clone().unwrap_or_default(),
    )
}

/// Keys noted with the time they were noted.
struct Notes<T>(Arc<Mutex<HashMap<T, Instant>>>);

impl<T> Clone for Notes<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Default for Notes<T> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<T: Hash + Eq> Notes<T> {
    fn note(&self, key: T) {
        self.lock().insert(key, Instant::now());
    }

    fn noted(&self, key: &T) -> bool {
        self.lock().contains_key(key)
    }

    fn forget(&self, key: &T) {
        let mut notes = self.lock();
        if !notes.is_empty() {
            notes.remove(key);
        }
    }

    /// After a complete (re)list that started at `started`: forgets every note from before it
    /// (the list says how it stands), and of the later ones those `settled` says the list
    /// already shows.
    fn relisted(&self, started: Instant, settled: impl Fn(&T) -> bool) {
        self.lock()
            .retain(|key, noted| *noted >= started && !settled(key));
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<T, Instant>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long a creation stays pending at most: its watch event comes within moments, and a note
/// that outlived it (an object created while a relist ran, then deleted before the list was
/// taken, of which no event will ever come) must not keep the object from being created again.
const CREATION_PENDING_AT_MOST: Duration = Duration::from_secs(60);

/// Objects this process created that the store has not shown yet. A reconcile that runs
/// between a create and the watch event reporting it (triggered by another of its writes,
/// whose event came first) must not take the object's absence from the store for a deletion
/// and create it again. An object is forgotten once any event about it is stored, or once a
/// relist that started after its creation completes (whose result says whether it exists).
#[derive(Clone, Default)]
pub struct Creations(Notes<Place>);

impl Creations {
    /// Notes that this process just created the object at `place`.
    pub fn created(&self, place: Place) {
        self.0.note(place);
    }

    /// Whether the object at `place` was created by this process and not yet shown.
    pub fn pending(&self, place: &Place) -> bool {
        let notes = self.0.lock();
        notes
            .get(place)
            .is_some_and(|at| at.elapsed() < CREATION_PENDING_AT_MOST)
    }

    pub(super) fn shown<K: Resource>(&self, obj: &K) {
        self.0.forget(&place(obj));
    }

    /// A complete (re)list started at `started` holds the objects at `listed`.
    pub(super) fn relisted(&self, started: Instant, listed: impl Iterator<Item = Place>) {
        let listed: std::collections::HashSet<Place> = listed.collect();
        self.0.relisted(started, |place| listed.contains(place));
    }
}

/// Objects this process deleted that the store still holds (by uid). A prune that runs between
/// a delete and the watch event reporting it must not delete the object again: one churn
/// issued 701-828 DELETEs for 660 objects. An object is forgotten once its deletion is stored,
/// or once a relist that started after its deletion completes (whose result says whether it
/// still exists, then for another reason: deleted again if still unwanted).
#[derive(Clone, Default)]
pub struct Deletions(Notes<String>);

impl Deletions {
    /// Notes that this process just deleted the object with `uid`.
    pub fn deleted(&self, uid: &str) {
        self.0.note(uid.to_owned());
    }

    /// Whether this process deleted the object with `uid` and its deletion is not shown yet.
    pub fn pending(&self, uid: &str) -> bool {
        self.0.noted(&uid.to_owned())
    }

    pub(super) fn gone<K: Resource>(&self, obj: &K) {
        if let Some(uid) = obj.meta().uid.as_deref() {
            self.0.forget(&uid.to_owned());
        }
    }

    /// A complete (re)list started at `started` holds the objects with uids `listed`: a
    /// deletion since of one it lacks is shown.
    pub(super) fn relisted(&self, started: Instant, listed: impl Iterator<Item = String>) {
        let listed: std::collections::HashSet<String> = listed.collect();
        self.0.relisted(started, |uid| !listed.contains(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn at(name: &str) -> Place {
        (Some("ns".to_owned()), name.to_owned())
    }

    #[test]
    fn a_deletion_is_pending_until_the_store_drops_the_object_or_a_later_relist() {
        let deletions = Deletions::default();
        deletions.deleted("u1");
        deletions.deleted("u2");
        let mut gone = ConfigMap::default();
        gone.metadata.uid = Some("u1".into());
        deletions.gone(&gone);
        assert!(!deletions.pending("u1") && deletions.pending("u2"));
        // A relist that started after the deletion of u3 and still lists it: its deletion
        // event is to come. One that lists u2, started after it was deleted, says how it is.
        let started = Instant::now();
        deletions.deleted("u3");
        deletions.deleted("u4");
        deletions.relisted(started, ["u2", "u3"].map(String::from).into_iter());
        assert!(!deletions.pending("u2"), "deleted before the relist");
        assert!(deletions.pending("u3"), "deleted since, still listed");
        assert!(
            !deletions.pending("u4"),
            "deleted since, and not listed: gone"
        );
    }

    #[test]
    fn a_creation_is_pending_until_shown_or_a_later_relist_lists_it() {
        let creations = Creations::default();
        creations.created(at("a"));
        creations.created(at("b"));
        let mut shown = ConfigMap::default();
        shown.metadata.namespace = Some("ns".into());
        shown.metadata.name = Some("a".into());
        creations.shown(&shown);
        assert!(!creations.pending(&at("a")) && creations.pending(&at("b")));
        // Created while a relist ran and missing from it (created after its snapshot): its
        // event is to come, and until then a reconcile must not create it again.
        let started = Instant::now();
        creations.created(at("c"));
        creations.created(at("d"));
        creations.relisted(started, [at("d")].into_iter());
        assert!(!creations.pending(&at("b")), "created before the relist");
        assert!(creations.pending(&at("c")), "created since, not listed yet");
        assert!(!creations.pending(&at("d")), "created since, and listed");
    }
}
