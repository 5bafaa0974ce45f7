//! One vocabulary of physical page change ([`PageOp`]): what the B-tree asks for, what a write
//! transaction's page guard applies and logs, and what recovery replays from the redo log. Every
//! one of them goes through [`PageOp::check`], the one bounds check.
//!
//! Invariants (tests break each):
//! 1. An op changes only the payload: bytes `PAGE_HEADER_SIZE..len - PAGE_TRAILER_SIZE`
//!    ([`payload_range`]). The header and trailer belong to the page layer (id, type, LSN,
//!    checksum) and are never written by an op.
//! 2. [`PageOp::apply`] changes nothing when the check fails, and never panics: offsets and
//!    lengths come from disk during recovery, so every sum is checked.
//! 3. Applying the same op to the same bytes gives the same bytes (redo replay is
//!    deterministic; a move is `memmove`, so overlapping ranges are well defined).

use crate::{PAGE_HEADER_SIZE, PAGE_TRAILER_SIZE};
use std::ops::Range;

/// One physical change of a page's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageOp<'a> {
    /// `bytes` written at byte `offset` of the page.
    Write {
        /// Byte offset in the page (not in the payload).
        offset: usize,
        /// The new bytes.
        bytes: &'a [u8],
    },
    /// `len` bytes moved from `src` to `dst`, as `memmove` (the ranges may overlap).
    Move {
        /// Where the bytes are read from (byte offset in the page).
        src: usize,
        /// Where they are written to (byte offset in the page).
        dst: usize,
        /// How many bytes move.
        len: usize,
    },
}

/// An op that reaches outside the payload of a page of `page_len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{len} bytes at offset {offset} leave the payload {min}..{max} of a {page_len}-byte page")]
pub struct OutsidePayload {
    /// The first byte the op touches (for a move, the range that fails).
    pub offset: usize,
    /// How many bytes.
    pub len: usize,
    /// The payload's first byte.
    pub min: usize,
    /// The payload's end (exclusive).
    pub max: usize,
    /// The page size.
    pub page_len: usize,
}

/// The payload of a page of `page_len` bytes: between the header and the trailer (empty for a
/// buffer too short to hold both).
pub fn payload_range(page_len: usize) -> Range<usize> {
    let max = page_len.saturating_sub(PAGE_TRAILER_SIZE);
    PAGE_HEADER_SIZE.min(max)..max
}

/// The one bounds check: `len` bytes at `offset` lie within the payload of a page of `page_len`
/// bytes (checked sum: an offset near `usize::MAX` is refused, never wrapped).
///
/// # Errors
///
/// [`OutsidePayload`] naming the range and the payload.
pub fn check_payload_range(
    page_len: usize,
    offset: usize,
    len: usize,
) -> Result<(), OutsidePayload> {
    let payload = payload_range(page_len);
    match offset.checked_add(len) {
        Some(end) if offset >= payload.start && end <= payload.end => Ok(()),
        _ => Err(OutsidePayload {
            offset,
            len,
            min: payload.start,
            max: payload.end,
            page_len,
        }),
    }
}

impl PageOp<'_> {
    /// The bytes the op overwrites (for a move, the destination), unchecked.
    pub fn target(&self) -> (usize, usize) {
        match *self {
            PageOp::Write { offset, bytes } => (offset, bytes.len()),
            PageOp::Move { dst, len, .. } => (dst, len),
        }
    }

    /// Whether applying the op leaves any page unchanged (nothing written, or a move onto itself).
    pub fn is_noop(&self) -> bool {
        match *self {
            PageOp::Write { bytes, .. } => bytes.is_empty(),
            PageOp::Move { src, dst, len } => len == 0 || src == dst,
        }
    }

    /// The one bounds check: every range the op reads or writes lies within the payload of a
    /// page of `page_len` bytes.
    ///
    /// # Errors
    ///
    /// [`OutsidePayload`] naming the first range that does not.
    pub fn check(&self, page_len: usize) -> Result<(), OutsidePayload> {
        let inside = |offset: usize, len: usize| check_payload_range(page_len, offset, len);
        match *self {
            PageOp::Write { offset, bytes } => inside(offset, bytes.len()),
            PageOp::Move { src, dst, len } => {
                inside(src, len)?;
                inside(dst, len)
            }
        }
    }

    /// Checks the op ([`PageOp::check`]), then applies it to `page`.
    ///
    /// # Errors
    ///
    /// [`OutsidePayload`]; `page` is then unchanged.
    pub fn apply(&self, page: &mut [u8]) -> Result<(), OutsidePayload> {
        self.check(page.len())?;
        match *self {
            PageOp::Write { offset, bytes } => {
                if let Some(dst) = page.get_mut(offset..offset + bytes.len()) {
                    dst.copy_from_slice(bytes);
                }
            }
            PageOp::Move { src, dst, len } => {
                if len > 0 {
                    page.copy_within(src..src + len, dst);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS: usize = 4096;

    #[test]
    fn ops_inside_the_payload_apply() {
        let mut page = vec![0u8; PS];
        PageOp::Write {
            offset: PAGE_HEADER_SIZE,
            bytes: b"abcdef",
        }
        .apply(&mut page)
        .unwrap();
        // Overlapping move: memmove semantics.
        PageOp::Move {
            src: PAGE_HEADER_SIZE,
            dst: PAGE_HEADER_SIZE + 2,
            len: 6,
        }
        .apply(&mut page)
        .unwrap();
        assert_eq!(&page[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + 8], b"ababcdef");
        // The last payload byte is writable.
        let end = PS - PAGE_TRAILER_SIZE;
        PageOp::Write {
            offset: end - 1,
            bytes: b"z",
        }
        .apply(&mut page)
        .unwrap();
        assert_eq!(page[end - 1], b'z');
    }

    /// Invariants 1 and 2: the header, the trailer, past the end and overflowing sums are all
    /// refused, and the page is left as it was.
    #[test]
    fn ops_outside_the_payload_are_refused_and_change_nothing() {
        let end = PS - PAGE_TRAILER_SIZE;
        let mut page = vec![7u8; PS];
        let before = page.clone();
        for op in [
            PageOp::Write {
                offset: 0,
                bytes: b"x",
            },
            PageOp::Write {
                offset: PAGE_HEADER_SIZE - 1,
                bytes: b"xy",
            },
            PageOp::Write {
                offset: end,
                bytes: b"x",
            },
            PageOp::Write {
                offset: usize::MAX,
                bytes: b"x",
            },
            PageOp::Move {
                src: PAGE_HEADER_SIZE,
                dst: end - 1,
                len: 2,
            },
            PageOp::Move {
                src: usize::MAX - 1,
                dst: PAGE_HEADER_SIZE,
                len: 4,
            },
            PageOp::Move {
                src: PAGE_HEADER_SIZE,
                dst: PAGE_HEADER_SIZE,
                len: usize::MAX,
            },
        ] {
            let e = op.apply(&mut page).unwrap_err();
            assert_eq!((e.min, e.max, e.page_len), (PAGE_HEADER_SIZE, end, PS));
            assert_eq!(page, before, "{op:?} changed the page");
        }
        // A buffer too short for header and trailer has no payload at all.
        let mut tiny = [0u8; 16];
        assert!(PageOp::Write {
            offset: 0,
            bytes: b"x"
        }
        .apply(&mut tiny)
        .is_err());
        assert!(payload_range(16).is_empty());
    }

    #[test]
    fn noop_target_and_cost() {
        assert!(PageOp::Write {
            offset: 40,
            bytes: b""
        }
        .is_noop());
        assert!(PageOp::Move {
            src: 40,
            dst: 40,
            len: 9
        }
        .is_noop());
        let m = PageOp::Move {
            src: 40,
            dst: 50,
            len: 9,
        };
        assert_eq!(m.target(), (50, 9));
    }
}
