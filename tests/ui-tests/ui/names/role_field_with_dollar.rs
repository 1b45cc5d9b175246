// A role field stored under a name starting with `$` would be read as an operator.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Entry {
    #[idem(key)]
    id: String,
    #[idem(version)]
    #[serde(rename = "$revision")]
    revision: i64,
}

fn main() {}
