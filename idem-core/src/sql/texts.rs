//! The texts of a row's sent columns, held in one buffer.
//!
//! A row to write was a `String` for each column it sends. A batch of new rows is bound by the
//! client's thread preparing them, and most of that thread's time went to the allocator:
//! allocating each text, then freeing each once the chunk was written. Writing them one after
//! another into one buffer, sized from the rows before, costs one allocation per row for every
//! text it holds.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The texts of a row's sent columns, in [`super::layout::Layout::sent`] order.
#[derive(Debug, Default)]
pub(crate) struct ColumnTexts {
    /// Every text, one after another.
    buffer: String,
    /// Where each column's text is in `buffer`: `None` is NULL.
    spans: Vec<Option<(usize, usize)>>,
}

impl ColumnTexts {
    /// `columns` columns, each NULL, with room for the texts of a row like the last one `sizes`
    /// saw.
    pub fn new(columns: usize, sizes: &RowSizes) -> Self {
        ColumnTexts {
            buffer: String::with_capacity(sizes.expected()),
            spans: vec![None; columns],
        }
    }

    /// Writes column `at`'s text with `write`, which appends it to the buffer it is given and
    /// says whether there is a text (`false`: NULL, whatever it appended). A failed `write` leaves
    /// the column as it was.
    pub fn write<E>(
        &mut self,
        at: usize,
        write: impl FnOnce(&mut String) -> Result<bool, E>,
    ) -> Result<(), E> {
        let start = self.buffer.len();
        let written = write(&mut self.buffer);
        let end = self.buffer.len();
        match written {
            Ok(true) => self.spans[at] = Some((start, end)),
            Ok(false) => {
                self.buffer.truncate(start);
                self.spans[at] = None;
            }
            Err(error) => {
                self.buffer.truncate(start);
                return Err(error);
            }
        }
        Ok(())
    }

    /// Sets column `at` to the text `write` appends to the buffer it is given.
    pub fn write_text(&mut self, at: usize, write: impl FnOnce(&mut String)) {
        let start = self.buffer.len();
        write(&mut self.buffer);
        self.spans[at] = Some((start, self.buffer.len()));
    }

    /// Sets column `at` to `text` (`None`: NULL).
    pub fn set(&mut self, at: usize, text: Option<&str>) {
        match text {
            Some(text) => self.write_text(at, |buffer| buffer.push_str(text)),
            None => self.spans[at] = None,
        }
    }

    /// Column `at`'s text; `None` for NULL or a column the row does not have.
    pub fn get(&self, at: usize) -> Option<&str> {
        let (start, end) = (*self.spans.get(at)?)?;
        Some(&self.buffer[start..end])
    }

    /// How many columns the row has.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// The bytes of every text, for [`RowSizes::saw`].
    pub fn bytes(&self) -> usize {
        self.buffer.len()
    }
}

/// The size of the last row a table's rows were prepared for, so that the next starts with a
/// buffer large enough to hold it whole: rows of one type are alike, and growing a buffer a few
/// times for each row would cost more allocations than the buffer saves.
#[derive(Debug, Default)]
pub(crate) struct RowSizes(AtomicUsize);

/// The room a row starts with before any was seen.
const FIRST_ROW_BYTES: usize = 256;
/// The most room a row starts with: a very large row does not make every later row reserve as
/// much.
const MOST_ROW_BYTES: usize = 64 * 1024;

impl RowSizes {
    /// The room the next row starts with.
    fn expected(&self) -> usize {
        match self.0.load(Ordering::Relaxed) {
            0 => FIRST_ROW_BYTES,
            seen => seen.min(MOST_ROW_BYTES),
        }
    }

    /// Notes the size of a row's texts, once they are all written, and gives back the room a
    /// much smaller row was given for the one before it: a chunk of rows holds at most about
    /// twice its texts.
    pub fn saw(&self, texts: &mut ColumnTexts) {
        let bytes = texts.bytes();
        if texts.buffer.capacity() > 2 * bytes + FIRST_ROW_BYTES {
            texts.buffer.shrink_to_fit();
        }
        // Relaxed: a hint, read by any thread; a stale one costs a reallocation, nothing else.
        // Left alone when it holds (rows of one size), so that writers on several cores do not
        // take turns owning it.
        if self.0.load(Ordering::Relaxed) != bytes {
            self.0.store(bytes, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_column_reads_back_its_own_text_or_null() {
        let sizes = RowSizes::default();
        let mut texts = ColumnTexts::new(4, &sizes);
        texts.set(2, Some("second"));
        texts.set(0, Some("first"));
        texts.set(3, None);
        assert_eq!(texts.get(0), Some("first"));
        assert_eq!(texts.get(1), None);
        assert_eq!(texts.get(2), Some("second"));
        assert_eq!(texts.get(3), None);
        assert_eq!(texts.get(4), None);
        assert_eq!(texts.len(), 4);
        // The empty text is a text, not NULL.
        texts.set(1, Some(""));
        assert_eq!(texts.get(1), Some(""));
    }

    #[test]
    fn a_failed_or_null_write_leaves_nothing_behind() {
        let sizes = RowSizes::default();
        let mut texts = ColumnTexts::new(2, &sizes);
        texts.set(0, Some("kept"));
        let failed = texts.write(1, |buffer| {
            buffer.push_str("half written");
            Err::<bool, _>("refused")
        });
        assert_eq!(failed, Err("refused"));
        assert_eq!(texts.get(1), None);
        texts
            .write(1, |buffer| {
                buffer.push_str("ignored");
                Ok::<_, ()>(false)
            })
            .unwrap();
        assert_eq!(texts.get(1), None);
        assert_eq!(texts.bytes(), "kept".len());
        // Writing a column again replaces its text.
        texts.set(0, Some("again"));
        assert_eq!(texts.get(0), Some("again"));
    }

    #[test]
    fn a_row_starts_with_room_for_the_last_one_seen_up_to_a_bound() {
        let sizes = RowSizes::default();
        assert_eq!(sizes.expected(), FIRST_ROW_BYTES);
        let mut texts = ColumnTexts::new(1, &sizes);
        texts.set(0, Some(&"x".repeat(1500)));
        sizes.saw(&mut texts);
        assert!(ColumnTexts::new(1, &sizes).buffer.capacity() >= 1500);
        let mut large = ColumnTexts::new(1, &sizes);
        large.set(0, Some(&"x".repeat(MOST_ROW_BYTES * 2)));
        sizes.saw(&mut large);
        assert_eq!(sizes.expected(), MOST_ROW_BYTES);
        // A small row after a large one keeps no more than it needs.
        let mut small = ColumnTexts::new(1, &sizes);
        small.set(0, Some("short"));
        sizes.saw(&mut small);
        assert!(small.buffer.capacity() < MOST_ROW_BYTES / 2);
        assert_eq!(sizes.expected(), "short".len());
    }
}
