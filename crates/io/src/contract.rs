//! The pre-I/O contract: which requests a file refuses before any I/O is issued, and with which
//! error. One implementation, used by both backends ([`crate::OsFs`]'s files and the simulator's),
//! so that a request one of them refuses, the other refuses with the same error.
//!
//! # Rules, in the order they are checked (the first broken one is reported)
//!
//! 1. **Range** (every read, write and atomic write; `allocate` and `set_len` too): the end of the
//!    request, `offset + len`, must not overflow and must not pass [`MAX_FILE_END`] (`i64::MAX`,
//!    the largest `off_t`: Linux refuses any read or write ending past it with EINVAL, a
//!    preallocation or truncation with EFBIG). Error: [`IoError::OutOfRange`]. Checked arithmetic
//!    only: an overflowing request is an error, never a panic or a wrapped offset.
//! 2. **Atomic support** (atomic writes): the file is direct (`RWF_ATOMIC` needs O_DIRECT) and has
//!    an atomic write unit ([`AtomicWriteLimits::supported`]).
//!    Error: [`IoError::AtomicUnsupported`].
//! 3. **Atomic unit** (atomic writes, [`atomic_unit`], also behind [`AtomicWriteLimits::check`]):
//!    the length is a power of two within `unit_min..=unit_max` and the offset a multiple of the
//!    length (natural alignment). Error: [`IoError::AtomicRejected`] naming the broken rule.
//! 4. **Direct alignment** (every read and write of a direct file, atomic ones included): offset
//!    and length are multiples of the offset alignment, the buffer address a multiple of the
//!    memory alignment. Error: [`IoError::Misaligned`] carrying the alignment that was broken (the
//!    offset alignment when offset or length is off, else the memory alignment). A buffered file
//!    accepts any alignment.
//!
//! Every error names the file and the offset of the request. A batch is checked whole, request by
//! request in order, before any request of it is issued: one bad request and nothing of the batch
//! happens.

use crate::{AtomicWriteLimits, DirectIoAlignment, IoError, ReadOp, Result, WriteOp};
use std::path::Path;

/// The largest end (`offset + len`) of any request: `i64::MAX`, the largest file offset Linux
/// accepts (`off_t` is signed; `MAX_LFS_FILESIZE` on 64-bit).
pub const MAX_FILE_END: u64 = i64::MAX as u64;

/// What a file's requests are checked against. Each backend builds it from the file's open
/// options and probed (or configured) limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Contract {
    /// Whether the file was opened with O_DIRECT.
    pub(crate) direct: bool,
    /// The alignment direct requests need (ignored when not `direct`).
    pub(crate) align: DirectIoAlignment,
    /// The atomic-write limits of the file ([`AtomicWriteLimits::NONE`]: no atomic writes).
    pub(crate) atomic: AtomicWriteLimits,
}

/// Rule 1: the end of a request of `len` bytes at `offset`, if it does not overflow and does not
/// pass [`MAX_FILE_END`].
pub(crate) fn end_of(path: &Path, offset: u64, len: u64) -> Result<u64> {
    offset
        .checked_add(len)
        .filter(|&end| end <= MAX_FILE_END)
        .ok_or_else(|| IoError::OutOfRange {
            path: path.to_path_buf(),
            offset,
            len,
        })
}

/// Rule 3: whether one atomic write of `len` bytes at `offset` fits `limits` (see the module
/// docs); returns the broken rule.
pub(crate) fn atomic_unit(
    limits: &AtomicWriteLimits,
    offset: u64,
    len: usize,
) -> std::result::Result<(), String> {
    if !limits.supported() {
        return Err("the probe reported no atomic write unit (unit_max = 0)".into());
    }
    if !len.is_power_of_two() {
        return Err(format!("length {len} is not a power of two"));
    }
    if len < limits.unit_min as usize || len > limits.unit_max as usize {
        return Err(format!(
            "length {len} is outside the atomic unit range {}..={}",
            limits.unit_min, limits.unit_max
        ));
    }
    // `len` is a power of two, so never zero.
    if !offset.is_multiple_of(len as u64) {
        return Err(format!(
            "offset {offset} is not naturally aligned to the length {len}"
        ));
    }
    Ok(())
}

impl Contract {
    /// Rule 4 for one request (nothing to check on a buffered file).
    fn alignment(&self, path: &Path, offset: u64, len: usize, addr: usize) -> Result<()> {
        if !self.direct {
            return Ok(());
        }
        let off_align = self.align.offset as usize;
        let mem_align = self.align.memory as usize;
        let bad_offset = !offset.is_multiple_of(off_align as u64) || !len.is_multiple_of(off_align);
        if bad_offset || !addr.is_multiple_of(mem_align) {
            return Err(IoError::Misaligned {
                path: path.to_path_buf(),
                offset,
                len,
                addr,
                align: if bad_offset { off_align } else { mem_align },
            });
        }
        Ok(())
    }

    /// A read or write of `len` bytes at `offset` from/to the buffer at `addr`: rules 1 and 4.
    pub(crate) fn check_io(&self, path: &Path, offset: u64, len: usize, addr: usize) -> Result<()> {
        end_of(path, offset, len as u64)?;
        self.alignment(path, offset, len, addr)
    }

    /// A read into `buf`.
    pub(crate) fn check_read(&self, path: &Path, buf: &[u8], offset: u64) -> Result<()> {
        self.check_io(path, offset, buf.len(), buf.as_ptr() as usize)
    }

    /// A plain write of `buf`.
    pub(crate) fn check_write(&self, path: &Path, buf: &[u8], offset: u64) -> Result<()> {
        self.check_io(path, offset, buf.len(), buf.as_ptr() as usize)
    }

    /// Every write of a batch, before any is issued.
    pub(crate) fn check_writes(&self, path: &Path, writes: &[WriteOp<'_>]) -> Result<()> {
        writes
            .iter()
            .try_for_each(|w| self.check_write(path, w.buf, w.offset))
    }

    /// Every read of a batch, before any is issued.
    pub(crate) fn check_reads(&self, path: &Path, reads: &[ReadOp<'_>]) -> Result<()> {
        reads
            .iter()
            .try_for_each(|r| self.check_read(path, r.buf, r.offset))
    }

    /// One atomic write of `buf` at `offset`: rules 1 to 4.
    pub(crate) fn check_atomic(&self, path: &Path, buf: &[u8], offset: u64) -> Result<()> {
        let len = buf.len();
        end_of(path, offset, len as u64)?;
        if !self.direct {
            return Err(IoError::AtomicUnsupported {
                path: path.to_path_buf(),
                reason: "the file was not opened with direct (O_DIRECT); atomic writes need \
                         direct I/O"
                    .into(),
            });
        }
        if !self.atomic.supported() {
            return Err(IoError::AtomicUnsupported {
                path: path.to_path_buf(),
                reason: "the file system reported no atomic write unit for this file \
                         (statx STATX_WRITE_ATOMIC)"
                    .into(),
            });
        }
        atomic_unit(&self.atomic, offset, len).map_err(|reason| IoError::AtomicRejected {
            path: path.to_path_buf(),
            offset,
            len,
            reason,
        })?;
        self.alignment(path, offset, len, buf.as_ptr() as usize)
    }

    /// Every atomic write of a batch, before any is issued.
    pub(crate) fn check_atomic_writes(&self, path: &Path, writes: &[WriteOp<'_>]) -> Result<()> {
        writes
            .iter()
            .try_for_each(|w| self.check_atomic(path, w.buf, w.offset))
    }
}

#[cfg(test)]
mod tests;
