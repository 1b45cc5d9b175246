//! A loopback TCP proxy in front of a PostgreSQL server that loses replies, drops requests and
//! kills connections, per write batch, at seeded rates: the PostgreSQL counterpart of
//! [`crate::proxy`].
//!
//! The proxy listens on `127.0.0.1:0` and relays each client connection to the server. It reads
//! the PostgreSQL wire protocol's framing: first the untyped startup phase (an `SSLRequest` or
//! `GSSENCRequest`, answered by the server with one byte, then the startup message; a
//! `CancelRequest`), then typed messages each way (one type byte, a 4-byte big-endian length
//! that counts itself, the body). A connection that negotiates encryption is relayed untouched.
//!
//! Client messages of the extended query protocol (`Parse`, `Bind`, `Describe`, `Execute`,
//! `Close`) are held until the `Sync` that ends their batch, which then meets its fate whole. A
//! batch is a **write batch** when it executes a portal bound to a statement whose query text
//! begins with `WITH`, `INSERT`, `UPDATE` or `DELETE`: every statement idem writes with (an
//! upsert, a deletion, `insert_new`, `record`, `apply_once`, `push`) begins with one of them, and
//! its reads (`SELECT …`) do not. Named statements are remembered per connection, so a batch
//! binding a statement prepared earlier is judged by its text too. Startup, authentication,
//! simple queries (`BEGIN`, `COMMIT`, DDL), reads and `Flush`-ended batches pass untouched. For
//! each write batch one draw of the connection's PRNG chooses:
//!
//! - **lost reply** (`lost_ack`): the batch is forwarded; the proxy waits until the server's
//!   `ReadyForQuery` for it has arrived (outside a transaction, the statement has committed by
//!   then), drops everything the server answered to it and closes both connections. The write
//!   landed, the caller cannot know it.
//! - **dropped request** (`drop_request`): both connections are closed without forwarding the
//!   batch. Nothing was written.
//! - **killed connection** (`kill_connection`): the batch is forwarded and both connections are
//!   reset at once (`SO_LINGER` 0, an RST each way), racing the server: the write may or may not
//!   have been applied.
//! - otherwise it is forwarded.
//!
//! Replies are matched to batches by counting: the server answers each `Sync`, `Query` and
//! `FunctionCall` with exactly one `ReadyForQuery`, and the startup with one more, so the
//! `ReadyForQuery` messages arrive in the order their requests were forwarded.
//!
//! The PRNG of the `n`th accepted connection is seeded from the proxy's seed and `n`, so a run
//! replays the same decision sequence per connection; which batch meets which decision still
//! depends on the interleaving of concurrent clients. Counters are atomic; [`PgProxy::stats`]
//! reads them. The proxy stops when it is dropped or [`PgProxy::shutdown`] is called: the
//! listener and every relayed connection close. It is bounded: at most `max_connections` relayed
//! connections at once (more are refused), a startup message over 10,000 bytes, a message over
//! 256 MiB or a held batch over 256 MiB ends a connection.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::chaos::{derive_seed, SplitMix64};
pub use crate::proxy::Faults;

/// The longest typed message the proxy relays, either way.
const MAX_MESSAGE_BYTES: usize = 256 << 20;
/// The most a held batch may grow to before its `Sync`.
const MAX_BATCH_BYTES: usize = 256 << 20;
/// The longest startup-phase message (the server's own limit).
const MAX_STARTUP_BYTES: usize = 10_000;
/// Startup-phase request codes.
const SSL_REQUEST: i32 = 80_877_103;
const GSSENC_REQUEST: i32 = 80_877_104;
const CANCEL_REQUEST: i32 = 80_877_102;
/// How long the proxy waits for the server to accept the relayed connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The first words of the statements the proxy faults.
const WRITE_KEYWORDS: &[&str] = &["WITH", "INSERT", "UPDATE", "DELETE"];

/// Whether `query` is a write the proxy faults: its first word (after whitespace, comments and
/// opening parentheses) is `WITH`, `INSERT`, `UPDATE` or `DELETE`, in any case.
pub fn is_write_query(query: &str) -> bool {
    let mut rest = query;
    loop {
        let trimmed = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '(');
        if let Some(comment) = trimmed.strip_prefix("--") {
            rest = comment.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(comment) = trimmed.strip_prefix("/*") {
            rest = comment.split_once("*/").map_or("", |(_, after)| after);
        } else {
            rest = trimmed;
            break;
        }
    }
    let word: &str = rest
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("");
    WRITE_KEYWORDS
        .iter()
        .any(|keyword| word.eq_ignore_ascii_case(keyword))
}

/// How a proxy behaves.
#[derive(Clone, Copy, Debug)]
pub struct PgProxyConfig {
    /// Seeds the per-connection PRNGs.
    pub seed: u64,
    /// The fault rates per write batch.
    pub faults: Faults,
    /// The most relayed connections at once; further ones are refused (closed at once).
    pub max_connections: usize,
}

impl PgProxyConfig {
    /// A proxy with these faults and at most 256 connections.
    pub fn new(seed: u64, faults: Faults) -> Self {
        PgProxyConfig {
            seed,
            faults,
            max_connections: 256,
        }
    }
}

/// What the proxy did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PgProxyStats {
    /// Client connections accepted and relayed.
    pub connections: u64,
    /// Client connections refused because `max_connections` were open.
    pub connections_refused: u64,
    /// Requests forwarded that the server answers with `ReadyForQuery`: batches ended by `Sync`,
    /// simple queries, function calls.
    pub batches_forwarded: u64,
    /// Write batches seen (the ones a fault may hit).
    pub write_batches: u64,
    /// Replies dropped after the server had answered the whole batch: lost replies.
    pub replies_dropped: u64,
    /// Write batches dropped before reaching the server.
    pub requests_dropped: u64,
    /// Connections reset right after forwarding a write batch.
    pub connections_killed: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    connections_refused: AtomicU64,
    batches_forwarded: AtomicU64,
    write_batches: AtomicU64,
    replies_dropped: AtomicU64,
    requests_dropped: AtomicU64,
    connections_killed: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> PgProxyStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        PgProxyStats {
            connections: read(&self.connections),
            connections_refused: read(&self.connections_refused),
            batches_forwarded: read(&self.batches_forwarded),
            write_batches: read(&self.write_batches),
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
pub struct PgProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    accept_loop: Option<JoinHandle<()>>,
}

impl PgProxy {
    /// Starts a proxy on `127.0.0.1:0` relaying to `upstream` (`host:port`), with faults enabled.
    pub async fn start(upstream: &str, config: PgProxyConfig) -> io::Result<PgProxy> {
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
        Ok(PgProxy {
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
    pub fn stats(&self) -> PgProxyStats {
        self.shared.counters.snapshot()
    }

    /// Turns faults on or off (they start on). Off, the proxy forwards everything.
    pub fn set_faults_enabled(&self, enabled: bool) {
        self.shared.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Stops accepting, closes every relayed connection and waits for the tasks to end.
    pub async fn shutdown(mut self) -> PgProxyStats {
        let _ = self.shutdown.send(true);
        if let Some(accept_loop) = self.accept_loop.take() {
            let _ = accept_loop.await;
        }
        self.stats()
    }
}

impl Drop for PgProxy {
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
    config: PgProxyConfig,
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
                let rng = SplitMix64::new(derive_seed(config.seed, accepted));
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

/// What a write batch meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Forward,
    LoseReply,
    DropRequest,
    Kill,
}

/// The fault for a uniform draw `u` in `[0, 1)`.
fn pick(faults: &Faults, u: f64) -> Action {
    if u < faults.lost_ack {
        Action::LoseReply
    } else if u < faults.lost_ack + faults.drop_request {
        Action::DropRequest
    } else if u < faults.lost_ack + faults.drop_request + faults.kill_connection {
        Action::Kill
    } else {
        Action::Forward
    }
}

/// What becomes of the server's answer to a forwarded request, up to its `ReadyForQuery`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Relay,
    Lose,
}

/// The fates of the forwarded requests not answered yet, oldest first.
type Pending = Mutex<VecDeque<Fate>>;

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
    rng: SplitMix64,
    shared: &Shared,
    mut stopped: watch::Receiver<bool>,
) {
    let server = tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream)).await;
    let Ok(Ok(mut server)) = server else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let end = tokio::select! {
        end = session(&mut client, &mut server, rng, shared) => end,
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

/// The startup phase, then the typed messages each way.
async fn session(
    client: &mut TcpStream,
    server: &mut TcpStream,
    rng: SplitMix64,
    shared: &Shared,
) -> End {
    loop {
        let Ok(message) = read_startup(client).await else {
            return End::Closed;
        };
        if server.write_all(&message).await.is_err() {
            return End::Closed;
        }
        match read_i32(&message, 4) {
            SSL_REQUEST | GSSENC_REQUEST => {
                let mut answer = [0u8; 1];
                if server.read_exact(&mut answer).await.is_err()
                    || client.write_all(&answer).await.is_err()
                {
                    return End::Closed;
                }
                if answer[0] != b'N' {
                    // Encrypted from here on: nothing the proxy can read.
                    let _ = tokio::io::copy_bidirectional(client, server).await;
                    return End::Closed;
                }
            }
            CANCEL_REQUEST => {
                let _ = tokio::io::copy_bidirectional(client, server).await;
                return End::Closed;
            }
            _ => break,
        }
    }
    // The startup ends with one `ReadyForQuery`, relayed.
    let pending: Pending = Mutex::new(VecDeque::from([Fate::Relay]));
    let (client_read, client_write) = client.split();
    let (server_read, server_write) = server.split();
    let mut client_read = BufReader::new(client_read);
    let mut server_read = BufReader::new(server_read);
    let mut client_write = BufWriter::new(client_write);
    let mut server_write = server_write;
    tokio::select! {
        end = requests(&mut client_read, &mut server_write, rng, shared, &pending) => end,
        end = replies(&mut server_read, &mut client_write, shared, &pending) => end,
    }
}

/// Client to server: messages outside a batch at once, a batch whole at its `Sync`, each write
/// batch meeting its fate.
async fn requests<R, W>(
    client: &mut BufReader<R>,
    server: &mut W,
    mut rng: SplitMix64,
    shared: &Shared,
    pending: &Pending,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let counters = &shared.counters;
    // Whether each prepared statement, and each bound portal, writes.
    let mut statements: HashMap<Vec<u8>, bool> = HashMap::new();
    let mut portals: HashMap<Vec<u8>, bool> = HashMap::new();
    let mut batch: Vec<u8> = Vec::new();
    let mut writes = false;
    loop {
        let Ok(message) = read_message(client).await else {
            return End::Closed;
        };
        let body = &message[5..];
        match message[0] {
            b'P' => {
                let (name, rest) = cstring(body);
                let (query, _) = cstring(rest);
                let write = is_write_query(&String::from_utf8_lossy(query));
                statements.insert(name.to_vec(), write);
            }
            b'B' => {
                let (portal, rest) = cstring(body);
                let (statement, _) = cstring(rest);
                let write = statements.get(statement).copied().unwrap_or(false);
                portals.insert(portal.to_vec(), write);
            }
            b'E' => {
                let (portal, _) = cstring(body);
                writes |= portals.get(portal).copied().unwrap_or(false);
            }
            b'C' => {
                if let Some((&kind, name)) = body.split_first() {
                    let (name, _) = cstring(name);
                    match kind {
                        b'S' => statements.remove(name),
                        _ => portals.remove(name),
                    };
                }
            }
            _ => {}
        }
        match message[0] {
            // Held until the batch ends.
            b'P' | b'B' | b'D' | b'E' | b'C' => {
                batch.extend_from_slice(&message);
                if batch.len() > MAX_BATCH_BYTES {
                    return End::Closed;
                }
                continue;
            }
            // The client waits for what the server has to say so far: forwarded as it is.
            b'H' => {
                batch.extend_from_slice(&message);
                if server.write_all(&batch).await.is_err() {
                    return End::Closed;
                }
                batch.clear();
                continue;
            }
            b'S' => batch.extend_from_slice(&message),
            // Simple queries and function calls: answered with a `ReadyForQuery` each.
            b'Q' | b'F' => {
                batch.extend_from_slice(&message);
                push(pending, Fate::Relay);
                if server.write_all(&batch).await.is_err() {
                    return End::Closed;
                }
                batch.clear();
                Counters::bump(&counters.batches_forwarded);
                continue;
            }
            b'X' => {
                let _ = server.write_all(&message).await;
                return End::Closed;
            }
            // Authentication, copy data and the like.
            _ => {
                batch.extend_from_slice(&message);
                if server.write_all(&batch).await.is_err() {
                    return End::Closed;
                }
                batch.clear();
                continue;
            }
        }
        // A `Sync`: the batch meets its fate.
        let action = if std::mem::take(&mut writes) {
            Counters::bump(&counters.write_batches);
            // One draw per write batch, faults on or off, so switching them does not shift the
            // sequence.
            let u = rng.unit();
            if shared.enabled.load(Ordering::Relaxed) {
                pick(&shared.faults, u)
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
            Action::LoseReply => push(pending, Fate::Lose),
            Action::Forward | Action::Kill => push(pending, Fate::Relay),
        }
        if server.write_all(&batch).await.is_err() {
            return End::Closed;
        }
        batch.clear();
        Counters::bump(&counters.batches_forwarded);
        match action {
            Action::Kill => {
                Counters::bump(&counters.connections_killed);
                return End::Killed;
            }
            // Nothing more goes to the server: the replies end the connection once the server
            // has answered this batch.
            Action::LoseReply => std::future::pending::<()>().await,
            Action::Forward | Action::DropRequest => {}
        }
    }
}

fn push(pending: &Pending, fate: Fate) {
    pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push_back(fate);
}

/// Server to client: every message, except those answering a batch whose reply is lost; the
/// `ReadyForQuery` ending that one ends the connection.
async fn replies<R, W>(
    server: &mut BufReader<R>,
    client: &mut BufWriter<W>,
    shared: &Shared,
    pending: &Pending,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let Ok(message) = read_message(server).await else {
            let _ = client.flush().await;
            return End::Closed;
        };
        let ready = message[0] == b'Z';
        let fate = {
            let mut pending = pending.lock().unwrap_or_else(PoisonError::into_inner);
            let fate = pending.front().copied().unwrap_or(Fate::Relay);
            if ready {
                pending.pop_front();
            }
            fate
        };
        match fate {
            Fate::Lose if ready => {
                Counters::bump(&shared.counters.replies_dropped);
                // What was relayed before this batch's answer still reaches the client.
                let _ = client.flush().await;
                return End::Closed;
            }
            Fate::Lose => continue,
            Fate::Relay => {
                if client.write_all(&message).await.is_err() {
                    return End::Closed;
                }
            }
        }
        // Messages already read travel together; the rest waits for no one.
        if !holds_message(server.buffer()) && client.flush().await.is_err() {
            return End::Closed;
        }
    }
}

/// Whether `buffer` starts with a whole typed message.
fn holds_message(buffer: &[u8]) -> bool {
    buffer.len() >= 5 && {
        let length = usize::try_from(read_i32(buffer, 1)).unwrap_or(0);
        buffer.len() > length
    }
}

/// One startup-phase message: its 4-byte length (counting itself) and the rest.
async fn read_startup<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Vec<u8>> {
    let mut prefix = [0u8; 4];
    reader.read_exact(&mut prefix).await?;
    let length = usize::try_from(i32::from_be_bytes(prefix)).unwrap_or(0);
    if !(8..=MAX_STARTUP_BYTES).contains(&length) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a startup message of {length} bytes"),
        ));
    }
    let mut message = vec![0u8; length];
    message[..4].copy_from_slice(&prefix);
    reader.read_exact(&mut message[4..]).await?;
    Ok(message)
}

/// One typed message: its type byte, its 4-byte length (counting itself, not the type) and the
/// body.
async fn read_message<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Vec<u8>> {
    let mut header = [0u8; 5];
    reader.read_exact(&mut header).await?;
    let length = usize::try_from(read_i32(&header, 1)).unwrap_or(0);
    if !(4..=MAX_MESSAGE_BYTES).contains(&length) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message of {length} bytes"),
        ));
    }
    let mut message = vec![0u8; 1 + length];
    message[..5].copy_from_slice(&header);
    reader.read_exact(&mut message[5..]).await?;
    Ok(message)
}

fn read_i32(bytes: &[u8], at: usize) -> i32 {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, i32::from_be_bytes)
}

/// A NUL-terminated string at the start of `bytes`, and what follows it (the whole of `bytes`,
/// and nothing, if there is no NUL).
fn cstring(bytes: &[u8]) -> (&[u8], &[u8]) {
    match bytes.iter().position(|&b| b == 0) {
        Some(end) => (&bytes[..end], &bytes[end + 1..]),
        None => (bytes, &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_statements_idem_writes_with() {
        assert!(is_write_query(
            "WITH incoming AS (SELECT 1) INSERT INTO t …"
        ));
        assert!(is_write_query("  insert into t values (1)"));
        assert!(is_write_query("UPDATE t SET a = 1"));
        assert!(is_write_query(
            "\n-- a comment\n/* another */ DELETE FROM t"
        ));
        assert!(is_write_query("(WITH x AS (SELECT 1) SELECT 1)"));
        assert!(!is_write_query("SELECT 1"));
        assert!(!is_write_query(
            "SELECT current_setting('server_version_num')::int"
        ));
        assert!(!is_write_query("WITHIN"));
        assert!(!is_write_query("CREATE TABLE t (a int)"));
        assert!(!is_write_query(""));
        assert!(!is_write_query("-- only a comment"));
    }

    #[test]
    fn faults_are_picked_by_their_rates() {
        let faults = Faults {
            lost_ack: 0.3,
            drop_request: 0.1,
            kill_connection: 0.1,
        };
        assert_eq!(pick(&faults, 0.0), Action::LoseReply);
        assert_eq!(pick(&faults, 0.35), Action::DropRequest);
        assert_eq!(pick(&faults, 0.45), Action::Kill);
        assert_eq!(pick(&faults, 0.5), Action::Forward);
        assert_eq!(pick(&Faults::NONE, 0.0), Action::Forward);
    }

    #[test]
    fn reads_the_framing() {
        let (name, rest) = cstring(b"s1\0SELECT 1\0\0\0");
        assert_eq!(name, b"s1");
        assert_eq!(cstring(rest).0, b"SELECT 1");
        assert_eq!(cstring(b"no end"), (&b"no end"[..], &b""[..]));
        // 'Z', length 5, status 'I'.
        let ready = [b'Z', 0, 0, 0, 5, b'I'];
        assert!(holds_message(&ready));
        assert!(!holds_message(&ready[..5]));
        assert!(holds_message(&[b'Z', 0, 0, 0, 5, b'I', b'Z']));
    }
}
