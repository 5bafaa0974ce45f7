//! Reading a matrix spec file (the format is in the module doc of `matrix`): top-level workload
//! keys, `[base]` store keys, `[[config]]` entries crossed with `[axes]`. Store keys are checked
//! by the store's own configuration parser ([`StoreConfig`]); an unknown top-level key or a bad
//! value is an error naming the file and key.

use std::path::Path;
use std::time::Duration;

use crate::config::StoreConfig;
use crate::error::{TpccError, TpccResult};
use crate::txn::WriterMode;

/// A parsed matrix spec.
#[derive(Debug, Clone)]
pub struct MatrixSpec {
    /// Name (report title, default output directory).
    pub name: String,
    /// Description.
    pub description: String,
    /// The published result it reproduces.
    pub published: String,
    /// Warehouses.
    pub warehouses: u16,
    /// Default terminals.
    pub terminals: usize,
    /// Default writer mode (`writers = "concurrent"` or `"exclusive"`; default concurrent).
    pub writers: WriterMode,
    /// Measured seconds per run.
    pub duration: Duration,
    /// Warm-up per run.
    pub warmup: Duration,
    /// Report interval.
    pub interval: Duration,
    /// Repeats of every configuration.
    pub repeats: usize,
    /// Loader and terminal seed.
    pub seed: u64,
    /// Load once per configuration instead of once for all.
    pub load_per_config: bool,
    /// Check consistency after every run.
    pub check: bool,
    /// Add a memory-engine baseline row.
    pub memory_baseline: bool,
    /// Knobs for all configurations.
    pub base: StoreConfig,
    /// The expanded configurations.
    pub entries: Vec<Entry>,
}

/// One configuration of a matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Row name.
    pub name: String,
    /// Store knobs (base overlaid with the entry's own and the axes').
    pub store: StoreConfig,
    /// Terminals for this configuration.
    pub terminals: usize,
    /// Writer mode of this configuration (its `writers` key or axis, else the spec's).
    pub writers: WriterMode,
    /// The engine of this row (`engine = "sqlite"` in its `[[config]]`): `None` runs the CLI's
    /// `--engine` (keel by default); one of [`ENGINES`] otherwise.
    pub engine: Option<String>,
}

/// The engines a `[[config]]` entry may name: `keel`, `memory` (no durability), and the peers
/// `sqlite` (WAL, `synchronous=FULL`) and `redb` (`Durability::Immediate`).
pub const ENGINES: &[&str] = &["keel", "memory", "sqlite", "redb"];

fn spec_err(file: &str, detail: impl Into<String>) -> TpccError {
    TpccError::Config {
        origin: file.to_string(),
        detail: detail.into(),
    }
}

fn get_u64(t: &toml::Table, key: &str, default: u64, file: &str) -> TpccResult<u64> {
    match t.get(key) {
        None => Ok(default),
        Some(toml::Value::Integer(i)) if *i >= 0 => Ok(*i as u64),
        Some(toml::Value::Float(f)) if *f >= 0.0 => Ok(*f as u64),
        Some(v) => Err(spec_err(
            file,
            format!("{key} must be a non-negative number, not {v}"),
        )),
    }
}

fn get_secs(t: &toml::Table, key: &str, default: f64, file: &str) -> TpccResult<Duration> {
    match t.get(key) {
        None => Ok(Duration::from_secs_f64(default)),
        Some(toml::Value::Integer(i)) if *i >= 0 => Ok(Duration::from_secs(*i as u64)),
        Some(toml::Value::Float(f)) if *f >= 0.0 => Ok(Duration::from_secs_f64(*f)),
        Some(v) => Err(spec_err(file, format!("{key} must be seconds, not {v}"))),
    }
}

fn get_str(t: &toml::Table, key: &str) -> String {
    t.get(key)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

fn get_bool(t: &toml::Table, key: &str, default: bool, file: &str) -> TpccResult<bool> {
    match t.get(key) {
        None => Ok(default),
        Some(toml::Value::Boolean(b)) => Ok(*b),
        Some(v) => Err(spec_err(
            file,
            format!("{key} must be true or false, not {v}"),
        )),
    }
}

fn parse_writers(v: &toml::Value, file: &str, what: &str) -> TpccResult<WriterMode> {
    match v.as_str() {
        Some("concurrent") => Ok(WriterMode::Concurrent),
        Some("exclusive") => Ok(WriterMode::Exclusive),
        _ => Err(spec_err(
            file,
            format!("{what}writers = {v} is not \"concurrent\" or \"exclusive\""),
        )),
    }
}

fn value_label(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "published",
    "warehouses",
    "terminals",
    "writers",
    "duration",
    "warmup",
    "interval",
    "repeats",
    "seed",
    "load_per_config",
    "check",
    "memory_baseline",
    "base",
    "config",
    "axes",
];

impl MatrixSpec {
    /// Reads and expands a spec file.
    pub fn from_file(path: &Path) -> TpccResult<MatrixSpec> {
        let text = std::fs::read_to_string(path).map_err(|e| TpccError::io(path, e))?;
        MatrixSpec::parse(&text, &path.display().to_string())
    }

    /// Parses and expands spec text (`file` names it in errors).
    pub fn parse(text: &str, file: &str) -> TpccResult<MatrixSpec> {
        let t: toml::Table = toml::from_str(text).map_err(|e| spec_err(file, e.to_string()))?;
        for k in t.keys() {
            if !TOP_KEYS.contains(&k.as_str()) {
                return Err(spec_err(file, format!("unknown key {k:?}")));
            }
        }
        let name = get_str(&t, "name");
        if name.is_empty() {
            return Err(spec_err(file, "missing `name`"));
        }
        // The name is the default output directory's last component (`tpcc-matrix/NAME`),
        // which the matrix writes into and whose `data/` it removes: one plain component.
        let plain = matches!(
            std::path::Path::new(&name).components().collect::<Vec<_>>()[..],
            [std::path::Component::Normal(_)]
        );
        if !plain || name.contains('/') {
            return Err(spec_err(
                file,
                format!("name {name:?} must be a plain file name (no `/`, `.` or `..`)"),
            ));
        }
        let warehouses = get_u64(&t, "warehouses", 1, file)?;
        if !(1..=u16::MAX as u64).contains(&warehouses) {
            return Err(spec_err(file, "warehouses must be 1..=65535"));
        }
        let terminals = get_u64(&t, "terminals", 4, file)? as usize;
        let writers = match t.get("writers") {
            None => WriterMode::default(),
            Some(v) => parse_writers(v, file, "")?,
        };
        let base = match t.get("base") {
            None => StoreConfig::default(),
            Some(toml::Value::Table(b)) => {
                StoreConfig::from_toml_table(b, &format!("{file} [base]"))?
            }
            Some(_) => return Err(spec_err(file, "[base] must be a table")),
        };

        // Explicit configurations.
        let mut entries: Vec<Entry> = Vec::new();
        match t.get("config") {
            None => entries.push(Entry {
                name: String::new(),
                store: base.clone(),
                terminals,
                writers,
                engine: None,
            }),
            Some(toml::Value::Array(a)) => {
                for (i, v) in a.iter().enumerate() {
                    let toml::Value::Table(c) = v else {
                        return Err(spec_err(
                            file,
                            format!("[[config]] #{} is not a table", i + 1),
                        ));
                    };
                    let mut knobs = c.clone();
                    let cname = knobs
                        .remove("name")
                        .map(|v| value_label(&v))
                        .unwrap_or_else(|| format!("config{}", i + 1));
                    let terms = match knobs.remove("terminals") {
                        Some(toml::Value::Integer(n)) if n > 0 => n as usize,
                        Some(v) => {
                            return Err(spec_err(
                                file,
                                format!("{cname}: terminals = {v} is not a positive integer"),
                            ))
                        }
                        None => terminals,
                    };
                    let wmode = match knobs.remove("writers") {
                        Some(v) => parse_writers(&v, file, &format!("{cname}: "))?,
                        None => writers,
                    };
                    let engine = match knobs.remove("engine") {
                        None => None,
                        Some(toml::Value::String(e)) if ENGINES.contains(&e.as_str()) => Some(e),
                        Some(v) => {
                            return Err(spec_err(
                                file,
                                format!(
                                    "{cname}: engine = {v} is not one of {}",
                                    ENGINES.join(", ")
                                ),
                            ))
                        }
                    };
                    let own =
                        StoreConfig::from_toml_table(&knobs, &format!("{file} config {cname}"))?;
                    entries.push(Entry {
                        name: cname,
                        store: base.overlay(&own),
                        terminals: terms,
                        writers: wmode,
                        engine,
                    });
                }
            }
            Some(_) => {
                return Err(spec_err(
                    file,
                    "`config` must be an array of tables ([[config]])",
                ))
            }
        }

        // Axes: cartesian product, in the order the axes are written.
        if let Some(axes) = t.get("axes") {
            let toml::Value::Table(axes) = axes else {
                return Err(spec_err(file, "[axes] must be a table"));
            };
            for (key, vals) in axes {
                let toml::Value::Array(vals) = vals else {
                    return Err(spec_err(file, format!("axis {key} must be an array")));
                };
                if vals.is_empty() {
                    return Err(spec_err(file, format!("axis {key} is empty")));
                }
                let mut next = Vec::new();
                for e in &entries {
                    for v in vals {
                        let label = if key == "terminals" {
                            format!("T={}", value_label(v))
                        } else {
                            format!("{key}={}", value_label(v))
                        };
                        let name = if e.name.is_empty() {
                            label
                        } else {
                            format!("{} {label}", e.name)
                        };
                        let mut ne = e.clone();
                        ne.name = name;
                        if key == "writers" {
                            ne.writers = parse_writers(v, file, "axis ")?;
                        } else if key == "terminals" {
                            match v {
                                toml::Value::Integer(n) if *n > 0 => ne.terminals = *n as usize,
                                _ => {
                                    return Err(spec_err(
                                        file,
                                        format!(
                                            "terminals axis value {v} is not a positive integer"
                                        ),
                                    ))
                                }
                            }
                        } else {
                            let mut one = toml::Table::new();
                            one.insert(key.clone(), v.clone());
                            let knob =
                                StoreConfig::from_toml_table(&one, &format!("{file} axis {key}"))?;
                            ne.store = ne.store.overlay(&knob);
                        }
                        next.push(ne);
                    }
                }
                entries = next;
            }
        }
        for (i, e) in entries.iter_mut().enumerate() {
            if e.name.is_empty() {
                e.name = format!("config{}", i + 1);
            }
        }
        let mut seen = std::collections::HashSet::new();
        for e in &entries {
            if !seen.insert(e.name.clone()) {
                return Err(spec_err(
                    file,
                    format!("two configurations are named {:?}", e.name),
                ));
            }
        }
        Ok(MatrixSpec {
            name,
            description: get_str(&t, "description"),
            published: get_str(&t, "published"),
            warehouses: warehouses as u16,
            terminals,
            writers,
            duration: get_secs(&t, "duration", 60.0, file)?,
            warmup: get_secs(&t, "warmup", 10.0, file)?,
            interval: get_secs(&t, "interval", 10.0, file)?,
            repeats: get_u64(&t, "repeats", 3, file)?.max(1) as usize,
            seed: get_u64(&t, "seed", 1, file)?,
            load_per_config: get_bool(&t, "load_per_config", false, file)?,
            check: get_bool(&t, "check", true, file)?,
            memory_baseline: get_bool(&t, "memory_baseline", false, file)?,
            base,
            entries,
        })
    }
}
