// The version orders replays and must always be stored.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Entry {
    #[idem(key)]
    id: String,
    #[idem(version)]
    #[serde(skip_serializing_if = "is_zero")]
    revision: i64,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

fn main() {}
