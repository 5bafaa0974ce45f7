//! Slotted-page nodes: decoding with bounds checks, and the mutations the tree needs.
//!
//! A slot is 8 bytes: the cell's offset (u32) and a *key hint* (u32): the 4 key bytes after the
//! node's hint prefix length `hp` (header), big-endian, zero-padded. Every key of a node shares
//! its first `hp` bytes, so hints order like the keys (not strictly: equal hints need the full
//! keys). A search compares the search key's prefix once with the first key, binary-searches the
//! slot array by hint (contiguous memory) and reads cells only where hints are equal — instead
//! of a cell (a cache miss) at every probe.
//!
//! # Invariants (each checked by `BTree::check` and by a test that breaks it on purpose)
//!
//! 1. Every key of a node starts with the first `hp` bytes of key 0 (`hint_prefix_is_kept`).
//! 2. Every slot's hint is the hint of its cell's key under `hp` (`a_stale_hint_is_reported`).
//! 3. An empty node has `hp` 0: the first key to arrive is hinted under prefix 0
//!    (`an_emptied_node_forgets_its_hint_prefix`). Broken, it made a key overwritten in a leaf
//!    of one key unfindable by gets and forward scans (issue 11, item 1).

use crate::{BTreeError, Result};
use keel_page::{PageId, PAGE_HEADER_SIZE, PAGE_TRAILER_SIZE};

// Node header, right after the page header.
pub(crate) const NH_KIND: usize = PAGE_HEADER_SIZE; // u8: 1 leaf, 2 inner
pub(crate) const NH_LEVEL: usize = PAGE_HEADER_SIZE + 1; // u8: 0 for leaves
pub(crate) const NH_HINT_PREFIX: usize = PAGE_HEADER_SIZE + 2; // u16: key bytes every key shares
pub(crate) const NH_NSLOTS: usize = PAGE_HEADER_SIZE + 4; // u32
pub(crate) const NH_CELL_START: usize = PAGE_HEADER_SIZE + 8; // u32: offset of the lowest cell
pub(crate) const NH_FRAG: usize = PAGE_HEADER_SIZE + 12; // u32: bytes of dead cells
pub(crate) const NH_LEFTMOST: usize = PAGE_HEADER_SIZE + 16; // u64: leftmost child (inner nodes)
/// Offset of the slot array.
pub(crate) const SLOTS: usize = PAGE_HEADER_SIZE + 24;
pub(crate) const SLOT_SIZE: usize = 8; // cell offset u32, key hint u32

pub(crate) const KIND_LEAF: u8 = 1;
pub(crate) const KIND_INNER: u8 = 2;

pub(crate) const LEAF_CELL_HEADER: usize = 8; // klen u16, flag u8, pad u8, vlen u32
pub(crate) const INNER_CELL_HEADER: usize = 12; // klen u16, pad u16, child u64
pub(crate) const OVERFLOW_REF_LEN: usize = 16; // first page u64, total length u64
pub(crate) const FLAG_OVERFLOW: u8 = 1;

/// Size limits that follow from the page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Page size in bytes.
    pub page_size: usize,
    /// Largest cell (so that at least four cells always fit in a node).
    pub max_cell: usize,
    /// Longest key.
    pub max_key: usize,
}

impl Limits {
    /// Limits for pages of `page_size` bytes.
    pub fn new(page_size: usize) -> Limits {
        let usable = page_size - PAGE_TRAILER_SIZE - SLOTS;
        let max_cell = usable / 4 - SLOT_SIZE;
        Limits {
            page_size,
            max_cell,
            max_key: max_cell - LEAF_CELL_HEADER - OVERFLOW_REF_LEN,
        }
    }

    /// Longest value stored inline next to a key of `key_len` bytes; longer values go to
    /// overflow pages.
    pub fn max_inline_value(&self, key_len: usize) -> usize {
        self.max_cell - LEAF_CELL_HEADER - key_len
    }

    /// Bytes of value data one overflow page holds.
    pub fn overflow_capacity(&self) -> usize {
        self.page_size - PAGE_TRAILER_SIZE - PAGE_HEADER_SIZE - OVERFLOW_HEADER
    }

    /// Overflow pages a value of `value_len` bytes next to a key of `key_len` bytes takes: 0
    /// when it is stored inline, else one per [`overflow_capacity`](Self::overflow_capacity)
    /// bytes (as the chain is written).
    pub fn overflow_pages(&self, key_len: usize, value_len: usize) -> usize {
        if value_len <= self.max_inline_value(key_len) {
            0
        } else {
            value_len.div_ceil(self.overflow_capacity())
        }
    }
}

/// Overflow page payload header: next page u64, bytes used u32.
pub(crate) const OVERFLOW_HEADER: usize = 12;

/// A leaf value as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ValueRef<'a> {
    Inline(&'a [u8]),
    Overflow { first: PageId, len: u64 },
}

pub(crate) fn rd_u16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
pub(crate) fn rd_u32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
pub(crate) fn rd_u64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
#[cfg(test)]
fn wr_u16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes());
}
fn wr_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn wr_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// The hint of `key` under hint prefix `hp`: its bytes `hp..hp + 4`, big-endian, zero-padded.
pub(crate) fn hint_of(key: &[u8], hp: usize) -> u32 {
    let mut b = [0u8; 4];
    if key.len() > hp {
        let n = (key.len() - hp).min(4);
        b[..n].copy_from_slice(&key[hp..hp + n]);
    }
    u32::from_be_bytes(b)
}

/// Length of the common prefix of `a` and `b`.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A validated read-only view of a node.
#[derive(Clone, Copy)]
pub(crate) struct Node<'a> {
    page: &'a [u8],
    id: PageId,
    kind: u8,
    nslots: usize,
    /// Offset of the lowest cell (read once: the page cannot change while borrowed).
    cell_start: usize,
    /// End of the cell area (the trailer's offset).
    end: usize,
    /// Cell header size for this node's kind.
    hdr: usize,
}

impl<'a> Node<'a> {
    /// Validates the node header; every later accessor bounds-checks what it reads.
    pub(crate) fn new(page: &'a [u8], id: PageId) -> Result<Node<'a>> {
        let corrupt = |detail: String| BTreeError::Corrupt {
            page_id: id,
            detail,
        };
        if page.len() < SLOTS + PAGE_TRAILER_SIZE {
            return Err(corrupt(format!("page of {} bytes", page.len())));
        }
        let kind = page[NH_KIND];
        if kind != KIND_LEAF && kind != KIND_INNER {
            return Err(corrupt(format!("node kind {kind}")));
        }
        let nslots = rd_u32(page, NH_NSLOTS) as usize;
        let cell_start = rd_u32(page, NH_CELL_START) as usize;
        let end = page.len() - PAGE_TRAILER_SIZE;
        if SLOTS + nslots.saturating_mul(SLOT_SIZE) > cell_start || cell_start > end {
            return Err(corrupt(format!(
                "{nslots} slots and cells from {cell_start} do not fit in the page"
            )));
        }
        Ok(Node {
            page,
            id,
            kind,
            nslots,
            cell_start,
            end,
            hdr: if kind == KIND_LEAF {
                LEAF_CELL_HEADER
            } else {
                INNER_CELL_HEADER
            },
        })
    }

    fn corrupt(&self, detail: String) -> BTreeError {
        BTreeError::Corrupt {
            page_id: self.id,
            detail,
        }
    }

    pub(crate) fn is_leaf(&self) -> bool {
        self.kind == KIND_LEAF
    }

    pub(crate) fn level(&self) -> u8 {
        self.page[NH_LEVEL]
    }

    pub(crate) fn len(&self) -> usize {
        self.nslots
    }

    /// Starts loading the free space a new cell of `len` bytes would take (just below the
    /// cell area) into the cache, one read per cache line, so that the search that runs next
    /// overlaps the misses instead of the insert's undo paying them after it (it reads what the
    /// cell overwrites). Reads only; nothing if the cell would not fit.
    #[inline]
    pub(crate) fn touch_free_space(&self, len: usize) {
        if len > self.free_space() {
            return;
        }
        for i in (self.cell_start - len..self.cell_start).step_by(64) {
            std::hint::black_box(self.page[i]);
        }
    }

    /// The cell area `cell_start..end` (validated by [`Node::new`]): every cell lies in it.
    pub(crate) fn cell_area(&self) -> (usize, usize) {
        (self.cell_start, self.end)
    }

    pub(crate) fn leftmost(&self) -> PageId {
        PageId(rd_u64(self.page, NH_LEFTMOST))
    }

    /// Key bytes every key of the node shares (the hint prefix length).
    pub(crate) fn hint_prefix(&self) -> usize {
        rd_u16(self.page, NH_HINT_PREFIX) as usize
    }

    /// The key hint stored in slot `i` (`i < len()`).
    fn slot_hint(&self, i: usize) -> u32 {
        rd_u32(self.page, SLOTS + i * SLOT_SIZE + 4)
    }

    /// The first slot in `from..len()` whose hint fails `before` (hints never decrease, so the
    /// slots where `before` holds come first).
    fn hint_partition(&self, from: usize, before: impl Fn(u32) -> bool) -> usize {
        let (mut lo, mut hi) = (from, self.nslots);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if before(self.slot_hint(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Whether `key` may join this node without lowering its hint prefix: it starts with the
    /// first `hint_prefix()` bytes of key 0 (always true for an empty node or prefix 0).
    fn shares_hint_prefix(&self, key: &[u8]) -> Result<bool> {
        let hp = self.hint_prefix();
        if self.nslots == 0 || hp == 0 {
            return Ok(true);
        }
        let k0 = self.key(0)?;
        Ok(key.len() >= hp && k0.len() >= hp && key[..hp] == k0[..hp])
    }

    /// Checks invariants 1 and 2 of this module for every slot (used by `BTree::check`).
    pub(crate) fn check_hints(&self) -> Result<()> {
        if self.nslots == 0 {
            if self.hint_prefix() != 0 {
                return Err(self.corrupt(format!(
                    "empty node with hint prefix {}",
                    self.hint_prefix()
                )));
            }
            return Ok(());
        }
        let hp = self.hint_prefix();
        let k0 = self.key(0)?;
        if k0.len() < hp {
            return Err(self.corrupt(format!(
                "hint prefix {hp} is longer than key 0 ({} bytes)",
                k0.len()
            )));
        }
        for i in 0..self.nslots {
            let k = self.key(i)?;
            if k.len() < hp || k[..hp] != k0[..hp] {
                return Err(self.corrupt(format!(
                    "key {i} does not share the node's {hp}-byte hint prefix"
                )));
            }
            if self.slot_hint(i) != hint_of(k, hp) {
                return Err(self.corrupt(format!(
                    "slot {i} has hint {:#010x}, its key's is {:#010x}",
                    self.slot_hint(i),
                    hint_of(k, hp)
                )));
            }
        }
        Ok(())
    }

    /// The page type its header records (a node's must match its kind; the structural check
    /// asks).
    pub(crate) fn page_type(&self) -> Option<keel_page::PageType> {
        keel_page::PageHeader::read(self.page).map(|h| h.page_type)
    }

    /// Checks that no two cells share a byte (each lies in the cell area by [`cell`]): cells
    /// that overlap read as valid rows, each with some of another's bytes. For the structural
    /// check only (it sorts the cells).
    pub(crate) fn check_cells(&self) -> Result<()> {
        let mut spans = Vec::with_capacity(self.nslots);
        for i in 0..self.nslots {
            let off = rd_u32(self.page, SLOTS + i * SLOT_SIZE) as usize;
            spans.push((off, off + self.cell(i)?.len(), i));
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            let ((_, end_a, a), (off_b, _, b)) = (w[0], w[1]);
            if off_b < end_a {
                return Err(self.corrupt(format!(
                    "cells {a} and {b} overlap (at {off_b}, before {end_a})"
                )));
            }
        }
        Ok(())
    }

    /// The bytes of cell `i`, bounds-checked.
    #[inline]
    pub(crate) fn cell(&self, i: usize) -> Result<&'a [u8]> {
        if i >= self.nslots {
            return Err(self.corrupt(format!("slot {i} of {}", self.nslots)));
        }
        let off = rd_u32(self.page, SLOTS + i * SLOT_SIZE) as usize;
        let (hdr, end) = (self.hdr, self.end);
        if off < self.cell_start || off + hdr > end {
            return Err(self.corrupt(format!("slot {i} points at {off}")));
        }
        let klen = rd_u16(self.page, off) as usize;
        let len = if self.is_leaf() {
            hdr + klen + rd_u32(self.page, off + 4) as usize
        } else {
            hdr + klen
        };
        if off + len > end {
            return Err(self.corrupt(format!(
                "cell {i} at {off} of {len} bytes runs past the page end"
            )));
        }
        Ok(&self.page[off..off + len])
    }

    #[inline]
    pub(crate) fn key(&self, i: usize) -> Result<&'a [u8]> {
        let c = self.cell(i)?;
        let klen = rd_u16(c, 0) as usize;
        Ok(&c[self.hdr..self.hdr + klen])
    }

    pub(crate) fn value(&self, i: usize) -> Result<ValueRef<'a>> {
        let c = self.cell(i)?;
        let klen = rd_u16(c, 0) as usize;
        let v = &c[LEAF_CELL_HEADER + klen..];
        if c[2] == FLAG_OVERFLOW {
            if v.len() != OVERFLOW_REF_LEN {
                return Err(self.corrupt(format!("overflow reference of {} bytes", v.len())));
            }
            Ok(ValueRef::Overflow {
                first: PageId(rd_u64(v, 0)),
                len: rd_u64(v, 8),
            })
        } else {
            Ok(ValueRef::Inline(v))
        }
    }

    /// Child `c` of an inner node: 0 is the leftmost child, `i + 1` the child of cell `i`.
    pub(crate) fn child(&self, c: usize) -> Result<PageId> {
        if c == 0 {
            return Ok(self.leftmost());
        }
        let cell = self.cell(c - 1)?;
        Ok(PageId(rd_u64(cell, 4)))
    }

    /// Binary search: `Ok(i)` if key `i` equals `key`, else `Err(i)` where it would go.
    pub(crate) fn search(&self, key: &[u8]) -> Result<std::result::Result<usize, usize>> {
        let n = self.nslots;
        if n == 0 {
            return Ok(Err(0));
        }
        let hp = self.hint_prefix();
        if hp > 0 {
            // Every key starts with key 0's first `hp` bytes: a key that does not goes before or
            // after all of them.
            let k0 = self.key(0)?;
            let p = k0
                .get(..hp)
                .ok_or_else(|| self.corrupt(format!("hint prefix {hp} longer than key 0")))?;
            match key[..key.len().min(hp)].cmp(p) {
                std::cmp::Ordering::Less => return Ok(Err(0)),
                std::cmp::Ordering::Greater => return Ok(Err(n)),
                std::cmp::Ordering::Equal => {}
            }
        }
        // The slots whose hint equals the key's: [lo, hi).
        let h = hint_of(key, hp);
        let mut lo = self.hint_partition(0, |x| x < h);
        let mut hi = self.hint_partition(lo, |x| x <= h);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid)?.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Ok(mid)),
            }
        }
        Ok(Err(lo))
    }

    /// Which child to follow for `key`.
    pub(crate) fn child_index_for(&self, key: &[u8]) -> Result<usize> {
        Ok(match self.search(key)? {
            Ok(i) => i + 1,
            Err(i) => i,
        })
    }

    /// All cells, copied back to back to the end of `buf` (one buffer, not one allocation per
    /// cell); returns where each is in `buf`, in slot order.
    pub(crate) fn cells_into(&self, buf: &mut Vec<u8>) -> Result<Vec<std::ops::Range<usize>>> {
        (0..self.nslots)
            .map(|i| {
                let c = self.cell(i)?;
                let start = buf.len();
                buf.extend_from_slice(c);
                Ok(start..buf.len())
            })
            .collect()
    }

    /// All cells, copied.
    pub(crate) fn cells(&self) -> Result<Vec<Vec<u8>>> {
        (0..self.nslots)
            .map(|i| self.cell(i).map(<[u8]>::to_vec))
            .collect()
    }

    fn free_space(&self) -> usize {
        rd_u32(self.page, NH_CELL_START) as usize - (SLOTS + self.nslots * SLOT_SIZE)
    }

    fn frag(&self) -> usize {
        rd_u32(self.page, NH_FRAG) as usize
    }

    /// Whether a cell of `cell_len` bytes and its slot fit, compacted if need be, by the
    /// header's counts (free space and fragmentation).
    fn fits_compacted(&self, cell_len: usize) -> bool {
        self.free_space() + self.frag() >= cell_len + SLOT_SIZE
    }
}

/// Encodes a leaf cell with an inline value.
#[cfg(test)]
pub(crate) fn leaf_cell_inline(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(LEAF_CELL_HEADER + key.len() + value.len());
    push_leaf_cell_inline(&mut c, key, value);
    c
}

/// Appends the leaf cell of `key` with the inline `value` to `out` (the bytes
/// [`leaf_cell_inline`] returns), for a caller that keeps the cell in a buffer of its own.
pub(crate) fn push_leaf_cell_inline(out: &mut impl Extend<u8>, key: &[u8], value: &[u8]) {
    out.extend((key.len() as u16).to_le_bytes());
    out.extend([0, 0]);
    out.extend((value.len() as u32).to_le_bytes());
    out.extend(key.iter().copied());
    out.extend(value.iter().copied());
}

/// Encodes a leaf cell whose value lives in overflow pages.
pub(crate) fn leaf_cell_overflow(key: &[u8], first: PageId, len: u64) -> Vec<u8> {
    let mut c = Vec::with_capacity(LEAF_CELL_HEADER + key.len() + OVERFLOW_REF_LEN);
    c.extend_from_slice(&(key.len() as u16).to_le_bytes());
    c.push(FLAG_OVERFLOW);
    c.push(0);
    c.extend_from_slice(&(OVERFLOW_REF_LEN as u32).to_le_bytes());
    c.extend_from_slice(key);
    c.extend_from_slice(&first.0.to_le_bytes());
    c.extend_from_slice(&len.to_le_bytes());
    c
}

/// Encodes an inner cell.
pub(crate) fn inner_cell(key: &[u8], child: PageId) -> Vec<u8> {
    let mut c = Vec::with_capacity(INNER_CELL_HEADER + key.len());
    c.extend_from_slice(&(key.len() as u16).to_le_bytes());
    c.extend_from_slice(&[0, 0]);
    c.extend_from_slice(&child.0.to_le_bytes());
    c.extend_from_slice(key);
    c
}

/// The key of an encoded cell (leaf or inner).
pub(crate) fn cell_key(cell: &[u8], leaf: bool) -> &[u8] {
    let klen = rd_u16(cell, 0) as usize;
    let hdr = if leaf {
        LEAF_CELL_HEADER
    } else {
        INNER_CELL_HEADER
    };
    &cell[hdr..hdr + klen]
}

/// The child of an encoded inner cell.
pub(crate) fn cell_child(cell: &[u8]) -> PageId {
    PageId(rd_u64(cell, 4))
}

/// The node's hint prefix once `key` is in it: unchanged when `key` shares it; otherwise lowered
/// to what `key` shares with key 0, with every slot's hint recomputed (rare: the key falls
/// outside the range the node's keys spanned when the prefix was chosen).
fn shared_hint_prefix(page: &mut [u8], id: PageId, key: &[u8]) -> Result<usize> {
    let (hp, n, p) = {
        let node = Node::new(page, id)?;
        let hp = node.hint_prefix();
        if node.len() == 0 {
            // Invariant 3 (also repairs an empty node written before it held).
            page[NH_HINT_PREFIX..NH_HINT_PREFIX + 2].fill(0);
            return Ok(0);
        }
        if node.shares_hint_prefix(key)? {
            return Ok(hp);
        }
        let k0 = node.key(0)?;
        (hp, node.len(), common_prefix(key, &k0[..hp.min(k0.len())]))
    };
    debug_assert!(p < hp);
    let mut hints = Vec::with_capacity(n);
    {
        let node = Node::new(page, id)?;
        for i in 0..n {
            hints.push(hint_of(node.key(i)?, p));
        }
    }
    for (i, h) in hints.into_iter().enumerate() {
        wr_u32(page, SLOTS + i * SLOT_SIZE + 4, h);
    }
    page[NH_HINT_PREFIX..NH_HINT_PREFIX + 2].copy_from_slice(&(p as u16).to_le_bytes());
    Ok(p)
}

/// Rewrites `page` as a node holding exactly `cells` (in order).
///
/// Returns false (page unchanged) if they do not fit.
pub(crate) fn rebuild(
    page: &mut [u8],
    kind: u8,
    level: u8,
    leftmost: PageId,
    cells: &[impl AsRef<[u8]>],
) -> bool {
    let end = page.len() - PAGE_TRAILER_SIZE;
    let need: usize = cells.iter().map(|c| c.as_ref().len() + SLOT_SIZE).sum();
    if SLOTS + need > end {
        return false;
    }
    page[PAGE_HEADER_SIZE..end].fill(0);
    page[NH_KIND] = kind;
    page[NH_LEVEL] = level;
    wr_u64(page, NH_LEFTMOST, leftmost.0);
    let leaf = kind == KIND_LEAF;
    // The prefix the first and last key share (every key between them shares it too).
    let hp = match (cells.first(), cells.last()) {
        (Some(a), Some(b)) if cells.len() > 1 => {
            common_prefix(cell_key(a.as_ref(), leaf), cell_key(b.as_ref(), leaf))
                .min(u16::MAX as usize)
        }
        _ => 0,
    };
    page[NH_HINT_PREFIX..NH_HINT_PREFIX + 2].copy_from_slice(&(hp as u16).to_le_bytes());
    let mut top = end;
    for (i, c) in cells.iter().enumerate() {
        let c = c.as_ref();
        top -= c.len();
        page[top..top + c.len()].copy_from_slice(c);
        wr_u32(page, SLOTS + i * SLOT_SIZE, top as u32);
        wr_u32(
            page,
            SLOTS + i * SLOT_SIZE + 4,
            hint_of(cell_key(c, leaf), hp),
        );
    }
    wr_u32(page, NH_NSLOTS, cells.len() as u32);
    wr_u32(page, NH_CELL_START, top as u32);
    wr_u32(page, NH_FRAG, 0);
    true
}

/// Initialises an empty node.
pub(crate) fn init(page: &mut [u8], kind: u8, level: u8) {
    let none: [&[u8]; 0] = [];
    let ok = rebuild(page, kind, level, PageId(0), &none);
    debug_assert!(ok);
}

/// Whether a cell of `cell_len` bytes (and its slot) may fit node `page`, compacted if need be,
/// by its header's counts (free space and fragmentation): when false, [`insert`] refuses it and
/// the node must split.
pub(crate) fn may_fit(page: &[u8], id: PageId, cell_len: usize) -> Result<bool> {
    Ok(Node::new(page, id)?.fits_compacted(cell_len))
}

/// Inserts `cell` as slot `idx`, compacting if that makes room. Returns false (page unchanged)
/// if it does not fit.
pub(crate) fn insert(page: &mut [u8], id: PageId, idx: usize, cell: &[u8]) -> Result<bool> {
    let (free, fits, n, kind, level, leftmost) = {
        let node = Node::new(page, id)?;
        (
            node.free_space(),
            node.fits_compacted(cell.len()),
            node.len(),
            node.kind,
            node.level(),
            node.leftmost(),
        )
    };
    if free < cell.len() + SLOT_SIZE {
        if !fits {
            return Ok(false);
        }
        let mut cells = Node::new(page, id)?.cells()?;
        cells.insert(idx, cell.to_vec());
        return Ok(rebuild(page, kind, level, leftmost, &cells));
    }
    let key = cell_key(cell, kind == KIND_LEAF);
    let hp = shared_hint_prefix(page, id, key)?;
    let top = rd_u32(page, NH_CELL_START) as usize - cell.len();
    page[top..top + cell.len()].copy_from_slice(cell);
    let slot = SLOTS + idx * SLOT_SIZE;
    page.copy_within(slot..SLOTS + n * SLOT_SIZE, slot + SLOT_SIZE);
    wr_u32(page, slot, top as u32);
    wr_u32(page, slot + 4, hint_of(key, hp));
    wr_u32(page, NH_NSLOTS, (n + 1) as u32);
    wr_u32(page, NH_CELL_START, top as u32);
    Ok(true)
}

/// Removes slot `idx` by applying [`remove_edits`] (the tree applies them through its store);
/// its cell's bytes become fragmentation (reclaimed by the next compaction).
#[cfg(test)]
pub(crate) fn remove(page: &mut [u8], id: PageId, idx: usize) -> Result<()> {
    let plan = remove_edits(page, id, idx)?;
    for e in plan.edits() {
        e.apply(page).map_err(|e| BTreeError::Corrupt {
            page_id: id,
            detail: format!("remove: {e}"),
        })?;
    }
    Ok(())
}

/// The offset stored in slot `idx` (tests that break invariants on purpose).
#[cfg(test)]
pub(crate) fn slot_offset(page: &[u8], idx: usize) -> usize {
    rd_u32(page, SLOTS + idx * SLOT_SIZE) as usize
}

mod edits;
pub(crate) use edits::{
    compact_edits, drop_front_edits, insert_edits, remove_edits, replace_edits, truncate_edits,
    InsertEdits,
};

#[cfg(test)]
mod tests;
