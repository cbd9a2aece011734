//! How previews name workloads, and how many examples they list.

use crate::posture::Workload;

/// `(namespace, kind, name)` of a workload.
pub type WorkloadKey = (String, String, String);

pub fn key(w: &Workload) -> WorkloadKey {
    (w.namespace.clone(), w.kind.clone(), w.name.clone())
}

/// At most this many connections and refusals are named in a binding's status, and resources
/// in a refusal.
pub const MAX_EXAMPLES: usize = 5;
