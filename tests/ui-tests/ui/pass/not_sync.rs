// A document type that is not `Sync` (a `Cell` field) derives: its id and content hash work, a
// push of a `Sync` item to it gives a `Send` future, and only its `upsert` is refused, where it
// is called (see ui/types/upsert_not_sync.rs).

use std::cell::Cell;
use std::future::Future;

use idem_core::postgres::Session;
use idem_core::tokio_postgres::Client;
use idem_core::{Error, Idempotent, Pushed};

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "counters")]
struct Counter {
    #[idem(key)]
    name: String,
    views: Cell<u32>,
    #[idem(push_by = "id")]
    visitors: Vec<Visitor>,
}

#[derive(serde::Serialize)]
struct Visitor {
    id: String,
}

#[allow(dead_code)] // compiled, not run: it needs a server
fn add_visitor<'a>(
    store: &'a Session<'a, &'a Client>,
    counter: &'a Counter,
    visitor: &'a Visitor,
) -> impl Future<Output = Result<Pushed, Error>> + Send + 'a {
    counter.push_visitors(store, visitor)
}

fn main() {
    let counter = Counter {
        name: "home".into(),
        views: Cell::new(1),
        visitors: Vec::new(),
    };
    let before = counter.content_hash().unwrap();
    counter.views.set(2);
    assert_ne!(counter.content_hash().unwrap(), before);
    assert_eq!(counter.id().unwrap(), Counter::derive_id("home").unwrap());
}
