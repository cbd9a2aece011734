//! The posture API (`posture.security.nimbus.com/v1alpha1`), an aggregated API every replica
//! serves from its caches (leadership is not needed to read): which workloads the bound intents
//! protect, by which engines, and the gaps.

mod auth;
mod compute;
mod fleet;
mod openapi;
mod postures;
mod previews;
mod reports;
mod request;
mod server;
mod store;
mod table;
mod tls;
mod watches;
mod writes;

pub use compute::Workloads;
pub use tls::ServingCertificate;
pub use watches::{Watches, signal};

// What the computation, the server and the writers share (`super::Postures`, `super::lock`).
use postures::Postures;
use writes::lock;

use crate::context::Context;
use crate::error::Error;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use nimbus_core::reports::ReportFormat;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct Config {
    /// Where the API is served (TLS).
    pub addr: SocketAddr,
    pub certificate: ServingCertificate,
    /// Which policy-report kind the posture is written as.
    pub reports: ReportFormat,
}

/// Starts computing the posture (again on every change `watches` signals) and binds the API's
/// port; returns the future that serves it until `shutdown`.
pub async fn start(
    config: &Config,
    client: &Client,
    ctx: Arc<Context>,
    workloads: Workloads,
    watches: Watches,
    shutdown: CancellationToken,
) -> Result<impl Future<Output = ()> + Send + 'static, Error> {
    let postures = Arc::new(Postures::new());
    let computing = compute::run(ctx, workloads, watches, postures.clone());
    tokio::spawn(until(shutdown.clone(), computing));
    let expiring = postures.clone();
    tokio::spawn(until(shutdown.clone(), async move {
        expiring.expire_history().await
    }));
    let front_proxy = front_proxy(client.clone(), shutdown.clone());
    let tls = tls::follow(config.certificate.clone(), front_proxy);
    let server = Arc::new(server::Server {
        postures,
        authorizer: auth::Authorizer::new(client.clone()),
        documents: openapi::Documents::build(),
        shutdown,
    });
    server::serve(config.addr, tls, server).await
}

/// Runs `task` until it ends or `shutdown`: the watches it drives must not outlive the
/// operator.
async fn until(shutdown: CancellationToken, task: impl Future<Output = ()>) {
    tokio::select! {
        () = task => {}
        () = shutdown.cancelled() => {}
    }
}

/// How kube-apiserver's front proxy authenticates, followed as it changes (until `shutdown`).
fn front_proxy(
    client: Client,
    shutdown: CancellationToken,
) -> watch::Receiver<Option<auth::RequestHeader>> {
    let (tx, rx) = watch::channel(None);
    let (namespace, name) = auth::AUTHENTICATION_CONFIG_MAP;
    let api = Api::<ConfigMap>::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(until(shutdown, async move {
        let mut events = watcher(api, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(cm) => {
                    match auth::RequestHeader::from_config_map(&cm.data.unwrap_or_default()) {
                        Ok(settings) => {
                            tx.send_if_modified(|current| {
                                let changed = current.as_ref() != Some(&settings);
                                *current = Some(settings);
                                changed
                            });
                        }
                        Err(error) => {
                            tracing::error!(%error, "{namespace}/{name}: the posture API cannot authenticate the front proxy");
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "watching {namespace}/{name} failed; retrying")
                }
            }
        }
    }));
    rx
}
