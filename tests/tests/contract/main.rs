//! The contract every backend keeps: one suite, written once against [`Db`], whose cases each
//! run on every store [`fresh_backends`] returns (MongoDB, each PostgreSQL server under test,
//! SQLite and MariaDB: `MONGODB_URI`, `IDEM_POSTGRES_URIS` or `POSTGRES_URI`, and
//! `MYSQL_URI`). A backend that passes it keeps idem's promises: each outcome of each
//! primitive, each refusal with its exact error and nothing written, versions and tombstones,
//! batches that agree with single writes, racing writers and lost acknowledgements that
//! converge, and typed reads of what was written. A case whose input or refusal exists on one
//! backend only is in a module named for that backend, and says why.
//!
//! A refusal must leave the store exactly as it was, so every refusal compares the stored state
//! before and after ([`Db::raw`]: each document's bytes on MongoDB, each row's text and row
//! version on PostgreSQL, each row's values and write marker on SQLite and MariaDB), and on
//! MongoDB the driver's command monitoring as well (no command sent, or the server's replies
//! counting zero documents written).
//!
//! The cases are organised by primitive or concern, one module each:
//!
//! - [`api`]: one generic function over `idem_core::Backend`, every primitive, every store;
//! - [`upsert`], [`batch`] (`upsert_many`), [`delete`], [`insert_new`], [`push`],
//!   [`apply_once`] (and effect fields and op ids), [`record`], [`reads`] (`get`, `find`),
//!   [`audit`] (what the audit finds in what idem and others wrote);
//! - [`versions`], [`frozen`] (frozen fields and id-feeding timestamps), [`refusals`] (input
//!   refused before anything is sent: timestamps out of range, empty or ambiguous keys, names
//!   written twice, reserved names), [`floats`] (NaN, the infinities, -0.0), [`foreign`]
//!   (documents another tool wrote), [`races`] (racing upserts and batches, a lost
//!   acknowledgement);
//! - [`postgres_only`], [`mysql_only`], [`mongodb_only`] and [`mongodb_server`]: cases whose input or refusal
//!   exists on one backend only, each module saying why;
//! - [`error_debug`]: how an error reads printed with `{:?}`, as a `main` prints it;
//! - [`support`]: the fixtures and assertions several modules share.
//!
//! [`Db`]: idem_tests::backends::Db
//! [`Db::raw`]: idem_tests::backends::Db::raw
//! [`fresh_backends`]: idem_tests::backends::fresh_backends
//!
//! The suite gathers three catalogues that had files of their own. The promise catalogue's cases
//! (sixteen ways ordinary serde shapes and sequences once broke idem's promises) keep their
//! numbers in their doc comments ("Promise catalogue case 7"); the inputs the fix turned into
//! compile errors have trybuild cases instead (see `ui.rs`): `u64`, `u128`, `i128` and `usize`
//! keys (case 11, `ui/types/key_*.rs`); `String`, float and `Option` versions (cases 2 and 15,
//! `ui/types/version_*.rs`); role fields stored under a name with a `.` or a leading `$` (case
//! 5), `hash_field = "_id"` and a field stored as `idemAppliedOps` (case 9, `ui/names/`); key,
//! timestamp and version fields with `skip_serializing_if` (case 13,
//! `ui/roles/*_with_skip_serializing_if.rs`). The bad-input catalogue's cases (one named case
//! each) are in `refusals.rs`, `floats.rs`, `postgres_only.rs`, `mongodb_only.rs`,
//! `mongodb_server.rs` and beside the primitive they refuse.
//!
//! What only one backend has beyond that (MongoDB's commands and round trips; PostgreSQL's
//! table, transactions and server limits) is in `mongo_*.rs`, `postgres*.rs` and `pg_*.rs`; the
//! model-based property test over every backend is `model_promises.rs`.

mod api;
mod apply_once;
mod audit;
mod batch;
mod delete;
mod error_debug;
mod floats;
mod foreign;
mod frozen;
mod insert_new;
mod mongodb_only;
mod mongodb_server;
mod mysql_only;
mod postgres_only;
mod push;
mod races;
mod reads;
mod record;
mod refusals;
mod support;
mod type_changes;
mod upsert;
mod versions;
