//! A fault-injecting TCP proxy on loopback: real TCP between client, proxy and server.
//!
//! Implemented fault so far: **cut** — a chosen share of connections is cut (both sides
//! closed) at a random point of an SSE response, after its first event that carries an id has
//! passed (so the client has a cursor and the stream is resumable). Everything else is
//! forwarded unchanged. Other scenarios are still to come.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does to connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FaultPlan {
    /// Share of connections (0..=1) to cut inside an SSE response.
    pub(crate) cut_rate: f64,
    /// Seed of the proxy's decisions (runs are repeatable).
    pub(crate) seed: u64,
}

/// Counters.
#[derive(Debug, Default)]
pub(crate) struct ProxyStats {
    pub(crate) connections: Cell<u64>,
    pub(crate) cuts: Cell<u64>,
}

/// Decides, from the server-to-client bytes of one connection, where to cut: after the first
/// SSE event carrying an `id`, plus `extra` bytes. Pure; fed chunk by chunk.
#[derive(Debug)]
pub(crate) struct CutPoint {
    extra: usize,
    head: Vec<u8>,
    body: Vec<u8>,
    state: CutState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CutState {
    /// Reading the response head.
    Head,
    /// In an SSE body, looking for the end of an event with an id.
    Body,
    /// Armed: this many more bytes may pass.
    Armed(usize),
    /// Not cutting this connection (not SSE, or limits exceeded).
    Pass,
}

const MAX_SCAN: usize = 64 * 1024;

impl CutPoint {
    pub(crate) fn new(extra: usize) -> CutPoint {
        CutPoint { extra, head: Vec::new(), body: Vec::new(), state: CutState::Head }
    }

    /// How many bytes of `chunk` to forward; `(n, true)` means cut after those `n` bytes.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> (usize, bool) {
        let mut i = 0;
        while i < chunk.len() {
            match self.state {
                CutState::Pass => return (chunk.len(), false),
                CutState::Armed(left) => {
                    let n = left.min(chunk.len() - i);
                    self.state = CutState::Armed(left - n);
                    return (i + n, left - n == 0);
                }
                CutState::Head => {
                    self.head.push(chunk[i]);
                    i += 1;
                    if self.head.ends_with(b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&self.head).to_ascii_lowercase();
                        self.state = if head.contains("content-type: text/event-stream") { CutState::Body } else { CutState::Pass };
                    } else if self.head.len() > MAX_SCAN {
                        self.state = CutState::Pass;
                    }
                }
                CutState::Body => {
                    self.body.push(chunk[i]);
                    i += 1;
                    if self.body.ends_with(b"\n\n") {
                        let has_id = self.body.windows(4).any(|w| w == b"id: ");
                        if has_id {
                            self.state = CutState::Armed(self.extra);
                        } else {
                            self.body.clear();
                        }
                    } else if self.body.len() > MAX_SCAN {
                        self.state = CutState::Pass;
                    }
                }
            }
        }
        (chunk.len(), self.state == CutState::Armed(0))
    }
}

fn next_random(state: &mut u64) -> u64 {
    // splitmix64: decisions need repeatability, not secrecy.
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Start the proxy in front of `upstream` on the current (local) runtime.
pub(crate) async fn start(upstream: SocketAddr, plan: FaultPlan) -> std::io::Result<(SocketAddr, Rc<ProxyStats>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stats = Rc::new(ProxyStats::default());
    let st = Rc::clone(&stats);
    actix_rt::spawn(async move {
        let mut rng = plan.seed;
        while let Ok((client, _)) = listener.accept().await {
            st.connections.set(st.connections.get() + 1);
            let cut = ((next_random(&mut rng) >> 11) as f64 / (1u64 << 53) as f64) < plan.cut_rate;
            let extra = (next_random(&mut rng) % 256) as usize;
            actix_rt::spawn(pipe(client, upstream, cut.then(|| CutPoint::new(extra)), Rc::clone(&st)));
        }
    });
    Ok((addr, stats))
}

async fn pipe(client: TcpStream, upstream: SocketAddr, mut cut: Option<CutPoint>, stats: Rc<ProxyStats>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async move {
        let _ = tokio::io::copy(&mut cr, &mut sw).await;
        let _ = sw.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let (pass, cut_now) = cut.as_mut().map_or((n, false), |c| c.feed(&buf[..n]));
            if cw.write_all(&buf[..pass]).await.is_err() {
                break;
            }
            if cut_now {
                stats.cuts.set(stats.cuts.get() + 1);
                return;
            }
        }
        let _ = cw.shutdown().await;
    };
    // Whichever direction ends first ends the connection (a cut drops both sockets).
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

    #[test]
    fn cuts_only_after_an_event_with_an_id_plus_extra_bytes() {
        let mut c = CutPoint::new(5);
        assert_eq!(c.feed(HEAD), (HEAD.len(), false));
        let body = b"2a\r\nid: abc\nretry: 100\ndata: \n\n\r\n1f\r\nid: def\ndata: {}\n\n\r\n";
        let (n, cut) = c.feed(body);
        assert!(cut);
        let first_event_end = body.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
        assert_eq!(n, first_event_end + 5);
    }

    #[test]
    fn events_without_id_and_json_responses_are_not_cut() {
        let mut c = CutPoint::new(0);
        c.feed(HEAD);
        assert_eq!(c.feed(b"data: {\"initialize\":1}\n\n"), (24, false));
        let mut j = CutPoint::new(0);
        let json = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(j.feed(json), (json.len(), false));
        assert_eq!(j.feed(b"more"), (4, false));
    }

    #[test]
    fn split_feeding_finds_the_same_cut() {
        let mut all = HEAD.to_vec();
        all.extend_from_slice(b"id: x\ndata: \n\nid: y\ndata: {}\n\n");
        let whole = CutPoint::new(3).feed(&all);
        let mut c = CutPoint::new(3);
        let mut passed = 0;
        for b in all.chunks(1) {
            let (n, cut) = c.feed(b);
            passed += n;
            if cut {
                break;
            }
        }
        assert_eq!(passed, whole.0);
    }
}
