//! Exact page edits for the node mutations on the tree's hot path, so the redo log gets what
//! changed (a cell, a slot, a move of the slot array, a header field) instead of a byte diff
//! of everything a mutation shifted.
//!
//! # Invariants
//!
//! - Applying [`insert_edits`] gives exactly the page [`insert`](super::insert) gives
//!   (`insert_edits_equal_insert`).
//! - After [`remove_edits`], the node holds its keys but the removed one, in order, and an
//!   emptied node has hint prefix 0 (`remove_and_replace_edits_keep_the_accounting`).
//! - After [`replace_edits`], the node holds the same keys in the same slots with the new
//!   cell at `idx`, and its byte accounting holds: the cell area (cell start to page end) is
//!   exactly the live cells plus the fragmentation count (`remove_and_replace_edits_keep_the_accounting`,
//!   which also breaks the count on purpose).

use super::*;
use keel_page::PageOp::{self, Move, Write};

/// The exact edits that insert `cell` as slot `idx` of node `page` when it fits in the free
/// space without compaction (the common case): the cell below the lowest one, the slot array
/// shifted one slot up from `idx` (a move), the new slot (offset and key hint), the slot count and
/// cell start. `None` when it does not fit without compaction or the key breaks the node's hint
/// prefix; then [`insert`](super::insert) decides. Applying the edits gives
/// exactly what [`insert`](super::insert) would (tested by `insert_edits_equal_insert`).
pub(crate) fn insert_edits(
    page: &[u8],
    id: PageId,
    idx: usize,
    cell: &[u8],
) -> Result<Option<InsertEdits>> {
    let node = Node::new(page, id)?;
    let n = node.len();
    let cell_len = cell.len();
    if idx > n {
        return Err(node.corrupt(format!("insert at slot {idx} of {n}")));
    }
    if node.free_space() < cell_len + SLOT_SIZE {
        return Ok(None);
    }
    let key = cell_key(cell, node.is_leaf());
    if !node.shares_hint_prefix(key)? {
        // The key breaks the node's hint prefix: `insert` rewrites the hints.
        return Ok(None);
    }
    if n == 0 && node.hint_prefix() != 0 {
        // An empty node with a stale prefix (invariant 3): `insert` resets it.
        return Ok(None);
    }
    let hp = node.hint_prefix();
    let mut slot_bytes = [0u8; 8];
    slot_bytes[4..].copy_from_slice(&hint_of(key, hp).to_le_bytes());
    let top = rd_u32(page, NH_CELL_START) as usize - cell_len;
    slot_bytes[..4].copy_from_slice(&(top as u32).to_le_bytes());
    let mut counts = [0u8; 8];
    counts[..4].copy_from_slice(&((n + 1) as u32).to_le_bytes());
    counts[4..].copy_from_slice(&(top as u32).to_le_bytes());
    Ok(Some(InsertEdits {
        top,
        slot: SLOTS + idx * SLOT_SIZE,
        shift: (n - idx) * SLOT_SIZE,
        slot_bytes,
        counts,
    }))
}

/// What [`insert_edits`] computed.
pub(crate) struct InsertEdits {
    top: usize,
    slot: usize,
    shift: usize,
    slot_bytes: [u8; 8],
    counts: [u8; 8],
}

impl InsertEdits {
    /// The edits, for `cell`.
    pub(crate) fn edits<'a>(&'a self, cell: &'a [u8]) -> [PageOp<'a>; 4] {
        [
            Write {
                offset: self.top,
                bytes: cell,
            },
            Move {
                src: self.slot,
                dst: self.slot + SLOT_SIZE,
                len: self.shift,
            },
            Write {
                offset: self.slot,
                bytes: &self.slot_bytes,
            },
            Write {
                offset: NH_NSLOTS,
                bytes: &self.counts,
            },
        ]
    }
}

/// The edits that remove slot `idx` of node `page`: the slot array above it moved down one slot
/// (one move), the freed last slot zeroed, the slot count, and the fragmentation count; an
/// emptied node also gets hint prefix 0 (invariant 3).
pub(crate) fn remove_edits(page: &[u8], id: PageId, idx: usize) -> Result<RemoveEdits> {
    let node = Node::new(page, id)?;
    let n = node.len();
    if idx >= n {
        return Err(node.corrupt(format!("remove of slot {idx} of {n}")));
    }
    let len = node.cell(idx)?.len();
    Ok(RemoveEdits {
        slot: SLOTS + idx * SLOT_SIZE,
        shift: (n - 1 - idx) * SLOT_SIZE,
        last: SLOTS + (n - 1) * SLOT_SIZE,
        counts: Counts::after_drop(&node, page, n - 1, len)?,
    })
}

/// What [`remove_edits`] computed.
pub(crate) struct RemoveEdits {
    slot: usize,
    shift: usize,
    last: usize,
    counts: Counts,
}

/// The header after cells left a node in place (a remove, a split's truncation): slot count,
/// cell start (unchanged) and fragmentation count grown by the cells' bytes; an emptied node
/// also gets hint prefix 0 (invariant 3).
struct Counts {
    header: [u8; 12],
    emptied: bool,
}

impl Counts {
    /// The counts once node `page` keeps `nslots` slots and `dropped` more bytes of dead cells.
    fn after_drop(node: &Node<'_>, page: &[u8], nslots: usize, dropped: usize) -> Result<Counts> {
        let frag = node.frag().checked_add(dropped).ok_or_else(|| {
            node.corrupt(format!("fragmentation count {} overflows", node.frag()))
        })?;
        let mut header = [0u8; 12];
        header[..4].copy_from_slice(&(nslots as u32).to_le_bytes());
        header[4..8].copy_from_slice(&page[NH_CELL_START..NH_CELL_START + 4]);
        header[8..].copy_from_slice(&(frag as u32).to_le_bytes());
        Ok(Counts {
            header,
            emptied: nslots == 0,
        })
    }

    /// Appends the header writes to `ops`.
    fn push_edits<'a>(&'a self, ops: &mut Vec<PageOp<'a>>) {
        ops.push(Write {
            offset: NH_NSLOTS,
            bytes: &self.header,
        });
        if self.emptied {
            ops.push(Write {
                offset: NH_HINT_PREFIX,
                bytes: &ZERO_U16,
            });
        }
    }
}

const ZERO_SLOT: [u8; SLOT_SIZE] = [0; SLOT_SIZE];
const ZERO_U16: [u8; 2] = [0; 2];

impl RemoveEdits {
    /// Whether the node is left without a slot.
    pub(crate) fn emptied(&self) -> bool {
        self.counts.emptied
    }

    /// The edits.
    pub(crate) fn edits(&self) -> Vec<PageOp<'_>> {
        let mut ops = Vec::with_capacity(4);
        if self.shift > 0 {
            ops.push(Move {
                src: self.slot + SLOT_SIZE,
                dst: self.slot,
                len: self.shift,
            });
        }
        ops.push(Write {
            offset: self.last,
            bytes: &ZERO_SLOT,
        });
        self.counts.push_edits(&mut ops);
        ops
    }
}

/// The edits that replace the cell of slot `idx` by `cell`, a cell with the same key (a value
/// overwritten): no slot moves. A cell no longer than the old one is written over it (only
/// the bytes that differ; the shortfall becomes fragmentation); a longer one goes below the
/// lowest cell when the free space holds it, and the slot is pointed at it (the old cell becomes
/// fragmentation). `None` when a longer cell does not fit the free space: then the caller
/// removes and inserts (compaction or a split).
pub(crate) fn replace_edits(
    page: &[u8],
    id: PageId,
    idx: usize,
    cell: &[u8],
) -> Result<Option<ReplaceEdits>> {
    let node = Node::new(page, id)?;
    let n = node.len();
    if idx >= n {
        return Err(node.corrupt(format!("replace of slot {idx} of {n}")));
    }
    let old = node.cell(idx)?;
    let leaf = node.is_leaf();
    if cell_key(old, leaf) != cell_key(cell, leaf) {
        return Err(node.corrupt(format!("replace of slot {idx} with another key")));
    }
    let old_at = rd_u32(page, SLOTS + idx * SLOT_SIZE) as usize;
    if cell.len() <= old.len() {
        let first = old.iter().zip(cell).position(|(a, b)| a != b);
        let last = old[..cell.len()]
            .iter()
            .zip(cell)
            .rposition(|(a, b)| a != b);
        let grown_frag = old.len() - cell.len();
        let frag = node.frag().checked_add(grown_frag).ok_or_else(|| {
            node.corrupt(format!("fragmentation count {} overflows", node.frag()))
        })?;
        return Ok(Some(ReplaceEdits {
            write_at: old_at,
            changed: match (first, last) {
                (Some(f), Some(l)) => f..l + 1,
                _ => 0..0,
            },
            slot: None,
            header: (grown_frag > 0).then(|| {
                let mut h = [0u8; 8];
                h[..4].copy_from_slice(&page[NH_CELL_START..NH_CELL_START + 4]);
                h[4..].copy_from_slice(&(frag as u32).to_le_bytes());
                h
            }),
        }));
    }
    if node.free_space() < cell.len() {
        return Ok(None);
    }
    let frag = node
        .frag()
        .checked_add(old.len())
        .ok_or_else(|| node.corrupt(format!("fragmentation count {} overflows", node.frag())))?;
    let top = rd_u32(page, NH_CELL_START) as usize - cell.len();
    let mut h = [0u8; 8];
    h[..4].copy_from_slice(&(top as u32).to_le_bytes());
    h[4..].copy_from_slice(&(frag as u32).to_le_bytes());
    Ok(Some(ReplaceEdits {
        write_at: top,
        changed: 0..cell.len(),
        slot: Some((SLOTS + idx * SLOT_SIZE, (top as u32).to_le_bytes())),
        header: Some(h),
    }))
}

/// What [`replace_edits`] computed.
pub(crate) struct ReplaceEdits {
    /// Where the new cell starts.
    write_at: usize,
    /// The bytes of the new cell that must be written.
    changed: std::ops::Range<usize>,
    /// The slot's new cell offset, when the cell moved.
    slot: Option<(usize, [u8; 4])>,
    /// New cell start and fragmentation count, when they change.
    header: Option<[u8; 8]>,
}

impl ReplaceEdits {
    /// The edits, for `cell` (the one given to [`replace_edits`]).
    pub(crate) fn edits<'a>(&'a self, cell: &'a [u8]) -> Vec<PageOp<'a>> {
        let mut ops = Vec::with_capacity(3);
        if !self.changed.is_empty() {
            ops.push(Write {
                offset: self.write_at + self.changed.start,
                bytes: &cell[self.changed.clone()],
            });
        }
        if let Some((at, bytes)) = &self.slot {
            ops.push(Write { offset: *at, bytes });
        }
        if let Some(h) = &self.header {
            ops.push(Write {
                offset: NH_CELL_START,
                bytes: h,
            });
        }
        ops
    }
}

/// The edits that compact node `page` in place so that a cell of `need` bytes (plus its slot)
/// fits its free space: live cells slid toward the page end, keeping their physical order,
/// contiguous runs moving together (one move each, applied from the highest down, so no move
/// overwrites a cell not yet moved); the slots whose offsets changed rewritten as one span;
/// cell start and fragmentation count (now 0). Logged this way a compaction costs a move per
/// run and the changed slots, not the bytes of every cell (as a rebuild's page diff did).
/// `None` when the cell would not fit even then, or nothing would move. With `need` `None` the
/// node is compacted whatever room it has (`None` only when nothing would move): a split
/// compacts both halves while their cells are fresh in the cache. Cells that overlap or leave
/// the cell area are corruption, never moved.
pub(crate) fn compact_edits(
    page: &[u8],
    id: PageId,
    need: Option<usize>,
) -> Result<Option<CompactEdits>> {
    let node = Node::new(page, id)?;
    let n = node.len();
    if need.is_some_and(|need| node.free_space() >= need + SLOT_SIZE) {
        return Ok(None);
    }
    let (cell_start, end) = node.cell_area();
    // (offset, length, slot) of every live cell, highest offset first.
    let mut cells = Vec::with_capacity(n);
    for i in 0..n {
        let c = node.cell(i)?;
        let off = rd_u32(page, SLOTS + i * SLOT_SIZE) as usize;
        cells.push((off, c.len(), i));
    }
    cells.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
    let mut top = end;
    for &(off, len, i) in &cells {
        if off + len > top {
            return Err(node.corrupt(format!(
                "the cell of slot {i} ({off}..{}) overlaps another cell",
                off + len
            )));
        }
        top = off;
    }
    let live: usize = cells.iter().map(|c| c.1).sum();
    let new_start = end - live;
    let slots_end = SLOTS + (n + 1) * SLOT_SIZE;
    if new_start < slots_end || new_start - slots_end < need.unwrap_or(0) || new_start == cell_start
    {
        return Ok(None);
    }
    let mut moves: Vec<(usize, usize, usize)> = Vec::new(); // (src, dst, len)
    let mut offsets = vec![0u32; n];
    let mut target = end;
    for &(off, len, i) in &cells {
        let dst = target - len;
        offsets[i] = dst as u32;
        if dst != off {
            // Extends the previous move if this cell sits right below its source run and
            // moves by the same distance.
            match moves.last_mut() {
                Some((src, d, l)) if off + len == *src && *d - *src == dst - off => {
                    *src = off;
                    *d = dst;
                    *l += len;
                }
                _ => moves.push((off, dst, len)),
            }
        }
        target = dst;
    }
    let moved = |i: &usize| rd_u32(page, SLOTS + i * SLOT_SIZE) != offsets[*i];
    let (Some(first), Some(last)) = ((0..n).find(moved), (0..n).rfind(moved)) else {
        return Ok(None);
    };
    let mut slots = page[SLOTS + first * SLOT_SIZE..SLOTS + (last + 1) * SLOT_SIZE].to_vec();
    for (slot, off) in slots
        .chunks_exact_mut(SLOT_SIZE)
        .zip(&offsets[first..=last])
    {
        slot[..4].copy_from_slice(&off.to_le_bytes());
    }
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&(new_start as u32).to_le_bytes());
    Ok(Some(CompactEdits {
        moves,
        slots_at: SLOTS + first * SLOT_SIZE,
        slots,
        header,
    }))
}

/// What [`compact_edits`] computed.
pub(crate) struct CompactEdits {
    /// (source, destination, length), highest first.
    moves: Vec<(usize, usize, usize)>,
    slots_at: usize,
    slots: Vec<u8>,
    /// Cell start and fragmentation count (0).
    header: [u8; 8],
}

impl CompactEdits {
    /// The edits.
    pub(crate) fn edits(&self) -> Vec<PageOp<'_>> {
        let mut ops: Vec<PageOp<'_>> = self
            .moves
            .iter()
            .map(|&(src, dst, len)| Move { src, dst, len })
            .collect();
        ops.push(Write {
            offset: self.slots_at,
            bytes: &self.slots,
        });
        ops.push(Write {
            offset: NH_CELL_START,
            bytes: &self.header,
        });
        ops
    }
}

/// The edits that keep only the first `keep` slots of node `page` (the left half of a split):
/// the slot count and the fragmentation count grown by the dropped cells' bytes, which stay
/// where they are until a compaction needs the room; an emptied node also gets hint prefix 0
/// (invariant 3). A few header bytes instead of the page diff of a rebuilt node.
pub(crate) fn truncate_edits(page: &[u8], id: PageId, keep: usize) -> Result<TruncateEdits> {
    let node = Node::new(page, id)?;
    let n = node.len();
    if keep > n {
        return Err(node.corrupt(format!("truncation to {keep} of {n} slots")));
    }
    let mut dropped = 0usize;
    for i in keep..n {
        dropped += node.cell(i)?.len();
    }
    Ok(TruncateEdits(Counts::after_drop(
        &node, page, keep, dropped,
    )?))
}

/// The edits that drop the first `k` slots of node `page` (a split's right half made as a
/// copy of the whole node: `BTree::insert_cell`): the slot array moved down by `k` slots, the
/// slot count, and the dropped cells' bytes added to the fragmentation count (they stay where
/// they are, dead). The node keeps its hint prefix: the kept keys share it too.
pub(crate) fn drop_front_edits(page: &[u8], id: PageId, k: usize) -> Result<DropFrontEdits> {
    let node = Node::new(page, id)?;
    let n = node.len();
    if k == 0 || k >= n {
        return Err(node.corrupt(format!("dropping the first {k} of {n} slots")));
    }
    let mut dropped = 0usize;
    for i in 0..k {
        dropped += node.cell(i)?.len();
    }
    Ok(DropFrontEdits {
        src: SLOTS + k * SLOT_SIZE,
        len: (n - k) * SLOT_SIZE,
        counts: Counts::after_drop(&node, page, n - k, dropped)?,
    })
}

/// What [`drop_front_edits`] computed.
pub(crate) struct DropFrontEdits {
    src: usize,
    len: usize,
    counts: Counts,
}

impl DropFrontEdits {
    /// The edits.
    pub(crate) fn edits(&self) -> Vec<PageOp<'_>> {
        let mut ops = Vec::with_capacity(2);
        ops.push(Move {
            src: self.src,
            dst: SLOTS,
            len: self.len,
        });
        self.counts.push_edits(&mut ops);
        ops
    }
}

/// What [`truncate_edits`] computed.
pub(crate) struct TruncateEdits(Counts);

impl TruncateEdits {
    /// The edits.
    pub(crate) fn edits(&self) -> Vec<PageOp<'_>> {
        let mut ops = Vec::with_capacity(2);
        self.0.push_edits(&mut ops);
        ops
    }
}
