use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(collection)]
struct Post {
    #[idem(key)]
    slug: String,
}

fn main() {}
