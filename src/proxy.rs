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
//!
//! And it can *hold a client once the broker has confirmed* ([`Proxy::hold_after_confirms`]): it
//! reads the AMQP frames the broker sends, and once the publisher confirms (`basic.ack`) of one
//! connection cover a given number of publishes, every byte that client sends from then on is
//! dropped. A client that acks what it moved only after the broker confirmed its copy (CLU-7's
//! conversion) is thereby stopped between a confirm and its ack, whatever its timing; the suite
//! then kills it. Plain AMQP only (a TLS stream cannot be read).

use std::collections::HashMap;
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
    /// Confirms after which a connection's client bytes are held (0: off; see the module doc).
    hold_after: Arc<AtomicU64>,
    /// Client → broker bytes are dropped while set: a connection's confirms reached `hold_after`.
    holding: Arc<AtomicBool>,
    /// Client → broker bytes dropped while holding.
    held_bytes: Arc<AtomicU64>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:<free port>` → `upstream`.
    pub async fn start(upstream: String) -> Result<Proxy, ProxyError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let listen = listener.local_addr()?;
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (losing, lost): (Arc<AtomicBool>, Arc<AtomicU64>) = Default::default();
        let down: Arc<AtomicBool> = Arc::default();
        let hold = Hold::default();
        let (links2, losing2, lost2, down2, hold2) =
            (links.clone(), losing.clone(), lost.clone(), down.clone(), hold.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if down2.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let upstream = upstream.clone();
                let (losing, lost, down, hold) = (losing2.clone(), lost2.clone(), down2.clone(), hold2.clone());
                let task = tokio::spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(&upstream).await {
                        let (in_r, in_w) = inbound.into_split();
                        let (out_r, out_w) = outbound.into_split();
                        // A link that slipped past a `go_down` ends at its next read.
                        let up = pump(
                            in_r,
                            out_w,
                            hold.holding.clone(),
                            hold.dropped.clone(),
                            down.clone(),
                            None,
                        );
                        let down = pump(out_r, in_w, losing, lost, down, Some((ConfirmScan::default(), hold)));
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
            hold_after: hold.after,
            holding: hold.holding,
            held_bytes: hold.dropped,
        })
    }

    /// Once the broker's publisher confirms on one connection cover `publishes` publishes (the
    /// highest `basic.ack` delivery tag of each channel, summed), that connection's — and every
    /// other's — client → broker bytes are dropped until [`Proxy::cut`]: the client is stopped
    /// between those confirms and whatever it would send next (its acks). One-shot: disarmed when
    /// it fires. The confirms themselves still reach the client.
    pub fn hold_after_confirms(&self, publishes: u64) {
        self.hold_after.store(publishes.max(1), Ordering::SeqCst);
    }

    /// Whether [`Proxy::hold_after_confirms`] fired: clients' bytes are being dropped.
    pub fn holding(&self) -> bool {
        self.holding.load(Ordering::SeqCst)
    }

    /// Client → broker bytes dropped since the hold fired.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes.load(Ordering::SeqCst)
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
        self.holding.store(false, Ordering::SeqCst);
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

/// The proxy's state for [`Proxy::hold_after_confirms`], shared with every link.
#[derive(Clone, Default)]
struct Hold {
    after: Arc<AtomicU64>,
    holding: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
}

/// Reads the frames a broker sends (AMQP 0-9-1 §4.2.3: type, channel, size, payload, 0xCE) as
/// they pass, and keeps the highest publisher-confirm tag of each channel. Only the first bytes
/// of a frame's payload are kept; the rest is skipped as it streams by.
#[derive(Default)]
struct ConfirmScan {
    /// The current frame's header (7 bytes) and the start of its payload.
    head: Vec<u8>,
    /// Bytes of the current frame still to skip (rest of the payload and the frame end).
    skip: usize,
    /// Highest `basic.ack` delivery tag per channel.
    tags: HashMap<u16, u64>,
}

impl ConfirmScan {
    /// Frame header bytes, then class id, method id and a `basic.ack`'s delivery tag.
    const HEADER: usize = 7;
    const LOOK: usize = 2 + 2 + 8;

    /// Reads `bytes`; returns the publishes confirmed so far (each channel's highest tag, summed).
    fn feed(&mut self, mut bytes: &[u8]) -> u64 {
        loop {
            if self.skip > 0 {
                let k = self.skip.min(bytes.len());
                self.skip -= k;
                bytes = &bytes[k..];
                if self.skip > 0 {
                    break;
                }
            }
            let need = self.needed();
            if self.head.len() >= Self::HEADER && self.head.len() == need {
                let look = need - Self::HEADER;
                self.frame(look);
                self.skip = self.size() - look + 1;
                self.head.clear();
                continue;
            }
            if bytes.is_empty() {
                break;
            }
            let k = (need - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..k]);
            bytes = &bytes[k..];
        }
        self.tags.values().sum()
    }

    /// The current frame's payload size (its header is in `head`).
    fn size(&self) -> usize {
        u32::from_be_bytes([self.head[3], self.head[4], self.head[5], self.head[6]]) as usize
    }

    /// How many bytes of the current frame `head` is to hold: its header, then the start of its
    /// payload.
    fn needed(&self) -> usize {
        if self.head.len() < Self::HEADER {
            Self::HEADER
        } else {
            Self::HEADER + self.size().min(Self::LOOK)
        }
    }

    /// One frame's header and first `look` payload bytes are in `head`.
    fn frame(&mut self, look: usize) {
        let h = &self.head;
        // A method frame of class basic (60), method ack (80): a publisher confirm.
        if h[0] == 1 && look == Self::LOOK && h[7..11] == [0, 60, 0, 80] {
            let channel = u16::from_be_bytes([h[1], h[2]]);
            let mut tag = [0u8; 8];
            tag.copy_from_slice(&h[11..19]);
            let tag = u64::from_be_bytes(tag);
            let max = self.tags.entry(channel).or_default();
            *max = (*max).max(tag);
        }
    }
}

/// Copies `from` to `to` until either side closes or the proxy is `down`; while `losing` is set,
/// reads are counted in `lost` and dropped instead of written. With `scan` (the broker's side),
/// the frames are read first, and the hold fires before the confirm that reaches its count is
/// passed on — so nothing the client sends after seeing it gets through.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    losing: Arc<AtomicBool>,
    lost: Arc<AtomicU64>,
    down: Arc<AtomicBool>,
    mut scan: Option<(ConfirmScan, Hold)>,
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
        if let Some((frames, hold)) = scan.as_mut() {
            let after = hold.after.load(Ordering::SeqCst);
            let confirmed = frames.feed(&buf[..n]);
            if after > 0
                && confirmed >= after
                && hold
                    .after
                    .compare_exchange(after, 0, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                hold.holding.store(true, Ordering::SeqCst);
            }
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

    /// One AMQP frame: type, channel, size, payload, frame end.
    fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![kind];
        f.extend_from_slice(&channel.to_be_bytes());
        f.extend_from_slice(&u32::try_from(payload.len()).expect("size").to_be_bytes());
        f.extend_from_slice(payload);
        f.push(0xCE);
        f
    }

    /// A `basic.ack` method frame (a publisher confirm from the broker).
    fn basic_ack(channel: u16, tag: u64, multiple: bool) -> Vec<u8> {
        let mut p = vec![0, 60, 0, 80];
        p.extend_from_slice(&tag.to_be_bytes());
        p.push(u8::from(multiple));
        frame(1, channel, &p)
    }

    #[test]
    fn confirm_scan_sums_each_channels_highest_tag_across_any_split() {
        let mut stream = Vec::new();
        stream.extend(frame(8, 0, &[]));
        // A get-ok and a body that happens to hold the bytes of a basic.ack: not a confirm.
        stream.extend(frame(1, 1, &[0, 60, 0, 71, 0, 0, 0, 0, 0, 0, 0, 9, 0]));
        let mut body = vec![0, 60, 0, 80];
        body.extend_from_slice(&500u64.to_be_bytes());
        body.extend(vec![7u8; 300]);
        stream.extend(frame(3, 2, &body));
        stream.extend(basic_ack(2, 40, true));
        stream.extend(basic_ack(2, 30, false));
        stream.extend(basic_ack(3, 5, false));
        for chunk in [1usize, 2, 5, 13, 64, stream.len()] {
            let mut scan = ConfirmScan::default();
            let mut total = 0;
            for c in stream.chunks(chunk) {
                total = scan.feed(c);
            }
            assert_eq!(total, 45, "chunks of {chunk}");
            assert!(scan.head.is_empty() && scan.skip == 0, "ends on a frame boundary");
        }
    }

    #[tokio::test]
    async fn holds_what_the_client_sends_once_the_confirms_reach_the_count() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = upstream.local_addr().expect("addr");
        let (got_tx, mut got_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        let (say_tx, mut say_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            if let Ok((s, _)) = upstream.accept().await {
                let (mut r, mut w) = s.into_split();
                tokio::spawn(async move {
                    while let Some(b) = say_rx.recv().await {
                        if w.write_all(&b).await.is_err() {
                            break;
                        }
                    }
                });
                let mut buf = [0u8; 64];
                while let Ok(n) = r.read(&mut buf).await {
                    if n == 0 || got_tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        });
        let proxy = Proxy::start(addr.to_string()).await.expect("proxy");
        proxy.hold_after_confirms(3);
        let mut c = TcpStream::connect(proxy.listen()).await.expect("connect");
        c.write_all(b"publish").await.expect("write");
        assert_eq!(got_rx.recv().await.as_deref(), Some(&b"publish"[..]));
        let first = basic_ack(1, 2, true);
        say_tx.send(first.clone()).expect("say");
        let mut buf = vec![0u8; first.len()];
        c.read_exact(&mut buf).await.expect("the first confirm");
        assert!(!proxy.holding(), "two confirmed, three asked for");
        c.write_all(b"ack-2").await.expect("write");
        assert_eq!(got_rx.recv().await.as_deref(), Some(&b"ack-2"[..]));
        let second = basic_ack(1, 3, false);
        say_tx.send(second.clone()).expect("say");
        let mut buf = vec![0u8; second.len()];
        c.read_exact(&mut buf)
            .await
            .expect("the confirm that fires the hold still arrives");
        assert!(proxy.holding());
        c.write_all(b"ack-3").await.expect("write");
        let more = tokio::time::timeout(std::time::Duration::from_millis(300), got_rx.recv()).await;
        assert!(
            more.is_err(),
            "the ack after the confirm never reached the broker: {more:?}"
        );
        assert_eq!(proxy.held_bytes(), 5);
        assert_eq!(proxy.cut(), 1);
        assert!(!proxy.holding(), "a cut ends the hold");
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
