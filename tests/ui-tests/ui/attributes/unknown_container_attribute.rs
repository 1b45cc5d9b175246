use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(table = "posts")]
struct Post {
    #[idem(key)]
    slug: String,
}

fn main() {}
