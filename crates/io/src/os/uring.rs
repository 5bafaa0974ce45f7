//! The io_uring backend: a small pool of rings and the loop that drives a batch through one.
//!
//! # Ring ownership
//!
//! A ring is used by one thread at a time. [`RingPool`] (one per [`crate::OsFs`], shared by its
//! clones and files) keeps idle rings; a batch takes one out (creating a new ring if none is idle),
//! drives the whole batch to completion, and puts it back. So there are never more rings than
//! threads doing I/O at the same moment, no lock is held while the kernel works, a ring is never
//! shared by two threads (the submission and completion queues are single-producer/consumer), and
//! the rings die with the file system. At most [`MAX_IDLE`] idle rings are kept.
//!
//! # Invariants
//!
//! 1. **Buffers outlive their SQEs.** [`run`] does not return while any request it handed to the
//!    kernel is in flight, on success and on every error path: after the first failure it stops
//!    submitting and waits for every outstanding completion. If `io_uring_enter` itself fails,
//!    the ring is poisoned (never reused: its submission queue may hold entries the kernel did not
//!    take, which must never be submitted later) and only the requests the kernel consumed are
//!    waited for. Test: `an_error_mid_batch_still_reaps_every_completion`.
//! 2. **Short transfers complete.** A read or write that moves fewer bytes than asked is
//!    resubmitted for the rest; a read that hits end-of-file is a short read. An atomic write is
//!    never split: a short atomic write is a failure. Test: `long_requests_are_split_and_finished`.
//! 3. **The completion queue never overflows**: at most `sq_entries` requests are in flight and
//!    the completion queue has twice that many slots.

use super::{Failure, Kind, Op, RWF_ATOMIC};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::sync::OnceLock;

/// Submission-queue entries per ring: a batch of 64 pages goes out in one `io_uring_enter`.
pub(crate) const RING_ENTRIES: u32 = 128;
/// Idle rings kept per pool.
pub(crate) const MAX_IDLE: usize = 16;
/// The largest length put into one SQE (the SQE length is 32 bits; the kernel caps a single
/// read or write at ~2 GiB anyway).
const MAX_SQE_LEN: usize = 1 << 30;
/// `IORING_ENTER_GETEVENTS` (`include/uapi/linux/io_uring.h`): wait for completions.
const IORING_ENTER_GETEVENTS: u32 = 1;

/// Whether io_uring works here: a ring can be set up and supports `IORING_OP_READ`/`WRITE`.
/// Probed once per process. `Err` says why not.
pub fn io_uring_status() -> Result<(), String> {
    static STATUS: OnceLock<Result<(), String>> = OnceLock::new();
    STATUS
        .get_or_init(|| {
            let ring = new_ring(8).map_err(|e| format!("io_uring_setup failed: {e}"))?;
            let mut probe = io_uring::Probe::new();
            ring.submitter()
                .register_probe(&mut probe)
                .map_err(|e| format!("IORING_REGISTER_PROBE failed: {e}"))?;
            for (code, name) in [
                (opcode::Read::CODE, "IORING_OP_READ"),
                (opcode::Write::CODE, "IORING_OP_WRITE"),
            ] {
                if !probe.is_supported(code) {
                    return Err(format!("the kernel's io_uring lacks {name}"));
                }
            }
            Ok(())
        })
        .clone()
}

fn new_ring(entries: u32) -> io::Result<IoUring> {
    IoUring::builder().setup_cqsize(entries * 2).build(entries)
}

/// Idle rings of one file system.
pub(crate) struct RingPool {
    idle: Mutex<Vec<IoUring>>,
}

impl fmt::Debug for RingPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RingPool({} idle)", self.idle.lock().len())
    }
}

impl RingPool {
    pub(crate) fn new() -> RingPool {
        RingPool {
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Takes an idle ring or sets up a new one.
    pub(crate) fn take(&self) -> io::Result<RingGuard<'_>> {
        let ring = match self.idle.lock().pop() {
            Some(r) => r,
            None => new_ring(RING_ENTRIES)?,
        };
        Ok(RingGuard {
            pool: self,
            ring: Some(ring),
            poisoned: false,
        })
    }

    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.idle.lock().len()
    }
}

/// A ring taken from a pool; goes back on drop unless poisoned.
pub(crate) struct RingGuard<'a> {
    pool: &'a RingPool,
    ring: Option<IoUring>,
    poisoned: bool,
}

impl Drop for RingGuard<'_> {
    fn drop(&mut self) {
        if let Some(ring) = self.ring.take() {
            if !self.poisoned {
                let mut idle = self.pool.idle.lock();
                if idle.len() < MAX_IDLE {
                    idle.push(ring);
                }
            }
        }
    }
}

impl RingGuard<'_> {
    /// Runs `ops` on `fd` through this ring; see [`run`].
    pub(crate) fn run(
        &mut self,
        fd: RawFd,
        ops: &[Op<'_>],
        on_done: impl FnMut(usize),
    ) -> Result<(), (usize, Failure)> {
        let Some(ring) = self.ring.as_mut() else {
            return Err((0, Failure::Errno(libc::EBADF)));
        };
        let out = run(ring, fd, ops, on_done);
        if let Err((_, Failure::Enter(_))) = &out {
            self.poisoned = true;
        }
        out
    }
}

fn entry(fd: RawFd, op: &Op<'_>, done: usize) -> squeue::Entry {
    let len = (op.len - done).min(MAX_SQE_LEN) as u32;
    let off = op.offset + done as u64;
    // `wrapping_add` keeps the pointer arithmetic safe; `done <= op.len` so it stays in bounds.
    let ptr = op.ptr.wrapping_add(done);
    match op.kind {
        Kind::Read => opcode::Read::new(types::Fd(fd), ptr, len)
            .offset(off)
            .build(),
        Kind::Write => opcode::Write::new(types::Fd(fd), ptr, len)
            .offset(off)
            .build(),
        Kind::AtomicWrite => opcode::Write::new(types::Fd(fd), ptr, len)
            .offset(off)
            .rw_flags(RWF_ATOMIC)
            .build(),
    }
}

/// Drives every op of `ops` to completion on `ring`, submitting as many as fit at once (a batch
/// of up to [`RING_ENTRIES`] ops goes out in one `io_uring_enter`). Calls `on_done(i)` for each
/// op that completed fully. After the first failure no new request is submitted, but every
/// request in flight is waited for before returning (module invariant 1). Returns the failure of
/// the lowest-numbered op that failed.
pub(crate) fn run(
    ring: &mut IoUring,
    fd: RawFd,
    ops: &[Op<'_>],
    mut on_done: impl FnMut(usize),
) -> Result<(), (usize, Failure)> {
    let cap = ring.params().sq_entries() as usize;
    let mut pending: VecDeque<usize> = (0..ops.len()).collect();
    let mut done = vec![0usize; ops.len()];
    let mut in_flight = 0usize;
    let mut failed: Option<(usize, Failure)> = None;
    let fail = |failed: &mut Option<(usize, Failure)>, i: usize, f: Failure| {
        if failed.as_ref().is_none_or(|(j, _)| i < *j) {
            *failed = Some((i, f));
        }
    };
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(cap);
    loop {
        if failed.is_none() {
            let mut sq = ring.submission();
            while in_flight < cap {
                let Some(i) = pending.pop_front() else { break };
                let sqe = entry(fd, &ops[i], done[i]).user_data(i as u64);
                // SAFETY: the SQE points into `ops[i]`'s buffer, which the `Op<'_>` borrows for
                // longer than this call, and this function does not return before the kernel has
                // completed every SQE it was handed (invariant 1: the loop below only exits with
                // `in_flight == 0`, and the `Enter` error path waits for consumed entries). The
                // fd stays open for the same reason (the caller's `File` is borrowed).
                if unsafe { sq.push(&sqe) }.is_err() {
                    pending.push_front(i);
                    break;
                }
                in_flight += 1;
            }
        }
        if in_flight == 0 {
            break;
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if is_transient(&e) => {
                if e.raw_os_error() == Some(libc::EAGAIN) {
                    std::thread::yield_now();
                }
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                wait_consumed(ring, in_flight, &mut on_done, &mut done, ops);
                return Err((failed.map(|(i, _)| i).unwrap_or(0), Failure::Enter(errno)));
            }
        }
        cqes.clear();
        cqes.extend(
            ring.completion()
                .map(|c: cqueue::Entry| (c.user_data(), c.result())),
        );
        for &(user_data, res) in &cqes {
            in_flight -= 1;
            let i = user_data as usize;
            let (Some(op), Some(d)) = (ops.get(i), done.get_mut(i)) else {
                continue;
            };
            if res < 0 {
                fail(&mut failed, i, Failure::Errno(-res));
                continue;
            }
            let n = res as usize;
            if n == 0 && *d < op.len {
                let f = match op.kind {
                    Kind::Read => Failure::ShortRead { got: *d },
                    Kind::Write | Kind::AtomicWrite => Failure::WriteZero { done: *d },
                };
                fail(&mut failed, i, f);
                continue;
            }
            *d += n;
            if *d >= op.len {
                on_done(i);
            } else if op.kind == Kind::AtomicWrite {
                fail(&mut failed, i, Failure::ShortAtomic { got: *d });
            } else {
                pending.push_back(i);
            }
        }
    }
    match failed {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}

/// After `io_uring_enter` failed: waits for every request the kernel consumed (those still in the
/// submission queue were never taken and never will be: the ring is poisoned). Completed requests
/// are still reported to `on_done` so counters stay true. If the kernel refuses even to wait, the
/// caller's buffers could be written after we return: the only sound exit is to abort.
fn wait_consumed(
    ring: &mut IoUring,
    in_flight: usize,
    on_done: &mut impl FnMut(usize),
    done: &mut [usize],
    ops: &[Op<'_>],
) {
    let unconsumed = ring.submission().len();
    let mut outstanding = in_flight.saturating_sub(unconsumed);
    let mut refusals = 0u32;
    while outstanding > 0 {
        // SAFETY: `to_submit = 0` submits nothing (the stale entries stay unsubmitted);
        // GETEVENTS with `min_complete = 1` only waits; no argument pointer is passed.
        let r = unsafe {
            ring.submitter()
                .enter::<libc::sigset_t>(0, 1, IORING_ENTER_GETEVENTS, None)
        };
        if let Err(e) = r {
            if !is_transient(&e) {
                refusals += 1;
                if refusals > 1000 {
                    eprintln!(
                        "keel-io: io_uring_enter keeps failing ({e}) with {outstanding} requests \
                         in flight; aborting rather than freeing buffers the kernel may still use"
                    );
                    std::process::abort();
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        for c in ring.completion() {
            outstanding = outstanding.saturating_sub(1);
            let i = c.user_data() as usize;
            if let (Some(op), Some(d)) = (ops.get(i), done.get_mut(i)) {
                if c.result() > 0 {
                    *d += c.result() as usize;
                    if *d >= op.len {
                        on_done(i);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AlignedBuf;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};

    fn skip() -> bool {
        if let Err(why) = io_uring_status() {
            println!("SKIPPED: io_uring unavailable: {why}");
            return true;
        }
        false
    }

    #[test]
    fn an_error_mid_batch_still_reaps_every_completion() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(dir.path().join("d"))
            .unwrap();
        let bufs: Vec<AlignedBuf> = (0..100u8)
            .map(|i| {
                let mut b = AlignedBuf::page(4096);
                b.fill(i + 1);
                b
            })
            .collect();
        // Op 40 is misaligned on purpose (offset 100 on an O_DIRECT file): the kernel fails it
        // with EINVAL while the others are in flight or queued.
        let ops: Vec<Op<'_>> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let off = if i == 40 { 100 } else { i as u64 * 4096 };
                Op::write(b, off, Kind::Write)
            })
            .collect();
        let pool = RingPool::new();
        let mut completed = Vec::new();
        let r = pool
            .take()
            .unwrap()
            .run(f.as_raw_fd(), &ops, |i| completed.push(i));
        match r {
            Err((40, Failure::Errno(libc::EINVAL))) => {}
            other => panic!("expected op 40 to fail with EINVAL, got {other:?}"),
        }
        // Every op that was submitted before the failure was seen has completed and been
        // reported: none is still in flight when run() returned.
        for &i in &completed {
            let mut back = AlignedBuf::page(4096);
            f.read_exact_at(&mut back, i as u64 * 4096).unwrap();
            assert!(back.iter().all(|&x| x == i as u8 + 1), "op {i}");
        }
        assert!(!completed.contains(&40));
        // All 100 fit in the ring, so all went out in one submission before the failure was
        // seen: each of the other 99 must have been reaped before run() returned.
        assert_eq!(
            completed.len(),
            99,
            "completions left in flight: {completed:?}"
        );
        // The ring went back to the pool with nothing pending; a new batch on it works.
        assert_eq!(pool.idle(), 1);
        let mut ring = pool.take().unwrap();
        let ok: Vec<Op<'_>> = bufs[..3]
            .iter()
            .enumerate()
            .map(|(i, b)| Op::write(b, i as u64 * 4096, Kind::Write))
            .collect();
        let mut n = 0;
        ring.run(f.as_raw_fd(), &ok, |_| n += 1).unwrap();
        assert_eq!(n, 3);
    }

    #[test]
    fn long_requests_are_split_and_finished() {
        if skip() {
            return;
        }
        // More ops than ring entries, and a read past end of file.
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("b"))
            .unwrap();
        let data: Vec<Vec<u8>> = (0..300u32)
            .map(|i| (0..1000u32).map(|j| (i * 7 + j) as u8).collect())
            .collect();
        let ops: Vec<Op<'_>> = data
            .iter()
            .enumerate()
            .map(|(i, d)| Op::write(d, i as u64 * 1000, Kind::Write))
            .collect();
        let pool = RingPool::new();
        let mut n = 0;
        pool.take()
            .unwrap()
            .run(f.as_raw_fd(), &ops, |_| n += 1)
            .unwrap();
        assert_eq!(n, 300);
        let mut whole = vec![0u8; 300_000];
        f.read_exact_at(&mut whole, 0).unwrap();
        assert_eq!(whole, data.concat());
        let mut tail = vec![0u8; 3000];
        let read = [Op::read(&mut tail, 298_500)];
        let r = pool.take().unwrap().run(f.as_raw_fd(), &read, |_| {});
        match r {
            Err((0, Failure::ShortRead { got: 1500 })) => {}
            other => panic!("expected a short read of 1500 bytes, got {other:?}"),
        }
    }
}
