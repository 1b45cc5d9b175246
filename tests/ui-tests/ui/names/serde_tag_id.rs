use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[serde(tag = "_id")]
struct Entry {
    #[idem(key)]
    id: String,
}

fn main() {}
