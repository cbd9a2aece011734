//! The operator's posture computations, read from its metrics.

use anyhow::Context as _;

/// The operator's posture computations of one scope so far, from its histogram.
pub struct Computations {
    /// `all`, or `namespaces` (only those where pods changed).
    pub scope: &'static str,
    pub count: u64,
    pub mean_ms: f64,
    /// The smallest bucket bound that holds them all.
    pub longest_within_ms: f64,
}

impl Computations {
    /// Those of each scope.
    pub async fn scrape(port: u16) -> anyhow::Result<[Self; 2]> {
        let (_, body) = nimbus_testenv::http_get(port, "/metrics")
            .await
            .context("reading the operator's /metrics")?;
        anyhow::ensure!(
            body.contains("nimbus_posture_compute_seconds"),
            "nimbus_posture_compute_seconds is not in the operator's /metrics"
        );
        Ok(["all", "namespaces"].map(|scope| Self::parse(&body, scope)))
    }

    fn parse(body: &str, scope: &'static str) -> Self {
        let value = |line: &str| line.rsplit(' ').next()?.parse::<f64>().ok();
        let label = format!("scope=\"{scope}\"");
        let label = label.as_str();
        let series = |suffix: &str| {
            let name = format!("nimbus_posture_compute_seconds_{suffix}");
            body.lines()
                .filter(move |l| l.starts_with(&name) && l.contains(label))
        };
        let count = series("count").find_map(value).unwrap_or_default();
        let sum = series("sum").find_map(value).unwrap_or_default();
        // Buckets are cumulative: the first that counts every computation bounds the longest.
        let longest_within = series("bucket")
            .find(|l| value(l) == Some(count))
            .and_then(|l| {
                l.split("le=\"")
                    .nth(1)?
                    .split('"')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(f64::INFINITY);
        Self {
            scope,
            count: count as u64,
            mean_ms: if count > 0.0 {
                sum / count * 1000.0
            } else {
                0.0
            },
            longest_within_ms: longest_within * 1000.0,
        }
    }

    /// Computations of every scope.
    pub async fn total(port: u16) -> anyhow::Result<u64> {
        Ok(Self::scrape(port).await?.iter().map(|c| c.count).sum())
    }
}
