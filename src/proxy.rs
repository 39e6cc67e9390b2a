//! The cuttable link: a TCP proxy between gateways and the broker (network faults the suite owns).
//!
//! Gateways of a scenario that asks for it reach the broker through this proxy, so the suite can
//! cut every live connection at once (a broker blip as a gateway sees it) without touching the
//! broker that other scenarios share. Each connection is two copy tasks; cutting aborts them, which
//! closes both sockets.
//!
//! It can also *lose the broker's answers* ([`Proxy::lose_answers`]): what gateways send still
//! reaches the broker, what the broker sends back (confirms, deliveries) is dropped. A publish
//! then reaches its queues while its confirm never arrives — the "confirm lost with the
//! connection" of SPEC [C-16]/[C-18] made deterministic, ended by a [`Proxy::cut`] (a connection
//! that lost bytes is useless afterwards).
//!
//! And it can be *down* ([`Proxy::go_down`]): every live connection is cut and every new one is
//! closed as soon as it is accepted, until [`Proxy::come_back`] — a broker a gateway cannot reach
//! for as long as the scenario says (CONTRACT §3 `not_connected`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
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
    cuts: Arc<AtomicU64>,
    /// Broker → gateway bytes are dropped while set (see the module doc).
    losing: Arc<AtomicBool>,
    /// Broker → gateway bytes dropped so far.
    lost: Arc<AtomicU64>,
    /// New connections are closed at once while set (see the module doc).
    down: Arc<AtomicBool>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:<free port>` → `upstream`.
    pub async fn start(upstream: String) -> Result<Proxy, ProxyError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let listen = listener.local_addr()?;
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (losing, lost): (Arc<AtomicBool>, Arc<AtomicU64>) = Default::default();
        let down: Arc<AtomicBool> = Arc::default();
        let (links2, losing2, lost2, down2) = (links.clone(), losing.clone(), lost.clone(), down.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if down2.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let upstream = upstream.clone();
                let (losing, lost, down) = (losing2.clone(), lost2.clone(), down2.clone());
                let task = tokio::spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(&upstream).await {
                        let (in_r, in_w) = inbound.into_split();
                        let (out_r, out_w) = outbound.into_split();
                        let never = Arc::new(AtomicBool::new(false));
                        // A link that slipped past a `go_down` ends at its next read.
                        let up = pump(in_r, out_w, never, Arc::default(), down.clone());
                        let down = pump(out_r, in_w, losing, lost, down);
                        // Either direction ending ends the link (both sockets close on drop).
                        tokio::select! {
                            _ = up => {}
                            _ = down => {}
                        }
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
            losing,
            lost,
            down,
        })
    }

    /// Cuts every live connection and closes every new one at once until [`Proxy::come_back`]:
    /// the broker is out of reach. Returns how many live connections were cut.
    pub fn go_down(&self) -> usize {
        self.down.store(true, Ordering::SeqCst);
        self.cut()
    }

    /// Ends [`Proxy::go_down`]: new connections are carried again.
    pub fn come_back(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    /// From now on the broker's answers are dropped (gateways' bytes still reach the broker)
    /// until [`Proxy::cut`].
    pub fn lose_answers(&self) {
        self.losing.store(true, Ordering::SeqCst);
    }

    /// Broker → gateway bytes dropped since [`Proxy::lose_answers`].
    pub fn answers_lost(&self) -> u64 {
        self.lost.load(Ordering::SeqCst)
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
        // New connections carry everything again.
        self.losing.store(false, Ordering::SeqCst);
        self.cuts.fetch_add(1, Ordering::Relaxed);
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

/// Copies `from` to `to` until either side closes or the proxy is `down`; while `losing` is set,
/// reads are counted in `lost` and dropped instead of written.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    losing: Arc<AtomicBool>,
    lost: Arc<AtomicU64>,
    down: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if down.load(Ordering::SeqCst) {
            return;
        }
        if losing.load(Ordering::SeqCst) {
            lost.fetch_add(n as u64, Ordering::SeqCst);
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
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

    /// A loopback server that echoes whatever it reads; its address.
    async fn echo_upstream() -> SocketAddr {
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
        addr
    }

    #[tokio::test]
    async fn forwards_and_cuts() {
        let addr = echo_upstream().await;
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

    #[tokio::test]
    async fn losing_answers_drops_only_what_comes_back() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = upstream.local_addr().expect("addr");
        let (got_tx, mut got_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = upstream.accept().await {
                let got_tx = got_tx.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let _ = got_tx.send(buf[..n].to_vec());
                        if s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let proxy = Proxy::start(addr.to_string()).await.expect("proxy");
        let mut c = TcpStream::connect(proxy.listen()).await.expect("connect");
        proxy.lose_answers();
        c.write_all(b"publish").await.expect("write");
        assert_eq!(
            got_rx.recv().await.as_deref(),
            Some(&b"publish"[..]),
            "the upstream got it"
        );
        let mut buf = [0u8; 7];
        let read = tokio::time::timeout(std::time::Duration::from_millis(300), c.read_exact(&mut buf)).await;
        assert!(read.is_err(), "the answer was dropped, nothing came back");
        assert_eq!(proxy.answers_lost(), 7);
        assert_eq!(proxy.cut(), 1);
        let mut c = TcpStream::connect(proxy.listen()).await.expect("reconnect");
        c.write_all(b"again").await.expect("write");
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).await.expect("answers flow after the cut");
        assert_eq!(&buf, b"again");
    }

    #[tokio::test]
    async fn down_closes_live_and_new_connections_until_back() {
        let addr = echo_upstream().await;
        let proxy = Proxy::start(addr.to_string()).await.expect("proxy");
        let mut live = TcpStream::connect(proxy.listen()).await.expect("connect");
        live.write_all(b"x").await.expect("write");
        let mut one = [0u8; 1];
        live.read_exact(&mut one).await.expect("echo");
        assert_eq!(proxy.go_down(), 1, "the live connection is cut");
        let mut c = TcpStream::connect(proxy.listen()).await.expect("accepted, then closed");
        let mut rest = Vec::new();
        assert_eq!(
            c.read_to_end(&mut rest).await.unwrap_or(0),
            0,
            "closed at once while down"
        );
        proxy.come_back();
        let mut c = TcpStream::connect(proxy.listen()).await.expect("connect");
        c.write_all(b"back").await.expect("write");
        let mut buf = [0u8; 4];
        c.read_exact(&mut buf).await.expect("carried again");
        assert_eq!(&buf, b"back");
    }
}
