//! Reading a store's log files straight from the directory, for the subcommands that read the
//! log without opening the store (`dump log`, `backup`): one place that knows which files the
//! header's layout can use, and how a copy keeps files the log removes meanwhile
//! ([`HeldFiles`]).

use keel_redo_log::inspect::{parse_file_name, StaticHeader};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The highest log file number read (a growing log's files are numbered from 0 up; a stray file
/// numbered beyond this is ignored, never a reason to allocate an image slot per number).
const MAX_FILE_NUMBER: usize = 1 << 20;

/// The number of the log file `name` if the header's layout can use it: a preallocated log's
/// files are `0..files`, a growing log's numbered up to [`MAX_FILE_NUMBER`].
fn usable_number(name: &str, st: &StaticHeader) -> Option<usize> {
    let n = parse_file_name(name).and_then(|n| usize::try_from(n).ok())?;
    let limit = if st.preallocated {
        st.files as usize
    } else {
        MAX_FILE_NUMBER
    };
    (n < limit).then_some(n)
}

/// The log files of `log_dir` that the header's layout can use, read whole: (file number, file
/// name, bytes), ordered by file number. A preallocated log's files are `0..files`; others are
/// ignored.
///
/// # Errors
///
/// The directory or a file cannot be read (the message names it).
pub fn read(log_dir: &Path, st: &StaticHeader) -> Result<Vec<(usize, String, Vec<u8>)>, String> {
    let mut held = Held::new(log_dir, st);
    held.poll()?;
    held.read_all()
}

/// The first `HEADER_BYTES` of the log header file at `path` (all of it when shorter): the
/// header is that long, and a damaged directory can put a 64 GiB file, or `/dev/zero`, in its
/// place (`std::fs::read` then aborted on the allocation or never ended: a tester).
///
/// # Errors
/// The file cannot be opened or read.
pub fn read_header_bytes(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::with_capacity(keel_redo_log::inspect::HEADER_BYTES);
    keel_io::os::open_without_waiting_read(path)?
        .take(keel_redo_log::inspect::HEADER_BYTES as u64)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// How often [`HeldFiles`] looks for new log files.
pub const POLL: Duration = Duration::from_millis(1);

/// A store's log files, held open from the moment they are first seen, for a copy that must
/// outlive the log's own removals (`keel backup`). A growing log removes its files behind each
/// checkpoint, but a removal only unlinks the name and the log never writes a removed file
/// again, so a file held open keeps the redo the copy needs (a preallocated log's files are
/// never removed; holding them changes nothing). A thread looks for new files every [`POLL`]
/// while the holder lives; a file made and removed within one poll is missed, and the copy's
/// scan then stops short of what it must reach, which the backup reports — never a silent gap.
/// Removed files keep their disk space until the holder is dropped.
pub struct HeldFiles {
    held: Arc<Mutex<Held>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What [`HeldFiles`]' thread and its readers share.
struct Held {
    dir: PathBuf,
    st: StaticHeader,
    /// Number → (name, open file).
    files: BTreeMap<usize, (String, File)>,
    /// The first error the polling thread met (reported by the next read).
    error: Option<String>,
}

impl Held {
    /// Nothing held yet of the log in `dir` laid out as `st`.
    fn new(dir: &Path, st: &StaticHeader) -> Held {
        Held {
            dir: dir.to_path_buf(),
            st: *st,
            files: BTreeMap::new(),
            error: None,
        }
    }

    /// Every held file read whole now, ordered by file number.
    fn read_all(&self) -> Result<Vec<(usize, String, Vec<u8>)>, String> {
        let mut out = Vec::with_capacity(self.files.len());
        for (n, (name, f)) in &self.files {
            let path = self.dir.join(name);
            let io = |e: std::io::Error| format!("{}: {e}", path.display());
            // No more than the header's file size: a log file grown past it (damage) is read
            // no further than the log uses.
            let len = f.metadata().map_err(io)?.len().min(self.st.file_size);
            let len = usize::try_from(len).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut bytes = vec![0u8; len];
            f.read_exact_at(&mut bytes, 0).map_err(io)?;
            out.push((*n, name.clone(), bytes));
        }
        Ok(out)
    }

    /// Opens every usable log file present that is not held yet. A file removed between the
    /// listing and its open is skipped (gone before it was seen).
    fn poll(&mut self) -> Result<(), String> {
        let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        for e in std::fs::read_dir(&self.dir).map_err(|e| io(&self.dir, e))? {
            let e = e.map_err(|e| io(&self.dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(n) = usable_number(&name, &self.st) else {
                continue;
            };
            if self.files.contains_key(&n) {
                continue;
            }
            match keel_io::os::open_without_waiting_read(&e.path()) {
                Ok(f) => {
                    self.files.insert(n, (name, f));
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(io(&e.path(), err)),
            }
        }
        Ok(())
    }
}

/// `m`'s guard; a poisoned lock is taken as it is (the polling thread holds it only to open
/// files, which leaves the map whole).
fn lock(m: &Mutex<Held>) -> MutexGuard<'_, Held> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HeldFiles {
    /// Holds every usable log file of `log_dir` now, and every one made later, until dropped.
    ///
    /// # Errors
    ///
    /// The directory cannot be listed or a file cannot be opened (the message names it).
    pub fn hold(log_dir: &Path, st: &StaticHeader) -> Result<HeldFiles, String> {
        let mut first = Held::new(log_dir, st);
        first.poll()?;
        let held = Arc::new(Mutex::new(first));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (held, stop) = (held.clone(), stop.clone());
            std::thread::Builder::new()
                .name("keel-backup-log".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let mut h = lock(&held);
                        if h.error.is_none() {
                            if let Err(e) = h.poll() {
                                h.error = Some(e);
                            }
                        }
                        drop(h);
                        std::thread::sleep(POLL);
                    }
                })
                .map_err(|e| format!("{}: cannot start the log follower: {e}", log_dir.display()))?
        };
        Ok(HeldFiles {
            held,
            stop,
            thread: Some(thread),
        })
    }

    /// Every held file read whole now, as [`read`] gives them (new files first held).
    ///
    /// # Errors
    ///
    /// A file cannot be read, or the polling thread met an error (the message names the file).
    pub fn read(&self) -> Result<Vec<(usize, String, Vec<u8>)>, String> {
        let mut h = lock(&self.held);
        if let Some(e) = &h.error {
            return Err(e.clone());
        }
        h.poll()?;
        h.read_all()
    }

    /// How many held files the log has removed since they were held (read from the held copy).
    pub fn removed(&self) -> usize {
        let h = lock(&self.held);
        h.files
            .values()
            .filter(|(name, _)| !h.dir.join(name).exists())
            .count()
    }
}

impl Drop for HeldFiles {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
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
