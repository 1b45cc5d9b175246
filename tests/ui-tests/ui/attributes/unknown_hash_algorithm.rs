use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(hash_algorithm = "md5")]
struct Post {
    #[idem(key)]
    slug: String,
}

fn main() {}
