//! Appending: reserve log space for a group (waiting while the log is full), copy it into the
//! ring buffer (waiting for ring room), and mark it complete so the writer may write it.
//!
//! Invariants:
//! 1. Reservations are contiguous and never overlap: `reserved` only grows, by exactly each
//!    group's length.
//! 2. A reservation never passes `limit` (the log space the checkpoint still needs is never
//!    overwritten; `tests/log.rs` `full_log_waits_for_checkpoint`, `tests/crash.rs`
//!    `no_space_reserve_overwrites_needed_log`), unless the `no_space_reserve` test switch is on.
//! 3. `completed` is the end of a gap-free prefix: a group completing after a gap waits in
//!    `done.pending` until the gap closes.

use super::*;

pub(super) fn limit_for(geo: &Geometry, scan_start: u64, reserve_blocks: u64) -> u64 {
    if !geo.preallocated {
        return u64::MAX;
    }
    let p = geo.payload as u64;
    (scan_start / p + geo.lap_blocks() + 1 - reserve_blocks) * p
}

/// Ring space an appender waits for before copying a piece (the first piece must hold the
/// whole group header).
pub(super) const MIN_PIECE: u64 = 4096;

impl Shared {
    pub(super) fn capacity(&self) -> Option<u64> {
        if self.geo.preallocated {
            Some(
                (self.geo.lap_blocks().saturating_sub(self.reserve_blocks))
                    * self.geo.payload as u64,
            )
        } else {
            None
        }
    }

    pub(super) fn max_group(&self) -> Option<u64> {
        self.capacity()
            .map(|c| c.saturating_sub(self.geo.payload as u64))
    }

    /// Reserves `len` bytes of LSN space, waiting for a checkpoint while the log is full.
    pub(super) fn reserve(&self, len: u64) -> Result<u64> {
        let mut r = self.resv.lock();
        let mut waited = false;
        loop {
            self.check_usable()?;
            if r.end + len <= r.limit {
                let s = r.end;
                r.end += len;
                self.reserved.store(r.end, SeqCst);
                return Ok(s);
            }
            if !waited {
                waited = true;
                Counters::add(&self.stats.space_waits, 1);
            }
            self.space_cv.wait(&mut r);
        }
    }

    /// Copies a reserved group into the ring, piece by piece as room allows, publishing each
    /// piece's completion.
    pub(super) fn copy_in(&self, start: u64, bytes: &[u8]) -> Result<()> {
        let size = self.ring.size();
        let len = bytes.len() as u64;
        let mut off = 0u64;
        while off < len {
            let pos = start + off;
            let room = if self.no_ring_wait {
                u64::MAX
            } else {
                (self.written.load(SeqCst) + size).saturating_sub(pos)
            };
            let need = (len - off).min(MIN_PIECE).max(if off == 0 {
                (GROUP_HEADER as u64).min(len)
            } else {
                1
            });
            if room < need {
                self.wait_ring(pos + need)?;
                continue;
            }
            let n = room.min(len - off);
            self.ring
                .write(pos, &bytes[off as usize..(off + n) as usize]);
            self.complete(pos, pos + n);
            off += n;
        }
        Ok(())
    }

    pub(super) fn wait_ring(&self, need_end: u64) -> Result<()> {
        Counters::add(&self.stats.buffer_waits, 1);
        let size = self.ring.size();
        let mut g = self.sig.lock();
        g.space_wanted = true;
        self.work_cv.notify_all();
        g.ring_sleepers += 1;
        while self.written.load(SeqCst) + size < need_end && !self.poison.is_poisoned() {
            self.ring_cv.wait(&mut g);
        }
        g.ring_sleepers -= 1;
        drop(g);
        self.check_poison()
    }

    pub(super) fn complete(&self, s: u64, e: u64) {
        let c = {
            assert!(
                s < e,
                "invariant: a completed group is not empty ({s}..{e})"
            );
            let mut d = self.done.lock();
            if s != d.completed {
                let twice = d.pending.insert(s, e).is_some();
                assert!(!twice, "invariant: the group at {s} completes once");
                return;
            }
            d.completed = e;
            loop {
                let k = d.completed;
                match d.pending.remove(&k) {
                    Some(e2) => d.completed = e2,
                    None => break,
                }
            }
            d.completed
        };
        // Two appenders may get here out of order after releasing `done`: never move back.
        self.completed.fetch_max(c, SeqCst);
        let g = self.sig.lock();
        if g.completion_sleepers > 0 {
            self.completion_cv.notify_all();
        }
        let durable = self.durable.load(SeqCst);
        let written = self.written.load(SeqCst);
        if g.space_wanted
            || g.want_durable > durable
            || g.want_written > written
            || self.cfg.durability == Durability::Buffered
            || g.flusher_parked
        {
            self.work_cv.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{LogConfig, RedoLog};
    use std::sync::Arc;

    /// A new log on real files and the end of what it has completed.
    fn fresh_log() -> (tempfile::TempDir, RedoLog, u64) {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn keel_io::FileSystem> = Arc::new(keel_io::OsFs::default());
        let log = RedoLog::open(fs, dir.path(), LogConfig::default())
            .unwrap()
            .0;
        let end = log.sh().completed.load(super::SeqCst);
        (dir, log, end)
    }

    /// Invariant 3's bookkeeping: a group that completes twice (an appender bug) trips the
    /// assertion instead of moving `completed` past bytes nobody copied.
    #[test]
    #[should_panic(expected = "invariant: the group at")]
    fn a_group_completing_twice_trips() {
        let (_dir, log, end) = fresh_log();
        // A group after a gap waits in `pending`; the same group again is a bug.
        log.sh().complete(end + 100, end + 200);
        log.sh().complete(end + 100, end + 200);
    }

    #[test]
    #[should_panic(expected = "invariant: a completed group is not empty")]
    fn an_empty_group_trips() {
        let (_dir, log, end) = fresh_log();
        log.sh().complete(end, end);
    }
}
