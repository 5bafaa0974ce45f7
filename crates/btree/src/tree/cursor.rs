//! The forward cursor: one descent to the first leaf of a range, then leaf to leaf through a
//! stack of (inner node, child index) — the parent of the next leaf is already on the stack, so
//! moving on reads that parent and the nodes down to the next leaf, never the path from the
//! root again. Each leaf is copied once into a buffer the cursor owns, and rows are handed out
//! as slices borrowed from it (no allocation per row; an overflow value is read into a second
//! reused buffer).
//!
//! The tree must not change while a cursor lives: Keel guarantees it (a read transaction
//! excludes writers; a write transaction's cursor borrows its table).
//!
//! # Invariants (each tested by breaking it on purpose)
//!
//! 1. Keys come out strictly ascending, within a leaf and across leaves; a tree whose keys do
//!    not (damaged separators or cells) is corruption, never a wrong or repeated row
//!    (`a_cursor_refuses_keys_out_of_order`).
//! 2. Every child's level is its parent's minus one, as in every descent: a damaged pointer or
//!    level is an error naming the parent, never an endless walk (depth bounded by
//!    [`MAX_DEPTH`]).
//!
//! Read-ahead: before the cursor reads a leaf of a parent it has not yet read ahead far enough
//! in, it hands that leaf and the next ones of the parent ([`READ_AHEAD`] in all) to
//! [`PageRead::prefetch`] (the pool reads the ones it does not hold in one batch), so a scan
//! of cold data waits for one batched read per [`READ_AHEAD`] / 2 leaves or so instead of one
//! read per leaf. Only the first leaf of the scan is read without a hint.

use super::*;

/// Leaves handed to [`PageRead::prefetch`] ahead of a forward cursor.
pub(crate) const READ_AHEAD: usize = 16;

/// A forward cursor over a key range with rows borrowed from it: `while let Some((k, v)) =
/// cursor.next()? { ... }`. Made by [`BTree::cursor`].
pub struct Cursor<S: PageRead> {
    tree: BTree,
    store: S,
    /// From the root down: each inner node above the current leaf, the child taken, and how
    /// many children it has.
    path: Vec<(PageId, usize, usize)>,
    leaf_id: PageId,
    /// A copy of the current leaf.
    leaf: Vec<u8>,
    slot: usize,
    slots: usize,
    high: Bound<Vec<u8>>,
    /// The last key of the previous non-empty leaf (the next leaf's keys must be above it).
    prev_last: Option<Vec<u8>>,
    /// The current row's overflow value.
    value: Vec<u8>,
    done: bool,
    /// The parent whose leaves were last read ahead, and the child index read ahead to.
    ahead: (PageId, usize),
}

impl BTree {
    /// A forward cursor over `range`, positioned before its first row.
    ///
    /// # Errors
    ///
    /// A page on the way to the first leaf cannot be read or is corrupt.
    pub fn cursor<'k, S: PageRead, R: RangeBounds<&'k [u8]>>(
        &self,
        store: S,
        range: R,
    ) -> Result<Cursor<S>> {
        let own = |b: Bound<&&[u8]>| match b {
            Bound::Included(k) => Bound::Included(k.to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut c = Cursor {
            tree: *self,
            store,
            path: Vec::new(),
            leaf_id: self.root,
            leaf: Vec::new(),
            slot: 0,
            slots: 0,
            high: own(range.end_bound()),
            prev_last: None,
            value: Vec::new(),
            done: false,
            ahead: (PageId(0), 0),
        };
        c.seek(&own(range.start_bound()))?;
        Ok(c)
    }
}

impl<S: PageRead> Cursor<S> {
    /// Descends from the root to the leaf holding the first key at or above `low`.
    fn seek(&mut self, low: &Bound<Vec<u8>>) -> Result<()> {
        let mut id = self.tree.root;
        let mut expect: Option<u8> = None;
        for _ in 0..MAX_DEPTH {
            let from = self.path.last().map(|&(p, c, _)| (p, c));
            let step = with_node_from(&self.store, id, from, |n| {
                if let Some(e) = expect {
                    if n.level() != e {
                        return Err(level_error(id, e, n.level()));
                    }
                }
                if n.is_leaf() {
                    return Ok(None);
                }
                let c = match low {
                    Bound::Unbounded => 0,
                    Bound::Included(k) | Bound::Excluded(k) => n.child_index_for(k)?,
                };
                Ok(Some((n.child(c)?, c, n.len() + 1, n.level())))
            })?;
            match step {
                None => {
                    if let Some(&(parent, c, _)) = self.path.last() {
                        self.read_ahead(parent, c)?;
                    }
                    self.load_leaf(id)?;
                    let n = Node::new(&self.leaf, id)?;
                    self.slot = match low {
                        Bound::Unbounded => 0,
                        Bound::Included(k) => n.search(k)?.unwrap_or_else(|i| i),
                        Bound::Excluded(k) => match n.search(k)? {
                            Ok(i) => i + 1,
                            Err(i) => i,
                        },
                    };
                    return Ok(());
                }
                Some((child, c, children, level)) => {
                    self.path.push((id, c, children));
                    expect = level.checked_sub(1);
                    id = child;
                }
            }
        }
        Err(BTreeError::Corrupt {
            page_id: id,
            detail: format!("tree deeper than {MAX_DEPTH} levels (a cycle?)"),
        })
    }

    /// Hands child `c` of `parent` (whose children are leaves) and the leaves after it to the
    /// store's prefetch, unless they were handed over already.
    fn read_ahead(&mut self, parent: PageId, c: usize) -> Result<()> {
        if self.ahead.0 == parent && c + READ_AHEAD / 2 < self.ahead.1 {
            return Ok(());
        }
        let ids = with_node(&self.store, parent, |n| {
            let children = n.len() + 1;
            (c..children.min(c + READ_AHEAD))
                .map(|i| n.child(i))
                .collect::<Result<Vec<PageId>>>()
        })?;
        self.ahead = (parent, c + ids.len());
        if !ids.is_empty() {
            self.store.prefetch(&ids);
        }
        Ok(())
    }

    /// Copies leaf `id` into the cursor's buffer.
    fn load_leaf(&mut self, id: PageId) -> Result<()> {
        let leaf = &mut self.leaf;
        self.store.read(id, |p| {
            leaf.clear();
            leaf.extend_from_slice(p);
        })?;
        let n = Node::new(&self.leaf, id)?;
        if !n.is_leaf() {
            return Err(BTreeError::Corrupt {
                page_id: id,
                detail: "a leaf-level node is not a leaf".into(),
            });
        }
        self.slots = n.len();
        self.leaf_id = id;
        self.slot = 0;
        Ok(())
    }

    /// Moves to the next leaf through the stack: up to the deepest inner node with a child
    /// right of the one taken, then down its leftmost path. False at the end of the tree.
    fn next_leaf(&mut self) -> Result<bool> {
        if self.slots > 0 {
            let n = Node::new(&self.leaf, self.leaf_id)?;
            let last = n.key(self.slots - 1)?;
            let buf = self.prev_last.get_or_insert_with(Vec::new);
            buf.clear();
            buf.extend_from_slice(last);
        }
        loop {
            let Some(&(_, c, children)) = self.path.last() else {
                return Ok(false);
            };
            if c + 1 < children {
                if let Some(top) = self.path.last_mut() {
                    top.1 = c + 1;
                }
                break;
            }
            self.path.pop();
        }
        // Down the leftmost path from the next child.
        for _ in 0..MAX_DEPTH {
            let Some(&(parent, c, _)) = self.path.last() else {
                return Ok(false);
            };
            let (child, expect) = with_node(&self.store, parent, |n| {
                Ok((n.child(c)?, n.level().checked_sub(1)))
            })?;
            if expect == Some(0) {
                self.read_ahead(parent, c)?;
            }
            let step = with_node_from(&self.store, child, Some((parent, c)), |n| {
                if let Some(e) = expect {
                    if n.level() != e {
                        return Err(level_error(child, e, n.level()));
                    }
                }
                Ok((!n.is_leaf()).then(|| n.len() + 1))
            })?;
            match step {
                None => {
                    self.load_leaf(child)?;
                    return Ok(true);
                }
                Some(children) => {
                    if self.path.len() >= MAX_DEPTH {
                        break;
                    }
                    self.path.push((child, 0, children));
                }
            }
        }
        Err(BTreeError::Corrupt {
            page_id: self.tree.root,
            detail: format!("tree deeper than {MAX_DEPTH} levels (a cycle?)"),
        })
    }

    /// The next row, borrowed from the cursor until the next call; `None` at the end of the
    /// range. After an error the cursor stays at its end.
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt (keys out of order included).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        match self.step() {
            Ok(Some((key, value))) => {
                let k = &self.leaf[key];
                let v = match value {
                    Some(v) => &self.leaf[v],
                    None => &self.value[..],
                };
                Ok(Some((k, v)))
            }
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }

    /// Finds the next row: the byte range of its key in the leaf buffer, and of its value
    /// (`None`: the value is in `self.value`, read from its overflow chain).
    #[allow(clippy::type_complexity)]
    fn step(&mut self) -> Result<Option<(std::ops::Range<usize>, Option<std::ops::Range<usize>>)>> {
        if self.done {
            return Ok(None);
        }
        while self.slot >= self.slots {
            if !self.next_leaf()? {
                return Ok(None);
            }
            if self.slots > 0 {
                let n = Node::new(&self.leaf, self.leaf_id)?;
                let first = n.key(0)?;
                if let Some(prev) = &self.prev_last {
                    if first <= prev.as_slice() {
                        return Err(out_of_order(self.leaf_id, 0));
                    }
                }
            }
        }
        let at = self.slot;
        let base = self.leaf.as_ptr() as usize;
        let range_of = |s: &[u8]| {
            let start = s.as_ptr() as usize - base;
            start..start + s.len()
        };
        let n = Node::new(&self.leaf, self.leaf_id)?;
        let key = n.key(at)?;
        if !bound_ok_high(key, &self.high) {
            return Ok(None);
        }
        if at > 0 && n.key(at - 1)? >= key {
            return Err(out_of_order(self.leaf_id, at));
        }
        let key_range = range_of(key);
        let value = match n.value(at)? {
            ValueRef::Inline(v) => Some(range_of(v)),
            ValueRef::Overflow { first, len } => {
                self.value = self.tree.read_overflow(&self.store, first, len)?;
                None
            }
        };
        self.slot = at + 1;
        Ok(Some((key_range, value)))
    }
}

fn out_of_order(id: PageId, slot: usize) -> BTreeError {
    BTreeError::Corrupt {
        page_id: id,
        detail: format!("key {slot} is not above the key before it (keys out of order)"),
    }
}
