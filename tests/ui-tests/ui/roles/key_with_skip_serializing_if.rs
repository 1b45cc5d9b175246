// A key identifies the document and must always be stored; serde leaving it
// out would make the document unreadable by its key.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    #[serde(skip_serializing_if = "String::is_empty")]
    slug: String,
    title: String,
}

fn main() {}
