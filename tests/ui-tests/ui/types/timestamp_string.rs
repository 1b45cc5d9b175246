use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    published_at: String,
}

fn main() {}
