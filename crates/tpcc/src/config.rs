//! The store configuration knobs of the `keel` facade contract, as the workload carries them:
//! from `--config keel.toml`, from CLI flags (which override the file) and from matrix specs.
//!
//! Every field is optional: an unset knob means "the store's default". The field names and value
//! spellings are the facade's (`torn_page = "doublewrite"`, `log_sync = "fdatasync"`, ...), so the
//! same TOML file configures the store and the workload. Invariant: [`StoreConfig::validate`]
//! rejects values the facade contract does not allow (log block other than 512/4096, page size
//! not a power of two in 4 KiB..64 KiB), naming the knob; tests break each rule.

use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::error::{TpccError, TpccResult};

/// Torn-page protection mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum TornPage {
    /// InnoDB-style doublewrite area.
    Doublewrite,
    /// `RWF_ATOMIC` page writes.
    Atomic,
    /// PostgreSQL-style full page images in the log.
    FullPageWrites,
    /// Atomic where hardware-backed, else doublewrite.
    Auto,
    /// No protection (torn pages detected, not repaired).
    None,
}

/// Log sync method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum LogSync {
    /// `fsync`.
    Fsync,
    /// `fdatasync`.
    Fdatasync,
    /// `O_DSYNC` writes.
    ODsync,
    /// `O_DIRECT` + `O_DSYNC` writes.
    ODirect,
}

/// Log file policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum LogFiles {
    /// Zero-filled, recycled log files.
    Preallocated,
    /// Appending log files.
    Growing,
}

/// Page checksum algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum ChecksumKind {
    /// Hardware CRC-32C.
    Crc32c,
    /// The slow byte-wise fold.
    Legacy,
    /// No checksum.
    None,
}

/// When a commit is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum DurabilityKind {
    /// On durable log.
    Sync,
    /// Log written to the OS, synced every second.
    Buffered,
    /// Written and synced in the background.
    Lazy,
}

/// The facade's store configuration knobs; `None` = the store's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Page size in bytes (4096..65536, a power of two).
    #[arg(long, value_parser = parse_size_u32)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<u32>,
    /// Buffer pool size in bytes (suffixes KiB, MiB, GiB accepted).
    #[arg(long, value_parser = parse_size)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_size_opt"
    )]
    pub pool_size: Option<u64>,
    /// Torn-page protection.
    #[arg(long, value_enum)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torn_page: Option<TornPage>,
    /// Pages per doublewrite batch.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doublewrite_batch: Option<u32>,
    /// Skip torn-page protection for freshly initialised pages (init-on-flush).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_on_flush_skip: Option<bool>,
    /// Log block size: 512 or 4096.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_block_size: Option<u32>,
    /// Write-ahead padding of log writes in bytes (0 = off).
    #[arg(long, value_parser = parse_size_u32)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_ahead_size: Option<u32>,
    /// Log sync method.
    #[arg(long, value_enum)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_sync: Option<LogSync>,
    /// Preallocated or growing log files.
    #[arg(long, value_enum)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_files: Option<LogFiles>,
    /// Log file size in bytes (suffixes accepted).
    #[arg(long, value_parser = parse_size)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_size_opt"
    )]
    pub log_file_size: Option<u64>,
    /// Page checksum.
    #[arg(long, value_enum)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<ChecksumKind>,
    /// Commit acknowledgement.
    #[arg(long, value_enum)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilityKind>,
    /// Group commit delay in microseconds.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_commit_delay_us: Option<u64>,
    /// Checkpoint interval, in the store's unit (passed through unchanged).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval: Option<u64>,
}

/// The knob names, in the order reports print them.
pub const KNOBS: &[&str] = &[
    "page_size",
    "pool_size",
    "torn_page",
    "doublewrite_batch",
    "init_on_flush_skip",
    "log_block_size",
    "write_ahead_size",
    "log_sync",
    "log_files",
    "log_file_size",
    "checksum",
    "durability",
    "group_commit_delay_us",
    "checkpoint_interval",
];

impl StoreConfig {
    /// Reads a `keel.toml` file.
    pub fn from_file(path: &Path) -> TpccResult<StoreConfig> {
        let text = std::fs::read_to_string(path).map_err(|source| TpccError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let cfg: StoreConfig = toml::from_str(&text).map_err(|e| TpccError::Config {
            origin: path.display().to_string(),
            detail: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses a TOML table (a matrix spec's `[base]` or `[[config]]` entry, minus its workload
    /// keys).
    pub fn from_toml_table(table: &toml::Table, source: &str) -> TpccResult<StoreConfig> {
        let cfg: StoreConfig =
            toml::Value::Table(table.clone())
                .try_into()
                .map_err(|e: toml::de::Error| TpccError::Config {
                    origin: source.to_string(),
                    detail: e.to_string(),
                })?;
        cfg.validate().map_err(|e| TpccError::Config {
            origin: source.to_string(),
            detail: e.to_string(),
        })?;
        Ok(cfg)
    }

    /// `self` with every knob that `over` sets replaced by `over`'s value.
    pub fn overlay(&self, over: &StoreConfig) -> StoreConfig {
        macro_rules! pick {
            ($($f:ident),*) => { StoreConfig { $($f: over.$f.or(self.$f)),* } };
        }
        pick!(
            page_size,
            pool_size,
            torn_page,
            doublewrite_batch,
            init_on_flush_skip,
            log_block_size,
            write_ahead_size,
            log_sync,
            log_files,
            log_file_size,
            checksum,
            durability,
            group_commit_delay_us,
            checkpoint_interval
        )
    }

    /// Rejects values the facade contract does not allow.
    pub fn validate(&self) -> TpccResult<()> {
        let bad = |knob: &str, detail: String| TpccError::Config {
            origin: knob.to_string(),
            detail,
        };
        if let Some(p) = self.page_size {
            if !p.is_power_of_two() || !(4096..=65536).contains(&p) {
                return Err(bad(
                    "page_size",
                    format!("{p} is not a power of two in 4096..=65536"),
                ));
            }
        }
        if let Some(b) = self.log_block_size {
            if b != 512 && b != 4096 {
                return Err(bad("log_block_size", format!("{b} is not 512 or 4096")));
            }
        }
        if let Some(w) = self.write_ahead_size {
            if w != 0 && !w.is_power_of_two() {
                return Err(bad(
                    "write_ahead_size",
                    format!("{w} is neither 0 nor a power of two"),
                ));
            }
        }
        if self.pool_size == Some(0) {
            return Err(bad("pool_size", "0 bytes".to_string()));
        }
        Ok(())
    }

    /// The knobs that are set, as `name=value` pairs in [`KNOBS`] order.
    pub fn set_knobs(&self) -> Vec<(String, String)> {
        let value = toml::Value::try_from(self).ok();
        let mut out = Vec::new();
        if let Some(toml::Value::Table(t)) = value {
            for k in KNOBS {
                if let Some(v) = t.get(*k) {
                    let s = match v {
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    out.push((k.to_string(), s));
                }
            }
        }
        out
    }

    /// A one-line description (`defaults` when nothing is set).
    pub fn describe(&self) -> String {
        let knobs = self.set_knobs();
        if knobs.is_empty() {
            "defaults".to_string()
        } else {
            knobs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    }

    /// The configuration as a TOML document (what `--config` reads back).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

/// Parses a byte size: a number with an optional suffix K, KiB, M, MiB, G, GiB (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| format!("bad size {s:?}: expected a number with an optional unit"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("bad size unit {other:?} in {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} overflows"))
}

fn parse_size_u32(s: &str) -> Result<u32, String> {
    let v = parse_size(s)?;
    u32::try_from(v).map_err(|_| format!("size {s:?} is too large"))
}

fn de_size_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        N(u64),
        S(String),
    }
    match Option::<Size>::deserialize(d)? {
        None => Ok(None),
        Some(Size::N(n)) => Ok(Some(n)),
        Some(Size::S(s)) => parse_size(&s).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("12 parsecs").is_err());
    }

    #[test]
    fn toml_round_trip_and_overlay() {
        let c: StoreConfig =
            toml::from_str("torn_page = \"full_page_writes\"\npool_size = \"16MiB\"\n").unwrap();
        assert_eq!(c.torn_page, Some(TornPage::FullPageWrites));
        assert_eq!(c.pool_size, Some(16 << 20));
        let back: StoreConfig = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(back, c);
        let o = c.overlay(&StoreConfig {
            torn_page: Some(TornPage::None),
            ..Default::default()
        });
        assert_eq!(o.torn_page, Some(TornPage::None));
        assert_eq!(o.pool_size, Some(16 << 20));
        assert_eq!(o.describe(), "pool_size=16777216 torn_page=none");
    }

    #[test]
    fn validation_rejects_each_bad_value() {
        for bad in [
            "log_block_size = 1024",
            "page_size = 5000",
            "page_size = 131072",
            "write_ahead_size = 3000",
            "pool_size = 0",
        ] {
            let c: StoreConfig = toml::from_str(bad).unwrap();
            let e = c.validate().unwrap_err().to_string();
            let knob = bad.split(' ').next().unwrap();
            assert!(e.contains(knob), "{bad}: {e}");
        }
        assert!(toml::from_str::<StoreConfig>("no_such_knob = 1").is_err());
        assert!(toml::from_str::<StoreConfig>("torn_page = \"sometimes\"").is_err());
    }
}
