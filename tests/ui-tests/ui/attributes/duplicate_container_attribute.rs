use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "posts")]
#[idem(collection = "articles")]
struct Post {
    #[idem(key)]
    slug: String,
}

fn main() {}
