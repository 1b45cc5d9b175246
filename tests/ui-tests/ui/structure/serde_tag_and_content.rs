use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[serde(tag = "kind", content = "data")]
struct Entry {
    #[idem(key)]
    id: String,
}

fn main() {}
