//! Operator processes (`nimbus run`), as a cluster runs them: started, probed, scraped,
//! terminated or killed.

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use nimbus_testenv::{Child, eventually, free_port, http_get};
use std::path::Path;
use std::time::Duration;

pub struct Replica {
    pub name: String,
    pub process: Child,
    pub health: u16,
    pub metrics: u16,
}

impl Replica {
    /// `nimbus run` with `args` besides its health and metrics addresses; its output goes to
    /// `<dir>/<name>.log`.
    pub fn start(name: &'static str, kubeconfig: &Path, dir: &Path, args: &[&str]) -> Self {
        let port = || free_port().expect("a free loopback port");
        let (health, metrics) = (port(), port());
        let mut all: Vec<String> = vec![
            "run".into(),
            "--instance".into(),
            name.into(),
            "--health-addr".into(),
            format!("127.0.0.1:{health}"),
            "--metrics-addr".into(),
            format!("127.0.0.1:{metrics}"),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        // `NIMBUS_TEST_LOG=info,nimbus_operator=debug` shows what the replica did.
        let log = std::env::var_os("NIMBUS_TEST_LOG").unwrap_or_else(|| "info".into());
        let process = Child::spawn(
            name,
            Path::new(env!("CARGO_BIN_EXE_nimbus")),
            &all,
            &[
                ("KUBECONFIG", kubeconfig.as_os_str()),
                ("NIMBUS_LOG", log.as_os_str()),
            ],
            dir,
        )
        .expect("starting a replica");
        Self {
            name: name.to_owned(),
            process,
            health,
            metrics,
        }
    }

    /// Sum of a metric's samples whose line contains `filter`.
    pub async fn metric(&self, name: &str, filter: &str) -> f64 {
        let (_, body) = http_get(self.metrics, "/metrics")
            .await
            .unwrap_or_else(|| panic!("{}: /metrics unreachable", self.name));
        body.lines()
            .filter(|l| l.starts_with(name) && l.contains(filter))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The names of the series `/metrics` exports, as Prometheus stores them (a counter `x`
    /// as `x_total`, a histogram's as `x_bucket`, `x_sum`, `x_count`). A family with no sample
    /// yet (no reconcile has failed) is not exported at all.
    pub async fn exported_series(&self) -> std::collections::BTreeSet<String> {
        let (_, body) = http_get(self.metrics, "/metrics")
            .await
            .unwrap_or_else(|| panic!("{}: /metrics unreachable", self.name));
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Whether `/readyz` answers 200 (`Err`: what it answered instead).
    pub async fn ready(&self) -> Result<(), String> {
        match http_get(self.health, "/readyz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("/readyz: {other:?}")),
        }
    }
}

/// Who holds the operator's lease, if anyone.
pub async fn holder(leases: &Api<Lease>) -> Option<String> {
    super::get(leases, "nimbus-operator")
        .await?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Waits (up to `limit`) for the lease to be held by someone other than `previous`.
pub async fn new_holder(leases: &Api<Lease>, previous: Option<&str>, limit: Duration) -> String {
    eventually(
        &format!("a new lease holder (was {previous:?})"),
        limit,
        async |seen| {
            let h = holder(leases).await;
            if let Some(h) = &h
                && Some(h.as_str()) != previous
            {
                return Some(h.clone());
            }
            *seen = format!("holder {h:?}");
            None
        },
    )
    .await
}
