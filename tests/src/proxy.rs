//! The MongoDB wire protocol for the fault-injecting [`Proxy`]: which messages are requests,
//! which of them write, and which reply answers which request.
//!
//! It reads MongoDB message framing (a 4-byte little-endian length prefix, then the header with
//! the request id and `responseTo`), so the proxy acts per request. Only write requests are
//! faulted: OP_MSG commands whose body's first key is `insert`, `update`, `delete` or
//! `findAndModify`. The handshake, `hello`, `ping`, reads and index commands pass untouched, so a
//! driver can always connect. A lost reply is the reply whose `responseTo` is the request's id;
//! dropping it closes the client connection (without the close the driver would wait for the
//! reply forever). Messages over the wire protocol's 48 MB limit end a connection.

use std::collections::HashSet;
use std::io;
use std::sync::{Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::fault_proxy::{Action, Connection, End, Wire};
pub use crate::fault_proxy::{Faults, Proxy, ProxyConfig, ProxyStats};

/// MongoDB's `maxMessageSizeBytes`; a frame claiming more ends the connection.
const MAX_MESSAGE_BYTES: usize = 48_000_000;
/// The standard message header: length, requestID, responseTo, opCode.
const HEADER_BYTES: usize = 16;
const OP_MSG: i32 = 2013;
/// OP_MSG flag: a CRC-32C checksum follows the sections.
const CHECKSUM_PRESENT: u32 = 1;

/// The commands the proxy faults.
const WRITE_COMMANDS: &[&str] = &[
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
];

/// The MongoDB wire protocol, for [`Proxy::start`].
#[derive(Clone, Copy, Debug, Default)]
pub struct MongoWire;

impl Wire for MongoWire {
    async fn relay(
        &self,
        client: &mut TcpStream,
        server: &mut TcpStream,
        connection: Connection,
    ) -> End {
        // Request ids whose replies are to be dropped.
        let doomed = Mutex::new(HashSet::new());
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        tokio::select! {
            end = requests(&mut client_read, &mut server_write, &connection, &doomed) => end,
            end = replies(&mut server_read, &mut client_write, &connection, &doomed) => end,
        }
    }
}

/// Client to server: one frame at a time, each write request meeting its fate.
async fn requests<R, W>(
    client: &mut R,
    server: &mut W,
    connection: &Connection,
    doomed: &Mutex<HashSet<i32>>,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let Ok(frame) = read_frame(client).await else {
            return End::Closed;
        };
        let is_write = command_name(&frame).is_some_and(|name| WRITE_COMMANDS.contains(&name));
        let action = connection.decide(is_write);
        if action == Action::LoseReply {
            doomed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(request_id(&frame));
        }
        if let Err(end) = connection.forward(action, &frame, server).await {
            return end;
        }
    }
}

/// Server to client: every reply, except one answering a doomed request.
async fn replies<R, W>(
    server: &mut R,
    client: &mut W,
    connection: &Connection,
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
            connection.reply_lost();
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
}
