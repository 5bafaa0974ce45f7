//! Range cursors: finding the leaf after or before a bound (a descent per leaf, no sibling
//! pointers) and [`Range`], the double-ended iterator over a key range.
//!
//! Invariants: both ends may be used at once and never cross; every key returned lies in the
//! range, in order. A leaf's rows within the range are buffered (owned copies, overflow values
//! as references read when returned; a few at the first fill, more at each later one) only
//! while the store's [`generation`](PageRead::generation) is the one they were read at: after
//! the transaction wrote, both buffers are dropped and refilled from
//! the last keys returned, so a row removed, rewritten or moved since, or an overflow chain
//! freed and reused, is never returned from a stale copy
//! (`a_cursor_sees_its_own_transaction_write_around_it` in keel's tests).

use super::*;

impl BTree {
    /// Entries of the leaf holding the first keys above `low`: those between `low` and `high`,
    /// at most `limit` of them; and the fence above that leaf (the smallest key the next leaf
    /// may hold).
    pub(super) fn leaf_after<S: PageRead>(
        &self,
        store: &S,
        low: &Bound<Vec<u8>>,
        high: &Bound<Vec<u8>>,
        limit: usize,
    ) -> Result<LeafStep> {
        self.leaf_toward(
            store,
            |n| {
                let (start, end) = (first_at_or_above(n, low)?, end_at_or_below(n, high)?);
                let end = end.max(start);
                Ok(start..end.min(start.saturating_add(limit)))
            },
            |n| {
                let c = match low {
                    Bound::Unbounded => 0,
                    Bound::Included(k) | Bound::Excluded(k) => n.child_index_for(k)?,
                };
                // The separator after child c bounds it from above.
                Ok((c, (c < n.len()).then_some(c)))
            },
            false,
        )
    }

    /// Entries (descending) of the leaf holding the last keys below `high`: those between `low`
    /// and `high`, at most `limit` of them (the highest); and the fence below that leaf (every
    /// key of the previous leaf is smaller).
    pub(super) fn leaf_before<S: PageRead>(
        &self,
        store: &S,
        low: &Bound<Vec<u8>>,
        high: &Bound<Vec<u8>>,
        limit: usize,
    ) -> Result<LeafStep> {
        self.leaf_toward(
            store,
            |n| {
                let (start, end) = (first_at_or_above(n, low)?, end_at_or_below(n, high)?);
                let start = start.min(end);
                Ok(start.max(end.saturating_sub(limit))..end)
            },
            |n| {
                let c = match high {
                    Bound::Unbounded => n.len(),
                    Bound::Included(k) => n.child_index_for(k)?,
                    // Keys below k: if k is separator i, they are in child i, not i + 1.
                    Bound::Excluded(k) => n.search(k)?.unwrap_or_else(|i| i),
                };
                // The separator before child c bounds it from below.
                Ok((c, c.checked_sub(1)))
            },
            true,
        )
    }

    /// The descent both range directions share: `route` picks the child of an inner node and
    /// the separator that fences it on the scan's far side; at the leaf, `entries` picks the
    /// slots to return (in descending order when `descending`). Returns them and the innermost
    /// fence met on the way down.
    pub(super) fn leaf_toward<S: PageRead>(
        &self,
        store: &S,
        entries: impl Fn(&Node<'_>) -> Result<std::ops::Range<usize>>,
        route: impl Fn(&Node<'_>) -> Result<(usize, Option<usize>)>,
        descending: bool,
    ) -> Result<LeafStep> {
        let mut id = self.root;
        let mut fence: Option<Vec<u8>> = None;
        let mut from: Option<(PageId, usize)> = None;
        for _ in 0..MAX_DEPTH {
            let step = with_node_from(store, id, from, |n| {
                if n.is_leaf() {
                    let mut range = entries(&n)?;
                    let mut out = Vec::with_capacity(range.len());
                    let mut push = |i: usize| -> Result<()> {
                        out.push((n.key(i)?.to_vec(), FoundValue::from_ref(n.value(i)?)));
                        Ok(())
                    };
                    if descending {
                        range.rev().try_for_each(&mut push)?;
                    } else {
                        range.try_for_each(&mut push)?;
                    }
                    return Ok(Err(out));
                }
                let (c, sep) = route(&n)?;
                let f = sep.map(|i| n.key(i).map(<[u8]>::to_vec)).transpose()?;
                Ok(Ok((n.child(c)?, c, f)))
            })?;
            match step {
                Err(entries) => return Ok((entries, fence)),
                Ok((child, slot, f)) => {
                    if f.is_some() {
                        fence = f;
                    }
                    from = Some((id, slot));
                    id = child;
                }
            }
        }
        Err(BTreeError::Corrupt {
            page_id: id,
            detail: "cycle of child pointers".into(),
        })
    }
}

/// An ordered iterator over a key range; also iterates backwards (`.rev()`), and both ends may
/// be used at once without crossing.
pub struct Range<S: PageRead> {
    pub(super) tree: BTree,
    pub(super) store: S,
    pub(super) front: Bound<Vec<u8>>,
    pub(super) back: Bound<Vec<u8>>,
    pub(super) front_buf: VecDeque<(Vec<u8>, FoundValue)>,
    pub(super) back_buf: VecDeque<(Vec<u8>, FoundValue)>,
    /// How many rows the next fill of each end may buffer (see [`FIRST_BATCH`]).
    pub(super) front_batch: usize,
    pub(super) back_batch: usize,
    pub(super) done: bool,
    /// The store's generation when the buffers were filled.
    pub(super) generation: u64,
}

/// The first slot of leaf `n` whose key is at or above the range start `low`.
fn first_at_or_above(n: &Node<'_>, low: &Bound<Vec<u8>>) -> Result<usize> {
    Ok(match low {
        Bound::Unbounded => 0,
        Bound::Included(k) => n.search(k)?.unwrap_or_else(|i| i),
        Bound::Excluded(k) => match n.search(k)? {
            Ok(i) => i + 1,
            Err(i) => i,
        },
    })
}

/// The slot of leaf `n` after the last key at or below the range end `high`.
fn end_at_or_below(n: &Node<'_>, high: &Bound<Vec<u8>>) -> Result<usize> {
    Ok(match high {
        Bound::Unbounded => n.len(),
        Bound::Included(k) => match n.search(k)? {
            Ok(i) => i + 1,
            Err(i) => i,
        },
        Bound::Excluded(k) => n.search(k)?.unwrap_or_else(|i| i),
    })
}

/// Rows a range buffers at its first fill of each end; each later fill takes `RAMP` times
/// more (up to a whole leaf), so a scan that wants one or a few rows copies a few, and a long
/// one re-descends only a few extra times.
pub(super) const FIRST_BATCH: usize = 4;
pub(super) const RAMP: usize = 4;

impl<S: PageRead> Range<S> {
    /// Drops the buffered rows if the store's pages changed since they were read (the bounds
    /// already stand after the last rows returned, so the next fill reads them afresh).
    #[inline]
    fn revalidate(&mut self) {
        let g = self.store.generation();
        if g != self.generation {
            self.generation = g;
            self.front_buf.clear();
            self.back_buf.clear();
        }
    }

    fn fill_front(&mut self) -> Result<()> {
        loop {
            let (entries, fence) =
                self.tree
                    .leaf_after(&self.store, &self.front, &self.back, self.front_batch)?;
            if !entries.is_empty() {
                self.front_buf = entries.into();
                self.front_batch = self.front_batch.saturating_mul(RAMP);
                return Ok(());
            }
            match fence {
                Some(f) if bound_ok_high(&f, &self.back) => {
                    // The fence must move strictly forward (a leaf's high fence is above every
                    // key that leads to it), or corrupt separators or hints would loop forever.
                    let advances = match &self.front {
                        Bound::Unbounded => true,
                        Bound::Included(k) | Bound::Excluded(k) => f.as_slice() > k.as_slice(),
                    };
                    if !advances {
                        return Err(BTreeError::Corrupt {
                            page_id: self.tree.root,
                            detail: format!("separator {f:?} does not advance a forward scan"),
                        });
                    }
                    self.front = Bound::Included(f)
                }
                _ => {
                    self.done = true;
                    return Ok(());
                }
            }
        }
    }

    fn fill_back(&mut self) -> Result<()> {
        loop {
            let (entries, fence) =
                self.tree
                    .leaf_before(&self.store, &self.front, &self.back, self.back_batch)?;
            if !entries.is_empty() {
                self.back_buf = entries.into();
                self.back_batch = self.back_batch.saturating_mul(RAMP);
                return Ok(());
            }
            match fence {
                Some(f) if bound_ok_low(&f, &self.front) => {
                    let advances = match &self.back {
                        Bound::Unbounded => true,
                        Bound::Included(k) => f.as_slice() <= k.as_slice(),
                        Bound::Excluded(k) => f.as_slice() < k.as_slice(),
                    };
                    if !advances {
                        return Err(BTreeError::Corrupt {
                            page_id: self.tree.root,
                            detail: format!("separator {f:?} does not advance a backward scan"),
                        });
                    }
                    self.back = Bound::Excluded(f)
                }
                _ => {
                    self.done = true;
                    return Ok(());
                }
            }
        }
    }

    fn finish(&mut self, item: (Vec<u8>, FoundValue)) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        let (k, v) = item;
        match self.tree.materialize(&self.store, v) {
            Ok(v) => Some(Ok((k, v))),
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl<S: PageRead> Iterator for Range<S> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.revalidate();
        if self.front_buf.is_empty() {
            if let Err(e) = self.fill_front() {
                self.done = true;
                return Some(Err(e));
            }
        }
        let item = self.front_buf.pop_front()?;
        if !bound_ok_high(&item.0, &self.back) || !bound_ok_low(&item.0, &self.front) {
            self.done = true;
            return None;
        }
        self.front = Bound::Excluded(item.0.clone());
        self.finish(item)
    }
}

impl<S: PageRead> DoubleEndedIterator for Range<S> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.revalidate();
        if self.back_buf.is_empty() {
            if let Err(e) = self.fill_back() {
                self.done = true;
                return Some(Err(e));
            }
        }
        let item = self.back_buf.pop_front()?;
        if !bound_ok_low(&item.0, &self.front) || !bound_ok_high(&item.0, &self.back) {
            self.done = true;
            return None;
        }
        self.back = Bound::Excluded(item.0.clone());
        self.finish(item)
    }
}
