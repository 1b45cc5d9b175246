use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Entry {
    #[idem(key)]
    id: String,
    #[idem(tombstone)]
    deleted_at: Option<Option<i64>>,
}

fn main() {}
