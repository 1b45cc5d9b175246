//! The model the marker stores' CLI tests (`cli_sqlite.rs`, `cli_mysql.rs`) write with idem,
//! and the flags that give the command the same model.

use idem_core::Idempotent;

#[derive(Clone, serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "posts")]
#[serde(rename_all = "camelCase")]
pub struct Post {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    #[idem(timestamp)]
    published_at: i64,
    pub title: String,
}

pub fn post(n: i64) -> Post {
    Post {
        slug: format!("post-{n}"),
        lang: "en".into(),
        published_at: 1_700_000_000_000 + n,
        title: format!("Title {n}"),
    }
}

pub const FLAGS: [&str; 6] = [
    "--table",
    "posts",
    "--key",
    "slug,lang",
    "--timestamp",
    "publishedAt",
];
