//! The cold case of `peers.rs` under a memory limit: each engine's random gets run in a child
//! process inside a memory cgroup of its own (the engine's cache plus a fixed slack), so the
//! buffered engines cannot keep the data in the OS page cache beyond that limit while Keel
//! (O_DIRECT) reads its misses from the device — the memory-limited comparison issue 16 asks
//! for. Page-cache pages count against a cgroup's memory limit in both cgroup versions.
//!
//! cgroup v1 (a `memory` hierarchy under `/sys/fs/cgroup/memory`) and v2 (`/sys/fs/cgroup` with
//! the `memory` controller enabled for children) are supported; without either (not root, no
//! controller) the case runs unlimited and says so on a `NOTE:` line.

use std::path::{Path, PathBuf};

/// A memory cgroup made for one child run; removed when dropped.
pub struct MemCgroup {
    dir: PathBuf,
    v2: bool,
}

/// The environment variable that makes the bench binary a cold child:
/// `engine|dir|rows|cache|seed|cgroup.procs path`.
pub const CHILD_ENV: &str = "KEEL_PEERS_COLD_CHILD";

impl MemCgroup {
    /// A fresh cgroup limited to `limit` bytes (memory plus page cache), below this process's
    /// own memory cgroup.
    ///
    /// # Errors
    ///
    /// No memory controller is reachable, or it refuses the directory or the limit (not root).
    pub fn create(name: &str, limit: u64) -> Result<MemCgroup, String> {
        let cg = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let v1_root = Path::new("/sys/fs/cgroup/memory");
        // v1: a line `N:memory:/path` and the memory hierarchy mounted.
        let v1 = cg.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
            ctrl.split(',')
                .any(|c| c == "memory")
                .then(|| path.trim_start_matches('/').to_string())
        });
        let (dir, v2) = match v1 {
            Some(path) if v1_root.join("memory.limit_in_bytes").exists() => {
                (v1_root.join(path).join(name), false)
            }
            _ => {
                // v2: the line `0::/path`; children can use `memory` if the parent's
                // subtree_control lists it.
                let path = cg
                    .lines()
                    .find_map(|l| l.strip_prefix("0::"))
                    .ok_or("no memory cgroup (neither v1 memory nor v2)")?;
                let own = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
                let sub = std::fs::read_to_string(own.join("cgroup.subtree_control"))
                    .map_err(|e| format!("{}: {e}", own.display()))?;
                if !sub.split_whitespace().any(|c| c == "memory") {
                    return Err(format!(
                        "cgroup v2 {} does not enable the memory controller for children",
                        own.display()
                    ));
                }
                (own.join(name), true)
            }
        };
        if dir.exists() {
            let _ = std::fs::remove_dir(&dir);
        }
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cg = MemCgroup { dir, v2 };
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        cg.write(file, &limit.to_string())?;
        Ok(cg)
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        let p = self.dir.join(file);
        std::fs::write(&p, value).map_err(|e| format!("{}: {e}", p.display()))
    }

    /// The file a process writes its pid into to join.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The most memory the cgroup held (bytes), if the kernel reports it.
    pub fn peak(&self) -> Option<u64> {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Empty once the child exited; its page-cache charges move to the parent.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Makes the calling process join the cgroup whose `cgroup.procs` is `procs`.
///
/// # Errors
///
/// The kernel refuses the write.
pub fn join(procs: &Path) -> Result<(), String> {
    std::fs::write(procs, std::process::id().to_string())
        .map_err(|e| format!("{}: {e}", procs.display()))
}
