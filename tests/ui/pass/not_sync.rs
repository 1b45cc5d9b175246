// A document type that is not `Sync` (a `Cell` field) derives: its id and content hash work, and
// its `upsert` is refused only where it is called (see ui/types/upsert_not_sync.rs).

use std::cell::Cell;

use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "counters")]
struct Counter {
    #[idem(key)]
    name: String,
    views: Cell<u32>,
}

fn main() {
    let counter = Counter {
        name: "home".into(),
        views: Cell::new(1),
    };
    let before = counter.content_hash().unwrap();
    counter.views.set(2);
    assert_ne!(counter.content_hash().unwrap(), before);
    assert_eq!(counter.id().unwrap(), Counter::derive_id("home").unwrap());
}
