use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[serde(tag = "sourceHash")]
struct Entry {
    #[idem(key)]
    id: String,
}

fn main() {}
