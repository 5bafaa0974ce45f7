//! The home writer (crate::home): doublewrite in-place writes after `write_pages` returned.
//! Reads of in-flight pages, FIFO order of the same page across batches, crashes while home
//! writes are queued or half done, a failed in-place write on the home writer; each invariant
//! also broken on purpose with a knob.

use super::*;
use crate::scheme::Knobs;
use crate::{FlushError, FlushPage, PageWriter, PageWriterConfig, TornPageProtection};
use keel_io::{CrashPolicy, SimConfig, SimFs};
use keel_page::PageState;
use std::collections::BTreeMap;
use std::time::Duration;

const PS: PageSize = PageSize::K4;
const DW4: TornPageProtection = TornPageProtection::Doublewrite { batch_pages: 4 };

fn open(fs: Arc<dyn FileSystem>, shared: &Arc<Shared>, knobs: Knobs) -> PageWriter {
    let mut w = PageWriter::open(
        fs,
        Path::new("/db"),
        PageWriterConfig::new(PS, DW4),
        FakeLog(shared.clone()),
    )
    .unwrap();
    w.recover_doublewrite().unwrap();
    w.set_knobs(knobs);
    w
}

/// Writes pages `ids`, version `v`, LSNs from `lsn`.
fn write(w: &PageWriter, ids: &[u64], lsn: u64, v: u64) -> crate::Result<()> {
    let imgs: Vec<Vec<u8>> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| make_page(PS, id, lsn + i as u64, v))
        .collect();
    let pages: Vec<FlushPage<'_>> = ids
        .iter()
        .zip(&imgs)
        .enumerate()
        .map(|(i, (&id, img))| FlushPage {
            page_id: PageId(id),
            image: img,
            lsn: Lsn(lsn + i as u64),
            rebuildable_from_redo: false,
        })
        .collect();
    w.write_pages(&pages)
}

fn read_version(w: &PageWriter, id: u64) -> crate::Result<Option<u64>> {
    let mut buf = vec![0u8; PS.bytes()];
    match w.read_page(PageId(id), &mut buf)? {
        PageState::Valid(_) => Ok(version_of(&buf, id)),
        PageState::Unwritten => Ok(None),
    }
}

/// Page 5 at version 1 is in place; version 2's in-place write is held back by the data gate
/// after `write_pages` returned; a reader of page 5 (by `read_page` and by `read_pages`) must get
/// version 2: it waits until the gate opens. Returns the versions read and the waits counted.
fn read_while_home_write_is_held(knobs: Knobs) -> (Option<u64>, Option<u64>, u64) {
    let shared = Shared::new();
    let sim = SimFs::new(SimConfig::seeded(1));
    let w = open(RecFs::new(Arc::new(sim), shared.clone()), &shared, knobs);
    write(&w, &[5, 6], 10, 1).unwrap();
    w.drain().unwrap();
    shared.gate_data_writes(0);
    write(&w, &[5, 6], 20, 2).unwrap();
    let opener = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            shared.gate_data_writes(-1);
        })
    };
    let one = read_version(&w, 5).unwrap();
    opener.join().unwrap();
    // The same through read_pages (batch reads).
    shared.gate_data_writes(0);
    write(&w, &[5, 6], 30, 3).unwrap();
    let opener = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            shared.gate_data_writes(-1);
        })
    };
    let mut a = vec![0u8; PS.bytes()];
    let mut b = vec![0u8; PS.bytes()];
    let mut reqs: Vec<(PageId, &mut [u8])> = vec![(PageId(6), &mut a), (PageId(5), &mut b)];
    let r = w.read_pages(&mut reqs);
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let batch = version_of(&b, 5);
    opener.join().unwrap();
    (one, batch, w.stats().reads_waited_for_home_write)
}

/// A read of a page whose in-place write is queued or running returns the new image (it waits
/// for the write; counted). Broken on purpose with `skip_home_read_wait`: the old image is read.
#[test]
fn a_read_of_a_page_whose_home_write_is_in_flight_sees_the_new_image() {
    let (one, batch, waits) = read_while_home_write_is_held(Knobs::default());
    assert_eq!(one, Some(2));
    assert_eq!(batch, Some(3));
    assert_eq!(waits, 2);
    let broken = Knobs {
        skip_home_read_wait: true,
        ..Knobs::default()
    };
    let (one, batch, waits) = read_while_home_write_is_held(broken);
    assert_eq!(
        (one, batch, waits),
        (Some(1), Some(2), 0),
        "without the wait the old home copy is read"
    );
}

/// Five batches holding page 7 are queued while the home writer is held; once it runs, page 7's
/// in-place writes in the trace have increasing LSNs and the page ends at the newest version.
/// Returns the LSNs of page 7's data writes and the version read at the end.
fn same_page_batches(knobs: Knobs) -> (Vec<Lsn>, Option<u64>) {
    let shared = Shared::new();
    let sim = SimFs::new(SimConfig::seeded(2));
    let w = open(RecFs::new(Arc::new(sim), shared.clone()), &shared, knobs);
    shared.take_events();
    shared.gate_data_writes(0);
    for v in 1..=5u64 {
        write(&w, &[7, 10 + v], 100 * v, v).unwrap();
    }
    // The home writer has taken batch 1 and is held in its first write; 2..=5 are queued.
    std::thread::sleep(Duration::from_millis(20));
    shared.gate_data_writes(-1);
    w.drain().unwrap();
    let lsns = shared
        .take_events()
        .iter()
        .filter_map(|e| match e {
            Event::Write {
                class: FileClass::Data,
                bytes,
                ..
            } => pages_in_write(FileClass::Data, bytes, PS.bytes())
                .into_iter()
                .find(|(id, _)| *id == PageId(7))
                .map(|(_, l)| l),
            _ => None,
        })
        .collect();
    (lsns, read_version(&w, 7).unwrap())
}

/// FIFO: the same page in consecutive batches reaches its home in batch order. Broken on
/// purpose with `home_writes_lifo`: the trace shows an older LSN after a newer one and the page
/// ends at an older version.
#[test]
fn same_page_in_consecutive_batches_is_written_home_in_batch_order() {
    let (lsns, v) = same_page_batches(Knobs::default());
    assert_eq!(lsns.len(), 5, "{lsns:?}");
    assert!(lsns.windows(2).all(|p| p[0] < p[1]), "{lsns:?}");
    assert_eq!(v, Some(5));
    let broken = Knobs {
        home_writes_lifo: true,
        ..Knobs::default()
    };
    let (lsns, v) = same_page_batches(broken);
    assert!(
        !lsns.windows(2).all(|p| p[0] < p[1]),
        "out-of-order home writes not seen: {lsns:?}"
    );
    assert_ne!(v, Some(5));
}

/// Crashes while the home writer is behind: batches of hot and random pages, the data gate lets
/// a random number of in-place writes through (so the crash finds groups queued, one half
/// written, some written but unsynced), then the machine crashes with the writer still running.
/// After recovery every page holds the newest version whose `write_pages` returned.
fn crash_with_queued_home_writes(seed: u64, policy: Option<CrashPolicy>) -> Vec<String> {
    const PAGES: u64 = 24;
    let shared = Shared::new();
    let sim = SimFs::new(SimConfig::seeded(seed));
    let w = open(
        RecFs::new(Arc::new(sim.clone()), shared.clone()),
        &shared,
        Knobs::default(),
    );
    let mut rng = Rng::new(seed ^ 0xD00D);
    let rounds = 2 + rng.next() % 14;
    let durable: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());
    // Let some data writes through (4 pages per group), then hold the home writer: later
    // batches queue up, and once every slot is busy a batch waits for one.
    shared.gate_data_writes((rng.next() % (4 * rounds + 4)) as i64);
    let ids_of: Vec<Vec<u64>> = (0..rounds)
        .map(|_| {
            let mut ids = vec![0u64];
            while ids.len() < 4 {
                let id = 1 + rng.next() % (PAGES - 1);
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            ids
        })
        .collect();
    let after = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            for (round, ids) in ids_of.iter().enumerate() {
                let v = round as u64 + 1;
                if write(&w, ids, 1 + 10 * v, v).is_err() {
                    break;
                }
                let mut d = durable.lock();
                for &id in ids {
                    d.insert(id, v);
                }
            }
        });
        // Crash when the writer is done or stuck waiting for a slot, or a bit earlier.
        let deadline = std::time::Instant::now() + Duration::from_millis(rng.next() % 30);
        while !writer.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let after = match policy {
            Some(p) => sim.crash_with(p),
            None => sim.crash(),
        };
        // The old machine is gone: release the home writer (its writes now fail, which
        // poisons the writer and releases a batch waiting for a slot).
        shared.gate_data_writes(-1);
        after
    });
    drop(w);
    let durable = durable.into_inner();
    let shared2 = Shared::new();
    let w = open(Arc::new(after), &shared2, Knobs::default());
    let mut wrong = Vec::new();
    for id in 0..PAGES {
        let want = durable.get(&id).copied();
        match read_version(&w, id) {
            Ok(v) if v == want => {}
            r => wrong.push(format!(
                "page {id}: read {r:?}, newest durable version {want:?} (seed {seed})"
            )),
        }
    }
    wrong
}

/// Every page whose `write_pages` returned survives a crash while its in-place writes were
/// queued, running or unsynced (recovery restores it from its slot).
#[test]
fn crashes_with_home_writes_queued_or_in_progress_lose_nothing() {
    for seed in 0..60u64 {
        let policy = seed.is_multiple_of(3).then(CrashPolicy::lose_all);
        let wrong = crash_with_queued_home_writes(seed, policy);
        assert!(wrong.is_empty(), "{wrong:?}");
    }
}

/// A failed in-place write on the home writer poisons the writer: a reader waiting for a page of
/// a queued group, a batch waiting for a slot (all busy) and a drain all return instead of
/// hanging; every later write, read and sync gets `Poisoned`. The slots stay (lost, not reused):
/// after a crash, recovery restores every page whose `write_pages` returned.
#[test]
fn a_failed_home_write_poisons_and_nothing_hangs() {
    let shared = Shared::new();
    let sim = SimFs::new(SimConfig::seeded(3));
    let w = open(
        RecFs::new(Arc::new(sim.clone()), shared.clone()),
        &shared,
        Knobs::default(),
    );
    shared.gate_data_writes(0);
    // Fill every slot with a queued group.
    for v in 1..=crate::DOUBLEWRITE_SLOTS as u64 {
        write(&w, &[v, 100 + v], 10 * v, v).unwrap();
    }
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| read_version(&w, 3));
        let blocked_writer = scope.spawn(|| write(&w, &[50], 1000, 9));
        let drainer = scope.spawn(|| w.drain());
        std::thread::sleep(Duration::from_millis(30));
        assert!(!reader.is_finished() && !blocked_writer.is_finished());
        shared.fail_data_writes.store(true, Ordering::SeqCst);
        shared.gate_data_writes(-1);
        assert!(matches!(
            reader.join().unwrap(),
            Err(FlushError::Poisoned { .. })
        ));
        assert!(matches!(
            blocked_writer.join().unwrap(),
            Err(FlushError::Poisoned { .. })
        ));
        assert!(matches!(
            drainer.join().unwrap(),
            Err(FlushError::Poisoned { .. })
        ));
    });
    assert!(w.is_poisoned());
    assert!(matches!(
        write(&w, &[60], 2000, 10),
        Err(FlushError::Poisoned { .. })
    ));
    assert!(matches!(
        read_version(&w, 1),
        Err(FlushError::Poisoned { .. })
    ));
    assert!(matches!(w.sync_data(), Err(FlushError::Poisoned { .. })));
    drop(w);
    let after = sim.crash_with(CrashPolicy::lose_all());
    let w = open(Arc::new(after), &Shared::new(), Knobs::default());
    for v in 1..=crate::DOUBLEWRITE_SLOTS as u64 {
        assert_eq!(read_version(&w, v).unwrap(), Some(v), "page {v}");
        assert_eq!(
            read_version(&w, 100 + v).unwrap(),
            Some(v),
            "page {}",
            100 + v
        );
    }
}
