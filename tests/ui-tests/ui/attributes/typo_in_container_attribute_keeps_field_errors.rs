use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(colection = "posts")]
struct Post {
    #[idem(kye)]
    slug: String,
    #[idem(frozen, volatile)]
    body: String,
}

fn main() {}
