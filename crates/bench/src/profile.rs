//! kube-apiserver's CPU profile over a scenario and over its floor (`--apiserver-profile`), to
//! see where the API server's CPU goes: `go tool pprof -top <file>`.

use anyhow::Context as _;
use futures::AsyncReadExt as _;
use kube::Client;
use std::path::PathBuf;
use tokio::task::JoinHandle;

/// Starts sampling kube-apiserver's CPU for `secs` seconds; the profile is written to `path`
/// when the returned task ends.
pub fn start(client: &Client, secs: u64, path: PathBuf) -> JoinHandle<anyhow::Result<()>> {
    let client = client.clone();
    tokio::spawn(async move {
        let request = http::Request::get(format!("/debug/pprof/profile?seconds={secs}"))
            .body(Vec::new())
            .context("building the profile request")?;
        let mut body = client
            .request_stream(request)
            .await
            .context("requesting kube-apiserver's CPU profile")?;
        let mut profile = Vec::new();
        body.read_to_end(&mut profile)
            .await
            .context("reading kube-apiserver's CPU profile")?;
        std::fs::write(&path, profile).with_context(|| format!("writing {}", path.display()))
    })
}
