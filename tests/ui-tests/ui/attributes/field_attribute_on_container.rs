use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(frozen)]
struct Post {
    #[idem(key)]
    slug: String,
}

fn main() {}
