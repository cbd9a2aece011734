//! Control-plane processes must never outlive their owner.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nimbus_testenv::{ControlPlane, Options};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Set for the child test process of `children_die_with_a_killed_test_process`.
const HELPER_ENV: &str = "NIMBUS_TESTENV_LIFECYCLE_HELPER";

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn dropping_stops_every_process_and_removes_the_work_dir() -> TestResult {
    let started = Instant::now();
    let cluster = ControlPlane::start(Options::default()).await?;
    eprintln!("control plane started in {:?}", started.elapsed());
    let pids = cluster.pids();
    let work_dir = cluster.work_dir().to_owned();
    assert_eq!(
        pids.len(),
        3,
        "etcd, kube-apiserver, kube-controller-manager"
    );
    assert!(pids.iter().all(|&pid| alive(pid)));

    let stopping = Instant::now();
    drop(cluster);
    eprintln!("control plane stopped in {:?}", stopping.elapsed());
    let survivors = pids.iter().filter(|&&pid| alive(pid)).collect::<Vec<_>>();
    assert!(survivors.is_empty(), "still running: {survivors:?}");
    assert!(!work_dir.exists(), "{} was not removed", work_dir.display());
    Ok(())
}

/// Re-runs this very test as a separate process (the helper role, selected by an environment
/// variable), SIGKILLs it so no destructor runs, and checks that the shared control plane the
/// helper started dies with it.
#[test]
fn children_die_with_a_killed_test_process() -> TestResult {
    if std::env::var_os(HELPER_ENV).is_some() {
        let pids = nimbus_testenv::shared().pids();
        let pids = pids.iter().map(u32::to_string).collect::<Vec<_>>();
        println!("PIDS {}", pids.join(" "));
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
    let mut helper = Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "children_die_with_a_killed_test_process",
            "--nocapture",
        ])
        .env(HELPER_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = helper.stdout.take().ok_or("helper has no stdout")?;
    let pids_line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("PIDS ").map(str::to_owned));
    helper.kill()?;
    helper.wait()?;
    let pids = pids_line
        .ok_or("the helper exited without starting a control plane")?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<Vec<u32>, _>>()?;
    assert_eq!(pids.len(), 3);

    // The kernel delivers the parent-death signal at once; allow a moment for the exit.
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&pid| alive(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let survivors = pids.iter().filter(|&&pid| alive(pid)).collect::<Vec<_>>();
    assert!(survivors.is_empty(), "outlived their parent: {survivors:?}");
    Ok(())
}
