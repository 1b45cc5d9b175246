use super::*;
use crate::document::NaturalKey;
use crate::id::{Id, KeyValue};

fn document(natural_key: Vec<(&'static str, KeyValue)>, id: Option<Id>) -> DocumentRef {
    DocumentRef {
        collection: "posts",
        natural_key: NaturalKey::new(natural_key),
        id,
    }
}

#[test]
fn debug_reads_as_the_message_after_the_kinds_name_with_the_id_where_known() {
    let id: Id = "01HF8T5N00V0E6QXCPFM1ZB4K3".parse().unwrap();
    let slug = vec![("slug", KeyValue::Text("hello".into()))];
    let frozen = ErrorKind::FrozenFieldChanged {
        stored_name: "authorId",
        stored_id: id.to_string(),
        field: "author_id",
        stored: "\"ada\"".into(),
        incoming: "\"grace\"".into(),
    };
    let by_key = Error::new(document(slug.clone(), Some(id)), frozen.clone());
    assert_eq!(
        format!("{by_key:?}"),
        format!("FrozenFieldChanged: `posts` {{slug: \"hello\"}} (_id {id}): {frozen}")
    );
    let underivable = Error::new(document(slug, None), ErrorKind::Contention);
    assert_eq!(
        format!("{underivable:?}"),
        format!("Contention: {underivable}")
    );
    let by_id = Error::new(document(Vec::new(), Some(id)), ErrorKind::NotFound);
    assert_eq!(
        format!("{by_id:?}"),
        format!("NotFound: `posts` document {id}: no such document")
    );
    let structure = format!("{by_key:#?}");
    assert!(structure.starts_with("Error {\n"), "{structure}");
    assert!(structure.contains("FrozenFieldChanged {"), "{structure}");
}
