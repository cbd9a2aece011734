//! Measurement windows: the counters at a point in time, and a scenario's figures between two.

use crate::procfs;
use crate::progress::step;
use crate::report::{Attributed, Scenario, mib};
use crate::requests::{self, Counts};
use crate::workload::{self, Ops};
use anyhow::Context as _;
use std::time::{Duration, Instant};

/// A point in time with every counter the scenarios are measured by.
pub(crate) struct Mark {
    pub(crate) at: Instant,
    apiserver: Counts,
    /// The apiserver's counts of requests answered outside 2xx.
    failed: Counts,
    own: Counts,
    process: procfs::Sample,
    control_plane_cpu_ticks: u64,
}

pub(crate) struct Meter<'a> {
    pub(crate) ops: &'a Ops,
    pub(crate) pid: u32,
    /// etcd, kube-apiserver, kube-controller-manager.
    pub(crate) control_plane: Vec<u32>,
    /// Whether the kernel lets us reset the peak RSS at every mark.
    pub(crate) peak_per_scenario: bool,
}

impl Meter<'_> {
    /// Ends one window and starts the next: process figures (peak RSS then reset), the bench's
    /// own requests so far, then the apiserver's counters (that scrape is counted as ours, in
    /// the next window, where the apiserver also counts it).
    pub(crate) async fn mark(&mut self) -> anyhow::Result<Mark> {
        // A request the bench just made may be counted by the apiserver a moment after its
        // response arrived.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let process = procfs::Sample::read(self.pid).context("reading the operator's /proc")?;
        let control_plane_cpu_ticks = procfs::cpu_ticks_of(&self.control_plane)?;
        if self.peak_per_scenario
            && let Err(e) = procfs::reset_peak(self.pid)
        {
            step(format!(
                "cannot reset the peak RSS ({e:#}); peaks are since operator start"
            ));
            self.peak_per_scenario = false;
        }
        let own = self.ops.own.snapshot();
        let (apiserver, failed) = requests::scrape(&self.ops.client, &self.ops.own).await?;
        Ok(Mark {
            at: Instant::now(),
            apiserver,
            failed,
            own,
            process,
            control_plane_cpu_ticks,
        })
    }

    pub(crate) fn scenario(
        &self,
        name: &'static str,
        description: String,
        wall: Duration,
        policies_done: Option<(usize, usize)>,
        start: &Mark,
        end: &Mark,
    ) -> Scenario {
        let apiserver = end.apiserver.since(&start.apiserver);
        let own = end.own.since(&start.own);
        let requests = Attributed::of(&apiserver, &own, workload::operator_resource);
        // The bench's own requests all succeed (it stops otherwise): these are others'.
        let failed = end.failed.since(&start.failed);
        let failed = failed.filter(|k| k.is_resource() && workload::operator_resource(k));
        Scenario {
            name,
            description,
            wall_time_secs: wall.as_secs_f64(),
            window_secs: end.at.duration_since(start.at).as_secs_f64(),
            policies_done,
            operator_requests: requests.operator,
            operator_requests_by_kind: requests.operator_by_kind,
            failed_requests_by_kind: failed.breakdown(),
            bench_requests: requests.bench,
            background_requests: requests.background,
            background_requests_by_kind: requests.background_by_kind,
            non_resource_requests: requests.non_resource,
            attribution_mismatch: requests.mismatch,
            operator_cpu_secs: procfs::ticks_to_secs(
                end.process
                    .cpu_ticks
                    .saturating_sub(start.process.cpu_ticks),
            ),
            control_plane_cpu_secs: procfs::ticks_to_secs(
                end.control_plane_cpu_ticks - start.control_plane_cpu_ticks,
            ),
            operator_peak_rss_mib: mib(end.process.peak_rss_kib),
            operator_peak_rss_scope: if self.peak_per_scenario {
                "scenario"
            } else {
                "operator start"
            },
            operator_rss_mib: mib(end.process.rss_kib),
        }
    }
}
