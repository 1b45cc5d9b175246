//! The MySQL wire protocol (MariaDB's) for the fault-injecting [`Proxy`]: which packets make a
//! request, which requests write, and which packets answer them.
//!
//! Every packet, either way, is a 3-byte little-endian payload length, a sequence number and the
//! payload. The client speaks first with a sequence number other than 0 during the handshake
//! (its answer to the server's greeting is number 1, and each authentication exchange counts
//! on), and every command it sends afterwards starts again at 0: a client packet numbered 0 is a
//! command, its first byte the command's code. A packet of the largest length (2²⁴ − 1) is
//! continued by the next. A client that asks for TLS in its handshake is relayed untouched
//! (encrypted from there on: nothing the proxy can read).
//!
//! The commands are answered one at a time, in order: the client sends the next only once it
//! has read the whole answer to the one before. So the server's packets that follow a command
//! answer it, and the first of them (numbered 1) is where its answer starts.
//!
//! A **write request** is a statement beginning with `WITH`, `INSERT`, `UPDATE`, `DELETE` or
//! `REPLACE` sent outside a transaction (as a `COM_QUERY`, or as the `COM_STMT_EXECUTE` of a
//! statement whose `COM_STMT_PREPARE` text is one: statements are remembered by the id the
//! server's answer to their preparation gives), or the `COMMIT` of a transaction (begun with
//! `BEGIN` or `START TRANSACTION`) in which one was sent. Either way, once the server answers it
//! the write has committed. Everything else passes untouched. A lost reply is dropped as soon as
//! the server starts answering the request, and both connections close.
//!
//! A packet is at most 2²⁴ − 1 bytes, the protocol's own bound; a command continued over several
//! packets is relayed as it is and judged by its first.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::fault_proxy::{Action, Connection, End, Wire};
pub use crate::fault_proxy::{Faults, Proxy, ProxyConfig, ProxyStats};
use crate::pg_proxy::is_write_query;

/// The largest payload one packet holds; a payload this long is continued by the next packet.
const MAX_PAYLOAD: usize = 0xFF_FFFF;
/// The client's capability flag asking for TLS.
const CLIENT_SSL: u32 = 0x0800;

/// Command codes.
const COM_QUIT: u8 = 0x01;
const COM_QUERY: u8 = 0x03;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;
const COM_STMT_CLOSE: u8 = 0x19;

/// The MySQL wire protocol, for [`Proxy::start`].
#[derive(Clone, Copy, Debug, Default)]
pub struct MysqlWire;

impl Wire for MysqlWire {
    async fn relay(
        &self,
        client: &mut TcpStream,
        server: &mut TcpStream,
        connection: Connection,
    ) -> End {
        session(client, server, connection).await
    }
}

/// What the two directions share.
#[derive(Default)]
struct State {
    /// The text of the statement whose preparation the server is answering.
    preparing: Option<String>,
    /// Each prepared statement's text, by the id the server gave it.
    statements: HashMap<u32, String>,
    /// The reply now coming is dropped, and the connection with it.
    lose: bool,
    /// Packets the client's handshake ends with a request for TLS: relay the rest untouched.
    encrypted: bool,
}

fn locked(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn session(client: &mut TcpStream, server: &mut TcpStream, connection: Connection) -> End {
    let state = Mutex::new(State::default());
    let end = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let mut client_read = BufReader::new(client_read);
        let mut server_read = BufReader::new(server_read);
        let mut client_write = client_write;
        let mut server_write = server_write;
        tokio::select! {
            end = requests(&mut client_read, &mut server_write, &connection, &state) => end,
            end = replies(&mut server_read, &mut client_write, &connection, &state) => end,
        }
    };
    if locked(&state).encrypted {
        let _ = tokio::io::copy_bidirectional(client, server).await;
        return End::Closed;
    }
    end
}

/// One packet: its 4-byte header and its payload.
async fn read_packet<R: AsyncRead + Unpin>(from: &mut R) -> std::io::Result<Vec<u8>> {
    let mut packet = vec![0u8; 4];
    from.read_exact(&mut packet).await?;
    let length =
        usize::from(packet[0]) | usize::from(packet[1]) << 8 | usize::from(packet[2]) << 16;
    packet.resize(4 + length, 0);
    from.read_exact(&mut packet[4..]).await?;
    Ok(packet)
}

/// Whether `text` begins a transaction, ends one with a commit, or ends one with a rollback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transaction {
    Begin,
    Commit,
    Rollback,
    Neither,
}

fn transaction(text: &str) -> Transaction {
    let words: Vec<String> = text
        .split(|c: char| c.is_whitespace() || c == ';')
        .filter(|word| !word.is_empty())
        .take(2)
        .map(str::to_ascii_uppercase)
        .collect();
    match words.first().map(String::as_str) {
        Some("BEGIN") => Transaction::Begin,
        Some("START") if words.get(1).map(String::as_str) == Some("TRANSACTION") => {
            Transaction::Begin
        }
        Some("COMMIT") => Transaction::Commit,
        Some("ROLLBACK") if words.get(1).map(String::as_str) != Some("TO") => Transaction::Rollback,
        _ => Transaction::Neither,
    }
}

/// Client to server: the handshake as it is, then each command meeting its fate.
async fn requests<R, W>(
    client: &mut BufReader<R>,
    server: &mut W,
    connection: &Connection,
    state: &Mutex<State>,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // Inside a transaction, and whether it wrote.
    let mut in_transaction = false;
    let mut transaction_wrote = false;
    let mut continued = false;
    let mut handshake = true;
    loop {
        let Ok(packet) = read_packet(client).await else {
            return End::Closed;
        };
        let payload = &packet[4..];
        let is_command = packet[3] == 0 && !continued;
        continued = payload.len() == MAX_PAYLOAD;
        if !is_command {
            if handshake && packet[3] == 1 && payload.len() >= 4 {
                let capabilities =
                    u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
                if capabilities & CLIENT_SSL != 0 {
                    // The request, and whatever of the TLS handshake the client sent already.
                    locked(state).encrypted = true;
                    let _ = server.write_all(&packet).await;
                    let _ = server.write_all(client.buffer()).await;
                    return End::Closed;
                }
            }
            if server.write_all(&packet).await.is_err() {
                return End::Closed;
            }
            continue;
        }
        handshake = false;
        let text = |body: &[u8]| String::from_utf8_lossy(body).into_owned();
        let statement = match payload.first() {
            Some(&COM_QUERY) => Some(text(&payload[1..])),
            Some(&COM_STMT_PREPARE) => {
                locked(state).preparing = Some(text(&payload[1..]));
                None
            }
            Some(&COM_STMT_EXECUTE) if payload.len() >= 5 => {
                let id = u32::from_le_bytes([payload[1], payload[2], payload[3], payload[4]]);
                locked(state).statements.get(&id).cloned()
            }
            Some(&COM_STMT_CLOSE) if payload.len() >= 5 => {
                let id = u32::from_le_bytes([payload[1], payload[2], payload[3], payload[4]]);
                locked(state).statements.remove(&id);
                None
            }
            Some(&COM_QUIT) => {
                let _ = server.write_all(&packet).await;
                return End::Closed;
            }
            _ => None,
        };
        let mut write = false;
        if let Some(statement) = statement {
            match transaction(&statement) {
                Transaction::Begin => {
                    in_transaction = true;
                    transaction_wrote = false;
                }
                Transaction::Commit => {
                    write = in_transaction && transaction_wrote;
                    in_transaction = false;
                }
                Transaction::Rollback => in_transaction = false,
                Transaction::Neither => {
                    let writes = is_write_query(&statement)
                        || statement
                            .trim_start()
                            .get(..7)
                            .is_some_and(|word| word.eq_ignore_ascii_case("REPLACE"));
                    if in_transaction {
                        transaction_wrote |= writes;
                    } else {
                        write = writes;
                    }
                }
            }
        }
        let action = connection.decide(write);
        if action == Action::LoseReply {
            locked(state).lose = true;
        }
        connection.outstanding(1);
        if let Err(end) = connection.forward(action, &packet, server).await {
            return end;
        }
        if action == Action::LoseReply {
            // Nothing more goes to the server: the replies end the connection once the server
            // starts answering this request.
            std::future::pending::<()>().await;
        }
    }
}

/// Server to client: every packet relayed (each answer held for the configured delay first),
/// but the answer to a request whose reply is lost, which ends the connection.
async fn replies<R, W>(
    server: &mut BufReader<R>,
    client: &mut W,
    connection: &Connection,
    state: &Mutex<State>,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let Ok(packet) = read_packet(server).await else {
            return End::Closed;
        };
        let starts_answer = packet[3] == 1;
        {
            let mut state = locked(state);
            if state.lose {
                connection.reply_lost();
                return End::Closed;
            }
            if starts_answer {
                if let Some(text) = state.preparing.take() {
                    // COM_STMT_PREPARE_OK: 0x00, then the statement's id.
                    if packet.len() >= 9 && packet[4] == 0 {
                        let id = u32::from_le_bytes([packet[5], packet[6], packet[7], packet[8]]);
                        state.statements.insert(id, text);
                    }
                }
            }
        }
        if starts_answer && !connection.reply_delay().is_zero() {
            tokio::time::sleep(connection.reply_delay()).await;
        }
        if client.write_all(&packet).await.is_err() {
            return End::Closed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactions_are_told_by_their_first_words() {
        assert_eq!(transaction("BEGIN"), Transaction::Begin);
        assert_eq!(transaction("start transaction"), Transaction::Begin);
        assert_eq!(transaction("COMMIT"), Transaction::Commit);
        assert_eq!(transaction("ROLLBACK"), Transaction::Rollback);
        assert_eq!(
            transaction("ROLLBACK TO SAVEPOINT _sqlx_savepoint_1"),
            Transaction::Neither
        );
        assert_eq!(transaction("SAVEPOINT a"), Transaction::Neither);
        assert_eq!(
            transaction("INSERT INTO t VALUES (1)"),
            Transaction::Neither
        );
    }
}
