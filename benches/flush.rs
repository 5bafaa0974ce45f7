//! The page writer's torn-page protection modes side by side (REFERENCE.md E1, E2, E3).
//!
//! (a) `flush/write_pages_16k/<mode>`: one page-cleaner batch = `write_pages` of 128 random
//!     16 KiB pages of a 64 MiB data file (overwrites; the file is written once beforehand),
//!     O_DIRECT, through each mode: `none`, `doublewrite_8`, `doublewrite_32`, `doublewrite_128`,
//!     `full_page_writes`, and `atomic` on `KEEL_XFS_DIR` (XFS on a loop device: RWF_ATOMIC there
//!     is XFS's *software fallback*, there is no hardware atomic unit; without `KEEL_XFS_DIR` it
//!     prints `SKIPPED`). Throughput in pages.
//! (b) `flush/e2_writebench/skip_{on,off}`: MariaDB MDEV-19738's experiment: N fresh pages
//!     (rebuildable from redo) are created and all flushed through doublewrite (batch 128), with the
//!     init-on-flush skip on and off.
//!
//! After criterion, a summary measured in one run with the modes interleaved (A B C … A B C …,
//! 30 repetitions of `DOUBLEWRITE_SLOTS` batches per mode — one cycle of the doublewrite slots, so
//! each sample pays the data syncs doublewrite defers to slot reuse — medians, ratios to `none`
//! paired within a repetition) prints
//! pages/s of the page writer alone and with the log, and per page or batch: doublewrite pages and
//! writes, syncs, full page images, log bytes, and device bytes (data + doublewrite + log); then
//! the E2 counters.
//!
//! Each mode has a real keel-redo-log beside its data (default config: 4 KiB blocks, preallocated
//! files, fdatasync). Every batch is one transaction: a 64-byte `PageWrite` record per page, or
//! under `full_page_writes` a full page image per page (`Record::PageImage`: every flushed page
//! carries one image — the case of random updates with checkpoints more frequent than page
//! revisits). The transaction is made durable *before* the timed `write_pages` (as its commit
//! would have), so criterion times the page writer alone; the summary also gives pages/s with the
//! log append + sync included, and log bytes per page. The log is checkpointed (untimed) whenever
//! a quarter of it is used.
//!
//! Files go to `keel_benches::bench_dir("flush")` (`$KEEL_BENCH_DIR` to choose the disk).
#![allow(missing_docs)] // criterion_group! generates an undocumented pub fn

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use keel_benches::bench_dir;
use keel_flush::{
    full_page_image_record, FlushPage, FlushStats, PageWriter, PageWriterConfig, TornPageProtection,
};
use keel_io::{FileSystem, IoStats, OsFs, SplitMix64};
use keel_page::{Lsn, PageHeader, PageId, PageSize, PageType, PAGE_HEADER_SIZE};
use keel_redo_log::{LogConfig, Record, RedoLog};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PS: PageSize = PageSize::K16;
/// Pages in the data file of (a): 128 MiB.
const FILE_PAGES: u64 = 4096;
/// Pages per `write_pages` call: one page-cleaner batch.
const ROUND: usize = 128;
/// Fresh pages in the E2 writebench: 32 MiB.
const E2_PAGES: u64 = 2048;

/// One mode's writer and log on their own files, with the page buffers of one batch.
struct Rig {
    name: String,
    writer: PageWriter,
    log: RedoLog,
    fs: Arc<OsFs>,
    full_page_images: bool,
    rng: SplitMix64,
    pages: Vec<Vec<u8>>,
}

/// Time one batch took: the log part (append + sync), the page-writer part.
#[derive(Clone, Copy, Default)]
struct RoundTime {
    log: Duration,
    write: Duration,
}

impl Rig {
    fn open(name: &str, dir: &Path, protection: TornPageProtection, skip: bool) -> Option<Rig> {
        let fs = Arc::new(OsFs::default());
        let mut config = PageWriterConfig::new(PS, protection);
        config.direct_io = true;
        config.init_on_flush_skip = skip;
        let log = match RedoLog::open(fs.clone(), &dir.join("log"), LogConfig::default()) {
            Ok((log, _)) => log,
            Err(e) => {
                println!("SKIPPED: flush/{name}: the redo log did not open: {e}");
                return None;
            }
        };
        let writer = match PageWriter::open(fs.clone(), dir, config, log.clone()) {
            Ok(w) => w,
            Err(e) => {
                println!("SKIPPED: flush/{name}: {e}");
                return None;
            }
        };
        if let Err(e) = writer.recover_doublewrite() {
            println!("SKIPPED: flush/{name}: {e}");
            return None;
        }
        let pages = (0..ROUND)
            .map(|i| {
                let mut p = vec![0u8; PS.bytes()];
                for (j, b) in p[PAGE_HEADER_SIZE..].iter_mut().enumerate() {
                    *b = (i * 31 + j * 7) as u8;
                }
                p
            })
            .collect();
        Some(Rig {
            name: name.to_string(),
            full_page_images: writer.wants_full_page_images(),
            writer,
            log,
            fs,
            rng: SplitMix64::new(0x5EED ^ name.len() as u64),
            pages,
        })
    }

    /// One transaction changing `ids` (made durable), then one `write_pages` of them.
    fn write(&mut self, ids: &[u64], rebuildable: bool) -> RoundTime {
        let t0 = Instant::now();
        let mut records = Vec::with_capacity(ids.len());
        for (p, &id) in self.pages.iter_mut().zip(ids) {
            PageHeader::init(p, PageId(id), PageType::RAW, Lsn::ZERO);
            p[64..128].fill(id as u8);
            if rebuildable {
                records.push(Record::PageInit {
                    page_id: PageId(id),
                    page_type: PageType::RAW,
                });
            }
            if self.full_page_images && self.writer.should_log_full_page_image(rebuildable) {
                match full_page_image_record(PageId(id), p) {
                    Ok(r) => records.push(r),
                    Err(e) => panic!("flush/{}: {e}", self.name),
                }
                self.writer.count_full_page_image(PS.bytes());
            } else {
                records.push(Record::PageWrite {
                    page_id: PageId(id),
                    offset: 64,
                    bytes: p[64..128].to_vec().into(),
                });
            }
        }
        let lsn = self
            .log
            .append(&records)
            .and_then(|lsn| self.log.wait_durable(lsn).map(|()| lsn))
            .unwrap_or_else(|e| panic!("flush/{}: log: {e}", self.name));
        let t1 = Instant::now();
        for p in self.pages.iter_mut().take(ids.len()) {
            keel_page::set_lsn(p, lsn);
        }
        let batch: Vec<FlushPage<'_>> = self
            .pages
            .iter()
            .zip(ids)
            .map(|(p, &id)| FlushPage {
                page_id: PageId(id),
                image: p,
                lsn,
                rebuildable_from_redo: rebuildable,
            })
            .collect();
        if let Err(e) = self.writer.write_pages(&batch) {
            panic!("flush/{}: write_pages failed: {e}", self.name);
        }
        let t2 = Instant::now();
        // Every page changed up to `lsn` is durable now: the log may be checkpointed.
        if let Some(cap) = self.log.capacity() {
            if self.log.space_used() > cap / 4 {
                if let Err(e) = self.log.checkpoint(lsn) {
                    panic!("flush/{}: checkpoint: {e}", self.name);
                }
            }
        }
        RoundTime {
            log: t1 - t0,
            write: t2 - t1,
        }
    }

    /// Writes every page of the file once (fresh pages), so the timed writes are overwrites.
    fn prefill(&mut self, pages: u64) -> Duration {
        let ids: Vec<u64> = (0..pages).collect();
        ids.chunks(ROUND).map(|c| self.write(c, true).write).sum()
    }

    /// One batch of ROUND distinct random pages.
    fn round(&mut self) -> RoundTime {
        let mut seen = HashSet::with_capacity(ROUND);
        let mut ids = Vec::with_capacity(ROUND);
        while ids.len() < ROUND {
            let id = self.rng.next_u64() % FILE_PAGES;
            if seen.insert(id) {
                ids.push(id);
            }
        }
        self.write(&ids, false)
    }
}

fn modes() -> Vec<(String, PathBuf, TornPageProtection)> {
    let base = bench_dir("flush");
    let mut v: Vec<(String, PathBuf, TornPageProtection)> = vec![
        ("none".into(), base.join("none"), TornPageProtection::None),
        (
            "doublewrite_8".into(),
            base.join("dw8"),
            TornPageProtection::Doublewrite { batch_pages: 8 },
        ),
        (
            "doublewrite_32".into(),
            base.join("dw32"),
            TornPageProtection::Doublewrite { batch_pages: 32 },
        ),
        (
            "doublewrite_128".into(),
            base.join("dw128"),
            TornPageProtection::Doublewrite { batch_pages: 128 },
        ),
        (
            "full_page_writes".into(),
            base.join("fpw"),
            TornPageProtection::FullPageWrites,
        ),
    ];
    match std::env::var_os("KEEL_XFS_DIR") {
        Some(x) => {
            let d = PathBuf::from(x).join("keel-bench-flush-atomic");
            let _ = std::fs::remove_dir_all(&d);
            v.push(("atomic_xfs".into(), d, TornPageProtection::Atomic));
        }
        None => println!(
            "SKIPPED: flush/write_pages_16k/atomic: KEEL_XFS_DIR is not set (XFS with reflink; \
             `bash .ci/xfs-image.sh setup DIR`)"
        ),
    }
    v
}

fn rigs() -> Vec<Rig> {
    let mut rigs = Vec::new();
    for (name, dir, protection) in modes() {
        if let Some(mut r) = Rig::open(&name, &dir, protection, true) {
            println!(
                "flush/{name}: {} — {}",
                r.writer.resolved().mode,
                r.writer.resolved().reason
            );
            r.prefill(FILE_PAGES);
            rigs.push(r);
        }
    }
    rigs
}

fn bench_modes(c: &mut Criterion) {
    let mut rigs = rigs();
    let mut g = c.benchmark_group("flush/write_pages_16k");
    g.throughput(Throughput::Elements(ROUND as u64));
    for r in rigs.iter_mut() {
        let name = r.name.clone();
        g.bench_function(&name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| r.round().write).sum())
        });
    }
    g.finish();
    summary(&mut rigs);
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[derive(Clone, Default)]
struct Acc {
    writer_secs: Vec<f64>,
    total_secs: Vec<f64>,
    stats: Option<FlushStats>,
    io: IoStats,
    log_bytes: u64,
    log_syncs: u64,
}

/// Batches per sample of the summary: one cycle through the doublewrite slots, so that every
/// sample pays its share of the data syncs doublewrite defers until a slot is reused (a median of
/// single batches would mostly see the batches without one).
const SAMPLE_BATCHES: usize = keel_flush::DOUBLEWRITE_SLOTS;

/// Interleaved repetitions — one sample of `SAMPLE_BATCHES` batches of each mode in turn,
/// A B C … A B C … — so that the machine's noise hits every mode alike; medians of per-sample
/// times, and ratios to `none` paired within each repetition.
fn summary(rigs: &mut [Rig]) {
    const REPS: usize = 30;
    let mut acc: Vec<Acc> = vec![Acc::default(); rigs.len()];
    for _ in 0..REPS {
        for (i, r) in rigs.iter_mut().enumerate() {
            let (s0, io0, l0) = (r.writer.stats(), r.fs.counters().snapshot(), r.log.stats());
            let t = (0..SAMPLE_BATCHES).fold(RoundTime::default(), |sum, _| {
                let t = r.round();
                RoundTime {
                    log: sum.log + t.log,
                    write: sum.write + t.write,
                }
            });
            let a = &mut acc[i];
            a.writer_secs.push(t.write.as_secs_f64());
            a.total_secs.push((t.write + t.log).as_secs_f64());
            let d = r.writer.stats().since(&s0);
            a.stats = Some(match &a.stats {
                Some(s) => add_stats(s, &d),
                None => d,
            });
            a.io = add_io(&a.io, &r.fs.counters().snapshot().since(&io0));
            let l1 = r.log.stats();
            a.log_bytes += l1.bytes_written.saturating_sub(l0.bytes_written);
            a.log_syncs += l1.syncs.saturating_sub(l0.syncs);
        }
    }
    let none = rigs.iter().position(|r| r.name == "none");
    // Median over repetitions of (none's time / this mode's time) = this mode's relative rate.
    let paired = |mine: &[f64], pick: fn(&Acc) -> &Vec<f64>| -> Option<f64> {
        let base = pick(&acc[none?]);
        let r: Vec<f64> = base.iter().zip(mine).map(|(b, m)| b / m).collect();
        Some(median(&r))
    };
    let rate = |secs: &[f64]| (SAMPLE_BATCHES * ROUND) as f64 / median(secs);
    println!();
    println!(
        "summary: 16 KiB pages, batches of {ROUND} random pages of {FILE_PAGES}, O_DIRECT, real redo log; \
         {REPS} repetitions of {SAMPLE_BATCHES} batches per mode (one cycle of the doublewrite slots), \
         modes interleaved sample by sample; medians"
    );
    println!(
        "{:<17} {:>9} {:>6} {:>9} {:>6} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9} {:>8} {:>10} {:>10}",
        "mode",
        "writer/s",
        "ratio",
        "w+log/s",
        "ratio",
        "dw pg/pg",
        "dwwr/bat",
        "sync/bat",
        "dsyn/bat",
        "fpi/pg",
        "log B/pg",
        "lsync/bt",
        "pg+dw B/pg",
        "dev B/pg"
    );
    let mut dw128 = None;
    for (i, r) in rigs.iter().enumerate() {
        let a = &acc[i];
        let st = a.stats.unwrap_or_default();
        let pages = st.data_pages_written.max(1) as f64;
        let batches = st.batches.max(1) as f64;
        let wr = paired(&a.writer_secs, |a| &a.writer_secs);
        let tr = paired(&a.total_secs, |a| &a.total_secs);
        if r.name == "doublewrite_128" {
            dw128 = wr;
        }
        let f = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}"));
        println!(
            "{:<17} {:>9.0} {:>6} {:>9.0} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.3} {:>7.2} {:>9.0} {:>8.2} {:>10.0} {:>10.0}",
            r.name,
            rate(&a.writer_secs),
            f(wr),
            rate(&a.total_secs),
            f(tr),
            st.doublewrite_pages as f64 / pages,
            st.doublewrite_writes as f64 / batches,
            st.syncs as f64 / batches,
            (st.syncs - st.doublewrite_syncs) as f64 / batches,
            st.full_page_images as f64 / pages,
            a.log_bytes as f64 / pages,
            a.log_syncs as f64 / batches,
            (a.io.data.write_bytes + a.io.doublewrite.write_bytes) as f64 / pages,
            (a.io.data.write_bytes + a.io.doublewrite.write_bytes + a.log_bytes) as f64 / pages,
        );
        println!(
            "  counters: {}",
            serde_json::to_string(&st).unwrap_or_default()
        );
    }
    println!(
        "  writer/s: pages/s of write_pages alone; w+log/s: including the batch's log append + \
         sync; ratio: median over repetitions of the rate relative to none in the same repetition; \
         sync/bat: syncs of the page writer per batch (data + doublewrite area), dsyn/bat: of \
         those, data-file syncs (doublewrite defers them until a slot is reused); \
         log B/pg: bytes the redo log wrote per page (LogStats), lsync/bt: log syncs per batch; \
         pg+dw B/pg: data + doublewrite bytes written per page; dev B/pg: the same plus the log's \
         bytes: everything sent to the device per page"
    );
    if let Some(r) = dw128 {
        println!(
            "target: doublewrite_128 ≥ 80% of none's pages/s (paired median ratio): {:.0}% → {}",
            100.0 * r,
            if r >= 0.8 { "met" } else { "NOT met" }
        );
    }
}

fn add_stats(a: &FlushStats, b: &FlushStats) -> FlushStats {
    FlushStats {
        batches: a.batches + b.batches,
        data_writes: a.data_writes + b.data_writes,
        data_pages_written: a.data_pages_written + b.data_pages_written,
        data_bytes_written: a.data_bytes_written + b.data_bytes_written,
        doublewrite_writes: a.doublewrite_writes + b.doublewrite_writes,
        doublewrite_pages: a.doublewrite_pages + b.doublewrite_pages,
        doublewrite_bytes_written: a.doublewrite_bytes_written + b.doublewrite_bytes_written,
        pages_skipped_protection: a.pages_skipped_protection + b.pages_skipped_protection,
        atomic_writes: a.atomic_writes + b.atomic_writes,
        full_page_images: a.full_page_images + b.full_page_images,
        full_page_image_bytes: a.full_page_image_bytes + b.full_page_image_bytes,
        syncs: a.syncs + b.syncs,
        doublewrite_syncs: a.doublewrite_syncs + b.doublewrite_syncs,
        doublewrite_reuse_syncs: a.doublewrite_reuse_syncs + b.doublewrite_reuse_syncs,
        restored_pages: a.restored_pages + b.restored_pages,
        forced_log_flushes: a.forced_log_flushes + b.forced_log_flushes,
        checkpoint_stamps: a.checkpoint_stamps + b.checkpoint_stamps,
        pages_read: a.pages_read + b.pages_read,
    }
}

fn add_io(a: &IoStats, b: &IoStats) -> IoStats {
    let mut out = *a;
    for (o, x) in [
        (&mut out.data, &b.data),
        (&mut out.doublewrite, &b.doublewrite),
        (&mut out.log, &b.log),
        (&mut out.other, &b.other),
    ] {
        o.reads += x.reads;
        o.read_bytes += x.read_bytes;
        o.writes += x.writes;
        o.write_bytes += x.write_bytes;
        o.atomic_writes += x.atomic_writes;
        o.syncs += x.syncs;
    }
    out
}

/// E2: create `E2_PAGES` fresh pages and flush them all (doublewrite, batch 128), skip on / off.
fn e2_once(skip: bool, tag: usize) -> (Duration, FlushStats) {
    let dir = bench_dir(&format!(
        "flush-e2-{}-{tag}",
        if skip { "on" } else { "off" }
    ));
    let mut r = Rig::open(
        "e2",
        &dir,
        TornPageProtection::Doublewrite { batch_pages: 128 },
        skip,
    )
    .unwrap_or_else(|| panic!("E2 writer did not open in {}", dir.display()));
    let s0 = r.writer.stats();
    let elapsed = r.prefill(E2_PAGES);
    let st = r.writer.stats().since(&s0);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
    (elapsed, st)
}

fn bench_e2(c: &mut Criterion) {
    let mut g = c.benchmark_group("flush/e2_writebench");
    g.throughput(Throughput::Elements(E2_PAGES));
    g.sample_size(10);
    for skip in [true, false] {
        let name = if skip { "skip_on" } else { "skip_off" };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|i| e2_once(skip, i as usize).0).sum())
        });
    }
    g.finish();
    println!();
    println!(
        "E2 writebench: {E2_PAGES} fresh 16 KiB pages (PageInit in the redo log) flushed in batches of {ROUND}, doublewrite batch 128; 5 interleaved runs, median time of the write_pages calls"
    );
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut last = [FlushStats::default(); 2];
    for rep in 0..5 {
        for (k, skip) in [true, false].into_iter().enumerate() {
            let (t, st) = e2_once(skip, 100 + rep);
            times[k].push(t.as_secs_f64());
            last[k] = st;
        }
    }
    for (k, skip) in [true, false].into_iter().enumerate() {
        let st = &last[k];
        println!(
            "  skip {:<3}: {:>7.1} ms  data writes {:>5}  doublewrite writes {:>3}  doublewrite pages {:>5}  pages skipped {:>5}  syncs {:>3}",
            if skip { "on" } else { "off" },
            1000.0 * median(&times[k]),
            st.data_writes,
            st.doublewrite_writes,
            st.doublewrite_pages,
            st.pages_skipped_protection,
            st.syncs
        );
    }
    println!(
        "  (InnoDB counts Innodb_data_writes = data + doublewrite writes: skip on {} + {}, skip off {} + {})",
        last[0].data_writes, last[0].doublewrite_writes, last[1].data_writes, last[1].doublewrite_writes
    );
    println!(
        "target: with the skip, 0 doublewrite pages for fresh pages: {} → {}",
        last[0].doublewrite_pages,
        if last[0].doublewrite_pages == 0 {
            "met"
        } else {
            "NOT met"
        }
    );
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(1000))
        .measurement_time(Duration::from_millis(3000))
        .sample_size(10)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_modes, bench_e2
}
criterion_main!(benches);
