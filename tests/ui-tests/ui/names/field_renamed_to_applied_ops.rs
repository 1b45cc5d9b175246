// `idemAppliedOps` is where `apply_once` records the op ids it applied; a field
// stored there would be overwritten by upserts and read as op ids.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Account {
    #[idem(key)]
    owner: String,
    #[serde(rename = "idemAppliedOps")]
    history: Vec<String>,
}

fn main() {}
