//! What every SQL backend shares: the table's layout ([`layout`]), a document encoded as its
//! row and a stored row read for the engine ([`row`]), the JSON rules for structured columns
//! ([`json`]), and how an audit or an adoption judges a row ([`judge`]). Each dialect's types,
//! statements and error codes are its driver's.

#[cfg(feature = "_sql_store")]
pub(crate) mod adoption;
pub(crate) mod audit;
pub(crate) mod change;
#[cfg(feature = "_sql_store")]
pub(crate) mod dialect;
#[cfg(feature = "_sql_store")]
pub(crate) mod effects;
#[cfg(any(feature = "_postgres", feature = "_marker_store"))]
pub(crate) mod guard;
pub(crate) mod json;
pub(crate) mod judge;
pub(crate) mod layout;
#[cfg(feature = "_marker_store")]
pub(crate) mod marker;
#[cfg(feature = "_marker_store")]
pub(crate) mod marker_sql;
#[cfg(feature = "_marker_store")]
pub(crate) mod marker_table;
#[cfg(feature = "_sql_store")]
pub(crate) mod reads;
pub(crate) mod row;
pub(crate) mod scan;
#[cfg(feature = "_sql_store")]
pub(crate) mod session;
#[cfg(feature = "_sql_store")]
pub(crate) mod sqlx_api;
#[cfg(feature = "_marker_store")]
pub(crate) mod sqlx_marker;
#[cfg(feature = "_sqlx_store")]
pub(crate) mod sqlx_wire;
#[cfg(feature = "_sql_store")]
pub(crate) mod store;
#[cfg(feature = "_sql_store")]
pub(crate) mod table_check;
#[cfg(feature = "_sql_store")]
pub(crate) mod takeover;
pub(crate) mod texts;
#[cfg(feature = "_sql_store")]
pub(crate) mod wire;
#[cfg(any(feature = "_postgres", feature = "_marker_store"))]
pub(crate) mod words;

/// The [`crate::engine::Driver`] methods that read incoming and stored rows, as every SQL driver
/// answers them: its rows are [`row`]'s, read by [`row::RowReader`] over the driver's table
/// (`self.table`).
macro_rules! reads_rows_as_sql {
    () => {
        type Doc = $crate::sql::row::PreparedRow;
        type Light = $crate::sql::row::LightRow;
        type Stored = $crate::sql::row::StoredRow;

        fn light_of<'d>(
            &self,
            doc: &'d $crate::sql::row::PreparedRow,
        ) -> &'d $crate::sql::row::LightRow {
            &doc.light
        }

        fn incoming_value(
            &self,
            doc: &$crate::sql::row::LightRow,
            field: &$crate::model::Field,
        ) -> ::serde_json::Value {
            $crate::sql::row::RowReader::new(self.table).incoming_value(doc, field)
        }

        fn incoming_shown(
            &self,
            doc: &$crate::sql::row::LightRow,
            field: &$crate::model::Field,
        ) -> String {
            $crate::sql::row::RowReader::new(self.table).incoming_shown(doc, field)
        }

        fn stored_id(&self, stored: &$crate::sql::row::StoredRow) -> Option<String> {
            Some(stored.id.clone())
        }

        fn is_tombstoned(&self, stored: &$crate::sql::row::StoredRow) -> bool {
            stored.tombstoned
        }

        fn stored_hash<'s>(&self, stored: &'s $crate::sql::row::StoredRow) -> Option<&'s str> {
            stored.hash.as_deref()
        }

        fn stored_digest<'s>(
            &self,
            stored: &'s $crate::sql::row::StoredRow,
            _: &$crate::model::Field,
        ) -> $crate::engine::StoredDigest<'s> {
            stored.digest()
        }

        fn stored_version<'s>(
            &self,
            stored: &'s $crate::sql::row::StoredRow,
        ) -> $crate::verdict::StoredVersion<'s> {
            stored.version()
        }

        fn stored_value(
            &self,
            stored: &$crate::sql::row::StoredRow,
            field: &$crate::model::Field,
        ) -> Option<::serde_json::Value> {
            $crate::sql::row::RowReader::new(self.table).stored_value(stored, field)
        }

        fn stored_shown(
            &self,
            stored: &$crate::sql::row::StoredRow,
            field: &$crate::model::Field,
        ) -> Option<String> {
            $crate::sql::row::RowReader::new(self.table).stored_shown(stored, field)
        }

        fn key_differs(
            &self,
            doc: &$crate::sql::row::LightRow,
            stored: &$crate::sql::row::StoredRow,
        ) -> Option<&'static $crate::model::Field> {
            $crate::sql::row::RowReader::new(self.table).key_differs(doc, stored)
        }
    };
}
pub(crate) use reads_rows_as_sql;

/// The [`crate::engine::batch::BatchDriver`] methods that prepare a document's row, as every SQL
/// driver answers them: for the driver's table (`self.table`), light where a lookup comes first,
/// with nothing to make ready or read first, the store's (`self.store`) threshold for shortcuts,
/// and two chunks in flight where the store pipelines and so does its wire (`self.wire`).
macro_rules! prepares_rows_as_sql {
    () => {
        fn shortcut_min_docs(&self) -> usize {
            self.store.shortcut_min_docs
        }

        // Where requests pipeline on the session ([`crate::sql::wire::Wire::pipelines_chunks`]).
        fn chunks_in_flight(&self) -> usize {
            match self.store.pipelining && $crate::sql::wire::Wire::pipelines_chunks(self.wire) {
                true => 2,
                false => 1,
            }
        }

        // The table was checked before the documents were prepared for it.
        async fn ready(&self) -> Result<(), $crate::Error> {
            Ok(())
        }

        // The write reads (or returns) the rows it left alone: nothing to read first.
        async fn read_many(
            &self,
            _docs: &[&$crate::sql::row::PreparedRow],
        ) -> Result<Option<Vec<Option<$crate::sql::row::StoredRow>>>, $crate::Error> {
            Ok(None)
        }

        fn prepare<T: $crate::Idempotent + ::serde::Serialize>(
            &self,
            doc: &T,
        ) -> Result<$crate::sql::row::PreparedRow, $crate::Error> {
            $crate::sql::row::PreparedRow::new(doc, self.table)
        }

        fn prepare_light<T: $crate::Idempotent + ::serde::Serialize>(
            &self,
            doc: &T,
        ) -> Result<
            $crate::engine::batch::Ready<$crate::sql::row::LightRow, $crate::sql::row::PreparedRow>,
            $crate::Error,
        > {
            $crate::sql::row::prepare_light(doc, self.table)
        }

        fn complete<T: $crate::Idempotent + ::serde::Serialize>(
            &self,
            light: &$crate::sql::row::LightRow,
            doc: &T,
        ) -> Result<$crate::sql::row::PreparedRow, $crate::Error> {
            $crate::sql::row::PreparedRow::completed(light, doc, self.table)
        }
    };
}

pub(crate) use prepares_rows_as_sql;
