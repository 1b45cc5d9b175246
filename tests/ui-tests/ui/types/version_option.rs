// An `Option` version going from `Some(5)` to `None` must not replace the
// stored document, and `None` has no place in an order of versions.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Entry {
    #[idem(key)]
    id: String,
    #[idem(version)]
    revision: Option<i64>,
}

fn main() {}
