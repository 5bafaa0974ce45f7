//! The read set of a concurrent write transaction: what it read at its snapshot, and the check
//! at commit that all of it still holds at the newest commit.
//!
//! A concurrent transaction ([`Store::write_concurrent`](crate::Store::write_concurrent)) reads
//! at its snapshot and commits as if it had run at its commit point. That is serializable
//! exactly when every read it made returns the same answer at the commit point: then running
//! its logic there would have read the same values and written the same rows. So the read set
//! records, for each read, what was seen — a point read's value (or its absence), a scan's
//! rows over the key range it covered (phantoms included: a row added inside a scanned range
//! changes the range's digest) — and [`ReadSet::validate`] reads each again at the newest
//! commit under the writer lock, except the reads that no commit since the snapshot wrote
//! into, when the rows those commits wrote are all known (`recent_writes.rs`): those still hold.
//!
//! # Invariants
//!
//! 1. **Everything a transaction saw of committed data is recorded**: each point read of a
//!    committed table, each range a scan pulled committed rows from (up to the last row pulled,
//!    or the end of the range once the scan is exhausted), and each catalog lookup. Reads the
//!    transaction answers from its own writes are not (they do not depend on others).
//!    (`tests/concurrent.rs`: the seeded model checks every commit for serializability; the
//!    knobs `skip_validation` and `skip_range_reads` each make it fail.)
//! 2. **Checked in order**: a table's catalog entry is recorded before any read of its rows, so
//!    validation finds a dropped or re-created table at its catalog entry before it would read
//!    a root page that may have been freed and re-used.
//! 3. **Values compared by digest**: 64-bit SipHash keyed per store at random
//!    ([`RandomState`]); a changed value is missed only on a digest collision (2^-64, and not
//!    provokable without the key).

use crate::recent_writes::{row_hash, Window};
use crate::{Error, Result};
use keel_btree::{BTree, PageRead};
use keel_page::{Lsn, PageId};
use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hasher};
use std::ops::Bound;
use std::sync::Arc;

/// The tree a read was made in: its root and a name for error messages.
#[derive(Clone, Debug)]
pub(crate) struct TreeRef {
    pub(crate) root: PageId,
    /// The table's name, or `None` for the catalog.
    pub(crate) table: Option<Arc<str>>,
}

impl TreeRef {
    fn describe(&self) -> String {
        match &self.table {
            Some(t) => format!("table {t:?}"),
            None => "the catalog".to_string(),
        }
    }
}

/// One read at the snapshot.
#[derive(Clone, Debug)]
pub(crate) enum Read {
    /// `key` held a value with this digest (`None`: no row).
    Key {
        tree: TreeRef,
        /// Where the key's bytes are in [`ReadSet::key_bytes`] (one buffer for every key read
        /// instead of an allocation per read).
        at: usize,
        len: usize,
        seen: Option<u64>,
        /// [`row_hash`] of the row, to find it among recent commits' writes.
        hash: u64,
    },
    /// The rows between `lo` and `hi`, read in this direction, were `rows` rows with this
    /// running digest.
    Range {
        tree: TreeRef,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        rev: bool,
        rows: u64,
        digest: DefaultHasher,
    },
}

/// The reads of one transaction, in the order they were made.
pub(crate) struct ReadSet {
    keys: RandomState,
    reads: Vec<Read>,
    /// The bytes of every key read, back to back.
    key_bytes: Vec<u8>,
}

/// `b` with a borrowed payload.
pub(crate) fn bound_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// `b` with an owned payload.
pub(crate) fn bound_owned(b: Bound<&&[u8]>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(v) => Bound::Included(v.to_vec()),
        Bound::Excluded(v) => Bound::Excluded(v.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Whether no key lies between `lo` and `hi` (so a map's `range` over them would panic or be
/// empty).
pub(crate) fn is_empty_range(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
        _ => false,
    }
}

/// Feeds one row into a range digest.
pub(crate) fn digest_row(h: &mut DefaultHasher, key: &[u8], value: &[u8]) {
    h.write_usize(key.len());
    h.write(key);
    h.write_usize(value.len());
    h.write(value);
}

impl ReadSet {
    /// An empty read set keyed by `keys`.
    pub(crate) fn new(keys: RandomState) -> ReadSet {
        ReadSet {
            keys,
            reads: Vec::new(),
            key_bytes: Vec::new(),
        }
    }

    /// The digest of one value.
    fn digest_value(&self, value: &[u8]) -> u64 {
        let mut h = self.keys.build_hasher();
        h.write_usize(value.len());
        h.write(value);
        h.finish()
    }

    /// Records that `key` of `tree` held `value` at the snapshot.
    pub(crate) fn key(&mut self, tree: TreeRef, key: &[u8], value: Option<&[u8]>) {
        let seen = value.map(|v| self.digest_value(v));
        let hash = row_hash(&self.keys, tree.table.as_deref(), key);
        let at = self.key_bytes.len();
        self.key_bytes.extend_from_slice(key);
        self.reads.push(Read::Key {
            tree,
            at,
            len: key.len(),
            seen,
            hash,
        });
    }

    /// Starts recording a scan of `tree` from one end of a range: returns the record's index.
    /// `lo`/`hi` are the part covered so far (the caller widens it as it pulls rows).
    pub(crate) fn range(
        &mut self,
        tree: TreeRef,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        rev: bool,
    ) -> usize {
        self.reads.push(Read::Range {
            tree,
            lo,
            hi,
            rev,
            rows: 0,
            digest: self.keys.build_hasher(),
        });
        self.reads.len() - 1
    }

    /// The range record at `i` (from [`range`](Self::range)).
    pub(crate) fn range_mut(&mut self, i: usize) -> Option<RangeMut<'_>> {
        match self.reads.get_mut(i) {
            Some(Read::Range {
                lo,
                hi,
                rows,
                digest,
                ..
            }) => Some(RangeMut {
                lo,
                hi,
                rows,
                digest,
            }),
            _ => None,
        }
    }

    /// Checks every read, in the order made, against the pages `pages` reads (the newest
    /// commit, under the writer lock): `Err(Error::Conflict)` naming the first read that no
    /// longer holds. With `window` (the writes of every commit since the snapshot,
    /// `recent_writes.rs`), a read no commit in it wrote into still holds and is not re-read.
    /// Counts in `checked` how many reads were re-read and how many skipped (up to the first
    /// that no longer holds).
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`]; a page cannot be read or is corrupt.
    pub(crate) fn validate<P: PageRead>(
        &self,
        pages: &P,
        page_size: usize,
        snapshot: Lsn,
        window: Option<&Window<'_>>,
        checked: &mut Checked,
    ) -> Result<()> {
        for read in &self.reads {
            let touched = match (window, read) {
                (None, _) => true,
                (Some(w), Read::Key { hash, .. }) => w.touches_key(*hash),
                (Some(w), Read::Range { tree, lo, hi, .. }) => {
                    w.touches_range(tree.table.as_deref(), lo, hi)
                }
            };
            if !touched {
                checked.skipped = checked.skipped.saturating_add(1);
                continue;
            }
            checked.reread = checked.reread.saturating_add(1);
            match read {
                Read::Key {
                    tree,
                    at,
                    len,
                    seen,
                    ..
                } => {
                    // Always in range (`key` pushed both); if not, conflict rather than guess.
                    let Some(key) = self.key_bytes.get(*at..at.saturating_add(*len)) else {
                        return Err(Error::Conflict {
                            what: format!("a read of {} that was not recorded", tree.describe()),
                            snapshot,
                        });
                    };
                    let now = BTree::open(tree.root, page_size).get(pages, key)?;
                    let now = now.as_deref().map(|v| self.digest_value(v));
                    if now != *seen {
                        return Err(Error::Conflict {
                            what: format!("key {} of {}", show(key), tree.describe()),
                            snapshot,
                        });
                    }
                }
                Read::Range {
                    tree,
                    lo,
                    hi,
                    rev,
                    rows,
                    digest,
                } => {
                    let (lo_r, hi_r) = (bound_ref(lo), bound_ref(hi));
                    let (mut n, mut h) = (0u64, self.keys.build_hasher());
                    if !is_empty_range(lo_r, hi_r) {
                        let mut it = BTree::open(tree.root, page_size).range(pages, (lo_r, hi_r));
                        loop {
                            let row = if *rev { it.next_back() } else { it.next() };
                            let Some(row) = row else { break };
                            let (k, v) = row?;
                            digest_row(&mut h, &k, &v);
                            n = n.saturating_add(1);
                        }
                    }
                    if n != *rows || h.finish() != digest.finish() {
                        return Err(Error::Conflict {
                            what: format!(
                                "the rows of {} in {}..{} ({rows} rows read, {n} now)",
                                tree.describe(),
                                show_bound(lo),
                                show_bound(hi)
                            ),
                            snapshot,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// What [`ReadSet::validate`] did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Checked {
    /// Reads read again at the newest commit.
    pub(crate) reread: u64,
    /// Reads no commit since the snapshot wrote into: not read again.
    pub(crate) skipped: u64,
}

/// A range record being widened by its scan.
pub(crate) struct RangeMut<'a> {
    pub(crate) lo: &'a mut Bound<Vec<u8>>,
    pub(crate) hi: &'a mut Bound<Vec<u8>>,
    pub(crate) rows: &'a mut u64,
    pub(crate) digest: &'a mut DefaultHasher,
}

/// The most bytes of a key an error message shows (a 5,000-byte scan bound made a 5 KB
/// message: a tester).
const SHOWN_KEY_BYTES: usize = 64;

/// A key for an error message: text if it is printable ASCII, else hex; past
/// [`SHOWN_KEY_BYTES`] its first bytes and its length.
fn show(key: &[u8]) -> String {
    let head = key.get(..SHOWN_KEY_BYTES).unwrap_or(key);
    let text = if head.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!("{:?}", String::from_utf8_lossy(head))
    } else {
        let hex: String = head.iter().map(|b| format!("{b:02x}")).collect();
        format!("0x{hex}")
    };
    if head.len() < key.len() {
        format!("{text}… ({} bytes)", key.len())
    } else {
        text
    }
}

fn show_bound(b: &Bound<Vec<u8>>) -> String {
    match b {
        Bound::Included(k) => format!("[{}", show(k)),
        Bound::Excluded(k) => format!("({}", show(k)),
        Bound::Unbounded => "*".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_are_shown_by_their_first_bytes_and_length() {
        assert_eq!(show(b"abc"), "\"abc\"");
        assert_eq!(show(&[0, 1]), "0x0001");
        let long = show(&[b'k'; 5000]);
        assert!(long.len() < 100 && long.ends_with("(5000 bytes)"), "{long}");
        assert!(show(&[7u8; 5000]).starts_with(&format!("0x{}", "07".repeat(64))));
    }

    #[test]
    fn empty_ranges_are_recognised() {
        let (a, b) = (b"a".as_slice(), b"b".as_slice());
        assert!(is_empty_range(Bound::Included(b), Bound::Included(a)));
        assert!(!is_empty_range(Bound::Included(a), Bound::Included(a)));
        assert!(is_empty_range(Bound::Included(a), Bound::Excluded(a)));
        assert!(is_empty_range(Bound::Excluded(a), Bound::Excluded(a)));
        assert!(!is_empty_range(Bound::Excluded(a), Bound::Excluded(b)));
        assert!(!is_empty_range(Bound::Unbounded, Bound::Excluded(a)));
        // A map's range over any bounds this accepts does not panic.
        let m: std::collections::BTreeMap<Vec<u8>, ()> = Default::default();
        for lo in [Bound::Included(a), Bound::Excluded(a), Bound::Unbounded] {
            for hi in [Bound::Included(a), Bound::Excluded(a), Bound::Unbounded] {
                if !is_empty_range(lo, hi) {
                    let _ = m.range::<[u8], _>((lo, hi)).count();
                }
            }
        }
    }
}
