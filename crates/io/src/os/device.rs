//! The block device and file system under a path: logical/physical block size from sysfs, the
//! file-system name from `statfs`'s `f_type`.

use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

/// The block device holding a file, as found in `/sys/dev/block/MAJ:MIN`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// `st_dev` major number.
    pub major: u32,
    /// `st_dev` minor number.
    pub minor: u32,
    /// Kernel name of the whole disk whose queue was read (`vda`, `loop0`, `nvme0n1`); `None`
    /// when no block device backs the file system (tmpfs, btrfs's anonymous devices, overlay).
    pub disk: Option<String>,
    /// `queue/logical_block_size`, if a device was found.
    pub logical_block_size: Option<u32>,
    /// `queue/physical_block_size`, if a device was found.
    pub physical_block_size: Option<u32>,
}

/// Reads the block sizes of the device `major:minor` from sysfs. A partition
/// (`/sys/dev/block/MAJ:MIN/partition` exists) has no queue of its own: its parent disk's is
/// read. Loop and device-mapper devices have their own queues.
pub fn device_info(major: u32, minor: u32) -> DeviceInfo {
    device_info_in(Path::new("/sys/dev/block"), major, minor)
}

/// [`device_info`] against a sysfs tree rooted elsewhere (tests).
pub(crate) fn device_info_in(root: &Path, major: u32, minor: u32) -> DeviceInfo {
    let mut info = DeviceInfo {
        major,
        minor,
        disk: None,
        logical_block_size: None,
        physical_block_size: None,
    };
    let Ok(mut dir) = std::fs::canonicalize(root.join(format!("{major}:{minor}"))) else {
        return info;
    };
    if dir.join("partition").exists() {
        match dir.parent() {
            Some(parent) => dir = parent.to_path_buf(),
            None => return info,
        }
    }
    let read = |name: &str| -> Option<u32> {
        std::fs::read_to_string(dir.join("queue").join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    info.logical_block_size = read("logical_block_size");
    info.physical_block_size = read("physical_block_size");
    if info.logical_block_size.is_some() {
        info.disk = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    }
    info
}

/// The name of a file system from its `statfs` magic number (`linux/magic.h`). ext2, ext3 and
/// ext4 share one magic and are all reported as `ext4` (the ext4 driver mounts all three).
pub fn filesystem_name(f_type: i64) -> String {
    let name = match f_type {
        0x5846_5342 => "xfs",
        0xEF53 => "ext4",
        0x0102_1994 => "tmpfs",
        0x9123_683E => "btrfs",
        0x858458f6 => "ramfs",
        0x794c_7630 => "overlay",
        0xF2F5_2010 => "f2fs",
        0x2fc1_2fc1 => "zfs",
        0xca45_1a4e => "bcachefs",
        0x6969 => "nfs",
        0xFF53_4D42 => "cifs",
        0x6573_5546 => "fuse",
        0x0102_1997 => "9p",
        0x7371_7368 => "squashfs",
        0x4d44 => "vfat",
        0x5346_544e => "ntfs",
        0x6a65_6a6a => "virtiofs",
        _ => return format!("unknown (f_type {f_type:#x})"),
    };
    name.to_string()
}

/// `fstatfs(fd)`: the file-system type and the bytes free to unprivileged users
/// (`f_bavail × f_bsize`).
pub fn statfs(fd: RawFd) -> io::Result<(i64, u64)> {
    // SAFETY: an all-zero `struct statfs` is a valid value of this plain-integer C struct.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `buf` is a live, writable `struct statfs` of the size the libc binding declares and
    // the kernel fills; `fd` is only read.
    let rc = unsafe { libc::fstatfs(fd, &mut buf) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // the fields' widths differ between targets
    let (kind, avail, bsize) = (buf.f_type as i64, buf.f_bavail as u64, buf.f_bsize as u64);
    Ok((kind, avail.saturating_mul(bsize)))
}

/// Where a probe can create a scratch file for `path`: the directory itself, or a file's parent.
pub(crate) fn probe_dir(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn fake_sysfs() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let devices = t.path().join("devices");
        let disk = devices.join("vda");
        std::fs::create_dir_all(disk.join("queue")).unwrap();
        std::fs::write(disk.join("queue/logical_block_size"), "512\n").unwrap();
        std::fs::write(disk.join("queue/physical_block_size"), "4096\n").unwrap();
        let part = disk.join("vda1");
        std::fs::create_dir_all(&part).unwrap();
        std::fs::write(part.join("partition"), "1\n").unwrap();
        let lp = devices.join("loop0");
        std::fs::create_dir_all(lp.join("queue")).unwrap();
        std::fs::write(lp.join("queue/logical_block_size"), "4096\n").unwrap();
        std::fs::write(lp.join("queue/physical_block_size"), "4096\n").unwrap();
        let links = t.path().join("dev-block");
        std::fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink(&disk, links.join("254:0")).unwrap();
        std::os::unix::fs::symlink(&part, links.join("254:1")).unwrap();
        std::os::unix::fs::symlink(&lp, links.join("7:0")).unwrap();
        t
    }

    #[test]
    fn partitions_use_their_disk_and_loops_their_own_queue() {
        let t = fake_sysfs();
        let root = t.path().join("dev-block");
        let disk = device_info_in(&root, 254, 0);
        assert_eq!(disk.disk.as_deref(), Some("vda"));
        assert_eq!(
            (disk.logical_block_size, disk.physical_block_size),
            (Some(512), Some(4096))
        );
        let part = device_info_in(&root, 254, 1);
        assert_eq!(part.disk.as_deref(), Some("vda"));
        assert_eq!(part.logical_block_size, Some(512));
        let lp = device_info_in(&root, 7, 0);
        assert_eq!(lp.disk.as_deref(), Some("loop0"));
        assert_eq!(lp.logical_block_size, Some(4096));
        let none = device_info_in(&root, 0, 42);
        assert_eq!(none.disk, None);
        assert_eq!(none.logical_block_size, None);
    }

    #[test]
    fn magic_numbers_name_file_systems() {
        assert_eq!(filesystem_name(0x58465342), "xfs");
        assert_eq!(filesystem_name(0xEF53), "ext4");
        assert_eq!(filesystem_name(0x01021994), "tmpfs");
        assert!(filesystem_name(0x1234).starts_with("unknown"));
        let d = tempfile::tempdir().unwrap();
        let f = std::fs::File::open(d.path()).unwrap();
        let name = filesystem_name(statfs(f.as_raw_fd()).unwrap().0);
        assert!(!name.starts_with("unknown"), "{name}");
    }
}
