// `hash_field` moves the content hash; the default name `sourceHash` is then free for a field.

use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(hash_field = "contentSha")]
#[serde(rename_all = "camelCase")]
struct Post {
    #[idem(key)]
    slug: String,
    source_hash: String,
}

fn main() {
    let model = <Post as Idempotent>::MODEL;
    assert_eq!(model.hash_field(), "contentSha");
    assert!(model.is_hashed("sourceHash"));
    assert!(!model.is_hashed("contentSha"));

    let post = Post {
        slug: "a".into(),
        source_hash: "upstream".into(),
    };
    let changed = Post {
        slug: "a".into(),
        source_hash: "other".into(),
    };
    assert_ne!(
        post.content_hash().unwrap(),
        changed.content_hash().unwrap()
    );
}
