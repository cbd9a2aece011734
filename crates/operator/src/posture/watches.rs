//! The watches the posture is computed from, as change signals.

use crate::cache::Driver;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;

/// The watches behind [`Workloads`] and everything else the posture reads.
pub struct Watches {
    /// One item per change that any posture may read (a policy, a binding, a namespace...).
    pub changes: Vec<BoxStream<'static, ()>>,
    /// The namespace of each change of a pod, ReplicaSet or Job: only that namespace's
    /// postures read it.
    pub namespaced: Vec<BoxStream<'static, String>>,
    /// What drives the workload caches.
    pub drivers: Vec<Driver>,
    /// Resolves once every workload cache has listed.
    pub synced: BoxFuture<'static, ()>,
}

impl Watches {
    /// Signals when a cache lists (`listed`, its synced flag): listing nothing is a change
    /// too (what was unreadable becomes readable).
    pub(crate) fn on_list(&mut self, listed: &watch::Receiver<bool>) {
        self.changes
            .push(signal(WatchStream::from_changes(listed.clone())));
    }
}

/// Maps any stream to a change signal.
pub fn signal<S: Stream + Send + 'static>(stream: S) -> BoxStream<'static, ()> {
    stream.map(|_| ()).boxed()
}

/// Maps a cache's changes to the namespaces they happen in.
pub(super) fn namespaces_of<K: Resource + Send + 'static>(
    changes: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) -> BoxStream<'static, String> {
    changes
        .filter_map(|changed| {
            futures::future::ready(changed.ok().and_then(|o| o.meta().namespace.clone()))
        })
        .boxed()
}
