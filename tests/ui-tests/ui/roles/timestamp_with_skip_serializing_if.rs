// The timestamp feeds the id and must always be stored.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    #[serde(skip_serializing_if = "is_zero")]
    published_at: i64,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

fn main() {}
