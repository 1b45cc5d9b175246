use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(timestamp, volatile)]
    fetched_at: i64,
}

fn main() {}
