use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key, collection = "posts")]
    slug: String,
}

fn main() {}
