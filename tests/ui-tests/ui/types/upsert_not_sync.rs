// A document that is not `Sync` derives, but cannot be upserted: the write borrows it across
// awaits in a `Send` future.

use std::cell::Cell;

use idem_core::postgres::Session;
use idem_core::tokio_postgres::Client;
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "counters")]
struct Counter {
    #[idem(key)]
    name: String,
    views: Cell<u32>,
}

async fn save(store: &Session<'_, &Client>, counter: &Counter) {
    let _ = counter.upsert(store).await;
}

fn main() {}
