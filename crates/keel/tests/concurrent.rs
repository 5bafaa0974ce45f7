//! Concurrent write transactions (issue 13, item 2): any number of `write_concurrent`
//! transactions open at once, their steps interleaved by a seed (so a failure replays), beside
//! exclusive writers, snapshot readers and checkpoints, in a small pool.
//!
//! The model checks the protocol's three promises:
//!
//! - **Its view**: every answer a transaction gets (gets, the old values of inserts and
//!   removes, scans forward, backward, from both ends and by cursor, `len`, table lookups,
//!   creations, drops and lists) equals what its operations give when run on the committed
//!   state of its snapshot.
//! - **Serializable**: when a commit succeeds, running the same operations on the committed
//!   state just before it gives the same answers, and the store then equals that run's result.
//!   (With validation switched off by the `skip_validation` knob this fails.)
//! - **No needless conflicts**: a conflict is accepted only if something committed after the
//!   snapshot changed what the operations see (their answers differ at the newest commit) or
//!   touched a table the transaction scanned or looked up in a changed catalog. Transactions
//!   on disjoint keys never conflict.
//!
//! Nothing a transaction writes is visible to a reader or another transaction before it
//! commits: every reader check and every other transaction's view is against committed states.

#[path = "common/bounds.rs"]
mod bounds;

use bounds::holds_keys;
use keel::{Config, Error, Store, WriteTxn};
use keel_io::{SimConfig, SimFs, SplitMix64 as Rng};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type Tables = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

const NAMES: [&str; 3] = ["a", "b", "c"];

/// Key `k`: below [`COUNTERS`], keys at the edges of byte order (the empty key, keys that are
/// prefixes of each other followed by 0x00 or 0xFF, 0xFF bytes only); counters are `k10`...
fn key(k: u8) -> Vec<u8> {
    const EDGE: [&[u8]; COUNTERS as usize] = [
        b"",
        b"\0",
        b"k",
        b"k\0",
        b"k0",
        b"k0\xff",
        b"k09",
        b"k1",
        b"k\xff",
        b"\xff\xff",
    ];
    match EDGE.get(k as usize) {
        Some(e) => e.to_vec(),
        None => format!("k{k:02}").into_bytes(),
    }
}

/// Bound `b` of a scan (`Unbounded`, or key `k` included or excluded).
fn bound(b: &Bound<u8>) -> Bound<Vec<u8>> {
    b.map(key)
}

/// A value in an answer: its length and first byte (the generator fills values with one byte),
/// or the integer of an 8-byte value (the counters `Op::Add` keeps).
fn val(v: &[u8]) -> String {
    match <[u8; 8]>::try_from(v) {
        Ok(b) => format!("i{}", i64::from_le_bytes(b)),
        Err(_) => format!("{}x{}", v.len(), v.first().copied().unwrap_or(0)),
    }
}

/// Keys at or above this hold counters: only `Op::Add` writes them (as 8-byte integers).
const COUNTERS: u8 = 10;
/// A counter every transaction of the disjoint runs adds to: adds read nothing, so they never
/// conflict.
const SHARED_COUNTER: u8 = 250;

fn opt(v: Option<Vec<u8>>) -> String {
    v.map_or_else(|| "none".to_string(), |v| val(&v))
}

fn rows_of(r: &[(Vec<u8>, Vec<u8>)]) -> String {
    let r: Vec<String> = r
        .iter()
        .map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), val(v)))
        .collect();
    format!("{r:?}")
}

/// One operation of a transaction.
#[derive(Clone, Debug)]
enum Op {
    Get(usize, u8),
    Insert(usize, u8, Vec<u8>),
    /// `Table::add_i64` on a counter key.
    Add(usize, u8, i64),
    Remove(usize, u8),
    /// Rows from `lo` to `hi` (any bound: a start past the end gives none): up to `limit`, by
    /// pattern 0 forward, 1 backward, 2 both ends in turn, 3 by cursor.
    Scan {
        t: usize,
        lo: Bound<u8>,
        hi: Bound<u8>,
        limit: usize,
        pattern: u8,
    },
    Len(usize),
    Drop(usize),
    Create(usize),
    List,
}

fn gen_op(rng: &mut Rng, keys: u8, key_base: u8) -> Op {
    let t = rng.below(NAMES.len() as u64) as usize;
    let k = key_base + rng.below(keys as u64) as u8;
    match rng.below(100) {
        0..=29 => Op::Get(t, k),
        30..=59 => {
            let len = if rng.below(20) == 0 {
                3000
            } else {
                1 + rng.below(40) as usize
            };
            let b = rng.below(256) as u8;
            if k >= COUNTERS && key_base == 0 {
                Op::Add(t, k, rng.below(2001) as i64 - 1000)
            } else {
                Op::Insert(t, k, vec![b; len])
            }
        }
        60..=71 => Op::Remove(t, k),
        72..=89 => {
            let a = key_base + rng.below(keys as u64) as u8;
            let b = key_base + rng.below(keys as u64 + 1) as u8;
            // Mostly [low, high); any bound on either side otherwise, in either order.
            let any = |k: u8, r: u64| match r {
                0 => Bound::Unbounded,
                1 => Bound::Included(k),
                _ => Bound::Excluded(k),
            };
            let (lo, hi) = if rng.below(2) == 0 {
                (Bound::Included(a.min(b)), Bound::Excluded(a.max(b)))
            } else {
                (any(a, rng.below(3)), any(b, rng.below(3)))
            };
            Op::Scan {
                t,
                lo,
                hi,
                limit: 1 + rng.below(8) as usize,
                pattern: rng.below(4) as u8,
            }
        }
        90..=92 => Op::Len(t),
        93..=94 => Op::Drop(t),
        95..=97 => Op::Create(t),
        _ => Op::List,
    }
}

/// Takes up to `limit` of `rows` (in key order) by `pattern`.
fn pick(rows: Vec<(Vec<u8>, Vec<u8>)>, limit: usize, pattern: u8) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rows = std::collections::VecDeque::from(rows);
    let mut out = Vec::new();
    while out.len() < limit {
        let front = match pattern {
            1 => false,
            2 => out.len() % 2 == 0,
            _ => true,
        };
        let r = if front {
            rows.pop_front()
        } else {
            rows.pop_back()
        };
        match r {
            Some(r) => out.push(r),
            None => break,
        }
    }
    out
}

/// Runs `op` on the model; the answer as text.
fn model_op(s: &mut Tables, op: &Op) -> String {
    let name = |t: usize| NAMES[t].to_string();
    match op {
        Op::Get(t, k) => match s.get(&name(*t)) {
            None => "not found".into(),
            Some(m) => opt(m.get(&key(*k)).cloned()),
        },
        Op::Insert(t, k, v) => opt(s.entry(name(*t)).or_default().insert(key(*k), v.clone())),
        Op::Add(t, k, delta) => {
            let m = s.entry(name(*t)).or_default();
            let old = m.get(&key(*k)).map_or(0, |v| {
                i64::from_le_bytes(v.as_slice().try_into().expect("counters hold 8 bytes"))
            });
            m.insert(key(*k), old.wrapping_add(*delta).to_le_bytes().to_vec());
            "ok".into()
        }
        Op::Remove(t, k) => match s.get_mut(&name(*t)) {
            None => "not found".into(),
            Some(m) => opt(m.remove(&key(*k))),
        },
        Op::Scan {
            t,
            lo,
            hi,
            limit,
            pattern,
        } => match s.get(&name(*t)) {
            None => "not found".into(),
            Some(m) => {
                let (lo, hi) = (bound(lo), bound(hi));
                let r = if holds_keys(&lo, &hi) {
                    m.range((lo, hi))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                } else {
                    Vec::new()
                };
                rows_of(&pick(r, *limit, *pattern))
            }
        },
        Op::Len(t) => match s.get(&name(*t)) {
            None => "not found".into(),
            Some(m) => format!("{}", m.len()),
        },
        Op::Drop(t) => format!("{}", s.remove(&name(*t)).is_some()),
        Op::Create(t) => {
            s.entry(name(*t)).or_default();
            "ok".into()
        }
        Op::List => format!("{:?}", s.keys().collect::<Vec<_>>()),
    }
}

/// Runs `op` in the store's transaction; the answer as text (`Err` for any error but a
/// missing table, which is an answer).
fn store_op(tx: &mut WriteTxn<'_>, op: &Op) -> keel::Result<String> {
    let nf = |r: keel::Result<String>| match r {
        Err(Error::TableNotFound(_)) => Ok("not found".to_string()),
        r => r,
    };
    match op {
        Op::Get(t, k) => nf(tx
            .existing_table(NAMES[*t])
            .and_then(|t| Ok(opt(t.get(&key(*k))?)))),
        Op::Insert(t, k, v) => Ok(opt(tx.table(NAMES[*t])?.insert(&key(*k), v)?)),
        Op::Add(t, k, delta) => {
            tx.table(NAMES[*t])?.add_i64(&key(*k), *delta)?;
            Ok("ok".into())
        }
        Op::Remove(t, k) => nf(tx
            .existing_table(NAMES[*t])
            .and_then(|mut t| Ok(opt(t.remove(&key(*k))?)))),
        Op::Scan {
            t,
            lo,
            hi,
            limit,
            pattern,
        } => nf(tx.existing_table(NAMES[*t]).and_then(|t| {
            let (lo, hi) = (bound(lo), bound(hi));
            let r = (
                lo.as_ref().map(Vec::as_slice),
                hi.as_ref().map(Vec::as_slice),
            );
            let mut out = Vec::new();
            if *pattern == 3 {
                let mut c = t.cursor(r)?;
                while out.len() < *limit {
                    match c.next()? {
                        Some((k, v)) => out.push((k.to_vec(), v.to_vec())),
                        None => break,
                    }
                }
            } else {
                let mut r = t.range(r)?;
                while out.len() < *limit {
                    let front = match pattern {
                        1 => false,
                        2 => out.len() % 2 == 0,
                        _ => true,
                    };
                    let row = if front { r.next() } else { r.next_back() };
                    match row {
                        Some(row) => out.push(row?),
                        None => break,
                    }
                }
            }
            Ok(rows_of(&out))
        })),
        Op::Len(t) => nf(tx
            .existing_table(NAMES[*t])
            .and_then(|t| Ok(format!("{}", t.len()?)))),
        Op::Drop(t) => Ok(format!("{}", tx.drop_table(NAMES[*t])?)),
        Op::Create(t) => {
            tx.table(NAMES[*t])?;
            Ok("ok".into())
        }
        Op::List => Ok(format!("{:?}", tx.list_tables()?)),
    }
}

/// Runs `ops` on a copy of `s`: the answers and the state after them.
fn model_run(s: &Tables, ops: &[Op]) -> (Vec<String>, Tables) {
    let mut s = s.clone();
    let answers = ops.iter().map(|op| model_op(&mut s, op)).collect();
    (answers, s)
}

/// Whether a conflict is justified: the answers differ at the newest commit, or a table the
/// operations scan, count, list or look up changed since the snapshot (a scan's record can
/// cover a row beyond what it returned: it pulls one ahead).
///
/// `catalog_changed`: a commit since the snapshot created or dropped a table (the tables that
/// exist may be the same at both ends: one dropped and made again in between).
fn conflict_justified(
    ops: &[Op],
    at_snapshot: &Tables,
    now: &Tables,
    catalog_changed: bool,
) -> bool {
    if catalog_changed {
        return true;
    }
    if model_run(at_snapshot, ops).0 != model_run(now, ops).0 {
        return true;
    }
    let name = |t: usize| NAMES[t].to_string();
    ops.iter().any(|op| match op {
        Op::Scan { t, .. } | Op::Len(t) => at_snapshot.get(&name(*t)) != now.get(&name(*t)),
        Op::List => at_snapshot.keys().ne(now.keys()),
        _ => false,
    }) || NAMES
        .iter()
        .any(|n| at_snapshot.contains_key(*n) != now.contains_key(*n))
}

/// Whether a commit from `before` to `after` of `ops` (which answered `answers`) created or
/// dropped a table: the tables differ, or one was dropped and made again.
fn creates_or_drops(before: &Tables, after: &Tables, ops: &[Op], answers: &[String]) -> bool {
    before.keys().ne(after.keys())
        || ops
            .iter()
            .zip(answers)
            .any(|(op, a)| matches!(op, Op::Drop(_)) && a == "true")
}

struct Open<'s> {
    tx: WriteTxn<'s>,
    snapshot: Tables,
    /// The count of commits that created or dropped a table, at the snapshot.
    catalog_changes: u64,
    ops: Vec<Op>,
    answers: Vec<String>,
    left: usize,
}

/// The committed state read through a read transaction.
fn read_all(s: &Store) -> keel::Result<Tables> {
    let r = s.read()?;
    let mut out = Tables::new();
    for name in r.list_tables()? {
        let t = r.table(&name)?;
        let rows = t.range(..)?.collect::<keel::Result<BTreeMap<_, _>>>()?;
        out.insert(name, rows);
    }
    Ok(out)
}

#[derive(Default, Debug)]
struct Counts {
    commits: u64,
    conflicts: u64,
    aborts: u64,
    /// Validations narrowed by the recent commits' writes, and reads they skipped.
    narrowed: u64,
    skipped: u64,
}

/// The test knobs a run switches on (each breaks an invariant on purpose).
#[derive(Default, Clone, Copy)]
struct Knobs {
    skip_validation: bool,
    skip_range_reads: bool,
    forget_recent_writes: bool,
}

fn config() -> Config {
    Config {
        page_size: 4096,
        pool_size: 64 * 4096,
        log_file_size: 1 << 20,
        log_file_count: 2,
        ..Config::default()
    }
}

/// One seeded interleaving on one thread. `disjoint`: each transaction gets its own keys and
/// never drops, lists or scans, so no conflict is ever justified.
fn run(seed: u64, skip_validation: bool, disjoint: bool) -> Result<Counts, String> {
    let knobs = Knobs {
        skip_validation,
        ..Knobs::default()
    };
    run_with(seed, knobs, disjoint)
}

/// [`run`], with any of the knobs.
fn run_with(seed: u64, knobs: Knobs, disjoint: bool) -> Result<Counts, String> {
    let fs: Arc<dyn keel_io::FileSystem> = Arc::new(SimFs::new(SimConfig::seeded(seed)));
    let s =
        Store::open_with_fs(fs.clone(), Path::new("/db"), config()).map_err(|e| e.to_string())?;
    s.test_knobs()
        .skip_validation
        .store(knobs.skip_validation, Ordering::Relaxed);
    s.test_knobs()
        .skip_range_reads
        .store(knobs.skip_range_reads, Ordering::Relaxed);
    s.test_knobs()
        .forget_recent_writes
        .store(knobs.forget_recent_writes, Ordering::Relaxed);
    let mut rng = Rng::new(seed);
    let mut committed = Tables::new();
    // Commits that created or dropped a table.
    let mut catalog_changes = 0u64;
    let mut open: Vec<Open<'_>> = Vec::new();
    let mut counts = Counts::default();
    let mut next_base = 0u8;
    let e = |e: Error| e.to_string();
    if disjoint {
        // The tables exist first: creating one is a catalog change others' lookups conflict
        // with.
        let tx = s.write().map_err(e)?;
        for n in NAMES {
            tx.table(n).map_err(e)?;
            committed.insert(n.to_string(), BTreeMap::new());
        }
        tx.commit().map_err(e)?;
    }
    for step in 0..400u32 {
        match rng.below(10) {
            // Open a transaction.
            0 | 1 if open.len() < 5 => {
                let n = 1 + rng.below(8) as usize;
                let ops: Vec<Op> = if disjoint {
                    let base = next_base;
                    next_base = next_base.wrapping_add(4) % 96;
                    (0..n)
                        .map(|_| loop {
                            let op = gen_op(&mut rng, 4, base);
                            if rng.below(6) == 0 {
                                // Everyone adds to one counter: never a conflict.
                                break Op::Add(0, SHARED_COUNTER, rng.below(100) as i64);
                            }
                            if matches!(
                                op,
                                Op::Get(..) | Op::Insert(..) | Op::Remove(..) | Op::Create(_)
                            ) {
                                break op;
                            }
                        })
                        .collect()
                } else {
                    (0..n).map(|_| gen_op(&mut rng, 12, 0)).collect()
                };
                open.push(Open {
                    tx: s.write_concurrent().map_err(e)?,
                    snapshot: committed.clone(),
                    catalog_changes,
                    left: ops.len(),
                    ops,
                    answers: Vec::new(),
                });
            }
            // An exclusive writer: serial, never conflicts.
            2 if rng.below(4) == 0 && !disjoint => {
                let ops: Vec<Op> = (0..1 + rng.below(4))
                    .map(|_| gen_op(&mut rng, 12, 0))
                    .collect();
                let mut tx = s.write().map_err(e)?;
                let got = ops
                    .iter()
                    .map(|op| store_op(&mut tx, op))
                    .collect::<keel::Result<Vec<_>>>()
                    .map_err(e)?;
                let (want, after) = model_run(&committed, &ops);
                if got != want {
                    return Err(format!(
                        "seed {seed} step {step}: exclusive writer answered {got:?}, want {want:?}"
                    ));
                }
                tx.commit().map_err(e)?;
                catalog_changes += u64::from(creates_or_drops(&committed, &after, &ops, &want));
                committed = after;
                counts.commits += 1;
            }
            3 if rng.below(8) == 0 => {
                s.checkpoint().map_err(e)?;
            }
            // A step of an open transaction, or its end.
            _ if !open.is_empty() => {
                let i = rng.below(open.len() as u64) as usize;
                if open[i].left > 0 {
                    let o = &mut open[i];
                    let op = o.ops[o.ops.len() - o.left].clone();
                    let got = store_op(&mut o.tx, &op)
                        .map_err(|err| format!("seed {seed} step {step}: {op:?} failed: {err}"))?;
                    o.answers.push(got);
                    o.left -= 1;
                    // Its view: the snapshot plus its own writes.
                    let done = o.ops.len() - o.left;
                    let (want, _) = model_run(&o.snapshot, &o.ops[..done]);
                    if o.answers != want {
                        return Err(format!(
                            "seed {seed} step {step}: view differs: answered {:?}, want {:?}",
                            o.answers, want
                        ));
                    }
                    continue;
                }
                let o = open.swap_remove(i);
                if rng.below(10) == 0 {
                    o.tx.abort();
                    counts.aborts += 1;
                    continue;
                }
                let (now_answers, after) = model_run(&committed, &o.ops);
                match o.tx.commit() {
                    Ok(()) => {
                        if now_answers != o.answers {
                            return Err(format!(
                                "seed {seed} step {step}: not serializable: committed a transaction whose answers at the newest commit are {:?}, but it saw {:?}",
                                now_answers, o.answers
                            ));
                        }
                        catalog_changes +=
                            u64::from(creates_or_drops(&committed, &after, &o.ops, &now_answers));
                        committed = after;
                        counts.commits += 1;
                    }
                    Err(err) if err.is_conflict() => {
                        let catalog_changed = catalog_changes != o.catalog_changes;
                        if !conflict_justified(&o.ops, &o.snapshot, &committed, catalog_changed)
                            || disjoint
                        {
                            return Err(format!(
                                "seed {seed} step {step}: needless conflict ({err}); ops {:?}, answers {:?}",
                                o.ops, o.answers
                            ));
                        }
                        counts.conflicts += 1;
                    }
                    Err(err) => return Err(format!("seed {seed} step {step}: commit: {err}")),
                }
                // Nothing uncommitted is visible: the store holds exactly the commits.
                let seen = read_all(&s).map_err(e)?;
                if seen != committed {
                    return Err(format!(
                        "seed {seed} step {step}: a reader sees {} tables / {} rows, want {} / {}",
                        seen.len(),
                        seen.values().map(BTreeMap::len).sum::<usize>(),
                        committed.len(),
                        committed.values().map(BTreeMap::len).sum::<usize>()
                    ));
                }
            }
            _ => {}
        }
    }
    drop(open);
    let stats = s.stats();
    counts.narrowed = stats.validations_narrowed;
    counts.skipped = stats.validation_reads_skipped;
    // The commits survive a reopen without a checkpoint (recovery replays them in commit
    // order).
    drop(s);
    let s = Store::open_with_fs(fs, Path::new("/db"), config()).map_err(|e| e.to_string())?;
    if read_all(&s).map_err(e)? != committed {
        return Err(format!(
            "seed {seed}: after a reopen the store differs from the commits"
        ));
    }
    Ok(counts)
}

#[test]
fn interleaved_transactions_are_serializable_and_see_their_snapshot() {
    // `KEEL_CONCURRENT_SEEDS=N` runs more (the seeds from `KEEL_CONCURRENT_SEED_BASE`).
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (base, n) = (
        env("KEEL_CONCURRENT_SEED_BASE", 0),
        env("KEEL_CONCURRENT_SEEDS", 60),
    );
    let mut total = Counts::default();
    for seed in base..base.saturating_add(n) {
        let c = run(seed, false, false).unwrap_or_else(|m| panic!("{m}"));
        total.commits += c.commits;
        total.conflicts += c.conflicts;
        total.aborts += c.aborts;
        total.narrowed += c.narrowed;
        total.skipped += c.skipped;
    }
    println!("{n} seeds from {base}: {total:?}");
    assert!(total.commits > 1000, "{total:?}");
    // Validation by the recent commits' writes is exercised, not only the full re-read.
    assert!(
        total.narrowed > 200 && total.skipped > 200,
        "the model must narrow validations: {total:?}"
    );
    assert!(
        total.conflicts > 50,
        "the model must make conflicts: {total:?}"
    );
}

#[test]
fn transactions_on_disjoint_keys_never_conflict() {
    for seed in 0..30 {
        let c = run(seed, false, true).unwrap_or_else(|m| panic!("{m}"));
        assert_eq!(c.conflicts, 0);
    }
}

#[test]
fn without_validation_the_model_finds_a_lost_update() {
    // The knob applies writes without checking the read set: some seed must commit a
    // transaction whose answers no longer hold.
    let failed = (0..60).find_map(|seed| run(seed, true, false).err());
    let msg = failed.expect("skipping validation must break serializability in 60 seeds");
    assert!(msg.contains("not serializable"), "{msg}");
}

#[test]
fn without_range_reads_the_model_finds_a_phantom() {
    // Scans that record nothing miss rows others add or remove in the ranges they covered:
    // some seed must commit a transaction whose scan no longer gives the same rows.
    let failed = (0..60).find_map(|seed| {
        run_with(
            seed,
            Knobs {
                skip_range_reads: true,
                ..Knobs::default()
            },
            false,
        )
        .err()
    });
    let msg = failed.expect("scans without read records must break serializability in 60 seeds");
    assert!(msg.contains("not serializable"), "{msg}");
}

#[test]
fn without_recorded_writes_the_model_finds_a_lost_update() {
    // Commits that record no written rows let later validations skip reads they changed:
    // some seed must commit a transaction whose answers no longer hold.
    let failed = (0..60).find_map(|seed| {
        run_with(
            seed,
            Knobs {
                forget_recent_writes: true,
                ..Knobs::default()
            },
            false,
        )
        .err()
    });
    let msg = failed.expect("forgotten writes must break serializability in 60 seeds");
    assert!(msg.contains("not serializable"), "{msg}");
}

/// A store on disk in `dir` whose commits do not wait for the log sync (the threaded tests
/// check interleavings, not durability).
fn lazy_store(dir: &Path) -> Store {
    let config = Config {
        durability: keel::Durability::Lazy,
        ..Config::default()
    };
    Store::open(dir, config).unwrap()
}

/// Threads move money between accounts with concurrent transactions (retrying conflicts)
/// while readers sum the accounts: every snapshot sums to the same total, and so does the end.
#[test]
fn threads_transferring_keep_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let s = lazy_store(dir.path());
    const ACCOUNTS: u64 = 16;
    let tx = s.write().unwrap();
    {
        let mut t = tx.table("acct").unwrap();
        for a in 0..ACCOUNTS {
            t.insert(&a.to_be_bytes(), &100u64.to_le_bytes()).unwrap();
        }
    }
    tx.commit().unwrap();
    let sum = |t: &keel::ReadTable<'_>| -> u64 {
        t.range(..)
            .unwrap()
            .map(|r| {
                let (_, v) = r.unwrap();
                u64::from_le_bytes(v.try_into().unwrap())
            })
            .sum()
    };
    let retries = std::sync::atomic::AtomicU64::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let mut writers = Vec::new();
        for w in 0..4u64 {
            let (s, retries) = (&s, &retries);
            writers.push(sc.spawn(move || {
                let mut rng = Rng::new(w);
                for _ in 0..300 {
                    let (a, b) = (rng.below(ACCOUNTS), rng.below(ACCOUNTS));
                    let amount = rng.below(10);
                    loop {
                        let tx = s.write_concurrent().unwrap();
                        {
                            let mut t = tx.table("acct").unwrap();
                            let get = |t: &keel::Table<'_, '_>, k: u64| {
                                u64::from_le_bytes(
                                    t.get(&k.to_be_bytes())
                                        .unwrap()
                                        .unwrap()
                                        .try_into()
                                        .unwrap(),
                                )
                            };
                            let va = get(&t, a);
                            if va >= amount && a != b {
                                let vb = get(&t, b);
                                t.insert(&a.to_be_bytes(), &(va - amount).to_le_bytes())
                                    .unwrap();
                                t.insert(&b.to_be_bytes(), &(vb + amount).to_le_bytes())
                                    .unwrap();
                            }
                        }
                        match tx.commit() {
                            Ok(()) => break,
                            Err(e) if e.is_conflict() => {
                                retries.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            }));
        }
        let (s, stop) = (&s, &stop);
        // At least one check even if the writers are done before this thread first runs (a
        // loaded 2-core machine once ran all 1,200 commits first: `checks > 0` failed).
        let reader = sc.spawn(move || {
            let mut checks = 0u64;
            loop {
                let r = s.read().unwrap();
                assert_eq!(sum(&r.table("acct").unwrap()), ACCOUNTS * 100);
                checks += 1;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
            checks
        });
        // Join every writer, then stop the reader, even if a writer failed (waiting for a
        // commit count instead would hang on a failed writer rather than fail).
        let failed = writers
            .into_iter()
            .map(|h| h.join())
            .filter(Result::is_err)
            .count();
        stop.store(true, Ordering::Relaxed);
        let checks = reader.join().unwrap();
        assert_eq!(failed, 0, "a writer failed");
        assert!(checks > 0);
    });
    let r = s.read().unwrap();
    assert_eq!(sum(&r.table("acct").unwrap()), ACCOUNTS * 100);
    let st = s.stats();
    assert_eq!(st.commits, 1 + 4 * 300);
    assert_eq!(st.conflicts, retries.load(Ordering::Relaxed));
    println!(
        "transfers: {} commits, {} conflicts retried",
        st.commits, st.conflicts
    );
}

/// A concurrent transaction holds no lock while it runs: its thread can start the exclusive
/// writer, checkpoint and read. Only its commit needs the writer lock, so committing it while
/// the same thread holds the exclusive writer is refused, never a hang.
#[test]
fn a_thread_never_waits_for_itself_with_concurrent_writers() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), Config::default()).unwrap();
    let c = s.write_concurrent().unwrap();
    c.table("t").unwrap().insert(b"a", b"1").unwrap();
    s.checkpoint().unwrap();
    let ex = s.write().unwrap();
    ex.table("u").unwrap().insert(b"b", b"2").unwrap();
    let c2 = s.write_concurrent().unwrap();
    c2.table("v").unwrap().insert(b"c", b"3").unwrap();
    assert!(matches!(c2.commit(), Err(Error::WouldDeadlock { .. })));
    ex.commit().unwrap();
    // The first one's snapshot predates the exclusive commit, which did not touch what it read.
    c.commit().unwrap();
    let r = s.read().unwrap();
    assert_eq!(r.list_tables().unwrap(), ["t", "u"]);
}

/// `add_i64` on a value that is not an 8-byte integer: refused at once in the exclusive
/// writer, and at commit in a concurrent transaction, which then commits nothing at all.
#[test]
fn an_add_to_a_value_that_is_no_integer_commits_nothing() {
    let fs: Arc<dyn keel_io::FileSystem> = Arc::new(SimFs::new(SimConfig::seeded(7)));
    let s = Store::open_with_fs(fs, Path::new("/db"), config()).unwrap();
    let tx = s.write().unwrap();
    tx.table("t").unwrap().insert(b"n", b"abc").unwrap();
    tx.table("t").unwrap().add_i64(b"sum", 5).unwrap();
    let err = tx.table("t").unwrap().add_i64(b"n", 1).unwrap_err();
    assert!(
        matches!(err, Error::NotAnInteger { len: 3, .. }),
        "exclusive: {err}"
    );
    tx.commit().unwrap();
    // The integer is stored as 8 little-endian bytes.
    let r = s.read().unwrap();
    assert_eq!(
        r.table("t").unwrap().get(b"sum").unwrap(),
        Some(5i64.to_le_bytes().to_vec())
    );
    drop(r);
    // A concurrent add to "sum" while another transaction turns it into text.
    let a = s.write_concurrent().unwrap();
    a.table("t").unwrap().insert(b"other", b"x").unwrap();
    a.table("t").unwrap().add_i64(b"sum", 1).unwrap();
    let b = s.write_concurrent().unwrap();
    b.table("t").unwrap().insert(b"sum", b"text").unwrap();
    b.commit().unwrap();
    let err = a.commit().unwrap_err();
    assert!(
        matches!(err, Error::NotAnInteger { len: 4, .. }),
        "concurrent: {err}"
    );
    let r = s.read().unwrap();
    let t = r.table("t").unwrap();
    assert_eq!(t.get(b"sum").unwrap(), Some(b"text".to_vec()));
    assert_eq!(
        t.get(b"other").unwrap(),
        None,
        "nothing of the failed commit"
    );
    // An add to the transaction's own write is checked at once.
    let c = s.write_concurrent().unwrap();
    c.table("t").unwrap().insert(b"mine", b"xy").unwrap();
    let err = c.table("t").unwrap().add_i64(b"mine", 1).unwrap_err();
    assert!(
        matches!(err, Error::NotAnInteger { len: 2, .. }),
        "own: {err}"
    );
    drop(c);
    // The refusals did not poison the store.
    let tx = s.write().unwrap();
    tx.table("t").unwrap().add_i64(b"sum2", -3).unwrap();
    tx.commit().unwrap();
}

/// Threads add to shared totals with concurrent transactions (each also writes a row of its
/// own and reads one total it does not add to): the adds never conflict, none is lost, and
/// every snapshot a reader takes meanwhile sees totals that add up (each transaction adds the
/// same amount to "a" and "b").
#[test]
fn threads_adding_to_shared_totals_lose_nothing_and_never_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let s = lazy_store(dir.path());
    let tx = s.write().unwrap();
    tx.table("totals").unwrap().add_i64(b"a", 0).unwrap();
    tx.table("totals").unwrap().add_i64(b"b", 0).unwrap();
    tx.table("totals").unwrap().add_i64(b"c", 7).unwrap();
    tx.commit().unwrap();
    let int = |v: Option<Vec<u8>>| i64::from_le_bytes(v.unwrap().try_into().unwrap());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (threads, per_thread) = (4u64, 300u64);
    let expected: i64 = std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let mut checks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let r = s.read().unwrap();
                let t = r.table("totals").unwrap();
                assert_eq!(int(t.get(b"a").unwrap()), int(t.get(b"b").unwrap()));
                checks += 1;
            }
            checks
        });
        let writers: Vec<_> = (0..threads)
            .map(|w| {
                let s = &s;
                sc.spawn(move || {
                    let mut rng = Rng::new(w + 100);
                    let mut added = 0i64;
                    for i in 0..per_thread {
                        let d = rng.below(1000) as i64 - 400;
                        let tx = s.write_concurrent().unwrap();
                        {
                            let mut t = tx.table("totals").unwrap();
                            t.add_i64(b"a", d).unwrap();
                            t.add_i64(b"b", d).unwrap();
                            // A read of a total nobody changes, and a row of its own.
                            assert_eq!(int(t.get(b"c").unwrap()), 7);
                            t.insert(format!("w{w}-{i}").as_bytes(), b"x").unwrap();
                        }
                        tx.commit().expect("adds to shared totals never conflict");
                        added += d;
                    }
                    added
                })
            })
            .collect();
        // Join every writer before stopping the reader, even if one failed (else the reader
        // would spin forever and the test hang instead of fail).
        let joined: Vec<_> = writers.into_iter().map(|h| h.join()).collect();
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        joined
            .into_iter()
            .map(|r| r.unwrap_or_else(|_| panic!("a writer failed")))
            .sum()
    });
    let r = s.read().unwrap();
    let t = r.table("totals").unwrap();
    assert_eq!(int(t.get(b"a").unwrap()), expected);
    assert_eq!(int(t.get(b"b").unwrap()), expected);
    assert_eq!(t.len().unwrap(), 3 + threads * per_thread);
    assert_eq!(s.stats().conflicts, 0);
}

/// One run of the freshness check: writer 0 counts row 0 up, publishing each value once its
/// commit returned; writers 1..3 overwrite rows 1..7 of the same leaf; a reader takes a
/// snapshot after reading the published value and must find row 0 at least that high. The
/// other writers' commits copy the leaf before they take the writer lock, and writer 0's
/// commits make those copies stale: a stale copy used as the page's version would hand the
/// reader an older row 0. Returns the reader's checks, or the first stale read.
fn freshness_run(trust_stale_copies: bool, secs: f64) -> Result<u64, String> {
    let dir = tempfile::tempdir().unwrap();
    let s = lazy_store(dir.path());
    s.pool_test_knobs()
        .trust_stale_copies
        .store(trust_stale_copies, Ordering::Relaxed);
    let tx = s.write().unwrap();
    {
        let mut t = tx.table("fresh").unwrap();
        for k in 0..8u64 {
            t.insert(&k.to_be_bytes(), &0u64.to_le_bytes()).unwrap();
        }
    }
    tx.commit().unwrap();
    let acked = std::sync::atomic::AtomicU64::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
    std::thread::scope(|sc| {
        let mut writers = Vec::new();
        for w in 0..4u64 {
            let (s, acked, stop) = (&s, &acked, &stop);
            writers.push(sc.spawn(move || {
                let mut rng = Rng::new(w + 7);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                    n += 1;
                    let k = if w == 0 { 0 } else { 1 + rng.below(7) };
                    loop {
                        let tx = s.write_concurrent().unwrap();
                        tx.table("fresh")
                            .unwrap()
                            .insert(&k.to_be_bytes(), &n.to_le_bytes())
                            .unwrap();
                        match tx.commit() {
                            Ok(()) => break,
                            Err(e) if e.is_conflict() => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    if w == 0 {
                        acked.store(n, Ordering::SeqCst);
                    }
                }
            }));
        }
        let (s, acked, stop) = (&s, &acked, &stop);
        let reader = sc.spawn(move || -> Result<u64, String> {
            let mut checks = 0u64;
            while std::time::Instant::now() < deadline {
                let want = acked.load(Ordering::SeqCst);
                let r = s.read().unwrap();
                let v = r.table("fresh").unwrap().get(&0u64.to_be_bytes()).unwrap();
                let got = u64::from_le_bytes(v.unwrap().try_into().unwrap());
                if got < want {
                    stop.store(true, Ordering::Relaxed);
                    return Err(format!(
                        "a snapshot taken after commit {want} of row 0 was acknowledged read {got}"
                    ));
                }
                checks += 1;
            }
            Ok(checks)
        });
        let failed = writers
            .into_iter()
            .map(|h| h.join())
            .filter(Result::is_err)
            .count();
        let res = reader.join().unwrap();
        assert_eq!(failed, 0, "a writer failed");
        res
    })
}

/// A snapshot taken after a commit was acknowledged sees it, while other writers commit to the
/// same leaf (the pool's `txn/precopy.rs`: a page copy made before the writer lock is used only
/// while it is still the page). The knob `trust_stale_copies` uses stale copies and must be
/// caught within a few seconds.
#[test]
fn a_snapshot_sees_every_commit_acknowledged_before_it() {
    let checks = freshness_run(false, 1.0).unwrap();
    assert!(checks > 0);
    let mut caught = None;
    for _ in 0..10 {
        if let Err(e) = freshness_run(true, 1.0) {
            caught = Some(e);
            break;
        }
    }
    let e = caught.expect("trusting stale page copies was not caught in 10 s");
    println!("caught with trust_stale_copies: {e}");
}
