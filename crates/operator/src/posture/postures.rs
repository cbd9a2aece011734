//! The computed posture objects, which the server reads and the computation writes.

use super::store::{Clock, Store};
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
}
