// A role field is read back and guarded by its stored name, and a `.` in it
// would be read as a path into an embedded document.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(frozen)]
    #[serde(rename = "meta.author")]
    author: String,
}

fn main() {}
