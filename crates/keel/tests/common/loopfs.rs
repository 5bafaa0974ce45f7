//! Loop-mounted XFS and ext4 images for the tests that need a real file system under a store
//! (`fs_shutdown.rs`, `fs_full.rs`): a sparse image, `mkfs`, `mount -o loop`, `umount` when the
//! [`Mount`] drops. Root only: [`cannot_run`] says why a machine cannot.
//!
//! Invariant: every mount made here is unmounted and its image removed when its guard drops,
//! also when the test failed in between.

// Each test binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A file system to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fs {
    /// XFS with reflink (so `RWF_ATOMIC` works on Linux >= 6.11).
    Xfs,
    /// ext4, `data=ordered`, no blocks reserved for root (the tests run as root, and a full disk
    /// must be full for them too).
    Ext4,
}

impl Fs {
    /// The torn-page modes a store can use here: XFS with reflink does `RWF_ATOMIC` (software
    /// fallback, Linux >= 6.11); ext4 on a loop device does not.
    pub fn torn_page_modes(self) -> &'static [keel::TornPage] {
        use keel::TornPage::*;
        match self {
            Fs::Xfs => &[Doublewrite, FullPageWrites, Atomic, None],
            Fs::Ext4 => &[Doublewrite, FullPageWrites, None],
        }
    }

    /// `xfs` or `ext4`.
    pub fn name(self) -> &'static str {
        match self {
            Fs::Xfs => "xfs",
            Fs::Ext4 => "ext4",
        }
    }
}

/// A loop-mounted file system image; unmounted (and its image removed) on drop.
pub struct Mount {
    image: PathBuf,
    /// Where it is mounted.
    pub dir: PathBuf,
    mounted: bool,
}

pub fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Mount {
    /// Makes a sparse image of the file system's default size in `base` (XFS 512 MiB: it wants
    /// at least 300; ext4 128 MiB) and mounts it at `base/mnt`.
    pub fn create(fs: Fs, base: &Path) -> Result<Mount, String> {
        let size: u64 = if fs == Fs::Xfs { 512 << 20 } else { 128 << 20 };
        Mount::create_sized(fs, base, size)
    }

    /// [`Mount::create`] with an image of `size` bytes.
    pub fn create_sized(fs: Fs, base: &Path, size: u64) -> Result<Mount, String> {
        let image = base.join("fs.img");
        let dir = base.join("mnt");
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        make_image(fs, &image, size, None)?;
        let mut m = Mount {
            image,
            dir,
            mounted: false,
        };
        m.mount()?;
        Ok(m)
    }

    /// Mounts the image again.
    pub fn mount(&mut self) -> Result<(), String> {
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&self.image)
            .arg(&self.dir))?;
        self.mounted = true;
        Ok(())
    }

    /// Unmounts ([`unmount`]: retried while busy).
    pub fn unmount(&mut self) -> Result<(), String> {
        if self.mounted {
            unmount(&self.dir)?;
            self.mounted = false;
        }
        Ok(())
    }

    /// The power loss: everything not yet on the loop device is dropped.
    pub fn shut_down(&self) -> Result<(), String> {
        run(Command::new("xfs_io")
            .args(["-x", "-c", "shutdown"])
            .arg(&self.dir))
    }
}

/// Unmounts `dir`, retrying for up to 10 s while it is busy: a killed process's files (and
/// io_uring workers), and a closed store's io_uring ring (torn down by the kernel in the
/// background), are released a moment after the process is reaped or the store closed.
pub fn unmount(dir: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match run(Command::new("umount").arg(dir)) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Makes a sparse image of `size` bytes at `image` holding an empty file system; with `sector`,
/// for a device of that logical sector size (4 KiB file system blocks, and XFS sectors of
/// `sector` bytes: a file system whose sectors are smaller than the device's does not mount).
pub fn make_image(fs: Fs, image: &Path, size: u64, sector: Option<u32>) -> Result<(), String> {
    let file = std::fs::File::create(image).map_err(|e| format!("{}: {e}", image.display()))?;
    file.set_len(size)
        .map_err(|e| format!("{}: {e}", image.display()))?;
    drop(file);
    let mut cmd = match fs {
        Fs::Xfs => {
            let mut c = Command::new("mkfs.xfs");
            c.args(["-q", "-f", "-m", "reflink=1"]);
            if let Some(s) = sector {
                c.args(["-s", &format!("size={s}")]);
            }
            c
        }
        Fs::Ext4 => {
            let mut c = Command::new("mkfs.ext4");
            c.args(["-q", "-F", "-m", "0"]);
            if sector.is_some() {
                c.args(["-b", "4096"]);
            }
            c
        }
    };
    run(cmd.arg(image))
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted && self.unmount().is_err() {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Why this machine cannot run the test, if it cannot.
pub fn cannot_run(fs: Fs) -> Option<String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        });
    if uid.as_deref() != Some("0") {
        return Some("not root (loop mounts)".into());
    }
    let mkfs = if fs == Fs::Xfs {
        "mkfs.xfs"
    } else {
        "mkfs.ext4"
    };
    for tool in [mkfs, "xfs_io", "mount", "umount"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("{tool} not found"));
        }
    }
    None
}

/// Runs the rounds of a real-file-system test on `fs` (`round(seed, dir, tally)`, each
/// failure printed as it comes): the seeds from `{env}_SEED` (default 1), `{env}_ROUNDS` of them
/// (default `default_rounds`), in a temporary directory for the images; then prints
/// `<test> <fs>: rounds <seeds>: <tally>` and fails the test listing the failed rounds, if any.
/// When this machine cannot run them (see [`cannot_run`]; `tools` are further commands the test
/// needs) it prints `SKIPPED: <test> <fs>: <reason>` instead.
pub fn run_rounds<T: std::fmt::Debug + Default>(
    test: &str,
    fs: Fs,
    env: &str,
    default_rounds: u64,
    tools: &[&str],
    mut round: impl FnMut(u64, &Path, &mut T) -> Result<(), String>,
) {
    let name = fs.name();
    let why = cannot_run(fs).or_else(|| {
        tools
            .iter()
            .find(|t| Command::new(t).arg("-V").output().is_err())
            .map(|t| format!("{t} not found"))
    });
    if let Some(why) = why {
        println!("SKIPPED: {test} {name}: {why}");
        return;
    }
    let var = |suffix: &str, default: u64| {
        std::env::var(format!("{env}_{suffix}"))
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (count, first) = (var("ROUNDS", default_rounds), var("SEED", 1));
    let base = tempfile::Builder::new()
        .prefix(&format!("keel-{test}-{name}-"))
        .tempdir()
        .expect("temp dir");
    let mut failures = Vec::new();
    let mut tally = T::default();
    for seed in first..first + count {
        if let Err(e) = round(seed, base.path(), &mut tally) {
            println!("  FAILED {test} {name} seed {seed}: {e}");
            failures.push(format!("seed {seed}: {e}"));
        }
    }
    println!(
        "{test} {name}: rounds {:?}: {tally:?}",
        first..first + count
    );
    assert!(
        failures.is_empty(),
        "{} round(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
