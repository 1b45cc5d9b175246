// Every supported timestamp type, each as the `#[idem(timestamp)]` of one document, giving the
// id the same time part. (`bson::DateTime`, which needs the `mongodb` feature these cases build
// without, is in tests/tests/stores/ids.rs.)

use std::time::{Duration, SystemTime};

use idem_core::Idempotent;

const MILLIS: i64 = 1_700_000_000_123;

#[derive(serde::Serialize, Idempotent)]
struct Signed {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    at: i64,
}

#[derive(serde::Serialize, Idempotent)]
struct Unsigned {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    at: u64,
}

#[derive(serde::Serialize, Idempotent)]
struct System {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    at: SystemTime,
}

#[derive(serde::Serialize, Idempotent)]
struct Chrono {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    at: chrono::DateTime<chrono::Utc>,
}

#[derive(serde::Serialize, Idempotent)]
struct ChronoOffset {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    at: chrono::DateTime<chrono::FixedOffset>,
}

#[derive(serde::Serialize, Idempotent)]
struct Time {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    at: time::OffsetDateTime,
}

fn main() {
    let slug = || "a".to_owned();
    let system = SystemTime::UNIX_EPOCH + Duration::from_millis(MILLIS as u64);
    let chrono = chrono::DateTime::from_timestamp_millis(MILLIS).unwrap();
    let time =
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(MILLIS) * 1_000_000).unwrap();
    let ids = [
        Signed {
            slug: slug(),
            at: MILLIS,
        }
        .id()
        .unwrap(),
        Unsigned {
            slug: slug(),
            at: MILLIS as u64,
        }
        .id()
        .unwrap(),
        System {
            slug: slug(),
            at: system,
        }
        .id()
        .unwrap(),
        Chrono {
            slug: slug(),
            at: chrono,
        }
        .id()
        .unwrap(),
        ChronoOffset {
            slug: slug(),
            at: chrono.fixed_offset(),
        }
        .id()
        .unwrap(),
        Time {
            slug: slug(),
            at: time,
        }
        .id()
        .unwrap(),
    ];
    for id in ids {
        assert_eq!(id, ids[0]);
        assert_eq!(id.timestamp_ms(), MILLIS as u64);
    }
    assert_eq!(ids[0], Time::derive_id(&slug(), &time).unwrap());
}
