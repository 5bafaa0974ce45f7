//! What a file system and device can do: direct-I/O alignment, block sizes, atomic-write limits
//! (statx `STATX_WRITE_ATOMIC`), io_uring availability.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Atomic-write limits as reported by statx for a file opened with O_DIRECT (all zero: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtomicWriteLimits {
    /// `stx_atomic_write_unit_min`: smallest atomic write, bytes.
    pub unit_min: u32,
    /// `stx_atomic_write_unit_max`: largest atomic write, bytes.
    pub unit_max: u32,
    /// `stx_atomic_write_segments_max`: most iovecs in one atomic write.
    pub segments_max: u32,
    /// `stx_atomic_write_unit_max_opt` (Linux 6.16): largest atomic write done by the hardware
    /// without the file system's software fallback; 0 when the kernel does not report it.
    pub unit_max_opt: u32,
}

impl AtomicWriteLimits {
    /// No atomic writes at all.
    pub const NONE: AtomicWriteLimits = AtomicWriteLimits {
        unit_min: 0,
        unit_max: 0,
        segments_max: 0,
        unit_max_opt: 0,
    };

    /// Whether any atomic write is possible.
    pub fn supported(&self) -> bool {
        self.unit_max > 0 && self.unit_min > 0
    }

    /// Checks the kernel's rules for one RWF_ATOMIC write of `len` bytes at `offset`: a power of
    /// two within `unit_min..=unit_max`, naturally aligned (offset a multiple of the length).
    /// Returns the broken rule. This is rule 3 of the pre-I/O contract every backend enforces
    /// (the `contract` module).
    pub fn check(&self, offset: u64, len: usize) -> Result<(), String> {
        crate::contract::atomic_unit(self, offset, len)
    }

    /// How writes of `len` bytes are made atomic on this file.
    pub fn support_for(&self, len: usize) -> AtomicSupport {
        if let Err(reason) = self.check(0, len) {
            return AtomicSupport::Unsupported { reason };
        }
        if self.unit_max_opt as usize >= len {
            AtomicSupport::Hardware
        } else {
            AtomicSupport::SoftwareFallback
        }
    }
}

/// How (whether) writes of a given size can be atomic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum AtomicSupport {
    /// The device writes this size atomically (`unit_max_opt` ≥ size): cheap.
    Hardware,
    /// The file system makes it atomic in software (XFS copy-on-write fallback): correct but slow.
    SoftwareFallback,
    /// Not possible.
    Unsupported {
        /// Why not.
        reason: String,
    },
}

/// Direct-I/O alignment from statx `STATX_DIOALIGN`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectIoAlignment {
    /// Required alignment of the user buffer, bytes (0: direct I/O unsupported).
    pub memory: u32,
    /// Required alignment of file offsets and lengths, bytes (0: direct I/O unsupported).
    pub offset: u32,
}

/// What was found about the file system holding a path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The path probed.
    pub path: PathBuf,
    /// File-system name from statfs (`xfs`, `ext4`, `tmpfs`, `simfs`, ...).
    pub filesystem: String,
    /// Direct-I/O alignment, if direct I/O is supported.
    pub direct_io: Option<DirectIoAlignment>,
    /// Logical block size of the device (smallest addressable unit), bytes.
    pub logical_block_size: u32,
    /// Physical block size of the device (what it writes internally), bytes.
    pub physical_block_size: u32,
    /// Atomic-write limits for O_DIRECT files.
    pub atomic: AtomicWriteLimits,
    /// Whether io_uring could be set up.
    pub io_uring: bool,
    /// Bytes free for new data when probed (`statfs` `f_bavail × f_bsize`; a simulated file
    /// system's room under its space limit); `None` if unknown.
    #[serde(default)]
    pub free_bytes: Option<u64>,
}

impl Capabilities {
    /// How writes of `len` bytes can be made atomic here.
    pub fn atomic_support(&self, len: usize) -> AtomicSupport {
        self.atomic.support_for(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XFS_LOOP: AtomicWriteLimits = AtomicWriteLimits {
        unit_min: 4096,
        unit_max: 2 << 20,
        segments_max: 1,
        unit_max_opt: 0,
    };

    #[test]
    fn natural_alignment_and_power_of_two_are_required() {
        assert!(XFS_LOOP.check(16384, 16384).is_ok());
        assert!(XFS_LOOP.check(4096, 16384).unwrap_err().contains("aligned"));
        assert!(XFS_LOOP
            .check(0, 12288)
            .unwrap_err()
            .contains("power of two"));
        assert!(XFS_LOOP.check(0, 2048).unwrap_err().contains("range"));
        assert!(XFS_LOOP.check(0, 4 << 20).unwrap_err().contains("range"));
        assert!(AtomicWriteLimits::NONE.check(0, 4096).is_err());
    }

    #[test]
    fn hardware_backing_needs_unit_max_opt() {
        assert_eq!(XFS_LOOP.support_for(16384), AtomicSupport::SoftwareFallback);
        let hw = AtomicWriteLimits {
            unit_max_opt: 65536,
            ..XFS_LOOP
        };
        assert_eq!(hw.support_for(16384), AtomicSupport::Hardware);
        assert_eq!(hw.support_for(131072), AtomicSupport::SoftwareFallback);
        assert!(matches!(
            AtomicWriteLimits::NONE.support_for(16384),
            AtomicSupport::Unsupported { .. }
        ));
    }
}
