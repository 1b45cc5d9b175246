use idem_core::Idempotent;

#[derive(serde::Serialize)]
struct Slug {
    slug: String,
}

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    #[serde(flatten)]
    slug: Slug,
}

fn main() {}
