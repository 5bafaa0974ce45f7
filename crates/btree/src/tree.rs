//! The B+tree operations: get, insert (with splits), remove, range cursors, structural check.

use crate::node::{
    self, cell_child, cell_key, inner_cell, leaf_cell_inline, leaf_cell_overflow, rd_u32, rd_u64,
    wr_u64, Limits, Node, ValueRef, KIND_INNER, KIND_LEAF, OVERFLOW_HEADER,
};
use crate::optimistic::{self, Step as OptStep};
use crate::{BTreeError, PageRead, PageWrite, ReadToken, Result};
use keel_page::{PageHeader, PageId, PageType, PAGE_HEADER_SIZE};
use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

/// Deepest tree walked before the structure is declared corrupt (a cycle of child pointers).
const MAX_DEPTH: usize = 64;

/// Optimistic descents a `get` tries before it takes the latched path.
const OPTIMISTIC_TRIES: usize = 2;

/// What a range step finds: a leaf's entries (in scan order) and the fence beyond that leaf.
type LeafStep = (Vec<(Vec<u8>, FoundValue)>, Option<Vec<u8>>);

/// A B+tree identified by its root page (which never changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BTree {
    root: PageId,
    limits: Limits,
}

/// What [`BTree::check`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Levels (1 for a tree that is a single leaf).
    pub depth: usize,
    /// Leaf nodes.
    pub leaves: usize,
    /// Inner nodes.
    pub inners: usize,
    /// Overflow pages.
    pub overflow_pages: usize,
    /// Key/value pairs.
    pub entries: usize,
}

/// A value as found in a leaf, detached from the page.
enum FoundValue {
    Inline(Vec<u8>),
    Overflow { first: PageId, len: u64 },
}

impl FoundValue {
    fn from_ref(v: ValueRef<'_>) -> FoundValue {
        match v {
            ValueRef::Inline(b) => FoundValue::Inline(b.to_vec()),
            ValueRef::Overflow { first, len } => FoundValue::Overflow { first, len },
        }
    }
}

fn with_node<S: PageRead, R>(
    store: &S,
    id: PageId,
    f: impl FnOnce(Node<'_>) -> Result<R>,
) -> Result<R> {
    store.read(id, |p| Node::new(p, id).and_then(f))?
}

/// [`with_node`] for a page reached through a pointer read from disk: `from` is the page and
/// slot that held it (`None` at the root). A failure to read or decode the target names the
/// pointer ([`BTreeError::BadPointer`]), and a pointer to the page that holds it is refused
/// before it is followed.
fn with_node_from<S: PageRead, R>(
    store: &S,
    id: PageId,
    from: Option<(PageId, usize)>,
    f: impl FnOnce(Node<'_>) -> Result<R>,
) -> Result<R> {
    let Some((parent, slot)) = from else {
        return with_node(store, id, f);
    };
    let bad = |source: BTreeError| BTreeError::BadPointer {
        page_id: parent,
        slot,
        target: id,
        source: Box::new(source),
    };
    if id == parent {
        return Err(bad(BTreeError::Corrupt {
            page_id: parent,
            detail: "a node points to itself".into(),
        }));
    }
    with_node(store, id, f).map_err(bad)
}

fn level_error(id: PageId, expected: u8, found: u8) -> BTreeError {
    BTreeError::Corrupt {
        page_id: id,
        detail: format!("node at level {found}, its parent expects level {expected}"),
    }
}

fn bound_ok_low(key: &[u8], low: &Bound<Vec<u8>>) -> bool {
    match low {
        Bound::Unbounded => true,
        Bound::Included(k) => key >= k.as_slice(),
        Bound::Excluded(k) => key > k.as_slice(),
    }
}

fn bound_ok_high(key: &[u8], high: &Bound<Vec<u8>>) -> bool {
    match high {
        Bound::Unbounded => true,
        Bound::Included(k) => key <= k.as_slice(),
        Bound::Excluded(k) => key < k.as_slice(),
    }
}

impl BTree {
    /// Creates an empty tree (one leaf, the root) in `store`.
    pub fn create<S: PageWrite>(store: &mut S) -> Result<BTree> {
        let root = store.allocate(PageType::BTREE_LEAF)?;
        store.write(root, |p| node::init(p, KIND_LEAF, 0))?;
        Ok(BTree::open(root, store.page_size()))
    }

    /// The tree whose root is `root`.
    pub fn open(root: PageId, page_size: usize) -> BTree {
        BTree {
            root,
            limits: Limits::new(page_size),
        }
    }

    /// The root page (stable for the tree's life).
    pub fn root(&self) -> PageId {
        self.root
    }

    /// The size limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The value stored under `key`.
    ///
    /// First tries an optimistic descent ([`PageRead::read_optimistic`]: no latches, each page
    /// validated after it is read and each parent re-validated after its child), then — if
    /// the store has no optimistic reads, a page is not at hand, or pages kept changing — the
    /// latched descent.
    pub fn get<S: PageRead>(&self, store: &S, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(found) = self.get_optimistic(store, key) {
            return found.map(|v| self.materialize(store, v)).transpose();
        }
        self.get_latched(store, key)
    }

    /// The optimistic descent of `get`: `None` if it did not succeed (fall back).
    fn get_optimistic<S: PageRead>(&self, store: &S, key: &[u8]) -> Option<Option<FoundValue>> {
        'attempt: for _ in 0..OPTIMISTIC_TRIES {
            let mut id = self.root;
            let mut expect: Option<u8> = None;
            let mut parent: Option<ReadToken> = None;
            for _ in 0..MAX_DEPTH {
                let (step, token) =
                    store.read_optimistic(id, |w| optimistic::step(w, key, expect))?;
                if parent.is_some_and(|p| !store.is_unchanged(p)) {
                    continue 'attempt;
                }
                // A validated page that does not decode: the latched path reports it.
                match step? {
                    OptStep::Child(c, lvl) => {
                        id = c;
                        expect = Some(lvl);
                        parent = Some(token);
                    }
                    OptStep::Absent => return Some(None),
                    OptStep::Inline(v) => return Some(Some(FoundValue::Inline(v))),
                    OptStep::Overflow { first, len } => {
                        return Some(Some(FoundValue::Overflow { first, len }))
                    }
                }
            }
            return None;
        }
        None
    }

    /// The latched descent of `get`.
    fn get_latched<S: PageRead>(&self, store: &S, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut id = self.root;
        let mut expect: Option<u8> = None;
        let mut from: Option<(PageId, usize)> = None;
        for _ in 0..MAX_DEPTH {
            enum Step {
                Child(PageId, usize, u8),
                Found(Option<FoundValue>),
            }
            let step = with_node_from(store, id, from, |n| {
                if let Some(e) = expect {
                    if n.level() != e {
                        return Err(level_error(id, e, n.level()));
                    }
                }
                if n.is_leaf() {
                    return Ok(Step::Found(match n.search(key)? {
                        Ok(i) => Some(FoundValue::from_ref(n.value(i)?)),
                        Err(_) => None,
                    }));
                }
                let c = n.child_index_for(key)?;
                Ok(Step::Child(n.child(c)?, c, n.level().wrapping_sub(1)))
            })?;
            match step {
                Step::Child(c, slot, lvl) => {
                    from = Some((id, slot));
                    id = c;
                    expect = Some(lvl);
                }
                Step::Found(v) => return v.map(|v| self.materialize(store, v)).transpose(),
            }
        }
        Err(BTreeError::Corrupt {
            page_id: id,
            detail: format!("tree deeper than {MAX_DEPTH} levels (a cycle?)"),
        })
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert<S: PageWrite>(
        &self,
        store: &mut S,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        if key.len() > self.limits.max_key {
            return Err(BTreeError::KeyTooLarge {
                len: key.len(),
                max: self.limits.max_key,
            });
        }
        if value.len() as u64 > u32::MAX as u64 {
            return Err(BTreeError::ValueTooLarge { len: value.len() });
        }
        let (path, leaf) = self.descend(store, key)?;
        let found = with_node(store, leaf, |n| {
            Ok(match n.search(key)? {
                Ok(i) => (i, Some(FoundValue::from_ref(n.value(i)?))),
                Err(i) => (i, None),
            })
        })?;
        let (idx, old) = found;
        let old_value = match old {
            Some(FoundValue::Overflow { first, len }) => {
                let v = self.read_overflow(store, first, len)?;
                self.free_overflow(store, first)?;
                Some(v)
            }
            Some(FoundValue::Inline(v)) => Some(v),
            None => None,
        };
        let cell = if value.len() > self.limits.max_inline_value(key.len()) {
            let first = self.write_overflow(store, value)?;
            leaf_cell_overflow(key, first, value.len() as u64)
        } else {
            leaf_cell_inline(key, value)
        };
        if old_value.is_some() {
            store.write(leaf, |p| node::remove(p, leaf, idx))??;
        }
        self.insert_cell(store, path, leaf, idx, cell)?;
        Ok(old_value)
    }

    /// Removes `key`; returns its value. Nodes are not merged (an emptied leaf stays in place).
    pub fn remove<S: PageWrite>(&self, store: &mut S, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (_, leaf) = self.descend(store, key)?;
        let found = with_node(store, leaf, |n| {
            Ok(match n.search(key)? {
                Ok(i) => Some((i, FoundValue::from_ref(n.value(i)?))),
                Err(_) => None,
            })
        })?;
        let Some((idx, v)) = found else {
            return Ok(None);
        };
        store.write(leaf, |p| node::remove(p, leaf, idx))??;
        Ok(Some(match v {
            FoundValue::Inline(v) => v,
            FoundValue::Overflow { first, len } => {
                let v = self.read_overflow(store, first, len)?;
                self.free_overflow(store, first)?;
                v
            }
        }))
    }

    /// Iterates over the keys in `range`, in order (and `.rev()` for descending).
    ///
    /// Takes any range over byte slices: `..`, `a..b`, `a..=b`, `a..`, `..b`, or a pair of
    /// [`Bound`]s.
    ///
    /// The cursor owns `store` (pass `&pages` to lend a store).
    pub fn range<'k, S: PageRead, R: RangeBounds<&'k [u8]>>(&self, store: S, range: R) -> Range<S> {
        let own = |b: Bound<&&[u8]>| match b {
            Bound::Included(k) => Bound::Included(k.to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        Range {
            tree: *self,
            store,
            front: own(range.start_bound()),
            back: own(range.end_bound()),
            front_buf: VecDeque::new(),
            back_buf: VecDeque::new(),
            done: false,
        }
    }

    /// Walks the whole tree checking its invariants (key order and bounds, levels, slot
    /// bounds, overflow chains); returns what it counted.
    pub fn check<S: PageRead>(&self, store: &S) -> Result<TreeStats> {
        let mut stats = TreeStats::default();
        let level = with_node(store, self.root, |n| Ok(n.level()))?;
        stats.depth = level as usize + 1;
        self.check_node(store, self.root, level, None, None, &mut stats, 0)?;
        Ok(stats)
    }

    /// Frees every page of the tree, including the root.
    pub fn destroy<S: PageWrite>(&self, store: &mut S) -> Result<()> {
        self.destroy_node(store, self.root, 0)
    }

    // ----- internals -----

    fn destroy_node<S: PageWrite>(&self, store: &mut S, id: PageId, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(BTreeError::Corrupt {
                page_id: id,
                detail: "cycle".into(),
            });
        }
        let (children, overflow) = with_node(store, id, |n| {
            let mut children = Vec::new();
            let mut overflow = Vec::new();
            if n.is_leaf() {
                for i in 0..n.len() {
                    if let ValueRef::Overflow { first, .. } = n.value(i)? {
                        overflow.push(first);
                    }
                }
            } else {
                for c in 0..=n.len() {
                    children.push(n.child(c)?);
                }
            }
            Ok((children, overflow))
        })?;
        for c in children {
            self.destroy_node(store, c, depth + 1)?;
        }
        for o in overflow {
            self.free_overflow(store, o)?;
        }
        store.free(id)
    }

    #[allow(clippy::too_many_arguments)]
    fn check_node<S: PageRead>(
        &self,
        store: &S,
        id: PageId,
        level: u8,
        low: Option<&[u8]>,
        high: Option<&[u8]>,
        stats: &mut TreeStats,
        depth: usize,
    ) -> Result<()> {
        let corrupt = |detail: String| BTreeError::Corrupt {
            page_id: id,
            detail,
        };
        if depth > MAX_DEPTH {
            return Err(corrupt("cycle of child pointers".into()));
        }
        let (keys, children, overflow, is_leaf) = with_node(store, id, |n| {
            if n.level() != level {
                return Err(level_error(id, level, n.level()));
            }
            if n.is_leaf() != (level == 0) {
                return Err(BTreeError::Corrupt {
                    page_id: id,
                    detail: format!("leaf flag {} at level {level}", n.is_leaf()),
                });
            }
            n.check_hints()?;
            let mut keys = Vec::with_capacity(n.len());
            let mut overflow = Vec::new();
            for i in 0..n.len() {
                keys.push(n.key(i)?.to_vec());
                if n.is_leaf() {
                    if let ValueRef::Overflow { first, len } = n.value(i)? {
                        overflow.push((first, len));
                    }
                }
            }
            let mut children = Vec::new();
            if !n.is_leaf() {
                for c in 0..=n.len() {
                    children.push(n.child(c)?);
                }
            }
            Ok((keys, children, overflow, n.is_leaf()))
        })?;
        for w in keys.windows(2) {
            if w[0] >= w[1] {
                return Err(corrupt(format!(
                    "keys out of order: {:?} >= {:?}",
                    w[0], w[1]
                )));
            }
        }
        if let (Some(first), Some(lo)) = (keys.first(), low) {
            if first.as_slice() < lo {
                return Err(corrupt(format!(
                    "key {first:?} below the parent's bound {lo:?}"
                )));
            }
        }
        if let (Some(last), Some(hi)) = (keys.last(), high) {
            if last.as_slice() >= hi {
                return Err(corrupt(format!(
                    "key {last:?} not below the parent's bound {hi:?}"
                )));
            }
        }
        if is_leaf {
            stats.leaves += 1;
            stats.entries += keys.len();
            for (first, len) in overflow {
                let v = self.read_overflow(store, first, len)?;
                stats.overflow_pages += v.len().div_ceil(self.limits.overflow_capacity());
            }
            return Ok(());
        }
        stats.inners += 1;
        for (c, child) in children.iter().enumerate() {
            let lo = if c == 0 {
                low
            } else {
                Some(keys[c - 1].as_slice())
            };
            let hi = if c < keys.len() {
                Some(keys[c].as_slice())
            } else {
                high
            };
            self.check_node(store, *child, level - 1, lo, hi, stats, depth + 1)
                .map_err(|e| BTreeError::BadPointer {
                    page_id: id,
                    slot: c,
                    target: *child,
                    source: Box::new(e),
                })?;
        }
        Ok(())
    }

    /// Path of (inner page, child index) from the root, and the leaf for `key`.
    fn descend<S: PageRead>(
        &self,
        store: &S,
        key: &[u8],
    ) -> Result<(Vec<(PageId, usize)>, PageId)> {
        let mut path: Vec<(PageId, usize)> = Vec::new();
        let mut id = self.root;
        let mut expect: Option<u8> = None;
        for _ in 0..MAX_DEPTH {
            let next = with_node_from(store, id, path.last().copied(), |n| {
                if let Some(e) = expect {
                    if n.level() != e {
                        return Err(level_error(id, e, n.level()));
                    }
                }
                if n.is_leaf() {
                    return Ok(None);
                }
                let c = n.child_index_for(key)?;
                Ok(Some((c, n.child(c)?, n.level().wrapping_sub(1))))
            })?;
            match next {
                None => return Ok((path, id)),
                Some((c, child, lvl)) => {
                    path.push((id, c));
                    id = child;
                    expect = Some(lvl);
                }
            }
        }
        Err(BTreeError::Corrupt {
            page_id: id,
            detail: format!("tree deeper than {MAX_DEPTH} levels (a cycle?)"),
        })
    }

    /// Inserts `cell` at slot `idx` of node `id`, splitting upwards along `path` as needed.
    fn insert_cell<S: PageWrite>(
        &self,
        store: &mut S,
        mut path: Vec<(PageId, usize)>,
        mut id: PageId,
        mut idx: usize,
        mut cell: Vec<u8>,
    ) -> Result<()> {
        loop {
            // The common case: the cell fits in the free space, and the exact edits are known.
            let plan = store.read(id, |p| node::insert_edits(p, id, idx, &cell))??;
            if let Some(plan) = plan {
                store.edit(id, &plan.edits(&cell))?;
                return Ok(());
            }
            if store.write(id, |p| node::insert(p, id, idx, &cell))?? {
                return Ok(());
            }
            // Split: gather the node's cells with the new one in place.
            let (kind, level, leftmost, mut cells) = with_node(store, id, |n| {
                let kind = if n.is_leaf() { KIND_LEAF } else { KIND_INNER };
                Ok((kind, n.level(), n.leftmost(), n.cells()?))
            })?;
            let leaf = kind == KIND_LEAF;
            cells.insert(idx, std::mem::take(&mut cell));
            let page_type = if leaf {
                PageType::BTREE_LEAF
            } else {
                PageType::BTREE_INNER
            };
            let m = split_point(&cells, leaf, idx);
            // For leaves the separator is the first key on the right and stays there; for inner
            // nodes the middle cell moves up and its child becomes the right's leftmost child.
            let sep = cell_key(&cells[m], leaf).to_vec();
            let (left_cells, right_leftmost, right_cells) = if leaf {
                (cells[..m].to_vec(), PageId(0), cells[m..].to_vec())
            } else {
                (
                    cells[..m].to_vec(),
                    cell_child(&cells[m]),
                    cells[m + 1..].to_vec(),
                )
            };
            if path.is_empty() {
                // Root split: the root keeps its page id and becomes an inner node above two new
                // children holding its old contents.
                let l = store.allocate(page_type)?;
                let r = store.allocate(page_type)?;
                self.rebuild(store, l, kind, level, leftmost, &left_cells)?;
                self.rebuild(store, r, kind, level, right_leftmost, &right_cells)?;
                let root_cells = vec![inner_cell(&sep, r)];
                let root = self.root;
                store.reinit(root, PageType::BTREE_INNER)?;
                self.rebuild(store, root, KIND_INNER, level + 1, l, &root_cells)?;
                return Ok(());
            }
            let right = store.allocate(page_type)?;
            self.rebuild(store, right, kind, level, right_leftmost, &right_cells)?;
            self.rebuild(store, id, kind, level, leftmost, &left_cells)?;
            let (parent, c) = path.pop().ok_or(BTreeError::Corrupt {
                page_id: id,
                detail: "split without a parent".into(),
            })?;
            id = parent;
            idx = c;
            cell = inner_cell(&sep, right);
        }
    }

    fn rebuild<S: PageWrite>(
        &self,
        store: &mut S,
        id: PageId,
        kind: u8,
        level: u8,
        leftmost: PageId,
        cells: &[Vec<u8>],
    ) -> Result<()> {
        if store.write(id, |p| node::rebuild(p, kind, level, leftmost, cells))? {
            Ok(())
        } else {
            Err(BTreeError::Corrupt {
                page_id: id,
                detail: format!("{} cells do not fit after a split", cells.len()),
            })
        }
    }

    fn write_overflow<S: PageWrite>(&self, store: &mut S, value: &[u8]) -> Result<PageId> {
        let cap = self.limits.overflow_capacity();
        let chunks: Vec<&[u8]> = value.chunks(cap).collect();
        let mut pages = Vec::with_capacity(chunks.len());
        for _ in &chunks {
            pages.push(store.allocate(PageType::OVERFLOW)?);
        }
        for (i, chunk) in chunks.iter().enumerate() {
            let next = pages.get(i + 1).copied().unwrap_or(PageId(0));
            store.write(pages[i], |p| {
                let o = PAGE_HEADER_SIZE;
                wr_u64(p, o, next.0);
                p[o + 8..o + 12].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
                p[o + OVERFLOW_HEADER..o + OVERFLOW_HEADER + chunk.len()].copy_from_slice(chunk);
            })?;
        }
        pages
            .first()
            .copied()
            .ok_or(BTreeError::ValueTooLarge { len: 0 })
    }

    /// Reads `(next, data)` of one overflow page, checking its type and lengths.
    fn overflow_page<S: PageRead>(&self, store: &S, id: PageId) -> Result<(PageId, Vec<u8>)> {
        let cap = self.limits.overflow_capacity();
        store.read(id, |p| {
            let ty = PageHeader::read(p).map(|h| h.page_type);
            if ty != Some(PageType::OVERFLOW) {
                return Err(BTreeError::Corrupt {
                    page_id: id,
                    detail: format!("expected an overflow page, found type {ty:?}"),
                });
            }
            let o = PAGE_HEADER_SIZE;
            let used = rd_u32(p, o + 8) as usize;
            if used > cap {
                return Err(BTreeError::Corrupt {
                    page_id: id,
                    detail: format!("overflow page claims {used} bytes, holds at most {cap}"),
                });
            }
            Ok((
                PageId(rd_u64(p, o)),
                p[o + OVERFLOW_HEADER..o + OVERFLOW_HEADER + used].to_vec(),
            ))
        })?
    }

    fn read_overflow<S: PageRead>(&self, store: &S, first: PageId, len: u64) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len.min(1 << 30) as usize);
        let mut id = first;
        let mut prev = first;
        while (out.len() as u64) < len {
            if id == PageId(0) {
                return Err(BTreeError::Corrupt {
                    page_id: first,
                    detail: format!("overflow chain ends after {} of {len} bytes", out.len()),
                });
            }
            let (next, data) = self.overflow_page(store, id).map_err(|e| {
                if id == first {
                    e
                } else {
                    BTreeError::BadPointer {
                        page_id: prev,
                        slot: 0,
                        target: id,
                        source: Box::new(e),
                    }
                }
            })?;
            prev = id;
            if data.is_empty() {
                return Err(BTreeError::Corrupt {
                    page_id: id,
                    detail: "empty overflow page in a chain".into(),
                });
            }
            out.extend_from_slice(&data);
            id = next;
        }
        if out.len() as u64 != len {
            return Err(BTreeError::Corrupt {
                page_id: first,
                detail: format!(
                    "overflow chain holds {} bytes, the leaf says {len}",
                    out.len()
                ),
            });
        }
        Ok(out)
    }

    fn free_overflow<S: PageWrite>(&self, store: &mut S, first: PageId) -> Result<()> {
        let mut id = first;
        let mut guard = 0u64;
        while id != PageId(0) {
            guard += 1;
            if guard > (u32::MAX as u64 / 512) {
                return Err(BTreeError::Corrupt {
                    page_id: first,
                    detail: "overflow chain too long (a cycle?)".into(),
                });
            }
            let (next, _) = self.overflow_page(store, id)?;
            store.free(id)?;
            id = next;
        }
        Ok(())
    }

    fn materialize<S: PageRead>(&self, store: &S, v: FoundValue) -> Result<Vec<u8>> {
        match v {
            FoundValue::Inline(v) => Ok(v),
            FoundValue::Overflow { first, len } => self.read_overflow(store, first, len),
        }
    }

    /// Entries of the leaf holding the first keys above `low` (filtered by it), and the fence
    /// above that leaf (the smallest key the next leaf may hold).
    fn leaf_after<S: PageRead>(&self, store: &S, low: &Bound<Vec<u8>>) -> Result<LeafStep> {
        self.leaf_toward(
            store,
            |n| {
                let start = match low {
                    Bound::Unbounded => 0,
                    Bound::Included(k) => n.search(k)?.unwrap_or_else(|i| i),
                    Bound::Excluded(k) => match n.search(k)? {
                        Ok(i) => i + 1,
                        Err(i) => i,
                    },
                };
                Ok(start..n.len())
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

    /// Entries (descending) of the leaf holding the last keys below `high`, and the fence below
    /// that leaf (every key of the previous leaf is smaller).
    fn leaf_before<S: PageRead>(&self, store: &S, high: &Bound<Vec<u8>>) -> Result<LeafStep> {
        self.leaf_toward(
            store,
            |n| {
                let end = match high {
                    Bound::Unbounded => n.len(),
                    Bound::Included(k) => match n.search(k)? {
                        Ok(i) => i + 1,
                        Err(i) => i,
                    },
                    Bound::Excluded(k) => n.search(k)?.unwrap_or_else(|i| i),
                };
                Ok(0..end)
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
    fn leaf_toward<S: PageRead>(
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

/// Where to split `cells` (the new cell is at `inserted`): by bytes in the middle, except that
/// an append at the right end of a leaf keeps the left node full (sequential loads).
fn split_point(cells: &[Vec<u8>], leaf: bool, inserted: usize) -> usize {
    let n = cells.len();
    if leaf && inserted == n - 1 && n >= 2 {
        return n - 1;
    }
    let total: usize = cells.iter().map(|c| c.len() + 4).sum();
    let mut acc = 0;
    for (i, c) in cells.iter().enumerate() {
        acc += c.len() + 4;
        if acc * 2 >= total {
            // Leaves: cells[..=i] left. Inner: cell i+1 or i moves up; keep both sides non-empty.
            let m = if leaf { i + 1 } else { i };
            return m.clamp(1, n - 1);
        }
    }
    n / 2
}

/// An ordered iterator over a key range; also iterates backwards (`.rev()`), and both ends may
/// be used at once without crossing.
pub struct Range<S: PageRead> {
    tree: BTree,
    store: S,
    front: Bound<Vec<u8>>,
    back: Bound<Vec<u8>>,
    front_buf: VecDeque<(Vec<u8>, FoundValue)>,
    back_buf: VecDeque<(Vec<u8>, FoundValue)>,
    done: bool,
}

impl<S: PageRead> Range<S> {
    fn fill_front(&mut self) -> Result<()> {
        loop {
            let (entries, fence) = self.tree.leaf_after(&self.store, &self.front)?;
            if !entries.is_empty() {
                self.front_buf = entries.into();
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
            let (entries, fence) = self.tree.leaf_before(&self.store, &self.back)?;
            if !entries.is_empty() {
                self.back_buf = entries.into();
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

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
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
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
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
