//! The store settings a run uses, as the workload carries them: from `--config keel.toml`, from
//! `--set key=value` flags (which override the file) and from matrix specs.
//!
//! There is one configuration schema, the store's own: every key is a field of [`keel::Config`]
//! (same names, same value spellings, sizes as `"64MiB"`, durations as `"5s"`), parsed and
//! validated by the store's code, so a TOML file that opens a store configures a run and the
//! other way round. keel-tpcc keeps only its workload keys (terminals, warehouses, ...) apart.
//! A [`StoreConfig`] is the sparse set of keys a run sets; an unset key is the store's default.
//!
//! Invariants (tests break each): [`StoreConfig::validate`] accepts exactly what
//! [`keel::Config::from_toml_str`] plus [`keel::Config::validate`] accept, naming the key; a key
//! that is not a store setting is refused; [`StoreConfig::describe`] prints only the keys set, in
//! the store's field order, with the store's spelling of each value.

use std::path::Path;

use crate::error::{TpccError, TpccResult};

/// The store keys a run sets (a sparse TOML table of [`keel::Config`] fields); every other key is
/// the store's default.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct StoreConfig {
    table: toml::Table,
}

/// The keys fixed when a store is created (a store refuses to open with other values).
pub const CREATION_KEYS: &[&str] = &[
    "page_size",
    "checksum",
    "log_block_size",
    "log_files",
    "log_file_size",
];

impl StoreConfig {
    /// Reads a `keel.toml` file (the store's own configuration file).
    ///
    /// # Errors
    ///
    /// The file cannot be read, is not TOML, or holds a key or value the store refuses.
    pub fn from_file(path: &Path) -> TpccResult<StoreConfig> {
        let text = std::fs::read_to_string(path).map_err(|source| TpccError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| TpccError::Config {
            origin: path.display().to_string(),
            detail: e.to_string(),
        })?;
        StoreConfig::from_toml_table(&table, &path.display().to_string())
    }

    /// Takes a TOML table of store keys (a matrix spec's `[base]` or `[[config]]` entry, minus its
    /// workload keys).
    ///
    /// # Errors
    ///
    /// A key or value the store refuses; the error names `source` and the key.
    pub fn from_toml_table(table: &toml::Table, source: &str) -> TpccResult<StoreConfig> {
        let cfg = StoreConfig {
            table: table.clone(),
        };
        cfg.validate().map_err(|e| TpccError::Config {
            origin: source.to_string(),
            detail: e.to_string(),
        })?;
        Ok(cfg)
    }

    /// Sets one key from `key=value` text (the CLI's `--set`). The value is TOML
    /// (`direct_io=true`, `doublewrite_batch=64`) or, if it does not parse as TOML, a bare string
    /// (`torn_page=atomic`, `pool_size=256MiB`, `checkpoint_interval=5s`).
    ///
    /// # Errors
    ///
    /// No `=`, or the resulting configuration is refused by the store.
    pub fn set(&mut self, assignment: &str) -> TpccResult<()> {
        let Some((key, value)) = assignment.split_once('=') else {
            return Err(TpccError::Config {
                origin: format!("--set {assignment}"),
                detail: "expected key=value, e.g. --set torn_page=atomic".to_string(),
            });
        };
        let value = value.trim();
        let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.to_string()));
        let mut next = self.clone();
        next.table.insert(key.trim().to_string(), parsed);
        next.validate().map_err(|e| TpccError::Config {
            origin: format!("--set {assignment}"),
            detail: e.to_string(),
        })?;
        *self = next;
        Ok(())
    }

    /// `self` with `key` set to `value` (unchecked: [`StoreConfig::validate`] checks).
    pub fn with(mut self, key: &str, value: impl Into<toml::Value>) -> StoreConfig {
        self.table.insert(key.to_string(), value.into());
        self
    }

    /// The value set for `key`, if any.
    pub fn get(&self, key: &str) -> Option<&toml::Value> {
        self.table.get(key)
    }

    /// `self` with every key that `over` sets replaced by `over`'s value.
    pub fn overlay(&self, over: &StoreConfig) -> StoreConfig {
        let mut table = self.table.clone();
        for (k, v) in &over.table {
            table.insert(k.clone(), v.clone());
        }
        StoreConfig { table }
    }

    /// Only the keys fixed at creation ([`CREATION_KEYS`]).
    pub fn creation_keys(&self) -> StoreConfig {
        StoreConfig {
            table: self
                .table
                .iter()
                .filter(|(k, _)| CREATION_KEYS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// The store's configuration: its defaults with every key set here.
    ///
    /// # Errors
    ///
    /// The store refuses a key or value (the message names it).
    pub fn keel_config(&self) -> Result<keel::Config, keel::Error> {
        let text = toml::to_string(&self.table)
            .map_err(|e| keel::Error::Config(format!("cannot write the settings as TOML: {e}")))?;
        let c = keel::Config::from_toml_str(&text)?;
        c.validate()?;
        Ok(c)
    }

    /// Checks every key and value with the store's own parser and validation.
    ///
    /// # Errors
    ///
    /// What the store refuses, naming the key.
    pub fn validate(&self) -> TpccResult<()> {
        self.keel_config()
            .map(|_| ())
            .map_err(|e| TpccError::Config {
                origin: "store configuration".to_string(),
                detail: e.to_string(),
            })
    }

    /// The keys that are set, as `name=value` pairs in the store's field order, each value in
    /// the store's spelling (`pool_size=16MiB`, `torn_page=none`).
    pub fn set_knobs(&self) -> Vec<(String, String)> {
        let Ok(cfg) = self.keel_config() else {
            // Not valid: print what was given, in the given order.
            return self
                .table
                .iter()
                .map(|(k, v)| (k.clone(), value_text(v)))
                .collect();
        };
        let normal: toml::Table = toml::from_str(&cfg.to_toml()).unwrap_or_default();
        normal
            .iter()
            .filter(|(k, _)| self.table.contains_key(k.as_str()))
            .map(|(k, v)| (k.clone(), value_text(v)))
            .collect()
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

    /// The keys set, as a TOML document (what `--config` reads back).
    pub fn to_toml(&self) -> String {
        toml::to_string(&self.table).unwrap_or_default()
    }
}

fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Parses a byte size (the store's parser, [`keel::human::parse_size`]).
///
/// # Errors
///
/// Not a number with a known binary unit, or overflow.
pub fn parse_size(s: &str) -> Result<u64, String> {
    keel::human::parse_size(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_round_trip_and_overlay() {
        let t: toml::Table =
            toml::from_str("torn_page = \"full_page_writes\"\npool_size = \"16MiB\"\n").unwrap();
        let c = StoreConfig::from_toml_table(&t, "test").unwrap();
        assert_eq!(
            c.keel_config().unwrap().torn_page,
            keel::TornPage::FullPageWrites
        );
        assert_eq!(c.keel_config().unwrap().pool_size, 16 << 20);
        let back: StoreConfig = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(back, c);
        let o = c.overlay(&StoreConfig::default().with("torn_page", "none"));
        assert_eq!(o.keel_config().unwrap().torn_page, keel::TornPage::None);
        assert_eq!(o.keel_config().unwrap().pool_size, 16 << 20);
        assert_eq!(o.describe(), "pool_size=16MiB torn_page=none");
        assert_eq!(StoreConfig::default().describe(), "defaults");
    }

    #[test]
    fn set_takes_every_store_key() {
        let mut c = StoreConfig::default();
        for a in [
            "direct_io=true",
            "log_file_count=3",
            "checkpoint_interval=250ms",
            "log_buffer_size=16MiB",
            "flush_interval=2s",
            "checkpoint_log_fraction=0.25",
            "write_ahead_size=0",
            "torn_page=atomic",
            "pool_size = 64MiB",
        ] {
            c.set(a).unwrap_or_else(|e| panic!("{a}: {e}"));
        }
        let k = c.keel_config().unwrap();
        assert!(k.direct_io);
        assert_eq!(k.log_file_count, 3);
        assert_eq!(k.checkpoint_interval, std::time::Duration::from_millis(250));
        assert_eq!(k.log_buffer_size, 16 << 20);
        assert_eq!(k.checkpoint_log_fraction, 0.25);
        assert_eq!(k.torn_page, keel::TornPage::Atomic);
        assert_eq!(k.pool_size, 64 << 20);
    }

    #[test]
    fn validation_rejects_each_bad_value() {
        for bad in [
            "log_block_size=1024",
            "page_size=5000",
            "page_size=131072",
            "write_ahead_size=3000",
            "pool_size=0",
            "no_such_knob=1",
            "torn_page=sometimes",
            "checkpoint_interval=5",
        ] {
            let e = StoreConfig::default().set(bad).unwrap_err().to_string();
            let knob = bad.split('=').next().unwrap();
            assert!(e.contains(knob), "{bad}: {e}");
        }
        assert!(StoreConfig::default().set("torn_page").is_err());
    }
}
