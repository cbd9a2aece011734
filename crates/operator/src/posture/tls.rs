//! The TLS listener: a serving certificate from files (re-read when they change, so a rotated
//! Secret needs no restart), and client certificates checked against the front-proxy CA (from
//! the authentication ConfigMap, followed as kube-apiserver rotates it).
//!
//! A connection without a client certificate is accepted, so the handlers can answer it with
//! a proper 401 Status; one presenting a certificate the CA did not sign fails the handshake.

use super::auth::RequestHeader;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// How often the certificate files are checked for a change.
const RELOAD_EVERY: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct ServingCertificate {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no usable PEM {what}: {detail}")]
    Pem {
        path: PathBuf,
        what: &'static str,
        detail: String,
    },
    #[error("building the TLS configuration: {0}")]
    Config(String),
}

impl ServingCertificate {
    fn modified(&self) -> Option<(SystemTime, SystemTime)> {
        let at = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        Some((at(&self.cert_file)?, at(&self.key_file)?))
    }

    fn load(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                path: path.clone(),
                source,
            })
        };
        let pem = |path: &PathBuf, what, detail: String| TlsError::Pem {
            path: path.clone(),
            what,
            detail,
        };
        let chain = CertificateDer::pem_slice_iter(&read(&self.cert_file)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem(&self.cert_file, "certificate", e.to_string()))?;
        if chain.is_empty() {
            return Err(pem(&self.cert_file, "certificate", "none found".to_owned()));
        }
        let key = PrivateKeyDer::from_pem_slice(&read(&self.key_file)?)
            .map_err(|e| pem(&self.key_file, "private key", e.to_string()))?;
        Ok((chain, key))
    }
}

fn server_config(
    serving: &ServingCertificate,
    front_proxy: &RequestHeader,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in &front_proxy.client_ca {
        roots
            .add(ca.clone())
            .map_err(|e| TlsError::Config(format!("front-proxy CA: {e}")))?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Config(format!("front-proxy CA: {e}")))?;
    let (chain, key) = serving.load()?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(format!("serving certificate: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The TLS configuration in force, rebuilt whenever the certificate files or the front-proxy
/// settings change. `None` until both are known; a failed rebuild keeps the last good one.
pub fn follow(
    serving: ServingCertificate,
    mut front_proxy: watch::Receiver<Option<RequestHeader>>,
) -> watch::Receiver<Option<(Arc<ServerConfig>, RequestHeader)>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let mut loaded_files = None;
        let mut loaded_proxy: Option<RequestHeader> = None;
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        loop {
            let proxy = front_proxy.borrow_and_update().clone();
            let files = serving.modified();
            if let Some(proxy) = proxy
                && (files != loaded_files || Some(&proxy) != loaded_proxy.as_ref())
            {
                match server_config(&serving, &proxy) {
                    Ok(config) => {
                        tracing::info!("posture API TLS configuration (re)loaded");
                        loaded_files = files;
                        loaded_proxy = Some(proxy.clone());
                        tx.send_replace(Some((config, proxy)));
                    }
                    Err(error) => {
                        tracing::error!(%error, "posture API TLS configuration not (re)loaded");
                    }
                }
            }
            tokio::select! {
                _ = tick.tick() => {}
                changed = front_proxy.changed() => if changed.is_err() { break },
                () = tx.closed() => break,
            }
        }
    });
    rx
}

/// The common name of a (verified) client certificate.
pub fn common_name(cert: &CertificateDer) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = parsed.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}
