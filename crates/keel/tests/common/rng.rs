//! The seeded generator every randomised test of this crate draws from (SplitMix64), so a
//! failing seed replays the same case anywhere.

// Each test binary uses a part of it.
#![allow(dead_code)]

/// SplitMix64 from a seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 for `n` = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// One of `among` other than `not` (`not` itself if there is no other).
    pub fn other<T: PartialEq + Copy>(&mut self, among: &[T], not: T) -> T {
        let others: Vec<T> = among.iter().copied().filter(|x| *x != not).collect();
        others
            .get(self.below(others.len() as u64) as usize)
            .copied()
            .unwrap_or(not)
    }
}
