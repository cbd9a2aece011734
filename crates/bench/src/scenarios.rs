//! The operator's scenarios, each measured from one mark of the meter to the next.

use crate::args::Args;
use crate::converge::{Tracker, converge};
use crate::meter::{Mark, Meter};
use crate::operator::tail;
use crate::profile;
use crate::progress::step;
use crate::report::{self, CHURN, COLD, NARROWING, REMOVAL, STEADY, Scenario};
use crate::workload::{self, NARROWED, Plan, RELABELLED};
use anyhow::{Context as _, bail};
use nimbus_testenv::Child;
use std::time::Instant;

/// A: cold convergence. The scenario, what converged, and the mark it ends at.
pub async fn cold_convergence(
    meter: &mut Meter<'_>,
    plan: &Plan,
    args: &Args,
    client: &kube::Client,
    operator: &mut Child,
) -> anyhow::Result<(Scenario, report::Expected, Mark)> {
    step(format!(
        "A: creating 4 SecurityIntents, {} SecurityIntentBindings and 1 \
         ClusterSecurityIntentBinding; waiting for {} policies",
        plan.bindings.len(),
        plan.expected_policies()
    ));
    let start = meter.mark().await?;
    let mut tracker = Tracker::start(meter.ops, plan, 0);
    let profiling = profile_of(args, client, "A");
    let began = Instant::now();
    workload::create_workload(meter.ops, plan).await?;
    let (wall, progress) = converge(&mut tracker, began, args, operator).await?;
    drop(tracker);
    if let Some(profiling) = profiling {
        profiling.await.context("profiling kube-apiserver")??;
    }
    step(format!(
        "A: converged in {:.2} s ({} native policies); settling {:?}",
        wall.as_secs_f64(),
        progress.native_policies,
        args.settle
    ));
    let expected = report::Expected {
        policies: progress.expected,
        native_policies: progress.native_policies,
        adapter_policies_per_policy: progress.per_policy.clone(),
    };
    tokio::time::sleep(args.settle).await;
    let end = meter.mark().await?;
    let cold = meter.scenario(
        COLD,
        format!(
            "create 4 SecurityIntents, {} SecurityIntentBindings in {} namespaces and 1 \
             ClusterSecurityIntentBinding; until all {} policies report their {} native policies",
            plan.bindings.len(),
            plan.namespaces.len(),
            progress.expected,
            progress.native_policies
        ),
        wall,
        Some((progress.done, progress.expected)),
        &start,
        &end,
    );
    Ok((cold, expected, end))
}

/// B: steady state, from `previous` on; and the mark it ends at.
pub async fn steady_state(
    meter: &mut Meter<'_>,
    args: &Args,
    operator: &mut Child,
    previous: Mark,
) -> anyhow::Result<(Scenario, Mark)> {
    step(format!("B: measuring {:?} without changes", args.steady));
    let start = previous;
    tokio::time::sleep(args.steady).await;
    let end = meter.mark().await?;
    if operator.has_exited() {
        bail!(
            "the operator exited during the steady state; its log ends with:\n{}",
            tail(&operator.output(), 40)
        );
    }
    let steady = meter.scenario(
        STEADY,
        format!(
            "{:.1} s with no changes, after A settled",
            end.at.duration_since(start.at).as_secs_f64()
        ),
        end.at.duration_since(start.at),
        None,
        &start,
        &end,
    );
    Ok((steady, end))
}

/// C: churn, then D: narrowing, from `previous` on; and the mark they end at.
pub async fn changes(
    meter: &mut Meter<'_>,
    plan: &Plan,
    args: &Args,
    operator: &mut Child,
    previous: Mark,
) -> anyhow::Result<(Vec<Scenario>, Mark)> {
    let mut scenarios = Vec::new();
    let mut end = previous;
    for (name, revision, change) in [
        (CHURN, RELABELLED, "merge-patch the workload label of"),
        (NARROWING, NARROWED, "drop the last intent of"),
    ] {
        step(format!(
            "{name}: {change} all {} bindings",
            plan.bindings.len()
        ));
        let start = end;
        let mut tracker = Tracker::start(meter.ops, plan, revision);
        let began = Instant::now();
        workload::change_bindings(meter.ops, plan, revision).await?;
        let (wall, progress) = converge(&mut tracker, began, args, operator).await?;
        drop(tracker);
        step(format!(
            "{name}: converged in {:.2} s; settling {:?}",
            wall.as_secs_f64(),
            args.settle
        ));
        tokio::time::sleep(args.settle).await;
        end = meter.mark().await?;
        scenarios.push(meter.scenario(
            name,
            format!(
                "{change} all {} SecurityIntentBindings (merge patch); until every policy \
                 reflects it",
                plan.bindings.len()
            ),
            wall,
            Some((progress.done, progress.expected)),
            &start,
            &end,
        ));
    }
    Ok((scenarios, end))
}

/// E: removal. Every namespaced binding is deleted; the garbage collector deletes their
/// policies and those policies' native objects, and the operator has nothing to write. Timed
/// until no binding's policy is left, counted until `settle` after.
pub async fn removal(
    meter: &mut Meter<'_>,
    plan: &Plan,
    args: &Args,
    operator: &mut Child,
    previous: Mark,
) -> anyhow::Result<Scenario> {
    step(format!(
        "{REMOVAL}: delete all {} bindings; until their policies are gone",
        plan.bindings.len()
    ));
    let start = previous;
    let began = Instant::now();
    workload::delete_bindings(meter.ops, plan).await?;
    loop {
        let left = workload::binding_policies_left(meter.ops, plan).await?;
        if left == 0 {
            break;
        }
        if operator.has_exited() {
            bail!(
                "the operator exited; its log ends with:\n{}",
                tail(&operator.output(), 40)
            );
        }
        if began.elapsed() > args.timeout {
            bail!(
                "{left} policies of deleted bindings left after {:?}",
                args.timeout
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let wall = began.elapsed();
    step(format!(
        "{REMOVAL}: policies gone after {:.2} s; settling {:?}",
        wall.as_secs_f64(),
        args.settle
    ));
    tokio::time::sleep(args.settle).await;
    let end = meter.mark().await?;
    Ok(meter.scenario(
        REMOVAL,
        format!(
            "delete all {} SecurityIntentBindings (background); until the garbage collector \
             deleted their policies (the native objects after, within the window). The \
             collector reads each object before deleting it: its GET and DELETE per object \
             count here as the operator's (not separable); the operator's own would be status \
             writes and Events, and failures (see below)",
            plan.bindings.len()
        ),
        wall,
        None,
        &start,
        &end,
    ))
}

/// Starts profiling kube-apiserver into `<--apiserver-profile>/<name>.pprof`, if asked to.
pub fn profile_of(
    args: &Args,
    client: &kube::Client,
    name: &str,
) -> Option<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let dir = args.apiserver_profile.as_ref()?;
    let path = dir.join(format!("{name}.pprof"));
    step(format!(
        "profiling kube-apiserver for {} s into {}",
        args.apiserver_profile_secs,
        path.display()
    ));
    Some(profile::start(client, args.apiserver_profile_secs, path))
}
