use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[serde(untagged)]
struct Entry {
    #[idem(key)]
    id: String,
}

fn main() {}
