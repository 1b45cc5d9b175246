//! What the PostgreSQL store asks of a driver beyond the SQL stores' seam
//! ([`crate::sql::wire::Wire`]): the connections it takes ([`Connection`]), the text of its
//! cells, and the parameters of a statement over `unnest`ed columns. tokio-postgres
//! ([`super::tokio_wire`]) and sqlx ([`super::sqlx_wire`]) each meet the seam; neither opens a
//! transaction of its own outside the caller's (the store's writes need none), and each refuses
//! to.

use crate::error::BackendError;
pub(crate) use crate::sql::wire::{Cells, DbFailure, Param, Wire};

/// The parameters of a statement over `unnest`ed columns: one text array per column, then the
/// oids of the tables its guard accepts ([`super::table::Table::checked_oids`]).
pub(super) fn unnested<'p>(
    columns: &'p [Vec<Option<&'p str>>],
    checked: &'p [u32],
) -> Vec<Param<'p>> {
    let mut parameters: Vec<Param> = columns.iter().map(|column| Param::Texts(column)).collect();
    parameters.push(Param::Oids(checked));
    parameters
}

/// Parameters of `text` type, one per value.
pub(super) fn texts<S: AsRef<str>>(values: &[Option<S>]) -> Vec<Param<'_>> {
    values
        .iter()
        .map(|value| Param::Text(value.as_ref().map(AsRef::as_ref)))
        .collect()
}

/// A scalar parameter as the text a `$n::text::type` cast reads; `None` for an array, which no
/// such cast takes.
pub(super) fn param_text(param: Param<'_>) -> Option<Option<String>> {
    Some(match param {
        Param::Text(text) => text.map(str::to_owned),
        Param::Integer(number) => Some(number.to_string()),
        Param::Float(number) => Some(format!("{number:?}")),
        Param::Bool(flag) => Some(flag.to_string()),
        Param::Texts(_) | Param::Byteas(_) | Param::Oid(_) | Param::Oids(_) => return None,
    })
}

/// The one row a statement returns, or the failure saying it returned none.
pub(super) fn one<R>(rows: Vec<R>, what: &'static str) -> Result<R, DbFailure> {
    rows.into_iter().next().ok_or_else(|| {
        DbFailure::new(
            BackendError::new("PostgreSQL", None, false, NoRow(what)),
            None,
        )
    })
}

/// A statement that returns one row by construction returned none.
#[derive(Debug, thiserror::Error)]
#[error("{0} returned no row")]
struct NoRow(&'static str);

/// The [`Cells`] methods every PostgreSQL row answers from its typed cells: the row's length
/// by the driver's `$len`, text by [`cell_text`], a boolean and an integer as their own types, and each typed
/// cell the driver decodes as itself by the row's `try_get` (`None` for NULL, or a cell of
/// another type).
macro_rules! cells_from_types {
    ($len:path) => {
        fn len(&self) -> usize {
            $len(self)
        }

        fn text(&self, at: usize) -> Result<Option<String>, DbFailure> {
            Ok(super::wire::cell_text(self, at))
        }

        fn boolean(&self, at: usize) -> Result<Option<bool>, DbFailure> {
            Ok(self.flag(at))
        }

        fn integer(&self, at: usize) -> Result<Option<i64>, DbFailure> {
            Ok(self.int8(at))
        }

        fn str(&self, at: usize) -> Option<&str> {
            self.try_get(at).ok().flatten()
        }

        fn flag(&self, at: usize) -> Option<bool> {
            self.try_get(at).ok().flatten()
        }

        fn int8(&self, at: usize) -> Option<i64> {
            self.try_get(at).ok().flatten()
        }

        fn float(&self, at: usize) -> Option<f64> {
            self.try_get(at).ok().flatten()
        }

        fn texts(&self, at: usize) -> Option<Vec<String>> {
            self.try_get(at).ok().flatten()
        }
    };
}
pub(super) use cells_from_types;

/// The generic reading of a PostgreSQL cell as text ([`Cells::text`]): text as it is, a number
/// as its digits (a float as the shortest text that reads back as it), a boolean as `true` or
/// `false`, `jsonb` as its JSON.
pub(super) fn cell_text<R: Cells + ?Sized>(row: &R, at: usize) -> Option<String> {
    if let Some(text) = row.str(at) {
        return Some(text.to_owned());
    }
    if let Some(number) = row.int8(at) {
        return Some(number.to_string());
    }
    if let Some(float) = row.float(at) {
        return Some(format!("{float:?}"));
    }
    if let Some(flag) = row.flag(at) {
        return Some(flag.to_string());
    }
    row.json(at).ok().flatten().map(|json| json.to_string())
}

/// What idem writes through: a client, connection or transaction of a PostgreSQL driver.
///
/// With tokio-postgres: `&Client` (a pooled client dereferences to one: `&**object` from
/// deadpool-postgres, `&*connection` from bb8) or `&Transaction`, opened with
/// `Client::transaction`. With sqlx (feature `sqlx-postgres`): `&mut PgConnection`, a pooled
/// connection (`&mut PoolConnection<Postgres>`, or `&mut *conn`) or `&mut Transaction<Postgres>`.
///
/// Inside a transaction, each write statement that may fail (a racing writer's row met on the
/// primary key, another unique constraint, a CHECK) runs in a savepoint, so that idem can retry
/// it or split a batch one row at a time, and the transaction stays usable after any refusal
/// idem reports. Each is a subtransaction, and a transaction of more than 64 of them (an
/// `upsert_many` of more than 64 chunks, say) pays PostgreSQL's cost of many subtransactions;
/// commit large ingests in several transactions. With tokio-postgres the savepoint travels in
/// the statement's own round trip; sqlx sends one request at a time, so there a write inside a
/// transaction costs three round trips instead of one.
///
/// A transaction opened with a plain `BEGIN` statement is not one idem can see: a failed
/// statement aborts it, as any statement would. Open it with the driver's transaction API.
#[diagnostic::on_unimplemented(
    message = "idem's PostgreSQL store writes through a tokio-postgres `&Client` or `&Transaction`, or a sqlx `&mut PgConnection` or `&mut Transaction<Postgres>`, not `{Self}`",
    label = "not a PostgreSQL client idem writes through",
    note = "pass a reference: `&client`, `&tx` (tokio-postgres), `&mut *conn`, `&mut tx` (sqlx); from a sqlx `PgPool`, `&mut pool.acquire().await?`, or `&mut tx` of `pool.begin()`; a pooled tokio-postgres client dereferences to a `Client` (`&**object` from deadpool-postgres)"
)]
pub trait Connection: private::Sealed {
    /// The session statements are sent through.
    #[doc(hidden)]
    type Wire: Wire;

    /// The session this client stands for.
    #[doc(hidden)]
    fn wire(self) -> Self::Wire;
}

pub(super) mod private {
    pub trait Sealed {}
    #[cfg(feature = "postgres")]
    impl Sealed for &tokio_postgres::Client {}
    #[cfg(feature = "postgres")]
    impl Sealed for &tokio_postgres::Transaction<'_> {}
    #[cfg(feature = "sqlx-postgres")]
    impl Sealed for &mut sqlx::PgConnection {}
    #[cfg(feature = "sqlx-postgres")]
    impl Sealed for &mut sqlx::Transaction<'_, sqlx::Postgres> {}
    #[cfg(feature = "sqlx-postgres")]
    impl Sealed for &mut sqlx::pool::PoolConnection<sqlx::Postgres> {}
}
