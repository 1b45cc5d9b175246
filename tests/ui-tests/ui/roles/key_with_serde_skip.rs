use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    #[serde(skip)]
    slug: String,
    title: String,
}

fn main() {}
