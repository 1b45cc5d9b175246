use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    _id: String,
    #[idem(key)]
    slug: String,
}

fn main() {}
