//! Polling for tests: waiting until the cluster (or anything else) reaches a state.

use std::time::{Duration, Instant};

/// Calls `probe` every 100 ms until it returns `Some`, and returns that value.
///
/// After `timeout` it panics, naming `what` it waited for and what the probe last wrote to its
/// argument (what it saw instead), if anything. A probe with nothing to report ignores it:
/// `eventually("the pod to run", timeout, async |_| ...)`. Errors that must fail at once are
/// the probe's to panic on.
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl AsyncFnMut(&mut String) -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    let mut seen = String::new();
    loop {
        if let Some(value) = probe(&mut seen).await {
            return value;
        }
        if Instant::now() >= deadline {
            if seen.is_empty() {
                panic!("timed out after {timeout:?} waiting for {what}");
            }
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {seen}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
