//! The page table: page id → frame, in shards each behind a reader/writer lock.
//!
//! Invariant: a frame's pin count is only raised from 0 while the shard lock of its page is
//! held (shared for a lookup, exclusive for a claim), and a frame is only unmapped with the
//! shard lock held exclusive and its pin count 0 → 1 by compare-exchange; so a page found in the
//! table and pinned cannot be evicted until it is unpinned.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::AtomicU64;

/// Number of shards (a power of two).
pub(crate) const SHARDS: usize = 64;

/// Hasher for page ids: one multiply (ids are already well spread integers).
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct BuildIdHash;

impl BuildHasher for BuildIdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// See [`BuildIdHash`].
#[derive(Debug)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The shard of page id `id` (a different multiplier than the map's hasher, so the keys within
/// one shard still spread over the map's control bits).
#[inline]
pub(crate) fn shard_of(id: u64) -> usize {
    (id.wrapping_mul(0xD6E8_FEB8_6659_FD93) >> (64 - SHARDS.trailing_zeros())) as usize
}

/// One shard: its part of the map, plus hit/miss counters kept here so that counting a hit
/// touches no cache line the lookup did not already touch.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Shard {
    pub map: RwLock<HashMap<u64, u32, BuildIdHash>>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}
