//! keel-tpcc's error type.

use std::path::PathBuf;

use crate::engine::EngineError;

/// Every error keel-tpcc reports.
#[derive(Debug, thiserror::Error)]
pub enum TpccError {
    /// The storage engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A row read from the store does not decode.
    #[error("corrupt row in table {table}, key {key}: {detail}")]
    Corrupt {
        /// Table name.
        table: &'static str,
        /// The key, hex-encoded.
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// A row the workload needs is missing.
    #[error("missing row in table {table}, key {key}")]
    Missing {
        /// Table name.
        table: &'static str,
        /// The key, described.
        key: String,
    },
    /// A file operation failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A configuration, spec file or flag is invalid.
    #[error("invalid configuration ({origin}): {detail}")]
    Config {
        /// The file or knob.
        origin: String,
        /// What is wrong.
        detail: String,
    },
    /// The directory holds no loaded TPC-C data, or data of another format.
    #[error("{0}")]
    NotLoaded(String),
    /// An external command (mkfs, mount, cp) failed.
    #[error("command `{command}` failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status and stderr.
        detail: String,
    },
    /// A terminal thread failed.
    #[error("terminal {terminal}: {detail}")]
    Terminal {
        /// Terminal number.
        terminal: usize,
        /// The error.
        detail: String,
    },
    /// A transaction conflicted on every one of its attempts (concurrent writers): the bound on
    /// retries was reached rather than looping forever.
    #[error(
        "{kind} conflicted {attempts} times in a row (retry bound reached); last conflict: {last}"
    )]
    RetriesExhausted {
        /// Transaction type.
        kind: &'static str,
        /// Attempts made (the first one and every retry).
        attempts: u32,
        /// The last conflict's message.
        last: String,
    },
    /// Anything else that stops a command, with a message for the user.
    #[error("{0}")]
    Usage(String),
}

/// Result alias.
pub type TpccResult<T> = Result<T, TpccError>;

impl TpccError {
    /// Whether this is an engine conflict ([`EngineError::Conflict`]): the transaction applied
    /// nothing and may be run again.
    pub fn is_conflict(&self) -> bool {
        matches!(self, TpccError::Engine(e) if e.is_conflict())
    }

    /// Wraps an I/O error with its path.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> TpccError {
        TpccError::Io {
            path: path.into(),
            source,
        }
    }
}
