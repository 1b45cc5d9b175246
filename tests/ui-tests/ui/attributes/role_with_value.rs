use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key = true)]
    slug: String,
}

fn main() {}
