use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[serde(tag = "kind")]
struct Entry {
    #[idem(key)]
    id: String,
    kind: String,
}

fn main() {}
