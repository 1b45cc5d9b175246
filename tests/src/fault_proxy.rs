//! A loopback TCP proxy in front of a test server that loses replies, drops requests and kills
//! connections, per write request, at seeded rates. What a request is, and which requests write,
//! is the wire protocol's business ([`Wire`]: [`crate::proxy::MongoWire`],
//! [`crate::pg_proxy::PostgresWire`]); the faults, their schedule and the relaying are the same
//! for every protocol, and live here.
//!
//! The proxy listens on `127.0.0.1:0` and relays each client connection to the server. For each
//! write request one draw of the connection's PRNG chooses:
//!
//! - **lost reply** (`lost_ack`): the request is forwarded and the server applies it; its reply
//!   is dropped and the client connection closed (without the close the client would wait for
//!   the reply forever). The write landed, the caller cannot know it.
//! - **dropped request** (`drop_request`): the connection is closed without forwarding. Nothing
//!   was written.
//! - **killed connection** (`kill_connection`): the request is forwarded and both connections are
//!   reset at once (`SO_LINGER` 0, an RST each way), racing the server: the write may or may not
//!   have been applied.
//! - otherwise it is forwarded.
//!
//! The PRNG of the `n`th accepted connection is seeded from the proxy's seed and `n`, so a run
//! replays the same decision sequence per connection; which request meets which decision still
//! depends on the interleaving of concurrent clients. Counters are atomic; [`Proxy::stats`] reads
//! them. The proxy stops when it is dropped or [`Proxy::shutdown`] is called: the listener and
//! every relayed connection close. It is bounded: at most `max_connections` relayed connections
//! at once (more are refused); each protocol bounds the size of what it reads.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::chaos_workload::{derive_seed, SplitMix64};

/// How long the proxy waits for the server to accept the relayed connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The rate of each fault, per write request. Each is in `[0, 1]`, and they sum to at most 1.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// Forward the request, drop its reply, close the client connection.
    pub lost_ack: f64,
    /// Close the connection without forwarding the request.
    pub drop_request: f64,
    /// Forward the request, then reset both connections at once.
    pub kill_connection: f64,
}

impl Faults {
    /// No faults: the proxy forwards everything.
    pub const NONE: Faults = Faults {
        lost_ack: 0.0,
        drop_request: 0.0,
        kill_connection: 0.0,
    };

    /// Whether any rate is above zero.
    pub fn any(&self) -> bool {
        self.lost_ack > 0.0 || self.drop_request > 0.0 || self.kill_connection > 0.0
    }

    /// Refuses rates outside `[0, 1]` or summing above 1.
    pub fn validate(&self) -> Result<(), String> {
        let rates = [
            ("lost-ack rate", self.lost_ack),
            ("drop rate", self.drop_request),
            ("kill rate", self.kill_connection),
        ];
        for (name, rate) in rates {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("the {name} must be between 0 and 1, not {rate}"));
            }
        }
        let sum = self.lost_ack + self.drop_request + self.kill_connection;
        if sum > 1.0 + 1e-9 {
            return Err(format!("the fault rates sum to {sum}, more than 1"));
        }
        Ok(())
    }

    /// The fault for a uniform draw `u` in `[0, 1)`.
    fn pick(&self, u: f64) -> Action {
        if u < self.lost_ack {
            Action::LoseReply
        } else if u < self.lost_ack + self.drop_request {
            Action::DropRequest
        } else if u < self.lost_ack + self.drop_request + self.kill_connection {
            Action::Kill
        } else {
            Action::Forward
        }
    }
}

/// How a proxy behaves.
#[derive(Clone, Copy, Debug)]
pub struct ProxyConfig {
    /// Seeds the per-connection PRNGs.
    pub seed: u64,
    /// The fault rates per write request.
    pub faults: Faults,
    /// The most relayed connections at once; further ones are refused (closed at once).
    pub max_connections: usize,
    /// How long each reply is held before the proxy relays it, as a distant server's would be
    /// (zero: relayed at once). A wire that delays replies holds each request's answer, from its
    /// first message, this long.
    pub reply_delay: std::time::Duration,
}

impl ProxyConfig {
    /// A proxy with these faults and at most 256 connections.
    pub fn new(seed: u64, faults: Faults) -> Self {
        ProxyConfig {
            seed,
            faults,
            max_connections: 256,
            reply_delay: std::time::Duration::ZERO,
        }
    }
}

/// What the proxy did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Client connections accepted and relayed.
    pub connections: u64,
    /// Client connections refused because `max_connections` were open.
    pub connections_refused: u64,
    /// Requests (of any kind) forwarded to the server, as the wire protocol counts them.
    pub requests_forwarded: u64,
    /// Write requests seen (the ones a fault may hit).
    pub write_requests: u64,
    /// Replies dropped after the server applied the request: lost acknowledgements.
    pub replies_dropped: u64,
    /// Write requests dropped before reaching the server.
    pub requests_dropped: u64,
    /// Connections reset right after forwarding a write request.
    pub connections_killed: u64,
    /// The most requests one connection had forwarded and not yet seen answered at once (for a
    /// wire that counts them): above one where a client pipelines its requests.
    pub most_outstanding: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    connections_refused: AtomicU64,
    requests_forwarded: AtomicU64,
    write_requests: AtomicU64,
    replies_dropped: AtomicU64,
    requests_dropped: AtomicU64,
    connections_killed: AtomicU64,
    most_outstanding: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    fn snapshot(&self) -> ProxyStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ProxyStats {
            connections: read(&self.connections),
            connections_refused: read(&self.connections_refused),
            requests_forwarded: read(&self.requests_forwarded),
            write_requests: read(&self.write_requests),
            replies_dropped: read(&self.replies_dropped),
            requests_dropped: read(&self.requests_dropped),
            connections_killed: read(&self.connections_killed),
            most_outstanding: read(&self.most_outstanding),
        }
    }
}

/// State shared by the proxy handle and its tasks.
struct Shared {
    faults: Faults,
    reply_delay: std::time::Duration,
    enabled: AtomicBool,
    counters: Counters,
}

/// A wire protocol the proxy relays: it frames the bytes each way into requests and replies,
/// tells the write requests apart, and hands each one to [`Connection::decide`] and
/// [`Connection::forward`]; a lost reply is its to drop, since only it can match replies to
/// requests.
pub trait Wire: Clone + Send + Sync + 'static {
    /// Relays one client connection to the server until either side closes it or a fault ends
    /// it.
    fn relay(
        &self,
        client: &mut TcpStream,
        server: &mut TcpStream,
        connection: Connection,
    ) -> impl Future<Output = End> + Send;
}

/// What a write request meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Forwarded, its reply relayed.
    Forward,
    /// Forwarded, its reply dropped and the connection closed.
    LoseReply,
    /// Not forwarded; the connection closed.
    DropRequest,
    /// Forwarded, then both connections reset.
    Kill,
}

/// How a relayed connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Closed normally (either side, a dropped request or reply, a shutdown).
    Closed,
    /// Reset both ways.
    Killed,
}

/// One relayed connection's fault schedule and the proxy's counters, for its [`Wire`].
pub struct Connection {
    /// Only the request side draws; the lock lets the reply side count through the same handle.
    rng: Mutex<SplitMix64>,
    shared: Arc<Shared>,
}

impl Connection {
    /// What the next request meets: a write request takes the next draw of the schedule, faults
    /// on or off, so switching them does not shift the sequence; anything else is forwarded.
    pub fn decide(&self, is_write: bool) -> Action {
        if !is_write {
            return Action::Forward;
        }
        bump(&self.shared.counters.write_requests);
        let u = self
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unit();
        if self.shared.enabled.load(Ordering::Relaxed) {
            self.shared.faults.pick(u)
        } else {
            Action::Forward
        }
    }

    /// Sends `request` to the server as `action` says, counting what happened. `Ok` when the
    /// connection goes on (for a lost reply, until the wire drops the reply); `Err` with how it
    /// ended otherwise.
    pub async fn forward<W>(
        &self,
        action: Action,
        request: &[u8],
        server: &mut W,
    ) -> Result<(), End>
    where
        W: AsyncWrite + Unpin,
    {
        let counters = &self.shared.counters;
        if action == Action::DropRequest {
            bump(&counters.requests_dropped);
            return Err(End::Closed);
        }
        server.write_all(request).await.map_err(|_| End::Closed)?;
        bump(&counters.requests_forwarded);
        if action == Action::Kill {
            bump(&counters.connections_killed);
            return Err(End::Killed);
        }
        Ok(())
    }

    /// Counts a reply the wire dropped for a request that met [`Action::LoseReply`].
    pub fn reply_lost(&self) {
        bump(&self.shared.counters.replies_dropped);
    }

    /// Notes that `requests` forwarded on this connection await their answers.
    pub fn outstanding(&self, requests: usize) {
        let requests = u64::try_from(requests).unwrap_or(u64::MAX);
        (self.shared.counters.most_outstanding).fetch_max(requests, Ordering::Relaxed);
    }

    /// How long each reply is held before it is relayed ([`ProxyConfig::reply_delay`]).
    pub fn reply_delay(&self) -> std::time::Duration {
        self.shared.reply_delay
    }
}

/// A running proxy. Dropping it stops it.
pub struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    accept_loop: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy of `wire` on `127.0.0.1:0` relaying to `upstream` (`host:port`), with
    /// faults enabled.
    pub async fn start(upstream: &str, wire: impl Wire, config: ProxyConfig) -> io::Result<Proxy> {
        config
            .faults
            .validate()
            .map_err(|message| io::Error::new(io::ErrorKind::InvalidInput, message))?;
        let upstream = tokio::net::lookup_host(upstream)
            .await?
            .next()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{upstream} resolves to no address"),
                )
            })?;
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            faults: config.faults,
            reply_delay: config.reply_delay,
            enabled: AtomicBool::new(true),
            counters: Counters::default(),
        });
        let (shutdown, stopped) = watch::channel(false);
        let accept_loop = tokio::spawn(accept_loop(
            listener,
            upstream,
            wire,
            config,
            Arc::clone(&shared),
            stopped,
        ));
        Ok(Proxy {
            addr,
            upstream,
            shared,
            shutdown,
            accept_loop: Some(accept_loop),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server the proxy relays to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The counters so far.
    pub fn stats(&self) -> ProxyStats {
        self.shared.counters.snapshot()
    }

    /// Turns faults on or off (they start on). Off, the proxy forwards everything.
    pub fn set_faults_enabled(&self, enabled: bool) {
        self.shared.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Stops accepting, closes every relayed connection and waits for the tasks to end.
    pub async fn shutdown(mut self) -> ProxyStats {
        let _ = self.shutdown.send(true);
        if let Some(accept_loop) = self.accept_loop.take() {
            let _ = accept_loop.await;
        }
        self.stats()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(accept_loop) = self.accept_loop.take() {
            accept_loop.abort();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    wire: impl Wire,
    config: ProxyConfig,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let mut connections = JoinSet::new();
    let mut accepted: u64 = 0;
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            result = listener.accept() => {
                let Ok((client, _)) = result else {
                    // Out of file descriptors or similar: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    bump(&shared.counters.connections_refused);
                    drop(client);
                    continue;
                };
                let connection = Connection {
                    rng: Mutex::new(SplitMix64::new(derive_seed(config.seed, accepted))),
                    shared: Arc::clone(&shared),
                };
                accepted += 1;
                bump(&shared.counters.connections);
                let wire = wire.clone();
                let stopped = stopped.clone();
                connections.spawn(async move {
                    relay(client, upstream, &wire, connection, stopped).await;
                    drop(slot);
                });
            }
        }
    }
    connections.shutdown().await;
}

async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    wire: &impl Wire,
    connection: Connection,
    mut stopped: watch::Receiver<bool>,
) {
    let server = tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream)).await;
    let Ok(Ok(mut server)) = server else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let end = tokio::select! {
        end = wire.relay(&mut client, &mut server, connection) => end,
        _ = stopped.changed() => End::Closed,
    };
    if end == End::Killed {
        reset(&client);
        reset(&server);
    }
}

/// Makes dropping `stream` send an RST instead of a FIN. A zero linger does not block.
#[allow(deprecated)]
fn reset(stream: &TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_picked_by_their_rates() {
        let faults = Faults {
            lost_ack: 0.3,
            drop_request: 0.1,
            kill_connection: 0.1,
        };
        assert_eq!(faults.pick(0.0), Action::LoseReply);
        assert_eq!(faults.pick(0.35), Action::DropRequest);
        assert_eq!(faults.pick(0.45), Action::Kill);
        assert_eq!(faults.pick(0.5), Action::Forward);
        assert_eq!(Faults::NONE.pick(0.0), Action::Forward);
        assert!(Faults::NONE.validate().is_ok());
        assert!(Faults {
            lost_ack: 0.8,
            drop_request: 0.3,
            kill_connection: 0.0
        }
        .validate()
        .is_err());
    }
}
