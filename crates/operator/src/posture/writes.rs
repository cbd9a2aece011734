//! How the posture's writers share state and keep requests in flight.

use futures::StreamExt;
use futures::future::BoxFuture;

/// Locks `mutex`, poisoned or not: its holders only insert, remove or swap, which a panic
/// cannot leave half done.
pub(super) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Requests a computation's writes keep in flight: thousands of reports change at once when a
/// binding covering many workloads does, and one after another they would take minutes.
const WRITES_IN_FLIGHT: usize = 16;

/// Runs `requests`, [`WRITES_IN_FLIGHT`] at a time; whether all succeeded (each runs, whatever
/// the others do).
pub(super) async fn all_succeed(requests: impl IntoIterator<Item = BoxFuture<'_, bool>>) -> bool {
    futures::stream::iter(requests)
        .buffer_unordered(WRITES_IN_FLIGHT)
        .fold(true, |all, ok| async move { all && ok })
        .await
}
