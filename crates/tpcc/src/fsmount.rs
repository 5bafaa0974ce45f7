//! Loop-mounted file systems for the file-system axis of a matrix (`--fs ext4,ext4-journal,xfs`):
//! a sparse image file, `mkfs`, `mount -o loop`, and `umount` when the [`Mounted`] guard drops.
//!
//! Root only: without root the command stops with a clear message before touching anything.
//! Invariant: every mount made here is unmounted (and its image removed) when its guard drops,
//! also when the run in between failed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{TpccError, TpccResult};

/// A file system to run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum FsKind {
    /// ext4 with the default `data=ordered`.
    Ext4,
    /// ext4 with `data=journal` (data blocks go through the journal).
    Ext4Journal,
    /// XFS with reflink (and so software atomic writes on Linux ≥ 6.11).
    Xfs,
}

impl FsKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FsKind::Ext4 => "ext4",
            FsKind::Ext4Journal => "ext4-journal",
            FsKind::Xfs => "xfs",
        }
    }

    /// Parses `ext4,ext4-journal,xfs`.
    pub fn parse_list(s: &str) -> TpccResult<Vec<FsKind>> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let k = match part {
                "ext4" => FsKind::Ext4,
                "ext4-journal" | "ext4_journal" => FsKind::Ext4Journal,
                "xfs" => FsKind::Xfs,
                other => {
                    return Err(TpccError::Usage(format!(
                        "unknown file system {other:?} in --fs (expected ext4, ext4-journal, xfs)"
                    )))
                }
            };
            if !out.contains(&k) {
                out.push(k);
            }
        }
        if out.is_empty() {
            return Err(TpccError::Usage(
                "--fs needs at least one file system".into(),
            ));
        }
        Ok(out)
    }
}

/// Whether the process runs with effective uid 0 (read from `/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Stops with a clear message unless root.
pub fn require_root() -> TpccResult<()> {
    if is_root() {
        Ok(())
    } else {
        Err(TpccError::Usage(
            "--fs creates and loop-mounts file systems, which needs root: run as root (sudo), or drop --fs to run on the current file system".into(),
        ))
    }
}

fn run(cmd: &mut Command) -> TpccResult<()> {
    let line = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|e| TpccError::Command {
        command: line.clone(),
        detail: format!("cannot start: {e}"),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TpccError::Command {
            command: line,
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// A mounted loop file system; unmounted and its image removed on drop.
#[derive(Debug)]
pub struct Mounted {
    /// Which file system.
    pub kind: FsKind,
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    image: PathBuf,
}

impl Mounted {
    /// Creates a sparse image of `size` bytes under `base`, makes `kind` on it and mounts it at
    /// `base/<name>/mnt`.
    pub fn create(kind: FsKind, base: &Path, size: u64) -> TpccResult<Mounted> {
        require_root()?;
        let dir = base.join(kind.name());
        std::fs::create_dir_all(&dir).map_err(|e| TpccError::io(&dir, e))?;
        let image = dir.join("fs.img");
        let mountpoint = dir.join("mnt");
        std::fs::create_dir_all(&mountpoint).map_err(|e| TpccError::io(&mountpoint, e))?;
        let f = std::fs::File::create(&image).map_err(|e| TpccError::io(&image, e))?;
        f.set_len(size).map_err(|e| TpccError::io(&image, e))?;
        drop(f);
        let mkfs = match kind {
            FsKind::Ext4 | FsKind::Ext4Journal => {
                run(Command::new("mkfs.ext4").args(["-F", "-q"]).arg(&image))
            }
            FsKind::Xfs => run(Command::new("mkfs.xfs")
                .args(["-f", "-q", "-m", "reflink=1"])
                .arg(&image)),
        };
        if let Err(e) = mkfs {
            let _ = std::fs::remove_file(&image);
            return Err(TpccError::Usage(format!(
                "{e} (are e2fsprogs / xfsprogs installed? apt-get install e2fsprogs xfsprogs)"
            )));
        }
        let opts = match kind {
            FsKind::Ext4Journal => "loop,data=journal",
            _ => "loop",
        };
        if let Err(e) = run(Command::new("mount")
            .args(["-o", opts])
            .arg(&image)
            .arg(&mountpoint))
        {
            let _ = std::fs::remove_file(&image);
            return Err(e);
        }
        Ok(Mounted {
            kind,
            mountpoint,
            image,
        })
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(e) = run(Command::new("umount").arg(&self.mountpoint)) {
            eprintln!(
                "warning: could not unmount {}: {e}; unmount it by hand",
                self.mountpoint.display()
            );
            return;
        }
        let _ = std::fs::remove_file(&self.image);
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}

/// Copies directory `src` to `dst` (which must not exist) with `cp -a --reflink=auto`, so file
/// systems with reflink share the blocks instead of copying them.
pub fn copy_dir(src: &Path, dst: &Path) -> TpccResult<()> {
    if dst.exists() {
        std::fs::remove_dir_all(dst).map_err(|e| TpccError::io(dst, e))?;
    }
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent).map_err(|e| TpccError::io(parent, e))?;
    }
    run(Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(src)
        .arg(dst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_lists_parse_and_reject_unknown_names() {
        assert_eq!(
            FsKind::parse_list("ext4,ext4-journal,xfs").unwrap(),
            vec![FsKind::Ext4, FsKind::Ext4Journal, FsKind::Xfs]
        );
        assert!(FsKind::parse_list("zfs")
            .unwrap_err()
            .to_string()
            .contains("zfs"));
        assert!(FsKind::parse_list("").is_err());
    }

    #[test]
    fn copy_dir_copies_files() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("a");
        std::fs::create_dir(&a).unwrap();
        std::fs::write(a.join("f"), b"hello").unwrap();
        let b = t.path().join("x/b");
        copy_dir(&a, &b).unwrap();
        assert_eq!(std::fs::read(b.join("f")).unwrap(), b"hello");
        // Copying again replaces the old copy.
        std::fs::write(a.join("f"), b"again").unwrap();
        copy_dir(&a, &b).unwrap();
        assert_eq!(std::fs::read(b.join("f")).unwrap(), b"again");
    }
}
