use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Thread {
    #[idem(key)]
    slug: String,
    #[idem(push_by = "comment_id")]
    comments: std::collections::HashMap<String, String>,
}

fn main() {}
