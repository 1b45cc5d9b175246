use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    published_at: i64,
    #[idem(timestamp)]
    updated_at: i64,
}

fn main() {}
