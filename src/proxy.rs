//! The cuttable link: a TCP proxy between gateways and the broker (network faults the suite owns).
//!
//! Gateways of a scenario that asks for it reach the broker through this proxy, so the suite can
//! cut every live connection at once (a broker blip as a gateway sees it) without touching the
//! broker that other scenarios share. Each connection is two copy tasks; cutting aborts them, which
//! closes both sockets.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A proxy failure.
#[derive(Debug, thiserror::Error)]
#[error("TCP proxy: {0}")]
pub struct ProxyError(#[from] std::io::Error);

/// A TCP proxy listening on a loopback port, forwarding to one upstream address.
pub struct Proxy {
    listen: SocketAddr,
    accept: JoinHandle<()>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
    cuts: Arc<std::sync::atomic::AtomicU64>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:<free port>` → `upstream`.
    pub async fn start(upstream: String) -> Result<Proxy, ProxyError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let listen = listener.local_addr()?;
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let links2 = links.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                if let Ok(mut l) = links2.lock() {
                    l.retain(|t| !t.is_finished());
                    l.push(task);
                }
            }
        });
        Ok(Proxy {
            listen,
            accept,
            links,
            cuts: Arc::default(),
        })
    }

    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// Cuts every live connection (new ones are accepted again at once).
    pub fn cut(&self) -> usize {
        let cut: Vec<JoinHandle<()>> = self
            .links
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        let n = cut.iter().filter(|t| !t.is_finished()).count();
        for t in cut {
            t.abort();
        }
        self.cuts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        n
    }

    /// Live connections through the proxy.
    pub fn live(&self) -> usize {
        self.links
            .lock()
            .map(|l| l.iter().filter(|t| !t.is_finished()).count())
            .unwrap_or(0)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn forwards_and_cuts() {
        let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = echo.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let proxy = Proxy::start(addr.to_string()).await.expect("proxy");
        let mut c = TcpStream::connect(proxy.listen()).await.expect("connect");
        c.write_all(b"ping").await.expect("write");
        let mut buf = [0u8; 4];
        c.read_exact(&mut buf).await.expect("read");
        assert_eq!(&buf, b"ping");
        assert_eq!(proxy.cut(), 1);
        let mut rest = Vec::new();
        let n = c.read_to_end(&mut rest).await.unwrap_or(0);
        assert_eq!(n, 0, "a cut connection reads EOF");
    }
}
