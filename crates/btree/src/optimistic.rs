//! Optimistic (unlatched) node decoding for point lookups.
//!
//! [`PageRead::read_optimistic`](crate::PageRead::read_optimistic) hands a page over as aligned
//! little-endian words that a writer may be changing while they are read; the implementation
//! validates afterwards (a seqlock) and discards the result if anything changed. Until then the
//! words may be any garbage, so this module decodes a node the way [`Node`](crate::node::Node)
//! does, but from word loads only, with every offset and length bounds-checked.
//!
//! # Invariants (tested below)
//!
//! 1. **Same answer**: on a page that does not change, [`step`] finds exactly what `Node` finds
//!    (`the_word_decoder_agrees_with_node` compares them on every node of random trees).
//! 2. **Total on garbage**: on any bytes, [`step`] returns without panicking, without reading
//!    outside the page and without looping more than a bounded number of times
//!    (`garbage_never_panics_or_hangs`, which also flips bytes of real nodes); `None` means
//!    "this is not a well-formed node", and the caller falls back to the latched path, which
//!    reports real corruption.

use crate::node::{
    hint_of, FLAG_OVERFLOW, INNER_CELL_HEADER, KIND_INNER, KIND_LEAF, LEAF_CELL_HEADER,
    NH_CELL_START, NH_HINT_PREFIX, NH_KIND, NH_LEFTMOST, NH_LEVEL, NH_NSLOTS, OVERFLOW_REF_LEN,
    SLOTS, SLOT_SIZE,
};
use keel_page::{PageId, PAGE_TRAILER_SIZE};
use std::cmp::Ordering;
use std::sync::atomic::{AtomicU64, Ordering as Mem};

// The slot array is word-aligned and a slot is one word (offset in the low half, hint in the
// high half): one load reads a slot.
const _: () = assert!(SLOTS.is_multiple_of(8) && SLOT_SIZE == 8);

/// What one level of a point lookup found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Follow this child, which must be at this level.
    Child(PageId, u8),
    /// The leaf holds no such key.
    Absent,
    /// The leaf's value, copied.
    Inline(Vec<u8>),
    /// The leaf's value, copied into the first this many bytes of the caller's buffer.
    Copied(usize),
    /// The value lives in overflow pages.
    Overflow { first: PageId, len: u64 },
}

/// A page as racy words.
#[derive(Clone, Copy)]
struct Words<'a>(&'a [AtomicU64]);

impl Words<'_> {
    fn len(&self) -> usize {
        self.0.len() * 8
    }

    #[inline]
    fn word(&self, i: usize) -> Option<u64> {
        self.0.get(i).map(|w| w.load(Mem::Relaxed))
    }

    /// The `n` (1..=8) bytes at `off` as a little-endian integer.
    #[inline]
    fn le(&self, off: usize, n: usize) -> Option<u64> {
        debug_assert!((1..=8).contains(&n));
        if off.checked_add(n)? > self.len() {
            return None;
        }
        let (i, shift) = (off / 8, (off % 8) * 8);
        let mut x = self.word(i)? >> shift;
        if shift + n * 8 > 64 {
            x |= self.word(i + 1)? << (64 - shift);
        }
        Some(if n == 8 {
            x
        } else {
            x & ((1u64 << (n * 8)) - 1)
        })
    }

    fn u8(&self, off: usize) -> Option<u8> {
        self.le(off, 1).map(|x| x as u8)
    }
    fn u16(&self, off: usize) -> Option<u16> {
        self.le(off, 2).map(|x| x as u16)
    }
    fn u32(&self, off: usize) -> Option<u32> {
        self.le(off, 4).map(|x| x as u32)
    }
    fn u64(&self, off: usize) -> Option<u64> {
        self.le(off, 8)
    }

    /// The page bytes `off..off + len` compared with `key` (lexicographically, as slices).
    fn cmp(&self, off: usize, len: usize, key: &[u8]) -> Option<Ordering> {
        if off.checked_add(len)? > self.len() {
            return None;
        }
        let common = len.min(key.len());
        let mut i = 0;
        while i < common {
            let n = (common - i).min(8);
            let mut a = [0u8; 8];
            a[..n].copy_from_slice(&self.le(off + i, n)?.to_le_bytes()[..n]);
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&key[i..i + n]);
            match u64::from_be_bytes(a).cmp(&u64::from_be_bytes(b)) {
                Ordering::Equal => i += n,
                o => return Some(o),
            }
        }
        Some(len.cmp(&key.len()))
    }

    /// Copies the page bytes `off..off + len` into `out[..len]` (`None` if either is too
    /// short).
    fn copy_to(&self, off: usize, len: usize, out: &mut [u8]) -> Option<()> {
        if off.checked_add(len)? > self.len() {
            return None;
        }
        for (i, chunk) in out.get_mut(..len)?.chunks_mut(8).enumerate() {
            let n = chunk.len();
            chunk.copy_from_slice(self.le(off + i * 8, n)?.to_le_bytes().get(..n)?);
        }
        Some(())
    }

    /// A copy of the page bytes `off..off + len`.
    fn copy(&self, off: usize, len: usize) -> Option<Vec<u8>> {
        if off.checked_add(len)? > self.len() {
            return None;
        }
        let mut v = Vec::with_capacity(len);
        let mut i = 0;
        while i < len {
            let n = (len - i).min(8);
            v.extend_from_slice(&self.le(off + i, n)?.to_le_bytes()[..n]);
            i += n;
        }
        Some(v)
    }
}

/// A node header decoded from words, with the same checks as `Node::new`.
struct OptNode<'a> {
    w: Words<'a>,
    leaf: bool,
    nslots: usize,
    cell_start: usize,
    end: usize,
    hdr: usize,
}

impl<'a> OptNode<'a> {
    fn new(w: Words<'a>) -> Option<OptNode<'a>> {
        let end = w.len().checked_sub(PAGE_TRAILER_SIZE)?;
        if w.len() < SLOTS + PAGE_TRAILER_SIZE {
            return None;
        }
        let leaf = match w.u8(NH_KIND)? {
            KIND_LEAF => true,
            KIND_INNER => false,
            _ => return None,
        };
        let nslots = w.u32(NH_NSLOTS)? as usize;
        let cell_start = w.u32(NH_CELL_START)? as usize;
        if SLOTS + nslots.saturating_mul(SLOT_SIZE) > cell_start || cell_start > end {
            return None;
        }
        Some(OptNode {
            w,
            leaf,
            nslots,
            cell_start,
            end,
            hdr: if leaf {
                LEAF_CELL_HEADER
            } else {
                INNER_CELL_HEADER
            },
        })
    }

    /// Slot `i` (`i < nslots`): (cell offset, key hint).
    #[inline]
    fn slot(&self, i: usize) -> Option<(usize, u32)> {
        let x = self.w.word(SLOTS / 8 + i)?;
        Some((x as u32 as usize, (x >> 32) as u32))
    }

    /// Cell `i`: (offset, key length), bounds-checked as `Node::cell` does.
    fn cell(&self, i: usize) -> Option<(usize, usize)> {
        if i >= self.nslots {
            return None;
        }
        let (off, _) = self.slot(i)?;
        if off < self.cell_start || off + self.hdr > self.end {
            return None;
        }
        // The cell's next lines (a leaf value follows its key) load while its header does.
        prefetch_word(self.w.0, (off + 64) / 8);
        prefetch_word(self.w.0, (off + 128) / 8);
        let klen = self.w.u16(off)? as usize;
        let len = if self.leaf {
            self.hdr + klen + self.w.u32(off + 4)? as usize
        } else {
            self.hdr + klen
        };
        if off + len > self.end {
            return None;
        }
        Some((off, klen))
    }

    /// Key `i` compared with `key`.
    fn key_cmp(&self, i: usize, key: &[u8]) -> Option<Ordering> {
        let (off, klen) = self.cell(i)?;
        self.w.cmp(off + self.hdr, klen, key)
    }

    /// First slot in `from..nslots` whose hint fails `before`.
    fn hint_partition(&self, from: usize, before: impl Fn(u32) -> bool) -> Option<usize> {
        let (mut lo, mut hi) = (from, self.nslots);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if before(self.slot(mid)?.1) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }

    /// `Node::search` on words.
    fn search(&self, key: &[u8]) -> Option<Result<usize, usize>> {
        let n = self.nslots;
        if n == 0 {
            return Some(Err(0));
        }
        let hp = self.w.u16(NH_HINT_PREFIX)? as usize;
        if hp > 0 {
            let (off, klen) = self.cell(0)?;
            if klen < hp {
                return None;
            }
            // Node compares key[..min(len, hp)] with key 0's prefix; `cmp` compares the page
            // bytes with the key, so the order is reversed.
            match self.w.cmp(off + self.hdr, hp, &key[..key.len().min(hp)])? {
                Ordering::Greater => return Some(Err(0)),
                Ordering::Less => return Some(Err(n)),
                Ordering::Equal => {}
            }
        }
        let h = hint_of(key, hp);
        let mut lo = self.hint_partition(0, |x| x < h)?;
        let mut hi = self.hint_partition(lo, |x| x <= h)?;
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key_cmp(mid, key)? {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some(Ok(mid)),
            }
        }
        Some(Err(lo))
    }

    /// `Node::child` on words.
    fn child(&self, c: usize) -> Option<PageId> {
        if c == 0 {
            return self.w.u64(NH_LEFTMOST).map(PageId);
        }
        let (off, _) = self.cell(c - 1)?;
        self.w.u64(off + 4).map(PageId)
    }

    /// `Node::value` on words (inline values copied: into `buf` if they fit, else into a
    /// vector of their own).
    fn value(&self, i: usize, buf: &mut [u8]) -> Option<Step> {
        let (off, klen) = self.cell(i)?;
        let vlen = self.w.u32(off + 4)? as usize;
        let v = off + LEAF_CELL_HEADER + klen;
        if self.w.u8(off + 2)? == FLAG_OVERFLOW {
            if vlen != OVERFLOW_REF_LEN {
                return None;
            }
            return Some(Step::Overflow {
                first: PageId(self.w.u64(v)?),
                len: self.w.u64(v + 8)?,
            });
        }
        // An empty buffer asks for a vector (`step`), even for an empty value.
        if !buf.is_empty() && vlen <= buf.len() {
            return self.w.copy_to(v, vlen, buf).map(|()| Step::Copied(vlen));
        }
        self.w.copy(v, vlen).map(Step::Inline)
    }
}

/// Asks the CPU to start loading the cache line of `words[i]` (no effect if `i` is out of
/// range; never blocks, never faults).
#[inline(always)]
fn prefetch_word(words: &[AtomicU64], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(w) = words.get(i) {
        // SAFETY: `_mm_prefetch` is a hint: it has no architectural effect and cannot fault
        // (the pointer is valid here anyway: it comes from a reference into the slice). It is
        // `unsafe` only because it is a `#[target_feature(enable = "sse")]` function, and SSE
        // is part of the x86_64 baseline.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (w as *const AtomicU64).cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (words, i);
}

/// One level of a point lookup of `key` on a page given as racy words: the child to follow or
/// the leaf's answer (an inline value in a vector of its own). `expect`: the level the parent
/// said this node is at. `None`: not a well-formed node (or not at the expected level).
#[cfg(test)]
pub(crate) fn step(words: &[AtomicU64], key: &[u8], expect: Option<u8>) -> Option<Step> {
    step_into(words, key, expect, &mut [])
}

/// [`step`], with an inline value that fits in `buf` copied there ([`Step::Copied`]) instead
/// of into a vector (a borrowed get allocates nothing).
pub(crate) fn step_into(
    words: &[AtomicU64],
    key: &[u8],
    expect: Option<u8>,
    buf: &mut [u8],
) -> Option<Step> {
    let w = Words(words);
    let n = OptNode::new(w)?;
    let level = w.u8(NH_LEVEL)?;
    if expect.is_some_and(|e| e != level) {
        return None;
    }
    if n.leaf {
        return match n.search(key)? {
            Ok(i) => n.value(i, buf),
            Err(_) => Some(Step::Absent),
        };
    }
    let c = match n.search(key)? {
        Ok(i) => i + 1,
        Err(i) => i,
    };
    Some(Step::Child(n.child(c)?, level.wrapping_sub(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{Node, ValueRef};
    use crate::{BTree, MemPages, PageRead};
    use keel_io::SplitMix64;

    fn words(page: &[u8]) -> Vec<AtomicU64> {
        page.chunks(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                AtomicU64::new(u64::from_le_bytes(b))
            })
            .collect()
    }

    /// What `Node` finds for `key` on `page`, as a `Step`.
    fn node_step(page: &[u8], id: PageId, key: &[u8]) -> Option<Step> {
        let n = Node::new(page, id).ok()?;
        if n.is_leaf() {
            return Some(match n.search(key).ok()? {
                Ok(i) => match n.value(i).ok()? {
                    ValueRef::Inline(v) => Step::Inline(v.to_vec()),
                    ValueRef::Overflow { first, len } => Step::Overflow { first, len },
                },
                Err(_) => Step::Absent,
            });
        }
        let c = n.child_index_for(key).ok()?;
        Some(Step::Child(n.child(c).ok()?, n.level().wrapping_sub(1)))
    }

    /// [`step_into`] with a 64-byte buffer, a value copied there given back as `Inline`.
    fn step_buffered(w: &[AtomicU64], key: &[u8]) -> Option<Step> {
        let mut buf = [0u8; 64];
        match step_into(w, key, None, &mut buf) {
            Some(Step::Copied(n)) => {
                assert!(n <= 64, "{n} bytes copied into 64");
                Some(Step::Inline(buf[..n].to_vec()))
            }
            other => other,
        }
    }

    /// A tree with keys of varied length and shared prefixes (so hint prefixes are non-zero),
    /// some values in overflow pages.
    fn tree(seed: u64, page_size: usize, n: usize) -> (MemPages, BTree, Vec<Vec<u8>>) {
        let mut pages = MemPages::new(page_size);
        let t = BTree::create(&mut pages).unwrap();
        let mut rng = SplitMix64::new(seed);
        let mut keys = Vec::new();
        for i in 0..n {
            let len = 1 + (rng.next_u64() % 40) as usize;
            let mut k = b"prefix/".to_vec();
            k.extend((0..len).map(|_| (rng.next_u64() % 7) as u8 + b'a'));
            let vlen = if i % 97 == 0 {
                3000
            } else {
                (rng.next_u64() % 120) as usize
            };
            let v: Vec<u8> = (0..vlen).map(|j| (i + j) as u8).collect();
            t.insert(&mut pages, &k, &v).unwrap();
            keys.push(k);
        }
        (pages, t, keys)
    }

    /// Invariant 1: on every node of random trees, for present and absent keys (and keys
    /// sharing only part of a node's hint prefix), the word decoder finds what `Node` finds.
    #[test]
    fn the_word_decoder_agrees_with_node() {
        for (seed, ps) in [(1u64, 4096usize), (2, 4096), (3, 16384)] {
            let (pages, _t, keys) = tree(seed, ps, 1500);
            let mut rng = SplitMix64::new(seed * 31);
            let mut probes: Vec<Vec<u8>> = keys.iter().step_by(7).cloned().collect();
            for _ in 0..200 {
                let mut k = if rng.next_u64().is_multiple_of(2) {
                    b"prefix/".to_vec()
                } else {
                    b"pre".to_vec()
                };
                k.extend((0..rng.next_u64() % 12).map(|_| (rng.next_u64() % 9) as u8 + b'`'));
                probes.push(k);
            }
            probes.push(Vec::new());
            let mut checked = 0;
            for id in 1..=pages.live_pages() as u64 * 2 {
                let id = PageId(id);
                let Ok(page) = pages.read(id, |p| p.to_vec()) else {
                    continue;
                };
                if Node::new(&page, id).is_err() {
                    continue; // overflow page
                }
                let w = words(&page);
                for k in &probes {
                    assert_eq!(step(&w, k, None), node_step(&page, id, k), "{id} {k:?}");
                    assert_eq!(step_buffered(&w, k), node_step(&page, id, k), "{id} {k:?}");
                    checked += 1;
                }
            }
            assert!(checked > 1000, "only {checked} probes");
        }
    }

    /// Invariant 2: random bytes, and real nodes with random bytes changed (slot offsets, key
    /// lengths, counts), never make the decoder panic or hang, and it refuses exactly what
    /// `Node` refuses: the same answer as `Node` on every such page (`None` where `Node`
    /// reports corruption), so a bounds check missing from the word decoder shows up here as a
    /// different answer or a panic.
    #[test]
    fn garbage_never_panics_or_hangs() {
        let mut rng = SplitMix64::new(99);
        let (pages, _t, keys) = tree(7, 4096, 800);
        let real: Vec<Vec<u8>> = (1..=pages.live_pages() as u64)
            .filter_map(|id| pages.read(PageId(id), |p| p.to_vec()).ok())
            .collect();
        for round in 0..20_000 {
            let mut page = if round % 2 == 0 {
                real[(rng.next_u64() as usize) % real.len()].clone()
            } else {
                (0..4096).map(|_| rng.next_u64() as u8).collect()
            };
            for _ in 0..1 + rng.next_u64() % 8 {
                let at = (rng.next_u64() as usize) % page.len();
                page[at] = rng.next_u64() as u8;
            }
            if round % 4 == 1 {
                // Plausible header: a node kind and a slot count that fits.
                page[NH_KIND] = [KIND_LEAF, KIND_INNER][(rng.next_u64() % 2) as usize];
                page[NH_NSLOTS..NH_NSLOTS + 4]
                    .copy_from_slice(&((rng.next_u64() % 300) as u32).to_le_bytes());
                page[NH_CELL_START..NH_CELL_START + 4]
                    .copy_from_slice(&(3000 + (rng.next_u64() % 1000) as u32).to_le_bytes());
            }
            let k = &keys[(rng.next_u64() as usize) % keys.len()];
            assert_eq!(
                step(&words(&page), k, None),
                node_step(&page, PageId(1), k),
                "round {round}"
            );
            assert_eq!(
                step_buffered(&words(&page), k),
                node_step(&page, PageId(1), k),
                "round {round}"
            );
            let short = &page[..page.len() - 8 * (round % 3)];
            assert_eq!(step(&words(short), k, None), node_step(short, PageId(1), k));
        }
    }
}
