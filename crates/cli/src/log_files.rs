//! Reading a store's log files straight from the directory, for the subcommands that read the
//! log without opening the store (`dump log`, `backup`): one place that knows which files the
//! header's layout can use.

use keel_redo_log::inspect::{parse_file_name, StaticHeader};
use std::path::Path;

/// The highest log file number read (a growing log's files are numbered from 0 up; a stray file
/// numbered beyond this is ignored, never a reason to allocate an image slot per number).
const MAX_FILE_NUMBER: usize = 1 << 20;

/// The log files of `log_dir` that the header's layout can use, read whole: (file number, file
/// name, bytes), ordered by file number. A preallocated log's files are `0..files`; others are
/// ignored.
///
/// # Errors
///
/// The directory or a file cannot be read (the message names it).
pub fn read(log_dir: &Path, st: &StaticHeader) -> Result<Vec<(usize, String, Vec<u8>)>, String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir(log_dir).map_err(|e| io(log_dir, e))? {
        let e = e.map_err(|e| io(log_dir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(n) = parse_file_name(&name).and_then(|n| usize::try_from(n).ok()) else {
            continue;
        };
        let limit = if st.preallocated {
            st.files as usize
        } else {
            MAX_FILE_NUMBER
        };
        if n >= limit {
            continue;
        }
        let bytes = std::fs::read(e.path()).map_err(|err| io(&e.path(), err))?;
        out.push((n, name, bytes));
    }
    out.sort();
    Ok(out)
}

/// `files` as the recovery scan takes them: images indexed by file number, missing ones empty.
pub fn indexed(files: &[(usize, String, Vec<u8>)]) -> Vec<&[u8]> {
    let count = files.last().map_or(0, |(n, _, _)| n + 1);
    let mut refs: Vec<&[u8]> = vec![&[]; count];
    for (n, _, bytes) in files {
        refs[*n] = bytes;
    }
    refs
}
