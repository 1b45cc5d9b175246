// Floats are not ordered versions: NaN compares with nothing.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Entry {
    #[idem(key)]
    id: String,
    #[idem(version)]
    revision: f64,
}

fn main() {}
