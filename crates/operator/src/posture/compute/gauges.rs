//! The posture's gauges: workloads by verdict, policies by readiness, exceptions' expiries.

use crate::context::Context;
use crate::metrics::{ExceptionLabels, ReadyLabels, VerdictLabels};
use nimbus_api::posture::{Verdict, WorkloadPosture};
use nimbus_api::{NimbusPolicyStatus, condition};
use std::collections::BTreeMap;

/// Sets the workloads-by-verdict and policies-by-readiness gauges (every value, zeros too, so
/// a verdict no workload has reads 0 rather than absent).
pub(super) fn export_counts<'w>(
    ctx: &Context,
    workloads: impl IntoIterator<Item = &'w WorkloadPosture>,
) {
    let metrics = &ctx.metrics;
    let mut by_verdict: BTreeMap<Verdict, usize> = BTreeMap::new();
    for workload in workloads {
        *by_verdict.entry(workload.verdict).or_default() += 1;
    }
    // Those a workload can have (`NoWorkloads` is a namespace's).
    for verdict in [
        Verdict::Protected,
        Verdict::Partial,
        Verdict::Unprotected,
        Verdict::Audited,
        Verdict::Excepted,
    ] {
        let count = by_verdict.get(&verdict).copied().unwrap_or_default();
        metrics
            .workloads
            .get_or_create(&VerdictLabels {
                verdict: verdict.as_str(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    let ready = |status: Option<&NimbusPolicyStatus>| {
        status
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == condition::READY))
            .map_or("Unknown", |c| match c.status.as_str() {
                "True" => "True",
                "False" => "False",
                _ => "Unknown",
            })
    };
    let mut counts: BTreeMap<&str, i64> = ["True", "False", "Unknown"]
        .into_iter()
        .map(|r| (r, 0))
        .collect();
    let policies = ctx.policies.state();
    let cluster_policies = ctx.cluster_policies.state();
    let statuses = policies
        .iter()
        .map(|p| p.status.as_ref())
        .chain(cluster_policies.iter().map(|p| p.status.as_ref()));
    for status in statuses {
        *counts.entry(ready(status)).or_default() += 1;
    }
    for (ready, count) in counts {
        metrics
            .policies
            .get_or_create(&ReadyLabels { ready })
            .set(count);
    }
    export_exception_expiries(ctx);
}

/// Sets when each exception expires.
fn export_exception_expiries(ctx: &Context) {
    let metrics = &ctx.metrics;
    // Those deleted go with their series.
    metrics.exception_expiry.clear();
    for exception in ctx.exceptions.known().iter() {
        // A ClusterSecurityIntentException's namespace is empty.
        let labels = ExceptionLabels {
            exception_namespace: exception.meta().namespace.clone().unwrap_or_default(),
            exception: exception.name(),
        };
        metrics
            .exception_expiry
            .get_or_create(&labels)
            .set(exception.expires_at().as_second());
    }
}
