use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Entry {
    #[idem(key)]
    id: String,
    #[idem(tombstone)]
    deleted: Option<()>,
}

fn main() {}
