//! Shared helpers of the integration tests: the server they run against, and command counting.
