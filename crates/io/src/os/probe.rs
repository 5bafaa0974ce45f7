//! What can the file system holding a path do? [`probe`] reports its name (`statfs` `f_type`),
//! the direct-I/O alignment and atomic-write limits (`statx` on the file itself or an existing
//! file of the directory opened read-only with O_DIRECT, else on a scratch file), the device's
//! logical and physical block sizes (sysfs, see [`super::device_info`]) and whether io_uring
//! works. [`probe_open_file`] is the same `statx` question for a file just opened direct.
//!
//! Invariants: the probe writes nothing where a file exists to ask (so a read-only open, a
//! read-only mount and a full disk can all be probed), and leaves nothing behind where it had
//! to make a scratch file (it is removed); when the kernel does not report an alignment,
//! direct I/O is assumed to need 512 bytes; buffered files report no atomic writes.

use super::{
    device, device_info, filesystem_name, io_uring_status, statx, DeviceInfo, DEFAULT_DIRECT_ALIGN,
};
use crate::{AtomicWriteLimits, Capabilities, DirectIoAlignment, IoError, Result};
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// What statx says about an open file's direct I/O and atomic writes.
pub(super) fn probe_open_file(
    file: &fs::File,
) -> (Option<DirectIoAlignment>, AtomicWriteLimits, u32) {
    match statx::statx_fd(
        file.as_raw_fd(),
        statx::STATX_DIOALIGN | statx::STATX_WRITE_ATOMIC,
    ) {
        Ok(s) => (s.direct_io(), s.atomic_limits(), s.stx_blksize),
        Err(_) => (None, AtomicWriteLimits::NONE, 0),
    }
}

/// The block device holding `path` (see [`device_info`]).
pub fn probe_device(path: &Path) -> Result<DeviceInfo> {
    let md = fs::metadata(path).map_err(|e| IoError::os("stat", path, e))?;
    Ok(device_info(libc::major(md.dev()), libc::minor(md.dev())))
}

static PROBE_SEQ: AtomicU64 = AtomicU64::new(0);

/// Direct-I/O alignment and atomic limits for files under `path`: `path` itself if it is a file,
/// else an existing file of the directory, each opened read-only with O_DIRECT; only when the
/// directory has no such file, a scratch file created there with O_DIRECT and removed again.
/// Asking an existing file first writes nothing: a read-only open stays read-only, and a full
/// disk (which refuses the scratch file with ENOSPC) or a read-only mount can still be probed.
/// `None` when O_DIRECT cannot be opened there.
fn probe_direct(path: &Path) -> Result<Option<(Option<DirectIoAlignment>, AtomicWriteLimits)>> {
    let md = fs::metadata(path).map_err(|e| IoError::os("stat", path, e))?;
    let direct_read = |p: &Path| {
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(p)
            .ok()
            .map(|f| {
                let (d, a, _) = probe_open_file(&f);
                (d, a)
            })
    };
    if md.is_file() {
        return Ok(direct_read(path));
    }
    let dir = device::probe_dir(path);
    let existing = fs::read_dir(&dir).ok().and_then(|entries| {
        entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .find_map(|p| direct_read(&p))
    });
    if existing.is_some() {
        return Ok(existing);
    }
    let scratch = dir.join(format!(
        ".keel-probe-{}-{}",
        std::process::id(),
        PROBE_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let opened = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(&scratch);
    let out = match opened {
        Ok(f) => {
            let (d, a, _) = probe_open_file(&f);
            Some((d, a))
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
        // A read-only mount without a file to ask: nothing can be said.
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => return Ok(None),
        Err(e) => return Err(IoError::os("create probe file", &scratch, e)),
    };
    match fs::remove_file(&scratch) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(IoError::os("unlink probe file", &scratch, e)),
    }
    Ok(out)
}

/// Probes the file system holding `path` (an existing file or directory); see the module docs.
pub fn probe(path: &Path) -> Result<Capabilities> {
    let handle = fs::File::open(path).map_err(|e| IoError::os("open", path, e))?;
    let (f_type, free) =
        device::statfs(handle.as_raw_fd()).map_err(|e| IoError::os("fstatfs", path, e))?;
    let blksize = handle
        .metadata()
        .map_err(|e| IoError::os("fstat", path, e))?
        .blksize() as u32;
    let device = probe_device(path)?;
    let (direct_io, atomic) = probe_direct(path)?.unwrap_or((None, AtomicWriteLimits::NONE));
    let logical = device
        .logical_block_size
        .or(direct_io.map(|d| d.offset))
        .unwrap_or(DEFAULT_DIRECT_ALIGN);
    let physical = device.physical_block_size.unwrap_or(blksize.max(logical));
    Ok(Capabilities {
        path: path.to_path_buf(),
        filesystem: filesystem_name(f_type),
        direct_io,
        logical_block_size: logical,
        physical_block_size: physical,
        atomic,
        io_uring: io_uring_status().is_ok(),
        free_bytes: Some(free),
    })
}
