use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key, volatile)]
    slug: String,
}

fn main() {}
