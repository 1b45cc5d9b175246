use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(frozen, volatile)]
    author_id: String,
}

fn main() {}
