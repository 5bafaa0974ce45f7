//! Configurations at the edges of their types: every numeric field of [`Config`] drawn from its
//! extremes (0, 1, the limits the validation names and one past them, the type's maximum) and
//! every mode mixed, on a simulated file system with a space limit. An open must give a store
//! or a typed error — never a panic, an abort in the allocator, or a hang — and a store it gives
//! must take commits and give them back after a reopen with the same configuration.
//!
//! No harness opened a store with such values before: the first run found a pool sized past the
//! machine aborting the process, a `Duration::MAX` flush interval panicking the flusher thread,
//! a group-commit delay that stalled every commit, and a preallocated log larger than the device
//! zero-filled until the device was full.
//!
//! `KEEL_CONFIG_EDGE_CASES=N` runs more cases (default 150); `KEEL_CONFIG_EDGE_SEED=S` one.

#[path = "common/rng.rs"]
mod rng;

use keel::{Config, Durability, LogFileMode, Store, SyncMethod, TornPage};
use keel_io::{Fault, SimConfig, SimFs};
use rng::Rng;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn pick<T: Copy>(rng: &mut Rng, from: &[T]) -> T {
    from[rng.below(from.len() as u64) as usize]
}

/// A sane small configuration with one to three fields set to an edge of their type (and every
/// mode drawn), so that each case tries a few edges at once and many cases still open.
fn config(rng: &mut Rng) -> Config {
    let dur = |rng: &mut Rng| {
        pick(
            rng,
            &[
                Duration::ZERO,
                Duration::from_nanos(1),
                Duration::from_millis(1),
                Duration::from_secs(1),
                Duration::from_secs(1) + Duration::from_nanos(1),
                Duration::from_secs(u64::MAX),
                Duration::MAX,
            ],
        )
    };
    let mut c = Config {
        page_size: 4096,
        pool_size: 64 * 4096,
        log_file_size: 1 << 20,
        log_buffer_size: 256 << 10,
        doublewrite_batch: 16,
        torn_page: pick(
            rng,
            &[
                TornPage::Doublewrite,
                TornPage::Atomic,
                TornPage::FullPageWrites,
                TornPage::Auto,
                TornPage::None,
            ],
        ),
        init_on_flush_skip: rng.below(2) == 0,
        log_sync: pick(
            rng,
            &[
                SyncMethod::Fsync,
                SyncMethod::Fdatasync,
                SyncMethod::ODsync,
                SyncMethod::ODirect,
            ],
        ),
        log_files: pick(rng, &[LogFileMode::Preallocated, LogFileMode::Growing]),
        direct_io: rng.below(2) == 0,
        durability: pick(
            rng,
            &[Durability::Sync, Durability::Buffered, Durability::Lazy],
        ),
        ..Config::default()
    };
    for _ in 0..1 + rng.below(3) {
        match rng.below(14) {
            0 => c.page_size = pick(rng, &[0, 1, 4095, 8192, 16384, 65536, 131072, usize::MAX]),
            1 => {
                let ps = c.page_size.clamp(1, 1 << 20);
                c.pool_size = pick(
                    rng,
                    &[
                        0,
                        1,
                        15 * ps,
                        16 * ps,
                        1 << 30,
                        4 << 40,
                        usize::MAX / 2,
                        usize::MAX,
                    ],
                )
            }
            2 => c.doublewrite_batch = pick(rng, &[0, 1, 4096, 4097, usize::MAX]),
            3 => c.log_block_size = pick(rng, &[0, 511, 512, 8192, u32::MAX]),
            4 => {
                c.write_ahead_size = pick(rng, &[0, 512, 4096, 1 << 20, (1 << 20) + 1, usize::MAX])
            }
            5 => c.log_file_size = pick(rng, &[0, 1, 4096, 8192, 1 << 40, u64::MAX]),
            6 => c.log_file_count = pick(rng, &[0, 1, 1000, u32::MAX]),
            7 => {
                c.log_buffer_size =
                    pick(rng, &[0, 65535, 65536, 1 << 30, (1 << 30) + 1, usize::MAX])
            }
            8 => c.flush_interval = dur(rng),
            9 => c.group_commit_delay = dur(rng),
            10 => c.checkpoint_interval = dur(rng),
            11 => {
                c.checkpoint_log_fraction =
                    pick(rng, &[f64::NAN, -1.0, 0.0, 0.05, 0.95, 1.0, f64::INFINITY])
            }
            12 => c.snapshot_budget = pick(rng, &[0, 1, u64::MAX]),
            _ => c.log_file_size = 0, // sized from the pool
        }
    }
    c
}

/// One case: open, commit, close, reopen, read. `Ok(true)` if the store opened.
fn run_case(seed: u64) -> Result<bool, String> {
    let mut rng = Rng(seed);
    let mut cfg = config(&mut rng);
    // Half the cases without background threads (`inline_maintenance`: no timer takes a
    // checkpoint, so a checkpoint fraction at its edge is all there is). Its own generator.
    cfg.inline_maintenance = Rng(seed ^ 0x1e11_0000_0000_0011).below(2) == 0;
    let what = format!("seed {seed}: {cfg:?}");
    let fs = SimFs::new(SimConfig::seeded(seed));
    // Room for a few sane logs, never for the largest.
    fs.inject(Fault::NoSpaceAbove(96 << 20));
    let dir = Path::new("/db");
    let (tx, rx) = std::sync::mpsc::channel();
    let case = {
        let fs = fs.clone();
        let cfg = cfg.clone();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(
                || -> Result<bool, String> {
                    let store = match Store::open_with_fs(Arc::new(fs.clone()), dir, cfg.clone()) {
                        Ok(s) => s,
                        Err(x) => {
                            if std::env::var("KEEL_CONFIG_EDGE_REASONS").is_ok() {
                                println!("refused: {x}");
                            }
                            return Ok(false);
                        }
                    };
                    let e = |e: keel::Error| e.to_string();
                    let w = store.write().map_err(e)?;
                    {
                        let mut t = w.table("t").map_err(e)?;
                        for i in 0u32..50 {
                            t.insert(&i.to_be_bytes(), &[i as u8; 100]).map_err(e)?;
                        }
                    }
                    match w.commit() {
                        Ok(()) => {}
                        // A log of a few blocks holds only small transactions: a typed refusal.
                        Err(x) if x.is_too_large() => return Ok(false),
                        Err(x) => return Err(x.to_string()),
                    }
                    store.close().map_err(e)?;
                    let store = Store::open_with_fs(Arc::new(fs.clone()), dir, cfg.clone())
                        .map_err(|x| format!("the reopen failed: {x}"))?;
                    let r = store.read().map_err(e)?;
                    let n = r.table("t").map_err(e)?.len().map_err(e)?;
                    if n != 50 {
                        return Err(format!("{n} rows of 50 after the reopen"));
                    }
                    Ok(true)
                },
            ));
            let _ = tx.send(r);
        })
    };
    let r = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => return Err(format!("{what}: panicked")),
        Err(_) => return Err(format!("{what}: hung (no answer in 60 s)")),
    };
    let _ = case.join();
    r.map_err(|m| format!("{what}: {m}"))
}

/// Every panic of any thread, by the hook the test installs.
static THREAD_PANICS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

#[test]
fn configurations_at_the_edges_open_or_are_refused_never_panic_or_hang() {
    if let Some(seed) = std::env::var("KEEL_CONFIG_EDGE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        println!("{:?}", run_case(seed));
        return;
    }
    // A panic on any thread (the store's flusher, checkpointer, cleaner) fails the run: a
    // case's own thread is watched by `catch_unwind`, the store's threads only by this hook.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        THREAD_PANICS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!(
                "thread {:?}: {info}",
                std::thread::current().name()
            ));
        previous(info);
    }));
    let cases: u64 = std::env::var("KEEL_CONFIG_EDGE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let (mut opened, mut failures) = (0u64, Vec::new());
    for i in 0..cases {
        match run_case(0xC0F1_6000 + i) {
            Ok(true) => opened += 1,
            Ok(false) => {}
            Err(m) => failures.push(m),
        }
    }
    println!(
        "config edges: {cases} cases, {opened} opened, {} refused, {} failures",
        cases - opened - failures.len() as u64,
        failures.len()
    );
    assert!(
        opened > cases / 10,
        "too few configurations opened: {opened}"
    );
    let panics = THREAD_PANICS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    assert!(panics.is_empty(), "panics: {panics:#?}");
    assert!(
        failures.is_empty(),
        "{} of {cases}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
