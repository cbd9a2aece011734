#[tokio::test]
async fn scratch() {
    let cp = nimbus_testenv::ControlPlane::start(Default::default()).await.expect("start");
    println!("PIDS {:?} {}", cp.pids(), cp.work_dir().display());
    tokio::time::sleep(std::time::Duration::from_secs(40)).await;
}
