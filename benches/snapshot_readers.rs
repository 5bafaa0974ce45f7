//! Readers beside a writer (issue 13's targets for snapshot reads): does a scanning reader slow
//! a committing writer, does the writer slow the reader, and do point gets scale to two threads
//! while a writer commits?
//!
//! Cases, each `KEEL_SNAP_SECS` seconds (default 3), repeated `KEEL_SNAP_REPEATS` times (default
//! 3) in the order below within each repeat (alone, together, alone, together, ...):
//! - `writer alone`: one thread commits single-row transactions (16-byte random key, 100-byte
//!   value, `Durability::Sync`) in a loop;
//! - `scanner alone`: one thread scans the whole `big` table (`KEEL_SNAP_ROWS` rows, default
//!   500,000, resident) with a cursor, again and again;
//! - `writer + scanner`: both at once: each side's rate as a ratio of its rate alone;
//! - `gets x1 + writer`, `gets x2 + writer`: one or two threads doing random point gets on
//!   `big` while the writer commits: the ratio of two threads to one. With the writer committing
//!   flat out, a machine of N cores leaves the getters at most N minus the writer's cores, so
//!   the bench prints that ceiling beside the ratio;
//! - `gets x1 + paced writer`, `gets x2 + paced writer`: the same with the writer pacing itself
//!   to `KEEL_SNAP_PACE` commits/s (default 1,000, an OLTP writer that is not a saturating
//!   loop), so the ratio shows how the getters scale when cores are free;
//! - `device loop alone`, `scanner + device loop`, `gets x1 + device loop`, `gets x2 + device
//!   loop`: no engine writes; a thread writes 4 KiB at the next position of a zero-filled file
//!   and `fdatasync`s, in a loop (the device's floor for one durable commit at a time). What
//!   the scanner and the getters keep beside it is the ceiling of the targets above for any
//!   engine that makes each commit durable, measured rather than estimated.
//!
//! `KEEL_SNAP_SCANNER_CPU=N` pins the scanner threads to CPU N (with `taskset`);
//! `KEEL_SNAP_DEVICE_IN_PLACE=1` makes the device loop rewrite one block in place;
//! `KEEL_SNAP_LOG_SYNC` (`fdatasync`, the default, `odirect`, `odsync` or `fsync`) sets the
//! store's log sync method.
//!
//! Prints the median of the repeats with min–max, and per case the process CPU µs per
//! operation and the cores used (CPU seconds / wall seconds). Run on a quiet machine:
//! `cargo bench -p keel-benches --bench snapshot_readers`.

use keel_io::SplitMix64 as Rng;
use keel_tpcc::costs::ProcessUsage;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

/// What one case measured.
#[derive(Default, Clone, Copy)]
struct Rates {
    commits: f64,
    rows: f64,
    gets: f64,
    cpu_us: u64,
    wall: f64,
    /// Interrupts during the case, from `/proc/interrupts`: device interrupts (numbered
    /// lines), rescheduling IPIs (`RES`: a thread woken on another CPU) and function-call IPIs
    /// (`CAL`), summed over the CPUs.
    irqs: Irqs,
    /// The scanner threads' own CPU time (`RUSAGE_THREAD`), µs.
    scan_cpu_us: u64,
    /// The scanner threads' involuntary context switches (the scheduler gave their core to
    /// another thread).
    scan_preempted: u64,
}

/// Interrupt counts summed over the CPUs (see [`Rates::irqs`]).
#[derive(Default, Clone, Copy)]
struct Irqs {
    device: u64,
    resched: u64,
    call: u64,
}

impl Irqs {
    /// The counts now; zeros where `/proc/interrupts` cannot be read.
    fn now() -> Irqs {
        let mut n = Irqs::default();
        let text = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
        for line in text.lines().skip(1) {
            let Some((name, rest)) = line.split_once(':') else {
                continue;
            };
            let sum: u64 = rest
                .split_whitespace()
                .map_while(|w| w.parse::<u64>().ok())
                .sum();
            match name.trim() {
                "RES" => n.resched += sum,
                "CAL" => n.call += sum,
                t if t.bytes().all(|b| b.is_ascii_digit()) => n.device += sum,
                _ => {}
            }
        }
        n
    }

    fn since(self, before: Irqs) -> Irqs {
        Irqs {
            device: self.device.saturating_sub(before.device),
            resched: self.resched.saturating_sub(before.resched),
            call: self.call.saturating_sub(before.call),
        }
    }
}

/// The writing thread of a case.
#[derive(Clone, Copy)]
enum Writer {
    /// No writer.
    None,
    /// Keel single-row commits, flat out (`None`) or paced to so many commits/s.
    Keel(Option<f64>),
    /// No engine: a 4 KiB `pwrite` at the next position of a zero-filled file, then
    /// `fdatasync`, in a loop (the device's floor for one durable commit at a time). Beside a
    /// scanner or getters it measures what the machine leaves them while something syncs as
    /// often as a durable committer can: the ceiling for any engine.
    Device,
}

/// The zero-filled file the device loop writes (64 MiB, made once).
const DEVICE_FILE_BYTES: u64 = 64 << 20;

fn device_file(dir: &std::path::Path) -> std::fs::File {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(dir.join("device-loop"))
        .expect("device loop file");
    if f.metadata().expect("metadata").len() < DEVICE_FILE_BYTES {
        let z = vec![0u8; 1 << 20];
        for i in 0..DEVICE_FILE_BYTES >> 20 {
            f.write_all_at(&z, i << 20).expect("zero-fill");
        }
        f.sync_all().expect("sync");
    }
    f
}

/// With `KEEL_SNAP_SCANNER_CPU=N`, pins the calling (scanner) thread to CPU N with
/// `taskset`: to tell what the CPU that takes the block device's interrupts costs a scanner from
/// what the engine beside it does.
fn pin_scanner() {
    let Ok(cpu) = std::env::var("KEEL_SNAP_SCANNER_CPU") else {
        return;
    };
    let tid = std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name().map(|t| t.to_string_lossy().into_owned()));
    let ok = tid.is_some_and(|tid| {
        std::process::Command::new("taskset")
            .args(["-pc", &cpu, &tid])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !ok {
        eprintln!("NOTE: could not pin the scanner to CPU {cpu}");
    }
}

/// Runs `writer`, `scanners` and `getters` threads for `secs`.
fn case(
    store: &Arc<keel::Store>,
    rows: u64,
    secs: f64,
    writer: Writer,
    scanners: usize,
    getters: usize,
) -> Rates {
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let scanned = Arc::new(AtomicU64::new(0));
    let got = Arc::new(AtomicU64::new(0));
    let u0 = ProcessUsage::now();
    let i0 = Irqs::now();
    let t0 = Instant::now();
    let mut hs = Vec::new();
    if let Writer::Device = writer {
        let (stop, n) = (stop.clone(), commits.clone());
        let f = device_file(store.dir());
        // `KEEL_SNAP_DEVICE_IN_PLACE=1`: the loop rewrites one block in place, as a log whose
        // tail block takes each commit does, instead of writing the next block each time.
        let step = if std::env::var("KEEL_SNAP_DEVICE_IN_PLACE").is_ok_and(|v| v == "1") {
            0
        } else {
            4096
        };
        hs.push(std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            let buf = [7u8; 4096];
            let mut at = 0u64;
            while !stop.load(Ordering::Relaxed) {
                f.write_all_at(&buf, at).expect("device loop write");
                f.sync_data().expect("device loop sync");
                at = (at + step) % DEVICE_FILE_BYTES;
                n.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    if let Writer::Keel(pace) = writer {
        let (s, stop, n) = (store.clone(), stop.clone(), commits.clone());
        hs.push(std::thread::spawn(move || {
            let mut rng = Rng::new(Instant::now().elapsed().as_nanos() as u64 ^ 11);
            let v = [7u8; 100];
            let start = Instant::now();
            let mut done = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if let Some(pace) = pace {
                    let due = start + Duration::from_secs_f64(done as f64 / pace);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
                done += 1;
                let tx = s.write().expect("write");
                tx.table("w")
                    .expect("table")
                    .insert(&key(rng.next_u64()), &v)
                    .expect("insert");
                tx.commit().expect("commit");
                n.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Thread names tell the cases apart in a profile (`perf report --comm scan-keel`).
    let beside = match writer {
        Writer::None => "alone",
        Writer::Keel(None) => "keel",
        Writer::Keel(Some(_)) => "paced",
        Writer::Device => "device",
    };
    let scan_cpu = Arc::new(AtomicU64::new(0));
    let scan_preempted = Arc::new(AtomicU64::new(0));
    for _ in 0..scanners {
        let (s, stop, n) = (store.clone(), stop.clone(), scanned.clone());
        let (cpu, pre) = (scan_cpu.clone(), scan_preempted.clone());
        let spawn = std::thread::Builder::new().name(format!("scan-{beside}"));
        hs.push(
            spawn
                .spawn(move || {
                    pin_scanner();
                    let u0 = ProcessUsage::thread_now();
                    'scan: while !stop.load(Ordering::Relaxed) {
                        let r = s.read().expect("read");
                        let t = r.table("big").expect("table");
                        let mut c = t.cursor(..).expect("cursor");
                        let mut k = 0u64;
                        while let Some(_row) = c.next().expect("next") {
                            k += 1;
                            if k.is_multiple_of(4096) {
                                n.fetch_add(4096, Ordering::Relaxed);
                                if stop.load(Ordering::Relaxed) {
                                    break 'scan;
                                }
                            }
                        }
                        n.fetch_add(k % 4096, Ordering::Relaxed);
                    }
                    let u1 = ProcessUsage::thread_now();
                    cpu.fetch_add(u1.cpu_us.saturating_sub(u0.cpu_us), Ordering::Relaxed);
                    pre.fetch_add(
                        u1.involuntary_cs.saturating_sub(u0.involuntary_cs),
                        Ordering::Relaxed,
                    );
                })
                .expect("spawn"),
        );
    }
    for g in 0..getters {
        let (s, stop, n) = (store.clone(), stop.clone(), got.clone());
        let spawn = std::thread::Builder::new().name(format!("get{getters}-{beside}"));
        hs.push(
            spawn
                .spawn(move || {
                    let mut rng = Rng::new(g as u64 + 99);
                    while !stop.load(Ordering::Relaxed) {
                        let r = s.read().expect("read");
                        let t = r.table("big").expect("table");
                        for _ in 0..256 {
                            let i = rng.next_u64() % rows;
                            assert!(t.get(&key(i)).expect("get").is_some());
                        }
                        n.fetch_add(256, Ordering::Relaxed);
                    }
                })
                .expect("spawn"),
        );
    }
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let wall = t0.elapsed().as_secs_f64();
    for h in hs {
        h.join().expect("thread");
    }
    let u1 = ProcessUsage::now();
    Rates {
        commits: commits.load(Ordering::Relaxed) as f64 / wall,
        rows: scanned.load(Ordering::Relaxed) as f64 / wall,
        gets: got.load(Ordering::Relaxed) as f64 / wall,
        cpu_us: u1.cpu_us.saturating_sub(u0.cpu_us),
        wall,
        irqs: Irqs::now().since(i0),
        scan_cpu_us: scan_cpu.load(Ordering::Relaxed),
        scan_preempted: scan_preempted.load(Ordering::Relaxed),
    }
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let rows = env("KEEL_SNAP_ROWS", 500_000);
    let repeats = env("KEEL_SNAP_REPEATS", 3).max(1);
    let secs = env("KEEL_SNAP_SECS", 3) as f64;
    let dir = tempfile::tempdir_in(std::env::var("KEEL_SNAP_DIR").unwrap_or_else(|_| ".".into()))
        .expect("tempdir");
    let store = Arc::new(
        keel::Store::open(
            dir.path(),
            keel::Config {
                pool_size: 512 << 20,
                log_sync: match std::env::var("KEEL_SNAP_LOG_SYNC").as_deref() {
                    Ok("odsync") => keel_io::SyncMethod::ODsync,
                    Ok("odirect") => keel_io::SyncMethod::ODirect,
                    Ok("fsync") => keel_io::SyncMethod::Fsync,
                    _ => keel_io::SyncMethod::Fdatasync,
                },
                ..keel::Config::default()
            },
        )
        .expect("open"),
    );
    let v = [3u8; 100];
    for chunk in (0..rows).collect::<Vec<_>>().chunks(10_000) {
        let tx = store.write().expect("write");
        let mut t = tx.table("big").expect("table");
        for &i in chunk {
            t.insert(&key(i), &v).expect("insert");
        }
        tx.commit().expect("commit");
    }
    store.checkpoint().expect("checkpoint");
    println!(
        "snapshot readers beside a writer: {rows} rows of 16+100 bytes resident, {secs} s per case, {repeats} repeats"
    );
    let pace = env("KEEL_SNAP_PACE", 1000) as f64;
    let names = [
        "writer alone",
        "scanner alone",
        "writer + scanner",
        "gets x1 + writer",
        "gets x2 + writer",
        "gets x1 + paced writer",
        "gets x2 + paced writer",
        "device loop alone",
        "scanner + device loop",
        "gets x1 + device loop",
        "gets x2 + device loop",
    ];
    let mut all: Vec<Vec<Rates>> = vec![Vec::new(); names.len()];
    for rep in 0..repeats {
        let keel = Writer::Keel(None);
        let paced = Writer::Keel(Some(pace));
        let runs = [
            case(&store, rows, secs, keel, 0, 0),
            case(&store, rows, secs, Writer::None, 1, 0),
            case(&store, rows, secs, keel, 1, 0),
            case(&store, rows, secs, keel, 0, 1),
            case(&store, rows, secs, keel, 0, 2),
            case(&store, rows, secs, paced, 0, 1),
            case(&store, rows, secs, paced, 0, 2),
            case(&store, rows, secs, Writer::Device, 0, 0),
            case(&store, rows, secs, Writer::Device, 1, 0),
            case(&store, rows, secs, Writer::Device, 0, 1),
            case(&store, rows, secs, Writer::Device, 0, 2),
        ];
        for (i, r) in runs.into_iter().enumerate() {
            all[i].push(r);
        }
        eprintln!("repeat {} done", rep + 1);
    }
    let col = |i: usize, f: fn(&Rates) -> f64| median(all[i].iter().map(f).collect());
    let cores = |i: usize| {
        median(
            all[i]
                .iter()
                .map(|r| r.cpu_us as f64 / 1e6 / r.wall)
                .collect(),
        )
        .0
    };
    let show = |label: &str, (m, lo, hi): (f64, f64, f64), unit: &str| {
        println!("  {label:<40} {m:>12.0} {unit} (min {lo:.0}, max {hi:.0})");
    };
    show("writer alone", col(0, |r| r.commits), "commits/s");
    show(
        "writer beside a scanner",
        col(2, |r| r.commits),
        "commits/s",
    );
    show("scanner alone", col(1, |r| r.rows), "rows/s");
    show("scanner beside a writer", col(2, |r| r.rows), "rows/s");
    show(
        "gets, 1 thread, beside a writer",
        col(3, |r| r.gets),
        "gets/s",
    );
    show(
        "gets, 2 threads, beside a writer",
        col(4, |r| r.gets),
        "gets/s",
    );
    let ratio = |a: usize, fa: fn(&Rates) -> f64, b: usize, fb: fn(&Rates) -> f64| {
        let v: Vec<f64> = all[a]
            .iter()
            .zip(&all[b])
            .map(|(x, y)| fa(x) / fb(y))
            .collect();
        median(v)
    };
    let (m, lo, hi) = ratio(2, |r| r.commits, 0, |r| r.commits);
    println!("writer keeps {:.0}% of its commits/s beside a scanner (min {:.0}%, max {:.0}%; target >= 90%)", m * 100.0, lo * 100.0, hi * 100.0);
    let (m, lo, hi) = ratio(2, |r| r.rows, 1, |r| r.rows);
    println!("scanner keeps {:.0}% of its rows/s beside a writer (min {:.0}%, max {:.0}%; target >= 90%)", m * 100.0, lo * 100.0, hi * 100.0);
    let (m, lo, hi) = ratio(4, |r| r.gets, 3, |r| r.gets);
    let n = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let ceiling = (n - cores(0)).min(2.0);
    println!("gets: 2 threads / 1 thread beside a writer = {m:.2}x (min {lo:.2}, max {hi:.2}; target >= 1.8x); the writer alone uses {:.2} of {n} cores, so two getters can have at most {ceiling:.2} cores: ceiling about {ceiling:.2}x", cores(0));
    show(
        "paced writer (target pace)",
        col(5, |r| r.commits),
        &format!("commits/s ({pace:.0})"),
    );
    show(
        "gets, 1 thread, beside a paced writer",
        col(5, |r| r.gets),
        "gets/s",
    );
    show(
        "gets, 2 threads, beside a paced writer",
        col(6, |r| r.gets),
        "gets/s",
    );
    let (m, lo, hi) = ratio(6, |r| r.gets, 5, |r| r.gets);
    println!("gets: 2 threads / 1 thread beside a writer paced to {pace:.0} commits/s = {m:.2}x (min {lo:.2}, max {hi:.2}; target >= 1.8x)");
    show("device loop alone", col(7, |r| r.commits), "syncs/s");
    show(
        "device loop beside a scanner",
        col(8, |r| r.commits),
        "syncs/s",
    );
    show("scanner beside a device loop", col(8, |r| r.rows), "rows/s");
    let (m, lo, hi) = ratio(8, |r| r.commits, 7, |r| r.commits);
    println!("ceiling, no engine: a bare pwrite + fdatasync loop keeps {:.0}% of its syncs/s beside the scanner (min {:.0}%, max {:.0}%)", m * 100.0, lo * 100.0, hi * 100.0);
    let (m, lo, hi) = ratio(8, |r| r.rows, 1, |r| r.rows);
    println!("ceiling, no engine: the scanner keeps {:.0}% of its rows/s beside a bare pwrite + fdatasync loop (min {:.0}%, max {:.0}%)", m * 100.0, lo * 100.0, hi * 100.0);
    let (m, lo, hi) = ratio(10, |r| r.gets, 9, |r| r.gets);
    println!("ceiling, no engine: gets 2 threads / 1 thread beside a bare pwrite + fdatasync loop = {m:.2}x (min {lo:.2}, max {hi:.2})");
    // What a durable commit costs the machine in interrupts, against the bare sync loop.
    for (i, n) in [(0, "Keel's writer alone"), (7, "device loop alone")] {
        let per = |f: fn(&Irqs) -> u64| {
            median(
                all[i]
                    .iter()
                    .map(|r| f(&r.irqs) as f64 / (r.commits * r.wall).max(1.0))
                    .collect(),
            )
            .0
        };
        println!(
            "  {n:<24} per commit/sync: {:.2} device interrupts, {:.2} rescheduling IPIs, {:.2} function-call IPIs",
            per(|q| q.device),
            per(|q| q.resched),
            per(|q| q.call)
        );
    }
    // Where a scanner's rows went: off its core (preempted: its CPU time below the wall time)
    // or slower while on it (rows per CPU second: interrupts and softirqs run in its time, as
    // does anything that makes its memory slower).
    for (i, n) in [
        (1, "alone"),
        (2, "beside Keel's writer"),
        (8, "beside the device loop"),
    ] {
        let on = col(i, |r| r.scan_cpu_us as f64 / 1e6 / r.wall);
        let pre = col(i, |r| r.scan_preempted as f64 / r.wall);
        let speed = col(i, |r| {
            r.rows * r.wall / (r.scan_cpu_us.max(1) as f64 / 1e6) / 1e6
        });
        println!(
            "  scanner thread {n:<24} on CPU {:.0}% of the wall time (min {:.0}%, max {:.0}%); preempted {:.0}/s; {:.1}M rows per CPU second (min {:.1}, max {:.1})",
            on.0 * 100.0,
            on.1 * 100.0,
            on.2 * 100.0,
            pre.0,
            speed.0,
            speed.1,
            speed.2
        );
    }
    for (i, n) in names.iter().enumerate() {
        let ops: f64 = median(
            all[i]
                .iter()
                .map(|r| {
                    let ops = (r.commits + r.rows / 1000.0 + r.gets) * r.wall;
                    if ops > 0.0 {
                        r.cpu_us as f64 / ops
                    } else {
                        0.0
                    }
                })
                .collect(),
        )
        .0;
        println!(
            "  {n:<22} cores used {:.2}; CPU µs per op {ops:.1} (op = a commit, 1,000 scanned rows or a get)",
            cores(i)
        );
    }
}
