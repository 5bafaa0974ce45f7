//! The acknowledged-New-Order side file: a terminal appends `W D O` after its commit returned
//! `Ok`, so after a crash every id in the file must be in the store (the SIGKILL test).

use crate::engine::{Engine, ReadTx};
use crate::error::{TpccError, TpccResult};
use crate::schema::{self, table};

/// Reads the acknowledged-New-Order side file: (W, D, O) per line.
pub fn read_acked(path: &std::path::Path) -> TpccResult<Vec<(u16, u8, u32)>> {
    let text = std::fs::read_to_string(path).map_err(|e| TpccError::io(path, e))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let parsed = match f.as_slice() {
            [w, d, o] => w
                .parse()
                .ok()
                .zip(d.parse().ok())
                .zip(o.parse().ok())
                .map(|((w, d), o)| (w, d, o)),
            _ => None,
        };
        match parsed {
            Some(t) => out.push(t),
            // A torn last line (the process was killed mid-write) is not an acknowledgement.
            None if n + 1 == text.lines().count() && !text.ends_with('\n') => {}
            None => {
                return Err(TpccError::Config {
                    origin: path.display().to_string(),
                    detail: format!("line {} is not `W D O`: {line:?}", n + 1),
                })
            }
        }
    }
    Ok(out)
}

/// The acknowledged New-Orders (from [`read_acked`]) that are missing from the store: each must
/// have its ORDER and its ORDER-LINE rows.
pub fn missing_acked<E: Engine>(
    engine: &E,
    acked: &[(u16, u8, u32)],
) -> TpccResult<Vec<(u16, u8, u32)>> {
    let mut tx = engine.read()?;
    let mut missing = Vec::new();
    for &(w, d, o) in acked {
        if tx.get(table::ORDER, &schema::order_key(w, d, o))?.is_none()
            || tx
                .get(table::ORDER_LINE, &schema::order_line_key(w, d, o, 1))?
                .is_none()
        {
            missing.push((w, d, o));
        }
    }
    Ok(missing)
}
