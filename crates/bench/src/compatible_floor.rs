//! The compatible floor measured: scenarios A and C written by [`compatible::Writer`], with
//! kube-apiserver's and etcd's CPU while each run writes and the GETs others make meanwhile,
//! then scenario L's bindings one at a time.

use crate::args::Args;
use crate::compatible::Writer;
use crate::progress::step;
use crate::report::{CHURN, COLD, CompatibleFloor, FloorRun};
use crate::workload::{self, Ops, Plan, RELABELLED};
use crate::{latency, procfs, requests};
use std::time::Duration;

/// The compatible floor of A, C and L on `plan` (its namespaces created and settled; the
/// cluster binding `cluster` over `namespaces`), with kube-apiserver's and etcd's CPU
/// (`control_plane`) while each run writes.
pub async fn measure(
    args: &Args,
    ops: &Ops,
    plan: &Plan,
    cluster: &str,
    namespaces: &[String],
    control_plane: &[u32],
) -> anyhow::Result<CompatibleFloor> {
    let writer = Writer::new(ops, args.floor_concurrency).await?;
    let mut runs = Vec::new();
    for scenario in [COLD, CHURN] {
        step(format!(
            "F: the compatible floor of {scenario}, {} in flight",
            args.floor_concurrency
        ));
        let cpu_start = procfs::cpu_ticks_of(control_plane)?;
        let (served_before, _) = requests::scrape(&ops.client, &ops.own).await?;
        let run = if scenario == COLD {
            writer.cold(ops, plan, cluster, namespaces).await?
        } else {
            writer.churn(ops, plan, RELABELLED).await?
        };
        let cpu = procfs::ticks_to_secs(procfs::cpu_ticks_of(control_plane)? - cpu_start);
        // The floor reads nothing while it writes: GETs on these kinds meanwhile are others'
        // (kube-controller-manager's garbage collector looking up owners it has not seen yet).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (served_after, _) = requests::scrape(&ops.client, &ops.own).await?;
        let others_gets = served_after
            .since(&served_before)
            .filter(|k| k.verb == "GET" && k.is_resource() && workload::operator_resource(k));
        let writes: u64 = run.writes.values().sum();
        step(format!(
            "F: {:.2} s, {writes} writes",
            run.wall.as_secs_f64()
        ));
        runs.push(FloorRun {
            scenario,
            writes: usize::try_from(writes)?,
            writes_by_verb: (run.writes.into_iter())
                .map(|(verb, n)| (verb.to_owned(), n))
                .collect(),
            wall_secs: run.wall.as_secs_f64(),
            api_cpu_secs: cpu,
            others_gets: others_gets.breakdown(),
        });
        // The garbage collector's and the watches' reactions pass before the next run.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let latency = latency::measure_floor(
        &ops.client,
        latency::Writer::Compatible(&writer),
        args.latency_samples,
        args.timeout,
        "the compatible floor of L",
    )
    .await?;
    Ok(CompatibleFloor {
        concurrency: args.floor_concurrency,
        runs,
        latency,
    })
}
