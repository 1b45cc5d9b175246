//! The PostgreSQL wire protocol for the fault-injecting [`Proxy`]: which messages make a request,
//! which requests write, and which replies answer which request.
//!
//! It reads the framing: first the untyped startup phase (an `SSLRequest` or `GSSENCRequest`,
//! answered by the server with one byte, then the startup message; a `CancelRequest`), then
//! typed messages each way (one type byte, a 4-byte big-endian length that counts itself, the
//! body). A connection that negotiates encryption is relayed untouched.
//!
//! Client messages of the extended query protocol (`Parse`, `Bind`, `Describe`, `Execute`,
//! `Close`) are held until the `Sync` that ends their batch, which then meets its fate whole. A
//! batch is a **write batch** when it executes a portal bound to a statement whose query text
//! begins with `WITH`, `INSERT`, `UPDATE` or `DELETE`: every statement idem writes with (an
//! upsert, a deletion, `insert_new`, `record`, `apply_once`, `push`) begins with one of them, and
//! its reads (`SELECT …`) do not. Named statements are remembered per connection, so a batch
//! binding a statement prepared earlier is judged by its text too. Startup, authentication,
//! simple queries (`BEGIN`, `COMMIT`, DDL), reads and `Flush`-ended batches pass untouched. Each
//! write batch is one write request of the proxy. A lost reply is dropped once the server's
//! `ReadyForQuery` for the batch has arrived (outside a transaction, the statement has committed
//! by then): everything the server answered to it is dropped and both connections close.
//!
//! Replies are matched to batches by counting: the server answers each `Sync`, `Query` and
//! `FunctionCall` with exactly one `ReadyForQuery`, and the startup with one more, so the
//! `ReadyForQuery` messages arrive in the order their requests were forwarded. That count also
//! gives the most requests a connection had awaiting their answers at once
//! ([`ProxyStats::most_outstanding`]), and each answer can be held a while before it is relayed
//! ([`ProxyConfig::reply_delay`]), as a distant server's would be.
//!
//! A startup message over 10,000 bytes, a message over 256 MiB or a held batch over 256 MiB ends
//! a connection.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;

use crate::fault_proxy::{Action, Connection, End, Wire};
pub use crate::fault_proxy::{Faults, Proxy, ProxyConfig, ProxyStats};

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

/// The PostgreSQL wire protocol, for [`Proxy::start`].
#[derive(Clone, Copy, Debug, Default)]
pub struct PostgresWire;

impl Wire for PostgresWire {
    async fn relay(
        &self,
        client: &mut TcpStream,
        server: &mut TcpStream,
        connection: Connection,
    ) -> End {
        session(client, server, connection).await
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

/// The startup phase, then the typed messages each way.
async fn session(client: &mut TcpStream, server: &mut TcpStream, connection: Connection) -> End {
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
        end = requests(&mut client_read, &mut server_write, &connection, &pending) => end,
        end = replies(&mut server_read, &mut client_write, &connection, &pending) => end,
    }
}

/// Client to server: messages outside a batch at once, a batch whole at its `Sync`, each write
/// batch meeting its fate.
async fn requests<R, W>(
    client: &mut BufReader<R>,
    server: &mut W,
    connection: &Connection,
    pending: &Pending,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
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
                push(pending, Fate::Relay, connection);
                if let Err(end) = connection.forward(Action::Forward, &batch, server).await {
                    return end;
                }
                batch.clear();
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
        let action = connection.decide(std::mem::take(&mut writes));
        match action {
            Action::LoseReply => push(pending, Fate::Lose, connection),
            Action::Forward | Action::Kill => push(pending, Fate::Relay, connection),
            Action::DropRequest => {}
        }
        if let Err(end) = connection.forward(action, &batch, server).await {
            return end;
        }
        batch.clear();
        if action == Action::LoseReply {
            // Nothing more goes to the server: the replies end the connection once the server
            // has answered this batch.
            std::future::pending::<()>().await;
        }
    }
}

/// Notes the fate of a request about to be forwarded, and how many then await an answer.
fn push(pending: &Pending, fate: Fate, connection: &Connection) {
    let mut pending = pending.lock().unwrap_or_else(PoisonError::into_inner);
    pending.push_back(fate);
    connection.outstanding(pending.len());
}

/// Server to client: every message, except those answering a batch whose reply is lost; the
/// `ReadyForQuery` ending that one ends the connection.
async fn replies<R, W>(
    server: &mut BufReader<R>,
    client: &mut BufWriter<W>,
    connection: &Connection,
    pending: &Pending,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // Whether the next message begins an answer, which is held for the reply delay.
    let mut begins_answer = true;
    loop {
        let Ok(message) = read_message(server).await else {
            let _ = client.flush().await;
            return End::Closed;
        };
        let ready = message[0] == b'Z';
        if std::mem::replace(&mut begins_answer, ready) && !connection.reply_delay().is_zero() {
            let _ = client.flush().await;
            tokio::time::sleep(connection.reply_delay()).await;
        }
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
                connection.reply_lost();
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
