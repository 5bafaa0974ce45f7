//! A disk that remembers every write and every cache flush, for power losses on a real file
//! system (`power_loss.rs`): a one-file FUSE file system served by this process holds the disk
//! image in memory; a loop device on that file carries XFS or ext4, which the test mounts and
//! runs a store on. The loop device has a volatile write cache, so the file system's cache
//! flushes (`REQ_PREFLUSH`, and FUA writes, which the block layer turns into flushes for a
//! device without FUA) reach the FUSE file as `fsync`; each request is recorded, in the order
//! the device completed it, as [`Op::Write`] or [`Op::Flush`].
//!
//! [`crash_image`] then builds what a power loss after any request could leave: every write
//! before the last flush, and of the writes after it (still in the device's cache) any subset,
//! sector by sector — so writes after the last flush may be lost, reordered or torn, and
//! nothing a flush covered is.
//!
//! Invariants:
//! 1. **Completion order**: a request is recorded before it is answered, by one session thread,
//!    so a flush is recorded after every write that completed before the file system issued it
//!    (a file system waits for the completions it orders by before it flushes).
//! 2. **Nothing flushed is lost**: [`crash_image`] applies every write before the last flush of
//!    the prefix in full (`power_loss.rs` `a_crash_image_keeps_what_a_flush_covered`).
//! 3. Every mount made here is undone when its guard drops: the file system, the loop device,
//!    the FUSE mount, in that order.
//!
//! The disk can also fail requests ([`RecordingDisk::fail`], for `device_errors.rs`): a write
//! or read touching a failing byte range, or a cache flush, is answered EIO and changes and
//! records nothing, as a device's media or transport error would be; [`RecordingDisk::heal`]
//! ends that.
//!
//! Not modelled: a device that persists a sector it never completed (the write of a request in
//! flight at the power loss is dropped whole, or torn only at sector boundaries), and the
//! memory-pressure deadlock of a FUSE server that is also the client (the images are small).

// Each test binary uses a part of it.
#![allow(dead_code)]

use super::loopfs::{run, unmount};
use super::rng::Rng;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite,
    Request, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, UNIX_EPOCH};

/// One request the device completed.
#[derive(Clone, Debug)]
pub enum Op {
    /// `data` written at byte `offset`.
    Write { offset: u64, data: Vec<u8> },
    /// A cache flush: every write before it is durable.
    Flush,
}

/// The disk: its current bytes and every request since it was attached.
struct Disk {
    bytes: Vec<u8>,
    ops: Vec<Op>,
    failing: Failing,
    refused: Refused,
}

/// The requests the disk answers with EIO, changing nothing (see [`RecordingDisk::fail`]).
#[derive(Clone, Debug, Default)]
pub struct Failing {
    /// Byte ranges (start, end) of the disk: a write touching any of them fails.
    pub writes: Vec<(u64, u64)>,
    /// Byte ranges: a read touching any of them fails.
    pub reads: Vec<(u64, u64)>,
    /// Every cache flush fails.
    pub flushes: bool,
}

impl Failing {
    fn touches(ranges: &[(u64, u64)], offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        ranges.iter().any(|&(s, e)| offset < e && s < end)
    }
}

/// Requests the disk refused while failing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Refused {
    pub writes: u64,
    pub reads: u64,
    pub flushes: u64,
}

/// The FUSE side: a root directory holding one file, `disk`.
struct DiskFs(Arc<Mutex<Disk>>);

const DISK_NAME: &str = "disk";
const DISK_INO: u64 = 2;
/// A second file, `position`: reading it gives [`RecordingDisk::position`] as 20 decimal
/// digits, for a process that is not the server (`power_loss.rs`' killed child).
const POSITION_NAME: &str = "position";
const POSITION_INO: u64 = 3;
const POSITION_LEN: u64 = 20;
const TTL: Duration = Duration::from_secs(3600);

fn lock(disk: &Mutex<Disk>) -> MutexGuard<'_, Disk> {
    // A panic while holding the lock cannot leave the bytes half-updated in a way that matters
    // to the test (it fails anyway): go on with them.
    disk.lock().unwrap_or_else(|p| p.into_inner())
}

fn attr(ino: u64, size: u64) -> FileAttr {
    let dir = ino == 1;
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size / 512,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: if dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if dir { 0o755 } else { 0o600 },
        nlink: if dir { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        flags: 0,
        blksize: 4096,
    }
}

impl Filesystem for DiskFs {
    fn lookup(&self, _r: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if u64::from(parent) == 1 && name == DISK_NAME {
            let size = lock(&self.0).bytes.len() as u64;
            reply.entry(&TTL, &attr(DISK_INO, size), Generation(0));
        } else if u64::from(parent) == 1 && name == POSITION_NAME {
            reply.entry(&TTL, &attr(POSITION_INO, POSITION_LEN), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _r: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let size = lock(&self.0).bytes.len() as u64;
        match u64::from(ino) {
            1 => reply.attr(&TTL, &attr(1, 0)),
            DISK_INO => reply.attr(&TTL, &attr(DISK_INO, size)),
            POSITION_INO => reply.attr(&TTL, &attr(POSITION_INO, POSITION_LEN)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _r: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Direct I/O: every read and write of the loop device reaches this server, none is
        // answered from (or held in) the page cache of the FUSE file.
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _r: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut d = lock(&self.0);
        if u64::from(ino) == POSITION_INO {
            let text = format!("{:020}", d.ops.len());
            let start = usize::try_from(offset).map_or(text.len(), |o| o.min(text.len()));
            reply.data(&text.as_bytes()[start..]);
            return;
        }
        if Failing::touches(&d.failing.reads, offset, u64::from(size)) {
            d.refused.reads += 1;
            reply.error(Errno::EIO);
            return;
        }
        let len = d.bytes.len();
        let start = usize::try_from(offset).map_or(len, |o| o.min(len));
        let end = start.saturating_add(size as usize).min(len);
        reply.data(&d.bytes[start..end]);
    }

    fn write(
        &self,
        _r: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wf: WriteFlags,
        _flags: OpenFlags,
        _owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut d = lock(&self.0);
        if u64::from(ino) != DISK_INO {
            reply.error(Errno::EACCES);
            return;
        }
        if Failing::touches(&d.failing.writes, offset, data.len() as u64) {
            d.refused.writes += 1;
            reply.error(Errno::EIO);
            return;
        }
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let Some(end) = start
            .checked_add(data.len())
            .filter(|&e| e <= d.bytes.len())
        else {
            reply.error(Errno::ENOSPC);
            return;
        };
        d.bytes[start..end].copy_from_slice(data);
        d.ops.push(Op::Write {
            offset,
            data: data.to_vec(),
        });
        reply.written(data.len() as u32);
    }

    fn fsync(&self, _r: &Request, _ino: INodeNo, _fh: FileHandle, _ds: bool, reply: ReplyEmpty) {
        let mut d = lock(&self.0);
        if d.failing.flushes {
            d.refused.flushes += 1;
            reply.error(Errno::EIO);
            return;
        }
        d.ops.push(Op::Flush);
        reply.ok();
    }

    fn flush(
        &self,
        _r: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) of the FUSE file, not a cache flush.
        reply.ok();
    }

    fn readdir(
        &self,
        _r: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if u64::from(ino) != 1 {
            reply.error(Errno::ENOENT);
            return;
        }
        let entries = [
            (1, FileType::Directory, "."),
            (1, FileType::Directory, ".."),
            (DISK_INO, FileType::RegularFile, DISK_NAME),
            (POSITION_INO, FileType::RegularFile, POSITION_NAME),
        ];
        for (i, e) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(e.0), (i + 1) as u64, e.1, e.2) {
                break;
            }
        }
        reply.ok();
    }
}

/// A recording disk with a file system mounted on it; undone on drop (invariant 3).
pub struct RecordingDisk {
    disk: Arc<Mutex<Disk>>,
    /// Where the store's file system is mounted.
    pub mnt: PathBuf,
    fuse_dir: PathBuf,
    session: Option<fuser::BackgroundSession>,
    /// The file system on the loop device over the FUSE file.
    mounted: Option<LoopMount>,
}

impl RecordingDisk {
    /// Serves `image` (its bytes at this moment: the disk before the first request) as a
    /// recording disk under `base`, attaches a loop device of `sector_size`-byte sectors to it
    /// and mounts the file system it holds at `base/mnt`.
    pub fn start(image: &Path, base: &Path, sector_size: u32) -> Result<RecordingDisk, String> {
        let bytes = std::fs::read(image).map_err(|e| format!("{}: {e}", image.display()))?;
        let fuse_dir = base.join("fuse");
        let mnt = base.join("mnt");
        for d in [&fuse_dir, &mnt] {
            std::fs::create_dir_all(d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
        }
        let disk = Arc::new(Mutex::new(Disk {
            bytes,
            ops: Vec::new(),
            failing: Failing::default(),
            refused: Refused::default(),
        }));
        let mut config = fuser::Config::default();
        config
            .mount_options
            .push(fuser::MountOption::FSName("keel-recording-disk".into()));
        // One session thread: requests are recorded in the order they arrive (invariant 1).
        config.n_threads = Some(1);
        let session = fuser::spawn_mount(DiskFs(disk.clone()), &fuse_dir, &config)
            .map_err(|e| format!("FUSE mount at {}: {e}", fuse_dir.display()))?;
        let mut me = RecordingDisk {
            disk,
            mnt,
            fuse_dir,
            session: Some(session),
            mounted: None,
        };
        me.mounted = Some(LoopMount::mount(
            &me.fuse_dir.join(DISK_NAME),
            &me.mnt,
            sector_size,
        )?);
        Ok(me)
    }

    /// How many requests the device has completed: a position in [`RecordingDisk::stop`]'s list.
    pub fn position(&self) -> usize {
        lock(&self.disk).ops.len()
    }

    /// Every request the device has completed so far.
    pub fn ops(&self) -> Vec<Op> {
        lock(&self.disk).ops.clone()
    }

    /// From now on, answers the requests `failing` names with EIO (replacing what failed before).
    pub fn fail(&self, failing: Failing) {
        lock(&self.disk).failing = failing;
    }

    /// Stops failing requests; returns how many were refused.
    pub fn heal(&self) -> Refused {
        let mut d = lock(&self.disk);
        d.failing = Failing::default();
        d.refused
    }

    /// Unmounts the file system and mounts it again (its journal replayed): what a restart of
    /// the machine after the errors, without a power loss, gives.
    pub fn remount(&mut self, sector_size: u32) -> Result<(), String> {
        if let Some(m) = &mut self.mounted {
            m.unmount()?;
        }
        self.mounted = None;
        self.mounted = Some(LoopMount::mount(
            &self.fuse_dir.join(DISK_NAME),
            &self.mnt,
            sector_size,
        )?);
        Ok(())
    }

    /// The file whose contents are [`RecordingDisk::position`] (see [`read_position`]).
    pub fn position_file(&self) -> PathBuf {
        self.fuse_dir.join(POSITION_NAME)
    }

    /// Unmounts the file system (recording its last writes) and detaches the disk; returns every
    /// request it completed.
    pub fn stop(mut self) -> Result<Vec<Op>, String> {
        self.undo()?;
        Ok(std::mem::take(&mut lock(&self.disk).ops))
    }

    fn undo(&mut self) -> Result<(), String> {
        if let Some(m) = &mut self.mounted {
            m.unmount()?;
        }
        if let Some(s) = self.session.take() {
            s.umount_and_join()
                .map_err(|e| format!("FUSE unmount {}: {e}", self.fuse_dir.display()))?;
        }
        Ok(())
    }
}

impl Drop for RecordingDisk {
    fn drop(&mut self) {
        // The file system and the loop device first (`LoopMount`'s own drop, on failure), then
        // the FUSE session, which unmounts when it drops.
        let _ = self.undo();
        self.mounted = None;
    }
}

/// The byte ranges (start, end) of the device that hold `file` (a file on a mounted recording
/// disk), from its extent map (`filefrag -b512 -e`, in 512-byte units); empty for a file with no
/// blocks on the disk yet.
pub fn extents(file: &Path) -> Result<Vec<(u64, u64)>, String> {
    let out = Command::new("filefrag")
        .args(["-b512", "-e"])
        .arg(file)
        .output()
        .map_err(|e| format!("filefrag: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "filefrag {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // Lines like "   0:        0..      31:      34816..     34847:     32:             last,eof".
    let text = String::from_utf8_lossy(&out.stdout);
    let mut ranges = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(':').map(str::trim).collect();
        if fields.len() < 4 || fields[0].parse::<u64>().is_err() {
            continue;
        }
        // An extent not yet on the disk (delayed allocation: "unknown_loc,delalloc") is listed
        // at physical block 0, the file system's own superblock: skip it.
        let flags = fields.last().copied().unwrap_or("");
        if flags.contains("unknown") || flags.contains("delalloc") || flags.contains("inline") {
            continue;
        }
        let mut phys = fields[2].split("..").map(|x| x.trim().parse::<u64>());
        if let (Some(Ok(s)), Some(Ok(e))) = (phys.next(), phys.next()) {
            if s > 0 {
                ranges.push((s * 512, (e + 1) * 512));
            }
        }
    }
    Ok(ranges)
}

/// The position a recording disk's [`RecordingDisk::position_file`] gives now.
pub fn read_position(file: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    text.trim()
        .parse()
        .map_err(|e| format!("{}: {text:?}: {e}", file.display()))
}

/// Detaches loop device `dev` and waits (up to 10 s) until it has let go of its file: the
/// kernel detaches a loop device in the background, and until it has, the file it holds (the
/// FUSE file, which must be unmounted next) is busy.
fn detach(dev: &str) -> Result<(), String> {
    run(Command::new("losetup").args(["-d", dev]))?;
    let name = dev.trim_start_matches("/dev/");
    let backing = Path::new("/sys/block").join(name).join("loop/backing_file");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while backing.exists() {
        if std::time::Instant::now() > deadline {
            return Err(format!("{dev} still attached 10 s after losetup -d"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// How the writes after the last flush fare in a crash image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cache {
    /// All lost.
    Lost,
    /// All kept.
    Kept,
    /// Each sector kept or lost at random (reordered, torn).
    Sectors,
    /// The first few kept in order, the rest lost.
    Prefix,
}

/// What [`crash_image`] did.
#[derive(Clone, Copy, Debug, Default)]
pub struct CrashImage {
    /// Writes applied whole (before the last flush of the prefix).
    pub flushed_writes: usize,
    /// Sectors written after it, and of those the ones the image keeps.
    pub cached_sectors: usize,
    pub kept_sectors: usize,
}

/// Writes to `out` what a power loss right after `ops[..at]` leaves of the disk that was `base`
/// before them: every write before the prefix's last flush (invariant 2), and of the writes
/// after it what `cache` keeps, in `sector`-byte pieces drawn from `rng`.
pub fn crash_image(
    base: &Path,
    ops: &[Op],
    at: usize,
    cache: Cache,
    sector: usize,
    rng: &mut Rng,
    out: &Path,
) -> Result<CrashImage, String> {
    run(Command::new("cp").arg("--sparse=always").arg(base).arg(out))?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let prefix = &ops[..at.min(ops.len())];
    let flushed = prefix
        .iter()
        .rposition(|o| matches!(o, Op::Flush))
        .map_or(0, |i| i + 1);
    let mut report = CrashImage::default();
    let write = |offset: u64, data: &[u8]| {
        f.write_all_at(data, offset)
            .map_err(|e| format!("{}: {e}", out.display()))
    };
    for op in &prefix[..flushed] {
        if let Op::Write { offset, data } = op {
            write(*offset, data)?;
            report.flushed_writes += 1;
        }
    }
    let cached: Vec<(u64, &[u8])> = prefix[flushed..]
        .iter()
        .filter_map(|o| match o {
            Op::Write { offset, data } => Some((*offset, data.as_slice())),
            Op::Flush => None,
        })
        .flat_map(|(offset, data)| {
            data.chunks(sector)
                .enumerate()
                .map(move |(i, c)| (offset + (i * sector) as u64, c))
        })
        .collect();
    report.cached_sectors = cached.len();
    let keep_first = rng.below(cached.len() as u64 + 1) as usize;
    for (i, (offset, data)) in cached.into_iter().enumerate() {
        let keep = match cache {
            Cache::Lost => false,
            Cache::Kept => true,
            Cache::Sectors => rng.below(2) == 0,
            Cache::Prefix => i < keep_first,
        };
        if keep {
            write(offset, data)?;
            report.kept_sectors += 1;
        }
    }
    f.sync_all()
        .map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(report)
}

/// The size of a recording disk's image for `fs`: small (the disk is held in memory and every
/// crash image is a copy), but XFS will not make a file system below 300 MiB.
pub fn image_size(fs: super::loopfs::Fs) -> u64 {
    if fs == super::loopfs::Fs::Xfs {
        320 << 20
    } else {
        64 << 20
    }
}

/// Why this machine cannot serve a recording disk, if it cannot (after [`super::loopfs`]'s
/// own reasons).
pub fn cannot_run() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    if Command::new("fusermount3").arg("-V").output().is_err()
        && Command::new("fusermount").arg("-V").output().is_err()
    {
        return Some("fusermount3 not found (Debian package fuse3)".into());
    }
    if Command::new("losetup").arg("-V").output().is_err() {
        return Some("losetup not found".into());
    }
    None
}

/// A file system on a loop device of `sector`-byte sectors attached to a file: mounted, then
/// unmounted and detached (on failure at drop: a lazy unmount and `losetup -d`).
struct LoopMount {
    dir: PathBuf,
    dev: Option<String>,
    mounted: bool,
}

impl LoopMount {
    /// Attaches `file` and mounts the file system it holds at `dir` (which replays its journal).
    fn mount(file: &Path, dir: &Path, sector: u32) -> Result<LoopMount, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let out = Command::new("losetup")
            .args(["-f", "--show", "--sector-size", &sector.to_string()])
            .arg(file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mut m = LoopMount {
            dir: dir.to_path_buf(),
            dev: Some(dev.clone()),
            mounted: false,
        };
        run(Command::new("mount").arg(&dev).arg(dir))?;
        m.mounted = true;
        Ok(m)
    }

    /// Unmounts and detaches.
    fn unmount(&mut self) -> Result<(), String> {
        if self.mounted {
            unmount(&self.dir)?;
            self.mounted = false;
        }
        if let Some(dev) = self.dev.take() {
            detach(&dev)?;
        }
        Ok(())
    }
}

impl LoopMount {
    /// [`LoopMount::unmount`], and on failure a lazy unmount and `losetup -d` (errors ignored:
    /// for drops).
    fn release(&mut self) {
        if self.unmount().is_err() {
            if self.mounted {
                let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            }
            if let Some(dev) = self.dev.take() {
                let _ = Command::new("losetup").args(["-d", &dev]).status();
            }
        }
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        self.release();
    }
}

/// An image mounted on a loop device of `sector`-byte sectors; unmounted, detached and the image
/// removed on drop.
pub struct ImageMount {
    image: PathBuf,
    /// Where it is mounted.
    pub dir: PathBuf,
    mounted: LoopMount,
}

impl ImageMount {
    /// Attaches `image` and mounts it at `dir` (the file system replays its journal).
    pub fn mount(image: &Path, dir: &Path, sector: u32) -> Result<ImageMount, String> {
        Ok(ImageMount {
            image: image.to_path_buf(),
            dir: dir.to_path_buf(),
            mounted: LoopMount::mount(image, dir, sector)?,
        })
    }

    /// Unmounts and detaches (the image stays until the guard drops).
    pub fn unmount(&mut self) -> Result<(), String> {
        self.mounted.unmount()
    }
}

impl Drop for ImageMount {
    fn drop(&mut self) {
        // The file system and the loop device go first, then the image.
        self.mounted.release();
        let _ = std::fs::remove_file(&self.image);
    }
}
