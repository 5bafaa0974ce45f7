//! Tests of `BufferPool::read_optimistic` (the frame version, a seqlock): a reader that skips
//! the version re-check (knob `skip_optimistic_validation`) returns torn pages under a
//! concurrent writer and another page's bytes under eviction and replacement; the real reader
//! never does.

use crate::page_store::MemStore;
use crate::testutil::{pool, put, PS};
use crate::BufferPool;
use keel_page::{PageId, PAGE_HEADER_SIZE};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The payload bytes of an optimistic copy: `Some(b)` if all equal `b`, `None` if mixed.
fn uniform(words: &[AtomicU64]) -> Option<u8> {
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
        .collect();
    let payload = &bytes[PAGE_HEADER_SIZE..bytes.len() - keel_page::PAGE_TRAILER_SIZE];
    let b = payload[0];
    payload.iter().all(|&x| x == b).then_some(b)
}

/// What the reader saw: (validated reads, torn reads among them, reads of a foreign fill).
#[derive(Debug, Default)]
struct Seen {
    ok: u64,
    torn: u64,
    foreign: u64,
}

/// Runs `disturb` in one thread while another reads page `id` optimistically, until `enough`
/// says so or 20 s pass. `expect(b)`: whether fill `b` belongs to page `id`.
fn race(
    pool: &BufferPool,
    id: PageId,
    expect: impl Fn(u8) -> bool + Sync,
    disturb: impl Fn(&AtomicBool) + Send + Sync,
    enough: impl Fn(&Seen) -> bool,
) -> Seen {
    let stop = AtomicBool::new(false);
    let mut seen = Seen::default();
    std::thread::scope(|s| {
        s.spawn(|| disturb(&stop));
        let t0 = Instant::now();
        while !enough(&seen) && t0.elapsed() < Duration::from_secs(20) {
            if let Some((r, _)) = pool.read_optimistic(id, uniform) {
                seen.ok += 1;
                match r {
                    None => seen.torn += 1,
                    Some(b) if !expect(b) => seen.foreign += 1,
                    Some(_) => {}
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    seen
}

/// A writer rewrites the page under its exclusive latch (as a transaction does) while a reader
/// copies it optimistically.
fn writer_race(skip_validation: bool) -> Seen {
    let store = Arc::new(MemStore::new(PS));
    put(&store, PageId(3), 0);
    let pool = pool(store);
    drop(pool.read(PageId(3)).unwrap());
    let f = pool.lookup_pin(PageId(3)).unwrap();
    pool.knobs
        .skip_optimistic_validation
        .store(skip_validation, Ordering::Relaxed);
    let writes = AtomicU64::new(0);
    let seen = race(
        &pool,
        PageId(3),
        |_| true,
        |stop| {
            let mut k = 0u8;
            while !stop.load(Ordering::Relaxed) {
                k = k.wrapping_add(1);
                let mut x = pool.frames[f as usize].exclusive();
                let end = x.bytes().len() - keel_page::PAGE_TRAILER_SIZE;
                // Byte by byte, so a torn copy is likely even on one core.
                for b in &mut x.bytes_mut()[PAGE_HEADER_SIZE..end] {
                    *b = k;
                    std::hint::black_box(&*b);
                }
                drop(x);
                writes.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
        },
        |s| {
            if skip_validation {
                s.torn > 0
            } else {
                s.ok >= 2000 && writes.load(Ordering::Relaxed) >= 2000
            }
        },
    );
    pool.unpin(f);
    assert!(writes.load(Ordering::Relaxed) > 0, "the writer never ran");
    seen
}

/// The real reader never returns a torn page while a writer rewrites it.
#[test]
fn validated_reads_are_never_torn_under_a_writer() {
    let seen = writer_race(false);
    assert!(seen.ok > 0, "no read validated: {seen:?}");
    assert_eq!(seen.torn, 0, "{seen:?}");
}

/// Skipping the re-check on purpose: torn pages come through (so the check above can fail).
#[test]
fn skipping_the_version_check_returns_torn_pages() {
    let seen = writer_race(true);
    assert!(
        seen.torn > 0,
        "no torn read seen without validation: {seen:?}"
    );
}

/// Eviction and reuse of the frame: page 3 (fill 0x33) is evicted and page 4 (fill 0x44) loaded
/// into the same frame, back and forth, while a reader reads page 3 optimistically.
fn eviction_race(skip_validation: bool) -> Seen {
    let store = Arc::new(MemStore::new(PS));
    put(&store, PageId(3), 0x33);
    put(&store, PageId(4), 0x44);
    let pool = pool(store);
    pool.knobs
        .skip_optimistic_validation
        .store(skip_validation, Ordering::Relaxed);
    drop(pool.read(PageId(3)).unwrap());
    let swaps = AtomicU64::new(0);
    let seen = race(
        &pool,
        PageId(3),
        |b| b == 0x33,
        |stop| {
            let mut resident = PageId(3);
            while !stop.load(Ordering::Relaxed) {
                let Some(f) = pool.lookup_pin(resident) else {
                    panic!("{resident} not resident");
                };
                pool.unpin(f);
                if !pool.try_evict(f, resident) {
                    continue; // the reader does not pin; only a transient state here
                }
                // The frame goes back on top of the free list: the next load reuses it.
                pool.release_claimed(f);
                resident = if resident == PageId(3) {
                    PageId(4)
                } else {
                    PageId(3)
                };
                drop(pool.read(resident).unwrap());
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        },
        |s| {
            if skip_validation {
                s.foreign + s.torn > 0
            } else {
                s.ok >= 1000 && swaps.load(Ordering::Relaxed) >= 500
            }
        },
    );
    assert!(swaps.load(Ordering::Relaxed) > 0, "no swap happened");
    seen
}

/// The real reader never returns page 4's bytes (or a mix) as page 3 while the frame is
/// evicted and reused.
#[test]
fn validated_reads_never_see_a_replaced_page() {
    let seen = eviction_race(false);
    assert!(seen.ok > 0, "no read validated: {seen:?}");
    assert_eq!((seen.torn, seen.foreign), (0, 0), "{seen:?}");
}

/// Skipping the re-check on purpose: the reused frame's other page comes through as page 3.
#[test]
fn skipping_the_version_check_returns_a_replaced_page() {
    let seen = eviction_race(true);
    assert!(
        seen.foreign + seen.torn > 0,
        "no foreign read seen without validation: {seen:?}"
    );
}

/// A page that is not resident, or latched exclusive, is not read optimistically; a token
/// stops validating once the page changes.
#[test]
fn optimistic_reads_refuse_absent_and_latched_pages() {
    let store = Arc::new(MemStore::new(PS));
    put(&store, PageId(3), 7);
    let pool = pool(store);
    assert!(
        pool.read_optimistic(PageId(3), uniform).is_none(),
        "not resident"
    );
    drop(pool.read(PageId(3)).unwrap());
    let (r, token) = pool.read_optimistic(PageId(3), uniform).unwrap();
    assert_eq!(r, Some(7));
    assert!(pool.is_unchanged(token));
    let f = pool.lookup_pin(PageId(3)).unwrap();
    {
        let _x = pool.frames[f as usize].exclusive();
        assert!(
            pool.read_optimistic(PageId(3), uniform).is_none(),
            "latched"
        );
        assert!(!pool.is_unchanged(token));
    }
    assert!(!pool.is_unchanged(token), "changed since the token");
    pool.unpin(f);
    assert!(pool.read_optimistic(PageId(3), uniform).is_some());
    assert!(pool.read_optimistic(PageId(99), uniform).is_none());
}
