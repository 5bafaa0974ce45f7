//! A scan of a concurrent transaction's view: its own writes merged over the snapshot's rows,
//! in key order from either end, with the snapshot rows it pulled recorded in its read set.
//!
//! # Invariants
//!
//! 1. **Merge order**: rows come out in key order (descending from the back); where the
//!    transaction wrote a key, its write replaces the snapshot's row (a removal hides it); a
//!    pending addition shows as the snapshot's row (or 0) plus the addition.
//!    Front and back never pass each other.
//! 2. **What was pulled is recorded** (read-set invariant 1): the front records the range from
//!    the scan's start to the last snapshot row it pulled, the back from the last it pulled to
//!    the scan's end; once the snapshot side is exhausted the two records cover the whole
//!    range (the rows between them: none). So a row another transaction adds, removes or
//!    changes anywhere in what the scan covered is a conflict at commit (the test knob
//!    `skip_range_reads` breaks it: `tests/concurrent.rs`
//!    `without_range_reads_the_model_finds_a_phantom`).
//! 3. **An ended scan stays ended** (as keel-btree's `Range` and `Cursor`): once either end
//!    returned the end or an error, both return the end — rows written through another handle
//!    later are not returned, and after a pending addition that cannot apply (its error
//!    returned), the row is not shown as an addition to 0 (the snapshot row it consumed is
//!    gone). (`tests/model.rs` runs its operations in both kinds of transaction: `ScanAround`
//!    checks an ended scan after writes through another handle, `Add` a scan past an addition
//!    that cannot apply; each fails without the `ended` flag.)

use crate::optimistic::Optimistic;
use crate::read_set::{bound_owned, bound_ref, digest_row, is_empty_range, TreeRef};
use crate::store::Inner;
use crate::table::{add_to, SnapReader};
use crate::{Error, Result};
use keel_btree::{BTree, Range};
use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

type Row = (Vec<u8>, Vec<u8>);

/// Which end of the scan.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Front,
    Back,
}

/// The entry of `map` between `lo` and `hi` nearest to end `at` (none if `empty`: the bounds
/// hold no key, and a map's range over them would panic).
fn nearest<'m, V>(
    map: &'m BTreeMap<Vec<u8>, V>,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
    at: End,
    empty: bool,
) -> Option<(&'m Vec<u8>, &'m V)> {
    if empty || map.is_empty() {
        return None;
    }
    let mut r = map.range::<[u8], _>((lo, hi));
    match at {
        End::Front => r.next(),
        End::Back => r.next_back(),
    }
}

/// The merged scan.
pub(crate) struct Merged<'t> {
    opt: &'t Optimistic,
    /// The transaction's table whose writes are merged (`None`: no writes, e.g. the catalog).
    idx: Option<usize>,
    /// The snapshot's tree and its rows in the range (`None`: nothing under the writes).
    tree: Option<TreeRef>,
    base: Option<Range<SnapReader<'t>>>,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    /// The keys not yet returned lie strictly inside these.
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    /// Snapshot rows pulled from each end and not yet returned.
    front: Option<Row>,
    back: Option<Row>,
    base_done: bool,
    /// The read-set records of each end.
    front_read: Option<usize>,
    back_read: Option<usize>,
    /// Test knob `skip_range_reads`: record nothing.
    skip_records: bool,
    /// The scan returned its end or an error (invariant 3).
    ended: bool,
}

/// What to return next.
enum Take {
    /// A write (`None`: a removal, skipped); whether it hides the snapshot row at hand.
    Write(Vec<u8>, Option<Vec<u8>>, bool),
    /// A pending addition to the row (of the named table); whether the snapshot row at hand
    /// is the row it adds to (else there is none: it adds to 0).
    Add(Vec<u8>, i64, Arc<str>, bool),
    /// The snapshot row at hand.
    Base,
    End,
}

impl<'t> Merged<'t> {
    /// A scan over `range` of table `idx`'s writes over the snapshot rows of `tree`.
    pub(crate) fn over<'k, R: RangeBounds<&'k [u8]>>(
        opt: &'t Optimistic,
        inner: &'t Inner,
        idx: Option<usize>,
        tree: Option<TreeRef>,
        range: R,
    ) -> Merged<'t> {
        let start = bound_owned(range.start_bound());
        let end = bound_owned(range.end_bound());
        let base = tree.as_ref().map(|t| {
            BTree::open(t.root, inner.config.page_size)
                .range(opt.snap_reader(inner), (bound_ref(&start), bound_ref(&end)))
        });
        let skip_records = knob_on!(inner, skip_range_reads);
        Merged {
            skip_records,
            opt,
            idx,
            base_done: base.is_none(),
            tree,
            base,
            lo: start.clone(),
            hi: end.clone(),
            start,
            end,
            front: None,
            back: None,
            front_read: None,
            back_read: None,
            ended: false,
        }
    }

    /// Pulls the next snapshot row at `end` into its slot, unless one is there or the
    /// snapshot side is exhausted.
    fn pull(&mut self, at: End) -> Result<()> {
        let slot_full = match at {
            End::Front => self.front.is_some(),
            End::Back => self.back.is_some(),
        };
        if slot_full || self.base_done {
            return Ok(());
        }
        let Some(base) = self.base.as_mut() else {
            self.base_done = true;
            return Ok(());
        };
        let row = match at {
            End::Front => base.next(),
            End::Back => base.next_back(),
        };
        match row {
            Some(Ok(row)) => {
                self.record(at, &row);
                match at {
                    End::Front => self.front = Some(row),
                    End::Back => self.back = Some(row),
                }
            }
            Some(Err(e)) => return Err(Error::from(e)),
            None => {
                self.base_done = true;
                self.record_exhausted();
            }
        }
        Ok(())
    }

    /// Widens `at`'s read record over a pulled row.
    fn record(&mut self, at: End, row: &Row) {
        let Some(tree) = &self.tree else { return };
        if self.skip_records {
            return;
        }
        let mut reads = self.opt.reads.borrow_mut();
        let slot = match at {
            End::Front => &mut self.front_read,
            End::Back => &mut self.back_read,
        };
        let i = *slot.get_or_insert_with(|| match at {
            End::Front => reads.range(tree.clone(), self.start.clone(), Bound::Unbounded, false),
            End::Back => reads.range(tree.clone(), Bound::Unbounded, self.end.clone(), true),
        });
        if let Some(r) = reads.range_mut(i) {
            match at {
                End::Front => *r.hi = Bound::Included(row.0.clone()),
                End::Back => *r.lo = Bound::Included(row.0.clone()),
            }
            *r.rows = r.rows.saturating_add(1);
            digest_row(r.digest, &row.0, &row.1);
        }
    }

    /// The snapshot side is exhausted: the records now cover the whole range.
    fn record_exhausted(&mut self) {
        let Some(tree) = &self.tree else { return };
        if self.skip_records {
            return;
        }
        let mut reads = self.opt.reads.borrow_mut();
        let front_last = self
            .front_read
            .and_then(|i| reads.range_mut(i))
            .map(|r| r.hi.clone());
        match (self.front_read, self.back_read) {
            (_, Some(b)) => {
                if let Some(r) = reads.range_mut(b) {
                    *r.lo = match front_last {
                        Some(Bound::Included(k)) => Bound::Excluded(k),
                        _ => self.start.clone(),
                    };
                }
            }
            (Some(f), None) => {
                if let Some(r) = reads.range_mut(f) {
                    *r.hi = self.end.clone();
                }
            }
            (None, None) => {
                self.front_read =
                    Some(reads.range(tree.clone(), self.start.clone(), self.end.clone(), false));
            }
        }
    }

    /// Decides the next row from `at`: the nearer of the transaction's next write and the
    /// snapshot row at hand.
    fn decide(&self, at: End) -> Take {
        // Once the snapshot side is exhausted, a row the other end pulled is still at hand.
        let base = match (at, self.base_done) {
            (End::Front, false) => self.front.as_ref(),
            (End::Front, true) => self.front.as_ref().or(self.back.as_ref()),
            (End::Back, false) => self.back.as_ref(),
            (End::Back, true) => self.back.as_ref().or(self.front.as_ref()),
        }
        .map(|(k, _)| k.as_slice());
        let tables = self.opt.tables.borrow();
        let pending = self.idx.and_then(|i| tables.get(i));
        let (lo, hi) = (bound_ref(&self.lo), bound_ref(&self.hi));
        let empty = is_empty_range(lo, hi);
        let write = pending.and_then(|p| nearest(&p.writes, lo, hi, at, empty));
        let add = pending.and_then(|p| nearest(&p.adds, lo, hi, at, empty));
        // The nearer of the two (they never share a key).
        let nearer_is_add = match (write, add) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some((w, _)), Some((a, _))) => match at {
                End::Front => a < w,
                End::Back => a > w,
            },
        };
        let first = |k: &[u8], b: &[u8]| match at {
            End::Front => k <= b,
            End::Back => k >= b,
        };
        if nearer_is_add {
            if let (Some((k, &delta)), Some(p)) = (add, pending) {
                return match base {
                    Some(b) if !first(k, b) => Take::Base,
                    b => Take::Add(k.clone(), delta, p.name.clone(), b == Some(k.as_slice())),
                };
            }
        }
        match (write, base) {
            (None, None) => Take::End,
            (None, Some(_)) => Take::Base,
            (Some((k, v)), None) => Take::Write(k.clone(), v.clone(), false),
            (Some((k, v)), Some(b)) => {
                if first(k, b) {
                    Take::Write(k.clone(), v.clone(), k.as_slice() == b)
                } else {
                    Take::Base
                }
            }
        }
    }

    /// Takes the snapshot row at hand for `at`.
    fn take_base(&mut self, at: End) -> Option<Row> {
        match at {
            End::Front => self.front.take().or_else(|| self.back.take()),
            End::Back => self.back.take().or_else(|| self.front.take()),
        }
    }

    /// The next row from `at`; the end for good once it returned the end or an error
    /// (invariant 3).
    fn step(&mut self, at: End) -> Result<Option<Row>> {
        if self.ended {
            return Ok(None);
        }
        let row = self.step_unfused(at);
        if !matches!(row, Ok(Some(_))) {
            self.ended = true;
        }
        row
    }

    fn step_unfused(&mut self, at: End) -> Result<Option<Row>> {
        loop {
            self.pull(at)?;
            let (key, value) = match self.decide(at) {
                Take::End => return Ok(None),
                Take::Base => match self.take_base(at) {
                    Some((k, v)) => (k, Some(v)),
                    None => return Ok(None),
                },
                Take::Write(k, v, hides) => {
                    if hides {
                        self.take_base(at);
                    }
                    (k, v)
                }
                Take::Add(k, delta, table, hides) => {
                    let old = if hides { self.take_base(at) } else { None };
                    let v = add_to(&table, &k, old.as_ref().map(|(_, v)| v.as_slice()), delta)?;
                    (k, Some(v))
                }
            };
            match at {
                End::Front => self.lo = Bound::Excluded(key.clone()),
                End::Back => self.hi = Bound::Excluded(key.clone()),
            }
            if let Some(v) = value {
                return Ok(Some((key, v)));
            }
        }
    }

    /// The next row from the front.
    ///
    /// # Errors
    ///
    /// A snapshot page cannot be read or is corrupt.
    pub(crate) fn next_row(&mut self) -> Result<Option<Row>> {
        self.step(End::Front)
    }

    /// The next row from the back.
    ///
    /// # Errors
    ///
    /// As [`next_row`](Self::next_row).
    pub(crate) fn next_back_row(&mut self) -> Result<Option<Row>> {
        self.step(End::Back)
    }
}
