//! Polling: waiting until the cluster (or anything else) reaches a state.

use crate::Error;
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
    probe: impl AsyncFnMut(&mut String) -> Option<T>,
) -> T {
    match wait_until(what, timeout, probe).await {
        Ok(value) => value,
        Err(timed_out) => panic!("{timed_out}"),
    }
}

/// [`eventually`] for code that must not panic (`nimbus dev`): the timeout is an
/// [`Error::Timeout`], or an [`Error::StillWaiting`] with what the probe last saw.
pub async fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl AsyncFnMut(&mut String) -> Option<T>,
) -> Result<T, Error> {
    let deadline = Instant::now() + timeout;
    let mut seen = String::new();
    loop {
        if let Some(value) = probe(&mut seen).await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            let what = what.to_owned();
            return Err(if seen.is_empty() {
                Error::Timeout { what, timeout }
            } else {
                Error::StillWaiting {
                    what,
                    timeout,
                    seen,
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
