//! What a run cost the machine: process CPU time and context switches (`getrusage`), the store
//! device's bytes, requests and flushes (`/proc/diskstats` of the device holding the store), and
//! what else the machine was doing (load average, steal, CPU used by other processes, from
//! `/proc/loadavg` and `/proc/stat`). These survive a noisy machine better than throughput does:
//! a neighbour slows a run down, but it does not change how many bytes a transaction writes.
//!
//! Invariants:
//! - a [`Snapshot`] is taken at the start and at the end of the measured period by the same
//!   thread, and every figure is a difference of two snapshots (warm-up never counted);
//! - per-transaction figures divide by the transactions completed in the measured period (all
//!   five types, rolled-back New-Orders included); with none, they are 0, never NaN;
//! - a figure the machine cannot give (no block device under a tmpfs store, no `/proc`) is
//!   `None` with the reason, never a made-up 0.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// Sectors in `/proc/diskstats` are always 512 bytes, whatever the device's block size.
const SECTOR: u64 = 512;

/// CPU and scheduling counters of this process (`getrusage(RUSAGE_SELF)`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessUsage {
    /// User + system CPU time of all threads, microseconds.
    pub cpu_us: u64,
    /// Voluntary context switches (the thread blocked: I/O, a lock, a sleep).
    pub voluntary_cs: u64,
    /// Involuntary context switches (the scheduler took the CPU away).
    pub involuntary_cs: u64,
}

impl ProcessUsage {
    /// The counters now; zeros if the call fails (it cannot with `RUSAGE_SELF`).
    pub fn now() -> ProcessUsage {
        ProcessUsage::of(libc::RUSAGE_SELF)
    }

    /// The calling thread's counters now (`getrusage(RUSAGE_THREAD)`): its own CPU time and
    /// context switches, e.g. to tell a thread that lost its core to others (involuntary
    /// switches, CPU time below its wall time) from one slowed while it ran. Zeros if the call
    /// fails.
    pub fn thread_now() -> ProcessUsage {
        ProcessUsage::of(libc::RUSAGE_THREAD)
    }

    fn of(who: libc::c_int) -> ProcessUsage {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `getrusage` writes one `struct rusage` through the pointer, which points to a
        // live, properly aligned and sized (zero-initialised) buffer owned by this frame.
        let rc = unsafe { libc::getrusage(who, ru.as_mut_ptr()) };
        if rc != 0 {
            return ProcessUsage::default();
        }
        // SAFETY: zero-initialised, and `getrusage` returned 0, so the kernel filled it in; all
        // fields of `rusage` are plain integers for which any bit pattern is valid.
        let ru = unsafe { ru.assume_init() };
        let us = |t: libc::timeval| {
            (t.tv_sec.max(0) as u64)
                .saturating_mul(1_000_000)
                .saturating_add(t.tv_usec.max(0) as u64)
        };
        ProcessUsage {
            cpu_us: us(ru.ru_utime).saturating_add(us(ru.ru_stime)),
            voluntary_cs: ru.ru_nvcsw.max(0) as u64,
            involuntary_cs: ru.ru_nivcsw.max(0) as u64,
        }
    }
}

/// One device's counters from `/proc/diskstats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskCounters {
    /// Device name (`vda`, `nvme0n1p2`, `loop3`).
    pub name: String,
    /// Reads completed.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Writes completed.
    pub writes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Cache flushes completed (field 20; 0 on kernels before 5.5).
    pub flushes: u64,
}

/// Parses the line of device `major:minor` out of `/proc/diskstats` text.
pub fn parse_diskstats(text: &str, major: u32, minor: u32) -> Option<DiskCounters> {
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 14 {
            continue;
        }
        if f[0].parse::<u32>().ok() != Some(major) || f[1].parse::<u32>().ok() != Some(minor) {
            continue;
        }
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        return Some(DiskCounters {
            name: f[2].to_string(),
            reads: n(3),
            read_bytes: n(5).saturating_mul(SECTOR),
            writes: n(7),
            write_bytes: n(9).saturating_mul(SECTOR),
            flushes: n(18),
        });
    }
    None
}

/// The block device holding `dir` as `(major, minor)`, or why there is none.
pub fn device_of(dir: &Path) -> Result<(u32, u32), String> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(dir).map_err(|e| format!("stat {}: {e}", dir.display()))?;
    let dev = md.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major == 0 {
        return Err(format!(
            "{} is on a file system without a block device (tmpfs, overlay, ...): device bytes \
             are not measurable",
            dir.display()
        ));
    }
    Ok((major, minor))
}

/// Machine-wide CPU counters from the first line of `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTicks {
    /// All ticks (busy and idle).
    pub total: u64,
    /// Idle + iowait ticks.
    pub idle: u64,
    /// Ticks stolen by the hypervisor.
    pub steal: u64,
}

/// Parses the `cpu ` line of `/proc/stat` text.
pub fn parse_proc_stat(text: &str) -> Option<CpuTicks> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 8 {
        return None;
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    let total = v[..8].iter().fold(0u64, |a, b| a.saturating_add(*b));
    Some(CpuTicks {
        total,
        idle: v[3].saturating_add(v[4]),
        steal: v[7],
    })
}

/// Everything [`Costs`] needs, at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    at: Instant,
    process: ProcessUsage,
    disk: Result<DiskCounters, String>,
    cpu: Option<CpuTicks>,
    load1: Option<f64>,
}

fn read_disk(dir: &Path) -> Result<DiskCounters, String> {
    let (major, minor) = device_of(dir)?;
    let text =
        std::fs::read_to_string("/proc/diskstats").map_err(|e| format!("/proc/diskstats: {e}"))?;
    parse_diskstats(&text, major, minor)
        .ok_or_else(|| format!("device {major}:{minor} is not in /proc/diskstats"))
}

impl Snapshot {
    /// Takes the counters now, for the store in `dir`.
    pub fn take(dir: &Path) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            process: ProcessUsage::now(),
            disk: read_disk(dir),
            cpu: std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| parse_proc_stat(&t)),
            load1: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|t| t.split_whitespace().next()?.parse().ok()),
        }
    }
}

/// The store device's traffic over the measured period.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceCosts {
    /// Device name.
    pub name: String,
    /// Bytes read per transaction.
    pub read_bytes_per_txn: f64,
    /// Bytes written per transaction.
    pub write_bytes_per_txn: f64,
    /// Read requests per transaction.
    pub reads_per_txn: f64,
    /// Write requests per transaction.
    pub writes_per_txn: f64,
    /// Cache flushes per transaction (each sync of a write-back cache device becomes one).
    pub flushes_per_txn: f64,
    /// Totals over the period: bytes read, bytes written.
    pub read_bytes: u64,
    /// Bytes written over the period.
    pub write_bytes: u64,
}

/// What the rest of the machine did during the measured period.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineLoad {
    /// 1-minute load average at the start and at the end.
    pub load1_start: Option<f64>,
    /// 1-minute load average at the end.
    pub load1_end: Option<f64>,
    /// Share of all CPU time stolen by the hypervisor, percent.
    pub steal_pct: Option<f64>,
    /// CPU cores busy with anything but this process (machine busy time minus ours).
    pub other_cores: Option<f64>,
    /// Why the figures may be disturbed (empty when the machine looked quiet).
    pub warnings: Vec<String>,
}

/// Per-transaction costs of a run's measured period.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// Transactions completed in the period (all types).
    pub transactions: u64,
    /// Wall seconds of the period.
    pub seconds: f64,
    /// Process CPU time per transaction, microseconds.
    pub cpu_us_per_txn: f64,
    /// CPU cores used: process CPU seconds / wall seconds.
    pub cores_used: f64,
    /// Voluntary context switches per transaction.
    pub voluntary_cs_per_txn: f64,
    /// Involuntary context switches per transaction.
    pub involuntary_cs_per_txn: f64,
    /// The store device's traffic, when measurable.
    pub device: Option<DeviceCosts>,
    /// Why the device traffic is missing.
    pub device_missing: Option<String>,
    /// The rest of the machine.
    pub machine: MachineLoad,
}

fn per(v: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        v as f64 / n as f64
    }
}

/// Other processes using more than this many cores make a run "busy".
const BUSY_OTHER_CORES: f64 = 0.25;
/// More steal than this (percent of all CPU time) makes a run "busy".
const BUSY_STEAL_PCT: f64 = 2.0;

impl Costs {
    /// The costs between two snapshots, for `transactions` completed in between.
    pub fn between(a: &Snapshot, b: &Snapshot, transactions: u64) -> Costs {
        let seconds = b.at.saturating_duration_since(a.at).as_secs_f64().max(1e-9);
        let cpu_us = b.process.cpu_us.saturating_sub(a.process.cpu_us);
        let (device, device_missing) = match (&a.disk, &b.disk) {
            (Ok(x), Ok(y)) => {
                let d = |f: fn(&DiskCounters) -> u64| f(y).saturating_sub(f(x));
                (
                    Some(DeviceCosts {
                        name: y.name.clone(),
                        read_bytes_per_txn: per(d(|c| c.read_bytes), transactions),
                        write_bytes_per_txn: per(d(|c| c.write_bytes), transactions),
                        reads_per_txn: per(d(|c| c.reads), transactions),
                        writes_per_txn: per(d(|c| c.writes), transactions),
                        flushes_per_txn: per(d(|c| c.flushes), transactions),
                        read_bytes: d(|c| c.read_bytes),
                        write_bytes: d(|c| c.write_bytes),
                    }),
                    None,
                )
            }
            (Err(e), _) | (_, Err(e)) => (None, Some(e.clone())),
        };
        let mut machine = MachineLoad {
            load1_start: a.load1,
            load1_end: b.load1,
            ..MachineLoad::default()
        };
        if let (Some(x), Some(y)) = (a.cpu, b.cpu) {
            let total = y.total.saturating_sub(x.total);
            if total > 0 {
                let idle = y.idle.saturating_sub(x.idle);
                let steal = y.steal.saturating_sub(x.steal);
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
                let busy_cores = cores * (total.saturating_sub(idle)) as f64 / total as f64;
                let ours = cpu_us as f64 / 1e6 / seconds;
                machine.steal_pct = Some(100.0 * steal as f64 / total as f64);
                machine.other_cores = Some((busy_cores - ours).max(0.0));
            }
        }
        if let Some(o) = machine.other_cores {
            if o > BUSY_OTHER_CORES {
                machine.warnings.push(format!(
                    "the machine was busy: other processes used {o:.2} cores during the run"
                ));
            }
        }
        if let Some(s) = machine.steal_pct {
            if s > BUSY_STEAL_PCT {
                machine
                    .warnings
                    .push(format!("the hypervisor stole {s:.1}% of the CPU time"));
            }
        }
        Costs {
            transactions,
            seconds,
            cpu_us_per_txn: per(cpu_us, transactions),
            cores_used: cpu_us as f64 / 1e6 / seconds,
            voluntary_cs_per_txn: per(
                b.process
                    .voluntary_cs
                    .saturating_sub(a.process.voluntary_cs),
                transactions,
            ),
            involuntary_cs_per_txn: per(
                b.process
                    .involuntary_cs
                    .saturating_sub(a.process.involuntary_cs),
                transactions,
            ),
            device,
            device_missing,
            machine,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISKSTATS: &str = "\
 253       0 vda 1000 5 80000 300 2000 7 160000 900 0 1000 1200 0 0 0 0 50 20
 253       1 vda1 10 0 80 3 20 0 160 9 0 10 12 0 0 0 0 0 0
   7       0 loop0 1 0 8 0 0 0 0 0 0 0 0 0 0 0 0 0 0
";

    #[test]
    fn diskstats_line_of_the_device_in_bytes() {
        let c = parse_diskstats(DISKSTATS, 253, 0).unwrap();
        assert_eq!(c.name, "vda");
        assert_eq!(c.reads, 1000);
        assert_eq!(c.read_bytes, 80000 * 512);
        assert_eq!(c.writes, 2000);
        assert_eq!(c.write_bytes, 160000 * 512);
        assert_eq!(c.flushes, 50);
        assert_eq!(parse_diskstats(DISKSTATS, 253, 1).unwrap().name, "vda1");
        assert!(parse_diskstats(DISKSTATS, 8, 0).is_none());
    }

    #[test]
    fn proc_stat_cpu_line() {
        let t =
            parse_proc_stat("cpu  100 5 50 800 20 1 2 22 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n").unwrap();
        assert_eq!(t.total, 1000);
        assert_eq!(t.idle, 820);
        assert_eq!(t.steal, 22);
        assert!(parse_proc_stat("intr 1 2 3").is_none());
    }

    #[test]
    fn no_transactions_gives_zeros_not_nan() {
        let a = Snapshot::take(Path::new("."));
        let b = Snapshot::take(Path::new("."));
        let c = Costs::between(&a, &b, 0);
        assert_eq!(c.cpu_us_per_txn, 0.0);
        assert_eq!(c.voluntary_cs_per_txn, 0.0);
        assert!(c.cores_used.is_finite());
    }

    #[test]
    fn cpu_time_of_a_busy_loop_is_counted() {
        let a = Snapshot::take(Path::new("."));
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 50 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let b = Snapshot::take(Path::new("."));
        let c = Costs::between(&a, &b, 10);
        // 50 ms of spinning is at least 10 ms of CPU time, whatever else the machine does.
        assert!(c.cpu_us_per_txn >= 1000.0, "{c:?}");
    }

    #[test]
    fn a_directory_without_a_block_device_is_reported_not_zeroed() {
        if !Path::new("/proc/self").exists() {
            println!("SKIPPED: no /proc");
            return;
        }
        // /proc itself has no block device.
        let e = device_of(Path::new("/proc/self")).unwrap_err();
        assert!(e.contains("without a block device"), "{e}");
    }
}
