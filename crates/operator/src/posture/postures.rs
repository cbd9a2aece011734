//! The computed posture objects, which the server reads and the computation writes.

use super::store::{Clock, FRESH, Store};
use nimbus_api::posture::{NamespacePosture, WorkloadPosture};
use tokio::sync::watch;

/// The computed posture objects.
pub struct Postures {
    pub(super) workloads: Store<WorkloadPosture>,
    pub(super) namespaces: Store<NamespacePosture>,
    ready: watch::Sender<bool>,
}

impl Postures {
    pub(super) fn new() -> Self {
        let clock = Clock::starting_now();
        Self {
            workloads: Store::new(clock.clone()),
            namespaces: Store::new(clock),
            ready: watch::channel(false).0,
        }
    }

    pub(super) fn mark_ready(&self) {
        self.ready.send_replace(true);
    }

    pub(super) fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Lets go of the changes no longer fresh, every [`FRESH`] / 3: at rest, the stores hold
    /// their objects alone.
    pub(super) async fn expire_history(&self) {
        let mut every = tokio::time::interval(FRESH / 3);
        loop {
            every.tick().await;
            let now = std::time::Instant::now();
            self.workloads.expire(now);
            self.namespaces.expire(now);
        }
    }
}
