use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Entry {
    #[idem(key, version)]
    id: String,
}

fn main() {}
