// Attribute values a `macro_rules!` macro passes on as `$value:literal` or `$value:expr` arrive
// wrapped in invisible delimiters: they are read as the string literals they are, by idem as by
// serde.

use idem_core::Idempotent;

macro_rules! stored_type {
    ($name:ident, $collection:literal, $hash_field:expr, $renamed:literal) => {
        #[derive(serde::Serialize, Idempotent)]
        #[idem(collection = $collection, hash_field = $hash_field)]
        struct $name {
            #[idem(key)]
            #[serde(rename = $renamed)]
            slug: String,
            #[idem(frozen)]
            owner: String,
        }
    };
}

stored_type!(Post, "posts_from_a_macro", "contentSha", "postSlug");

fn main() {
    let model = <Post as Idempotent>::MODEL;
    assert_eq!(model.collection(), "posts_from_a_macro");
    assert_eq!(model.hash_field(), "contentSha");
    let key: Vec<&str> = model
        .natural_key_fields()
        .map(|field| field.stored_name())
        .collect();
    assert_eq!(key, ["postSlug"]);
    let post = Post {
        slug: "a".into(),
        owner: "ada".into(),
    };
    assert!(post.id().is_ok());
}
