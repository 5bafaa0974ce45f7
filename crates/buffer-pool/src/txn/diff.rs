//! How a free-form page change becomes redo: the runs of payload bytes that differ between the
//! page before and after ([`diff_runs`]), found a kilobyte, then a word, at a time.
//!
//! Invariant (tests below): replaying the runs on the old bytes gives exactly the new bytes,
//! and the runs are the same as the byte-at-a-time loop's (runs closer than [`MERGE_GAP`] equal
//! bytes merged).

/// Unchanged gaps shorter than this are logged with their neighbours (a record header costs
/// about as much).
pub(crate) const MERGE_GAP: usize = 16;

/// Runs of bytes that differ between `old` and `new` within `from..to`, as `(offset, len)`.
pub(crate) fn diff_runs(old: &[u8], new: &[u8], from: usize, to: usize) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = from;
    while i < to {
        let Some(start) = first_difference(old, new, i, to) else {
            break;
        };
        // The run goes on while the next differing byte follows fewer than MERGE_GAP equal
        // bytes after it: jump to the last differing byte in the next MERGE_GAP bytes.
        let mut end = start + 1;
        while let Some(d) = last_difference(old, new, end, (end + MERGE_GAP).min(to)) {
            end = d + 1;
        }
        runs.push((start, end - start));
        i = end;
    }
    runs
}

/// The last offset in `from..to` where `old` and `new` differ (a word at a time).
fn last_difference(old: &[u8], new: &[u8], from: usize, to: usize) -> Option<usize> {
    let mut k = to;
    while k > from && !(k - from).is_multiple_of(8) {
        k -= 1;
        if old[k] != new[k] {
            return Some(k);
        }
    }
    while k >= from + 8 {
        k -= 8;
        let x = word(old, k) ^ word(new, k);
        if x != 0 {
            return Some(k + 7 - (x.leading_zeros() / 8) as usize);
        }
    }
    None
}

/// The little-endian word at `at`.
fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The first offset in `from..to` where `old` and `new` differ. Equal stretches are skipped a
/// kilobyte at a time (one `memcmp`), then a word at a time, so an unchanged page costs a few
/// vectorised compares rather than a loop over its bytes.
fn first_difference(old: &[u8], new: &[u8], from: usize, to: usize) -> Option<usize> {
    const BLOCK: usize = 1024;
    let mut i = from;
    while i + BLOCK <= to && old[i..i + BLOCK] == new[i..i + BLOCK] {
        i += BLOCK;
    }
    while i + 8 <= to {
        let x = word(old, i) ^ word(new, i);
        if x != 0 {
            return Some(i + (x.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    (i..to).find(|&k| old[k] != new[k])
}

thread_local! {
    /// Scratch page for [`super::PageWriteGuard::rewrite`] (saves an allocation per change).
    pub(crate) static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-at-a-time diff `diff_runs` replaced (kept as the reference it must match).
    fn diff_runs_reference(old: &[u8], new: &[u8], from: usize, to: usize) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut i = from;
        while i < to {
            while i < to && old[i] == new[i] {
                i += 1;
            }
            if i >= to {
                break;
            }
            let start = i;
            let mut end = i + 1;
            let mut gap = 0;
            let mut j = i + 1;
            while j < to && gap < MERGE_GAP {
                if old[j] != new[j] {
                    end = j + 1;
                    gap = 0;
                } else {
                    gap += 1;
                }
                j += 1;
            }
            runs.push((start, end - start));
            i = end;
        }
        runs
    }

    /// The word- and block-skipping diff finds exactly the runs of the byte loop, for changes
    /// at every alignment, at the edges of the range and across kilobyte blocks.
    #[test]
    fn fast_diff_matches_the_byte_loop() {
        let mut seed = 11u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for case in 0..2000 {
            let size = [4096usize, 16384][case % 2];
            let old: Vec<u8> = (0..size).map(|_| (next() % 4) as u8).collect();
            let mut new = old.clone();
            for _ in 0..next() % 6 {
                let at = next() as usize % size;
                let len = (next() as usize % 40).min(size - at);
                for b in &mut new[at..at + len] {
                    *b = b.wrapping_add(1 + (next() % 3) as u8);
                }
            }
            let from = next() as usize % 64;
            let to = size - next() as usize % 64;
            assert_eq!(
                diff_runs(&old, &new, from, to),
                diff_runs_reference(&old, &new, from, to),
                "case {case}"
            );
        }
        // Long changed stretches (a shifted slot array) and gaps of exactly MERGE_GAP - 1,
        // MERGE_GAP and MERGE_GAP + 1 equal bytes between changed bytes.
        let old: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
        for shift_at in [40usize, 41, 1000, 1020, 5003] {
            let mut new = old.clone();
            new.copy_within(shift_at..shift_at + 700, shift_at + 4);
            for (n, gap) in [(1usize, MERGE_GAP - 1), (2, MERGE_GAP), (3, MERGE_GAP + 1)] {
                let at = 9000 + n * 300;
                new[at] ^= 0xFF;
                new[at + gap + 1] ^= 0xFF;
            }
            assert_eq!(
                diff_runs(&old, &new, 32, 16376),
                diff_runs_reference(&old, &new, 32, 16376),
                "shift at {shift_at}"
            );
        }
        // A single changed byte at each position of a block boundary and at the range's ends.
        let old = vec![0u8; 4096];
        for at in [32, 33, 39, 40, 1023, 1024, 1025, 2047, 4087, 4088] {
            let mut new = old.clone();
            new[at] = 1;
            assert_eq!(
                diff_runs(&old, &new, 32, 4088),
                diff_runs_reference(&old, &new, 32, 4088)
            );
        }
    }

    /// Replaying the runs on the old bytes gives the new bytes (the logging invariant), and a
    /// diff that drops a run on purpose is caught by the same check.
    #[test]
    fn diff_runs_reproduce_the_change() {
        let mut seed = 7u64;
        for _ in 0..500 {
            let mut old = vec![0u8; 4096];
            for b in old.iter_mut() {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                *b = (seed >> 56) as u8 & 3;
            }
            let mut new = old.clone();
            for _ in 0..(seed % 20) {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                let at = 32 + (seed >> 40) as usize % (4096 - 40 - 64);
                for b in &mut new[at..at + (seed % 64) as usize] {
                    *b = b.wrapping_add(1);
                }
            }
            let runs = diff_runs(&old, &new, 32, 4096 - 8);
            let mut replay = old.clone();
            for &(o, l) in &runs {
                replay[o..o + l].copy_from_slice(&new[o..o + l]);
            }
            assert_eq!(replay, new);
            if let Some(&(o, l)) = runs.first() {
                let mut broken = old.clone();
                for &(o2, l2) in &runs[1..] {
                    broken[o2..o2 + l2].copy_from_slice(&new[o2..o2 + l2]);
                }
                assert_ne!(broken, new, "dropping run at {o}+{l} must be visible");
            }
        }
    }
}
