use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(id_scheme = "v2")]
struct Post {
    #[idem(key)]
    slug: String,
}

fn main() {}
