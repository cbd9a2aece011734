//! The operator under test: built in release mode, run against the control plane, and its log.

use crate::progress::step;
use anyhow::{Context as _, bail};
use nimbus_testenv::{Child, ControlPlane, http_get};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Builds `nimbus` in release mode (a no-op when it is up to date) and returns the path cargo
/// reports for it, so the binary matches the sources whatever the target directory.
pub(crate) fn build_operator(root: &Path) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    step("building the operator: cargo build --release -p nimbus --bin nimbus");
    let mut command = Command::new(&cargo);
    // `cargo run` describes the bench package to it in the environment; passed on, that would
    // look like a changed environment to some build scripts (ring's reads CARGO_MANIFEST_DIR)
    // and rebuild half the dependency tree on every other build.
    for (name, _) in std::env::vars_os() {
        let name_str = name.to_string_lossy();
        if name_str.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
            ]
            .contains(&name_str.as_ref())
        {
            command.env_remove(&name);
        }
    }
    let output = command
        .args([
            "build",
            "--release",
            "-p",
            "nimbus",
            "--bin",
            "nimbus",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            // No cargo (e.g. the bench binary was copied elsewhere): a sibling binary from the
            // same build is the next best thing.
            let sibling = std::env::current_exe()
                .context("locating the bench binary")?
                .with_file_name("nimbus");
            if sibling.is_file() {
                step(format!(
                    "cannot run {} ({e}); using {} from the same target directory",
                    cargo.to_string_lossy(),
                    sibling.display()
                ));
                return Ok(sibling);
            }
            return Err(anyhow::Error::new(e).context(format!(
                "running `{} build --release -p nimbus` (and no nimbus binary next to the bench \
                 binary; pass --nimbus-bin)",
                cargo.to_string_lossy()
            )));
        }
    };
    if !output.status.success() {
        bail!(
            "`cargo build --release -p nimbus` failed ({})",
            output.status
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "nimbus")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo built nimbus but reported no executable for it")
}

/// Runs `nimbus <args>` against `cp` (logging at `NIMBUS_LOG`, default info) and waits until
/// its `/readyz` on port `health` answers 200.
pub(crate) async fn spawn_operator(
    cp: &ControlPlane,
    nimbus: &Path,
    args: &[String],
    health: u16,
) -> anyhow::Result<Child> {
    let log_level = std::env::var_os("NIMBUS_LOG").unwrap_or_else(|| OsString::from("info"));
    let mut operator = Child::spawn(
        "nimbus-operator",
        nimbus,
        args,
        &[
            ("KUBECONFIG", cp.kubeconfig_path().as_os_str()),
            ("NIMBUS_LOG", log_level.as_os_str()),
        ],
        cp.work_dir(),
    )
    .with_context(|| format!("starting {}", nimbus.display()))?;
    wait_ready(&mut operator, health).await?;
    Ok(operator)
}

async fn wait_ready(operator: &mut Child, health: u16) -> anyhow::Result<()> {
    const LIMIT: Duration = Duration::from_secs(120);
    let started = Instant::now();
    loop {
        if http_get(health, "/readyz").await.map(|(code, _)| code) == Some(200) {
            return Ok(());
        }
        if operator.has_exited() {
            bail!(
                "the operator exited before becoming ready; its log ends with:\n{}",
                tail(&operator.output(), 40)
            );
        }
        if started.elapsed() > LIMIT {
            bail!(
                "the operator's /readyz (127.0.0.1:{health}) did not answer 200 within \
                 {LIMIT:?}; its log ends with:\n{}",
                tail(&operator.output(), 40)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
