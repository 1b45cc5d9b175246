//! The integration suites, one module each, in one test binary: a binary of its own would link
//! idem and every driver again (seconds of `scripts/test` each). The contract suite and the
//! allocation counts (which install a global allocator of their own) keep theirs. Run one suite
//! with a filter: `cargo test -p idem-tests --test stores sql_frozen::`.

mod content_hash;
mod derive_shapes;
mod every_store;
mod frozen_shapes;
mod ids;
mod isolation;
mod light_rows;
mod mariadb_layout;
mod model_promises;
mod mongo_adopt;
mod mongo_chaos;
mod mongo_effects;
mod mongo_indexes;
mod mongo_operators;
mod mongo_replays;
mod mongo_shard_keys;
mod mongo_types;
mod mongo_upsert;
mod mysql_chaos;
mod op_ids;
mod pg_chaos;
mod pg_marker;
mod pg_partitioned;
mod pg_schema;
mod postgres;
mod postgres_adopt;
mod postgres_audit;
mod postgres_sqlx;
mod properties;
mod send_futures;
mod spec_vectors;
mod sql_format;
mod sql_frozen;
mod sqlite;
mod table_check_shapes;
mod tracing;
