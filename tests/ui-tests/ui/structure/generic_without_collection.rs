use idem_core::Idempotent;

// `Wrapper<String>` and `Wrapper<u32>` would share the collection `wrapper`.
#[derive(serde::Serialize, Idempotent)]
struct Wrapper<T> {
    #[idem(key)]
    slug: String,
    payload: T,
}

// A const parameter too.
#[derive(serde::Serialize, Idempotent)]
struct Sized<const N: usize> {
    #[idem(key)]
    slug: String,
}

// A lifetime alone needs no name: it never changes what is stored.
#[derive(serde::Serialize, Idempotent)]
struct Borrowed<'a> {
    #[idem(key)]
    slug: &'a str,
}

fn main() {}
