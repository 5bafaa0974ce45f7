//! Redo records and their encoding into record groups.
//!
//! A group (one transaction) in the log's byte stream, all integers little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0 | tag `0x47` (`'G'`) |
//! | 1..5 | group length `L` in bytes, header and commit marker included |
//! | 5..9 | number of records `n` |
//! | 9..L-9 | `n` records |
//! | L-9 | commit marker tag `0x43` (`'C'`) |
//! | L-8..L-4 | `L` again |
//! | L-4..L | `n` again |
//!
//! Invariant: [`decode_group`] accepts exactly what [`encode_group`] produces and returns the
//! records that were encoded; anything else (wrong tags, lengths that disagree, trailing bytes,
//! unknown record types) is an error, never a panic (fuzz target `log_block`).

use keel_page::{PageId, PageOp, PageType};

/// Tag of a group header.
pub(crate) const GROUP_TAG: u8 = 0x47;
/// Tag of a commit marker.
pub(crate) const COMMIT_TAG: u8 = 0x43;
/// Bytes of the group header.
pub(crate) const GROUP_HEADER: usize = 9;
/// Bytes of group header plus commit marker.
pub(crate) const GROUP_OVERHEAD: usize = 18;

const T_PAGE_INIT: u8 = 1;
const T_PAGE_WRITE: u8 = 2;
const T_PAGE_IMAGE: u8 = 3;
const T_PAGE_FREE: u8 = 4;
const T_LOGICAL: u8 = 5;
const T_PAGE_MOVE: u8 = 6;

/// A redo record. Page records are physical (byte-level), so replay is simple and exact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// The whole page is (re)initialised: every byte after the header zeroed, header set to
    /// (`page_id`, `page_type`). A page whose redo since the last checkpoint *begins* with
    /// `PageInit` can be rebuilt from redo alone (init-on-flush, MariaDB MDEV-19738).
    PageInit {
        /// The page.
        page_id: PageId,
        /// Its new type.
        page_type: PageType,
    },
    /// `bytes` written at byte `offset` of the page.
    PageWrite {
        /// The page.
        page_id: PageId,
        /// Byte offset in the page.
        offset: u32,
        /// The new bytes.
        bytes: Vec<u8>,
    },
    /// `len` bytes of the page moved from byte `src` to byte `dst` (as `memmove`: the ranges may
    /// overlap). A B+tree slot-array shift is one such record instead of the shifted bytes.
    PageMove {
        /// The page.
        page_id: PageId,
        /// Where the bytes are read from.
        src: u32,
        /// Where they are written to.
        dst: u32,
        /// How many bytes move.
        len: u32,
    },
    /// A full page image (PostgreSQL full_page_writes). Recovery installs it unconditionally,
    /// then applies later records.
    PageImage {
        /// The page.
        page_id: PageId,
        /// The page's bytes.
        image: Vec<u8>,
    },
    /// The page was freed; it need not be written.
    PageFree {
        /// The page.
        page_id: PageId,
    },
    /// Opaque bytes for upper layers (catalog changes etc.); the log never interprets them.
    Logical {
        /// A tag of the upper layer's choosing.
        kind: u16,
        /// The payload.
        bytes: Vec<u8>,
    },
}

impl Record {
    /// The physical page change the record describes ([`PageOp`], the vocabulary the B-tree and
    /// the transaction guard use too), for `PageWrite` and `PageMove`; `None` for the others.
    /// The op is not checked here: [`PageOp::apply`] does the one bounds check.
    pub fn page_op(&self) -> Option<(PageId, PageOp<'_>)> {
        match self {
            Record::PageWrite {
                page_id,
                offset,
                bytes,
            } => Some((
                *page_id,
                PageOp::Write {
                    offset: *offset as usize,
                    bytes,
                },
            )),
            Record::PageMove {
                page_id,
                src,
                dst,
                len,
            } => Some((
                *page_id,
                PageOp::Move {
                    src: *src as usize,
                    dst: *dst as usize,
                    len: *len as usize,
                },
            )),
            _ => None,
        }
    }

    /// The record of a page change (the inverse of [`Record::page_op`]); `None` when an offset
    /// or length does not fit the record's 32-bit fields.
    pub fn from_page_op(page_id: PageId, op: PageOp<'_>) -> Option<Record> {
        Some(match op {
            PageOp::Write { offset, bytes } => Record::PageWrite {
                page_id,
                offset: u32::try_from(offset).ok()?,
                bytes: bytes.to_vec(),
            },
            PageOp::Move { src, dst, len } => Record::PageMove {
                page_id,
                src: u32::try_from(src).ok()?,
                dst: u32::try_from(dst).ok()?,
                len: u32::try_from(len).ok()?,
            },
        })
    }

    /// The page the record is about, if any.
    pub fn page_id(&self) -> Option<PageId> {
        match self {
            Record::PageInit { page_id, .. }
            | Record::PageWrite { page_id, .. }
            | Record::PageMove { page_id, .. }
            | Record::PageImage { page_id, .. }
            | Record::PageFree { page_id } => Some(*page_id),
            Record::Logical { .. } => None,
        }
    }

    /// Bytes this record takes in the log.
    pub fn encoded_len(&self) -> usize {
        1 + match self {
            Record::PageInit { .. } => 8 + 2,
            Record::PageWrite { bytes, .. } => 8 + 4 + 4 + bytes.len(),
            Record::PageMove { .. } => 8 + 4 + 4 + 4,
            Record::PageImage { image, .. } => 8 + 4 + image.len(),
            Record::PageFree { .. } => 8,
            Record::Logical { bytes, .. } => 2 + 4 + bytes.len(),
        }
    }
}

/// Bytes a group of `records` takes in the log (header and commit marker included).
pub fn group_len(records: &[Record]) -> u64 {
    GROUP_OVERHEAD as u64 + records.iter().map(|r| r.encoded_len() as u64).sum::<u64>()
}

/// Appends the encoding of one group to `out`. Fails if the group does not fit the 32-bit
/// length field (the caller checks the log's own limits); returns the group's length.
pub fn encode_group(records: &[Record], out: &mut Vec<u8>) -> Result<usize, u64> {
    let len = group_len(records);
    if len > u32::MAX as u64 || records.len() > u32::MAX as usize {
        return Err(len);
    }
    let n = records.len() as u32;
    out.reserve(len as usize);
    out.push(GROUP_TAG);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    for r in records {
        match r {
            Record::PageInit { page_id, page_type } => {
                out.push(T_PAGE_INIT);
                out.extend_from_slice(&page_id.0.to_le_bytes());
                out.extend_from_slice(&page_type.0.to_le_bytes());
            }
            Record::PageWrite {
                page_id,
                offset,
                bytes,
            } => {
                out.push(T_PAGE_WRITE);
                out.extend_from_slice(&page_id.0.to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
            Record::PageMove {
                page_id,
                src,
                dst,
                len,
            } => {
                out.push(T_PAGE_MOVE);
                out.extend_from_slice(&page_id.0.to_le_bytes());
                out.extend_from_slice(&src.to_le_bytes());
                out.extend_from_slice(&dst.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
            Record::PageImage { page_id, image } => {
                out.push(T_PAGE_IMAGE);
                out.extend_from_slice(&page_id.0.to_le_bytes());
                out.extend_from_slice(&(image.len() as u32).to_le_bytes());
                out.extend_from_slice(image);
            }
            Record::PageFree { page_id } => {
                out.push(T_PAGE_FREE);
                out.extend_from_slice(&page_id.0.to_le_bytes());
            }
            Record::Logical { kind, bytes } => {
                out.push(T_LOGICAL);
                out.extend_from_slice(&kind.to_le_bytes());
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }
    out.push(COMMIT_TAG);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    Ok(len as usize)
}

/// Reads the length field of a group header (`bytes` must start with the header).
pub(crate) fn header_len(bytes: &[u8]) -> Option<u32> {
    if bytes.len() < GROUP_HEADER || bytes[0] != GROUP_TAG {
        return None;
    }
    Some(u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]))
}

/// A bounds-checked little-endian reader.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "record runs past the group end (needs {n} bytes at offset {})",
                    self.pos
                )
            })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn vec(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

/// Decodes one whole group (exactly its bytes: header, records, commit marker). Never panics.
pub fn decode_group(bytes: &[u8]) -> Result<Vec<Record>, String> {
    if bytes.len() < GROUP_OVERHEAD {
        return Err(format!(
            "group of {} bytes is shorter than the {GROUP_OVERHEAD}-byte minimum",
            bytes.len()
        ));
    }
    let mut r = Reader { bytes, pos: 0 };
    let tag = r.u8()?;
    if tag != GROUP_TAG {
        return Err(format!(
            "group starts with tag {tag:#04x}, not {GROUP_TAG:#04x}"
        ));
    }
    let len = r.u32()? as usize;
    if len != bytes.len() {
        return Err(format!(
            "group header says {len} bytes, the group has {}",
            bytes.len()
        ));
    }
    let n = r.u32()?;
    let body_end = len - 9;
    // Each record takes at least 9 bytes: refuse absurd counts before allocating.
    let cap = (n as usize).min(body_end / 9 + 1);
    let mut records = Vec::with_capacity(cap);
    for i in 0..n {
        if r.pos >= body_end {
            return Err(format!(
                "group claims {n} records but its body ends after {i}"
            ));
        }
        let t = r.u8()?;
        let rec = match t {
            T_PAGE_INIT => Record::PageInit {
                page_id: PageId(r.u64()?),
                page_type: PageType(r.u16()?),
            },
            T_PAGE_WRITE => {
                let page_id = PageId(r.u64()?);
                let offset = r.u32()?;
                Record::PageWrite {
                    page_id,
                    offset,
                    bytes: r.vec()?,
                }
            }
            T_PAGE_MOVE => Record::PageMove {
                page_id: PageId(r.u64()?),
                src: r.u32()?,
                dst: r.u32()?,
                len: r.u32()?,
            },
            T_PAGE_IMAGE => {
                let page_id = PageId(r.u64()?);
                Record::PageImage {
                    page_id,
                    image: r.vec()?,
                }
            }
            T_PAGE_FREE => Record::PageFree {
                page_id: PageId(r.u64()?),
            },
            T_LOGICAL => {
                let kind = r.u16()?;
                Record::Logical {
                    kind,
                    bytes: r.vec()?,
                }
            }
            other => return Err(format!("record {i} has unknown type {other:#04x}")),
        };
        if r.pos > body_end {
            return Err(format!("record {i} runs into the commit marker"));
        }
        records.push(rec);
    }
    if r.pos != body_end {
        return Err(format!(
            "{} stray bytes between the last record and the commit marker",
            body_end - r.pos
        ));
    }
    let tag = r.u8()?;
    let len2 = r.u32()? as usize;
    let n2 = r.u32()?;
    if tag != COMMIT_TAG || len2 != len || n2 != n {
        return Err(format!(
            "commit marker (tag {tag:#04x}, length {len2}, count {n2}) does not match the header (length {len}, count {n})"
        ));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::PageInit {
                page_id: PageId(7),
                page_type: PageType::BTREE_LEAF,
            },
            Record::PageWrite {
                page_id: PageId(7),
                offset: 40,
                bytes: vec![1, 2, 3],
            },
            Record::PageImage {
                page_id: PageId(u64::MAX),
                image: vec![9; 100],
            },
            Record::PageMove {
                page_id: PageId(7),
                src: 56,
                dst: 60,
                len: 400,
            },
            Record::PageFree { page_id: PageId(3) },
            Record::Logical {
                kind: 0xBEEF,
                bytes: vec![],
            },
        ]
    }

    #[test]
    fn groups_round_trip() {
        for records in [sample(), vec![]] {
            let mut out = vec![0xAA]; // encoding appends
            let n = encode_group(&records, &mut out).unwrap();
            assert_eq!(n as u64, group_len(&records));
            assert_eq!(out.len(), n + 1);
            assert_eq!(decode_group(&out[1..]).unwrap(), records);
            assert_eq!(header_len(&out[1..]), Some(n as u32));
        }
    }

    #[test]
    fn exact_bytes_of_a_small_group() {
        let mut out = Vec::new();
        encode_group(&[Record::PageFree { page_id: PageId(2) }], &mut out).unwrap();
        let expect: Vec<u8> = [
            &[0x47][..],
            &27u32.to_le_bytes(),
            &1u32.to_le_bytes(),
            &[4],
            &2u64.to_le_bytes(),
            &[0x43],
            &27u32.to_le_bytes(),
            &1u32.to_le_bytes(),
        ]
        .concat();
        assert_eq!(out, expect);
    }

    /// Breaks the invariant on purpose: every single-byte change and every truncation of a valid
    /// group is either rejected or decodes to something else than the original only where the
    /// changed byte is record *content*; framing damage is always caught.
    #[test]
    fn framing_damage_is_rejected() {
        let records = sample();
        let mut g = Vec::new();
        encode_group(&records, &mut g).unwrap();
        for cut in 0..g.len() {
            assert!(decode_group(&g[..cut]).is_err(), "truncated at {cut}");
        }
        let mut longer = g.clone();
        longer.push(0);
        assert!(decode_group(&longer).is_err());
        // Header, count and commit marker bytes.
        let l = g.len();
        for i in (0..9).chain(l - 9..l) {
            let mut bad = g.clone();
            bad[i] ^= 0x10;
            assert!(decode_group(&bad).is_err(), "byte {i}");
        }
        // A record type byte.
        let mut bad = g.clone();
        bad[9] = 0x77;
        assert!(decode_group(&bad).is_err());
    }

    #[test]
    fn huge_counts_do_not_allocate_or_panic() {
        let mut g = vec![GROUP_TAG];
        g.extend_from_slice(&18u32.to_le_bytes());
        g.extend_from_slice(&u32::MAX.to_le_bytes());
        g.push(COMMIT_TAG);
        g.extend_from_slice(&18u32.to_le_bytes());
        g.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_group(&g).is_err());
    }
}
