//! What the store writes through: the caller's client or transaction, and the savepoint that
//! keeps a transaction usable when one of idem's statements fails inside it.

use std::future::Future;

use tokio_postgres::GenericClient;

/// The savepoint around each of idem's write statements inside a transaction: opened, released
/// after a statement that succeeded, rolled back to (and released) after one that failed.
const OPEN: &str = "SAVEPOINT idem_statement";
const RELEASE: &str = "RELEASE SAVEPOINT idem_statement";
const ROLL_BACK: &str = "ROLLBACK TO SAVEPOINT idem_statement; RELEASE SAVEPOINT idem_statement";

/// A tokio-postgres [`Client`](tokio_postgres::Client) or
/// [`Transaction`](tokio_postgres::Transaction) that idem writes through.
///
/// Inside a `Transaction`, each write statement that may fail (a racing writer's row met on
/// the primary key, another unique constraint, a CHECK) runs in a savepoint, so that idem can
/// retry it or split a batch one row at a time, and the transaction stays usable after any
/// refusal idem reports. The savepoint travels in the statement's own round trip, and is
/// released after it: each is a subtransaction, and a transaction of more than 64 of them
/// (an `upsert_many` of more than 64 chunks, say) pays PostgreSQL's cost of many
/// subtransactions; commit large ingests in several transactions.
///
/// A transaction opened on a `Client` with a plain `BEGIN` is not one idem can see: a failed
/// statement aborts it, as any statement would. Open it with `Client::transaction` instead.
#[diagnostic::on_unimplemented(
    message = "idem's PostgreSQL store writes through a tokio-postgres `Client` or `Transaction`, not `{Self}`",
    label = "not a tokio-postgres `Client` or `Transaction`",
    note = "a pooled client dereferences to a `Client`: pass that (`&**object` from deadpool-postgres, `&*connection` from bb8)"
)]
pub trait Connection: GenericClient + Sync + private::Sealed {
    /// Whether statements run inside a transaction block this value stands for.
    #[doc(hidden)]
    fn in_transaction(&self) -> bool;
}

impl Connection for tokio_postgres::Client {
    fn in_transaction(&self) -> bool {
        false
    }
}

impl Connection for tokio_postgres::Transaction<'_> {
    fn in_transaction(&self) -> bool {
        true
    }
}

mod private {
    pub trait Sealed {}
    impl Sealed for tokio_postgres::Client {}
    impl Sealed for tokio_postgres::Transaction<'_> {}
}

/// Runs `statement`, a write sent through `client`, so that its failure leaves the caller's
/// transaction as it was before it: inside a transaction, between `SAVEPOINT` and `RELEASE`,
/// sent with it in one round trip, and rolled back to the savepoint if it failed. Outside a
/// transaction the statement is its own, and goes alone.
pub(super) async fn contained<C, F, T>(client: &C, statement: F) -> Result<T, tokio_postgres::Error>
where
    C: Connection,
    F: Future<Output = Result<T, tokio_postgres::Error>>,
{
    if !client.in_transaction() {
        return statement.await;
    }
    // Polled in this order, the three requests leave in this order, before any reply.
    let (opened, result, released) = futures_util::future::join3(
        client.batch_execute(OPEN),
        statement,
        client.batch_execute(RELEASE),
    )
    .await;
    match (opened, result, released) {
        (Ok(()), Ok(written), released) => released.map(|()| written),
        // The server ran the statement and released the savepoint; the client refused its
        // reply: nothing to roll back, and the transaction is as the statement left it.
        (Ok(()), Err(error), Ok(())) => Err(error),
        (Ok(()), Err(error), Err(_)) => {
            crate::trace::round_trip("ROLLBACK TO SAVEPOINT");
            // The statement's error is the one to report, whatever the rollback answers.
            let _ = client.batch_execute(ROLL_BACK).await;
            Err(error)
        }
        // The transaction was aborted before this call: the statement's error says so.
        (Err(_), result, _) => result,
    }
}
