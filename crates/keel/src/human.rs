//! Human spellings of sizes and durations in configuration: `"64MiB"`, `"16KiB"`, `"5s"`,
//! `"200ms"`, `"50us"`. One parser for the library, TOML files, the CLI's `--set` and matrix
//! specs, so every entry point accepts and rejects the same text.
//!
//! Invariants (tests break each):
//! 1. Parsing never panics and never wraps: a size or duration that overflows `u64` is an error
//!    naming the text.
//! 2. Formatting round-trips: `parse(format(x)) == x` for every value (sizes print in the
//!    largest binary unit that divides them exactly, durations in the largest exact unit).
//! 3. A duration needs a unit: a bare number is refused (is `5` seconds or milliseconds?).

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

const SIZE_UNITS: [(&str, u64); 4] = [
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("", 1),
];

/// Parses a byte count: digits (with optional `_` separators), then an optional binary unit:
/// `B`, `K`/`KB`/`KiB`, `M`/`MB`/`MiB`, `G`/`GB`/`GiB` (case-insensitive; all binary).
///
/// # Errors
///
/// A message naming the text when it is not a number with a known unit, or overflows `u64`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| format!("bad size {text:?}: expected a number with an optional unit"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("bad size unit {other:?} in {text:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {text:?} overflows"))
}

/// Formats a byte count in the largest binary unit that divides it exactly (`"64MiB"`,
/// `"4096"` stays `"4KiB"`, `"1000"` stays `"1000"`).
pub fn format_size(bytes: u64) -> String {
    for (unit, mult) in SIZE_UNITS {
        if bytes != 0 && bytes.is_multiple_of(mult) {
            return format!("{}{unit}", bytes / mult);
        }
    }
    bytes.to_string()
}

const DURATION_UNITS: [(&str, u128); 6] = [
    ("h", 3_600_000_000_000),
    ("min", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// Parses a duration: a whole or decimal number and a unit, `ns`, `us` (or `µs`), `ms`, `s`,
/// `min` (or `m`), `h`: `"5s"`, `"200ms"`, `"1.5s"`, `"0s"`.
///
/// # Errors
///
/// A message naming the text when the unit is missing or unknown, the number is bad, or the
/// value overflows.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.' && c != '_')
        .ok_or_else(|| {
            format!("duration {text:?} has no unit: write e.g. \"5s\", \"200ms\" or \"50us\"")
        })?;
    let (num, unit) = t.split_at(split);
    let per: u128 = match unit.trim() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        other => return Err(format!("bad duration unit {other:?} in {text:?}")),
    };
    let num = num.replace('_', "");
    let (whole, frac) = num.split_once('.').unwrap_or((num.as_str(), ""));
    let bad = || format!("bad duration {text:?}: expected a number and a unit");
    if whole.is_empty() && frac.is_empty() {
        return Err(bad());
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let mut nanos = whole
        .checked_mul(per)
        .ok_or_else(|| format!("{text:?} overflows"))?;
    // Each fractional digit is worth a tenth of the previous one; digits below a nanosecond
    // are refused rather than silently dropped.
    let mut place = per;
    for c in frac.chars() {
        let d = c.to_digit(10).ok_or_else(bad)?;
        if !place.is_multiple_of(10) {
            return Err(format!("{text:?} is finer than a nanosecond"));
        }
        place /= 10;
        nanos = nanos
            .checked_add(u128::from(d) * place)
            .ok_or_else(|| format!("{text:?} overflows"))?;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| format!("{text:?} overflows"))?;
    let sub = u32::try_from(nanos % 1_000_000_000).map_err(|_| format!("{text:?} overflows"))?;
    Ok(Duration::new(secs, sub))
}

/// Formats a duration in the largest unit that divides it exactly (`"5s"`, `"250us"`, `"0s"`).
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    for (unit, per) in DURATION_UNITS {
        if nanos.is_multiple_of(per) {
            return format!("{}{unit}", nanos / per);
        }
    }
    format!("{nanos}ns")
}

/// A size in TOML: an integer (bytes) or a string with a unit.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeText {
    Bytes(u64),
    Text(String),
}

/// Serde for a `u64` byte count written as a human size.
pub(crate) mod size_u64 {
    use super::*;

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_size(*v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        match SizeText::deserialize(d)? {
            SizeText::Bytes(n) => Ok(n),
            SizeText::Text(t) => parse_size(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// Serde for a `usize` byte count written as a human size.
pub(crate) mod size_usize {
    use super::*;

    pub fn serialize<S: Serializer>(v: &usize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_size(*v as u64))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        let n = super::size_u64::deserialize(d)?;
        usize::try_from(n).map_err(|_| serde::de::Error::custom(format!("size {n} is too large")))
    }
}

/// Serde for a [`Duration`] written as a human duration.
pub(crate) mod duration {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum DurationText {
            Number(f64),
            Text(String),
        }
        match DurationText::deserialize(d)? {
            DurationText::Number(n) => Err(serde::de::Error::custom(format!(
                "duration {n} has no unit: write e.g. \"5s\", \"200ms\" or \"50us\""
            ))),
            DurationText::Text(t) => parse_duration(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_round_trip() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64 mb"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1_000"), Ok(1000));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999999999999GiB").is_err());
        assert!(parse_size("17179869184GiB")
            .unwrap_err()
            .contains("overflows"));
        for v in [0, 1, 512, 1000, 4096, 16384, 64 << 20, 3 << 30, u64::MAX] {
            assert_eq!(parse_size(&format_size(v)), Ok(v), "{v}");
        }
        assert_eq!(format_size(128 << 20), "128MiB");
        assert_eq!(format_size(1000), "1000");
    }

    #[test]
    fn durations_parse_and_round_trip() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("50us"), Ok(Duration::from_micros(50)));
        assert_eq!(parse_duration("50µs"), Ok(Duration::from_micros(50)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5").unwrap_err().contains("no unit"));
        assert!(parse_duration("5 fortnights").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("1.0000000001s")
            .unwrap_err()
            .contains("nanosecond"));
        assert!(parse_duration("99999999999999999999999999h").is_err());
        for d in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_micros(250),
            Duration::from_millis(1500),
            Duration::from_secs(5),
            Duration::from_secs(7200),
            Duration::new(u64::MAX, 999_999_999),
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{d:?}");
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }
}
