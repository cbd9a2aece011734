//! Loopback networking helpers for tests and benchmarks.

use crate::Error;
use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::{Mutex, PoisonError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Picks a loopback port nobody listens on right now. Ports already handed out by this process
/// are skipped, since their owner may not have bound them yet.
pub fn free_port() -> Result<u16, Error> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::io("binding a free port on", "127.0.0.1", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("reading the port of", "127.0.0.1", e))?
            .port();
        if HANDED_OUT
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(port)
        {
            return Ok(port);
        }
    }
}

/// A plain HTTP/1.0 GET on a loopback port: the status code and body, or `None` when nothing
/// answers (yet).
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}
