// Every stored key type, each as a `#[idem(key)]` field of one document. (`Rc<str>` is a key
// type too, but a document holding one is not `Sync`, which the generated `upsert` requires.)
// `u64`, `usize`, `u128` and `i128` derive ids (`derive_id` takes them) but are not stored keys:
// see tests/ui-tests/ui/types/key_u64.rs.

use std::borrow::Cow;
use std::sync::Arc;

use idem_core::{Idempotent, KeyValue};

#[derive(serde::Serialize, Idempotent)]
struct AllKeys {
    #[idem(key)]
    string: String,
    #[idem(key)]
    static_str: &'static str,
    #[idem(key)]
    boxed: Box<str>,
    // serde serializes `Arc<str>` only with its `rc` feature; this spells it out instead.
    #[idem(key)]
    #[serde(serialize_with = "serialize_str")]
    arc: Arc<str>,
    #[idem(key)]
    cow: Cow<'static, str>,
    #[idem(key)]
    character: char,
    #[idem(key)]
    flag: bool,
    #[idem(key)]
    u8: u8,
    #[idem(key)]
    u16: u16,
    #[idem(key)]
    u32: u32,
    #[idem(key)]
    i8: i8,
    #[idem(key)]
    i16: i16,
    #[idem(key)]
    i32: i32,
    #[idem(key)]
    i64: i64,
    #[idem(key)]
    isize: isize,
}

fn serialize_str<S: serde::Serializer>(text: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(text)
}

fn main() {
    let doc = AllKeys {
        string: "s".to_owned(),
        static_str: "t",
        boxed: "b".into(),
        arc: "a".into(),
        cow: Cow::Borrowed("c"),
        character: 'x',
        flag: true,
        u8: 1,
        u16: 2,
        u32: 3,
        i8: -1,
        i16: -2,
        i32: -3,
        i64: -4,
        isize: -5,
    };
    let id = doc.id().unwrap();
    assert_eq!(id.timestamp_ms(), 0);
    assert_eq!(
        id,
        AllKeys::derive_id(
            &doc.string,
            &doc.static_str,
            &doc.boxed,
            &doc.arc,
            &doc.cow,
            &doc.character,
            &doc.flag,
            &doc.u8,
            &doc.u16,
            &doc.u32,
            &doc.i8,
            &doc.i16,
            &doc.i32,
            &doc.i64,
            &doc.isize,
        )
        .unwrap()
    );
    let key = doc.natural_key();
    assert_eq!(key.parts().len(), 15);
    assert_eq!(
        key.parts()[5],
        ("character", KeyValue::Text("x".to_owned()))
    );
    assert_eq!(key.parts()[6], ("flag", KeyValue::Bool(true)));
    assert_eq!(key.parts()[13], ("i64", KeyValue::Integer(-4)));
    // The same values, borrowed in place: the natural key built from them is the one above.
    let borrowed = doc.with_key_values(|values| {
        idem_core::__private::natural_key(&<AllKeys as Idempotent>::MODEL, values)
    });
    assert_eq!(borrowed, key);
}
