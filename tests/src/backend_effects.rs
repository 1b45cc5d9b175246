//! The effect primitives on every backend, in the terms a test needs: an event recorded once,
//! and a numeric credit applied once (`Change::add`, the same on every backend).

use idem_core::{Applied, Error, Id, Idempotent, OpId, Recorded};
use serde::Serialize;

use crate::backends::Db;

impl Db {
    /// Records `event` once under its idempotency key.
    pub async fn record<T: Idempotent + Serialize + Sync>(
        &self,
        event: &T,
    ) -> Result<Recorded, Error> {
        match self {
            Db::Mongo { store, .. } => store.record(event).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => crate::through_postgres!(sqlx, client, |c| store.record(c, event).await),
            Db::Sqlite {
                store, connection, ..
            } => store.record(&mut *connection.lock().await, event).await,
            Db::Mysql {
                store, connection, ..
            } => store.record(&mut *connection.lock().await, event).await,
        }
    }

    /// Applies `changes` to the effect fields of the document `id`, once per `op`.
    pub async fn apply_once<T: Idempotent>(
        &self,
        id: Id,
        op: &OpId,
        changes: &[idem_core::Change],
    ) -> Result<Applied, Error> {
        match self {
            Db::Mongo { store, .. } => store.apply_once::<T>(id, op, changes).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => crate::through_postgres!(sqlx, client, |c| {
                store.apply_once::<T, _>(c, id, op, changes).await
            }),
            Db::Sqlite {
                store, connection, ..
            } => {
                store
                    .apply_once::<T>(&mut *connection.lock().await, id, op, changes)
                    .await
            }
            Db::Mysql {
                store, connection, ..
            } => {
                store
                    .apply_once::<T>(&mut *connection.lock().await, id, op, changes)
                    .await
            }
        }
    }

    /// Adds `amount` to the effect field `field` (its stored name) of the document `id`, once
    /// per `op`.
    pub async fn credit_once<T: Idempotent>(
        &self,
        id: Id,
        op: &OpId,
        field: &'static str,
        amount: i64,
    ) -> Result<Applied, Error> {
        self.apply_once::<T>(id, op, &[idem_core::Change::add(field, amount)])
            .await
    }
}
