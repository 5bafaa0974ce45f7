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
//! Records are encoded one by one (a tag, then fixed-width fields), except that a run of
//! consecutive `PageWrite`/`PageMove` records of one page — an insert into a B-tree node is
//! four — may be one *page-ops* item (tag 7): the page id once, then each op with LEB128
//! offsets and lengths (log format version 3; [`Encoding`]). The encoder picks, per run, the
//! shorter of the two forms, so the compact encoding is never longer than the plain one
//! ([`group_len_bound`]). `n` counts records, not items.
//!
//! Invariant: [`decode_group`] accepts what [`encode_group`] produces in either encoding and
//! returns the records that were encoded; anything else (wrong tags, lengths that disagree,
//! trailing bytes, unknown record types, empty or overlong page-ops runs, non-canonical or
//! oversized LEB128 numbers) is an error, never a panic (fuzz target `log_block`).

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
/// A run of writes and moves of one page (format version 3).
const T_PAGE_OPS: u8 = 7;
/// A page made a copy of another (format version 4).
const T_PAGE_COPY: u8 = 8;
/// Op kinds inside a page-ops item.
const OP_WRITE: u8 = 0;
const OP_MOVE: u8 = 1;

/// How a group's records are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// One item per record, fixed-width fields (log format versions 1 and 2).
    Plain,
    /// Runs of writes and moves of one page as page-ops items where that is shorter (version 3).
    Compact,
}

/// Bytes of `v` as LEB128.
fn leb_len(v: u32) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0xfff_ffff => 4,
        _ => 5,
    }
}

fn put_leb(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The page of a record a page-ops item can hold (a write or a move).
fn op_page(r: &Record) -> Option<PageId> {
    match r {
        Record::PageWrite { page_id, .. } | Record::PageMove { page_id, .. } => Some(*page_id),
        _ => None,
    }
}

/// An op's bytes inside a page-ops item.
fn op_len(r: &Record) -> usize {
    match r {
        Record::PageWrite { offset, bytes, .. } => {
            1 + leb_len(*offset) + leb_len(bytes.len() as u32) + bytes.len()
        }
        Record::PageMove { src, dst, len, .. } => 1 + leb_len(*src) + leb_len(*dst) + leb_len(*len),
        _ => 0,
    }
}

/// The most ops one page-ops item holds.
const MAX_RUN: usize = u16::MAX as usize;

/// How the records from `i` on are encoded next: `(count, compact bytes)` when the run of
/// writes and moves of one page starting there is shorter as one page-ops item, else `None`
/// (the record at `i` goes alone, plainly).
fn compact_run(records: &[Record], i: usize) -> Option<(usize, usize)> {
    let page = op_page(&records[i])?;
    let mut k = 0;
    let (mut compact, mut plain) = (0usize, 0usize);
    while let Some(r) = records.get(i + k) {
        if k == MAX_RUN || op_page(r) != Some(page) {
            break;
        }
        compact += op_len(r);
        plain += r.encoded_len();
        k += 1;
    }
    let compact = compact + 1 + 8 + leb_len(k as u32);
    (compact < plain).then_some((k, compact))
}

/// Bytes a [`Record::PageWrite`] keeps inline.
pub const WRITE_INLINE: usize = 16;

/// The bytes of a [`Record::PageWrite`]: up to [`WRITE_INLINE`] inline, more on the heap
/// (`Vec<u8>` and byte slices convert with `into()` / `from_slice`).
pub type WriteBytes = smallvec::SmallVec<[u8; WRITE_INLINE]>;

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
        /// The new bytes (up to [`WRITE_INLINE`] of them kept in the record itself: a B-tree
        /// insert's slot and count writes allocate nothing).
        bytes: WriteBytes,
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
    /// Page `page_id` becomes a copy of page `from` as `from` is at this point of the log: its
    /// header set to (`page_id`, `from`'s page type) with every other header byte and the
    /// trailer zero, every payload byte copied (log format version 4). A B-tree split makes its
    /// new right half this way (then drops the left half's slots from it) instead of logging
    /// half a page of cell bytes. Replay needs `from` as it was at this point: the pool writes
    /// `page_id` durably before any later version of `from` (docs/design.md, "Page copies").
    PageCopy {
        /// The page made (the copy).
        page_id: PageId,
        /// The page copied.
        from: PageId,
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
                bytes: WriteBytes::from_slice(bytes),
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
            | Record::PageFree { page_id }
            | Record::PageCopy { page_id, .. } => Some(*page_id),
            Record::Logical { .. } => None,
        }
    }

    /// Bytes this record takes in the log on its own (the plain encoding, [`Encoding::Plain`]).
    pub fn encoded_len(&self) -> usize {
        1 + match self {
            Record::PageInit { .. } => 8 + 2,
            Record::PageWrite { bytes, .. } => 8 + 4 + 4 + bytes.len(),
            Record::PageMove { .. } => 8 + 4 + 4 + 4,
            Record::PageImage { image, .. } => 8 + 4 + image.len(),
            Record::PageFree { .. } => 8,
            Record::PageCopy { .. } => 8 + 8,
            Record::Logical { bytes, .. } => 2 + 4 + bytes.len(),
        }
    }
}

/// Bytes a group of `records` takes in the log (header and commit marker included) as
/// [`encode_group`] writes it (the current format's compact encoding).
pub fn group_len(records: &[Record]) -> u64 {
    group_len_as(records, Encoding::Compact)
}

/// The most bytes a group of `records` takes in any encoding (the plain one: the compact one
/// is never longer) — a bound that holds whatever the log's format version.
pub fn group_len_bound(records: &[Record]) -> u64 {
    group_len_as(records, Encoding::Plain)
}

/// Bytes a group of `records` takes in `encoding`.
pub fn group_len_as(records: &[Record], encoding: Encoding) -> u64 {
    let mut n = GROUP_OVERHEAD as u64;
    let mut i = 0;
    while let Some(r) = records.get(i) {
        // Runs are looked for only where they count (the plain length needs none: it is
        // computed for every group appended, and for every commit's log-space bound).
        let run = match encoding {
            Encoding::Compact => compact_run(records, i),
            Encoding::Plain => None,
        };
        match run {
            Some((k, bytes)) => {
                n += bytes as u64;
                i += k;
            }
            None => {
                n += r.encoded_len() as u64;
                i += 1;
            }
        }
    }
    n
}

/// [`encode_group`] in the current format (compact runs).
pub fn encode_group(records: &[Record], out: &mut Vec<u8>) -> Result<usize, u64> {
    encode_group_as(records, out, Encoding::Compact)
}

/// Appends the encoding of one group to `out` in `encoding`. Fails if the group does not fit
/// the 32-bit length field (the caller checks the log's own limits); returns the group's length.
pub fn encode_group_as(
    records: &[Record],
    out: &mut Vec<u8>,
    encoding: Encoding,
) -> Result<usize, u64> {
    // The plain length bounds every encoding and costs no run choices: only a group whose
    // bound passes the 32-bit limit pays for its exact length before it is written.
    let bound = group_len_as(records, Encoding::Plain);
    if bound > u32::MAX as u64 || records.len() > u32::MAX as usize {
        let len = group_len_as(records, encoding);
        if len > u32::MAX as u64 || records.len() > u32::MAX as usize {
            return Err(len);
        }
    }
    let n = records.len() as u32;
    let start = out.len();
    out.reserve(bound.min(u32::MAX as u64) as usize);
    out.push(GROUP_TAG);
    // The length, known once the records are written (one pass over the run choices).
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&n.to_le_bytes());
    let mut i = 0;
    while let Some(r) = records.get(i) {
        if encoding == Encoding::Compact {
            if let Some((k, _)) = compact_run(records, i) {
                encode_run(&records[i..i + k], out);
                i += k;
                continue;
            }
        }
        i += 1;
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
            Record::PageCopy { page_id, from } => {
                out.push(T_PAGE_COPY);
                out.extend_from_slice(&page_id.0.to_le_bytes());
                out.extend_from_slice(&from.0.to_le_bytes());
            }
            Record::Logical { kind, bytes } => {
                out.push(T_LOGICAL);
                out.extend_from_slice(&kind.to_le_bytes());
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }
    let len = out.len() - start + (GROUP_OVERHEAD - GROUP_HEADER);
    let len32 = (len as u32).to_le_bytes();
    out[start + 1..start + 5].copy_from_slice(&len32);
    out.push(COMMIT_TAG);
    out.extend_from_slice(&len32);
    out.extend_from_slice(&n.to_le_bytes());
    debug_assert_eq!(
        len as u64,
        group_len_as(records, encoding),
        "group length as computed"
    );
    Ok(len)
}

/// One page-ops item: `run` is a run of writes and moves of one page ([`compact_run`]).
fn encode_run(run: &[Record], out: &mut Vec<u8>) {
    out.push(T_PAGE_OPS);
    let page = run.first().and_then(op_page).unwrap_or(PageId(0));
    out.extend_from_slice(&page.0.to_le_bytes());
    put_leb(out, run.len() as u32);
    for r in run {
        match r {
            Record::PageWrite { offset, bytes, .. } => {
                out.push(OP_WRITE);
                put_leb(out, *offset);
                put_leb(out, bytes.len() as u32);
                out.extend_from_slice(bytes);
            }
            Record::PageMove { src, dst, len, .. } => {
                out.push(OP_MOVE);
                put_leb(out, *src);
                put_leb(out, *dst);
                put_leb(out, *len);
            }
            _ => debug_assert!(false, "only writes and moves form a run"),
        }
    }
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
    /// A canonical LEB128 number of at most 32 bits (no overlong forms: exactly one byte
    /// string encodes each number).
    fn leb(&mut self) -> Result<u32, String> {
        let mut v: u64 = 0;
        for i in 0..5 {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && b == 0 {
                    return Err(format!("overlong LEB128 number at offset {}", self.pos - 1));
                }
                return u32::try_from(v).map_err(|_| format!("LEB128 number {v} exceeds 32 bits"));
            }
        }
        Err(format!(
            "LEB128 number longer than 5 bytes at offset {}",
            self.pos
        ))
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
    while records.len() < n as usize {
        let i = records.len();
        if r.pos >= body_end {
            return Err(format!(
                "group claims {n} records but its body ends after {i}"
            ));
        }
        let t = r.u8()?;
        if t == T_PAGE_OPS {
            let page_id = PageId(r.u64()?);
            let k = r.leb()? as usize;
            if k == 0 || k > MAX_RUN || k > n as usize - i {
                return Err(format!(
                    "record {i}: a page-ops run of {k} ops (1 to {MAX_RUN}, and {} records left)",
                    n as usize - i
                ));
            }
            for j in 0..k {
                let rec = match r.u8()? {
                    OP_WRITE => {
                        let offset = r.leb()?;
                        let len = r.leb()? as usize;
                        Record::PageWrite {
                            page_id,
                            offset,
                            bytes: WriteBytes::from_slice(r.take(len)?),
                        }
                    }
                    OP_MOVE => Record::PageMove {
                        page_id,
                        src: r.leb()?,
                        dst: r.leb()?,
                        len: r.leb()?,
                    },
                    other => return Err(format!("record {}: unknown page op {other:#04x}", i + j)),
                };
                if r.pos > body_end {
                    return Err(format!("record {} runs into the commit marker", i + j));
                }
                records.push(rec);
            }
            continue;
        }
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
                    bytes: r.vec()?.into(),
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
            T_PAGE_COPY => Record::PageCopy {
                page_id: PageId(r.u64()?),
                from: PageId(r.u64()?),
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
                bytes: vec![1, 2, 3].into(),
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
            Record::PageCopy {
                page_id: PageId(8),
                from: PageId(7),
            },
            Record::Logical {
                kind: 0xBEEF,
                bytes: vec![],
            },
        ]
    }

    /// An insert into a B-tree node: a cell, a slot-array move, a slot and the counts (a run
    /// of four ops on one page), then a plain record and a run of one.
    fn insert_like() -> Vec<Record> {
        let w = |offset: u32, bytes: Vec<u8>| Record::PageWrite {
            page_id: PageId(9),
            offset,
            bytes: bytes.into(),
        };
        vec![
            w(16_000, vec![5; 124]),
            Record::PageMove {
                page_id: PageId(9),
                src: 96,
                dst: 104,
                len: 512,
            },
            w(96, vec![1; 8]),
            w(36, vec![2; 8]),
            Record::PageFree { page_id: PageId(9) },
            w(40, vec![3]),
        ]
    }

    #[test]
    fn groups_round_trip() {
        for records in [sample(), vec![], insert_like()] {
            for enc in [Encoding::Plain, Encoding::Compact] {
                let mut out = vec![0xAA]; // encoding appends
                let n = encode_group_as(&records, &mut out, enc).unwrap();
                assert_eq!(n as u64, group_len_as(&records, enc));
                assert_eq!(out.len(), n + 1);
                assert_eq!(decode_group(&out[1..]).unwrap(), records);
                assert_eq!(header_len(&out[1..]), Some(n as u32));
            }
            assert_eq!(
                group_len_bound(&records),
                group_len_as(&records, Encoding::Plain)
            );
            assert!(group_len(&records) <= group_len_bound(&records));
        }
    }

    /// The compact encoding of an insert: 212 plain bytes of records become 166.
    #[test]
    fn an_insert_is_one_compact_item() {
        let records = insert_like();
        let plain: usize = records[..4].iter().map(Record::encoded_len).sum();
        assert_eq!(plain, 141 + 21 + 25 + 25);
        let mut g = Vec::new();
        encode_group(&records[..4], &mut g).unwrap();
        let body = &g[GROUP_HEADER..g.len() - (GROUP_OVERHEAD - GROUP_HEADER)];
        // tag, page, count 4; write: kind, offset 16000 (2 bytes), len 124 (1 byte), cell;
        // move: kind, 96, 104 (1 byte each), 512 (2 bytes); two 8-byte writes at 96 and 36.
        assert_eq!(
            body.len(),
            (1 + 8 + 1) + (1 + 2 + 1 + 124) + (1 + 1 + 1 + 2) + 2 * (1 + 1 + 1 + 8)
        );
        assert_eq!(body[0], T_PAGE_OPS);
        assert_eq!(&body[1..9], &9u64.to_le_bytes());
        assert_eq!(body[9], 4);
        assert_eq!(
            &body[10..14],
            &[
                OP_WRITE,
                0x80 | (16_000 & 0x7f) as u8,
                (16_000 >> 7) as u8,
                124
            ]
        );
    }

    /// A run is cut at another page's record, at a record of another kind, and never compact
    /// when that is longer (a lone write at a huge offset stays plain).
    #[test]
    fn runs_are_cut_and_chosen_by_length() {
        let mut r = insert_like();
        r.insert(
            2,
            Record::PageMove {
                page_id: PageId(8),
                src: 1,
                dst: 2,
                len: 3,
            },
        );
        assert_eq!(compact_run(&r, 0).map(|(k, _)| k), Some(2));
        assert_eq!(compact_run(&r, 3).map(|(k, _)| k), Some(2));
        assert_eq!(compact_run(&r, 5), None, "a free is not a page op");
        let far = [Record::PageWrite {
            page_id: PageId(1),
            offset: u32::MAX,
            bytes: vec![0; 300].into(),
        }];
        assert_eq!(compact_run(&far, 0), None);
        assert_eq!(group_len(&far), group_len_bound(&far));
    }

    /// Breaks the compact item's rules on purpose: an empty run, a run longer than the records
    /// left, an unknown op kind and overlong or oversized LEB128 numbers are all refused.
    #[test]
    fn bad_page_ops_items_are_rejected() {
        let records = insert_like();
        let mut g = Vec::new();
        encode_group(&records[..4], &mut g).unwrap();
        let count = GROUP_HEADER + 9;
        let mut bad = g.clone();
        bad[count] = 0;
        assert!(decode_group(&bad).unwrap_err().contains("run of 0"));
        let mut bad = g.clone();
        bad[count] = 5;
        assert!(decode_group(&bad).unwrap_err().contains("run of 5"));
        let mut bad = g.clone();
        bad[count + 1] = 9;
        assert!(decode_group(&bad).unwrap_err().contains("unknown page op"));
        // Overlong: 124 as two bytes (0xfc 0x00) instead of one; oversized: 2^35.
        let mut r = Reader {
            bytes: &[0xfc, 0x00],
            pos: 0,
        };
        assert!(r.leb().unwrap_err().contains("overlong"));
        let mut r = Reader {
            bytes: &[0x80, 0x80, 0x80, 0x80, 0x10],
            pos: 0,
        };
        assert!(r.leb().unwrap_err().contains("exceeds 32 bits"));
        let mut r = Reader {
            bytes: &[0x80; 6],
            pos: 0,
        };
        assert!(r.leb().is_err());
        for v in [0, 1, 127, 128, 16_383, 16_384, u32::MAX] {
            let mut out = Vec::new();
            put_leb(&mut out, v);
            assert_eq!(out.len(), leb_len(v));
            assert_eq!(
                Reader {
                    bytes: &out,
                    pos: 0
                }
                .leb(),
                Ok(v)
            );
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
        for (records, enc) in [
            (sample(), Encoding::Plain),
            (sample(), Encoding::Compact),
            (insert_like(), Encoding::Compact),
        ] {
            framing_damage_is_rejected_in(&records, enc);
        }
    }

    fn framing_damage_is_rejected_in(records: &[Record], enc: Encoding) {
        let mut g = Vec::new();
        encode_group_as(records, &mut g, enc).unwrap();
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
