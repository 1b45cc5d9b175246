use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Entry {
    #[idem(key)]
    id: String,
    #[idem(version)]
    revision: i64,
    #[idem(version)]
    edited_at: i64,
}

fn main() {}
