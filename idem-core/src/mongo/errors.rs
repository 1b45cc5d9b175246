//! MongoDB's errors as idem reports them: the server's code, whether a retry may help (from the
//! error's kind, labels and codes, never its message), and the index a duplicate key names.

use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};

/// MongoDB's error code for a duplicate key.
pub(super) const DUPLICATE_KEY: i32 = 11000;

pub(super) fn mongo_error(document: &DocumentRef, source: mongodb::error::Error) -> Error {
    Error::new(
        document.clone(),
        ErrorKind::Backend {
            source: driver_error(source),
        },
    )
}

/// A driver result as idem reports it: its error ([`mongo_error`]) names `document`.
pub(super) trait Naming<T> {
    fn naming(self, document: &DocumentRef) -> Result<T, Error>;
}

impl<T> Naming<T> for Result<T, mongodb::error::Error> {
    fn naming(self, document: &DocumentRef) -> Result<T, Error> {
        self.map_err(|source| mongo_error(document, source))
    }
}

/// The next document of `cursor`, `None` at its end; an error names `document`.
pub(super) async fn next_document(
    cursor: &mut mongodb::Cursor<mongodb::bson::Document>,
    document: &DocumentRef,
) -> Result<Option<mongodb::bson::Document>, Error> {
    if !cursor.advance().await.naming(document)? {
        return Ok(None);
    }
    cursor.deserialize_current().naming(document).map(Some)
}

/// A driver error as idem reports it: kept whole, with its code and whether a retry may help.
pub fn driver_error(source: mongodb::error::Error) -> crate::BackendError {
    use mongodb::error::{ErrorKind, WriteFailure};
    let code = match source.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteConcernError(error)) => Some(error.code),
        _ => server_code(&source),
    };
    let code = code.map(|code| code.to_string());
    // A server's error as one line, its code and what it said: the driver's own text goes on
    // with its labels and the raw reply in hex, which say nothing more.
    let shown = match source.kind.as_ref() {
        ErrorKind::ServerSelection { message, .. } => Some(unreachable_servers(message)),
        ErrorKind::Command(command) => Some(format!(
            "the server refused the command (code {}{}): {}",
            command.code,
            match command.code_name.as_str() {
                "" => String::new(),
                name => format!(", {name}"),
            },
            command.message
        )),
        ErrorKind::Write(WriteFailure::WriteError(error)) => Some(format!(
            "the server refused the write (code {}{}): {}{}",
            error.code,
            error
                .code_name
                .as_deref()
                .map_or(String::new(), |name| format!(", {name}")),
            error.message,
            // A validator's reasons, say.
            error
                .details
                .as_ref()
                .map_or(String::new(), |details| format!("; {details}")),
        )),
        _ => None,
    };
    let error = crate::BackendError::new("MongoDB", code, is_transient(&source), source);
    match shown {
        Some(shown) => error.with_message(shown),
        None => error,
    }
}

/// A server-selection failure as one line: which servers could not be used and why, instead of
/// the driver's dump of its topology (`Topology: { Type: Unknown, Servers: [ { Address: …,
/// Error: Kind: I/O error: Connection refused … } ] }`), which names the same in several lines
/// of detail. What the dump holds is read only for this message.
fn unreachable_servers(message: &str) -> String {
    let servers: Vec<String> = message
        .split("Address: ")
        .skip(1)
        .map(|server| {
            let address = server.split(',').next().unwrap_or_default().trim();
            let why = server
                .split_once("Error: ")
                .map(|(_, error)| error.split(", labels:").next().unwrap_or(error))
                .map(|error| {
                    error
                        .trim_start_matches("Kind: ")
                        .replace("I/O error: ", "")
                });
            match why {
                Some(why) => format!("{address} ({why})"),
                None => address.to_owned(),
            }
        })
        .collect();
    let servers = match servers.is_empty() {
        true => message
            .split(". Topology")
            .next()
            .unwrap_or(message)
            .to_owned(),
        false => servers.join(", "),
    };
    format!(
        "no server could be reached within the server selection timeout \
         (serverSelectionTimeoutMS in the URI, 30 s by default): {servers}; retrying may help"
    )
}

/// The server's message of a duplicate-key error. Read only to name the index in a refusal:
/// what the refusal is was decided by reading the stored documents, not from this text.
pub(super) fn duplicate_key_message(error: &mongodb::error::Error) -> &str {
    server_error(error).map_or("", |(_, message)| message)
}

/// `NAME` in a server's "… index: NAME dup key: …", or "(unnamed)".
pub(super) fn index_in_message(message: &str) -> String {
    message
        .split_once("index: ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map_or_else(|| "(unnamed)".to_owned(), str::to_owned)
}

/// Whether a server refused an update for being a pipeline rather than for anything the
/// document holds: it parses no array as an update (`FailedToParse`, `TypeMismatch`: MongoDB
/// before 4.2), knows no such stage or operator, or does not implement updates with pipelines
/// (`NotImplemented`, `CommandNotSupported`: FerretDB and other MongoDB-protocol engines).
pub(super) fn refuses_update_pipelines(code: i32) -> bool {
    matches!(code, 9 | 14 | 115 | 168 | 238 | 303 | 40324)
}

/// Whether `error`, a write command's failure as idem reports it, is the server refusing its
/// update pipelines ([`refuses_update_pipelines`]).
pub(super) fn refused_update_pipelines(error: &Error) -> bool {
    error
        .as_backend()
        .and_then(crate::BackendError::code)
        .and_then(|code| code.parse().ok())
        .is_some_and(refuses_update_pipelines)
}

/// The server's code of a command or write error.
pub(super) fn server_code(error: &mongodb::error::Error) -> Option<i32> {
    server_error(error).map(|(code, _)| code)
}

/// The server's code and message of a command or write error.
fn server_error(error: &mongodb::error::Error) -> Option<(i32, &str)> {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Command(command) => Some((command.code, &command.message)),
        ErrorKind::Write(WriteFailure::WriteError(error)) => Some((error.code, &error.message)),
        _ => None,
    }
}

/// The server's message where the collection's validator refused a document
/// (`DocumentValidationFailure`).
pub(super) fn validator_refusal(error: &mongodb::error::Error) -> Option<&str> {
    server_error(error)
        .filter(|(code, _)| *code == 121)
        .map(|(_, message)| message)
}

pub(super) fn is_duplicate_key(error: &mongodb::error::Error) -> bool {
    server_code(error) == Some(DUPLICATE_KEY)
}

/// Server error codes after which the same write may succeed: the network, an election, a
/// shutdown, an unconfirmed write concern, or a request rate over what the service grants
/// (Azure Cosmos DB for MongoDB's 16500, which ran nothing).
pub(super) const TRANSIENT_CODES: &[i32] = &[
    6, 7, 64, 89, 91, 134, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 16500,
];

/// Whether a driver error leaves the write worth retrying, decided from its kind, labels and
/// codes, never its message.
pub(crate) fn is_transient(error: &mongodb::error::Error) -> bool {
    use mongodb::error::{ErrorKind, WriteFailure};
    if error.contains_label("RetryableWriteError")
        || error.contains_label("TransientTransactionError")
    {
        return true;
    }
    match error.kind.as_ref() {
        ErrorKind::Io(_)
        | ErrorKind::ServerSelection { .. }
        | ErrorKind::ConnectionPoolCleared { .. } => true,
        ErrorKind::Write(WriteFailure::WriteConcernError(_)) => true,
        ErrorKind::Command(command) => is_transient_code(command.code),
        ErrorKind::InsertMany(failure) => failure.write_concern_error.is_some(),
        _ => false,
    }
}

/// Whether a server error code leaves the write worth retrying.
pub(crate) fn is_transient_code(code: i32) -> bool {
    TRANSIENT_CODES.contains(&code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_server_reads_as_one_line() {
        let dump = "Server selection timeout: No available servers. Topology: { Type: Unknown, \
                    Servers: [ { Address: 127.0.0.1:1, Type: Unknown, Error: Kind: I/O error: \
                    Connection refused (os error 111), labels: {\"RetryableError\"}, source: \
                    None, server response: None } ] }";
        assert_eq!(
            unreachable_servers(dump),
            "no server could be reached within the server selection timeout \
             (serverSelectionTimeoutMS in the URI, 30 s by default): 127.0.0.1:1 (Connection \
             refused (os error 111)); retrying may help"
        );
    }
}
