use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key, key)]
    slug: String,
}

fn main() {}
