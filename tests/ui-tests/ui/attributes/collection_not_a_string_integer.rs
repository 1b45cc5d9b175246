use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = 1)]
struct Post {
    #[idem(key)]
    slug: String,
}

fn main() {}
