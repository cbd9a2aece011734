//! What enforcement probes cost, counted by the API server itself: with probes on (period
//! `PERIOD`, at most `CAP` a period), three cluster bindings of escapeToHost enforced by the
//! admission engine (three probeable (policy, intent, engine)), and nothing changing, the
//! leader sends exactly its budget of dry-run pod creates a period (the cap binds: 2 of the 3
//! each period, all three within two periods), creates no pod for real, and writes nothing
//! else. The steady-state test (steady_state.rs) runs with probes off and still counts zero
//! writes; this one measures what turning them on adds.
//! Its own test binary, so no other test writes to the control plane meanwhile.

mod common;

use common::{CONVERGE, apply, create_intent, unique};
use kube::Client;
use kube::api::Api;
use nimbus_api::ClusterSecurityIntentBinding;
use nimbus_testenv::eventually;
use serde_json::json;
use std::time::{Duration, Instant};

const PERIOD: Duration = Duration::from_secs(2);
const CAP: u16 = 2;
const BINDINGS: usize = 3;
/// Periods counted.
const PERIODS: u32 = 10;

/// Requests the API server served, from its own `apiserver_request_total`: pod creates as dry
/// runs, pod creates for real, and writes of Nimbus kinds and engines' kinds.
async fn counted(client: &Client) -> (u64, u64, u64) {
    let served = common::apiserver_requests(client).await;
    let sum = |keep: &dyn Fn(&str) -> bool| {
        (served.iter())
            .filter(|(series, _)| keep(series))
            .map(|(_, count)| count)
            .sum::<u64>()
    };
    let pod_create = |l: &str| {
        l.contains(r#"resource="pods""#)
            && l.contains(r#"subresource="""#)
            && l.contains(r#"verb="POST""#)
    };
    let dry = sum(&|l| pod_create(l) && l.contains(r#"dry_run="All""#));
    let real = sum(&|l| pod_create(l) && l.contains(r#"dry_run="""#));
    let writes = sum(&|l| {
        let ours = l.contains(r#"group="intent.security.nimbus.com""#)
            || nimbus_core::engines::all_kinds()
                .iter()
                .any(|k| l.contains(&format!(r#"resource="{}""#, k.plural)));
        ours && common::is_write(l)
    });
    (dry, real, writes)
}

#[tokio::test]
async fn probes_cost_their_budget_and_nothing_else() {
    let cp = common::cluster_with_engines();
    common::run_operator(
        cp,
        nimbus_operator::Config {
            // The admission engine writes (its objects act once written, no engine process
            // needed): escapeToHost of a cluster binding is one probeable pair per policy.
            engine_preference: "admission,kyverno".parse().expect("a preference"),
            probes: Some(nimbus_operator::probes::Config {
                period: PERIOD,
                cap: CAP,
            }),
            ..Default::default()
        },
    );
    let client = cp.client().expect("client");
    let escape = create_intent(&client, "escapeToHost", "Block").await;
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    let mut namespaces = Vec::new();
    for _ in 0..BINDINGS {
        let ns = cp.test_namespace("budget").await.expect("ns");
        let name = unique("budget");
        apply(&csibs, &name, &json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
            "metadata": {"name": name},
            "spec": {"intents": [{"name": escape}],
                     "selector": {"nsSelector": {"matchNames": [ns.name()]},
                                  "workloadSelector": {"matchLabels": {"app": "web"}}}}
        }))
        .await;
        namespaces.push(ns);
    }
    // Every pair probed at least once: the objects settled (5 s), then ⌈3/2⌉ periods.
    let (first, ..) = counted(&client).await;
    eventually("the probes under way", CONVERGE, async |seen| {
        let (dry, ..) = counted(&client).await;
        *seen = format!("{} dry-run pod creates", dry - first);
        (dry - first >= BINDINGS as u64).then_some(())
    })
    .await;

    let (dry_before, real_before, writes_before) = counted(&client).await;
    let began = Instant::now();
    tokio::time::sleep(PERIOD * PERIODS).await;
    let (dry_after, real_after, writes_after) = counted(&client).await;
    let elapsed = began.elapsed();
    let sent = dry_after - dry_before;
    // The periods that began in the window: the count read at either end may fall inside a
    // period's round, so one period more or less.
    let periods = (elapsed.as_secs_f64() / PERIOD.as_secs_f64()).round() as u64;
    let per_period = u64::from(CAP);
    println!(
        "probes over {elapsed:?} ({periods} periods of {PERIOD:?}, cap {CAP}, {BINDINGS} \
         probeable pairs): {sent} dry-run pod creates, {} real pod creates, {} writes",
        real_after - real_before,
        writes_after - writes_before
    );
    assert!(
        sent >= per_period * (periods - 1) && sent <= per_period * (periods + 1),
        "{sent} dry runs in {periods} periods: the budget is {per_period} a period"
    );
    assert_eq!(real_after, real_before, "pods created for real");
    assert_eq!(
        writes_after, writes_before,
        "writes at steady state with probes on"
    );
}
