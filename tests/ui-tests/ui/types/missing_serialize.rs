use idem_core::Idempotent;

// No `serde::Serialize`: idem hashes and writes what serde writes.
#[derive(Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    title: String,
}

fn main() {
    let post = Post {
        slug: "a".into(),
        title: "A".into(),
    };
    let _ = post.content_hash();
}
