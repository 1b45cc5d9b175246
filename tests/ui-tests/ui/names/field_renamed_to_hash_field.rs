use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    #[serde(rename = "sourceHash")]
    source_hash: String,
}

fn main() {}
