use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key, timestamp)]
    published_at: i64,
}

fn main() {}
