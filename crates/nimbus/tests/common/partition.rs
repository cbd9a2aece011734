//! A network partition on loopback: a TCP proxy in front of kube-apiserver that, when cut,
//! stops forwarding in both directions without closing anything (packets neither arrive nor
//! fail, as when a link goes down), and forwards what it held once healed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Partition {
    pub port: u16,
    cut: Arc<AtomicBool>,
}

impl Partition {
    /// Forwards `127.0.0.1:<port>` to `127.0.0.1:<target>` on its own thread and runtime (a
    /// test's runtime ends with the test).
    pub fn start(target: u16) -> Self {
        let std_listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port for the proxy");
        std_listener.set_nonblocking(true).expect("non-blocking");
        let port = std_listener.local_addr().expect("its address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let held = cut.clone();
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .expect("proxy runtime")
                .block_on(async move {
                    let listener = TcpListener::from_std(std_listener).expect("listener");
                    while let Ok((client, _)) = listener.accept().await {
                        let cut = held.clone();
                        tokio::spawn(async move {
                            wait_healed(&cut).await;
                            let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                                return;
                            };
                            let (client_read, client_write) = client.into_split();
                            let (server_read, server_write) = server.into_split();
                            tokio::join!(
                                pump(client_read, server_write, &cut),
                                pump(server_read, client_write, &cut),
                            );
                        });
                    }
                });
        });
        Self { port, cut }
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// A copy of `kubeconfig` at `to` whose server is this proxy.
    pub fn kubeconfig(&self, kubeconfig: &Path, to: &Path) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
        let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
        for cluster in config["clusters"].as_sequence_mut().expect("clusters") {
            let server = cluster["cluster"]["server"].as_str().expect("a server");
            let (base, _) = server.rsplit_once(':').expect("a port in the server URL");
            cluster["cluster"]["server"] = format!("{base}:{}", self.port).into();
        }
        std::fs::write(to, serde_yaml_ng::to_string(&config).expect("YAML")).expect("kubeconfig");
        to.to_owned()
    }
}

async fn wait_healed(cut: &AtomicBool) {
    while cut.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Copies `from` to `to`, holding each chunk while the link is cut.
async fn pump(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, cut: &AtomicBool) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        wait_healed(cut).await;
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        wait_healed(cut).await;
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
