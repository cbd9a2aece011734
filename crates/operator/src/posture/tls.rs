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

#[cfg(test)]
mod tests {
    use super::*;
    use nimbus_testenv::Ca;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    fn front_proxy(ca: &Ca) -> RequestHeader {
        RequestHeader {
            client_ca: vec![CertificateDer::from_pem_slice(ca.pem().as_bytes()).expect("a CA")],
            allowed_names: vec![],
            username_headers: vec![],
            uid_headers: vec![],
            group_headers: vec![],
            extra_header_prefixes: vec![],
        }
    }

    /// One connection with the configuration in force, as a client presenting `client` (cert,
    /// key) and trusting `roots`: the serving certificate it was shown, or the error.
    async fn handshake(
        config: &watch::Receiver<Option<(Arc<ServerConfig>, RequestHeader)>>,
        roots: &[&Ca],
        client: &(String, String),
    ) -> Result<Vec<u8>, String> {
        let (server, _) = config.borrow().clone().expect("a configuration");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let addr = listener.local_addr().expect("its address");
        let accepting = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("a connection");
            // A refusal reaches the client as an alert; an accepted client gets its byte back.
            if let Ok(mut tls) = TlsAcceptor::from(server).accept(tcp).await {
                let mut byte = [0u8; 1];
                if tls.read_exact(&mut byte).await.is_ok() {
                    let _ = tls.write_all(&byte).await;
                    let _ = tls.flush().await;
                }
            }
        });
        let mut trusted = rustls::RootCertStore::empty();
        for ca in roots {
            trusted
                .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).expect("a CA"))
                .expect("a root");
        }
        let chain = CertificateDer::pem_slice_iter(client.0.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("a client certificate");
        let key = PrivateKeyDer::from_pem_slice(client.1.as_bytes()).expect("a client key");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(trusted)
        .with_client_auth_cert(chain, key)
        .expect("client auth");
        let tcp = TcpStream::connect(addr).await.expect("connecting");
        let name = ServerName::try_from("localhost").expect("a name");
        let result = async {
            let mut tls = TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|e| e.to_string())?;
            // TLS 1.3 reports a refused client certificate after the handshake: a round trip
            // tells.
            tls.write_all(b"x").await.map_err(|e| e.to_string())?;
            tls.flush().await.map_err(|e| e.to_string())?;
            let mut byte = [0u8; 1];
            tls.read_exact(&mut byte).await.map_err(|e| e.to_string())?;
            let (_, session) = tls.get_ref();
            Ok(session.peer_certificates().expect("a server certificate")[0].to_vec())
        }
        .await;
        accepting.abort();
        result
    }

    /// The configuration is rebuilt when the certificate files change (a rotated Secret) and
    /// when kube-apiserver's front-proxy CA changes: new connections see the new serving
    /// certificate, and only the new CA's client certificates are accepted.
    #[tokio::test]
    async fn a_rotated_certificate_and_front_proxy_ca_take_effect_without_a_restart() {
        let dir = tempfile::tempdir().expect("a directory");
        let serving = ServingCertificate {
            cert_file: dir.path().join("tls.crt"),
            key_file: dir.path().join("tls.key"),
        };
        let write = |cert: &(String, String)| {
            std::fs::write(&serving.cert_file, &cert.0).expect("tls.crt");
            std::fs::write(&serving.key_file, &cert.1).expect("tls.key");
        };
        let (serving_ca, proxy_ca, next_proxy_ca) = (
            Ca::new("serving").expect("a CA"),
            Ca::new("front-proxy").expect("a CA"),
            Ca::new("front-proxy-2").expect("a CA"),
        );
        let first = serving_ca.issue_server(&[]).expect("a certificate");
        write(&first);
        let proxy = proxy_ca
            .issue_client("front-proxy-client", &[])
            .expect("a client");
        let next_proxy = next_proxy_ca
            .issue_client("front-proxy-client", &[])
            .expect("a client");
        let (proxy_tx, proxy_rx) = watch::channel(Some(front_proxy(&proxy_ca)));
        let mut config = follow(serving.clone(), proxy_rx);
        config
            .wait_for(Option::is_some)
            .await
            .expect("a configuration");
        let der = |pem: &str| {
            CertificateDer::from_pem_slice(pem.as_bytes())
                .expect("DER")
                .to_vec()
        };
        assert_eq!(
            handshake(&config, &[&serving_ca], &proxy).await,
            Ok(der(&first.0))
        );

        // The Secret rotates: a new certificate from the same CA is served once the files
        // are read again.
        let second = serving_ca.issue_server(&[]).expect("a certificate");
        // A modification time that differs even on coarse filesystem clocks.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        write(&second);
        tokio::time::timeout(RELOAD_EVERY * 2, config.changed())
            .await
            .expect("reloaded in time")
            .expect("still followed");
        assert_eq!(
            handshake(&config, &[&serving_ca], &proxy).await,
            Ok(der(&second.0))
        );

        // kube-apiserver's front-proxy CA rotates: the old proxy certificate is refused.
        proxy_tx.send_replace(Some(front_proxy(&next_proxy_ca)));
        config.changed().await.expect("still followed");
        assert_eq!(
            handshake(&config, &[&serving_ca], &next_proxy).await,
            Ok(der(&second.0))
        );
        let refused = handshake(&config, &[&serving_ca], &proxy).await;
        assert!(refused.is_err(), "the old front proxy was accepted");
    }
}
