//! Page checksum algorithms.

use serde::{Deserialize, Serialize};

/// How a page's bytes are checksummed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checksum {
    /// CRC-32C (Castagnoli), hardware-accelerated (SSE4.2 / ARMv8 CRC) through the `crc32c` crate.
    #[default]
    Crc32c,
    /// A byte-at-a-time fold in the style of InnoDB's old `innodb` checksum
    /// (`ut_fold_binary`): deliberately slow, kept so the cost of a slow checksum can be measured.
    Legacy,
    /// No checksum: torn or corrupt pages are caught only by the page id and trailer checks.
    None,
}

impl Checksum {
    /// Every algorithm.
    pub const ALL: [Checksum; 3] = [Checksum::Crc32c, Checksum::Legacy, Checksum::None];

    /// The tag stored in byte 4 of every page.
    pub const fn tag(self) -> u8 {
        match self {
            Checksum::None => 0,
            Checksum::Crc32c => 1,
            Checksum::Legacy => 2,
        }
    }

    /// The algorithm with this tag.
    pub fn from_tag(tag: u8) -> Option<Checksum> {
        match tag {
            0 => Some(Checksum::None),
            1 => Some(Checksum::Crc32c),
            2 => Some(Checksum::Legacy),
            _ => None,
        }
    }

    /// The checksum of `bytes` under this algorithm (0 for `None`).
    pub fn compute(self, bytes: &[u8]) -> u32 {
        match self {
            Checksum::Crc32c => crc32c::crc32c(bytes),
            Checksum::Legacy => legacy_fold(bytes),
            Checksum::None => 0,
        }
    }
}

const FOLD_MASK_1: u32 = 1_653_893_711;
const FOLD_MASK_2: u32 = 1_463_735_687;

/// InnoDB's `ut_fold_ulint_pair`, in 32-bit arithmetic.
#[inline]
fn fold_pair(n1: u32, n2: u32) -> u32 {
    (((n1 ^ n2 ^ FOLD_MASK_1) << 8).wrapping_add(n1) ^ FOLD_MASK_2).wrapping_add(n2)
}

/// InnoDB's `ut_fold_binary`: one dependent fold per byte, so it cannot be vectorised.
fn legacy_fold(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(0u32, |acc, &b| fold_pair(acc, u32::from(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        // The CRC-32C check value of "123456789" (RFC 3720, appendix B.4).
        assert_eq!(Checksum::Crc32c.compute(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn legacy_depends_on_every_byte_and_on_order() {
        let a = Checksum::Legacy.compute(b"abcdef");
        let b = Checksum::Legacy.compute(b"abcdeg");
        let c = Checksum::Legacy.compute(b"bacdef");
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, Checksum::Legacy.compute(b"abcdef"));
    }

    #[test]
    fn none_is_zero_and_tags_round_trip() {
        assert_eq!(Checksum::None.compute(b"anything"), 0);
        for c in Checksum::ALL {
            assert_eq!(Checksum::from_tag(c.tag()), Some(c));
        }
        assert_eq!(Checksum::from_tag(9), None);
    }
}
