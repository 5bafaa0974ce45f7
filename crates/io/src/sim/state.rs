//! The state of one simulated file: its latest and durable images and the operations issued since
//! its last successful sync, with what sync, write-through, failed sync and truncation do to them.
//!
//! Invariant (while `limbo` is false): applying `pending`, in issue order, to `durable` gives
//! `current`. A successful sync relies on it to copy only the touched chunks.

use super::crash::{CrashPolicy, Fate};
use super::image::Image;
use super::rng::SplitMix64;
use std::sync::Arc;

/// The bytes of a pending write; all-zero writes (preallocation) are stored without memory.
#[derive(Clone, Debug)]
pub(crate) enum Data {
    /// `n` zero bytes.
    Zeros(usize),
    /// These bytes.
    Bytes(Arc<[u8]>),
}

impl Data {
    pub(crate) fn from_slice(buf: &[u8]) -> Data {
        if super::image::is_zero(buf) {
            Data::Zeros(buf.len())
        } else {
            Data::Bytes(Arc::from(buf))
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Data::Zeros(n) => *n,
            Data::Bytes(b) => b.len(),
        }
    }

    /// Bytes `from..to` (relative to the start of the data).
    pub(crate) fn slice(&self, from: usize, to: usize) -> Data {
        match self {
            Data::Zeros(_) => Data::Zeros(to - from),
            Data::Bytes(b) => Data::Bytes(Arc::from(&b[from..to])),
        }
    }

    /// Writes bytes `from..to` (relative) of the data at `offset + from` of `image`.
    pub(crate) fn write_part(&self, image: &mut Image, offset: u64, from: usize, to: usize) {
        match self {
            Data::Zeros(_) => image.write_zeros(offset + from as u64, (to - from) as u64),
            Data::Bytes(b) => image.write(offset + from as u64, &b[from..to]),
        }
    }

    pub(crate) fn to_vec(&self) -> Vec<u8> {
        match self {
            Data::Zeros(n) => vec![0; *n],
            Data::Bytes(b) => b.to_vec(),
        }
    }
}

/// One operation issued since the last successful sync.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// A write (`atomic`: by `write_atomic`, all-or-nothing at a crash).
    Write {
        offset: u64,
        data: Data,
        atomic: bool,
        /// Written through the page cache (not `direct`).
        cached: bool,
    },
    /// `set_len` (or `allocate` extending the file) from length `from` to `len`.
    SetLen { len: u64, from: u64 },
}

impl Op {
    /// The byte range whose contents this operation changed.
    fn range(&self) -> (u64, u64) {
        match self {
            Op::Write { offset, data, .. } => (*offset, *offset + data.len() as u64),
            Op::SetLen { len, from } => ((*len).min(*from), (*len).max(*from)),
        }
    }
}

/// One file.
#[derive(Debug, Default)]
pub(crate) struct FileState {
    /// The latest contents: what reads see.
    pub(crate) current: Image,
    /// What survives a crash for certain.
    pub(crate) durable: Image,
    /// Operations since the last successful sync, in issue order.
    pub(crate) pending: Vec<Op>,
    /// A sync failed and dropped some writes: `durable` and `current` differ in places no pending
    /// operation covers (the page cache still shows data that will never reach the disk).
    pub(crate) limbo: bool,
    /// Byte ranges of cached writes a failed sync dropped (or tore) while the page cache kept
    /// them, clean: as on ext4, where a block allocated for a write whose writeback failed stays
    /// an unwritten extent, a later write of these bytes through the cache reaches the cache
    /// only — its sync succeeds, a crash loses it — until the cache drops its copies
    /// ([`FileState::drop_cache`]) or a direct write replaces them.
    pub(crate) stale: Vec<(u64, u64)>,
    /// Whether some live path names this file (its length counts towards the space limit).
    pub(crate) linked: bool,
}

/// `ranges` without `start..end` (a range straddling it split in two).
fn minus(ranges: &[(u64, u64)], start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &(a, b) in ranges {
        if b <= start || a >= end {
            out.push((a, b));
            continue;
        }
        if a < start {
            out.push((a, start));
        }
        if b > end {
            out.push((end, b));
        }
    }
    out
}

/// Removes bytes `start..end` from every pending write (splitting writes that straddle it).
fn cut_writes(pending: &mut Vec<Op>, start: u64, end: u64) {
    if start >= end {
        return;
    }
    let mut out = Vec::with_capacity(pending.len());
    for op in pending.drain(..) {
        match op {
            Op::Write {
                offset,
                data,
                atomic,
                cached,
            } => {
                let wend = offset + data.len() as u64;
                if wend <= start || offset >= end {
                    out.push(Op::Write {
                        offset,
                        data,
                        atomic,
                        cached,
                    });
                    continue;
                }
                if offset < start {
                    out.push(Op::Write {
                        offset,
                        data: data.slice(0, (start - offset) as usize),
                        atomic,
                        cached,
                    });
                }
                if wend > end {
                    out.push(Op::Write {
                        offset: end,
                        data: data.slice((end - offset) as usize, data.len()),
                        atomic,
                        cached,
                    });
                }
            }
            other => out.push(other),
        }
    }
    *pending = out;
}

impl FileState {
    /// A file whose durable and latest contents are `image`.
    pub(crate) fn clean(image: Image) -> FileState {
        FileState {
            current: image.clone(),
            durable: image,
            pending: Vec::new(),
            limbo: false,
            stale: Vec::new(),
            linked: true,
        }
    }

    /// A buffered write: visible now, durable after the next successful sync (`cached`: through
    /// the page cache; a direct write replaces what the cache held of its range).
    pub(crate) fn write(&mut self, offset: u64, buf: &[u8], atomic: bool, cached: bool) {
        if buf.is_empty() {
            return;
        }
        if !cached {
            self.unstale(offset, offset + buf.len() as u64);
        }
        self.current.write(offset, buf);
        self.pending.push(Op::Write {
            offset,
            data: Data::from_slice(buf),
            atomic,
            cached,
        });
    }

    /// Removes `start..end` from the stale ranges.
    fn unstale(&mut self, start: u64, end: u64) {
        if !self.stale.is_empty() {
            self.stale = minus(&self.stale, start, end);
        }
    }

    /// The parts of `start..end` outside every stale range, in order.
    fn fresh_parts(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        self.stale
            .iter()
            .fold(vec![(start, end)], |parts, &(a, b)| minus(&parts, a, b))
    }

    /// The pending operations, taken for a crash to decide their fates: without the bytes of
    /// writes into stale ranges, which never reach the disk (see `stale`).
    pub(crate) fn take_pending_for_crash(&mut self) -> Vec<Op> {
        let mut ops = std::mem::take(&mut self.pending);
        for &(a, b) in &self.stale {
            cut_writes(&mut ops, a, b);
        }
        self.stale.clear();
        ops
    }

    /// The page cache drops its clean copies: reads of the stale ranges show the durable bytes
    /// again (writes made there since are lost, as their write-back never reached the disk),
    /// and later writes there reach the disk as anywhere else.
    pub(crate) fn drop_cache(&mut self) {
        let len = self.current.len();
        for (a, b) in std::mem::take(&mut self.stale) {
            let b = b.min(len);
            if a < b {
                self.current.copy_range_from(&self.durable, a, b);
                cut_writes(&mut self.pending, a, b);
            }
        }
        if self.limbo && self.pending.is_empty() && self.durable.same_as(&self.current) {
            self.limbo = false;
            self.durable = self.current.clone();
        }
    }

    /// An O_DSYNC write: durable when it returns, together with the file's current length (the
    /// metadata needed to read it back, as fdatasync commits it). Earlier pending writes lose the
    /// bytes it overwrote (those bytes are now durably the new ones), earlier pending length
    /// changes become durable, and other pending writes stay pending: where they extended the
    /// file, a crash that loses them leaves zeros inside the durable length.
    pub(crate) fn write_through(&mut self, offset: u64, buf: &[u8], cached: bool) {
        if buf.is_empty() {
            return;
        }
        let end = offset + buf.len() as u64;
        if !cached {
            self.unstale(offset, end);
        }
        self.current.write(offset, buf);
        // The size is committed with the data: pending length changes become durable.
        let mut rest = Vec::with_capacity(self.pending.len());
        for op in self.pending.drain(..) {
            match op {
                Op::SetLen { len, .. } => self.durable.set_len(len),
                w => rest.push(w),
            }
        }
        self.pending = rest;
        cut_writes(&mut self.pending, offset, end);
        if self.pending.is_empty() && !self.limbo {
            // durable ⊕ (nothing) = current outside offset..end: take the chunks over.
            self.durable.share_chunks_from(&self.current, offset, end);
            let len = self.current.len();
            self.durable.set_len_unchecked(len);
        } else {
            // What a failed sync left stale stays off the disk (ext4: see `stale`).
            for (a, b) in self.fresh_parts(offset, end) {
                self.durable
                    .write(a, &buf[(a - offset) as usize..(b - offset) as usize]);
            }
            self.durable.set_len(self.current.len());
        }
        #[cfg(test)]
        self.check_invariant();
    }

    /// `set_len` / the extension done by `allocate`: visible now, durable after a sync.
    /// Truncation drops the cached bytes of earlier pending writes past `len`.
    pub(crate) fn set_len(&mut self, len: u64) {
        let from = self.current.len();
        if len == from {
            return;
        }
        if len < from {
            cut_writes(&mut self.pending, len, u64::MAX);
        }
        self.current.set_len(len);
        self.pending.push(Op::SetLen { len, from });
    }

    /// A successful sync: every pending operation and the length become durable.
    pub(crate) fn sync(&mut self) {
        if self.pending.is_empty() && !self.limbo {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let len = self.current.len();
        if !self.limbo {
            for op in &pending {
                let (a, b) = op.range();
                self.durable.share_chunks_from(&self.current, a, b);
            }
            self.durable.set_len_unchecked(len);
        } else {
            for op in &pending {
                let (a, b) = op.range();
                // What a failed sync left stale stays off the disk (ext4: see `stale`).
                for (a, b) in self.fresh_parts(a, b.min(len)) {
                    if a < b {
                        self.durable.copy_range_from(&self.current, a, b);
                    }
                }
            }
            self.durable.set_len(len);
            if self.durable.same_as(&self.current) {
                self.limbo = false;
                self.stale.clear();
                self.durable = self.current.clone();
            }
        }
        #[cfg(test)]
        self.check_invariant();
    }

    /// A failed sync: each pending operation independently reached the disk, did not, or (writes)
    /// reached it in part, decided now by `policy` and `rng`. What did not reach the disk is
    /// dropped for good (Linux marks the pages clean after a writeback error: a later sync will
    /// not write them), although reads still see it. Returns how many writes were lost or torn.
    pub(crate) fn fail_sync(
        &mut self,
        policy: &CrashPolicy,
        rng: &mut SplitMix64,
        sector: u64,
    ) -> u64 {
        let mut dropped = 0;
        for op in std::mem::take(&mut self.pending) {
            match op {
                Op::Write {
                    offset,
                    data,
                    atomic,
                    cached,
                } => {
                    let n = sectors_of(offset, data.len(), sector);
                    let fate = policy.draw(rng, !atomic && n >= 2);
                    match fate {
                        Fate::Keep => data.write_part(&mut self.durable, offset, 0, data.len()),
                        Fate::Lose => dropped += 1,
                        Fate::Tear => {
                            dropped += 1;
                            let mask = torn_mask(rng, n);
                            write_sectors(&mut self.durable, offset, &data, sector, &mask);
                        }
                    }
                    if cached && fate != Fate::Keep {
                        self.stale.push((offset, offset + data.len() as u64));
                    }
                }
                Op::SetLen { len, .. } => {
                    if policy.draw(rng, false) == Fate::Keep {
                        self.durable.set_len(len);
                    }
                }
            }
        }
        self.limbo = true;
        dropped
    }

    /// Checks `durable ⊕ pending = current` (unit tests only: it costs a full comparison).
    #[cfg(test)]
    pub(crate) fn check_invariant(&self) {
        if self.limbo || self.current.len() > (8 << 20) {
            return;
        }
        let mut replay = self.durable.clone();
        for op in &self.pending {
            match op {
                Op::Write { offset, data, .. } => {
                    data.write_part(&mut replay, *offset, 0, data.len())
                }
                Op::SetLen { len, .. } => replay.set_len(*len),
            }
        }
        assert_eq!(
            replay.to_vec(),
            self.current.to_vec(),
            "durable + pending != current"
        );
    }
}

/// How many sectors (of `sector` bytes, at absolute offsets) `offset..offset+len` touches.
pub(crate) fn sectors_of(offset: u64, len: usize, sector: u64) -> usize {
    if len == 0 {
        return 0;
    }
    let first = offset / sector;
    let last = (offset + len as u64 - 1) / sector;
    (last - first + 1) as usize
}

/// A random non-empty proper subset of `n ≥ 2` sectors (true = kept).
pub(crate) fn torn_mask(rng: &mut SplitMix64, n: usize) -> Vec<bool> {
    let mut mask = Vec::with_capacity(n);
    let mut bits = 0u64;
    for i in 0..n {
        if i.is_multiple_of(64) {
            bits = rng.next_u64();
        }
        mask.push(bits & 1 == 1);
        bits >>= 1;
    }
    let kept = mask.iter().filter(|&&k| k).count();
    if n >= 2 && (kept == 0 || kept == n) {
        let i = rng.below(n as u64) as usize;
        mask[i] = !mask[i];
    }
    mask
}

/// Writes the sectors of a write that `mask` keeps; returns the number kept.
pub(crate) fn write_sectors(
    image: &mut Image,
    offset: u64,
    data: &Data,
    sector: u64,
    mask: &[bool],
) -> usize {
    let first = offset / sector;
    let end = offset + data.len() as u64;
    let mut kept = 0;
    for (i, &keep) in mask.iter().enumerate() {
        if !keep {
            continue;
        }
        let s = (first + i as u64) * sector;
        let a = s.max(offset);
        let b = (s + sector).min(end);
        data.write_part(image, offset, (a - offset) as usize, (b - offset) as usize);
        kept += 1;
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_masks_are_proper_nonempty_subsets() {
        let mut rng = SplitMix64::new(3);
        for n in [2usize, 3, 8, 64, 65, 300] {
            for _ in 0..200 {
                let m = torn_mask(&mut rng, n);
                let k = m.iter().filter(|&&b| b).count();
                assert!(k > 0 && k < n, "n {n} kept {k}");
            }
        }
    }

    #[test]
    fn truncation_drops_cached_bytes_of_earlier_writes() {
        let mut f = FileState::clean(Image::default());
        f.write(0, &[1u8; 8192], false, true);
        f.set_len(100);
        f.set_len(8192);
        f.check_invariant();
        assert!(f.current.to_vec()[100..].iter().all(|&b| b == 0));
        match &f.pending[0] {
            Op::Write { data, .. } => assert_eq!(data.len(), 100),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn write_through_supersedes_overlapped_pending_bytes() {
        let mut f = FileState::clean(Image::default());
        f.write(0, &[1u8; 1000], false, true);
        f.write_through(200, &[2u8; 100], true);
        f.check_invariant();
        assert_eq!(f.pending.len(), 2);
        let d = f.durable.to_vec();
        assert_eq!(d.len(), 1000, "the length is committed with the data");
        assert!(d[200..300].iter().all(|&b| b == 2));
        assert!(d[..200].iter().all(|&b| b == 0));
        f.sync();
        assert!(f.pending.is_empty());
        assert!(f.durable.same_as(&f.current));
    }

    /// A failed sync that drops a cached write leaves its bytes stale (ext4's unwritten extent):
    /// reads show them, a rewrite of them and a successful sync do not reach the disk (nor does
    /// a crash keep them), until the cache drops its copies; then reads show the disk's bytes
    /// and a rewrite sticks. A direct write replaces the cached copies at once.
    #[test]
    fn a_rewrite_of_bytes_a_failed_sync_dropped_sticks_only_after_the_cache_drops_them() {
        let lose = CrashPolicy::lose_all();
        let mut rng = SplitMix64::new(1);
        let mut f = FileState::clean(Image::default());
        f.write(0, &[1u8; 4096], false, true);
        f.sync();
        f.write(0, &[2u8; 4096], false, true);
        f.fail_sync(&lose, &mut rng, 512);
        assert_eq!(
            f.current.to_vec(),
            vec![2u8; 4096],
            "the cache still shows the write"
        );
        f.write(0, &[2u8; 4096], false, true);
        f.sync();
        assert_eq!(
            f.durable.to_vec(),
            vec![1u8; 4096],
            "the rewrite did not stick"
        );
        f.write(0, &[3u8; 4096], false, true);
        let mut crashed = FileState::clean(f.durable.clone());
        crashed.pending = f.pending.clone();
        crashed.stale = f.stale.clone();
        assert!(
            crashed.take_pending_for_crash().is_empty(),
            "a crash keeps none of it"
        );
        f.drop_cache();
        assert_eq!(
            f.current.to_vec(),
            vec![1u8; 4096],
            "reads show the disk again"
        );
        assert!(!f.limbo);
        f.write(0, &[4u8; 4096], false, true);
        f.sync();
        assert_eq!(
            f.durable.to_vec(),
            vec![4u8; 4096],
            "after the drop a rewrite sticks"
        );

        f.write(0, &[5u8; 4096], false, true);
        f.fail_sync(&lose, &mut rng, 512);
        f.write(0, &[6u8; 4096], false, false);
        f.sync();
        assert_eq!(f.durable.to_vec(), vec![6u8; 4096], "a direct write sticks");
    }
}
