//! `/healthz` (the process is serving) and `/readyz` (every cache has synced, none has stopped).

use crate::error::Error;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use futures::FutureExt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;

/// Binds now (so a taken port fails start-up) and returns the serving future.
pub async fn serve(
    addr: SocketAddr,
    caches_synced: impl Future<Output = ()> + Send + 'static,
    broken: CancellationToken,
    shutdown: CancellationToken,
) -> Result<Pin<Box<dyn Future<Output = ()> + Send>>, Error> {
    let ready = Arc::new(AtomicBool::new(false));
    let flag = ready.clone();
    tokio::spawn(async move {
        caches_synced.await;
        flag.store(true, Ordering::Release);
    });
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.load(Ordering::Acquire);
                let broken = broken.is_cancelled();
                async move {
                    match (ready, broken) {
                        (_, true) => (StatusCode::SERVICE_UNAVAILABLE, "a cache stopped"),
                        (true, false) => (StatusCode::OK, "ok"),
                        (false, false) => (StatusCode::SERVICE_UNAVAILABLE, "caches not synced"),
                    }
                }
            }),
        );
    serve_router(addr, app, shutdown).await
}

/// Binds `addr` now (so a taken port fails start-up) and returns the future serving `app`
/// until `shutdown`.
pub async fn serve_router(
    addr: SocketAddr,
    app: Router,
    shutdown: CancellationToken,
) -> Result<Pin<Box<dyn Future<Output = ()> + Send>>, Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })?;
    Ok(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, %addr, "HTTP server failed");
        }
    }
    .boxed())
}
