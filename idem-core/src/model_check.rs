//! Whether a model given at run time (the `idem` command's flags) is the one the stored documents
//! were written with. A forgotten `--timestamp`, a wrong `--scheme`, or key fields too many, too
//! few, in another order or one of them another field, makes every document idem wrote look
//! misplaced, and `adopt` would move correct documents to wrong ids. Documents idem wrote carry
//! ids with 80 bits of their keys' hash, which no other model reproduces by chance: when a model
//! differing in one such flag places at least [`MIN_EVIDENCE`] of the examined documents and more
//! than twice as many as the given model does, the given model is wrong, and that flag is named.
//! Orphans (a key edited after idem wrote the document) are what the given model misplaces and no
//! candidate places either, so they never make a mismatch.
//!
//! A collection whose documents idem never wrote (ObjectIds, other tools' ids) gives no evidence
//! either way: only documents stored under a ULID are examined. Two flags wrong at once are not
//! recognised, and the candidates' fields are those of the first document examined.

use std::fmt;

use serde_json::{Map, Value};

use crate::audit::derive_from_stored;
use crate::id::IdScheme;
use crate::model::{Field, Model, Role, ID_FIELD};

/// How many documents under a ULID a check examines: enough for a clear majority, few enough to
/// cost a fraction of a second.
pub const DOCUMENTS_EXAMINED: u64 = 1_000;

/// The fewest documents another model must place to count as evidence. One is enough: an id
/// that a model derives carries 80 bits of its keys' hash, which no other model reproduces by
/// chance, and moving even one correct document to a wrong id is the damage this check exists
/// to prevent (a refusal can be overridden; a wrong move cannot be taken back by the flags).
/// A few documents of an older version of the type beside many the flags place are no reason
/// to refuse: the rule also asks for more than twice as many as the flags place.
pub const MIN_EVIDENCE: u64 = 1;

/// The finding of a check: the flags describe another model than the one the stored documents
/// were written with.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ModelMismatch {
    /// Documents stored under a ULID that the check examined.
    pub examined: u64,
    /// How many of them are under the id the given model derives.
    pub placed_by_given: u64,
    /// The change of the flags that places the most of them: `--timestamp publishedAt`,
    /// `no --timestamp`, `--scheme joined`, `--key slug,lang`.
    pub likely_flags: String,
    /// How many of them are under the id the model with that change derives.
    pub placed_by_likely: u64,
}

impl fmt::Display for ModelMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the model given is not the one the documents were written with (likely {}): of {} \
             documents stored under a ULID, {} are under the id it derives and {} under the id \
             derived with {}; adopting would move correct documents to wrong ids",
            self.likely_flags,
            self.examined,
            self.placed_by_given,
            self.placed_by_likely,
            self.likely_flags
        )
    }
}

impl ModelMismatch {
    /// The refusal of an adoption of `model`'s collection or table over this mismatch: nothing
    /// was moved.
    pub(crate) fn refusal(&self, model: &Model) -> crate::error::Error {
        crate::error::Error::schema_mismatch(
            model,
            format!(
                "{self}; nothing was moved (for a deliberate change of the model, adopt with \
                 AdoptOptions::ignoring_model_check)"
            ),
        )
    }
}

/// A model differing from the given one in one flag, and that flag as the command spells it.
struct Candidate {
    model: Model,
    flags: String,
    placed: u64,
}

/// A check in progress: feed it the stored documents with [`ModelCheck::examine`], then ask
/// [`ModelCheck::finding`].
pub(crate) struct ModelCheck<'m> {
    model: &'m Model,
    examined: u64,
    placed_by_given: u64,
    /// Built from the first document examined, whose fields name the candidates' keys and
    /// timestamps.
    candidates: Option<Vec<Candidate>>,
}

impl<'m> ModelCheck<'m> {
    /// A check of `model`.
    pub fn new(model: &'m Model) -> Self {
        ModelCheck {
            model,
            examined: 0,
            placed_by_given: 0,
            candidates: None,
        }
    }

    /// Whether the check has seen enough documents.
    pub fn is_done(&self) -> bool {
        self.examined >= DOCUMENTS_EXAMINED
    }

    /// Whether the check would examine a document stored under `stored_id`: one under a ULID,
    /// while the check is not done. Asked first, so that no other document is converted for it.
    pub fn wants(&self, stored_id: &str) -> bool {
        !self.is_done() && stored_id.parse::<ulid::Ulid>().is_ok()
    }

    /// Examines a stored document: its id as text, and its fields in the neutral form
    /// ([`derive_from_stored`]'s: a date as its milliseconds). Documents not under a ULID are
    /// passed over.
    pub fn examine(&mut self, stored_id: &str, fields: &Map<String, Value>) {
        if !self.wants(stored_id) {
            return;
        }
        self.examined += 1;
        if places(self.model, stored_id, fields) {
            self.placed_by_given += 1;
        }
        let model = self.model;
        let candidates = self
            .candidates
            .get_or_insert_with(|| candidates(model, fields));
        for candidate in candidates.iter_mut() {
            if places(&candidate.model, stored_id, fields) {
                candidate.placed += 1;
            }
        }
    }

    /// The mismatch, if a candidate places at least [`MIN_EVIDENCE`] documents and more than
    /// twice as many as the given model (the first such candidate, in the order flags are tried,
    /// when several place as many).
    pub fn finding(&self) -> Option<ModelMismatch> {
        let best = self
            .candidates
            .iter()
            .flatten()
            .rev()
            .max_by_key(|candidate| candidate.placed)?;
        let convincing =
            best.placed >= MIN_EVIDENCE && best.placed > self.placed_by_given.saturating_mul(2);
        convincing.then(|| ModelMismatch {
            examined: self.examined,
            placed_by_given: self.placed_by_given,
            likely_flags: best.flags.clone(),
            placed_by_likely: best.placed,
        })
    }
}

/// Whether `model` derives `stored_id` from the document's keys and timestamp.
fn places(model: &Model, stored_id: &str, fields: &Map<String, Value>) -> bool {
    let value = |field: &Field| fields.get(field.stored_name()).cloned();
    let key: Vec<Value> = model
        .natural_key_fields()
        .map(|field| value(field).unwrap_or(Value::Null))
        .collect();
    let timestamp = model.timestamp_field().and_then(value);
    derive_from_stored(model, &key, timestamp.as_ref())
        .is_ok_and(|derived| derived.to_string() == stored_id)
}

/// The models that differ from `model` in one flag, with the stored fields of `example` as the
/// keys and timestamps they may name: the other id scheme; the timestamp left out, or taken from
/// another field holding an integer; one key field left out, two swapped, one more inserted at
/// any place, or one replaced by another field.
fn candidates(model: &Model, example: &Map<String, Value>) -> Vec<Candidate> {
    let keys: Vec<&'static str> = model.key_fields().map(Field::stored_name).collect();
    let timestamp = model.timestamp_field().map(Field::stored_name);
    let other_fields: Vec<&str> = example
        .keys()
        .map(String::as_str)
        .filter(|name| {
            *name != ID_FIELD
                && *name != model.hash_field()
                && !keys.contains(name)
                && Some(*name) != timestamp
        })
        .collect();
    let mut out = Vec::new();
    let mut push = |keys: &[&str], timestamp: Option<&str>, scheme: IdScheme, flags: String| {
        out.push(Candidate {
            model: model_of(model, keys, timestamp, scheme),
            flags,
            placed: 0,
        });
    };
    let scheme = model.id_scheme();
    let other_scheme = match scheme {
        IdScheme::V1 => IdScheme::Joined,
        IdScheme::Joined => IdScheme::V1,
    };
    push(
        &keys,
        timestamp,
        other_scheme,
        format!("--scheme {}", scheme_flag(other_scheme)),
    );
    if timestamp.is_some() {
        push(&keys, None, scheme, "no --timestamp".to_owned());
    }
    for name in &other_fields {
        if example.get(*name).is_some_and(Value::is_i64) {
            push(&keys, Some(name), scheme, format!("--timestamp {name}"));
        }
    }
    if keys.len() > 1 {
        for left_out in 0..keys.len() {
            let fewer: Vec<&str> = keys
                .iter()
                .enumerate()
                .filter(|&(index, _)| index != left_out)
                .map(|(_, name)| *name)
                .collect();
            push(
                &fewer,
                timestamp,
                scheme,
                format!("--key {}", fewer.join(",")),
            );
        }
    }
    // Two keys in each other's place.
    for first in 0..keys.len() {
        for second in first + 1..keys.len() {
            let mut swapped = keys.clone();
            swapped.swap(first, second);
            push(
                &swapped,
                timestamp,
                scheme,
                format!("--key {}", swapped.join(",")),
            );
        }
    }
    let keyable = |name: &&&str| {
        matches!(
            example.get(**name),
            Some(Value::String(_) | Value::Bool(_) | Value::Number(_))
        )
    };
    for name in other_fields.iter().filter(keyable) {
        // One key more, at any place.
        for at in 0..=keys.len() {
            let mut more: Vec<&str> = keys.clone();
            more.insert(at, name);
            push(
                &more,
                timestamp,
                scheme,
                format!("--key {}", more.join(",")),
            );
        }
        // One key another field.
        for at in 0..keys.len() {
            let mut replaced: Vec<&str> = keys.clone();
            replaced[at] = name;
            push(
                &replaced,
                timestamp,
                scheme,
                format!("--key {}", replaced.join(",")),
            );
        }
    }
    out
}

/// A model like `model` with these keys, timestamp and scheme: what derives ids, nothing more.
fn model_of(model: &Model, keys: &[&str], timestamp: Option<&str>, scheme: IdScheme) -> Model {
    let fields: Vec<Field> = keys
        .iter()
        .map(|name| (*name, Role::Key))
        .chain(timestamp.map(|name| (name, Role::Timestamp)))
        .map(|(name, role)| {
            let name = crate::intern::name(name);
            Field::new(name, name, role)
        })
        .collect();
    Model::new(
        model.collection(),
        scheme,
        model.hash_field(),
        crate::intern::fields(fields),
    )
}

/// The `--scheme` value of `scheme`.
fn scheme_flag(scheme: IdScheme) -> &'static str {
    match scheme {
        IdScheme::V1 => "v1",
        IdScheme::Joined => "joined",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static WRITTEN_WITH: Model = Model::new(
        "posts",
        IdScheme::V1,
        "sourceHash",
        &[
            Field::new("slug", "slug", Role::Key),
            Field::new("publishedAt", "publishedAt", Role::Timestamp),
        ],
    );
    static WITHOUT_TIMESTAMP: Model = Model::new(
        "posts",
        IdScheme::V1,
        "sourceHash",
        &[Field::new("slug", "slug", Role::Key)],
    );

    /// A document `WRITTEN_WITH` stored, under the id it derives.
    fn written(n: i64) -> (String, Map<String, Value>) {
        let fields: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "slug": format!("post-{n}"),
            "publishedAt": 1_700_000_000_000_i64 + n,
            "title": "Title",
        }))
        .unwrap();
        let id = derive_from_stored(
            &WRITTEN_WITH,
            &[fields["slug"].clone()],
            Some(&fields["publishedAt"]),
        )
        .unwrap();
        (id.to_string(), fields)
    }

    #[test]
    fn a_forgotten_timestamp_is_named() {
        let mut check = ModelCheck::new(&WITHOUT_TIMESTAMP);
        for n in 0..10 {
            let (id, fields) = written(n);
            check.examine(&id, &fields);
        }
        let finding = check.finding().expect("a mismatch");
        assert_eq!(finding.likely_flags, "--timestamp publishedAt");
        assert_eq!((finding.examined, finding.placed_by_given), (10, 0));
        assert_eq!(finding.placed_by_likely, 10);
    }

    #[test]
    fn the_right_model_with_a_few_orphans_is_no_mismatch() {
        let mut check = ModelCheck::new(&WRITTEN_WITH);
        for n in 0..10 {
            let (id, mut fields) = written(n);
            if n < 3 {
                // An orphan: its timestamp was edited after idem wrote it.
                fields.insert("publishedAt".into(), Value::from(n));
            }
            check.examine(&id, &fields);
        }
        assert_eq!(check.finding(), None);
    }

    #[test]
    fn documents_no_model_places_do_not_hide_a_mismatch() {
        // Most documents are under random ULIDs (the application's own, before idem): the
        // documents idem wrote are still evidence enough.
        let mut check = ModelCheck::new(&WITHOUT_TIMESTAMP);
        for n in 0..60 {
            let (_, fields) = written(n);
            check.examine(&ulid::Ulid::from_parts(1, n as u128).to_string(), &fields);
        }
        for n in 60..100 {
            let (id, fields) = written(n);
            check.examine(&id, &fields);
        }
        let finding = check.finding().expect("a mismatch");
        assert_eq!(finding.likely_flags, "--timestamp publishedAt");
        assert_eq!(finding.placed_by_likely, 40);
    }

    #[test]
    fn one_document_of_another_model_is_evidence_when_the_flags_place_none() {
        let mut check = ModelCheck::new(&WITHOUT_TIMESTAMP);
        let (id, fields) = written(0);
        check.examine(&id, &fields);
        let finding = check.finding().expect("a mismatch");
        assert_eq!(finding.likely_flags, "--timestamp publishedAt");
    }

    #[test]
    fn a_few_documents_of_an_older_model_beside_many_of_the_given_one_are_no_mismatch() {
        let mut check = ModelCheck::new(&WRITTEN_WITH);
        for n in 0..20 {
            let (id, fields) = written(n);
            check.examine(&id, &fields);
        }
        // Two written before the timestamp was part of the id.
        for n in 20..22 {
            let (_, mut fields) = written(n);
            fields.remove("publishedAt");
            let old = model_of(&WRITTEN_WITH, &["slug"], None, IdScheme::V1);
            let key = [fields["slug"].clone()];
            let id = derive_from_stored(&old, &key, None).unwrap();
            fields.insert("publishedAt".into(), Value::from(n));
            check.examine(&id.to_string(), &fields);
        }
        assert_eq!(check.finding(), None);
    }

    #[test]
    fn keys_in_another_order_are_named() {
        static SLUG_LANG: Model = Model::new(
            "posts",
            IdScheme::V1,
            "sourceHash",
            &[
                Field::new("slug", "slug", Role::Key),
                Field::new("lang", "lang", Role::Key),
            ],
        );
        static LANG_SLUG: Model = Model::new(
            "posts",
            IdScheme::V1,
            "sourceHash",
            &[
                Field::new("lang", "lang", Role::Key),
                Field::new("slug", "slug", Role::Key),
            ],
        );
        let mut check = ModelCheck::new(&LANG_SLUG);
        for n in 0..5 {
            let fields: Map<String, Value> = serde_json::from_value(
                serde_json::json!({ "slug": format!("post-{n}"), "lang": "en" }),
            )
            .unwrap();
            let key = [fields["slug"].clone(), fields["lang"].clone()];
            let id = derive_from_stored(&SLUG_LANG, &key, None).unwrap();
            check.examine(&id.to_string(), &fields);
        }
        assert_eq!(
            check.finding().map(|finding| finding.likely_flags),
            Some("--key slug,lang".to_owned())
        );
    }

    #[test]
    fn documents_not_under_a_ulid_give_no_evidence() {
        let mut check = ModelCheck::new(&WITHOUT_TIMESTAMP);
        for n in 0..10 {
            let (_, fields) = written(n);
            check.examine(&format!("65000000000000000000000{n}"), &fields);
        }
        assert_eq!(check.finding(), None);
        assert_eq!(check.examined, 0);
    }
}
