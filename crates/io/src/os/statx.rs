//! The `statx(2)` kernel ABI, defined here because the libc headers on Keel's machines predate the
//! atomic-write fields.
//!
//! [`Statx`] is `struct statx` of `include/uapi/linux/stat.h` as of Linux 6.16: 256 bytes, fields
//! at the offsets the kernel writes them (checked by `layout_matches_the_kernel_abi`). Older
//! kernels leave the fields they do not know zero, and clear the mask bits they do not support,
//! so every reader checks `stx_mask` before trusting a field.

use crate::{AtomicWriteLimits, DirectIoAlignment};
use std::io;
use std::os::fd::RawFd;

/// `STATX_DIOALIGN`: `stx_dio_mem_align` and `stx_dio_offset_align` are wanted (Linux 6.1).
pub const STATX_DIOALIGN: u32 = 0x0000_2000;
/// `STATX_WRITE_ATOMIC`: the `stx_atomic_write_*` fields are wanted (Linux 6.11).
pub const STATX_WRITE_ATOMIC: u32 = 0x0001_0000;
/// `STATX_ATTR_WRITE_ATOMIC`: the file supports atomic writes (in `stx_attributes`).
pub const STATX_ATTR_WRITE_ATOMIC: u64 = 0x0040_0000;
/// `AT_EMPTY_PATH`: statx the file descriptor itself.
const AT_EMPTY_PATH: libc::c_int = 0x1000;

/// `struct statx_timestamp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StatxTimestamp {
    /// Seconds since the epoch.
    pub tv_sec: i64,
    /// Nanoseconds.
    pub tv_nsec: u32,
    /// Reserved.
    pub reserved: i32,
}

/// `struct statx` of Linux 6.16 (`include/uapi/linux/stat.h`), 256 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Statx {
    /// 0x00: what results were written.
    pub stx_mask: u32,
    /// Preferred general I/O size.
    pub stx_blksize: u32,
    /// Flags conveying information about the file.
    pub stx_attributes: u64,
    /// 0x10: number of hard links.
    pub stx_nlink: u32,
    /// Owner.
    pub stx_uid: u32,
    /// Group.
    pub stx_gid: u32,
    /// File mode.
    pub stx_mode: u16,
    /// Padding.
    pub spare0: [u16; 1],
    /// 0x20: inode number.
    pub stx_ino: u64,
    /// File size.
    pub stx_size: u64,
    /// 512-byte blocks allocated.
    pub stx_blocks: u64,
    /// Which `stx_attributes` bits are supported.
    pub stx_attributes_mask: u64,
    /// 0x40: last access.
    pub stx_atime: StatxTimestamp,
    /// Creation.
    pub stx_btime: StatxTimestamp,
    /// Last status change.
    pub stx_ctime: StatxTimestamp,
    /// Last modification.
    pub stx_mtime: StatxTimestamp,
    /// 0x80: device ID of a special file, major.
    pub stx_rdev_major: u32,
    /// Device ID of a special file, minor.
    pub stx_rdev_minor: u32,
    /// Device holding the file, major.
    pub stx_dev_major: u32,
    /// Device holding the file, minor.
    pub stx_dev_minor: u32,
    /// 0x90: mount ID.
    pub stx_mnt_id: u64,
    /// Memory buffer alignment for direct I/O.
    pub stx_dio_mem_align: u32,
    /// File offset alignment for direct I/O.
    pub stx_dio_offset_align: u32,
    /// 0xa0: subvolume identifier.
    pub stx_subvol: u64,
    /// Smallest atomic write.
    pub stx_atomic_write_unit_min: u32,
    /// Largest atomic write.
    pub stx_atomic_write_unit_max: u32,
    /// 0xb0: most iovecs in one atomic write.
    pub stx_atomic_write_segments_max: u32,
    /// File offset alignment for direct-I/O reads.
    pub stx_dio_read_offset_align: u32,
    /// Largest atomic write done without a software fallback (Linux 6.16).
    pub stx_atomic_write_unit_max_opt: u32,
    /// Padding.
    pub spare2: [u32; 1],
    /// 0xc0: reserved for future fields.
    pub spare3: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<Statx>() == 0x100);

impl Statx {
    /// The direct-I/O alignment, if the kernel reported one (`STATX_DIOALIGN`, both non-zero).
    pub fn direct_io(&self) -> Option<DirectIoAlignment> {
        if self.stx_mask & STATX_DIOALIGN == 0
            || self.stx_dio_mem_align == 0
            || self.stx_dio_offset_align == 0
        {
            return None;
        }
        Some(DirectIoAlignment {
            memory: self.stx_dio_mem_align,
            offset: self.stx_dio_offset_align,
        })
    }

    /// The atomic-write limits ([`AtomicWriteLimits::NONE`] unless the kernel reported
    /// `STATX_WRITE_ATOMIC` with a non-zero unit).
    pub fn atomic_limits(&self) -> AtomicWriteLimits {
        if self.stx_mask & STATX_WRITE_ATOMIC == 0
            || self.stx_atomic_write_unit_min == 0
            || self.stx_atomic_write_unit_max == 0
        {
            return AtomicWriteLimits::NONE;
        }
        AtomicWriteLimits {
            unit_min: self.stx_atomic_write_unit_min,
            unit_max: self.stx_atomic_write_unit_max,
            segments_max: self.stx_atomic_write_segments_max,
            unit_max_opt: self.stx_atomic_write_unit_max_opt,
        }
    }
}

/// `statx(fd, "", AT_EMPTY_PATH, mask)`: what the kernel knows about an open file.
pub fn statx_fd(fd: RawFd, mask: u32) -> io::Result<Statx> {
    let mut buf = Statx::default();
    // SAFETY: `buf` is a live, writable, 256-byte `struct statx` (layout checked at compile time
    // and by a test) and the kernel writes at most that many bytes; the path is a valid
    // NUL-terminated empty string; `fd` is only read by the kernel.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_statx,
            fd,
            c"".as_ptr(),
            AT_EMPTY_PATH,
            mask,
            &mut buf as *mut Statx,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;
    use std::os::fd::AsRawFd;

    #[test]
    fn layout_matches_the_kernel_abi() {
        // Offsets from the comments in include/uapi/linux/stat.h (Linux 6.16).
        assert_eq!(offset_of!(Statx, stx_nlink), 0x10);
        assert_eq!(offset_of!(Statx, stx_ino), 0x20);
        assert_eq!(offset_of!(Statx, stx_atime), 0x40);
        assert_eq!(offset_of!(Statx, stx_rdev_major), 0x80);
        assert_eq!(offset_of!(Statx, stx_mnt_id), 0x90);
        assert_eq!(offset_of!(Statx, stx_dio_mem_align), 0x98);
        assert_eq!(offset_of!(Statx, stx_dio_offset_align), 0x9c);
        assert_eq!(offset_of!(Statx, stx_subvol), 0xa0);
        assert_eq!(offset_of!(Statx, stx_atomic_write_unit_min), 0xa8);
        assert_eq!(offset_of!(Statx, stx_atomic_write_unit_max), 0xac);
        assert_eq!(offset_of!(Statx, stx_atomic_write_segments_max), 0xb0);
        assert_eq!(offset_of!(Statx, stx_dio_read_offset_align), 0xb4);
        assert_eq!(offset_of!(Statx, stx_atomic_write_unit_max_opt), 0xb8);
        assert_eq!(offset_of!(Statx, spare3), 0xc0);
        assert_eq!(std::mem::size_of::<Statx>(), 0x100);
    }

    #[test]
    fn statx_agrees_with_std_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 12345]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let stx = statx_fd(f.as_raw_fd(), 0x7ff | STATX_DIOALIGN | STATX_WRITE_ATOMIC).unwrap();
        let md = f.metadata().unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(stx.stx_size, 12345);
        assert_eq!(stx.stx_ino, md.ino());
        assert_eq!(stx.stx_nlink as u64, md.nlink());
        assert_eq!(stx.stx_mode as u32, md.mode());
        assert_eq!(
            libc::makedev(stx.stx_dev_major, stx.stx_dev_minor),
            md.dev()
        );
        assert_eq!(stx.stx_mtime.tv_sec, md.mtime());
    }

    #[test]
    fn mask_bits_gate_the_fields() {
        let mut s = Statx {
            stx_dio_mem_align: 512,
            stx_dio_offset_align: 512,
            stx_atomic_write_unit_min: 4096,
            stx_atomic_write_unit_max: 65536,
            stx_atomic_write_segments_max: 1,
            ..Statx::default()
        };
        // Fields the kernel did not claim (mask bit clear) are ignored.
        assert_eq!(s.direct_io(), None);
        assert_eq!(s.atomic_limits(), AtomicWriteLimits::NONE);
        s.stx_mask = STATX_DIOALIGN | STATX_WRITE_ATOMIC;
        assert_eq!(
            s.direct_io(),
            Some(DirectIoAlignment {
                memory: 512,
                offset: 512
            })
        );
        assert_eq!(s.atomic_limits().unit_max, 65536);
    }
}
