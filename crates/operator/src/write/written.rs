//! The record of past writes: what this process last wrote to each object, so that a stale
//! cached copy is not written again and a copy already compared is not compared again.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// What this process last wrote to each object, or found it to hold, as a fingerprint, with the
/// resourceVersion it was written or seen at. A reconcile can read an object from a cache that
/// has not yet seen our last write (the watch lags the write by milliseconds, and the write
/// itself triggers more reconciles): it must not write the same thing again just because its
/// copy is stale. And a copy already compared with what we generate need not be compared again
/// (parsed, drift-checked) on every reconcile: a resourceVersion names one state of an object.
/// Keys and fingerprints are kept as 64-bit hashes: a record per object, at 20,000 objects the
/// strings took 8 MiB more RSS.
#[derive(Default)]
pub struct Written(Mutex<HashMap<u64, Record>>);

struct Record {
    /// The resourceVersion our write produced, or that of the copy we compared.
    version: u64,
    fingerprint: u64,
    /// Whether the object at `version` was compared and found to be what `fingerprint` says.
    /// Our write's response is not: a concurrent change may be in it.
    compared: bool,
}

impl Written {
    /// Whether the cached copy at `cached_version` needs no comparison with `fingerprint`: we
    /// wrote that last and the copy predates our write, or it is the copy already found to
    /// hold it. resourceVersions are compared as numbers (etcd revisions); one that is not a
    /// number is always compared.
    pub(super) fn settled(
        &self,
        key: &str,
        cached_version: Option<&str>,
        fingerprint: &str,
    ) -> bool {
        let Some(cached) = version(cached_version) else {
            return false;
        };
        matches!(
            self.lock().get(&digest(key)),
            Some(r) if r.fingerprint == digest(fingerprint)
                && (cached < r.version || (cached == r.version && r.compared))
        )
    }

    /// Whether a copy at `cached_version` is older than what we last wrote to `key`.
    pub(super) fn predates(&self, key: &str, cached_version: Option<&str>) -> bool {
        let Some(cached) = version(cached_version) else {
            return false;
        };
        matches!(self.lock().get(&digest(key)), Some(r) if cached < r.version)
    }

    /// Whether `fingerprint` is what we wrote last to `key`.
    pub(super) fn last(&self, key: &str, fingerprint: &str) -> bool {
        matches!(self.lock().get(&digest(key)), Some(r) if r.fingerprint == digest(fingerprint))
    }

    pub(super) fn record(&self, key: &str, version: Option<&str>, fingerprint: &str) {
        self.insert(key, version, fingerprint, false);
    }

    /// Notes that the object at `version` was found to hold `fingerprint`, unless we wrote it
    /// since (the cache lags behind that write).
    pub(super) fn compared(&self, key: &str, version: Option<&str>, fingerprint: &str) {
        self.insert(key, version, fingerprint, true);
    }

    fn insert(&self, key: &str, version: Option<&str>, fingerprint: &str, compared: bool) {
        let Some(version) = self::version(version) else {
            return;
        };
        let key = digest(key);
        let mut records = self.lock();
        if compared && records.get(&key).is_some_and(|r| r.version > version) {
            return;
        }
        // Deleted objects are never written again to forget theirs: bound the map (forgetting
        // costs at most one comparison or redundant write).
        if records.len() >= 65_536 && !records.contains_key(&key) {
            records.clear();
        }
        let record = Record {
            version,
            fingerprint: digest(fingerprint),
            compared,
        };
        records.insert(key, record);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Record>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A 64-bit hash of `text` (std's default hasher: the same for every `DefaultHasher::new()`).
fn digest(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

fn version(resource_version: Option<&str>) -> Option<u64> {
    resource_version.and_then(|v| v.parse().ok())
}

/// The key of typed object `obj`'s `part` (the object, or its status) in [`Written`].
pub(super) fn key_of<K: kube::Resource<DynamicType = ()>>(part: &str, obj: &K) -> String {
    written_key(
        part,
        K::api_version(&()),
        K::kind(&()),
        obj.meta().namespace.as_deref(),
        &kube::ResourceExt::name_any(obj),
    )
}

/// The key of an object's `part` (the object, or its status) in [`Written`]. Built from what
/// is at hand: this runs for every object of every reconcile.
pub(super) fn written_key(
    part: &str,
    api_version: impl std::fmt::Display,
    kind: impl std::fmt::Display,
    namespace: Option<&str>,
    name: &str,
) -> String {
    format!(
        "{part} {api_version} {kind} {}/{name}",
        namespace.unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_we_wrote_is_not_rewritten_from_a_stale_copy() {
        let written = Written::default();
        written.record("key", Some("120"), "ready");
        // The cache still holds the object as it was before our write.
        assert!(written.settled("key", Some("100"), "ready"));
        // The cache caught up, or someone wrote after us: compare with what it holds.
        assert!(!written.settled("key", Some("120"), "ready"));
        assert!(!written.settled("key", Some("130"), "ready"));
        // Something else, another object, or versions that are not numbers: compare.
        assert!(!written.settled("key", Some("100"), "other"));
        assert!(!written.settled("other", Some("100"), "ready"));
        assert!(!written.settled("key", Some("a1"), "ready"));
        assert!(written.predates("key", Some("100")));
        assert!(!written.predates("key", Some("120")));
        assert!(!written.predates("other", Some("100")));
    }

    #[test]
    fn a_copy_found_as_wanted_is_not_compared_again_until_it_changes() {
        let written = Written::default();
        written.compared("key", Some("120"), "ready");
        assert!(written.settled("key", Some("120"), "ready"));
        // Changed since, or we want something else now: compare.
        assert!(!written.settled("key", Some("121"), "ready"));
        assert!(!written.settled("key", Some("120"), "other"));
        // A stale copy compared after our write does not hide the write.
        written.record("key", Some("130"), "next");
        written.compared("key", Some("125"), "next");
        assert!(written.settled("key", Some("129"), "next"));
        assert!(!written.settled("key", Some("130"), "next"));
    }
}
