// Generated code names nothing relative: a user's own `Result`, `Option`, `Some`, `Send`,
// `Serialize`, `Future`, `Field`, `Model` and `core` do not change what it means.
#![allow(dead_code, non_camel_case_types)]

use idem_core::Idempotent;

type Result = ();
struct Option;
struct Some;
struct None;
trait Send {}
trait Sync {}
trait Serialize {}
trait Future {}
struct Field;
struct Model;
struct Id;
struct Error;
mod core {}
mod __idem {}

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    at: i64,
}

fn main() {
    let post = Post {
        slug: "a".to_owned(),
        at: 1,
    };
    assert_eq!(
        post.id().unwrap(),
        Post::derive_id(&"a".to_owned(), &1).unwrap()
    );
}
