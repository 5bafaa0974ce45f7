//! How sure a figure is: the median and range of repeated measurements, and of a ratio between
//! two such sets, with the verdict "within noise" when the ratio's range includes 1.0.
//!
//! The range is the plain min–max of the repeats (no distribution is assumed: with three repeats
//! a confidence interval would rest on a normality nobody checked). The ratio's range is the
//! widest the two ranges allow, `[min B / max A, max B / min A]`, so "not within noise" means
//! every repeat of B differs from every repeat of A in the same direction.
//!
//! Invariants: a set of no values has no median (`None`), never 0; a ratio with a zero or
//! missing denominator is `None`, never infinity.

use serde::{Deserialize, Serialize};

/// Median and range of a set of measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// How many values.
    pub n: usize,
}

impl Spread {
    /// The spread of `values` (non-finite values are ignored); `None` when there is none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// `median (min–max)` with `d` decimals, or just the median for a single value.
    pub fn show(&self, d: usize) -> String {
        if self.n <= 1 || self.min == self.max {
            format!("{:.d$}", self.median)
        } else {
            format!("{:.d$} ({:.d$}–{:.d$})", self.median, self.min, self.max)
        }
    }
}

/// B relative to A.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// median B / median A.
    pub median: f64,
    /// min B / max A.
    pub lo: f64,
    /// max B / min A.
    pub hi: f64,
}

impl Ratio {
    /// B / A, or `None` when A has a zero or negative value (no meaningful ratio).
    pub fn of(a: &Spread, b: &Spread) -> Option<Ratio> {
        if a.min <= 0.0 || a.median <= 0.0 {
            return None;
        }
        Some(Ratio {
            median: b.median / a.median,
            lo: b.min / a.max,
            hi: b.max / a.min,
        })
    }

    /// The range includes 1.0: the repeats do not tell A and B apart.
    pub fn within_noise(&self) -> bool {
        self.lo <= 1.0 && 1.0 <= self.hi
    }

    /// `0.99 (0.95–1.03) within noise`, or without the verdict when the range excludes 1.0.
    pub fn show(&self) -> String {
        format!(
            "{:.2} ({:.2}–{:.2}){}",
            self.median,
            self.lo,
            self.hi,
            if self.within_noise() {
                " within noise"
            } else {
                ""
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range() {
        let s = Spread::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        let s = Spread::of([4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!(Spread::of([]).is_none());
        assert!(Spread::of([f64::NAN]).is_none());
        assert_eq!(Spread::of([5.0]).unwrap().show(1), "5.0");
        assert_eq!(Spread::of([1.0, 3.0]).unwrap().show(0), "2 (1–3)");
    }

    #[test]
    fn overlapping_repeats_are_within_noise_and_separated_ones_are_not() {
        // The TPC-C A/B of issue 12: before 47745/49970/51857, after 48897/49258/50680.
        let a = Spread::of([49970.0, 51857.0, 47745.0]).unwrap();
        let b = Spread::of([49258.0, 50680.0, 48897.0]).unwrap();
        let r = Ratio::of(&a, &b).unwrap();
        assert!((r.median - 49258.0 / 49970.0).abs() < 1e-12);
        assert!(r.within_noise(), "{r:?}");
        assert!(r.show().ends_with("within noise"));

        let c = Spread::of([60000.0, 61000.0, 62000.0]).unwrap();
        let r = Ratio::of(&a, &c).unwrap();
        assert!(!r.within_noise(), "{r:?}");
        assert!(r.lo > 1.0);
    }

    #[test]
    fn no_ratio_against_zero() {
        let z = Spread::of([0.0, 1.0]).unwrap();
        let b = Spread::of([1.0]).unwrap();
        assert!(Ratio::of(&z, &b).is_none());
    }
}
