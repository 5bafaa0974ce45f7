//! [`Cursor`]: a forward scan over a table whose rows are borrowed from the cursor, not copied
//! into owned vectors (as redb's `AccessGuard`s are borrowed): one descent to the first leaf,
//! then leaf to leaf (keel-btree's `Cursor`). [`Rows`](crate::Rows) gives owned rows and
//! iterates both ways; a cursor is the fast path for forward scans.

use crate::merged::Merged;
use crate::table::{SnapReader, TxnReader};
use crate::{Error, Result};

/// A forward cursor over a key range of a table: `while let Some((key, value)) =
/// cursor.next()? { ... }`. Each row is borrowed until the next call to
/// [`next`](Cursor::next); copy it (`to_vec`) to keep it.
///
/// ```
/// # fn main() -> keel::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = keel::Store::open(dir.path(), keel::Config::default())?;
/// let tx = store.write()?;
/// let mut t = tx.table("t")?;
/// for k in [b"a", b"b", b"c"] {
///     t.insert(k, b"v")?;
/// }
/// drop(t);
/// tx.commit()?;
/// let r = store.read()?;
/// let t = r.table("t")?;
/// let mut c = t.cursor(b"b".as_slice()..)?;
/// let mut keys = Vec::new();
/// while let Some((k, _v)) = c.next()? {
///     keys.push(k.to_vec());
/// }
/// assert_eq!(keys, [b"b".to_vec(), b"c".to_vec()]);
/// # Ok(()) }
/// ```
pub struct Cursor<'r>(pub(crate) CursorOf<'r>);

/// The cursor behind [`Cursor`]: through a write transaction's pages or at a read transaction's snapshot.
pub(crate) enum CursorOf<'r> {
    Txn(keel_btree::Cursor<TxnReader<'r, 'r>>),
    Pool(keel_btree::Cursor<SnapReader<'r>>),
    /// A concurrent transaction's scan and the row it returned last.
    Merged(Box<Merged<'r>>, Option<(Vec<u8>, Vec<u8>)>),
}

impl Cursor<'_> {
    /// The next row, borrowed until the next call; `None` past the end of the range.
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt (the error names the file and page); the cursor
    /// then stays at its end.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        match &mut self.0 {
            CursorOf::Txn(c) => c.next().map_err(Error::from),
            CursorOf::Pool(c) => c.next().map_err(Error::from),
            CursorOf::Merged(m, row) => {
                *row = m.next_row()?;
                Ok(row.as_ref().map(|(k, v)| (k.as_slice(), v.as_slice())))
            }
        }
    }
}
