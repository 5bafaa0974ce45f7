//! The log header file `log.header`: a static block written once at creation and two
//! checksummed checkpoint slots written alternately (all integers little-endian).
//!
//! Static block, bytes 0..4096:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..8 | magic `KEELLOG1` |
//! | 8..12 | format version (4; version 1 logs, whose blocks carry no durable lag, version 2 logs, whose groups hold no page-ops items, and version 3 logs, whose groups hold no page-copy records, are still read and written as they were) |
//! | 12..16 | log block size (512 or 4096) |
//! | 16..20 | file mode: 1 preallocated, 2 growing |
//! | 20..24 | number of preallocated files (0 for growing) |
//! | 24..32 | file size in bytes |
//! | 32..36 | salt (mixed into every block checksum) |
//! | 36..40 | zero |
//! | 40..44 | CRC-32C of bytes 0..40 |
//!
//! Checkpoint slot A at 4096..8192 (odd sequence numbers), slot B at 8192..12288 (even):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..8 | magic `KEELCKPT` |
//! | 8..16 | sequence number (≥ 1; each write of a slot uses the next one) |
//! | 16..24 | checkpoint LSN: groups ending after it are recovered |
//! | 24..32 | scan start LSN: where the scan begins (≤ checkpoint LSN; the start of the group or filler containing it) |
//! | 32..36 | incarnation: the opening of the log this slot was written for |
//! | 36..40 | salt (equal to the static block's) |
//! | 40..44 | CRC-32C of bytes 0..40 |
//! | 44..52 | growing logs: the index of the newest log file the log had created when the slot was written (a file it knows exists: created, its directory entry synced); the first sync covering a new file's blocks records it before their commits are acknowledged |
//! | 52..56 | CRC-32C of bytes 44..52; bytes 44..56 that do not check record no newest file (slots written before the field, preallocated logs) |
//!
//! An open refuses a growing log whose newest file is below the slot's record (the files the
//! log had written past the present ones were deleted: their commits would be lost silently),
//! unless the loss is accepted.
//!
//! Invariant: a slot is used only if its magic, checksum and salt are right; of two valid slots
//! the one with the higher sequence number wins, so a torn slot write falls back to the other
//! slot. Tested by `torn_newest_slot_falls_back_to_the_older_one`.

use crate::error::{LogError, Result};
use keel_io::File;
use std::path::Path;

/// Name of the header file in the log directory.
pub const HEADER_FILE: &str = "log.header";
/// Bytes per header block / slot.
pub const SLOT_BYTES: usize = 4096;
/// Total size of the header file.
pub const HEADER_BYTES: usize = 3 * SLOT_BYTES;

const STATIC_MAGIC: &[u8; 8] = b"KEELLOG1";
const SLOT_MAGIC: &[u8; 8] = b"KEELCKPT";
/// The format version new logs are created with: 2 adds the blocks' durable lag (bytes
/// 21..24), 3 the compact page-ops record items, 4 the page-copy record (`record.rs`). Older
/// logs are still read and written in their own version (version 1 blocks keep a lag of 0,
/// version 1 and 2 groups are encoded plainly, versions 1 to 3 refuse page copies), so a build
/// that reads only their version can still read them.
pub const VERSION: u32 = 4;
/// The oldest format version this build reads.
const OLDEST_VERSION: u32 = 1;

/// The static block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticHeader {
    /// Log block size in bytes.
    pub block_size: u32,
    /// Preallocated files (else growing).
    pub preallocated: bool,
    /// Number of preallocated files (0 for growing).
    pub files: u32,
    /// File size.
    pub file_size: u64,
    /// Block checksum salt.
    pub salt: u32,
    /// Format version (1 to 4; 2: blocks carry a durable lag; 3: groups may hold page-ops items;
    /// 4: groups may hold page-copy records).
    pub version: u32,
}

/// A checkpoint slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Sequence number.
    pub seq: u64,
    /// Checkpoint LSN.
    pub checkpoint_lsn: u64,
    /// Scan start LSN.
    pub scan_start: u64,
    /// Incarnation.
    pub incarnation: u32,
    /// Growing logs: the newest file the log had created (`None`: not recorded).
    pub newest_file: Option<u64>,
    /// Written by a build whose checkpoints keep the data file's checkpoint record (page 0),
    /// or carried from such a slot: `false` in slots older builds wrote. A store's open checks
    /// page 0's record against the checkpoint only when this is set — builds before the record
    /// checkpointed without updating it, so after one of them ran the record is stale, not a
    /// sign of a data file older than the log (a tester: a downgrade and upgrade left a store
    /// every later open refused).
    pub checkpoint_kept: bool,
    /// Every log byte below this LSN had been made durable (synced) when the slot was written
    /// (`None`: not recorded — slots of builds before session 45). Written with the newest
    /// file (the first sync covering a growing log's new file) and by each checkpoint; an open
    /// whose scan ends short of it refuses: the blocks the log had synced there are damaged or
    /// gone (a growing log's newest file zeroed or replaced opened as a torn tail, its
    /// acknowledged commits lost).
    pub durable_lsn: Option<u64>,
}

/// The mark of [`Slot::checkpoint_kept`] at bytes 56..60: CRC-32C of the slot's bytes 0..40
/// followed by `FCKP`.
fn kept_mark(b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc(&b[..40]), b"FCKP")
}

/// The check of bytes 60..68 (the durable LSN), bound to the slot's first 40 bytes.
fn durable_mark(b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(crc(&b[..40]), &b[60..68]), b"DURL")
}

fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

impl StaticHeader {
    /// The block geometry this header describes (what the writer and the recovery scan use).
    pub fn geometry(&self) -> crate::block::Geometry {
        let b = self.block_size as usize;
        crate::block::Geometry {
            block: b,
            payload: crate::block::payload_size(b),
            preallocated: self.preallocated,
            blocks_per_file: self.file_size / b as u64,
            files: self.files,
            salt: self.salt,
        }
    }

    /// Encodes the static block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SLOT_BYTES];
        b[0..8].copy_from_slice(STATIC_MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.block_size.to_le_bytes());
        let mode: u32 = if self.preallocated { 1 } else { 2 };
        b[16..20].copy_from_slice(&mode.to_le_bytes());
        b[20..24].copy_from_slice(&self.files.to_le_bytes());
        b[24..32].copy_from_slice(&self.file_size.to_le_bytes());
        b[32..36].copy_from_slice(&self.salt.to_le_bytes());
        let c = crc(&b[..40]);
        b[40..44].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes and checks the static block.
    pub fn decode(b: &[u8]) -> std::result::Result<StaticHeader, String> {
        if b.len() < 44 {
            return Err(format!("static block of {} bytes", b.len()));
        }
        if &b[0..8] != STATIC_MAGIC {
            return Err("bad magic (not a Keel redo log header)".into());
        }
        let (stored, computed) = (u32_at(b, 40), crc(&b[..40]));
        if stored != computed {
            return Err(format!(
                "static block checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        let version = u32_at(b, 8);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(format!(
                "format version {version}, this build reads {OLDEST_VERSION} to {VERSION}"
            ));
        }
        let block_size = u32_at(b, 12);
        if block_size != 512 && block_size != 4096 {
            return Err(format!("block size {block_size}"));
        }
        let preallocated = match u32_at(b, 16) {
            1 => true,
            2 => false,
            m => return Err(format!("file mode {m}")),
        };
        let h = StaticHeader {
            block_size,
            preallocated,
            files: u32_at(b, 20),
            file_size: u64_at(b, 24),
            salt: u32_at(b, 32),
            version,
        };
        if h.file_size == 0
            || !h.file_size.is_multiple_of(block_size as u64)
            || (h.preallocated && h.files == 0)
        {
            return Err(format!(
                "file size {} / file count {} do not fit block size {block_size}",
                h.file_size, h.files
            ));
        }
        Ok(h)
    }
}

impl Slot {
    /// Byte offset of the slot this sequence number is written to.
    pub fn offset(seq: u64) -> u64 {
        if seq % 2 == 1 {
            SLOT_BYTES as u64
        } else {
            2 * SLOT_BYTES as u64
        }
    }

    /// Encodes the slot.
    pub fn encode(&self, salt: u32) -> Vec<u8> {
        let mut b = vec![0u8; SLOT_BYTES];
        b[0..8].copy_from_slice(SLOT_MAGIC);
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.checkpoint_lsn.to_le_bytes());
        b[24..32].copy_from_slice(&self.scan_start.to_le_bytes());
        b[32..36].copy_from_slice(&self.incarnation.to_le_bytes());
        b[36..40].copy_from_slice(&salt.to_le_bytes());
        let c = crc(&b[..40]);
        b[40..44].copy_from_slice(&c.to_le_bytes());
        if let Some(n) = self.newest_file {
            b[44..52].copy_from_slice(&n.to_le_bytes());
            let c = crc(&b[44..52]);
            b[52..56].copy_from_slice(&c.to_le_bytes());
        }
        if self.checkpoint_kept {
            let m = kept_mark(&b);
            b[56..60].copy_from_slice(&m.to_le_bytes());
        }
        if let Some(d) = self.durable_lsn {
            b[60..68].copy_from_slice(&d.to_le_bytes());
            let m = durable_mark(&b);
            b[68..72].copy_from_slice(&m.to_le_bytes());
        }
        b
    }

    /// Decodes and checks a slot.
    pub fn decode(b: &[u8], salt: u32) -> std::result::Result<Slot, String> {
        if b.len() < 44 {
            return Err(format!("slot of {} bytes", b.len()));
        }
        if &b[0..8] != SLOT_MAGIC {
            return Err("bad magic (never written or torn)".into());
        }
        let (stored, computed) = (u32_at(b, 40), crc(&b[..40]));
        if stored != computed {
            return Err(format!(
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        if u32_at(b, 36) != salt {
            return Err("salt differs from the static block (slot of another log)".into());
        }
        let s = Slot {
            seq: u64_at(b, 8),
            checkpoint_lsn: u64_at(b, 16),
            scan_start: u64_at(b, 24),
            incarnation: u32_at(b, 32),
            newest_file: (b.len() >= 56 && u32_at(b, 52) == crc(&b[44..52])).then(|| u64_at(b, 44)),
            checkpoint_kept: b.len() >= 60 && u32_at(b, 56) == kept_mark(b),
            durable_lsn: (b.len() >= 72 && u32_at(b, 68) == durable_mark(b)).then(|| u64_at(b, 60)),
        };
        if s.seq == 0 || s.scan_start > s.checkpoint_lsn {
            return Err(format!(
                "sequence {} / scan start {} after checkpoint {}",
                s.seq, s.scan_start, s.checkpoint_lsn
            ));
        }
        Ok(s)
    }
}

/// Reads the header image (12288 bytes) and picks the newest valid slot.
pub fn decode_header(path: &Path, bytes: &[u8]) -> Result<(StaticHeader, Slot)> {
    let corrupt = |reason: String| LogError::CorruptHeader {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.len() < HEADER_BYTES {
        return Err(corrupt(format!(
            "{} bytes, expected {HEADER_BYTES}",
            bytes.len()
        )));
    }
    let st = StaticHeader::decode(&bytes[..SLOT_BYTES]).map_err(corrupt)?;
    let a = Slot::decode(&bytes[SLOT_BYTES..2 * SLOT_BYTES], st.salt);
    let b = Slot::decode(&bytes[2 * SLOT_BYTES..], st.salt);
    // A slot found at the other slot's position is not trusted.
    let a = a.and_then(|s| {
        if s.seq % 2 == 1 {
            Ok(s)
        } else {
            Err("even sequence in slot A".into())
        }
    });
    let b = b.and_then(|s| {
        if s.seq % 2 == 0 {
            Ok(s)
        } else {
            Err("odd sequence in slot B".into())
        }
    });
    let slot = match (a, b) {
        (Ok(a), Ok(b)) => {
            if a.seq > b.seq {
                a
            } else {
                b
            }
        }
        (Ok(a), Err(_)) => a,
        (Err(_), Ok(b)) => b,
        (Err(ea), Err(eb)) => {
            return Err(corrupt(format!(
                "both checkpoint slots are invalid: slot A: {ea}; slot B: {eb}"
            )))
        }
    };
    Ok((st, slot))
}

/// Reads the whole header file.
pub fn read_header(file: &dyn File) -> Result<(StaticHeader, Slot)> {
    let mut buf = vec![0u8; HEADER_BYTES];
    let len = file.len()?;
    if len < HEADER_BYTES as u64 {
        return Err(LogError::CorruptHeader {
            path: file.path().to_path_buf(),
            reason: format!("{len} bytes, expected {HEADER_BYTES}"),
        });
    }
    file.read_exact_at(&mut buf, 0)?;
    decode_header(file.path(), &buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(st: &StaticHeader, slots: &[Slot]) -> Vec<u8> {
        let mut img = vec![0u8; HEADER_BYTES];
        img[..SLOT_BYTES].copy_from_slice(&st.encode());
        for s in slots {
            let o = Slot::offset(s.seq) as usize;
            img[o..o + SLOT_BYTES].copy_from_slice(&s.encode(st.salt));
        }
        img
    }

    const ST: StaticHeader = StaticHeader {
        block_size: 4096,
        preallocated: true,
        files: 2,
        file_size: 1 << 20,
        salt: 0xABCD,
        version: VERSION,
    };

    fn slot(seq: u64, lsn: u64) -> Slot {
        Slot {
            seq,
            checkpoint_lsn: lsn,
            scan_start: lsn - 1,
            incarnation: 3,
            newest_file: None,
            checkpoint_kept: true,
            durable_lsn: None,
        }
    }

    /// The durable LSN round-trips, is bound to the slot (another slot's field pasted in does
    /// not verify), and a slot without it (zeros, as every slot an older build wrote) records
    /// none.
    #[test]
    fn the_durable_lsn_is_recorded_only_where_it_checks() {
        let with = Slot {
            durable_lsn: Some(123_456),
            ..slot(5, 100)
        };
        let mut b = with.encode(ST.salt);
        assert_eq!(Slot::decode(&b, ST.salt).unwrap(), with);
        assert_eq!(
            Slot::decode(&slot(5, 100).encode(ST.salt), ST.salt)
                .unwrap()
                .durable_lsn,
            None
        );
        let other = Slot {
            durable_lsn: Some(123_456),
            ..slot(6, 200)
        };
        b[60..72].copy_from_slice(&other.encode(ST.salt)[60..72]);
        assert_eq!(Slot::decode(&b, ST.salt).unwrap().durable_lsn, None);
    }

    /// The mark round-trips, is bound to the slot's fields (another checkpoint LSN under the
    /// same mark does not verify) and is absent from a slot an older build wrote (zeros).
    #[test]
    fn the_checkpoint_kept_mark_is_recorded_only_where_it_checks() {
        let marked = slot(5, 100);
        let b = marked.encode(ST.salt);
        assert!(Slot::decode(&b, ST.salt).unwrap().checkpoint_kept);
        let unmarked = Slot {
            checkpoint_kept: false,
            ..marked
        };
        let mut z = unmarked.encode(ST.salt);
        assert!(!Slot::decode(&z, ST.salt).unwrap().checkpoint_kept);
        assert_eq!(&z[56..60], &[0; 4]);
        // Another slot's mark pasted in does not verify.
        z[56..60].copy_from_slice(&slot(6, 200).encode(ST.salt)[56..60]);
        assert!(!Slot::decode(&z, ST.salt).unwrap().checkpoint_kept);
    }

    /// The newest file round-trips; a slot without it (bytes 44..56 zero, as every slot
    /// written before the field) records none, and so does one whose field's checksum fails.
    #[test]
    fn the_newest_file_is_recorded_only_where_it_checks() {
        let with = Slot {
            newest_file: Some(7),
            ..slot(5, 100)
        };
        let mut b = with.encode(ST.salt);
        assert_eq!(Slot::decode(&b, ST.salt).unwrap(), with);
        assert_eq!(
            Slot::decode(&slot(5, 100).encode(ST.salt), ST.salt)
                .unwrap()
                .newest_file,
            None
        );
        b[45] ^= 1;
        assert_eq!(Slot::decode(&b, ST.salt).unwrap().newest_file, None);
    }

    #[test]
    fn newest_valid_slot_wins() {
        let p = Path::new("log.header");
        let img = image(&ST, &[slot(1, 10), slot(2, 20)]);
        assert_eq!(decode_header(p, &img).unwrap(), (ST, slot(2, 20)));
        let img = image(&ST, &[slot(3, 30), slot(2, 20)]);
        assert_eq!(decode_header(p, &img).unwrap().1, slot(3, 30));
    }

    /// Breaks the invariant on purpose: tearing the newest slot (a flipped byte) makes the
    /// older one win; tearing both is a clear error; a slot of another salt is refused.
    #[test]
    fn torn_newest_slot_falls_back_to_the_older_one() {
        let p = Path::new("log.header");
        let mut img = image(&ST, &[slot(3, 30), slot(4, 40)]);
        img[2 * SLOT_BYTES + 17] ^= 0xFF;
        assert_eq!(decode_header(p, &img).unwrap().1, slot(3, 30));
        img[SLOT_BYTES + 17] ^= 0xFF;
        let e = decode_header(p, &img).unwrap_err().to_string();
        assert!(e.contains("both checkpoint slots"), "{e}");
        assert!(e.contains("log.header"), "{e}");
        let other = StaticHeader { salt: 1, ..ST };
        let mut img = image(&ST, &[slot(1, 10)]);
        img[..SLOT_BYTES].copy_from_slice(&other.encode());
        assert!(decode_header(p, &img).is_err());
    }

    #[test]
    fn static_block_is_checked() {
        let mut b = ST.encode();
        assert_eq!(StaticHeader::decode(&b), Ok(ST));
        b[13] ^= 1;
        assert!(StaticHeader::decode(&b).is_err());
        assert!(StaticHeader::decode(&[0u8; 10]).is_err());
    }
}
