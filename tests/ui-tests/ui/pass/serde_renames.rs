// The stored names in the generated `MODEL` are the names serde writes: `rename_all`, a field
// `rename` (plain or `serialize = …`), raw identifiers, and `skip` on a field without a role.

use idem_core::{Idempotent, Role};

#[derive(serde::Serialize, Idempotent)]
#[serde(rename_all = "camelCase")]
struct Post {
    #[idem(key)]
    blog_slug: String,
    #[idem(key)]
    #[serde(rename = "language")]
    lang: String,
    #[idem(timestamp)]
    published_at: i64,
    #[idem(frozen)]
    #[serde(rename(serialize = "author", deserialize = "writer"))]
    author_id: String,
    #[idem(volatile)]
    r#type: String,
    #[serde(skip)]
    #[allow(dead_code)]
    cache: Vec<u8>,
    body_text: String,
}

#[derive(serde::Serialize, Idempotent)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
struct Shout {
    #[idem(key)]
    post_id: i64,
}

fn stored<T: Idempotent>() -> Vec<(&'static str, &'static str, Role)> {
    T::MODEL
        .fields()
        .iter()
        .map(|field| (field.name(), field.stored_name(), field.role()))
        .collect()
}

fn main() {
    assert_eq!(
        stored::<Post>(),
        [
            ("blog_slug", "blogSlug", Role::Key),
            ("lang", "language", Role::Key),
            ("published_at", "publishedAt", Role::Timestamp),
            ("author_id", "author", Role::Frozen),
            ("type", "type", Role::Volatile),
        ]
    );
    assert_eq!(<Post as Idempotent>::MODEL.collection(), "post");
    assert_eq!(stored::<Shout>(), [("post_id", "POST_ID", Role::Key)]);

    // serde agrees: the names in the serialized document are the stored names above.
    let post = Post {
        blog_slug: "hello".into(),
        lang: "en".into(),
        published_at: 1,
        author_id: "ada".into(),
        r#type: "note".into(),
        cache: vec![1],
        body_text: "text".into(),
    };
    let json = serde_json::to_value(&post).unwrap();
    let mut names: Vec<_> = json.as_object().unwrap().keys().cloned().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "author",
            "blogSlug",
            "bodyText",
            "language",
            "publishedAt",
            "type"
        ]
    );
}
