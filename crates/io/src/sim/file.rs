//! How does a [`SimFile`] carry out a request? Each call checks that the machine has not crashed,
//! checks the request against the pre-I/O contract OsFs uses too (the crate's `contract` module),
//! counts towards an armed crash point, lets armed faults fire (ENOSPC on writes, EIO on syncs,
//! bit flips on reads), then applies the request to the file's state (see `state.rs`) and counts
//! it.
//!
//! Invariants: a request refused by the contract, a fault or a crash has no effect and is not
//! counted (module invariants 4 and 5); a batch is checked whole before any of it is applied; a
//! failed sync decides the fate of every pending operation at once and is not undone by a later
//! sync (module invariant 6); the space limit counts a file's growth while it has a live name.

use super::crash::CrashPolicy;
use super::machine::{eio, Inode, Machine};
use super::state::FileState;
use crate::contract::{self, Contract};
use crate::{
    AtomicWriteLimits, DirectIoAlignment, File, FileClass, IoError, OpenOptions, ReadOp, Result,
    WriteOp,
};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A file opened on a [`SimFs`](super::SimFs).
pub struct SimFile {
    pub(super) m: Arc<Machine>,
    pub(super) inode: Arc<Inode>,
    pub(super) path: PathBuf,
    pub(super) options: OpenOptions,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish()
    }
}

impl SimFile {
    /// The pre-I/O contract of this file (see the crate's `contract` module): the configured
    /// alignment for memory and offsets alike (none under the `skip_alignment` sabotage) and
    /// atomic limits.
    fn contract(&self) -> Contract {
        let a = if self.m.sabotage.skip_alignment {
            1
        } else {
            self.m.config.direct_alignment
        };
        Contract {
            direct: self.options.direct,
            align: DirectIoAlignment {
                memory: a,
                offset: a,
            },
            atomic: self.m.config.atomic,
        }
    }

    /// One write request, already validated.
    fn write_one(&self, buf: &[u8], offset: u64, atomic: bool) -> Result<()> {
        let end = contract::end_of(&self.path, offset, buf.len() as u64)?;
        self.m.tick(&self.path)?;
        let mut st = self.inode.state.lock();
        self.m.alive(&self.path)?;
        let growth = end.saturating_sub(st.current.len());
        if self.m.faults_armed.load(Ordering::Relaxed) {
            let total_after = self.m.total_len.load(Ordering::Relaxed) + growth;
            let mut f = self.m.faults.lock();
            let fail = f.write_fails(&self.path, growth, total_after, true);
            let eio_now = !fail && f.write_eio();
            let buffered = !self.options.direct && !self.options.write_through && !atomic;
            let lost = !fail && !eio_now && buffered && f.writeback_lost(&self.path);
            self.m.faults_armed.store(f.armed(), Ordering::Relaxed);
            if lost {
                // Accepted, then lost in write-back: nothing changes, the next sync fails.
                drop(f);
                drop(st);
                self.m.counters.write(self.options.class, buf.len());
                return Ok(());
            }
            if fail {
                return Err(IoError::NoSpace {
                    path: self.path.clone(),
                    offset,
                    len: buf.len(),
                });
            }
            if eio_now {
                return Err(IoError::Os {
                    op: "pwrite",
                    path: self.path.clone(),
                    source: eio(),
                });
            }
        }
        let cached = !self.options.direct;
        if self.options.write_through {
            st.write_through(offset, buf, cached);
        } else {
            st.write(offset, buf, atomic, cached);
        }
        if st.linked && growth > 0 {
            self.m.total_len.fetch_add(growth, Ordering::Relaxed);
        }
        drop(st);
        if atomic {
            self.m.counters.atomic_write(self.options.class, buf.len());
        } else {
            self.m.counters.write(self.options.class, buf.len());
        }
        Ok(())
    }

    fn sync_impl(&self) -> Result<()> {
        self.m.tick(&self.path)?;
        let mut st = self.inode.state.lock();
        self.m.alive(&self.path)?;
        if self.m.faults_armed.load(Ordering::Relaxed) {
            let mut f = self.m.faults.lock();
            let fail = f.sync_fails(&self.path, true);
            self.m.faults_armed.store(f.armed(), Ordering::Relaxed);
            if fail {
                if !self.m.sabotage.failed_sync_keeps_pending {
                    let policy = CrashPolicy {
                        fates: self.m.config.failed_sync,
                        reorder: false,
                    };
                    let dropped = st.fail_sync(&policy, &mut f.rng, self.m.sector());
                    f.stats.writes_dropped_by_failed_sync += dropped;
                }
                return Err(IoError::SyncFailed {
                    path: self.path.clone(),
                    source: eio(),
                });
            }
        }
        st.sync();
        drop(st);
        self.m.counters.sync(self.options.class);
        Ok(())
    }

    /// Changes the length (the caller holds the file's lock and checked `alive`).
    fn resize(&self, st: &mut FileState, len: u64) {
        let old = st.current.len();
        st.set_len(len);
        if st.linked {
            if len > old {
                self.m.total_len.fetch_add(len - old, Ordering::Relaxed);
            } else {
                let d = old - len;
                let _ = self
                    .m
                    .total_len
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                        Some(t.saturating_sub(d))
                    });
            }
        }
    }
}

impl File for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn class(&self) -> FileClass {
        self.options.class
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_read(&self.path, buf, offset)?;
        {
            let st = self.inode.state.lock();
            self.m.alive(&self.path)?;
            let len = st.current.len();
            let end = contract::end_of(&self.path, offset, buf.len() as u64)?;
            if end > len {
                let got = len.saturating_sub(offset).min(buf.len() as u64) as usize;
                st.current.read(offset, &mut buf[..got]);
                return Err(IoError::ShortRead {
                    path: self.path.clone(),
                    offset,
                    wanted: buf.len(),
                    got,
                });
            }
            st.current.read(offset, buf);
        }
        if self.m.faults_armed.load(Ordering::Relaxed) {
            let mut f = self.m.faults.lock();
            if f.read_eio(&self.path) {
                return Err(IoError::Os {
                    op: "pread",
                    path: self.path.clone(),
                    source: eio(),
                });
            }
            f.on_read(&self.path, offset, buf);
        }
        self.m.counters.read(self.options.class, buf.len());
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_write(&self.path, buf, offset)?;
        self.write_one(buf, offset, false)
    }

    fn write_batch(&self, writes: &[WriteOp<'_>]) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_writes(&self.path, writes)?;
        for w in writes {
            self.write_one(w.buf, w.offset, false)?;
        }
        Ok(())
    }

    fn read_batch(&self, reads: &mut [ReadOp<'_>]) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_reads(&self.path, reads)?;
        for r in reads.iter_mut() {
            self.read_exact_at(r.buf, r.offset)?;
        }
        Ok(())
    }

    fn write_atomic(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_atomic(&self.path, buf, offset)?;
        self.write_one(buf, offset, true)
    }

    fn write_atomic_batch(&self, writes: &[WriteOp<'_>]) -> Result<()> {
        self.m.alive(&self.path)?;
        self.contract().check_atomic_writes(&self.path, writes)?;
        for w in writes {
            self.write_one(w.buf, w.offset, true)?;
        }
        Ok(())
    }

    fn sync_all(&self) -> Result<()> {
        self.sync_impl()
    }

    fn sync_data(&self) -> Result<()> {
        self.sync_impl()
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        self.m.alive(&self.path)?;
        let end = contract::end_of(&self.path, offset, len)?;
        self.m.tick(&self.path)?;
        let mut st = self.inode.state.lock();
        self.m.alive(&self.path)?;
        let growth = end.saturating_sub(st.current.len());
        if self.m.faults_armed.load(Ordering::Relaxed) {
            let total_after = self.m.total_len.load(Ordering::Relaxed) + growth;
            let mut f = self.m.faults.lock();
            let fail = f.write_fails(&self.path, growth, total_after, false);
            self.m.faults_armed.store(f.armed(), Ordering::Relaxed);
            if fail {
                return Err(IoError::NoSpace {
                    path: self.path.clone(),
                    offset,
                    len: len as usize,
                });
            }
        }
        if growth > 0 {
            self.resize(&mut st, end);
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.m.alive(&self.path)?;
        contract::end_of(&self.path, 0, len)?;
        self.m.tick(&self.path)?;
        let mut st = self.inode.state.lock();
        self.m.alive(&self.path)?;
        self.resize(&mut st, len);
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        let st = self.inode.state.lock();
        self.m.alive(&self.path)?;
        Ok(st.current.len())
    }

    fn atomic_write_limits(&self) -> AtomicWriteLimits {
        if self.options.direct {
            self.m.config.atomic
        } else {
            AtomicWriteLimits::NONE
        }
    }

    fn is_direct(&self) -> bool {
        self.options.direct
    }

    fn drop_cache(&self) -> Result<()> {
        self.m.alive(&self.path)?;
        self.inode.state.lock().drop_cache();
        Ok(())
    }
}
