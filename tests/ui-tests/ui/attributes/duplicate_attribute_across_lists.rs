use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    #[idem(key)]
    slug: String,
}

fn main() {}
