//! The writing side: turns the completed prefix of the log buffer into blocks, pads, writes and
//! syncs them. Only one thread at a time owns the [`Writer`] (it sits behind the log's I/O
//! mutex).
//!
//! Invariants (each tested by breaking it on purpose, see the crate docs):
//!
//! 1. Blocks are written in order; a block's header describes exactly the bytes in it
//!    (bytes used, first group start, restart flag, number, epoch, incarnation) and its CRC
//!    covers them.
//! 2. A write never touches the file slot of a block at or after the checkpoint's scan start
//!    block of the previous lap (write-ahead padding is clamped; appenders wait for space).
//! 3. With [`crate::TailPolicy::SealOnSync`] a block that was synced while partly filled is never
//!    written again (the caller seals the tail before syncing).

use crate::block::{seal_block, BlockHeader, Geometry, BLOCK_HEADER};
use crate::files::LogFileSet;
use crate::record::{header_len, GROUP_HEADER};
use crate::ring::Ring;
use crate::stats::Counters;
use keel_io::{AlignedBuf, IoError, SyncMethod};
use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::time::Instant;

/// An I/O failure of the writer: the file, the operation and the error.
#[derive(Debug)]
pub(crate) struct Failure {
    pub path: PathBuf,
    pub op: &'static str,
    pub err: IoError,
}

/// The partly filled block last written.
#[derive(Debug)]
pub(crate) struct Tail {
    pub block: u64,
    pub payload: Vec<u8>,
    pub first_group: Option<u16>,
}

/// State owned by whoever holds the I/O lock.
#[derive(Debug)]
pub(crate) struct Writer {
    pub files: LogFileSet,
    pub geo: Geometry,
    pub sync_method: SyncMethod,
    /// Pad writes to this many bytes (0: no padding).
    pub write_ahead: u64,
    /// Everything below is written to the files.
    pub w: u64,
    /// Everything below is durable.
    pub durable: u64,
    pub tail: Option<Tail>,
    /// LSN of the next group or filler start at or after `w`.
    pub next_boundary: u64,
    /// Fillers (sealed tail rests) not yet fully written: `[start, end)`.
    pub fillers: VecDeque<(u64, u64)>,
    /// The block this incarnation started with (carries the restart flag).
    pub restart_block: u64,
    pub incarnation: u32,
    /// First block of the checkpoint's scan (its slot and the following ones must not be
    /// overwritten).
    pub scan_start_block: u64,
    dirty: BTreeSet<u64>,
    wbuf: AlignedBuf,
    max_blocks: u64,
    pad_blocks: u64,
    /// Groups whose end was written, and those counted at the last sync.
    groups_written: u64,
    groups_synced: u64,
    pending_group_end: Option<u64>,
    /// Test switch: skip the padding clamp (shows invariant 2's check matters).
    pub unclamped_padding: bool,
    /// Blocks carry a durable lag (log format version 2 and later).
    pub claims_durable: bool,
}

/// The most bytes one write pass stages (and so the size of the staging buffer, zeroed at
/// open): 1 MiB, or less when the log buffer is smaller (a pass never has more to write than
/// the buffer held; a smaller pass only means more writes, never a different stream).
const PASS_BYTES: usize = 1 << 20;

impl Writer {
    /// The durable lag block `b` carries: the blocks this incarnation has made durable below
    /// it (`[restart_block, durable / P)`), as `b + 1 - durable / P`; 0 (no claim) when there
    /// are none or the distance does not fit. Blocks of earlier incarnations are never claimed:
    /// what recovery read of them may have come from the page cache, not the disk.
    fn durable_lag(&self, b: u64) -> u32 {
        let p = self.geo.payload as u64;
        let below = self.durable / p;
        if !self.claims_durable || below <= self.restart_block || below > b {
            return 0;
        }
        u32::try_from(b + 1 - below)
            .ok()
            .filter(|&d| d <= crate::block::MAX_DURABLE_LAG)
            .unwrap_or(0)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        files: LogFileSet,
        geo: Geometry,
        sync_method: SyncMethod,
        write_ahead: u64,
        start_block: u64,
        incarnation: u32,
        scan_start_block: u64,
        buffer_size: usize,
    ) -> Writer {
        let pad_blocks = (write_ahead / geo.block as u64).max(1);
        let max_blocks = (buffer_size.clamp(geo.block, PASS_BYTES) / geo.block) as u64;
        let p = geo.payload as u64;
        Writer {
            files,
            geo,
            sync_method,
            write_ahead,
            w: start_block * p,
            durable: start_block * p,
            tail: Some(Tail {
                block: start_block,
                payload: Vec::new(),
                first_group: None,
            }),
            next_boundary: start_block * p,
            fillers: VecDeque::new(),
            restart_block: start_block,
            incarnation,
            scan_start_block,
            dirty: BTreeSet::new(),
            wbuf: AlignedBuf::page((max_blocks + pad_blocks) as usize * geo.block),
            max_blocks,
            pad_blocks,
            groups_written: 0,
            groups_synced: 0,
            pending_group_end: None,
            unclamped_padding: false,
            claims_durable: true,
        }
    }

    /// Builds block `b` (index `i` of this pass) holding the stream up to `end`. Returns the
    /// payload bytes it writes again (a tail rewrite).
    fn build_block(&mut self, ring: &Ring, i: usize, b: u64, end: u64) -> Option<usize> {
        let p = self.geo.payload;
        let bsz = self.geo.block;
        let bstart = b * p as u64;
        let used = (end - bstart).min(p as u64) as usize;
        let from = self.w.max(bstart);
        let durable_lag = self.durable_lag(b);
        let img = &mut self.wbuf[i * bsz..(i + 1) * bsz];
        let pl = &mut img[BLOCK_HEADER..BLOCK_HEADER + p];
        let mut first_group = None;
        let mut rewritten = None;
        if let Some(t) = self.tail.as_ref().filter(|t| t.block == b) {
            pl[..t.payload.len()].copy_from_slice(&t.payload);
            first_group = t.first_group;
            rewritten = Some(t.payload.len());
        }
        let a = (from - bstart) as usize;
        ring.read(from, &mut pl[a..used]);
        for &(s, e) in &self.fillers {
            let lo = s.max(from);
            let hi = e.min(bstart + used as u64);
            if lo < hi {
                pl[(lo - bstart) as usize..(hi - bstart) as usize].fill(0);
            }
        }
        pl[used..].fill(0);
        let data_end = bstart + used as u64;
        while self.next_boundary < data_end {
            let x = self.next_boundary;
            if let Some(&(_, e)) = self.fillers.iter().find(|(s, _)| *s == x) {
                self.next_boundary = e;
                continue;
            }
            // The appender's first completed piece holds the whole group header, so x < end
            // means the header is in the buffer.
            let mut h = [0u8; GROUP_HEADER];
            ring.read(x, &mut h);
            let Some(len) = header_len(&h) else {
                tracing::error!(lsn = x, "log buffer holds no group header where one starts");
                self.next_boundary = u64::MAX;
                break;
            };
            if first_group.is_none() {
                first_group = Some((x - bstart) as u16);
            }
            let ge = x + len as u64;
            if ge <= end {
                self.groups_written += 1;
            } else {
                self.pending_group_end = Some(ge);
            }
            self.next_boundary = ge;
        }
        let hdr = BlockHeader {
            number: b,
            epoch: self.geo.epoch_of(b),
            incarnation: self.incarnation,
            used: used as u16,
            first_group,
            restart: b == self.restart_block,
            durable_lag,
        };
        hdr.write(img);
        seal_block(img, self.geo.salt);
        if used < p {
            let pl = &img[BLOCK_HEADER..BLOCK_HEADER + used];
            self.tail = Some(Tail {
                block: b,
                payload: pl.to_vec(),
                first_group,
            });
        } else {
            self.tail = None;
        }
        rewritten
    }

    /// Writes the stream `[w, upto)` (and, with `upto == w`, the tail block alone, if any).
    pub fn emit(&mut self, ring: &Ring, upto: u64, st: &Counters) -> Result<(), Failure> {
        let p = self.geo.payload as u64;
        let bsz = self.geo.block;
        let mut tail_only = upto == self.w && self.tail.is_some();
        while self.w < upto || tail_only {
            tail_only = false;
            let first = self.w / p;
            let end = upto.min((first + self.max_blocks) * p);
            let last = if end > self.w { (end - 1) / p } else { first };
            if let Some(e) = self.pending_group_end {
                if e <= end {
                    self.groups_written += 1;
                    self.pending_group_end = None;
                }
            }
            let n = (last - first + 1) as usize;
            let mut rewrite = None;
            for (i, b) in (first..=last).enumerate() {
                if let Some(r) = self.build_block(ring, i, b, end) {
                    rewrite = Some(r);
                }
            }
            // Runs of blocks that are contiguous in one file.
            let mut runs: Vec<(u64, u64, usize, usize)> = Vec::new();
            for i in 0..n {
                let (f, off) = self.geo.location(first + i as u64);
                match runs.last_mut() {
                    Some(r) if r.0 == f && r.1 + r.3 as u64 == off => r.3 += bsz,
                    _ => runs.push((f, off, i * bsz, bsz)),
                }
            }
            let pad = self.padding_after(last);
            if pad > 0 {
                let s = n * bsz;
                self.wbuf[s..s + pad].fill(0);
                if let Some(r) = runs.last_mut() {
                    r.3 += pad;
                }
            }
            for &(f, off, s, len) in &runs {
                let file = if self.geo.preallocated {
                    self.files.existing(f).cloned()
                } else {
                    Some(self.files.get_or_create(f).map_err(|err| Failure {
                        path: self.files.path(f),
                        op: "create",
                        err,
                    })?)
                };
                let Some(file) = file else {
                    return Err(Failure {
                        path: self.files.path(f),
                        op: "write",
                        err: IoError::NotFound {
                            path: self.files.path(f),
                        },
                    });
                };
                let t0 = Instant::now();
                file.write_all_at(&self.wbuf[s..s + len], off)
                    .map_err(|err| Failure {
                        path: file.path().to_path_buf(),
                        op: "write",
                        err,
                    })?;
                if self.sync_method == SyncMethod::ODsync {
                    Counters::add_time(&st.sync_ns, t0.elapsed());
                }
                self.dirty.insert(f);
                Counters::add(&st.writes, 1);
                Counters::add(&st.bytes_written, len as u64);
            }
            Counters::add(&st.padding_bytes, pad as u64);
            Counters::add(&st.payload_bytes_written, end - self.w);
            if let Some(r) = rewrite {
                Counters::add(&st.tail_rewrites, 1);
                Counters::add(&st.tail_rewrite_bytes, r as u64);
            }
            self.w = end;
            while self.fillers.front().is_some_and(|&(_, e)| e <= self.w) {
                self.fillers.pop_front();
            }
        }
        Ok(())
    }

    /// Zero bytes to append after block `last` so the write ends on a `write_ahead` boundary,
    /// clamped to the file end and to free slots.
    fn padding_after(&self, last: u64) -> usize {
        if self.write_ahead == 0 {
            return 0;
        }
        let bsz = self.geo.block as u64;
        let (_, off) = self.geo.location(last);
        let end_off = off + bsz;
        let file_size = self.geo.blocks_per_file * bsz;
        let aligned = end_off.div_ceil(self.write_ahead) * self.write_ahead;
        let mut pad = aligned.min(file_size) - end_off;
        if !self.unclamped_padding {
            // Slots of blocks last+1 .. must stay below scan_start_block + lap.
            let free = (self.scan_start_block + self.geo.lap_blocks()).saturating_sub(last + 1);
            pad = pad.min(free * bsz);
        }
        pad.min((self.pad_blocks * bsz).saturating_sub(bsz)) as usize
    }

    /// Syncs every file written since the last sync. Returns the groups this made durable.
    pub fn sync(&mut self, st: &Counters) -> Result<u64, Failure> {
        let t0 = Instant::now();
        for &f in &self.dirty {
            if let Some(file) = self.files.existing(f) {
                if self.sync_method.needs_sync_call() {
                    file.sync(self.sync_method).map_err(|err| Failure {
                        path: file.path().to_path_buf(),
                        op: "sync",
                        err,
                    })?;
                    Counters::add(&st.syncs, 1);
                }
            }
        }
        if self.sync_method.needs_sync_call() {
            Counters::add_time(&st.sync_ns, t0.elapsed());
        }
        self.dirty.clear();
        self.durable = self.w;
        let n = self.groups_written - self.groups_synced;
        self.groups_synced = self.groups_written;
        Ok(n)
    }
}
