//! Helpers shared by the integration tests.

use std::time::{Duration, Instant};

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Polls `condition` every 100 ms until it yields `Some`, failing after `timeout`.
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut condition: impl AsyncFnMut() -> Result<Option<T>, kube::Error>,
) -> Result<T, Box<dyn std::error::Error>> {
    let started = Instant::now();
    loop {
        if let Some(value) = condition().await? {
            return Ok(value);
        }
        if started.elapsed() > timeout {
            return Err(format!("timed out after {timeout:?} waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
