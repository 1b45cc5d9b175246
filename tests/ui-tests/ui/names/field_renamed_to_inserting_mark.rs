// `idemNew` marks, on MongoDB, the document an upsert is inserting; a stored document holding it
// would be taken for one being inserted, and matched by no upsert.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Account {
    #[idem(key)]
    owner: String,
    #[serde(rename = "idemNew")]
    fresh: Option<bool>,
}

fn main() {}
