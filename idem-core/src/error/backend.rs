//! A database driver's error, kept whole, with what idem read from it.

use std::fmt;
use std::sync::Arc;

/// A database driver's error, kept whole, with what idem read from it: which backend, the
/// server's code (a MongoDB code as decimal text, a PostgreSQL SQLSTATE) and whether the same call
/// may succeed if made again.
#[derive(Clone)]
pub struct BackendError {
    backend: &'static str,
    code: Option<String>,
    retryable: bool,
    refuses_document: bool,
    message: String,
    /// The constraint the server named, and the schema of its table.
    constraint: Option<(String, Option<String>)>,
    source: Arc<dyn std::error::Error + Send + Sync + 'static>,
}

impl BackendError {
    /// Wraps a driver error. `code` is the server's code if the server answered; `retryable`
    /// says whether the same call may succeed if made again (the connection failed, the server
    /// asked for a retry).
    pub fn new(
        backend: &'static str,
        code: Option<String>,
        retryable: bool,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        BackendError {
            backend,
            code,
            retryable,
            refuses_document: false,
            message: source.to_string(),
            constraint: None,
            source: Arc::new(source),
        }
    }

    /// The same error shown with `message` instead of the driver's own text (which for a
    /// server error may not include what the server said).
    pub fn with_message(mut self, message: String) -> Self {
        self.message = message;
        self
    }

    /// The same error, marked as the server's refusal of the document itself (a value its
    /// column cannot hold, a key too long for its index): sending the same document again
    /// fails the same way, so [`Error::is_refusal`](super::Error::is_refusal) holds.
    pub fn refusing_document(mut self) -> Self {
        self.refuses_document = true;
        self
    }

    /// The same error, naming the constraint the server reported and its table's schema.
    pub fn with_constraint(mut self, name: String, schema: Option<String>) -> Self {
        self.constraint = Some((name, schema));
        self
    }

    /// The constraint or index the server named in its refusal (a unique violation's, a
    /// CHECK's), if it named one.
    pub fn constraint(&self) -> Option<&str> {
        self.constraint.as_ref().map(|(name, _)| name.as_str())
    }

    /// The schema of the table whose constraint the server named.
    pub fn constraint_schema(&self) -> Option<&str> {
        self.constraint.as_ref()?.1.as_deref()
    }

    /// Whether the server refused the document itself, not the call (see
    /// [`BackendError::refusing_document`]).
    pub fn refuses_document(&self) -> bool {
        self.refuses_document
    }

    /// The backend's name: `"MongoDB"` or `"PostgreSQL"`.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The server's code, if the server answered: a MongoDB error code as decimal text, or a
    /// PostgreSQL SQLSTATE such as `"40001"`.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// Whether the same call may succeed if made again.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The driver's error, to inspect with `downcast_ref`.
    pub fn driver_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendError")
            .field("backend", &self.backend)
            .field("code", &self.code)
            .field("retryable", &self.retryable)
            .field("refuses_document", &self.refuses_document)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.backend, self.message)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
