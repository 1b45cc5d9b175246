// `id_scheme = "joined"` hashes the keys' text joined by `:`, like `sha256(slug + ":" + lang)`.

use idem_core::{IdScheme, Idempotent};

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "posts", id_scheme = "joined")]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
}

#[derive(serde::Serialize, Idempotent)]
#[idem(id_scheme = "v1")]
struct Explicit {
    #[idem(key)]
    slug: String,
}

fn main() {
    assert_eq!(<Post as Idempotent>::MODEL.id_scheme(), IdScheme::Joined);
    assert_eq!(<Post as Idempotent>::MODEL.collection(), "posts");
    assert_eq!(<Explicit as Idempotent>::MODEL.id_scheme(), IdScheme::V1);

    let post = Post {
        slug: "hello-world".into(),
        lang: "en".into(),
    };
    // The first ten bytes of sha256("hello-world:en").
    let expected = [0x12, 0xd8, 0x0d, 0xf3, 0x73, 0x61, 0x50, 0x09, 0xe8, 0x43];
    assert_eq!(post.id().unwrap().hash_part(), expected);
}
