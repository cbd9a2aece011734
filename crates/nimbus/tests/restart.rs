//! A restart never lowers protection. With 3,000 SecurityIntents and a realistic set of
//! bindings in force (every engine installed, so CRD-backed kinds are discovered at start),
//! the operator process is terminated and started again ten times while a monitor watches
//! every generated kind: no object may be deleted, even for a moment, none may change uid, and
//! no Warning Event or `Ready=False` status may be written about what was in force all along.

mod common;

use common::CONVERGE;
use common::fleet::{all_ready, create_realistic_set, monitor, settled, start, start_settled};
use nimbus_testenv::eventually;

const RESTARTS: usize = 10;
/// SecurityIntents in the cluster, most of them bound by nothing: a large cache to list.
const INTENTS: usize = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_never_delete_nor_misreport_what_is_in_force() {
    let cp = common::cluster_with_engines();
    let client = cp.client().expect("client");
    create_realistic_set(&client, INTENTS).await;
    let dir = tempfile::tempdir().expect("log dir");

    let (mut operator, workload) = start_settled(&client, cp.kubeconfig_path(), dir.path()).await;

    let monitor = monitor(&client).await;
    let in_force = monitor.present();
    let natives = in_force
        .keys()
        .filter(|k| !k.contains("NimbusPolicy "))
        .count();
    assert!(
        natives >= 20,
        "the realistic set should keep 20+ native policies in force, found {natives}: {in_force:?}"
    );

    for restart in 1..=RESTARTS {
        operator.process.terminate();
        eventually("the operator to exit", CONVERGE, async |_| {
            operator.process.has_exited().then_some(())
        })
        .await;
        operator = start(cp.kubeconfig_path(), dir.path());
        settled(&operator, &workload).await;
        let findings = monitor.findings();
        assert!(
            findings.is_clean(),
            "restart {restart} of {RESTARTS} lowered protection or misreported it:\n{findings}\
             operator log:\n{}",
            operator.process.output()
        );
    }
    // Nothing happens late either: the statuses the last start wrote are still Ready.
    all_ready(&client).await;
    let findings = monitor.findings();
    assert!(findings.is_clean(), "{findings}");
    assert_eq!(
        monitor.present(),
        in_force,
        "the objects in force (and their uids) after {RESTARTS} restarts"
    );
    eprintln!(
        "{RESTARTS} restarts with {INTENTS} intents: {} objects kept in force ({natives} native), \
         no gap, no uid change, no Warning Event, no Ready=False",
        in_force.len()
    );
}
