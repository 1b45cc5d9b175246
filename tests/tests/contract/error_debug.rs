//! An error printed with `{:?}`, as a `main` returning `Result<_, Box<dyn Error>>` prints it:
//! the kind's name, the document with its id wherever the id is known, and the message; `{:#?}`
//! keeps the structure. A document whose id could not be derived shows none.

use idem_core::{Error, ErrorKind};
use idem_tests::backends::fresh_backends;
use idem_tests::fixtures::{post, Post};

/// A frozen field's refusal, from a single upsert and from a batch, reads as its message after
/// the kind's name, and shows the id the document derives.
#[tokio::test]
async fn a_refusal_shown_with_debug_reads_as_its_message_and_shows_the_id() {
    for db in fresh_backends("error_debug").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        let other_author = Post {
            author_id: "grace".into(),
            ..post()
        };
        let id = post().id().unwrap();
        let single = db.upsert(&other_author).await.unwrap_err();
        let report = db
            .upsert_many(std::slice::from_ref(&other_author))
            .await
            .unwrap();
        let (_, batched) = report.errors().next().expect("the batch refuses it");
        for error in [&single, batched] {
            assert!(
                matches!(error.kind(), ErrorKind::FrozenFieldChanged { .. }),
                "{db}: {error}"
            );
            assert_eq!(error.document().id, Some(id), "{db}");
            let shown = format!("{error:?}");
            assert_eq!(
                shown,
                format!(
                    "FrozenFieldChanged: `posts` {{slug: \"hello-world\", lang: \"en\"}} (_id {id}): {}",
                    error.kind()
                ),
                "{db}"
            );
            assert!(
                shown.contains("field `author_id` (stored as `authorId`) may not change"),
                "{db}: {shown}"
            );
            let structure = format!("{error:#?}");
            assert!(
                structure.contains("FrozenFieldChanged {"),
                "{db}: {structure}"
            );
            assert!(structure.contains("id: Some("), "{db}: {structure}");
        }
        let returned_from_main: Box<dyn std::error::Error> = Box::new(single.clone());
        assert_eq!(
            format!("{returned_from_main:?}"),
            format!("{single:?}"),
            "{db}"
        );
    }
}

/// An id whose derivation failed is not made up: the error names the document by its natural
/// key alone.
#[tokio::test]
async fn an_error_whose_id_cannot_be_derived_shows_no_id() {
    for db in fresh_backends("error_debug_no_id").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        let early = Post {
            published_at: -1,
            ..post()
        };
        let error: Error = db.upsert(&early).await.unwrap_err();
        assert!(
            matches!(error.kind(), ErrorKind::TimestampOutOfRange { .. }),
            "{db}: {error}"
        );
        assert_eq!(error.document().id, None, "{db}");
        assert_eq!(
            format!("{error:?}"),
            format!("TimestampOutOfRange: {error}"),
            "{db}"
        );
    }
}
