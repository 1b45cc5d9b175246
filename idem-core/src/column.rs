//! What each stored field holds, as far as a table's column types need it: backend-neutral
//! metadata the derive generates from the fields' Rust types.
//!
//! The derive cannot see what a type serializes to, so it asks the type: a field whose type is a
//! string, an integer that fits `i64`, a float or a `bool` (or an `Option` of one) holds that
//! scalar; every other type (nested structs, sequences, maps, `u64`, dates) holds a structured
//! value. A backend with typed columns gives the scalars their own column types and the rest a
//! JSON column; a field with a custom `Serialize` that writes another kind than its type suggests
//! is refused at write time with the field's name.

use std::marker::PhantomData;

/// The kind of value a stored field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ColumnShape {
    /// A string (`String`, `&str`, `char`, `Box<str>`, `Cow<str>`).
    Text,
    /// An integer that fits in `i64` (`i8` to `i64`, `u8` to `u32`).
    Integer,
    /// A float (`f32`, `f64`).
    Float,
    /// A `bool`.
    Boolean,
    /// Anything else: nested structs, sequences, maps, integers wider than `i64`, dates.
    Structured,
    /// A `#[serde(flatten)]` field: its entries are stored beside the other fields, under names
    /// the type does not declare.
    Flattened,
}

/// One stored field: the name serde writes, the kind of value it holds, and whether serde may
/// do without it. The tag of an internally tagged struct (`#[serde(tag = "kind")]`) is one too:
/// a text no Rust field declares, holding the type's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Column {
    stored_name: &'static str,
    shape: ColumnShape,
    may_be_absent: bool,
}

impl Column {
    /// A stored field that serde always writes and needs back.
    pub const fn new(stored_name: &'static str, shape: ColumnShape) -> Self {
        Column {
            stored_name,
            shape,
            may_be_absent: false,
        }
    }

    /// The same field, which serde may leave out. A typed column cannot tell a field left out
    /// from one stored as null: a NULL in this column reads back as absent, so serde applies
    /// its default, as a document without the field reads on MongoDB; in any other column it
    /// reads back as null, as a field MongoDB stores as null, which is what a field that is not
    /// an `Option` but serializes as null (`()`, `serde_json::Value::Null`) needs.
    ///
    /// The derive marks a field with `skip_serializing_if`, and a field serde can default
    /// (`#[serde(default)]` on it or on the type) whose type never serializes as null: a NULL
    /// there is no value serde wrote, but a column a migration added to rows written before.
    /// A nullable field with a default reads NULL back as the `None` (or null) it wrote, not as
    /// its default.
    pub const fn may_be_absent(mut self) -> Self {
        self.may_be_absent = true;
        self
    }

    /// Whether serde may leave the field out or read it back without it.
    pub const fn can_be_absent(&self) -> bool {
        self.may_be_absent
    }

    /// The name serde writes.
    pub const fn stored_name(&self) -> &'static str {
        self.stored_name
    }

    /// The kind of value it holds.
    pub const fn shape(&self) -> ColumnShape {
        self.shape
    }
}

/// Asks a field's type for its [`ColumnShape`] in generated code: `(&&Probe::<T>::NEW).shape()`
/// finds the most specific of the traits below by auto-ref, so a type without a scalar impl
/// falls through to `Structured`. Not public API.
#[doc(hidden)]
pub struct Probe<T: ?Sized>(PhantomData<T>);

impl<T: ?Sized> Probe<T> {
    /// The probe for `T`.
    pub const NEW: Self = Probe(PhantomData);
}

/// A scalar type, found first (two auto-refs deep).
#[doc(hidden)]
pub trait ScalarShape {
    /// The scalar's shape.
    fn shape(&self) -> ColumnShape;
}

/// Every other type, found last.
#[doc(hidden)]
pub trait StructuredShape {
    /// [`ColumnShape::Structured`].
    fn shape(&self) -> ColumnShape {
        ColumnShape::Structured
    }
}

impl<T: ?Sized> StructuredShape for Probe<T> {}

/// A type whose value may serialize as null (`Option`, `()`, `serde_json::Value`), found first.
#[doc(hidden)]
pub trait NullableValue {
    /// `true`.
    fn may_be_null(&self) -> bool {
        true
    }
}

/// Every other type, found last.
#[doc(hidden)]
pub trait NeverNull {
    /// `false`.
    fn may_be_null(&self) -> bool {
        false
    }
}

impl<T: Nullable + ?Sized> NullableValue for &Probe<T> {}
impl<T: ?Sized> NeverNull for Probe<T> {}

/// The types whose value may serialize as null.
#[doc(hidden)]
pub trait Nullable {}

impl<T> Nullable for Option<T> {}
impl Nullable for () {}
#[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
impl Nullable for serde_json::Value {}

/// The scalar types and their shapes.
#[doc(hidden)]
pub trait Scalar {
    /// The shape.
    const SHAPE: ColumnShape;
}

/// A scalar that is not itself an `Option`: what an `Option` of a scalar column may hold. A
/// double option (`Option<Option<T>>`, serde's "not given, cleared or set") is no scalar: its
/// column is `jsonb`, which tells a written null from a field left out, as no scalar column can.
#[doc(hidden)]
pub trait NotAnOption {}

macro_rules! scalars {
    ($shape:ident: $($ty:ty),*) => {
        $(impl Scalar for $ty {
            const SHAPE: ColumnShape = ColumnShape::$shape;
        }
        impl NotAnOption for $ty {})*
    };
}

// Every text and integer a key may be ([`crate::StoredKey`]) among them: a key column of
// another shape would hold JSON, which a table made for the `String` the type once had refuses.
scalars!(
    Text: String,
    str,
    char,
    Box<str>,
    std::borrow::Cow<'_, str>,
    std::sync::Arc<str>,
    std::rc::Rc<str>
);
scalars!(Integer: i8, i16, i32, i64, isize, u8, u16, u32);
scalars!(Float: f32, f64);
scalars!(Boolean: bool);

impl<T: Scalar + ?Sized> Scalar for &T {
    const SHAPE: ColumnShape = T::SHAPE;
}

impl<T: NotAnOption + ?Sized> NotAnOption for &T {}

impl<T: Scalar + NotAnOption> Scalar for Option<T> {
    const SHAPE: ColumnShape = T::SHAPE;
}

impl<T: Scalar + ?Sized> ScalarShape for &Probe<T> {
    fn shape(&self) -> ColumnShape {
        T::SHAPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The borrows choose the impl: clippy sees them as needless where the fallback is taken.
    #[allow(clippy::needless_borrow)]
    #[test]
    fn scalars_are_found_by_auto_ref_and_the_rest_is_structured() {
        assert_eq!((&&Probe::<String>::NEW).shape(), ColumnShape::Text);
        assert_eq!((&&Probe::<Option<i64>>::NEW).shape(), ColumnShape::Integer);
        assert_eq!((&&Probe::<u32>::NEW).shape(), ColumnShape::Integer);
        assert_eq!((&&Probe::<isize>::NEW).shape(), ColumnShape::Integer);
        assert_eq!(
            (&&Probe::<std::sync::Arc<str>>::NEW).shape(),
            ColumnShape::Text
        );
        assert_eq!(
            (&&Probe::<std::rc::Rc<str>>::NEW).shape(),
            ColumnShape::Text
        );
        assert_eq!((&&Probe::<u64>::NEW).shape(), ColumnShape::Structured);
        assert_eq!((&&Probe::<f64>::NEW).shape(), ColumnShape::Float);
        assert_eq!((&&Probe::<bool>::NEW).shape(), ColumnShape::Boolean);
        assert_eq!(
            (&&Probe::<Vec<String>>::NEW).shape(),
            ColumnShape::Structured
        );
        assert_eq!((&&Probe::<Option<&str>>::NEW).shape(), ColumnShape::Text);
        // A double option is `jsonb`: a written null and a field left out differ there.
        assert_eq!(
            (&&Probe::<Option<Option<i64>>>::NEW).shape(),
            ColumnShape::Structured
        );
    }
}
