//! The forward cursor: one descent to the first leaf of a range, then leaf to leaf through a
//! stack of (inner node, child index) — the parent of the next leaf is already on the stack, so
//! moving on reads the nodes down to the next leaf, never the path from the root again (and
//! the child ids of a leaves' parent come from the read-ahead batch, without re-reading the
//! parent). Each leaf is copied once into a buffer the cursor owns — only the bytes in use:
//! the header with the slot array, and the cell area; never the free space between them — and
//! rows are handed out as slices borrowed from it (no allocation per row; an overflow value is
//! read into a second reused buffer). A row is decoded straight from the buffer with the
//! leaf's geometry validated once when it is loaded.
//!
//! A read transaction's tree does not change while its cursor lives (it reads its snapshot's
//! page versions); a write transaction's can — through the same or another handle of the
//! table — and its cursor then re-positions itself by key (invariant 4).
//!
//! # Invariants (each tested by breaking it on purpose)
//!
//! 1. Keys come out strictly ascending, within a leaf and across leaves; a tree whose keys do
//!    not (damaged separators or cells) is corruption, never a wrong or repeated row
//!    (`a_cursor_refuses_keys_out_of_order`).
//! 2. Every child's level is its parent's minus one, as in every descent: a damaged pointer or
//!    level is an error naming the parent, never an endless walk (depth bounded by
//!    [`MAX_DEPTH`]).
//! 3. Only the current leaf's bytes are read: the leaf buffer's free space (not copied, so it
//!    may still hold an earlier leaf's cells) is never read as a row — a slot pointing outside
//!    the cell area, or a cell running past it, is corruption naming the leaf
//!    (`a_cursor_never_reads_a_stale_cell`).
//!
//! 4. The path and the leaf copy are used only while the store's
//!    [`generation`](PageRead::generation) is the one they were read at: a write transaction's
//!    cursor that the transaction wrote around (through any handle of the table) descends
//!    again to the first key above the last one it passed, so it never skips a leaf a split
//!    made, repeats a row, or reports keys out of order that are not
//!    (`a_cursor_sees_its_own_transaction_write_around_it` in keel's tests; the knob-free
//!    mutant — not re-positioning — fails it with false corruption or lost rows).
//!
//! Read-ahead: before the cursor reads a leaf of a parent it has not yet read ahead far enough
//! in, it hands that leaf and the next ones of the parent ([`READ_AHEAD`] in all) to
//! [`PageRead::prefetch`] (the pool reads the ones it does not hold in one batch), so a scan
//! of cold data waits for one batched read per [`READ_AHEAD`] / 2 leaves or so instead of one
//! read per leaf. Only the first leaf of the scan is read without a hint. A bounded range's
//! read-ahead stops at the first leaf whose separator lies past the range's end: a short scan
//! that crosses into a second leaf hands over the leaves it will read, not the parent's next
//! sixteen (`a_bounded_cursor_reads_ahead_only_leaves_in_its_range`).

use super::*;
use crate::node::{rd_u16, FLAG_OVERFLOW, LEAF_CELL_HEADER, NH_CELL_START, NH_NSLOTS, SLOTS};
use crate::node::{OVERFLOW_REF_LEN, SLOT_SIZE};
use keel_page::PAGE_TRAILER_SIZE;
use std::cmp::Ordering;
use std::ops::Range as Span;

/// Leaves handed to [`PageRead::prefetch`] ahead of a forward cursor.
pub(crate) const READ_AHEAD: usize = 16;

/// An inner node on the cursor's path: its page, the child taken, how many children it has,
/// and its level (1: its children are leaves).
#[derive(Clone, Copy)]
struct Step {
    id: PageId,
    child: usize,
    children: usize,
    level: u8,
}

/// What the next key must be above.
#[derive(Clone)]
enum Prev {
    /// Not known yet (the first row after the descent: the key before it in the leaf, if any).
    Unknown,
    /// The key at this span of the leaf buffer (the row handed out last).
    InLeaf(Span<usize>),
    /// The last key of the previous non-empty leaf, in `prev_last`.
    Carried,
}

/// The leaves' parent last read ahead in: its page, the index of its first child in `ids`,
/// and the child ids from there.
struct Ahead {
    parent: PageId,
    first: usize,
    ids: Vec<PageId>,
    /// `ids` stops where the range ends: no later child of `parent` is needed.
    ends_range: bool,
}

/// A forward cursor over a key range with rows borrowed from it: `while let Some((k, v)) =
/// cursor.next()? { ... }`. Made by [`BTree::cursor`].
pub struct Cursor<S: PageRead> {
    tree: BTree,
    store: S,
    /// From the root down: each inner node above the current leaf.
    path: Vec<Step>,
    leaf_id: PageId,
    /// The current leaf's bytes in use (header and slot array, cell area) at their offsets in
    /// the page; the free space between them is not copied (invariant 3).
    leaf: Vec<u8>,
    slot: usize,
    slots: usize,
    /// The current leaf's cell area (validated when the leaf was loaded).
    cell_start: usize,
    cell_end: usize,
    high: Bound<Vec<u8>>,
    prev: Prev,
    /// The last key of the previous non-empty leaf (the next leaf's keys must be above it).
    prev_last: Vec<u8>,
    /// The current row's overflow value.
    value: Vec<u8>,
    done: bool,
    ahead: Ahead,
    /// The range's start (a re-positioned cursor never goes below it).
    low: Bound<Vec<u8>>,
    /// The store's generation when the path and leaf buffer were read (invariant 4).
    generation: u64,
}

/// Whether every key from `key` on lies above the range end `high`.
fn past_high(key: &[u8], high: &Bound<Vec<u8>>) -> bool {
    match high {
        Bound::Included(h) => key > h.as_slice(),
        Bound::Excluded(h) => key >= h.as_slice(),
        Bound::Unbounded => false,
    }
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
        let generation = store.generation();
        let mut c = Cursor {
            tree: *self,
            store,
            path: Vec::new(),
            leaf_id: self.root,
            leaf: Vec::new(),
            slot: 0,
            slots: 0,
            cell_start: 0,
            cell_end: 0,
            high: own(range.end_bound()),
            prev: Prev::Unknown,
            prev_last: Vec::new(),
            value: Vec::new(),
            done: false,
            ahead: Ahead {
                parent: PageId(0),
                first: 0,
                ids: Vec::new(),
                ends_range: false,
            },
            low: own(range.start_bound()),
            generation,
        };
        let low = c.low.clone();
        c.seek(&low)?;
        Ok(c)
    }
}

/// `a` compared with `b` as byte strings; keys that differ in their first 8 bytes (the usual
/// case) are told apart by one integer comparison, without a call to `memcmp`.
#[inline]
fn cmp_keys(a: &[u8], b: &[u8]) -> Ordering {
    if let (Some(x), Some(y)) = (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
    }
    a.cmp(b)
}

/// Whether `key` is within the upper bound `high`.
#[inline]
fn below_high(key: &[u8], high: &Bound<Vec<u8>>) -> bool {
    match high {
        Bound::Unbounded => true,
        Bound::Included(k) => cmp_keys(key, k) != Ordering::Greater,
        Bound::Excluded(k) => cmp_keys(key, k) == Ordering::Less,
    }
}

/// Copies the bytes of leaf page `p` that are in use into `buf` (made `p`'s length), at their
/// offsets: the header and slot array, and the cell area. A page whose header does not say
/// where those are is copied whole (`Node::new` then reports it).
fn copy_in_use(buf: &mut Vec<u8>, p: &[u8]) {
    if buf.len() != p.len() {
        buf.clear();
        buf.resize(p.len(), 0);
    }
    let le32 = |o: usize| {
        p.get(o..o + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(|b| u32::from_le_bytes(b) as usize)
    };
    let geometry = (|| {
        let slots_end = SLOTS.checked_add(le32(NH_NSLOTS)?.checked_mul(SLOT_SIZE)?)?;
        let cell_start = le32(NH_CELL_START)?;
        let end = p.len().checked_sub(PAGE_TRAILER_SIZE)?;
        (slots_end <= cell_start && cell_start <= end).then_some((slots_end, cell_start, end))
    })();
    match geometry {
        Some((slots_end, cell_start, end)) => {
            buf[..slots_end].copy_from_slice(&p[..slots_end]);
            buf[cell_start..end].copy_from_slice(&p[cell_start..end]);
        }
        None => buf.copy_from_slice(p),
    }
}

impl<S: PageRead> Cursor<S> {
    /// Descends from the root to the leaf holding the first key at or above `low`.
    fn seek(&mut self, low: &Bound<Vec<u8>>) -> Result<()> {
        let mut id = self.tree.root;
        let mut expect: Option<u8> = None;
        for _ in 0..MAX_DEPTH {
            let from = self.path.last().map(|s| (s.id, s.child));
            if expect == Some(0) {
                // A leaf by its parent's level: read once, into the buffer.
                return self.seek_in_leaf(id, from, expect, low);
            }
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
                None => return self.seek_in_leaf(id, from, expect, low),
                Some((child, c, children, level)) => {
                    self.path.push(Step {
                        id,
                        child: c,
                        children,
                        level,
                    });
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

    /// Loads leaf `id` (see [`load_leaf`](Self::load_leaf)) and positions the cursor before
    /// its first key at or above `low`.
    fn seek_in_leaf(
        &mut self,
        id: PageId,
        from: Option<(PageId, usize)>,
        expect: Option<u8>,
        low: &Bound<Vec<u8>>,
    ) -> Result<()> {
        if let Some(&Step {
            id: parent, child, ..
        }) = self.path.last()
        {
            self.read_ahead(parent, child)?;
        }
        self.load_leaf(id, from, expect)?;
        let n = Node::new(&self.leaf, id)?;
        self.slot = match low {
            Bound::Unbounded => 0,
            Bound::Included(k) => n.search(k)?.unwrap_or_else(|i| i),
            Bound::Excluded(k) => match n.search(k)? {
                Ok(i) => i + 1,
                Err(i) => i,
            },
        };
        Ok(())
    }

    /// Hands child `c` of `parent` (whose children are leaves) and the leaves after it to the
    /// store's prefetch, unless they were handed over already; keeps their ids.
    fn read_ahead(&mut self, parent: PageId, c: usize) -> Result<()> {
        let a = &self.ahead;
        let end = a.first + a.ids.len();
        if a.parent == parent
            && c >= a.first
            && (c + READ_AHEAD / 2 < end || (a.ends_range && c < end))
        {
            return Ok(());
        }
        // Not this parent's ids until they are all read (an error leaves none).
        self.ahead.parent = PageId(0);
        let (ids, high) = (&mut self.ahead.ids, &self.high);
        let ends_range = with_node(&self.store, parent, |n| {
            let children = n.len() + 1;
            ids.clear();
            for i in c..children.min(c + READ_AHEAD) {
                // Child `i` holds keys from separator `i - 1` on: past the range's end, it and
                // every later child hold nothing the scan returns.
                if i > c && past_high(n.key(i - 1)?, high) {
                    return Ok(true);
                }
                ids.push(n.child(i)?);
            }
            Ok(false)
        })?;
        self.ahead.ends_range = ends_range;
        self.ahead.parent = parent;
        self.ahead.first = c;
        if !self.ahead.ids.is_empty() {
            self.store.prefetch(&self.ahead.ids);
        }
        Ok(())
    }

    /// Reads leaf `id` (reached through the pointer at `from`, at level `expect`) into the
    /// cursor's buffer: one read of the page. Errors name the pointer, as every descent's do.
    fn load_leaf(
        &mut self,
        id: PageId,
        from: Option<(PageId, usize)>,
        expect: Option<u8>,
    ) -> Result<()> {
        if let Some((parent, slot)) = from {
            if id == parent {
                return Err(BTreeError::BadPointer {
                    page_id: parent,
                    slot,
                    target: id,
                    source: Box::new(BTreeError::Corrupt {
                        page_id: parent,
                        detail: "a node points to itself".into(),
                    }),
                });
            }
        }
        let leaf = &mut self.leaf;
        let checked = self
            .store
            .read(id, |p| copy_in_use(leaf, p))
            .and_then(|()| {
                let n = Node::new(&self.leaf, id)?;
                if let Some(e) = expect {
                    if n.level() != e {
                        return Err(level_error(id, e, n.level()));
                    }
                }
                if !n.is_leaf() {
                    return Err(BTreeError::Corrupt {
                        page_id: id,
                        detail: "a leaf-level node is not a leaf".into(),
                    });
                }
                Ok((n.len(), n.cell_area()))
            });
        let (slots, (cell_start, cell_end)) = match (checked, from) {
            (Ok(found), _) => found,
            (Err(e), None) => return Err(e),
            (Err(e), Some((parent, slot))) => {
                return Err(BTreeError::BadPointer {
                    page_id: parent,
                    slot,
                    target: id,
                    source: Box::new(e),
                })
            }
        };
        self.slots = slots;
        self.cell_start = cell_start;
        self.cell_end = cell_end;
        self.leaf_id = id;
        self.slot = 0;
        Ok(())
    }

    /// Moves to the next leaf through the stack: up to the deepest inner node with a child
    /// right of the one taken, then down its leftmost path. False at the end of the tree.
    fn next_leaf(&mut self) -> Result<bool> {
        if self.slots > 0 {
            let (key, _, _) = self.row(self.slots - 1)?;
            self.prev_last.clear();
            self.prev_last.extend_from_slice(&self.leaf[key]);
            self.prev = Prev::Carried;
        }
        loop {
            let Some(top) = self.path.last_mut() else {
                return Ok(false);
            };
            if top.child + 1 < top.children {
                top.child += 1;
                break;
            }
            self.path.pop();
        }
        // Down the leftmost path from the next child.
        for _ in 0..MAX_DEPTH {
            let Some(&Step {
                id: parent,
                child: c,
                level,
                ..
            }) = self.path.last()
            else {
                return Ok(false);
            };
            let expect = level.checked_sub(1);
            if expect == Some(0) {
                // The parent of leaves: the child's id is in the read-ahead batch.
                self.read_ahead(parent, c)?;
                let child = c
                    .checked_sub(self.ahead.first)
                    .and_then(|i| self.ahead.ids.get(i).copied());
                let child = match child {
                    Some(id) => id,
                    None => with_node(&self.store, parent, |n| n.child(c))?,
                };
                self.load_leaf(child, Some((parent, c)), expect)?;
                return Ok(true);
            }
            let child = with_node(&self.store, parent, |n| n.child(c))?;
            let step = with_node_from(&self.store, child, Some((parent, c)), |n| {
                if let Some(e) = expect {
                    if n.level() != e {
                        return Err(level_error(child, e, n.level()));
                    }
                }
                Ok((!n.is_leaf()).then(|| (n.len() + 1, n.level())))
            })?;
            match step {
                None => {
                    self.load_leaf(child, Some((parent, c)), expect)?;
                    return Ok(true);
                }
                Some((children, level)) => {
                    if self.path.len() >= MAX_DEPTH {
                        break;
                    }
                    self.path.push(Step {
                        id: child,
                        child: 0,
                        children,
                        level,
                    });
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
    #[inline]
    pub fn next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        match self.step() {
            Ok(Some((key, value))) => {
                let k = self.leaf.get(key).unwrap_or_default();
                let v = match value {
                    Some(v) => self.leaf.get(v).unwrap_or_default(),
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

    /// Row `i` (`i < slots`) of the current leaf: the spans of its key and its stored value in
    /// the leaf buffer, and whether the value is an overflow reference. Bounds-checked against
    /// the cell area (invariant 3), as `Node::cell` checks.
    #[inline]
    fn row(&self, i: usize) -> Result<(Span<usize>, bool, Span<usize>)> {
        let b = &self.leaf;
        let at = |o: usize, n: usize| b.get(o..o.checked_add(n)?);
        let off = SLOTS
            .checked_add(i.saturating_mul(SLOT_SIZE))
            .and_then(|s| at(s, 4))
            .map(|s| rd_u32(s, 0) as usize);
        let cell = off.and_then(|off| {
            if off < self.cell_start || off.checked_add(LEAF_CELL_HEADER)? > self.cell_end {
                return None;
            }
            let h = at(off, LEAF_CELL_HEADER)?;
            let (klen, vlen) = (rd_u16(h, 0) as usize, rd_u32(h, 4) as usize);
            let k = off + LEAF_CELL_HEADER;
            let v = k.checked_add(klen)?;
            let end = v.checked_add(vlen)?;
            (end <= self.cell_end).then_some((k..v, h[2] == FLAG_OVERFLOW, v..end))
        });
        cell.ok_or_else(|| self.bad_cell(i))
    }

    #[cold]
    fn bad_cell(&self, i: usize) -> BTreeError {
        BTreeError::Corrupt {
            page_id: self.leaf_id,
            detail: format!(
                "slot {i} of {}: its cell is not within the cell area {}..{}",
                self.slots, self.cell_start, self.cell_end
            ),
        }
    }

    /// Finds the next row: the byte range of its key in the leaf buffer, and of its value
    /// (`None`: the value is in `self.value`, read from its overflow chain).
    #[allow(clippy::type_complexity)]
    #[inline]
    fn step(&mut self) -> Result<Option<(Span<usize>, Option<Span<usize>>)>> {
        if self.done {
            return Ok(None);
        }
        // Invariant 4: the path and the leaf copy are only trusted while the pages are as read.
        let g = self.store.generation();
        if g != self.generation {
            self.generation = g;
            self.reposition()?;
        }
        while self.slot >= self.slots {
            if !self.next_leaf()? {
                return Ok(None);
            }
        }
        let at = self.slot;
        let (key, overflow, value) = self.row(at)?;
        let k = self.leaf.get(key.clone()).unwrap_or_default();
        // Invariant 1: above the key before it.
        let ordered = match &self.prev {
            Prev::InLeaf(p) => cmp_keys(k, self.leaf.get(p.clone()).unwrap_or_default()),
            Prev::Carried if at == 0 => cmp_keys(k, &self.prev_last),
            Prev::Unknown | Prev::Carried => match at.checked_sub(1) {
                Some(before) => {
                    let (p, _, _) = self.row(before)?;
                    cmp_keys(k, self.leaf.get(p).unwrap_or_default())
                }
                None => Ordering::Greater,
            },
        };
        if ordered != Ordering::Greater {
            return Err(out_of_order(self.leaf_id, at));
        }
        if !below_high(k, &self.high) {
            return Ok(None);
        }
        let value = if overflow {
            let r: Option<&[u8; OVERFLOW_REF_LEN]> =
                self.leaf.get(value.clone()).and_then(|r| r.try_into().ok());
            let Some(r) = r else {
                return Err(BTreeError::Corrupt {
                    page_id: self.leaf_id,
                    detail: format!("overflow reference of {} bytes", value.len()),
                });
            };
            let (first, len) = (PageId(rd_u64(r, 0)), rd_u64(r, 8));
            self.value = self.tree.read_overflow(&self.store, first, len)?;
            None
        } else {
            Some(value)
        };
        self.prev = Prev::InLeaf(key.clone());
        self.slot = at + 1;
        Ok(Some((key, value)))
    }
}

impl<S: PageRead> Cursor<S> {
    /// After the store's pages changed under the cursor (its own transaction wrote): forgets
    /// the path, the read-ahead ids and the leaf copy, and descends afresh to the first key
    /// above the last one it passed (never below the range's start), so rows written ahead are
    /// seen and none is lost, repeated or refused as out of order, whatever the writes split.
    #[cold]
    fn reposition(&mut self) -> Result<()> {
        let last = match &self.prev {
            Prev::InLeaf(p) => Some(self.leaf.get(p.clone()).unwrap_or_default().to_vec()),
            Prev::Carried => Some(self.prev_last.clone()),
            Prev::Unknown => None,
        };
        // The later of "above the last key passed" and the range's start.
        let low = match (&last, &self.low) {
            (Some(k), Bound::Included(l) | Bound::Excluded(l)) if k < l => self.low.clone(),
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, _) => self.low.clone(),
        };
        self.path.clear();
        self.ahead.parent = PageId(0);
        self.ahead.ids.clear();
        self.slots = 0;
        self.slot = 0;
        self.seek(&low)?;
        self.prev = match last {
            Some(k) => {
                self.prev_last = k;
                Prev::Carried
            }
            None => Prev::Unknown,
        };
        Ok(())
    }
}

fn out_of_order(id: PageId, slot: usize) -> BTreeError {
    BTreeError::Corrupt {
        page_id: id,
        detail: format!("key {slot} is not above the key before it (keys out of order)"),
    }
}
