// A `String` version compares as text ("10" is older than "9"), so it is not
// an ordered version type.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Entry {
    #[idem(key)]
    id: String,
    #[idem(version)]
    revision: String,
}

fn main() {}
