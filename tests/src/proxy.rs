//! A loopback TCP proxy in front of the test server that loses acknowledgements, drops requests
//! and kills connections, per request, at seeded rates.
//!
//! The proxy listens on `127.0.0.1:0` and relays each client connection to the server. It reads
//! MongoDB message framing (a 4-byte little-endian length prefix, then the header with the
//! request id and `responseTo`), so it acts per request. Only write requests are faulted: OP_MSG
//! commands whose body's first key is `insert`, `update`, `delete` or `findAndModify`. The
//! handshake, `hello`, `ping`, reads and index commands pass untouched, so a driver can always
//! connect. For each write request one draw of the connection's PRNG chooses:
//!
//! - **lost acknowledgement** (`lost_ack`): the request is forwarded and the server applies it;
//!   its reply is dropped and the client connection closed (without the close the driver would
//!   wait for the reply forever). The write landed, the caller cannot know it.
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
//! at once (more are refused), and messages over the wire protocol's 48 MB limit end a connection.

use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::chaos::SplitMix64;

/// MongoDB's `maxMessageSizeBytes`; a frame claiming more ends the connection.
const MAX_MESSAGE_BYTES: usize = 48_000_000;
/// The standard message header: length, requestID, responseTo, opCode.
const HEADER_BYTES: usize = 16;
const OP_MSG: i32 = 2013;
/// OP_MSG flag: a CRC-32C checksum follows the sections.
const CHECKSUM_PRESENT: u32 = 1;
/// How long the proxy waits for the server to accept the relayed connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The commands the proxy faults.
const WRITE_COMMANDS: &[&str] = &[
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
];

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
}

impl ProxyConfig {
    /// A proxy with these faults and at most 256 connections.
    pub fn new(seed: u64, faults: Faults) -> Self {
        ProxyConfig {
            seed,
            faults,
            max_connections: 256,
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
    /// Requests (of any kind) forwarded to the server.
    pub requests_forwarded: u64,
    /// Write requests seen (the ones a fault may hit).
    pub write_requests: u64,
    /// Replies dropped after the server applied the request: lost acknowledgements.
    pub replies_dropped: u64,
    /// Requests dropped before reaching the server.
    pub requests_dropped: u64,
    /// Connections reset right after forwarding a request.
    pub connections_killed: u64,
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
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

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
        }
    }
}

/// State shared by the proxy handle and its tasks.
struct Shared {
    faults: Faults,
    enabled: AtomicBool,
    counters: Counters,
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
    /// Starts a proxy on `127.0.0.1:0` relaying to `upstream` (`host:port`), with faults enabled.
    pub async fn start(upstream: &str, config: ProxyConfig) -> io::Result<Proxy> {
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
            enabled: AtomicBool::new(true),
            counters: Counters::default(),
        });
        let (shutdown, stopped) = watch::channel(false);
        let accept_loop = tokio::spawn(accept_loop(
            listener,
            upstream,
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
                    Counters::bump(&shared.counters.connections_refused);
                    drop(client);
                    continue;
                };
                let rng = SplitMix64::new(crate::chaos::derive_seed(config.seed, accepted));
                accepted += 1;
                Counters::bump(&shared.counters.connections);
                let shared = Arc::clone(&shared);
                let stopped = stopped.clone();
                connections.spawn(async move {
                    relay(client, upstream, rng, &shared, stopped).await;
                    drop(slot);
                });
            }
        }
    }
    connections.shutdown().await;
}

/// What a request does, or how a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Forward,
    LoseReply,
    DropRequest,
    Kill,
}

/// How a relayed connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// Closed normally (either side, a dropped request or reply, a shutdown).
    Closed,
    /// Reset both ways.
    Killed,
}

async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut rng: SplitMix64,
    shared: &Shared,
    mut stopped: watch::Receiver<bool>,
) {
    let server = tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream)).await;
    let Ok(Ok(mut server)) = server else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // Request ids whose replies are to be dropped.
    let doomed = Mutex::new(HashSet::new());
    let end = {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        tokio::select! {
            end = requests(&mut client_read, &mut server_write, &mut rng, shared, &doomed) => end,
            end = replies(&mut server_read, &mut client_write, shared, &doomed) => end,
            _ = stopped.changed() => End::Closed,
        }
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

/// Client to server: one frame at a time, each write request meeting its fate.
async fn requests<R, W>(
    client: &mut R,
    server: &mut W,
    rng: &mut SplitMix64,
    shared: &Shared,
    doomed: &Mutex<HashSet<i32>>,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let counters = &shared.counters;
    loop {
        let Ok(frame) = read_frame(client).await else {
            return End::Closed;
        };
        let is_write = command_name(&frame).is_some_and(|name| WRITE_COMMANDS.contains(&name));
        let action = if is_write {
            Counters::bump(&counters.write_requests);
            // One draw per write request, faults on or off, so switching them does not shift
            // the sequence.
            let u = rng.unit();
            if shared.enabled.load(Ordering::Relaxed) {
                shared.faults.pick(u)
            } else {
                Action::Forward
            }
        } else {
            Action::Forward
        };
        match action {
            Action::DropRequest => {
                Counters::bump(&counters.requests_dropped);
                return End::Closed;
            }
            Action::LoseReply => {
                doomed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(request_id(&frame));
            }
            Action::Forward | Action::Kill => {}
        }
        if server.write_all(&frame).await.is_err() {
            return End::Closed;
        }
        Counters::bump(&counters.requests_forwarded);
        if action == Action::Kill {
            Counters::bump(&counters.connections_killed);
            return End::Killed;
        }
    }
}

/// Server to client: every reply, except one answering a doomed request.
async fn replies<R, W>(
    server: &mut R,
    client: &mut W,
    shared: &Shared,
    doomed: &Mutex<HashSet<i32>>,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let Ok(frame) = read_frame(server).await else {
            return End::Closed;
        };
        let answers = read_i32(&frame, 8);
        let lost = doomed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&answers);
        if lost {
            Counters::bump(&shared.counters.replies_dropped);
            return End::Closed;
        }
        if client.write_all(&frame).await.is_err() {
            return End::Closed;
        }
    }
}

/// One whole message: its 4-byte length prefix and the rest.
async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Vec<u8>> {
    let mut prefix = [0u8; 4];
    reader.read_exact(&mut prefix).await?;
    let length = i32::from_le_bytes(prefix);
    let length = usize::try_from(length).unwrap_or(0);
    if !(HEADER_BYTES..=MAX_MESSAGE_BYTES).contains(&length) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message of {length} bytes"),
        ));
    }
    let mut frame = vec![0u8; length];
    frame[..4].copy_from_slice(&prefix);
    reader.read_exact(&mut frame[4..]).await?;
    Ok(frame)
}

fn read_i32(bytes: &[u8], at: usize) -> i32 {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, i32::from_le_bytes)
}

fn request_id(frame: &[u8]) -> i32 {
    read_i32(frame, 4)
}

/// The command an OP_MSG carries: the first key of its body (the kind-0 section). `None` for
/// other opcodes and malformed messages.
pub fn command_name(frame: &[u8]) -> Option<&str> {
    if frame.len() < HEADER_BYTES + 5 || read_i32(frame, 12) != OP_MSG {
        return None;
    }
    let flags = u32::from_le_bytes(frame[16..20].try_into().ok()?);
    let end = if flags & CHECKSUM_PRESENT != 0 {
        frame.len().checked_sub(4)?
    } else {
        frame.len()
    };
    let mut at = 20;
    while at < end {
        let kind = frame[at];
        let size = usize::try_from(read_i32(frame, at + 1)).ok()?;
        match kind {
            0 => {
                // A BSON document: length, then elements (type byte, cstring name, value).
                let name_start = at + 1 + 4 + 1;
                let rest = frame.get(name_start..end)?;
                let name_end = rest.iter().position(|&b| b == 0)?;
                return std::str::from_utf8(&rest[..name_end]).ok();
            }
            1 => at += 1 + size,
            _ => return None,
        }
        if size < 4 {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op_msg(sections: &[u8], flags: u32) -> Vec<u8> {
        let mut frame = Vec::new();
        let length = (HEADER_BYTES + 4 + sections.len()) as i32;
        frame.extend(length.to_le_bytes());
        frame.extend(7i32.to_le_bytes());
        frame.extend(0i32.to_le_bytes());
        frame.extend(OP_MSG.to_le_bytes());
        frame.extend(flags.to_le_bytes());
        frame.extend(sections);
        frame
    }

    fn body(first_key: &str) -> Vec<u8> {
        let mut element = vec![0x10];
        element.extend(first_key.as_bytes());
        element.push(0);
        element.extend(1i32.to_le_bytes());
        let mut document = Vec::new();
        document.extend(((4 + element.len() + 1) as i32).to_le_bytes());
        document.extend(element);
        document.push(0);
        let mut section = vec![0];
        section.extend(document);
        section
    }

    #[test]
    fn reads_the_command_name_of_an_op_msg() {
        assert_eq!(command_name(&op_msg(&body("update"), 0)), Some("update"));
        // A document sequence before the body.
        let mut sections = vec![1];
        sections.extend(9i32.to_le_bytes());
        sections.extend(b"docs\0");
        sections.extend(body("insert"));
        assert_eq!(command_name(&op_msg(&sections, 0)), Some("insert"));
        assert_eq!(command_name(&op_msg(&[], 0)), None);
        let mut query = op_msg(&body("find"), 0);
        query[12..16].copy_from_slice(&2004i32.to_le_bytes());
        assert_eq!(command_name(&query), None);
    }

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
