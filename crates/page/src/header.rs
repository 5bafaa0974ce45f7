//! The page header and trailer, sealing a page before it is written and verifying it after it is
//! read.

use crate::{Checksum, Lsn, PageId};
use std::fmt;
use std::path::PathBuf;

/// Bytes at the start of every page that belong to the page format.
pub const PAGE_HEADER_SIZE: usize = 32;
/// Bytes at the end of every page that belong to the page format (a copy of the page LSN).
pub const PAGE_TRAILER_SIZE: usize = 8;

const OFF_CHECKSUM: usize = 0;
const OFF_ALGORITHM: usize = 4;
const OFF_FLAGS: usize = 5;
const OFF_TYPE: usize = 6;
const OFF_PAGE_ID: usize = 8;
const OFF_LSN: usize = 16;
const OFF_FILE_CHECKPOINT: usize = 24;
/// Flags bit 0: bytes 24..32 hold the file's checkpoint LSN ([`set_file_checkpoint`]).
const FLAG_FILE_CHECKPOINT: u8 = 1;

/// What a page holds. Keel's layers define their own values; `0` is reserved for pages that were
/// never written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PageType(pub u16);

impl PageType {
    /// Never written (all zero).
    pub const UNWRITTEN: PageType = PageType(0);
    /// A page that was freed and may be reused.
    pub const FREE: PageType = PageType(1);
    /// The store's superblock / metadata page.
    pub const META: PageType = PageType(2);
    /// A B+tree leaf.
    pub const BTREE_LEAF: PageType = PageType(3);
    /// A B+tree inner node.
    pub const BTREE_INNER: PageType = PageType(4);
    /// A page holding part of a large value.
    pub const OVERFLOW: PageType = PageType(5);
    /// A page of raw bytes used by tests and benchmarks.
    pub const RAW: PageType = PageType(6);
}

/// The decoded header of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    /// The page's own id (its position in the file).
    pub page_id: PageId,
    /// End LSN of the newest redo record applied to the page.
    pub lsn: Lsn,
    /// What the page holds.
    pub page_type: PageType,
    /// The checksum stored in the page.
    pub checksum: u32,
    /// The checksum algorithm tag stored in the page.
    pub algorithm_tag: u8,
}

impl PageHeader {
    /// Reads the header fields of `page` without verifying anything.
    ///
    /// Returns `None` if `page` is shorter than a header plus trailer.
    pub fn read(page: &[u8]) -> Option<PageHeader> {
        if page.len() < PAGE_HEADER_SIZE + PAGE_TRAILER_SIZE {
            return None;
        }
        Some(PageHeader {
            checksum: read_u32(page, OFF_CHECKSUM),
            algorithm_tag: page[OFF_ALGORITHM],
            page_type: PageType(read_u16(page, OFF_TYPE)),
            page_id: PageId(read_u64(page, OFF_PAGE_ID)),
            lsn: Lsn(read_u64(page, OFF_LSN)),
        })
    }

    /// Writes page id, type and LSN into `page` (checksum and trailer are set by [`seal`]).
    ///
    /// # Panics
    /// If `page` is shorter than a header plus trailer (a programming error: pages are sized by
    /// [`crate::PageSize`]).
    pub fn init(page: &mut [u8], page_id: PageId, page_type: PageType, lsn: Lsn) {
        assert!(page.len() >= PAGE_HEADER_SIZE + PAGE_TRAILER_SIZE);
        page[OFF_FLAGS] = 0;
        page[OFF_TYPE..OFF_TYPE + 2].copy_from_slice(&page_type.0.to_le_bytes());
        page[OFF_PAGE_ID..OFF_PAGE_ID + 8].copy_from_slice(&page_id.0.to_le_bytes());
        set_lsn(page, lsn);
    }
}

/// Sets the page type in the header of `page`.
pub fn set_page_type(page: &mut [u8], page_type: PageType) {
    page[OFF_TYPE..OFF_TYPE + 2].copy_from_slice(&page_type.0.to_le_bytes());
}

/// Sets the page LSN in the header of `page` (the trailer copy is written by [`seal`]).
pub fn set_lsn(page: &mut [u8], lsn: Lsn) {
    page[OFF_LSN..OFF_LSN + 8].copy_from_slice(&lsn.0.to_le_bytes());
}

/// Records in `page` (the first page of a data file) that every change the file needs up to
/// `lsn` is durable in it: sets flags bit 0 and writes `lsn` into bytes 24..32 (the checksum and
/// trailer are set by [`seal`]). A page whose flag is clear has no such record
/// ([`file_checkpoint`] returns `None`): pages other than a file's first, and first pages written
/// before the field existed.
pub fn set_file_checkpoint(page: &mut [u8], lsn: Lsn) {
    page[OFF_FLAGS] |= FLAG_FILE_CHECKPOINT;
    page[OFF_FILE_CHECKPOINT..OFF_FILE_CHECKPOINT + 8].copy_from_slice(&lsn.0.to_le_bytes());
}

/// The file checkpoint LSN recorded by [`set_file_checkpoint`], or `None` if the page has none
/// (or is shorter than a header).
pub fn file_checkpoint(page: &[u8]) -> Option<Lsn> {
    if page.len() < PAGE_HEADER_SIZE || page[OFF_FLAGS] & FLAG_FILE_CHECKPOINT == 0 {
        return None;
    }
    Some(Lsn(read_u64(page, OFF_FILE_CHECKPOINT)))
}

/// Whether two images of one page hold the same version: every byte equal except the checksum
/// and what [`set_file_checkpoint`] rewrites in place without changing the LSN (the flags and
/// the record). Without a page checksum a page torn between its first and last sector passes
/// [`verify`], so a torn copy is told from a whole one of the same LSN this way.
pub fn same_version(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.len() >= PAGE_HEADER_SIZE
        && a[OFF_ALGORITHM] == b[OFF_ALGORITHM]
        && a[OFF_TYPE..OFF_FILE_CHECKPOINT] == b[OFF_TYPE..OFF_FILE_CHECKPOINT]
        && a[PAGE_HEADER_SIZE..] == b[PAGE_HEADER_SIZE..]
}

/// Prepares `page` for writing: records the algorithm tag, copies the header LSN into the
/// trailer and stores the checksum of bytes `4..len`.
pub fn seal(page: &mut [u8], algorithm: Checksum) {
    let len = page.len();
    page[OFF_ALGORITHM] = algorithm.tag();
    let lsn = read_u64(page, OFF_LSN);
    page[len - PAGE_TRAILER_SIZE..].copy_from_slice(&lsn.to_le_bytes());
    let sum = algorithm.compute(&page[OFF_ALGORITHM..]);
    page[OFF_CHECKSUM..OFF_CHECKSUM + 4].copy_from_slice(&sum.to_le_bytes());
}

/// What a verified page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageState {
    /// Every byte is zero: the page was never written.
    Unwritten,
    /// The page passed every check.
    Valid(PageHeader),
}

/// Why a page failed verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorruptionDetail {
    /// The stored checksum differs from the one computed over the bytes.
    ChecksumMismatch {
        /// Checksum computed over the page's bytes.
        expected: u32,
        /// Checksum stored in the page.
        found: u32,
    },
    /// The page carries another page's id: a misdirected or lost write.
    PageIdMismatch {
        /// Page id stored in the page.
        found: PageId,
    },
    /// Header LSN and trailer LSN differ: the page was torn.
    TornPage {
        /// LSN in the header.
        header_lsn: Lsn,
        /// LSN in the trailer.
        trailer_lsn: Lsn,
    },
    /// The page was sealed with another checksum algorithm than the store uses.
    AlgorithmMismatch {
        /// Tag the store expects.
        expected: u8,
        /// Tag stored in the page.
        found: u8,
    },
    /// The buffer is not a page of a supported size.
    BadLength {
        /// Length of the buffer.
        len: usize,
    },
}

impl fmt::Display for CorruptionDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorruptionDetail::ChecksumMismatch { expected, found } => write!(
                f,
                "checksum mismatch: expected {expected:#010x}, found {found:#010x}"
            ),
            CorruptionDetail::PageIdMismatch { found } => {
                write!(f, "misdirected write: the page holds {found}")
            }
            CorruptionDetail::TornPage {
                header_lsn,
                trailer_lsn,
            } => write!(f, "torn page: header {header_lsn}, trailer {trailer_lsn}"),
            CorruptionDetail::AlgorithmMismatch { expected, found } => {
                write!(f, "checksum algorithm tag {found}, expected {expected}")
            }
            CorruptionDetail::BadLength { len } => write!(f, "{len} bytes is not a page size"),
        }
    }
}

/// Errors from verifying a page.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum PageError {
    /// The page's bytes are not a valid page: never to be used as data.
    #[error("corruption in {file}, {page_id}: {detail}")]
    Corruption {
        /// The file the page was read from.
        file: PathBuf,
        /// The page id (position) it was read from.
        page_id: PageId,
        /// What was expected and what was found.
        detail: CorruptionDetail,
    },
}

/// Verifies a page read from position `page_id` of `file`.
///
/// Checks, in order: length, all-zero ([`PageState::Unwritten`]), algorithm tag, checksum, page
/// id, trailer LSN. Never panics.
pub fn verify(
    page: &[u8],
    page_id: PageId,
    algorithm: Checksum,
    file: &std::path::Path,
) -> Result<PageState, PageError> {
    let corrupt = |detail| PageError::Corruption {
        file: file.to_path_buf(),
        page_id,
        detail,
    };
    if crate::PageSize::from_bytes(page.len()).is_none() {
        return Err(corrupt(CorruptionDetail::BadLength { len: page.len() }));
    }
    if crate::is_zero(page) {
        return Ok(PageState::Unwritten);
    }
    let header =
        PageHeader::read(page).ok_or(corrupt(CorruptionDetail::BadLength { len: page.len() }))?;
    if header.algorithm_tag != algorithm.tag() {
        return Err(corrupt(CorruptionDetail::AlgorithmMismatch {
            expected: algorithm.tag(),
            found: header.algorithm_tag,
        }));
    }
    if algorithm != Checksum::None {
        let computed = algorithm.compute(&page[OFF_ALGORITHM..]);
        if computed != header.checksum {
            return Err(corrupt(CorruptionDetail::ChecksumMismatch {
                expected: computed,
                found: header.checksum,
            }));
        }
    }
    if header.page_id != page_id {
        return Err(corrupt(CorruptionDetail::PageIdMismatch {
            found: header.page_id,
        }));
    }
    let trailer_lsn = Lsn(read_u64(page, page.len() - PAGE_TRAILER_SIZE));
    if trailer_lsn != header.lsn {
        return Err(corrupt(CorruptionDetail::TornPage {
            header_lsn: header.lsn,
            trailer_lsn,
        }));
    }
    Ok(PageState::Valid(header))
}

fn read_u16(b: &[u8], off: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[off..off + 2]);
    u16::from_le_bytes(a)
}

fn read_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn read_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PageSize;
    use proptest::prelude::*;
    use std::path::Path;

    fn sealed(size: PageSize, id: u64, lsn: u64, algo: Checksum) -> Vec<u8> {
        let mut p = vec![0u8; size.bytes()];
        PageHeader::init(&mut p, PageId(id), PageType::RAW, Lsn(lsn));
        for (i, b) in p[PAGE_HEADER_SIZE..size.bytes() - PAGE_TRAILER_SIZE]
            .iter_mut()
            .enumerate()
        {
            *b = (i as u8).wrapping_mul(31).wrapping_add(id as u8);
        }
        seal(&mut p, algo);
        p
    }

    fn detail(r: Result<PageState, PageError>) -> CorruptionDetail {
        match r {
            Err(PageError::Corruption { detail, .. }) => detail,
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn sealed_pages_verify_for_every_size_and_algorithm() {
        for size in PageSize::ALL {
            for algo in Checksum::ALL {
                let p = sealed(size, 7, 1234, algo);
                let st = verify(&p, PageId(7), algo, Path::new("data")).unwrap();
                match st {
                    PageState::Valid(h) => {
                        assert_eq!(h.page_id, PageId(7));
                        assert_eq!(h.lsn, Lsn(1234));
                        assert_eq!(h.page_type, PageType::RAW);
                    }
                    PageState::Unwritten => panic!("sealed page seen as unwritten"),
                }
            }
        }
    }

    /// The file checkpoint is absent until set, survives sealing and verifying, and is covered
    /// by the checksum: a stamp changed after sealing is caught.
    #[test]
    fn the_file_checkpoint_is_absent_until_set_and_checksummed() {
        let mut p = sealed(PageSize::K4, 0, 50, Checksum::Crc32c);
        assert_eq!(file_checkpoint(&p), None);
        set_file_checkpoint(&mut p, Lsn(77));
        seal(&mut p, Checksum::Crc32c);
        assert!(verify(&p, PageId(0), Checksum::Crc32c, Path::new("d")).is_ok());
        assert_eq!(file_checkpoint(&p), Some(Lsn(77)));
        p[24] ^= 1;
        assert!(verify(&p, PageId(0), Checksum::Crc32c, Path::new("d")).is_err());
    }

    /// The file checkpoint stamp and the checksum leave the version as it is; any other byte,
    /// the LSN or a payload byte torn in, makes it another.
    #[test]
    fn a_stamp_keeps_the_version_and_any_other_byte_changes_it() {
        let p = sealed(PageSize::K4, 0, 50, Checksum::Crc32c);
        let mut stamped = p.clone();
        set_file_checkpoint(&mut stamped, Lsn(77));
        seal(&mut stamped, Checksum::Crc32c);
        assert_ne!(stamped[..4], p[..4], "the stamp changes the checksum");
        assert!(same_version(&p, &stamped));
        for at in [4, 6, 8, 16, 32, 2048, 4095] {
            let mut q = p.clone();
            q[at] ^= 1;
            assert!(!same_version(&p, &q), "byte {at}");
        }
        assert!(!same_version(&p, &p[..2048]));
    }

    #[test]
    fn all_zero_page_is_unwritten_not_corrupt() {
        let p = vec![0u8; 16384];
        assert_eq!(
            verify(&p, PageId(3), Checksum::Crc32c, Path::new("d")).unwrap(),
            PageState::Unwritten
        );
    }

    /// Invariant 1, broken on purpose: flip one payload bit and the checksum catches it, and the
    /// error names the file, the page, and both checksums.
    #[test]
    fn a_flipped_bit_is_reported_with_file_page_and_checksums() {
        for algo in [Checksum::Crc32c, Checksum::Legacy] {
            let mut p = sealed(PageSize::K16, 42, 99, algo);
            p[5000] ^= 0x10;
            let err = verify(&p, PageId(42), algo, Path::new("/db/data.keel")).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("/db/data.keel"), "{msg}");
            assert!(msg.contains("page 42"), "{msg}");
            match detail(Err(err)) {
                CorruptionDetail::ChecksumMismatch { expected, found } => {
                    assert_ne!(expected, found)
                }
                d => panic!("{d:?}"),
            }
        }
    }

    #[test]
    fn a_misdirected_write_is_corruption() {
        let p = sealed(PageSize::K4, 5, 10, Checksum::Crc32c);
        assert_eq!(
            detail(verify(&p, PageId(6), Checksum::Crc32c, Path::new("d"))),
            CorruptionDetail::PageIdMismatch { found: PageId(5) }
        );
    }

    /// Without a checksum, a page torn between its first and last sector is still caught by the
    /// trailer LSN.
    #[test]
    fn a_torn_page_is_caught_by_the_trailer_without_checksum() {
        let old = sealed(PageSize::K16, 1, 100, Checksum::None);
        let new = sealed(PageSize::K16, 1, 200, Checksum::None);
        let mut torn = new.clone();
        torn[16384 - 4096..].copy_from_slice(&old[16384 - 4096..]);
        assert_eq!(
            detail(verify(&torn, PageId(1), Checksum::None, Path::new("d"))),
            CorruptionDetail::TornPage {
                header_lsn: Lsn(200),
                trailer_lsn: Lsn(100)
            }
        );
    }

    #[test]
    fn a_torn_page_is_caught_by_the_checksum() {
        let old = sealed(PageSize::K16, 1, 100, Checksum::Crc32c);
        let mut new = sealed(PageSize::K16, 1, 200, Checksum::Crc32c);
        new[4096..8192].copy_from_slice(&old[4096..8192]);
        new[4096] ^= 1; // make the middle sector differ even if old and new payloads agree
        assert!(matches!(
            detail(verify(&new, PageId(1), Checksum::Crc32c, Path::new("d"))),
            CorruptionDetail::ChecksumMismatch { .. }
        ));
    }

    #[test]
    fn a_page_sealed_with_another_algorithm_is_rejected() {
        let p = sealed(PageSize::K4, 1, 1, Checksum::None);
        assert_eq!(
            detail(verify(&p, PageId(1), Checksum::Crc32c, Path::new("d"))),
            CorruptionDetail::AlgorithmMismatch {
                expected: 1,
                found: 0
            }
        );
    }

    #[test]
    fn odd_lengths_are_rejected_not_panicked_on() {
        for len in [0usize, 1, 39, 4095, 4097] {
            let p = vec![1u8; len];
            assert_eq!(
                detail(verify(&p, PageId(0), Checksum::Crc32c, Path::new("d"))),
                CorruptionDetail::BadLength { len }
            );
        }
    }

    proptest! {
        /// Any single bit flip anywhere in a CRC-32C page is detected.
        #[test]
        fn any_bit_flip_is_detected(bit in 0usize..(4096 * 8)) {
            let mut p = sealed(PageSize::K4, 9, 77, Checksum::Crc32c);
            p[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(verify(&p, PageId(9), Checksum::Crc32c, Path::new("d")).is_err());
        }

        /// Arbitrary bytes never panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..5000), id in any::<u64>()) {
            let _ = verify(&bytes, PageId(id), Checksum::Crc32c, Path::new("d"));
        }
    }
}
