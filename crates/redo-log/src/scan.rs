//! The recovery scan: reads blocks from a start LSN and yields record groups in LSN order until
//! the log ends.
//!
//! Rules (the on-disk stream, see `docs/format.md`):
//!
//! * The stream starts at a boundary (a group start, a filler or the end of the data) inside
//!   block `start / P`. That block must verify (synced data never tears); if it does not and the
//!   start is not a block boundary, recovery fails with [`LogError::Corrupt`].
//! * Each further block must carry the next block number, the epoch of its slot, a matching
//!   checksum, and the current incarnation — or, if it has the restart flag, a higher
//!   incarnation. The first block that does not ends the log (a torn or stale tail) — except
//!   a valid block of an incarnation newer than the header records: a new incarnation is
//!   recorded before any of its blocks is written, so that block proves the header lost a
//!   durable slot (a stale header put back), and the log is refused
//!   ([`ScanEnd::corrupt_middle`]; test `corrupt_middle.rs`
//!   `a_stale_header_is_refused_not_taken_for_a_torn_tail`).
//! * At a boundary: a zero byte is a filler (the rest of the block is padding); `0x47` starts a
//!   group; anything else ends the log (malformed).
//! * A block with fewer than `P` bytes used is the tail: the log ends there, unless the next
//!   block is a valid restart block (a later opening continued the log there).
//! * A group is returned only if all of it, commit marker included, was read. A group cut off by
//!   the end is discarded (bytes counted); one cut off by a restart block was abandoned by an
//!   earlier recovery and is skipped (bytes counted).
//!
//! Invariant: the scan never panics and never reads past what it verified, whatever the bytes
//! (fuzz target `log_scan`).

use crate::block::{check_block, BlockFault, BlockHeader, Geometry};
use crate::error::{LogError, Result};
use crate::record::{decode_group, header_len, Record, GROUP_HEADER, GROUP_OVERHEAD, GROUP_TAG};
use keel_page::Lsn;
use std::path::PathBuf;

/// Where the scan gets blocks from.
pub(crate) trait BlockSource {
    /// Reads block `n` (by its position) into `buf` (one block). `Ok(false)`: the block does not
    /// exist (file missing or too short).
    fn read_block(&mut self, n: u64, buf: &mut [u8]) -> Result<bool>;

    /// Names the place of block `n` (file and offset) for messages.
    fn describe(&self, n: u64) -> String;

    /// The file holding block `n` (for errors).
    fn path_of(&self, n: u64) -> PathBuf;

    /// Growing logs: the first block after `n` that a later file holds, when block `n` is
    /// missing because its file is missing or cut short while a later file exists (a gap in
    /// the middle of the log). `None` when nothing follows (or for preallocated files).
    fn next_present(&self, n: u64) -> Option<u64>;

    /// Reads block `n` as [`read_block`](Self::read_block) does, for a probe: a source that
    /// reads ahead in windows reads only a little around it.
    fn probe_block(&mut self, n: u64, buf: &mut [u8]) -> Result<bool> {
        self.read_block(n, buf)
    }
}

/// What the scan reports to its visitor.
pub(crate) enum Event {
    /// The stream is at a boundary: a scan could start here.
    Boundary(u64),
    /// A complete group.
    Group {
        /// LSN of its first byte.
        start: u64,
        /// LSN after it.
        end: u64,
        /// Its records.
        records: Vec<Record>,
    },
}

/// Scan parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScanParams {
    /// Block layout.
    pub geo: Geometry,
    /// LSN to start at (a boundary).
    pub start: u64,
    /// Highest incarnation that can exist.
    pub max_incarnation: u32,
    /// Verify checksums, numbers and epochs (false only in the test that shows why they matter).
    pub verify: bool,
    /// When the stream ends at a block that fails verification, look this many blocks past it
    /// for proof that the block had been durable (0: do not look). See the module docs.
    pub lookahead: u64,
}

/// How a scan ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScanEnd {
    /// LSN after the last complete group (or boundary) accepted.
    pub end: u64,
    /// Where a restart block goes: the first block that is not part of the accepted stream, or
    /// the last accepted block if it is empty (an earlier opening's restart block that received
    /// no data: reusing it keeps repeated recoveries from eating log space).
    pub next_block: u64,
    /// Bytes of incomplete or abandoned groups skipped.
    pub discarded_bytes: u64,
    /// Why bytes were discarded.
    pub discards: Vec<String>,
    /// Why the scan stopped.
    pub stop: String,
    /// The stream ended at a block that fails verification although a later valid block proves
    /// it had been durable (a damaged block in the middle, not a torn tail): its number and the
    /// proof.
    pub corrupt_middle: Option<(u64, String)>,
    /// The block whose verification failure ended the stream, if one did, and the incarnation
    /// of the stream there (0 at the scan's first block): the least incarnation whose blocks'
    /// claims [`look_past`] takes as proof.
    pub bad_block: Option<(u64, u32)>,
}

struct Blk {
    n: u64,
    hdr: BlockHeader,
    payload: Vec<u8>,
}

enum Adv {
    Next,
    Restart,
    End(String),
}

struct Stream<'a, S: BlockSource> {
    src: &'a mut S,
    geo: Geometry,
    verify: bool,
    max_inc: u32,
    cur: Blk,
    raw: Vec<u8>,
    /// A group start was seen in `cur` (for the first-group check).
    seen_group: bool,
    /// Preallocated logs: the first block number that would wrap onto the start block's slot.
    wrap_block: Option<u64>,
    /// The block whose verification failure ended the stream, if one did.
    bad: Option<(u64, u32)>,
}

fn load<S: BlockSource>(
    src: &mut S,
    geo: &Geometry,
    raw: &mut [u8],
    n: u64,
    verify: bool,
) -> Result<std::result::Result<Blk, BlockFault>> {
    if !src.read_block(n, raw)? {
        return Ok(Err(BlockFault::Missing));
    }
    Ok(
        check_block(raw, geo.salt, n, geo.epoch_of(n), verify).map(|hdr| Blk {
            n,
            hdr,
            payload: raw
                [crate::block::BLOCK_HEADER..crate::block::BLOCK_HEADER + hdr.used as usize]
                .to_vec(),
        }),
    )
}

impl<S: BlockSource> Stream<'_, S> {
    fn p(&self) -> u64 {
        self.geo.payload as u64
    }

    fn start_of_cur(&self) -> u64 {
        self.cur.n * self.p()
    }

    fn end_of_data(&self) -> u64 {
        self.start_of_cur() + self.cur.hdr.used as u64
    }

    /// Moves to the next block once `cur` is exhausted.
    fn advance(&mut self) -> Result<Adv> {
        let n = self.cur.n;
        if !self.seen_group && self.cur.hdr.first_group.is_some() {
            return Ok(Adv::End(format!(
                "block {n} ({}) says a group starts at offset {} but none does",
                self.src.describe(n),
                self.cur.hdr.first_group.unwrap_or_default()
            )));
        }
        let partial = (self.cur.hdr.used as usize) < self.geo.payload;
        if self.wrap_block.is_some_and(|w| n + 1 >= w) {
            return Ok(Adv::End(format!(
                "block {} would reuse the slot of the scan's first block",
                n + 1
            )));
        }
        let next = match load(self.src, &self.geo, &mut self.raw, n + 1, self.verify)? {
            Ok(b) => b,
            Err(fault) => {
                self.bad = Some((n + 1, self.cur.hdr.incarnation));
                let why = if partial {
                    format!(
                        "block {n} is the tail ({} of {} bytes used); block {} ({}): {fault}",
                        self.cur.hdr.used,
                        self.geo.payload,
                        n + 1,
                        self.src.describe(n + 1)
                    )
                } else {
                    format!("block {} ({}): {fault}", n + 1, self.src.describe(n + 1))
                };
                return Ok(Adv::End(why));
            }
        };
        let (ci, ni) = (self.cur.hdr.incarnation, next.hdr.incarnation);
        if ni > self.max_inc {
            // A valid block of an incarnation the header does not know: a new incarnation is
            // recorded in the header before anything of it is written, so the header lost a
            // durable slot (a stale header put back). Proof, not a torn tail: `look_past`
            // reports it from here. (Ending quietly here lost every commit of the newer
            // incarnations behind a stale header, and the open then reused their number.)
            self.bad = Some((n + 1, ci));
            return Ok(Adv::End(format!(
                "block {} ({}): incarnation {ni}, newer than the {} the log header records",
                n + 1,
                self.src.describe(n + 1),
                self.max_inc
            )));
        }
        if next.hdr.restart {
            if ni <= ci {
                return Ok(Adv::End(format!(
                    "block {} ({}): restart with incarnation {ni} after incarnation {ci} (at most {})",
                    n + 1,
                    self.src.describe(n + 1),
                    self.max_inc
                )));
            }
            if next.hdr.first_group.is_some_and(|o| o != 0) {
                return Ok(Adv::End(format!(
                    "block {}: restart block whose first group is not at offset 0",
                    n + 1
                )));
            }
            self.cur = next;
            self.seen_group = false;
            return Ok(Adv::Restart);
        }
        if partial {
            return Ok(Adv::End(format!(
                "block {n} is the tail ({} of {} bytes used); the next block is not a restart",
                self.cur.hdr.used, self.geo.payload
            )));
        }
        if ni != ci {
            return Ok(Adv::End(format!(
                "block {} ({}): incarnation {ni}, expected {ci}",
                n + 1,
                self.src.describe(n + 1)
            )));
        }
        self.cur = next;
        self.seen_group = false;
        Ok(Adv::Next)
    }

    /// Appends `n` stream bytes from `pos` to `out`, moving through blocks. `pos` is inside or
    /// at the end of `cur`'s data.
    fn read(&mut self, pos: &mut u64, mut n: usize, out: &mut Vec<u8>) -> Result<Adv> {
        while n > 0 {
            let off = (*pos - self.start_of_cur()) as usize;
            let avail = self.cur.payload.len().saturating_sub(off);
            if avail == 0 {
                match self.advance()? {
                    Adv::Next => {
                        *pos = self.start_of_cur();
                        continue;
                    }
                    other => return Ok(other),
                }
            }
            let k = avail.min(n);
            out.extend_from_slice(&self.cur.payload[off..off + k]);
            *pos += k as u64;
            n -= k;
        }
        Ok(Adv::Next)
    }
}

/// Runs the scan; `visit` returns false to stop early. When the stream ends at a block that
/// fails verification and `params.lookahead` is set, the blocks after it are examined for proof
/// that it had been durable ([`ScanEnd::corrupt_middle`]).
pub(crate) fn scan<S: BlockSource>(
    src: &mut S,
    params: &ScanParams,
    visit: &mut dyn FnMut(Event) -> bool,
) -> Result<ScanEnd> {
    let mut end = scan_stream(src, params, visit)?;
    if end.corrupt_middle.is_none() {
        if let Some((bad, inc)) = end.bad_block {
            end.corrupt_middle = look_past(src, params, bad, inc)?;
        }
    }
    Ok(end)
}

/// Past the look-ahead, [`look_past`] probes one block in this many (at least; and the first
/// block of each file).
const PROBE_STRIDE: u64 = 64;

/// The most probes [`look_past`] makes in one lap (or one growing file): the stride grows with
/// the log, so that an open of a large log that has not wrapped yet reads about 2 MiB for
/// them, not the whole log.
const PROBES_PER_LAP: u64 = 512;

/// Looks past `bad` (never wrapping onto the scan's first block, stopping where the files end)
/// for a valid block that proves `bad` had been durable: one whose durable lag reaches past
/// `bad` (it was written after a sync covered `bad`), one of an incarnation newer than the
/// header knows (the header lost a durable slot), or a block of this log out of its place (a
/// log file swapped, moved or copied over another).
///
/// Up to `params.lookahead` blocks after `bad` are read one by one, zeroed ones included;
/// past that, one block in [`PROBE_STRIDE`] (or more, [`PROBES_PER_LAP`]) and the first block
/// of every file are probed, to the end of the lap (preallocated) or of the last file
/// (growing). The search stops at a block of an older lap (its checksum holds, its number is
/// this position's in an earlier lap): the writer never got there in this lap, and writes are
/// issued in block order, so nothing after it was synced later either. Before session 45 a run
/// of 64 zeroed blocks (a zeroed log file, or a zeroed range followed by a short durable tail)
/// or damage longer than the look-ahead (a 64 MiB file replaced) ended the search, and the
/// open took the damage for a torn tail: every acknowledged commit after it lost, and a
/// growing log's later files deleted (testers). Damage past the look-ahead followed by fewer
/// durable blocks than the stride, before the next file, still passes for a torn tail.
fn look_past<S: BlockSource>(
    src: &mut S,
    params: &ScanParams,
    bad: u64,
    inc: u32,
) -> Result<Option<(u64, String)>> {
    if params.lookahead == 0 || !params.verify {
        return Ok(None);
    }
    let geo = params.geo;
    let p = geo.payload as u64;
    let b0 = params.start / p;
    let lap = geo.lap_blocks();
    let dense_last = bad.saturating_add(params.lookahead);
    let last = if geo.preallocated {
        b0.saturating_add(lap).saturating_sub(1)
    } else {
        u64::MAX
    };
    let stride = PROBE_STRIDE.max(lap / PROBES_PER_LAP);
    let mut raw = vec![0u8; geo.block];
    let mut m = bad;
    let mut sparse = false;
    while m <= last {
        // Only the header counts here: the block is read and checked, its payload not copied.
        let present = if sparse {
            src.probe_block(m, &mut raw)?
        } else {
            src.read_block(m, &mut raw)?
        };
        let checked = if present {
            check_block(&raw, geo.salt, m, geo.epoch_of(m), true)
        } else {
            Err(BlockFault::Missing)
        };
        match checked {
            Ok(h) => {
                if let Some(proof) = proves_durable(src, params, (bad, inc), m, &h) {
                    return Ok(Some((bad, proof)));
                }
            }
            // A growing log's file missing or cut short with a later file present: the gap
            // is no torn tail (files are filled and created in order), so the later files are
            // searched for proof too. Without this, a deleted middle file ended the log there
            // silently, and the open then deleted the files after it with their acknowledged
            // commits.
            Err(BlockFault::Missing) => match src.next_present(m) {
                Some(j) if j > m => {
                    m = j;
                    continue;
                }
                _ => break,
            },
            // A valid block of this log numbered for another place.
            Err(BlockFault::Number { found, .. }) => {
                match check_block(&raw, geo.salt, found, geo.epoch_of(found), true) {
                    Ok(h) => {
                        if let Some(proof) = proves_durable(src, params, (bad, inc), m, &h) {
                            return Ok(Some((bad, proof)));
                        }
                        let older_lap =
                            geo.preallocated && found < m && (m - found).is_multiple_of(lap);
                        if !older_lap {
                            return Ok(Some((
                                bad,
                                format!(
                                    "block {m} ({}) holds block {found} of this log (a log file was swapped, moved or copied over another)",
                                    src.describe(m)
                                ),
                            )));
                        }
                        if m > bad {
                            break;
                        }
                    }
                    Err(_) if m > bad => break,
                    Err(_) => {}
                }
            }
            // Its own number with another epoch: stale, as a block of an older lap.
            Err(BlockFault::Epoch { .. }) if m > bad => break,
            // Damaged, torn or never written (zeros): read on.
            Err(_) => {}
        }
        sparse |= m >= dense_last;
        m = next_probe(&geo, m, sparse, stride);
    }
    Ok(None)
}

/// The block after `m` that [`look_past`] reads: the next one, or (`sparse`) the next multiple
/// of `stride` or the next file's first block, whichever comes first.
fn next_probe(geo: &Geometry, m: u64, sparse: bool, stride: u64) -> u64 {
    if !sparse {
        return m.saturating_add(1);
    }
    let next = (m / stride).saturating_add(1).saturating_mul(stride);
    let file = (m / geo.blocks_per_file)
        .saturating_add(1)
        .saturating_mul(geo.blocks_per_file);
    next.min(file)
}

/// The proof, if valid block `m` (header `h`) gives one that `bad` had been durable: a durable
/// lag reaching past it, or an incarnation newer than the header records. A lag counts only
/// from a block of the stream's incarnation at `bad` (`inc`) or a later one: a block an older
/// incarnation left past the point where a later one restarted the log (after an open that
/// accepted a loss) claims durability of what that later incarnation has since written over.
fn proves_durable<S: BlockSource>(
    src: &S,
    params: &ScanParams,
    (bad, inc): (u64, u32),
    m: u64,
    h: &BlockHeader,
) -> Option<String> {
    if h.incarnation > params.max_incarnation {
        return Some(format!(
            "block {m} ({}) is valid and was written by incarnation {}, newer than the {} the log header records: a durable header slot was lost",
            src.describe(m),
            h.incarnation,
            params.max_incarnation
        ));
    }
    if (m > bad || h.number != m) && h.incarnation >= inc {
        if let Some(below) = h.durable_below() {
            if below > bad {
                return Some(format!(
                    "block {m} ({}) is valid and records that every block below {below} was durable when it was written",
                    src.describe(m)
                ));
            }
        }
    }
    None
}

/// The stream scan (records in [`ScanEnd::bad_block`] the block whose verification failure ended
/// it, if one did).
fn scan_stream<S: BlockSource>(
    src: &mut S,
    params: &ScanParams,
    visit: &mut dyn FnMut(Event) -> bool,
) -> Result<ScanEnd> {
    let geo = params.geo;
    let p = geo.payload as u64;
    let b0 = params.start / p;
    let mut raw = vec![0u8; geo.block];
    let first = match load(src, &geo, &mut raw, b0, params.verify)? {
        Ok(b) if b.hdr.incarnation <= params.max_incarnation => Ok(b),
        Ok(b) => Err(format!(
            "incarnation {} is newer than the header's {}",
            b.hdr.incarnation, params.max_incarnation
        )),
        Err(f) => Err(f.to_string()),
    };
    let first = match first {
        Ok(b) => b,
        Err(why) => {
            if params.start.is_multiple_of(p) {
                // `scan` looks past it for proof.
                return Ok(ScanEnd {
                    end: params.start,
                    next_block: b0,
                    discarded_bytes: 0,
                    discards: Vec::new(),
                    stop: format!("block {b0} ({}): {why}", src.describe(b0)),
                    corrupt_middle: None,
                    bad_block: Some((b0, 0)),
                });
            }
            return Err(LogError::Corrupt {
                path: src.path_of(b0),
                lsn: Lsn(params.start),
                reason: format!(
                    "the checkpoint's block {b0} ({}) fails verification: {why}",
                    src.describe(b0)
                ),
            });
        }
    };
    if params.start - b0 * p > first.hdr.used as u64 {
        return Err(LogError::Corrupt {
            path: src.path_of(b0),
            lsn: Lsn(params.start),
            reason: format!(
                "the checkpoint's block {b0} ({}) holds only {} bytes",
                src.describe(b0),
                first.hdr.used
            ),
        });
    }
    let mut st = Stream {
        src,
        geo,
        verify: params.verify,
        max_inc: params.max_incarnation,
        cur: first,
        raw,
        // The first block's groups before `start` are not seen: skip its check.
        seen_group: true,
        wrap_block: geo.preallocated.then(|| b0 + geo.lap_blocks()),
        bad: None,
    };
    let mut pos = params.start;
    let mut discarded = 0u64;
    let mut discards = Vec::new();
    let finish = |st: &Stream<'_, S>, end: u64, discarded, discards, stop| ScanEnd {
        end,
        next_block: if st.cur.hdr.used == 0 {
            st.cur.n
        } else {
            st.cur.n + 1
        },
        discarded_bytes: discarded,
        discards,
        stop,
        corrupt_middle: None,
        bad_block: st.bad,
    };
    loop {
        if !visit(Event::Boundary(pos)) {
            return Ok(finish(&st, pos, discarded, discards, "stopped".into()));
        }
        let off = (pos - st.start_of_cur()) as usize;
        if off >= st.cur.payload.len() {
            match st.advance()? {
                Adv::Next | Adv::Restart => {
                    pos = st.start_of_cur();
                    continue;
                }
                Adv::End(why) => {
                    // A valid block that was peeked at is not accepted: restart right after cur.
                    return Ok(finish(&st, pos, discarded, discards, why));
                }
            }
        }
        let tag = st.cur.payload[off];
        if tag == 0 {
            // Filler: the rest of this block's data is padding.
            pos = st.end_of_data();
            continue;
        }
        if tag != GROUP_TAG {
            let lost = st.end_of_data() - pos;
            discarded += lost;
            discards.push(format!(
                "{lost} bytes at LSN {pos} in block {} ({}): tag {tag:#04x} is neither a group nor a filler",
                st.cur.n,
                st.src.describe(st.cur.n)
            ));
            return Ok(finish(
                &st,
                pos,
                discarded,
                discards,
                "malformed data".into(),
            ));
        }
        if !st.seen_group {
            st.seen_group = true;
            if st.cur.hdr.first_group != Some(off as u16) {
                let lost = st.end_of_data() - pos;
                discarded += lost;
                discards.push(format!(
                    "{lost} bytes at LSN {pos}: block {} ({}) says its first group starts at {:?}, but one starts at {off}",
                    st.cur.n,
                    st.src.describe(st.cur.n),
                    st.cur.hdr.first_group
                ));
                return Ok(finish(
                    &st,
                    pos,
                    discarded,
                    discards,
                    "inconsistent block".into(),
                ));
            }
        }
        let start = pos;
        let mut bytes = Vec::with_capacity(64);
        let mut cursor = pos;
        let adv = st.read(&mut cursor, GROUP_HEADER, &mut bytes)?;
        let adv = match adv {
            Adv::Next => {
                let len = header_len(&bytes).unwrap_or(0) as usize;
                if len < GROUP_OVERHEAD {
                    let lost = bytes.len() as u64;
                    discarded += lost;
                    discards.push(format!(
                        "group at LSN {start} declares {len} bytes (at least {GROUP_OVERHEAD} needed)"
                    ));
                    return Ok(finish(
                        &st,
                        start,
                        discarded,
                        discards,
                        "malformed group".into(),
                    ));
                }
                st.read(&mut cursor, len - GROUP_HEADER, &mut bytes)?
            }
            other => other,
        };
        match adv {
            Adv::Next => {}
            Adv::Restart => {
                let lost = bytes.len() as u64;
                discarded += lost;
                discards.push(format!(
                    "group at LSN {start} abandoned by a restart in block {} after {lost} bytes",
                    st.cur.n
                ));
                pos = st.start_of_cur();
                continue;
            }
            Adv::End(why) => {
                let lost = bytes.len() as u64;
                discarded += lost;
                discards.push(format!(
                    "incomplete group at LSN {start} ({lost} bytes present): {why}"
                ));
                return Ok(finish(&st, start, discarded, discards, why));
            }
        }
        match decode_group(&bytes) {
            Ok(records) => {
                pos = cursor;
                if !visit(Event::Group {
                    start,
                    end: pos,
                    records,
                }) {
                    return Ok(finish(&st, pos, discarded, discards, "stopped".into()));
                }
            }
            Err(why) => {
                discarded += bytes.len() as u64;
                discards.push(format!("malformed group at LSN {start}: {why}"));
                return Ok(finish(
                    &st,
                    start,
                    discarded,
                    discards,
                    "malformed group".into(),
                ));
            }
        }
    }
}

/// Blocks held in memory: one byte image per log file (for fuzzing and tests).
pub(crate) struct ImageSource<'a> {
    pub geo: Geometry,
    pub files: &'a [&'a [u8]],
}

impl BlockSource for ImageSource<'_> {
    fn read_block(&mut self, n: u64, buf: &mut [u8]) -> Result<bool> {
        let (f, off) = self.geo.location(n);
        let Some(file) = usize::try_from(f).ok().and_then(|f| self.files.get(f)) else {
            return Ok(false);
        };
        let Some(end) = off.checked_add(buf.len() as u64) else {
            return Ok(false);
        };
        if end > file.len() as u64 {
            return Ok(false);
        }
        buf.copy_from_slice(&file[off as usize..end as usize]);
        Ok(true)
    }

    fn describe(&self, n: u64) -> String {
        let (f, off) = self.geo.location(n);
        format!("image {f} offset {off}")
    }

    fn path_of(&self, n: u64) -> PathBuf {
        PathBuf::from(format!("image {}", self.geo.location(n).0))
    }

    fn next_present(&self, n: u64) -> Option<u64> {
        if self.geo.preallocated {
            return None;
        }
        let (f, _) = self.geo.location(n);
        let f = usize::try_from(f).ok()?;
        let next = (f + 1..self.files.len()).find(|&j| self.files[j].len() >= self.geo.block)?;
        (next as u64).checked_mul(self.geo.blocks_per_file)
    }
}
