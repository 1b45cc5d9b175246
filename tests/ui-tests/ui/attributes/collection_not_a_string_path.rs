use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = posts)]
struct Post {
    #[idem(key)]
    slug: String,
}

fn main() {}
