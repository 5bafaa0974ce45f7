//! The B+tree operations: get, insert (with splits), remove. Other questions live in the files
//! under `tree/`: `check.rs` (the structural check and destroying a tree), `overflow.rs`
//! (values too large for a leaf, in chains of overflow pages), `range.rs` (range cursors).

mod check;
mod cursor;
mod overflow;
mod range;

pub use cursor::Cursor;
pub use range::Range;

use crate::node::{
    self, cell_child, cell_key, inner_cell, leaf_cell_overflow, push_leaf_cell_inline, rd_u32,
    rd_u64, wr_u64, Limits, Node, ValueRef, KIND_INNER, KIND_LEAF, OVERFLOW_HEADER,
};
use crate::optimistic::{self, Step as OptStep};
use crate::{BTreeError, PageRead, PageWrite, ReadToken, Result};
use keel_page::{PageHeader, PageId, PageType, PAGE_HEADER_SIZE};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

/// Deepest tree walked before the structure is declared corrupt (a cycle of child pointers).
const MAX_DEPTH: usize = 64;

/// The inner nodes a descent passed, each with the slot it followed, root first (on the stack
/// for trees up to 8 levels deep: a descent allocates nothing).
type Path = SmallVec<[(PageId, usize); 8]>;

/// Bytes of a leaf cell an insert builds on the stack (a longer one is allocated).
const INLINE_CELL: usize = 256;

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
    /// Leaves below the root without a row: 0 in a tree this build changed, for
    /// [`BTree::remove`] unlinks them; stores written by builds before that keep the empty
    /// leaves their removals left, which are still read correctly.
    pub empty_leaves: usize,
}

/// Bytes of stack a [`BTree::get_with`] copies an inline value into (a longer value goes to
/// the heap).
pub const GET_WITH_INLINE: usize = 512;

/// What an optimistic descent found in its leaf.
enum Hit {
    Value(FoundValue),
    /// An inline value copied into the first this many bytes of the caller's buffer.
    Copied(usize),
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
    check_pointer(from, id)?;
    with_node(store, id, f).map_err(|e| bad_pointer(from, id, e))
}

/// Refuses a pointer to `id` held by the node it points from (`from`: page and slot).
fn check_pointer(from: Option<(PageId, usize)>, id: PageId) -> Result<()> {
    match from {
        Some((parent, _)) if parent == id => Err(bad_pointer(
            from,
            id,
            BTreeError::Corrupt {
                page_id: parent,
                detail: "a node points to itself".into(),
            },
        )),
        _ => Ok(()),
    }
}

/// `source`, the failure to read or decode page `id`, as the fault of the pointer that led
/// there ([`BTreeError::BadPointer`]; unchanged at the root, `from` None).
fn bad_pointer(from: Option<(PageId, usize)>, id: PageId, source: BTreeError) -> BTreeError {
    match from {
        Some((parent, slot)) => BTreeError::BadPointer {
            page_id: parent,
            slot,
            target: id,
            source: Box::new(source),
        },
        None => source,
    }
}

/// `n` (page `id`), reached as a leaf: refused unless it is one (level 0). `below_inner` is
/// false for a root, which [`BTree::descend_to`] has read and checked already.
fn check_leaf(n: Node<'_>, id: PageId, below_inner: bool) -> Result<Node<'_>> {
    if below_inner && n.level() != 0 {
        return Err(level_error(id, 0, n.level()));
    }
    if !n.is_leaf() {
        return Err(BTreeError::Corrupt {
            page_id: id,
            detail: "a node of level 0 is not a leaf".into(),
        });
    }
    Ok(n)
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

    /// The leaf whose key range holds `key` (where an insert or removal of `key` would start),
    /// by a latched descent. A hint for callers that prepare pages before changing them: the
    /// tree may change before they do.
    ///
    /// # Errors
    ///
    /// A page cannot be read, is corrupt, or the tree is deeper than it can be.
    pub fn leaf_for<S: PageRead>(&self, store: &S, key: &[u8]) -> Result<PageId> {
        self.descend(store, key).map(|(_, leaf)| leaf)
    }

    /// The value stored under `key`.
    ///
    /// First tries an optimistic descent ([`PageRead::read_optimistic`]: no latches, each page
    /// validated after it is read and each parent re-validated after its child), then — if
    /// the store has no optimistic reads, a page is not at hand, or pages kept changing — the
    /// latched descent.
    pub fn get<S: PageRead>(&self, store: &S, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.get_optimistic(store, key, &mut []) {
            Some(None) => return Ok(None),
            Some(Some(Hit::Value(v))) => return self.materialize(store, v).map(Some),
            // Nothing is copied into an empty buffer: not reached, but a value all the same.
            Some(Some(Hit::Copied(_))) | None => {}
        }
        self.get_latched(store, key)
    }

    /// The value stored under `key`, borrowed: `f` runs on it and its result is returned.
    /// An inline value of up to [`GET_WITH_INLINE`] bytes found by the optimistic descent (see
    /// [`get`](Self::get)) is copied to the stack, not to the heap: nothing is allocated. A
    /// longer one, one in overflow pages, or one found by the latched descent is read into a
    /// vector first. `f` runs after the pages were let go (it may use the store).
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get): a page cannot be read or is corrupt (`f` is then not called).
    pub fn get_with<S: PageRead, T>(
        &self,
        store: &S,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>> {
        let mut buf = [0u8; GET_WITH_INLINE];
        let found = match self.get_optimistic(store, key, &mut buf) {
            Some(found) => found,
            None => return Ok(self.get_latched(store, key)?.map(|v| f(&v))),
        };
        Ok(match found {
            None => None,
            Some(Hit::Copied(n)) => {
                // `Copied` is only made for a value that fits (`optimistic::step_into`).
                let v = buf.get(..n).ok_or_else(|| BTreeError::Corrupt {
                    page_id: self.root,
                    detail: format!("a value of {n} bytes was copied into {GET_WITH_INLINE}"),
                })?;
                Some(f(v))
            }
            Some(Hit::Value(v)) => Some(f(&self.materialize(store, v)?)),
        })
    }

    /// The optimistic descent of `get`: `None` if it did not succeed (fall back). An inline
    /// value that fits in `buf` is copied there ([`Hit::Copied`]).
    fn get_optimistic<S: PageRead>(
        &self,
        store: &S,
        key: &[u8],
        buf: &mut [u8],
    ) -> Option<Option<Hit>> {
        'attempt: for _ in 0..OPTIMISTIC_TRIES {
            let mut id = self.root;
            let mut expect: Option<u8> = None;
            let mut parent: Option<ReadToken> = None;
            for _ in 0..MAX_DEPTH {
                let (step, token) =
                    store.read_optimistic(id, |w| optimistic::step_into(w, key, expect, buf))?;
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
                    OptStep::Inline(v) => return Some(Some(Hit::Value(FoundValue::Inline(v)))),
                    OptStep::Copied(n) => return Some(Some(Hit::Copied(n))),
                    OptStep::Overflow { first, len } => {
                        return Some(Some(Hit::Value(FoundValue::Overflow { first, len })))
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
        let inline = value.len() <= self.limits.max_inline_value(key.len());
        let (path, leaf) = self.descend_to(store, key, !inline)?;
        let (idx, old, cell) = if inline {
            // The common case, a new key into a leaf with room, in one exclusive access: the
            // leaf's check, the search, the plan and the edits (one page lookup and latch
            // instead of four).
            let mut cell = SmallVec::<[u8; INLINE_CELL]>::new();
            push_leaf_cell_inline(&mut cell, key, value);
            let from = path.last().copied();
            check_pointer(from, leaf)?;
            // A failure before the plan ran is the store's, reading the leaf: the pointer's
            // fault, as for any other node (`with_node_from`).
            let mut planned = false;
            let done = store
                .edit_planned(
                    leaf,
                    |p| {
                        planned = true;
                        let n = Node::new(p, leaf)
                            .and_then(|n| check_leaf(n, leaf, from.is_some()))
                            .map_err(|e| bad_pointer(from, leaf, e))?;
                        n.touch_free_space(cell.len());
                        Ok(match n.search(key)? {
                            Ok(i) => Err((i, Some(FoundValue::from_ref(n.value(i)?)))),
                            Err(i) => node::insert_edits(p, leaf, i, &cell)?.ok_or((i, None)),
                        })
                    },
                    |plan, edit| edit(&plan.edits(&cell)),
                )
                .map_err(|e| {
                    if planned {
                        e
                    } else {
                        bad_pointer(from, leaf, e)
                    }
                })?;
            match done {
                Ok(()) => return Ok(None),
                Err((idx, old)) => (idx, old, Some(cell.into_vec())),
            }
        } else {
            let (idx, old) = with_node(store, leaf, |n| {
                Ok(match n.search(key)? {
                    Ok(i) => (i, Some(FoundValue::from_ref(n.value(i)?))),
                    Err(i) => (i, None),
                })
            })?;
            (idx, old, None)
        };
        let old_value = match old {
            Some(FoundValue::Overflow { first, len }) => {
                Some(self.take_overflow(store, first, len)?)
            }
            Some(FoundValue::Inline(v)) => Some(v),
            None => None,
        };
        let cell = match cell {
            Some(cell) => cell,
            None => {
                let first = self.write_overflow(store, value)?;
                leaf_cell_overflow(key, first, value.len() as u64)
            }
        };
        if old_value.is_some() {
            // An overwrite: the new cell replaces the old in place when it can (no slot moves,
            // only the changed bytes logged); else the old cell goes and the new one is inserted.
            if let Some(plan) = store.read(leaf, |p| node::replace_edits(p, leaf, idx, &cell))?? {
                store.edit(leaf, &plan.edits(&cell))?;
                return Ok(old_value);
            }
            let plan = store.read(leaf, |p| node::remove_edits(p, leaf, idx))??;
            store.edit(leaf, &plan.edits())?;
        }
        self.insert_cell(store, path, leaf, idx, cell)?;
        Ok(old_value)
    }

    /// Removes `key`; returns its value. A leaf the removal empties is unlinked from its parent
    /// and freed (and a parent left without a child, up to the root, which becomes an empty
    /// leaf): nodes are not merged, but no empty node stays in the tree. (Empty leaves used to
    /// stay: a table used as a queue — rows added at one end, removed at the other — grew by
    /// a page per page of rows ever held, its scans stepping over all of them: a tester.)
    pub fn remove<S: PageWrite>(&self, store: &mut S, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (path, leaf) = self.descend(store, key)?;
        let found = with_node(store, leaf, |n| {
            Ok(match n.search(key)? {
                Ok(i) => Some((i, FoundValue::from_ref(n.value(i)?))),
                Err(_) => None,
            })
        })?;
        let Some((idx, v)) = found else {
            return Ok(None);
        };
        let plan = store.read(leaf, |p| node::remove_edits(p, leaf, idx))??;
        store.edit(leaf, &plan.edits())?;
        let value = match v {
            FoundValue::Inline(v) => v,
            FoundValue::Overflow { first, len } => self.take_overflow(store, first, len)?,
        };
        if plan.emptied() {
            self.unlink_emptied(store, path, leaf)?;
        }
        Ok(Some(value))
    }

    /// Unlinks node `id`, left without a slot and reached through `path`, from its parent and
    /// frees it. A parent whose only child it was (no cell, its leftmost child) is left without
    /// a child and goes the same way; the root, whose id is the tree's, stays, as an empty leaf
    /// once every child is gone. Removing child `c` of a parent removes cell `c - 1` (the keys
    /// from its separator on go to the child on its left, which held none of the keys it
    /// covered); removing the leftmost makes child 1 the leftmost and removes cell 0 (its
    /// separator bounded keys below it, which the emptied child held).
    fn unlink_emptied<S: PageWrite>(
        &self,
        store: &mut S,
        mut path: Path,
        mut id: PageId,
    ) -> Result<()> {
        while let Some((parent, c)) = path.pop() {
            let (n, next) = with_node(store, parent, |n| {
                Ok((n.len(), if n.len() > 0 { Some(n.child(1)?) } else { None }))
            })?;
            store.free(id)?;
            if n == 0 {
                // Its only child: the parent is left without one.
                id = parent;
                continue;
            }
            if c == 0 {
                let leftmost = next.map_or(0, |p| p.0).to_le_bytes();
                let plan = store.read(parent, |p| node::remove_edits(p, parent, 0))??;
                let mut ops = vec![keel_page::PageOp::Write {
                    offset: node::NH_LEFTMOST,
                    bytes: &leftmost,
                }];
                ops.extend(plan.edits());
                store.edit(parent, &ops)?;
            } else {
                let plan = store.read(parent, |p| node::remove_edits(p, parent, c - 1))??;
                store.edit(parent, &plan.edits())?;
            }
            return Ok(());
        }
        // Every child of the root is gone: it is an empty leaf again.
        if id != self.root {
            return Err(BTreeError::Corrupt {
                page_id: id,
                detail: format!("an emptied node off the path from root {}", self.root),
            });
        }
        if with_node(store, id, |n| Ok(!n.is_leaf()))? {
            store.reinit(id, PageType::BTREE_LEAF)?;
            store.write(id, |p| node::init(p, KIND_LEAF, 0))?;
        }
        Ok(())
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
            generation: store.generation(),
            store,
            front: own(range.start_bound()),
            back: own(range.end_bound()),
            front_buf: VecDeque::new(),
            back_buf: VecDeque::new(),
            front_batch: range::FIRST_BATCH,
            back_batch: range::FIRST_BATCH,
            done: false,
        }
    }

    // ----- internals -----

    /// Path of (inner page, child index) from the root, and the leaf for `key`.
    fn descend<S: PageRead>(&self, store: &S, key: &[u8]) -> Result<(Path, PageId)> {
        self.descend_to(store, key, true)
    }

    /// [`descend`](Self::descend), which reads the leaf too when `read_leaf`; else it stops at
    /// the leaf's id taken from a level-1 node (the caller reads the leaf and checks it with
    /// [`check_leaf`]). A tree whose root is the leaf reads it either way.
    fn descend_to<S: PageRead>(
        &self,
        store: &S,
        key: &[u8],
        read_leaf: bool,
    ) -> Result<(Path, PageId)> {
        let mut path = Path::new();
        let mut id = self.root;
        let mut expect: Option<u8> = None;
        for _ in 0..MAX_DEPTH {
            if expect == Some(0) && !read_leaf {
                return Ok((path, id));
            }
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
        mut path: Path,
        mut id: PageId,
        mut idx: usize,
        mut cell: Vec<u8>,
    ) -> Result<()> {
        loop {
            if self.insert_into(store, id, idx, &cell)? {
                return Ok(());
            }
            // Split: gather the node's cells (copied into one buffer) with the new one in place.
            let mut buf = Vec::with_capacity(self.limits.page_size);
            let (kind, level, leftmost, spans) = with_node(store, id, |n| {
                let kind = if n.is_leaf() { KIND_LEAF } else { KIND_INNER };
                Ok((kind, n.level(), n.leftmost(), n.cells_into(&mut buf)?))
            })?;
            let leaf = kind == KIND_LEAF;
            let mut cells: Vec<&[u8]> = spans.into_iter().map(|r| &buf[r]).collect();
            cells.insert(idx, &cell);
            // A healthy node that must split holds at least five cells (four of the largest fit,
            // see `Limits`). Too few for two non-empty halves means its header's free space is
            // wrong: bad bytes, reported, never split (the split_point assertion is for bugs).
            if cells.len() < if leaf { 2 } else { 3 } {
                return Err(BTreeError::Corrupt {
                    page_id: id,
                    detail: format!(
                        "a node of {} cells has no room for another (bad free space count)",
                        cells.len() - 1
                    ),
                });
            }
            let page_type = if leaf {
                PageType::BTREE_LEAF
            } else {
                PageType::BTREE_INNER
            };
            let m = split_point(&cells, leaf, idx);
            // For leaves the separator is the first key on the right and stays there; for inner
            // nodes the middle cell moves up and its child becomes the right's leftmost child.
            let sep = cell_key(cells[m], leaf).to_vec();
            let (left_cells, right_leftmost, right_cells) = if leaf {
                (&cells[..m], PageId(0), &cells[m..])
            } else {
                (&cells[..m], cell_child(cells[m]), &cells[m + 1..])
            };
            if path.is_empty() {
                // Root split: the root keeps its page id and becomes an inner node above two new
                // children holding its old contents.
                let root_level = level.checked_add(1).ok_or_else(|| BTreeError::Corrupt {
                    page_id: id,
                    detail: format!("a root at level {level} cannot split"),
                })?;
                let l = store.allocate(page_type)?;
                let r = store.allocate(page_type)?;
                self.rebuild(store, l, kind, level, leftmost, left_cells)?;
                self.rebuild(store, r, kind, level, right_leftmost, right_cells)?;
                let root_cells = vec![inner_cell(&sep, r)];
                let root = self.root;
                store.reinit(root, PageType::BTREE_INNER)?;
                self.rebuild(store, root, KIND_INNER, root_level, l, &root_cells)?;
                return Ok(());
            }
            // The node's cells that stay on the left (the new cell aside).
            let keep = if idx < m { m - 1 } else { m };
            let right = store.allocate(page_type)?;
            // A leaf's right half is made as a copy of the node before the change (one
            // page-copy record where the store makes copies), less its first `keep` slots (a
            // slot-array move and the counts; their cells stay, dead, until the compaction
            // that follows moves the live ones together); the new cell then goes in like any
            // insert. Else its cells are written out (half a page of redo).
            let n = cells.len() - 1;
            if leaf && keep > 0 && keep < n && store.copy_page(right, id)? {
                let d = store.read(right, |p| node::drop_front_edits(p, right, keep))??;
                store.edit(right, &d.edits())?;
                self.compact(store, right)?;
                if idx >= m && !self.insert_into(store, right, idx - m, cells[idx])? {
                    self.rebuild(store, right, kind, level, right_leftmost, right_cells)?;
                }
            } else {
                self.rebuild(store, right, kind, level, right_leftmost, right_cells)?;
            }
            debug_assert!(
                with_node(store, right, |n| n.cells()).map_or(true, |c| c == right_cells),
                "invariant: the right half of a split holds exactly its cells"
            );
            // The left half keeps its first cells (the rest become fragmentation: a header
            // write, not the page diff of a rebuilt node), compacted as moves while they are in
            // the cache; the new cell then goes in like any insert.
            let t = store.read(id, |p| node::truncate_edits(p, id, keep))??;
            store.edit(id, &t.edits())?;
            self.compact(store, id)?;
            if idx < m && !self.insert_into(store, id, idx, cells[idx])? {
                self.rebuild(store, id, kind, level, leftmost, left_cells)?;
            }
            debug_assert!(
                with_node(store, id, |n| n.cells()).map_or(true, |c| c == left_cells),
                "invariant: the left half of a split holds exactly its cells"
            );
            let (parent, c) = path.pop().ok_or(BTreeError::Corrupt {
                page_id: id,
                detail: "split without a parent".into(),
            })?;
            id = parent;
            idx = c;
            cell = inner_cell(&sep, right);
        }
    }

    /// Inserts `cell` as slot `idx` of node `id` without a split: the exact edits when it fits
    /// the free space (the common case); else, when compacting makes room, the compaction as
    /// moves ([`node::compact_edits`]) and then the edits; else [`node::insert`] (a key that
    /// breaks the node's hint prefix, whose hints it rewrites, or counts it cannot trust).
    /// False (node unchanged) if the cell does not fit.
    fn insert_into<S: PageWrite>(
        &self,
        store: &mut S,
        id: PageId,
        idx: usize,
        cell: &[u8],
    ) -> Result<bool> {
        let room = store.read(id, |p| {
            Ok(match node::insert_edits(p, id, idx, cell)? {
                Some(plan) => Room::Edits(plan),
                None if node::may_fit(p, id, cell.len())? => Room::Other,
                None => Room::None,
            })
        })??;
        match room {
            Room::Edits(plan) => {
                store.edit(id, &plan.edits(cell))?;
                return Ok(true);
            }
            // No room even compacted (by the node's own counts, as `node::insert` judges): a
            // split, without a walk over every cell for a compaction first.
            Room::None => return Ok(false),
            Room::Other => {}
        }
        let compact = store.read(id, |p| node::compact_edits(p, id, Some(cell.len())))??;
        if let Some(c) = compact {
            store.edit(id, &c.edits())?;
            let plan = store.read(id, |p| node::insert_edits(p, id, idx, cell))??;
            if let Some(plan) = plan {
                store.edit(id, &plan.edits(cell))?;
                return Ok(true);
            }
        }
        store.write(id, |p| node::insert(p, id, idx, cell))?
    }

    /// Compacts node `id` now (as moves, [`node::compact_edits`]) if it has dead cells: each
    /// half of a split, while the split has its cells in the cache, rather than at a later
    /// insert that finds no room (one walk over cells long out of the cache per half).
    fn compact<S: PageWrite>(&self, store: &mut S, id: PageId) -> Result<()> {
        if let Some(c) = store.read(id, |p| node::compact_edits(p, id, None))?? {
            store.edit(id, &c.edits())?;
        }
        Ok(())
    }

    fn rebuild<S: PageWrite>(
        &self,
        store: &mut S,
        id: PageId,
        kind: u8,
        level: u8,
        leftmost: PageId,
        cells: &[impl AsRef<[u8]>],
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
}

/// How a cell fits a node ([`BTree::insert_into`]).
enum Room {
    /// In its free space, by these edits.
    Edits(node::InsertEdits),
    /// Not by those edits: after a compaction, or by [`node::insert`] (which rewrites the hints).
    Other,
    /// Not at all: the node splits.
    None,
}

/// Where to split `cells` (the new cell is at `inserted`): by bytes in the middle, except that
/// an append at the right end of a leaf keeps the left node full (sequential loads).
fn split_point(cells: &[impl AsRef<[u8]>], leaf: bool, inserted: usize) -> usize {
    let n = cells.len();
    // Cells are at most a quarter page (Limits), so a node that overflows holds at least two;
    // both halves of a split must be non-empty (cheap, always on).
    assert!(
        n >= 2 && inserted < n,
        "invariant: a split has at least two cells and the new one among them ({inserted} of {n})"
    );
    if leaf && inserted == n - 1 && n >= 2 {
        return n - 1;
    }
    let total: usize = cells.iter().map(|c| c.as_ref().len() + 4).sum();
    let mut acc = 0;
    for (i, c) in cells.iter().enumerate() {
        acc += c.as_ref().len() + 4;
        if acc * 2 >= total {
            // Leaves: cells[..=i] left. Inner: cell i+1 or i moves up; keep both sides non-empty.
            let m = if leaf { i + 1 } else { i };
            return m.clamp(1, n - 1);
        }
    }
    n / 2
}

#[cfg(test)]
mod tests {
    use super::split_point;

    #[test]
    fn split_points_leave_both_halves_non_empty() {
        for n in 2..40usize {
            let cells: Vec<Vec<u8>> = (0..n).map(|i| vec![0; 8 + i * 7 % 50]).collect();
            for inserted in 0..n {
                for leaf in [true, false] {
                    let m = split_point(&cells, leaf, inserted);
                    assert!(
                        (1..n).contains(&m),
                        "n {n} inserted {inserted} leaf {leaf}: {m}"
                    );
                }
            }
        }
    }

    /// A split compacts both halves at once (`BTree::compact`): after inserts alone no node
    /// keeps dead cells. Before, each half kept the cells that went to the other half as
    /// fragmentation until a later insert found no room and walked every cell to compact it.
    #[test]
    fn inserts_leave_no_node_with_dead_cells() {
        use crate::node::{rd_u32, NH_FRAG};
        use crate::{BTree, MemPages, PageRead};
        let mut pages = MemPages::new(4096);
        let t = BTree::create(&mut pages).unwrap();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t.insert(&mut pages, &x.to_be_bytes(), &[7u8; 40]).unwrap();
        }
        let st = t.check(&pages).unwrap();
        assert!(st.leaves > 50, "{st:?}");
        for id in t.page_ids(&pages).unwrap() {
            let frag = pages.read(id, |p| rd_u32(p, NH_FRAG)).unwrap();
            assert_eq!(frag, 0, "{id} keeps {frag} bytes of dead cells");
        }
    }

    /// Bad bytes, not a bug (ported from helper branch split-btree): an empty root leaf whose
    /// header claims no free space makes the first insert split a node of one cell. That is
    /// corruption, reported as such; before, `split_point` panicked.
    #[test]
    fn a_full_node_of_one_cell_is_corruption() {
        use crate::node::{NH_CELL_START, SLOTS};
        use crate::{BTree, BTreeError, MemPages};
        let mut pages = MemPages::new(4096);
        let t = BTree::create(&mut pages).unwrap();
        let root = pages.raw_mut(t.root()).unwrap();
        root[NH_CELL_START..NH_CELL_START + 4].copy_from_slice(&(SLOTS as u32).to_le_bytes());
        let err = t.insert(&mut pages, b"k", b"v").unwrap_err();
        assert!(matches!(err, BTreeError::Corrupt { .. }), "{err}");
    }

    /// Bad bytes: a root leaf at level 255 that splits would need a root at level 256.
    #[test]
    fn a_root_split_past_level_255_is_corruption() {
        use crate::node::NH_LEVEL;
        use crate::{BTree, BTreeError, MemPages};
        let mut pages = MemPages::new(4096);
        let t = BTree::create(&mut pages).unwrap();
        pages.raw_mut(t.root()).unwrap()[NH_LEVEL] = 255;
        let err = (0..1000u32)
            .find_map(|i| t.insert(&mut pages, &i.to_be_bytes(), &[0u8; 100]).err())
            .expect("the root splits");
        assert!(matches!(err, BTreeError::Corrupt { .. }), "{err}");
    }

    #[test]
    #[should_panic(expected = "invariant: a split has at least two cells")]
    fn a_split_of_one_cell_trips() {
        split_point(&[vec![1, 2, 3]], true, 0);
    }
}
