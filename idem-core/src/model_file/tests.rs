use super::*;

fn file(fields: &str) -> String {
    format!(
        r#"{{"format": "idem-model/1", "collection": "posts", "id_scheme": "v1",
            "hash_field": "sourceHash", "hash_algorithm": "sha256", "fields": {fields}}}"#
    )
}

#[test]
fn a_file_reads_back_as_the_model_it_describes() {
    let text = file(
        r#"[{"name": "slug", "role": "key"}, {"name": "title"},
            {"name": "comments", "role": "push_by", "item_key": "id"},
            {"name": "deletedAt", "role": "tombstone", "optional": true}]"#,
    );
    let read = ModelFile::from_json(&text).unwrap();
    let model = read.model();
    assert_eq!(
        read.field_order(),
        ["slug", "title", "comments", "deletedAt"]
    );
    assert_eq!(model.fields().len(), 3, "the fields with a role");
    assert_eq!(model.pushed_fields().next().unwrap().item_key(), "id");
    assert!(model.tombstone_field().unwrap().null_is_unwritten());
    assert!(!model.is_hashed("comments") && model.is_hashed("title"));
    assert_eq!(ModelFile::from_json(&read.to_json()).unwrap(), read);
}

#[test]
fn a_wrong_file_names_the_field() {
    let wrong = |fields: &str| ModelFile::from_json(&file(fields)).unwrap_err();
    assert!(
        wrong(r#"[{"name": "slug", "role": "key"}, {"name": "v", "role": "efect"}]"#)
            .contains("`fields[1]` (`v`): unknown role \"efect\""),
    );
    assert!(
        wrong(r#"[{"name": "slug", "role": "key"}, {"name": "slug"}]"#)
            .contains("`fields[1]` (`slug`): listed twice")
    );
    assert!(wrong(r#"[{"name": "title"}]"#).contains("no field has the role `key`"));
    assert!(
        wrong(r#"[{"name": "slug", "role": "key"}, {"name": "c", "role": "push_by"}]"#)
            .contains("`fields[1]` (`c`): a `push_by` list needs its `item_key`")
    );
    assert!(wrong(r#"[{"name": "slug", "role": "key", "colour": 1}]"#)
        .contains("unknown field `colour`"));
}

/// Each rule of the derive a file can break is checked, naming the field.
#[test]
fn a_file_the_derive_would_refuse_is_refused_naming_the_field() {
    let wrong = |fields: &str| ModelFile::from_json(&file(fields)).unwrap_err();
    let cases = [
        (
            r#"[{"name": "slug", "role": "key"}, {"name": "rid", "role": "idempotency_key"}]"#,
            "`fields[1]` (`rid`): `idempotency_key` is for event types with no natural key, \
             and the file has `key` fields (`slug`)",
        ),
        (
            r#"[{"name": "slug", "role": "key", "optional": true}]"#,
            "`fields[0]` (`slug`): the role `key` is never `optional`",
        ),
        (
            r#"[{"name": "rid", "role": "idempotency_key", "optional": true}]"#,
            "`fields[0]` (`rid`): the role `idempotency_key` is never `optional`",
        ),
        (
            r#"[{"name": "slug", "role": "key"}, {"name": "at", "role": "timestamp", "optional": true}]"#,
            "`fields[1]` (`at`): the role `timestamp` is never `optional`",
        ),
        (
            r#"[{"name": "slug", "role": "key"}, {"name": "title", "optional": true}]"#,
            "`fields[1]` (`title`): `optional` is for a field with a role",
        ),
        (
            r#"[{"name": "slug", "role": "key"}, {"name": "gone", "role": "tombstone"}]"#,
            "`fields[1]` (`gone`): a `tombstone` field is `None` until the document is deleted",
        ),
        (
            r#"[{"name": "rid", "role": "idempotency_key"}, {"name": "at", "role": "timestamp"}]"#,
            "`fields[1]` (`at`): `timestamp` has no use on an event type",
        ),
        (
            r#"[{"name": "slug", "role": "key"}, {"name": "a", "role": "version"}, {"name": "b", "role": "version"}]"#,
            "`fields[2]` (`b`): only one field can have the role `version`: `a` already has it",
        ),
        (
            r#"[{"name": "slug", "role": "key"}, {"name": "meta.at", "role": "frozen"}]"#,
            "`fields[1]` (`meta.at`): the name of a `frozen` field cannot hold a `.`",
        ),
    ];
    for (fields, expected) in cases {
        let problem = wrong(fields);
        assert!(problem.contains(expected), "{fields}: {problem}");
    }
    let header = |collection: &str, hash_field: &str| {
        let text = file(r#"[{"name": "slug", "role": "key"}]"#)
            .replace("\"posts\"", &format!("{collection:?}"))
            .replace("\"sourceHash\"", &format!("{hash_field:?}"));
        ModelFile::from_json(&text).unwrap_err()
    };
    assert!(header("po$ts", "sourceHash").contains("`collection` is \"po$ts\""));
    assert!(header("posts", "meta.hash").contains("`hash_field` is \"meta.hash\""));
    assert!(header("posts", "_id").contains("`hash_field` is \"_id\""));
}

/// A flattened field's entries are hashed with the fields as one map, which a model given at
/// run time cannot redo: the file is refused, naming the field when it is known.
#[test]
fn a_file_of_a_type_that_flattens_is_refused() {
    let named = ModelFile::from_json(&file(
        r#"[{"name": "slug", "role": "key"}, {"name": "extra", "flattened": true}]"#,
    ))
    .unwrap_err();
    assert!(
        named.contains("the type flattens `extra` (`#[serde(flatten)]`)")
            && named.contains("`store.audit::<T>()`, `store.adopt::<T>()`"),
        "{named}"
    );
    let mut unnamed = file(r#"[{"name": "slug", "role": "key"}]"#);
    unnamed.pop();
    unnamed.push_str(r#", "flattened": true}"#);
    let unnamed = ModelFile::from_json(&unnamed).unwrap_err();
    assert!(unnamed.contains("the type flattens a field"), "{unnamed}");
}
