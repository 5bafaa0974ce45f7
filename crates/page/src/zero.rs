//! Whether bytes are all zero: the one test for "never written" (a page, a log block, a
//! doublewrite slot), written so that it costs one comparison per 64 bytes rather than one per
//! byte (which matters under fuzzing's comparison tracing, and a little everywhere).

/// True when every byte of `bytes` is zero (also for an empty slice).
#[inline]
pub fn is_zero(bytes: &[u8]) -> bool {
    bytes
        .chunks(64)
        .all(|c| c.iter().fold(0u8, |acc, &b| acc | b) == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_nonzero_byte_anywhere_is_seen() {
        assert!(is_zero(&[]));
        for len in [1usize, 63, 64, 65, 4096, 4097] {
            let mut v = vec![0u8; len];
            assert!(is_zero(&v), "{len}");
            for i in [0, len / 2, len - 1] {
                v[i] = 1;
                assert!(!is_zero(&v), "{len} at {i}");
                v[i] = 0;
            }
        }
    }
}
