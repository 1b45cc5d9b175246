use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(kye)]
    slug: String,
}

fn main() {}
