//! Log blocks: layout, sealing and verification, and the geometry that maps block numbers to
//! files.
//!
//! A block of `B` bytes (512 or 4096), all integers little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..8 | block number `n` (block `n` holds log payload `[n*P, (n+1)*P)`, `P = B - 28`) |
//! | 8..12 | epoch: how many times the block's file slot has been used (see [`Geometry::epoch_of`]) |
//! | 12..16 | incarnation: which opening of the log wrote the block |
//! | 16..18 | bytes used: payload bytes that belong to the log (`0..=P`) |
//! | 18..20 | offset in the payload of the first record group starting in this block, `0xFFFF` none |
//! | 20 | flags: bit 0 = restart (first block written by a new incarnation) |
//! | 21..24 | durable lag `d` (u24): 0 = no claim; otherwise, when the block was written, every block numbered below `n + 1 - d` had been made durable by this incarnation. Lets recovery tell a damaged block in the middle of synced data from a torn tail (see `scan.rs`) |
//! | 24..B-4 | payload (bytes past "bytes used" are zero) |
//! | B-4..B | CRC-32C of the 4-byte log salt followed by bytes `0..B-4` |
//!
//! Invariant: [`check_block`] accepts a block only if its checksum matches, its number and epoch
//! are the expected ones, and its fields are in range; it never panics on any bytes (fuzz target
//! `log_block`).

use std::fmt;

/// Bytes of the block header.
pub const BLOCK_HEADER: usize = 24;
/// Bytes of the block trailer (CRC-32C).
pub const BLOCK_TRAILER: usize = 4;
/// `first_group` value meaning "no group starts in this block".
pub(crate) const NO_GROUP: u16 = 0xFFFF;
/// Flag bit: first block of a new incarnation.
pub(crate) const FLAG_RESTART: u8 = 1;

/// Payload bytes of a block of `block` bytes.
pub const fn payload_size(block: usize) -> usize {
    block - BLOCK_HEADER - BLOCK_TRAILER
}

/// The decoded header of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    /// Block number.
    pub number: u64,
    /// Epoch (file slot use count).
    pub epoch: u32,
    /// Incarnation (opening of the log) that wrote it.
    pub incarnation: u32,
    /// Payload bytes in use.
    pub used: u16,
    /// Payload offset of the first group that starts in the block.
    pub first_group: Option<u16>,
    /// First block of a new incarnation.
    pub restart: bool,
    /// Durable lag: 0 = no claim; otherwise, when this block was written, every block below
    /// `number + 1 - durable_lag` was durable (at most [`MAX_DURABLE_LAG`]).
    pub durable_lag: u32,
}

/// The largest durable lag a block header can carry (24 bits).
pub const MAX_DURABLE_LAG: u32 = 0x00FF_FFFF;

impl BlockHeader {
    /// The first block this block claims was not yet durable when it was written (every block
    /// below it was), or `None` when it makes no claim.
    pub fn durable_below(&self) -> Option<u64> {
        (self.durable_lag > 0).then(|| (self.number + 1).saturating_sub(self.durable_lag as u64))
    }
}

impl BlockHeader {
    /// Writes the header into `block` (the CRC is set by [`seal_block`]).
    pub(crate) fn write(&self, block: &mut [u8]) {
        block[0..8].copy_from_slice(&self.number.to_le_bytes());
        block[8..12].copy_from_slice(&self.epoch.to_le_bytes());
        block[12..16].copy_from_slice(&self.incarnation.to_le_bytes());
        block[16..18].copy_from_slice(&self.used.to_le_bytes());
        block[18..20].copy_from_slice(&self.first_group.unwrap_or(NO_GROUP).to_le_bytes());
        block[20] = if self.restart { FLAG_RESTART } else { 0 };
        let lag = self.durable_lag.min(MAX_DURABLE_LAG).to_le_bytes();
        block[21..24].copy_from_slice(&lag[..3]);
    }
}

/// The checksum of a block's first `B-4` bytes under `salt`.
pub fn block_crc(salt: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&salt.to_le_bytes()), bytes)
}

/// Stores the checksum in the last four bytes of `block`.
pub(crate) fn seal_block(block: &mut [u8], salt: u32) {
    let n = block.len() - BLOCK_TRAILER;
    let crc = block_crc(salt, &block[..n]);
    block[n..].copy_from_slice(&crc.to_le_bytes());
}

/// Why a block was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockFault {
    /// The block is not in any file (file missing or too short).
    Missing,
    /// The stored checksum does not match (torn, never written, or damaged).
    Checksum {
        /// Stored in the block.
        stored: u32,
        /// Computed over its bytes.
        computed: u32,
    },
    /// The block carries another number (a block from an earlier lap).
    Number {
        /// Expected.
        expected: u64,
        /// Found.
        found: u64,
    },
    /// The block carries another epoch (stale).
    Epoch {
        /// Expected.
        expected: u32,
        /// Found.
        found: u32,
    },
    /// A field is out of range.
    Malformed(String),
}

impl fmt::Display for BlockFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockFault::Missing => write!(f, "not present in the log files"),
            BlockFault::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            BlockFault::Number { expected, found } => {
                write!(f, "wrong block number {found} (expected {expected})")
            }
            BlockFault::Epoch { expected, found } => {
                write!(f, "stale epoch {found} (expected {expected})")
            }
            BlockFault::Malformed(why) => write!(f, "malformed header: {why}"),
        }
    }
}

/// Verifies `block` as block number `expected` with `epoch`. With `verify` false (a test switch
/// that disables the tail check on purpose) only the range checks that keep decoding safe run.
pub fn check_block(
    block: &[u8],
    salt: u32,
    expected: u64,
    epoch: u32,
    verify: bool,
) -> Result<BlockHeader, BlockFault> {
    let b = block.len();
    if b != 512 && b != 4096 {
        return Err(BlockFault::Malformed(format!("block of {b} bytes")));
    }
    let p = payload_size(b);
    let rd4 = |o: usize| u32::from_le_bytes([block[o], block[o + 1], block[o + 2], block[o + 3]]);
    let mut n8 = [0u8; 8];
    n8.copy_from_slice(&block[0..8]);
    let number = u64::from_le_bytes(n8);
    if verify {
        let stored = rd4(b - BLOCK_TRAILER);
        let computed = block_crc(salt, &block[..b - BLOCK_TRAILER]);
        if stored != computed {
            return Err(BlockFault::Checksum { stored, computed });
        }
        if number != expected {
            return Err(BlockFault::Number {
                expected,
                found: number,
            });
        }
        let found = rd4(8);
        if found != epoch {
            return Err(BlockFault::Epoch {
                expected: epoch,
                found,
            });
        }
    }
    let used = u16::from_le_bytes([block[16], block[17]]);
    let fg = u16::from_le_bytes([block[18], block[19]]);
    let flags = block[20];
    if used as usize > p {
        return Err(BlockFault::Malformed(format!(
            "{used} bytes used in a {p}-byte payload"
        )));
    }
    let first_group = if fg == NO_GROUP {
        None
    } else if fg < used {
        Some(fg)
    } else {
        return Err(BlockFault::Malformed(format!(
            "first group at {fg}, past the {used} bytes used"
        )));
    };
    if flags & !FLAG_RESTART != 0 {
        return Err(BlockFault::Malformed(format!("unknown flags {flags:#04x}")));
    }
    let durable_lag = u32::from_le_bytes([block[21], block[22], block[23], 0]);
    if durable_lag as u64 > number.saturating_add(1) {
        return Err(BlockFault::Malformed(format!(
            "durable lag {durable_lag} beyond block {number}"
        )));
    }
    Ok(BlockHeader {
        number,
        epoch: rd4(8),
        incarnation: rd4(12),
        used,
        first_group,
        restart: flags & FLAG_RESTART != 0,
        durable_lag,
    })
}

/// Where blocks live: block size, file layout and the log's salt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Block size `B`.
    pub block: usize,
    /// Payload bytes per block `P`.
    pub payload: usize,
    /// Preallocated (circular) or growing files.
    pub preallocated: bool,
    /// Blocks per file.
    pub blocks_per_file: u64,
    /// Number of preallocated files (0 for growing).
    pub files: u32,
    /// The salt mixed into every block checksum.
    pub salt: u32,
}

impl Geometry {
    /// Blocks in one lap of the preallocated files (growing: one file).
    pub fn lap_blocks(&self) -> u64 {
        if self.preallocated {
            self.blocks_per_file * self.files as u64
        } else {
            self.blocks_per_file
        }
    }

    /// The epoch block `n` carries: 1 + the number of times its file slot was used before
    /// (preallocated: laps around all files; growing: the file's index).
    pub fn epoch_of(&self, n: u64) -> u32 {
        (n / self.lap_blocks()).wrapping_add(1) as u32
    }

    /// The file index and byte offset of block `n`.
    pub fn location(&self, n: u64) -> (u64, u64) {
        let slot = if self.preallocated {
            n % self.lap_blocks()
        } else {
            n
        };
        (
            slot / self.blocks_per_file,
            (slot % self.blocks_per_file) * self.block as u64,
        )
    }

    /// The block holding payload byte `lsn`.
    pub fn block_of(&self, lsn: u64) -> u64 {
        lsn / self.payload as u64
    }

    /// First payload LSN of block `n`.
    pub fn block_start(&self, n: u64) -> u64 {
        n * self.payload as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make(b: usize, h: BlockHeader, salt: u32) -> Vec<u8> {
        let mut v = vec![0u8; b];
        h.write(&mut v);
        let n = (h.used as usize).min(payload_size(b));
        for (i, x) in v[BLOCK_HEADER..BLOCK_HEADER + n].iter_mut().enumerate() {
            *x = i as u8;
        }
        seal_block(&mut v, salt);
        v
    }

    const H: BlockHeader = BlockHeader {
        number: 77,
        epoch: 3,
        incarnation: 2,
        used: 100,
        first_group: Some(10),
        restart: true,
        durable_lag: 5,
    };

    #[test]
    fn exact_header_bytes() {
        let v = make(512, H, 5);
        assert_eq!(&v[0..8], &77u64.to_le_bytes());
        assert_eq!(&v[8..12], &3u32.to_le_bytes());
        assert_eq!(&v[12..16], &2u32.to_le_bytes());
        assert_eq!(&v[16..18], &100u16.to_le_bytes());
        assert_eq!(&v[18..20], &10u16.to_le_bytes());
        assert_eq!(v[20], 1);
        let crc = block_crc(5, &v[..508]);
        assert_eq!(&v[508..], &crc.to_le_bytes());
        assert_eq!(payload_size(512), 484);
        assert_eq!(payload_size(4096), 4068);
    }

    #[test]
    fn a_sealed_block_verifies() {
        for b in [512, 4096] {
            let v = make(b, H, 9);
            assert_eq!(check_block(&v, 9, 77, 3, true), Ok(H));
        }
    }

    /// Breaks the invariant on purpose: a flipped bit, another salt, another number or epoch, and
    /// out-of-range fields are each refused, and the switch that disables the check lets them
    /// through.
    #[test]
    fn every_check_catches_its_fault() {
        let v = make(4096, H, 9);
        let mut torn = v.clone();
        torn[2000] ^= 1;
        assert!(matches!(
            check_block(&torn, 9, 77, 3, true),
            Err(BlockFault::Checksum { .. })
        ));
        assert!(check_block(&torn, 9, 77, 3, false).is_ok());
        assert!(matches!(
            check_block(&v, 10, 77, 3, true),
            Err(BlockFault::Checksum { .. })
        ));
        assert_eq!(
            check_block(&v, 9, 78, 3, true),
            Err(BlockFault::Number {
                expected: 78,
                found: 77
            })
        );
        assert_eq!(
            check_block(&v, 9, 77, 4, true),
            Err(BlockFault::Epoch {
                expected: 4,
                found: 3
            })
        );
        assert!(check_block(&v, 9, 78, 4, false).is_ok());
        let mut h = H;
        h.used = 5000;
        assert!(matches!(
            check_block(&make(4096, h, 9)[..], 9, 77, 3, true),
            Err(BlockFault::Malformed(_))
        ));
        let mut h = H;
        h.first_group = Some(100);
        assert!(matches!(
            check_block(&make(4096, h, 9)[..], 9, 77, 3, true),
            Err(BlockFault::Malformed(_))
        ));
        // All zeros (a never-written block) is refused.
        assert!(check_block(&[0u8; 512], 9, 0, 1, true).is_err());
        assert!(check_block(&[0u8; 100], 9, 0, 1, true).is_err());
    }

    #[test]
    fn geometry_maps_blocks_circularly() {
        let g = Geometry {
            block: 512,
            payload: 484,
            preallocated: true,
            blocks_per_file: 8,
            files: 2,
            salt: 0,
        };
        assert_eq!(g.location(0), (0, 0));
        assert_eq!(g.location(9), (1, 512));
        assert_eq!(g.location(16), (0, 0));
        assert_eq!(g.epoch_of(15), 1);
        assert_eq!(g.epoch_of(16), 2);
        let g = Geometry {
            preallocated: false,
            files: 0,
            ..g
        };
        assert_eq!(g.location(17), (2, 512));
        assert_eq!(g.epoch_of(17), 3);
    }
}
