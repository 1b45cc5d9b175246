// With `hash_field = "_id"` the document would be stored under its content
// hash instead of its derived id.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(hash_field = "_id")]
struct Post {
    #[idem(key)]
    slug: String,
    title: String,
}

fn main() {}
