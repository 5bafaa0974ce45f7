//! How is a simulated machine configured? [`SimConfig`]: the seed of every random choice, the
//! sector size (tearing granularity), the direct-I/O alignment, the atomic-write limits, and how
//! pending writes fare when a sync fails.
//!
//! Invariant: a [`super::SimFs`] is only ever built from a configuration that `validate` accepts
//! (sector size a power of two ≥ 512, direct alignment a power of two).

use super::crash::Fates;
use crate::AtomicWriteLimits;

/// Atomic-write limits like XFS on this machine's loop image with the software fallback:
/// 4 KiB ..= 1 MiB, one segment, no hardware-backed size.
pub const XFS_LIKE_ATOMIC: AtomicWriteLimits = AtomicWriteLimits {
    unit_min: 4096,
    unit_max: 1 << 20,
    segments_max: 1,
    unit_max_opt: 0,
};

/// Configuration of a [`SimFs`](super::SimFs).
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Seed of every random choice (crashes, failed-sync fates, random bit flips).
    pub seed: u64,
    /// Tearing granularity and reported physical block size: a power of two ≥ 512 (512 and 4096
    /// are the devices modelled).
    pub sector_size: u32,
    /// Atomic-write limits of direct files ([`XFS_LIKE_ATOMIC`] by default; set `unit_max_opt`
    /// to model hardware-backed atomic writes, or [`AtomicWriteLimits::NONE`] for none).
    pub atomic: AtomicWriteLimits,
    /// Alignment direct I/O needs for offsets, lengths and buffer addresses (power of two,
    /// default 512); also the reported logical block size.
    pub direct_alignment: u32,
    /// How pending writes fare when a sync fails (see the module docs).
    pub failed_sync: Fates,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            seed: 0,
            sector_size: 512,
            atomic: XFS_LIKE_ATOMIC,
            direct_alignment: 512,
            failed_sync: Fates::Random {
                keep: 1,
                lose: 1,
                tear: 1,
            },
        }
    }
}

impl SimConfig {
    /// The default configuration with `seed`.
    pub fn seeded(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            ..SimConfig::default()
        }
    }

    /// Sets `sector_size`.
    pub fn sector_size(mut self, bytes: u32) -> SimConfig {
        self.sector_size = bytes;
        self
    }

    /// Sets `atomic`.
    pub fn atomic(mut self, limits: AtomicWriteLimits) -> SimConfig {
        self.atomic = limits;
        self
    }

    /// Makes every atomic write size hardware-backed (`unit_max_opt = unit_max`).
    pub fn hardware_atomic(mut self) -> SimConfig {
        self.atomic.unit_max_opt = self.atomic.unit_max;
        self
    }

    /// Sets `direct_alignment`.
    pub fn direct_alignment(mut self, bytes: u32) -> SimConfig {
        self.direct_alignment = bytes;
        self
    }

    /// Sets `failed_sync`.
    pub fn failed_sync(mut self, fates: Fates) -> SimConfig {
        self.failed_sync = fates;
        self
    }

    /// Checks the configuration (see [`SimFs::new`](super::SimFs::new)); returns what is wrong.
    pub(super) fn validate(&self) -> std::result::Result<(), String> {
        if !self.sector_size.is_power_of_two() || self.sector_size < 512 {
            return Err(format!(
                "sector_size {} is not a power of two ≥ 512",
                self.sector_size
            ));
        }
        if !self.direct_alignment.is_power_of_two() {
            return Err(format!(
                "direct_alignment {} is not a power of two",
                self.direct_alignment
            ));
        }
        Ok(())
    }
}
