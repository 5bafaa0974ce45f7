//! The log's data files: naming, creation (zero-filled preallocation), opening, and reading
//! blocks for the scan.

use crate::block::Geometry;
use crate::error::{LogError, Result};
use crate::scan::BlockSource;
use keel_io::{preallocate, AlignedBuf, File, FileSystem, OpenOptions, Preallocation};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of log data file `i`.
pub(crate) fn file_name(i: u64) -> String {
    format!("log.{i:010}")
}

/// The index of a log data file name, if it is one.
pub fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("log.")?;
    if digits.len() < 10 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The open data files of a log.
#[derive(Debug)]
pub(crate) struct LogFileSet {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    geo: Geometry,
    opts: OpenOptions,
    open: BTreeMap<u64, Arc<dyn File>>,
}

impl LogFileSet {
    /// Creates the files of a new log: preallocated files are zero-filled and synced; growing
    /// logs start without files.
    pub fn create(
        fs: &Arc<dyn FileSystem>,
        dir: &Path,
        geo: &Geometry,
        opts: OpenOptions,
        file_size: u64,
    ) -> Result<()> {
        if !geo.preallocated {
            return Ok(());
        }
        // A creation that fails part-way (a full device) removes what it made rather than
        // leave the device full of zeros until the next open clears the interrupted creation.
        let made = (|| -> Result<()> {
            for i in 0..geo.files as u64 {
                let path = dir.join(file_name(i));
                let f = fs.open(&path, &opts.create(true))?;
                if f.len()? != file_size {
                    f.set_len(file_size)?;
                }
                // The zeros go through O_DIRECT where the file system takes it: they bypass the
                // page cache, which a log sized to a large pool would otherwise fill (measured: a
                // 928 MiB log took 0.55-2.3 s to create buffered, the slow end when the memory had
                // to be reclaimed first, and 0.45 s direct). Elsewhere, or if a direct write
                // fails, the buffered handle writes them all.
                let direct = fs.open(&path, &opts.direct(true)).ok();
                let filled = direct
                    .is_some_and(|d| preallocate(&*d, file_size, Preallocation::Zeroed).is_ok());
                if !filled {
                    preallocate(&*f, file_size, Preallocation::Zeroed)?;
                }
            }
            Ok(())
        })();
        if made.is_err() {
            for i in 0..geo.files as u64 {
                let path = dir.join(file_name(i));
                if fs.exists(&path).unwrap_or(false) {
                    let _ = fs.remove_file(&path);
                }
            }
        }
        made
    }

    /// Opens the files of an existing log (preallocated: every file must have its size). The
    /// page cache's copies of them are dropped first, so that the scan reads what the device
    /// holds: after a failed sync the cache keeps, clean, log blocks the device never got, and
    /// on ext4 writing them again through those cached pages does not reach the disk
    /// (`keel_io::File::drop_cache`).
    pub fn open(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        geo: Geometry,
        opts: OpenOptions,
        file_size: u64,
    ) -> Result<LogFileSet> {
        let mut open = BTreeMap::new();
        if geo.preallocated {
            for i in 0..geo.files as u64 {
                let path = dir.join(file_name(i));
                if !fs.exists(&path)? {
                    return Err(LogError::BadFile {
                        path,
                        reason: "preallocated log file is missing".into(),
                    });
                }
                let f = fs.open(&path, &opts)?;
                f.drop_cache()?;
                let len = f.len()?;
                if len != file_size {
                    return Err(LogError::BadFile {
                        path,
                        reason: format!(
                            "preallocated log file has {len} bytes, expected {file_size}"
                        ),
                    });
                }
                open.insert(i, f);
            }
        } else {
            for path in fs.list_dir(dir)? {
                let Some(i) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(parse_name)
                else {
                    continue;
                };
                let f = fs.open(&path, &opts)?;
                f.drop_cache()?;
                open.insert(i, f);
            }
        }
        Ok(LogFileSet {
            fs,
            dir: dir.to_path_buf(),
            geo,
            opts,
            open,
        })
    }

    /// Path of file `i`.
    pub fn path(&self, i: u64) -> PathBuf {
        self.dir.join(file_name(i))
    }

    /// The newest file (growing logs: the highest index present).
    pub fn newest(&self) -> Option<u64> {
        self.open.keys().next_back().copied()
    }

    /// The newest file with an index up to `i`.
    pub fn newest_up_to(&self, i: u64) -> Option<u64> {
        self.open.range(..=i).next_back().map(|(k, _)| *k)
    }

    /// Syncs every open file (`fdatasync`), whatever the log's sync method: the redo a recovery
    /// scanned may have been read from the page cache, written by a process that died before it
    /// synced (`RedoLog::sync_recovered`), and then the log's directory. Returns the syncs made.
    ///
    /// # Errors
    /// The first sync that failed, with its file (or the directory).
    pub fn sync_all(&self) -> std::result::Result<u64, (PathBuf, keel_io::IoError)> {
        for (&i, f) in &self.open {
            f.sync(keel_io::SyncMethod::Fdatasync)
                .map_err(|e| (self.path(i), e))?;
        }
        // And their names: a growing log's file whose creation found its directory sync failing
        // (the log poisoned) is there on the same boot, its entry maybe not durable; a reopen
        // that appended to it acknowledged commits a power loss then took with the file (a
        // tester). Synced once per open, so nothing is written to a file the directory might
        // lose.
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| (self.dir.clone(), e))?;
        Ok(self.open.len() as u64 + 1)
    }

    /// Writes blocks `first..end` back where they are, as they read now (runs of up to 64
    /// blocks, aligned, so direct files work), without syncing. A read that came from the page
    /// cache may hold bytes the device never got: after a failed sync, Linux keeps the failed
    /// pages in the cache *clean*, so a later sync writes nothing and reports success, while a
    /// power loss takes them. Written again, they are dirty, and the sync after this one either
    /// makes them durable or fails (`RedoLog::sync_recovered`). Blocks of files that are not
    /// open or end before them are skipped. Returns the blocks written.
    ///
    /// # Errors
    /// The first read or write that failed, with its file.
    pub fn rewrite_blocks(
        &self,
        first: u64,
        end: u64,
    ) -> std::result::Result<u64, (PathBuf, keel_io::IoError)> {
        let b = self.geo.block as u64;
        let mut buf = AlignedBuf::page(WINDOW_BLOCKS * self.geo.block);
        let mut n = first;
        let mut written = 0u64;
        while n < end {
            let (fi, off) = self.geo.location(n);
            // A run within one file: up to the window, the file's end, and `end`.
            let in_file = self.geo.blocks_per_file - off / b;
            let run = (end - n).min(in_file).min(WINDOW_BLOCKS as u64);
            n += run;
            let Some(file) = self.existing(fi) else {
                continue;
            };
            let len = file.len().map_err(|e| (self.path(fi), e))? / b * b;
            let run = run.min(len.saturating_sub(off) / b);
            if run == 0 {
                continue;
            }
            let bytes = &mut buf[..(run * b) as usize];
            file.read_exact_at(bytes, off)
                .map_err(|e| (self.path(fi), e))?;
            file.write_all_at(bytes, off)
                .map_err(|e| (self.path(fi), e))?;
            written += run;
        }
        Ok(written)
    }

    /// File `i` if it is open.
    pub fn existing(&self, i: u64) -> Option<&Arc<dyn File>> {
        self.open.get(&i)
    }

    /// File `i`, created if missing (growing logs).
    pub fn get_or_create(&mut self, i: u64) -> keel_io::Result<Arc<dyn File>> {
        if let Some(f) = self.open.get(&i) {
            return Ok(f.clone());
        }
        let f = self.fs.open(&self.path(i), &self.opts.create(true))?;
        self.open.insert(i, f.clone());
        Ok(f)
    }

    /// Growing logs: deletes every file with an index below `i`, oldest first. A file whose
    /// unlink failed stays in the set, with every later one: the next call tries it again, and
    /// the files present stay one run of indexes (before, the set forgot a file whose unlink
    /// failed, which then stayed on disk until the next open).
    ///
    /// # Errors
    /// The unlink that failed; the files from it on are kept. A file already gone counts as
    /// removed.
    pub fn remove_before(&mut self, i: u64) -> Result<()> {
        if self.geo.preallocated {
            return Ok(());
        }
        let old: Vec<u64> = self.open.range(..i).map(|(k, _)| *k).collect();
        for k in old {
            match self.fs.remove_file(&self.path(k)) {
                Ok(()) | Err(keel_io::IoError::NotFound { .. }) => {
                    self.open.remove(&k);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Growing logs: deletes every file with an index above `i` and cuts file `i` to `len`
    /// bytes (durably).
    pub fn truncate_after(&mut self, i: u64, len: u64) -> Result<()> {
        if self.geo.preallocated {
            return Ok(());
        }
        // Newest first: a crash part-way leaves the files up to some index, never a gap.
        let later: Vec<u64> = self.open.range(i + 1..).rev().map(|(k, _)| *k).collect();
        for k in later {
            self.open.remove(&k);
            self.fs.remove_file(&self.path(k))?;
        }
        if let Some(f) = self.open.get(&i) {
            if f.len()? > len {
                f.set_len(len)?;
                f.sync_all()?;
            }
        }
        Ok(())
    }
}

const WINDOW_BLOCKS: usize = 64;

/// Reads blocks from the files, a window of up to 64 blocks at a time (aligned, so direct files
/// work).
pub(crate) struct FileSource<'a> {
    set: &'a LogFileSet,
    buf: AlignedBuf,
    win: Option<(u64, u64, usize)>,
}

impl<'a> FileSource<'a> {
    pub fn new(set: &'a LogFileSet) -> FileSource<'a> {
        FileSource {
            set,
            buf: AlignedBuf::page(WINDOW_BLOCKS * set.geo.block),
            win: None,
        }
    }
}

impl FileSource<'_> {
    /// Reads block `n` into `out` through an aligned piece of `span` bytes around it, kept as
    /// the window; `false` when no file holds the block.
    fn read_through(&mut self, n: u64, out: &mut [u8], span: u64) -> Result<bool> {
        let b = self.set.geo.block as u64;
        let (fi, off) = self.set.geo.location(n);
        let Some(file) = self.set.existing(fi) else {
            return Ok(false);
        };
        let len = file.len()? / b * b;
        if off + b > len {
            return Ok(false);
        }
        let wstart = off / span * span;
        let wlen = (len - wstart).min(span) as usize;
        file.read_exact_at(&mut self.buf[..wlen], wstart)?;
        self.win = Some((fi, wstart, wlen));
        let s = (off - wstart) as usize;
        out.copy_from_slice(&self.buf[s..s + b as usize]);
        Ok(true)
    }
}

impl BlockSource for FileSource<'_> {
    fn read_block(&mut self, n: u64, out: &mut [u8]) -> Result<bool> {
        let b = self.set.geo.block as u64;
        let (fi, off) = self.set.geo.location(n);
        if let Some((wf, woff, wlen)) = self.win {
            if wf == fi && off >= woff && off + b <= woff + wlen as u64 {
                let s = (off - woff) as usize;
                out.copy_from_slice(&self.buf[s..s + b as usize]);
                return Ok(true);
            }
        }
        self.read_through(n, out, WINDOW_BLOCKS as u64 * b)
    }

    /// One block, read in an aligned piece of 4 KiB (or the block, if larger) rather than a
    /// whole window: a probe of a large log that has not wrapped read the whole log through
    /// the windows (a tester: 128 MiB per open of a 2 x 64 MiB log).
    fn probe_block(&mut self, n: u64, out: &mut [u8]) -> Result<bool> {
        self.read_through(n, out, (self.set.geo.block as u64).max(4096))
    }

    fn describe(&self, n: u64) -> String {
        let (fi, off) = self.set.geo.location(n);
        format!("{} offset {off}", file_name(fi))
    }

    fn path_of(&self, n: u64) -> PathBuf {
        self.set.path(self.set.geo.location(n).0)
    }

    fn next_present(&self, n: u64) -> Option<u64> {
        if self.set.geo.preallocated {
            return None;
        }
        let (fi, _) = self.set.geo.location(n);
        let b = self.set.geo.block as u64;
        let (&j, _) = self
            .set
            .open
            .range(fi.checked_add(1)?..)
            .find(|(_, f)| f.len().is_ok_and(|len| len >= b))?;
        j.checked_mul(self.set.geo.blocks_per_file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(file_name(3), "log.0000000003");
        assert_eq!(parse_name("log.0000000003"), Some(3));
        assert_eq!(parse_name(&file_name(12345678901)), Some(12345678901));
        assert_eq!(parse_name("log.header"), None);
        assert_eq!(parse_name("log.12"), None);
        assert_eq!(parse_name("log.00000000x1"), None);
    }
}
