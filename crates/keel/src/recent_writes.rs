//! Which rows the recent commits wrote, so that a concurrent transaction's commit re-reads only
//! the reads a commit since its snapshot could have changed.
//!
//! Validation (`read_set.rs`) must answer, under the writer lock, whether each read still gives
//! the same answer at the newest commit. Re-reading every read is exact but runs B-tree
//! descents inside the serial section. Most reads were not touched by any commit since the
//! snapshot: FoundationDB's resolver and Silo's validation decide conflicts from the recent
//! writers' key sets instead. Here the key sets only *narrow* the exact check: a read some
//! recent commit wrote (or may have, on a hash collision) is re-read exactly as before, the
//! others are skipped. So the conflict decisions are the exact check's, read for read.
//!
//! # Invariants
//!
//! 1. **Only a complete window is used**: the entries from the newest commit back to the
//!    snapshot must chain (each entry's `prev` is the `lsn` of the entry before it) and the
//!    oldest must start at or before the snapshot. A gap (trimmed history, a commit recorded
//!    by no one) or an *opaque* entry (an exclusive writer's commit, whose writes are not
//!    listed, or a concurrent one that created or dropped a table, which changes the catalog)
//!    makes [`RecentWrites::window`] return `None`: every read is checked.
//!    (`window_needs_a_chain_back_to_the_snapshot`.)
//! 2. **A transparent entry lists every row its commit changed**: the write set its apply
//!    wrote, row for row, in every table, and it changes nothing else a read can see (no
//!    catalog entry: table roots never move, creations and drops are opaque). The test knob
//!    `forget_recent_writes` records empty lists instead; `tests/concurrent.rs` must then find
//!    a lost update.
//! 3. **A read is skipped only if no entry in the window wrote into it**: a point read when
//!    no entry holds its key's hash (a hash equal by collision only costs an exact re-read),
//!    a scanned range when no entry wrote a key of that table inside the range.
//!    (`a_window_finds_the_keys_and_ranges_written`.)

use crate::read_set::{bound_ref, is_empty_range};
use keel_page::Lsn;
use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::ops::Bound;
use std::sync::Arc;

/// At most this many commits are remembered.
const MAX_ENTRIES: usize = 1024;
/// At most about this many bytes of written keys are remembered.
const MAX_BYTES: usize = 8 << 20;
/// What one entry costs beside its keys (bookkeeping, hashes, vectors), for the byte bound.
const ENTRY_OVERHEAD: usize = 64;
/// What one written key costs beside its bytes (its end offset and its hash).
const KEY_OVERHEAD: usize = 16;

/// The hash of row `key` of table `table` (`None`: the catalog) under the store's keys.
pub(crate) fn row_hash(keys: &RandomState, table: Option<&str>, key: &[u8]) -> u64 {
    let mut h = keys.build_hasher();
    match table {
        Some(t) => {
            h.write_u8(1);
            h.write_usize(t.len());
            h.write(t.as_bytes());
        }
        None => h.write_u8(0),
    }
    h.write_usize(key.len());
    h.write(key);
    h.finish()
}

/// The keys one commit wrote in one table, in key order, packed in one buffer.
#[derive(Debug, Default)]
struct Keys {
    bytes: Vec<u8>,
    /// Where each key ends in `bytes`.
    ends: Vec<usize>,
}

impl Keys {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = match i.checked_sub(1) {
            Some(j) => *self.ends.get(j)?,
            None => 0,
        };
        self.bytes.get(start..end)
    }
}

/// The rows one concurrent commit wrote.
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// [`row_hash`] of every row written, sorted and deduplicated.
    hashes: Vec<u64>,
    /// Per table, the keys written.
    tables: Vec<(Arc<str>, Keys)>,
    bytes: usize,
}

impl Written {
    /// Adds the keys written in table `name` (in key order), hashed under `keys`. Called before
    /// the writer lock is taken.
    pub(crate) fn add_table<'a>(
        &mut self,
        keys: &RandomState,
        name: &Arc<str>,
        written: impl Iterator<Item = &'a [u8]>,
    ) {
        let mut packed = Keys::default();
        for k in written {
            self.hashes.push(row_hash(keys, Some(name), k));
            packed.bytes.extend_from_slice(k);
            packed.ends.push(packed.bytes.len());
        }
        if packed.len() == 0 {
            return;
        }
        self.bytes = self
            .bytes
            .saturating_add(packed.bytes.len())
            .saturating_add(packed.len().saturating_mul(KEY_OVERHEAD));
        self.tables.push((name.clone(), packed));
    }

    /// Done adding: sorts the hashes for lookups.
    pub(crate) fn finish(mut self) -> Written {
        self.hashes.sort_unstable();
        self.hashes.dedup();
        self.bytes = self.bytes.saturating_add(ENTRY_OVERHEAD);
        self
    }

    fn has_hash(&self, h: u64) -> bool {
        self.hashes.binary_search(&h).is_ok()
    }

    fn has_key_in(&self, table: &str, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
        self.tables
            .iter()
            .filter(|(t, _)| &**t == table)
            .any(|(_, keys)| {
                // The keys are sorted: the first at or past `lo`, then whether it is below `hi`.
                let (mut a, mut b) = (0, keys.len());
                while a < b {
                    let mid = a + (b - a) / 2;
                    let below = keys.get(mid).is_some_and(|k| match lo {
                        Bound::Included(l) => k < l,
                        Bound::Excluded(l) => k <= l,
                        Bound::Unbounded => false,
                    });
                    if below {
                        a = mid + 1;
                    } else {
                        b = mid;
                    }
                }
                keys.get(a).is_some_and(|k| match hi {
                    Bound::Included(h) => k <= h,
                    Bound::Excluded(h) => k < h,
                    Bound::Unbounded => true,
                })
            })
    }
}
/// One published commit.
#[derive(Debug)]
struct Entry {
    /// The newest commit before it.
    prev: Lsn,
    /// Its commit LSN (what snapshots after it read at).
    lsn: Lsn,
    /// What it wrote; `None` when not known (opaque).
    written: Option<Written>,
}

impl Entry {
    /// What it counts against the byte bound.
    fn bytes(&self) -> usize {
        self.written
            .as_ref()
            .map_or(ENTRY_OVERHEAD, |w| w.bytes.max(ENTRY_OVERHEAD))
    }
}

/// The recent commits, oldest first. Kept under the writer lock's hold: recorded by each
/// commit, read by each concurrent commit's validation.
#[derive(Debug, Default)]
pub(crate) struct RecentWrites {
    entries: VecDeque<Entry>,
    bytes: usize,
}

impl RecentWrites {
    /// Records the commit that moved the newest commit from `prev` to `lsn`, with what it wrote
    /// (`None`: opaque). Trims the oldest entries past the bounds.
    pub(crate) fn record(&mut self, prev: Lsn, lsn: Lsn, written: Option<Written>) {
        let e = Entry { prev, lsn, written };
        self.bytes = self.bytes.saturating_add(e.bytes());
        self.entries.push_back(e);
        while self.entries.len() > MAX_ENTRIES || (self.bytes > MAX_BYTES && self.entries.len() > 1)
        {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(old.bytes());
        }
    }

    /// The commits after `snapshot` up to `latest`, if every one of them is recorded and
    /// transparent (invariant 1); `None` means every read must be checked.
    pub(crate) fn window(&self, snapshot: Lsn, latest: Lsn) -> Option<Window<'_>> {
        let mut entries = Vec::new();
        let mut want = latest;
        for e in self.entries.iter().rev() {
            if want.0 <= snapshot.0 {
                break;
            }
            if e.lsn != want {
                return None;
            }
            entries.push(e.written.as_ref()?);
            want = e.prev;
        }
        (want.0 <= snapshot.0).then_some(Window { entries })
    }
}

/// The rows written by the commits between a snapshot and the newest commit.
pub(crate) struct Window<'a> {
    entries: Vec<&'a Written>,
}

impl Window<'_> {
    /// Whether a commit in the window may have written the row whose [`row_hash`] is `h`.
    pub(crate) fn touches_key(&self, h: u64) -> bool {
        self.entries.iter().any(|w| w.has_hash(h))
    }

    /// Whether a commit in the window wrote a row of `table` (`None`: the catalog) between
    /// `lo` and `hi`.
    pub(crate) fn touches_range(
        &self,
        table: Option<&str>,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
    ) -> bool {
        let Some(table) = table else {
            // Transparent commits never change the catalog (invariant 2).
            return false;
        };
        let (lo, hi) = (bound_ref(lo), bound_ref(hi));
        if is_empty_range(lo, hi) {
            return false;
        }
        self.entries.iter().any(|w| w.has_key_in(table, lo, hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(keys: &RandomState, table: &str, rows: &[&[u8]]) -> Written {
        let mut ks: Vec<&[u8]> = rows.to_vec();
        ks.sort();
        let mut w = Written::default();
        w.add_table(keys, &Arc::from(table), ks.into_iter());
        w.finish()
    }

    #[test]
    fn window_needs_a_chain_back_to_the_snapshot() {
        let keys = RandomState::new();
        let mut r = RecentWrites::default();
        r.record(Lsn(10), Lsn(20), Some(written(&keys, "t", &[b"a"])));
        r.record(Lsn(20), Lsn(30), Some(written(&keys, "t", &[b"b"])));
        // Nothing after the snapshot: an empty window.
        assert_eq!(r.window(Lsn(30), Lsn(30)).map(|w| w.entries.len()), Some(0));
        assert_eq!(r.window(Lsn(20), Lsn(30)).map(|w| w.entries.len()), Some(1));
        assert_eq!(r.window(Lsn(10), Lsn(30)).map(|w| w.entries.len()), Some(2));
        // Older than the history: unknown.
        assert!(r.window(Lsn(5), Lsn(30)).is_none());
        // The newest commit was not recorded: unknown.
        assert!(r.window(Lsn(20), Lsn(40)).is_none());
        // A gap in the chain: unknown.
        r.record(Lsn(35), Lsn(40), Some(written(&keys, "t", &[b"c"])));
        assert!(r.window(Lsn(20), Lsn(40)).is_none());
        assert_eq!(r.window(Lsn(35), Lsn(40)).map(|w| w.entries.len()), Some(1));
        // An opaque commit: unknown for every snapshot before it.
        r.record(Lsn(40), Lsn(50), None);
        assert!(r.window(Lsn(35), Lsn(50)).is_none());
        assert_eq!(r.window(Lsn(50), Lsn(50)).map(|w| w.entries.len()), Some(0));
    }

    #[test]
    fn a_window_finds_the_keys_and_ranges_written() {
        let keys = RandomState::new();
        let mut r = RecentWrites::default();
        r.record(Lsn(0), Lsn(1), Some(written(&keys, "t", &[b"b", b"d"])));
        r.record(Lsn(1), Lsn(2), Some(written(&keys, "u", &[b"x"])));
        let w = r.window(Lsn(0), Lsn(2)).expect("complete");
        assert!(w.touches_key(row_hash(&keys, Some("t"), b"b")));
        assert!(w.touches_key(row_hash(&keys, Some("u"), b"x")));
        assert!(!w.touches_key(row_hash(&keys, Some("t"), b"x")));
        assert!(!w.touches_key(row_hash(&keys, Some("t"), b"c")));
        assert!(!w.touches_key(row_hash(&keys, None, b"t")));
        let v = |s: &[u8]| s.to_vec();
        let inc = |s: &[u8]| Bound::Included(v(s));
        let exc = |s: &[u8]| Bound::Excluded(v(s));
        assert!(w.touches_range(Some("t"), &inc(b"a"), &inc(b"b")));
        assert!(!w.touches_range(Some("t"), &inc(b"a"), &exc(b"b")));
        assert!(!w.touches_range(Some("t"), &exc(b"b"), &exc(b"d")));
        assert!(w.touches_range(Some("t"), &exc(b"b"), &inc(b"d")));
        assert!(w.touches_range(Some("t"), &Bound::Unbounded, &Bound::Unbounded));
        assert!(!w.touches_range(Some("t"), &exc(b"d"), &Bound::Unbounded));
        assert!(!w.touches_range(Some("v"), &Bound::Unbounded, &Bound::Unbounded));
        assert!(!w.touches_range(None, &Bound::Unbounded, &Bound::Unbounded));
        // An empty range touches nothing.
        assert!(!w.touches_range(Some("t"), &inc(b"d"), &exc(b"b")));
    }

    #[test]
    fn history_is_bounded() {
        let keys = RandomState::new();
        let mut r = RecentWrites::default();
        for i in 0..(MAX_ENTRIES as u64 + 10) {
            r.record(Lsn(i), Lsn(i + 1), Some(written(&keys, "t", &[b"k"])));
        }
        assert_eq!(r.entries.len(), MAX_ENTRIES);
        assert!(r.window(Lsn(0), Lsn(MAX_ENTRIES as u64 + 10)).is_none());
        let big = vec![0u8; 1 << 20];
        for i in 0..20u64 {
            let lsn = MAX_ENTRIES as u64 + 10 + i;
            r.record(Lsn(lsn), Lsn(lsn + 1), Some(written(&keys, "t", &[&big])));
        }
        assert!(r.bytes <= MAX_BYTES, "{} bytes kept", r.bytes);
    }
}
