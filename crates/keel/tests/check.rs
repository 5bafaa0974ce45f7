//! `Store::check`: sound stores pass with every page accounted for; each invariant it checks
//! is broken on purpose in the file (a flipped byte in a leaf and in an inner node, a leaked
//! page, a page both free and used, a damaged trunk; and, re-sealed with a valid checksum, an
//! overflow chain going on past its end, overlapping cells, a node of another page type, a
//! trunk cycle) and reported with the file and page.

use keel::{Checksum, Config, Store, TornPage};
use keel_page::{seal, PAGE_HEADER_SIZE};
use std::os::unix::fs::FileExt;
use std::path::Path;

const PS: usize = 4096;
// Meta page layout (docs/format.md): page count, catalog root, free count, trunk, free array.
const M_PAGE_COUNT: usize = PAGE_HEADER_SIZE + 16;
const M_FREE_COUNT: usize = PAGE_HEADER_SIZE + 32;
const M_TRUNK: usize = PAGE_HEADER_SIZE + 40;
const M_FREE: usize = PAGE_HEADER_SIZE + 48;

/// No doublewrite: with it, opening the store would restore a damaged page from its
/// doublewrite copy (when it has one) before the check could see the damage.
fn cfg() -> Config {
    Config {
        torn_page: TornPage::None,
        page_size: PS,
        pool_size: 8 << 20,
        log_file_size: 16 << 20,
        checksum: Checksum::Crc32c,
        ..Config::default()
    }
}

/// A store with three tables (one with overflow values), one of them dropped so the free list
/// holds ids (and, with `trunk`, enough frees to make a trunk page).
fn build(dir: &Path, trunk: bool) {
    let store = Store::open(dir, cfg()).unwrap();
    for (name, rows) in [("a", 3000u32), ("b", 500), ("gone", 200)] {
        let tx = store.write().unwrap();
        let mut t = tx.table(name).unwrap();
        for i in 0..rows {
            let v = if i % 97 == 0 {
                vec![3u8; 10_000]
            } else {
                vec![5u8; 80]
            };
            t.insert(&i.to_be_bytes(), &v).unwrap();
        }
        tx.commit().unwrap();
    }
    if trunk {
        // More pages than the meta page's free array holds (about 500 on 4 KiB pages), so the
        // drop makes free-list trunk pages.
        for batch in 0..3u32 {
            let tx = store.write().unwrap();
            let mut t = tx.table("gone").unwrap();
            for i in 0..100u32 {
                t.insert(
                    &(1_000_000 + batch * 1000 + i).to_be_bytes(),
                    &[9u8; 12_000],
                )
                .unwrap();
            }
            tx.commit().unwrap();
        }
    }
    let mut tx = store.write().unwrap();
    tx.drop_table("gone").unwrap();
    tx.commit().unwrap();
    let r = store.check().unwrap();
    assert!(r.is_ok(), "{:?}", r.problems);
    store.close().unwrap();
}

fn read_page(dir: &Path, id: u64) -> Vec<u8> {
    let f = std::fs::File::open(dir.join("data.keel")).unwrap();
    let mut p = vec![0u8; PS];
    f.read_exact_at(&mut p, id * PS as u64).unwrap();
    p
}

fn write_page(dir: &Path, id: u64, page: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("data.keel"))
        .unwrap();
    f.write_all_at(page, id * PS as u64).unwrap();
    f.sync_all().unwrap();
}

fn u32_at(p: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(p[o..o + 4].try_into().unwrap())
}

fn u64_at(p: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(p[o..o + 8].try_into().unwrap())
}

/// Changes the meta page with `f`, re-sealed so its checksum is valid: the damage is to the
/// accounting, not to the bytes.
fn edit_meta(dir: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut p = read_page(dir, 0);
    f(&mut p);
    seal(&mut p, Checksum::Crc32c);
    write_page(dir, 0, &p);
}

fn problems(dir: &Path) -> Vec<String> {
    let store = Store::open(dir, cfg()).unwrap();
    let r = store.check().unwrap();
    assert_eq!(r.is_ok(), r.problems.is_empty());
    r.problems
}

#[test]
fn a_sound_store_accounts_for_every_page() {
    for trunk in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), trunk);
        let store = Store::open(dir.path(), cfg()).unwrap();
        let r = store.check().unwrap();
        assert!(r.is_ok(), "{:?}", r.problems);
        let names: Vec<&str> = r.tables.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(r.tables[0].rows, 3000);
        assert_eq!(r.tables[1].rows, 500);
        assert!(r.tables[0].overflow_pages > 0 && r.tables[0].depth >= 2);
        let table_pages: u64 = r
            .tables
            .iter()
            .map(|t| t.leaves + t.inners + t.overflow_pages)
            .sum();
        assert_eq!(
            1 + r.catalog_pages + table_pages + r.trunk_pages + r.free_pages,
            r.page_count,
            "{r:?}"
        );
        assert!(r.free_pages > 0);
        assert_eq!(r.trunk_pages > 0, trunk, "{r:?}");
    }
}

#[test]
fn a_leaked_page_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), false);
    let mut leaked = 0;
    edit_meta(dir.path(), |p| {
        let n = u32_at(p, M_FREE_COUNT);
        assert!(n > 0);
        leaked = u64_at(p, M_FREE + (n as usize - 1) * 8);
        p[M_FREE_COUNT..M_FREE_COUNT + 4].copy_from_slice(&(n - 1).to_le_bytes());
    });
    let got = problems(dir.path());
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].contains("leaked") && got[0].contains(&leaked.to_string()),
        "{got:?}"
    );
    assert!(got[0].contains("data.keel"), "{got:?}");
}

#[test]
fn a_page_both_free_and_used_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), false);
    let root_of_a = {
        let store = Store::open(dir.path(), cfg()).unwrap();
        store.check().unwrap().tables[0].root
    };
    edit_meta(dir.path(), |p| {
        let n = u32_at(p, M_FREE_COUNT) as usize;
        p[M_FREE + n * 8..M_FREE + n * 8 + 8].copy_from_slice(&root_of_a.to_le_bytes());
        p[M_FREE_COUNT..M_FREE_COUNT + 4].copy_from_slice(&(n as u32 + 1).to_le_bytes());
    });
    let got = problems(dir.path());
    assert!(
        got.iter().any(|l| l.contains(&format!("page {root_of_a}:"))
            && l.contains("both")
            && l.contains("table \"a\"")
            && l.contains("free")),
        "{got:?}"
    );
}

#[test]
fn a_free_id_beyond_the_file_and_a_bad_trunk_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), true);
    let page_count = u64_at(&read_page(dir.path(), 0), M_PAGE_COUNT);
    let trunk = u64_at(&read_page(dir.path(), 0), M_TRUNK);
    assert_ne!(trunk, 0, "the build made a trunk");
    edit_meta(dir.path(), |p| {
        let n = u32_at(p, M_FREE_COUNT) as usize;
        p[M_FREE + n * 8..M_FREE + n * 8 + 8].copy_from_slice(&(page_count + 5).to_le_bytes());
        p[M_FREE_COUNT..M_FREE_COUNT + 4].copy_from_slice(&(n as u32 + 1).to_le_bytes());
    });
    let got = problems(dir.path());
    assert!(
        got.iter()
            .any(|l| l.contains("beyond") && l.contains(&(page_count + 5).to_string())),
        "{got:?}"
    );
    // The trunk page's bytes damaged: its checksum fails when the check reads it.
    let mut t = read_page(dir.path(), trunk);
    t[PS / 2] ^= 0x40;
    write_page(dir.path(), trunk, &t);
    let got = problems(dir.path());
    assert!(
        got.iter()
            .any(|l| l.contains(&format!("page {trunk}:")) && l.contains("trunk")),
        "{got:?}"
    );
}

#[test]
fn a_flipped_byte_in_a_leaf_or_an_inner_node_is_reported() {
    for inner in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), false);
        let (root, victim) = {
            let store = Store::open(dir.path(), cfg()).unwrap();
            let a = store.check().unwrap().tables[0].clone();
            assert!(a.depth >= 2);
            // The root is an inner node; its first child pointer (after the node header)
            // names a page one level down.
            let rootp = read_page(dir.path(), a.root);
            let child = u64_at(&rootp, PAGE_HEADER_SIZE + 16);
            store.close().unwrap();
            (a.root, if inner { a.root } else { child })
        };
        let mut p = read_page(dir.path(), victim);
        p[PS - 200] ^= 1;
        write_page(dir.path(), victim, &p);
        let got = problems(dir.path());
        assert!(
            got.iter().any(|l| l.contains("table \"a\"")
                && l.contains(&format!("page {victim}"))
                && l.contains("checksum")),
            "inner {inner} root {root} victim {victim}: {got:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Damage to the structure, re-sealed with a valid checksum: an overflow chain going on past its
// last page (into another value's chain, or back into itself), cells of a leaf that overlap, a
// node whose page type is not a node's, and a cycle of free-list trunks. Each passed the check
// before (found by a session's adversarial test of the check), and two then lost data:
// removing the row freed the other value's pages, and `get` returned a value with another
// row's bytes.

// Overflow page: next page id after the page header; free-list trunk: next trunk likewise.
const OVF_NEXT: usize = PAGE_HEADER_SIZE;
const T_NEXT: usize = PAGE_HEADER_SIZE;

/// Writes `page` as page `id`, re-sealed so its checksum is valid.
fn resealed(dir: &Path, id: u64, page: &mut [u8]) {
    seal(page, Checksum::Crc32c);
    write_page(dir, id, page);
}

fn u16_at(p: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(p[o..o + 2].try_into().unwrap())
}

fn page_count(dir: &Path) -> u64 {
    u64_at(&read_page(dir, 0), M_PAGE_COUNT)
}

/// Leaf cells of page `p`: (cell offset, key, overflow (first, len) if any).
/// A leaf cell: its offset, key and overflow reference (first page, length).
type Cell = (usize, Vec<u8>, Option<(u64, u64)>);

fn leaf_cells(p: &[u8]) -> Vec<Cell> {
    let n = u32_at(p, 36) as usize;
    (0..n)
        .map(|i| {
            let off = u32_at(p, 56 + i * 8) as usize;
            let klen = u16_at(p, off) as usize;
            let key = p[off + 8..off + 8 + klen].to_vec();
            let ovf = (p[off + 2] == 1).then(|| {
                let v = off + 8 + klen;
                (u64_at(p, v), u64_at(p, v + 8))
            });
            (off, key, ovf)
        })
        .collect()
}

/// The leaf page holding `key` and its cell's overflow reference.
fn find_key(dir: &Path, key: &[u8]) -> (u64, Option<(u64, u64)>) {
    for id in 1..page_count(dir) {
        let p = read_page(dir, id);
        if u16_at(&p, 6) != 3 {
            continue;
        }
        for (_, k, o) in leaf_cells(&p) {
            if k == key {
                return (id, o);
            }
        }
    }
    panic!("key not found");
}

fn chain(dir: &Path, first: u64) -> Vec<u64> {
    let mut out = vec![first];
    let mut id = first;
    loop {
        let next = u64_at(&read_page(dir, id), OVF_NEXT);
        if next == 0 {
            return out;
        }
        out.push(next);
        id = next;
    }
}

fn two_big_values(dir: &Path) {
    let store = Store::open(dir, cfg()).unwrap();
    let tx = store.write().unwrap();
    {
        let mut t = tx.table("a").unwrap();
        for i in 0..50u32 {
            t.insert(format!("small{i:03}").as_bytes(), &[5u8; 60])
                .unwrap();
        }
        t.insert(b"big1", &[0x11u8; 10_000]).unwrap();
        t.insert(b"big2", &[0x22u8; 10_000]).unwrap();
    }
    tx.commit().unwrap();
    let r = store.check().unwrap();
    assert!(r.is_ok(), "{:?}", r.problems);
    store.close().unwrap();
}

/// The last page of `big1`'s chain names `big2`'s first page as its next: reported, and the
/// removal of `big1` is refused instead of freeing `big2`'s pages with it.
#[test]
fn a_chain_going_on_into_another_is_reported_and_never_freed_with_it() {
    let dir = tempfile::tempdir().unwrap();
    two_big_values(dir.path());
    let (_, o1) = find_key(dir.path(), b"big1");
    let (_, o2) = find_key(dir.path(), b"big2");
    let c1 = chain(dir.path(), o1.unwrap().0);
    let first2 = o2.unwrap().0;
    let last1 = *c1.last().unwrap();
    let mut p = read_page(dir.path(), last1);
    p[OVF_NEXT..OVF_NEXT + 8].copy_from_slice(&first2.to_le_bytes());
    resealed(dir.path(), last1, &mut p);
    let got = problems(dir.path());
    assert!(
        got.iter().any(|l| l.contains("names a next page")),
        "{got:?}"
    );
    let store = Store::open(dir.path(), cfg()).unwrap();
    let tx = store.write().unwrap();
    let removed = tx.table("a").unwrap().remove(b"big1");
    assert!(
        removed.as_ref().is_err_and(|e| e.is_corruption()),
        "{removed:?}"
    );
    drop(tx);
    let r = store.read().unwrap();
    assert_eq!(
        r.table("a").unwrap().get(b"big2").unwrap(),
        Some(vec![0x22u8; 10_000])
    );
}

/// The last page of a chain names the chain's first page: reported.
#[test]
fn a_chain_whose_tail_cycles_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    two_big_values(dir.path());
    let (_, o1) = find_key(dir.path(), b"big1");
    let c1 = chain(dir.path(), o1.unwrap().0);
    let last1 = *c1.last().unwrap();
    let mut p = read_page(dir.path(), last1);
    p[OVF_NEXT..OVF_NEXT + 8].copy_from_slice(&c1[0].to_le_bytes());
    resealed(dir.path(), last1, &mut p);
    let got = problems(dir.path());
    assert!(
        got.iter().any(|l| l.contains("names a next page")),
        "{got:?}"
    );
}

/// A leaf cell's value length raised so that its value runs over the next cell: every cell
/// lies in the cell area and the keys are in order, but the cells overlap — reported (`get`
/// returns a value with the other row's bytes).
#[test]
fn overlapping_cells_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), cfg()).unwrap();
    let tx = store.write().unwrap();
    {
        let mut t = tx.table("a").unwrap();
        for i in 0..20u32 {
            t.insert(format!("k{i:03}").as_bytes(), &[i as u8; 40])
                .unwrap();
        }
    }
    tx.commit().unwrap();
    store.close().unwrap();
    let (leaf, _) = find_key(dir.path(), b"k000");
    let mut p = read_page(dir.path(), leaf);
    let cells = leaf_cells(&p);
    let (off, _, _) = cells.iter().min_by_key(|c| c.0).unwrap().clone();
    let vlen = u32_at(&p, off + 4);
    p[off + 4..off + 8].copy_from_slice(&(vlen + 60).to_le_bytes());
    resealed(dir.path(), leaf, &mut p);
    let got = problems(dir.path());
    assert!(got.iter().any(|l| l.contains("overlap")), "{got:?}");
}

/// A leaf whose page header says OVERFLOW: reported.
#[test]
fn a_node_of_another_page_type_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    two_big_values(dir.path());
    let (leaf, _) = find_key(dir.path(), b"small000");
    let mut p = read_page(dir.path(), leaf);
    p[6..8].copy_from_slice(&5u16.to_le_bytes());
    resealed(dir.path(), leaf, &mut p);
    let got = problems(dir.path());
    assert!(got.iter().any(|l| l.contains("page type")), "{got:?}");
}

/// Two free-list trunks naming each other: one line says so. The check walked the cycle until
/// it had passed the page count, claiming every trunk's ids again on each lap: 1.5 million
/// lines for one bad pointer in a 3,000-page store.
#[test]
fn a_cycle_of_free_list_trunks_is_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), cfg()).unwrap();
    for batch in 0..10u32 {
        let tx = store.write().unwrap();
        let mut t = tx.table("gone").unwrap();
        for i in 0..100u32 {
            t.insert(&(batch * 1000 + i).to_be_bytes(), &[9u8; 12_000])
                .unwrap();
        }
        drop(t);
        tx.commit().unwrap();
    }
    let mut tx = store.write().unwrap();
    tx.drop_table("gone").unwrap();
    tx.commit().unwrap();
    assert!(store.check().unwrap().is_ok());
    store.close().unwrap();
    let head = u64_at(&read_page(dir.path(), 0), M_TRUNK);
    let second = u64_at(&read_page(dir.path(), head), T_NEXT);
    assert!(head != 0 && second != 0);
    let mut p = read_page(dir.path(), second);
    p[T_NEXT..T_NEXT + 8].copy_from_slice(&head.to_le_bytes());
    resealed(dir.path(), second, &mut p);
    let got = problems(dir.path());
    assert!(got.len() < 10, "{} problem lines", got.len());
    assert!(got.iter().any(|l| l.contains("cycle")), "{got:?}");
}

/// A leaf cell claiming 2^40 bytes over a chain whose first page names itself as next: `get`
/// and `check` read 2.7 x 10^8 pages and grew a vector toward a terabyte (a tester: killed by
/// a 20 s timeout). A length past any value's and a chain coming back to a page it passed are
/// corruption at once; so is a loop under a length a value may have.
#[test]
fn an_overflow_chain_looping_under_an_absurd_length_is_refused_at_once() {
    for huge in [1u64 << 40, u64::from(u32::MAX)] {
        let dir = tempfile::tempdir().unwrap();
        two_big_values(dir.path());
        let (leaf, o1) = find_key(dir.path(), b"big1");
        let (first, _) = o1.unwrap();
        let mut p = read_page(dir.path(), first);
        p[OVF_NEXT..OVF_NEXT + 8].copy_from_slice(&first.to_le_bytes());
        resealed(dir.path(), first, &mut p);
        let mut l = read_page(dir.path(), leaf);
        let (off, key, _) = leaf_cells(&l)
            .into_iter()
            .find(|(_, k, _)| k == b"big1")
            .unwrap();
        let v = off + 8 + key.len() + 8;
        l[v..v + 8].copy_from_slice(&huge.to_le_bytes());
        resealed(dir.path(), leaf, &mut l);
        let t0 = std::time::Instant::now();
        let store = Store::open(dir.path(), cfg()).unwrap();
        let got = store.read().unwrap().table("a").unwrap().get(b"big1");
        assert!(got.as_ref().is_err_and(|e| e.is_corruption()), "{got:?}");
        let r = store.check().unwrap();
        assert!(!r.is_ok(), "a looping chain passed the check");
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "{huge}: {:?}",
            t0.elapsed()
        );
    }
}

/// A meta page claiming 2^40 pages (checksum valid): the check counts the leaked ids instead
/// of listing each (it aborted on a failed 4 GiB allocation: a tester), and says how many the
/// meta page counts.
#[test]
fn a_meta_page_claiming_absurdly_many_pages_is_reported_not_walked() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), false);
    let real = page_count(dir.path());
    edit_meta(dir.path(), |p| {
        p[M_PAGE_COUNT..M_PAGE_COUNT + 8].copy_from_slice(&(1u64 << 40).to_le_bytes())
    });
    let got = problems(dir.path());
    let want = (1u64 << 40) - real;
    assert!(
        got.iter()
            .any(|l| l.contains(&format!("{want} page(s) leaked")) && l.contains(&real.to_string())),
        "{got:?}"
    );
}

/// A check beside a writer whose page versions pass the snapshot budget while the check walks:
/// its snapshot is dropped, and the check says so (`SnapshotTooOld`, retryable) — never a report
/// of damage. It reported the error as a problem of the table it was walking and every page it
/// had not reached as leaked ("126 page(s) leaked"), on a sound store (a tester). Each round
/// checks while a writer rewrites rows over every leaf; the store is checked again when quiet.
#[test]
fn a_check_whose_snapshot_passes_the_budget_says_so_and_reports_no_damage() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        pool_size: 4 << 20,
        durability: keel::Durability::Lazy,
        // 16 page versions: a few of the writer's commits pass it.
        snapshot_budget: 64 << 10,
        ..cfg()
    };
    let store = Arc::new(Store::open(dir.path(), config).unwrap());
    let tx = store.write().unwrap();
    let mut t = tx.table("t").unwrap();
    for i in 0..4000u32 {
        t.insert(format!("k{i:06}").as_bytes(), &[7; 100]).unwrap();
    }
    drop(t);
    tx.commit().unwrap();
    assert!(store.check().unwrap().is_ok());
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let tx = store.write().unwrap();
                let mut t = tx.table("t").unwrap();
                for j in 0..40u32 {
                    let k = (i * 97 + j * 101) % 4000;
                    t.insert(format!("k{k:06}").as_bytes(), &[i as u8; 100])
                        .unwrap();
                }
                drop(t);
                tx.commit().unwrap();
                i += 1;
            }
        })
    };
    let (mut clean, mut too_old, mut damaged) = (0, 0, Vec::new());
    for _ in 0..200 {
        match store.check() {
            Ok(report) if report.is_ok() => clean += 1,
            Ok(report) => damaged.push(report.problems),
            Err(keel::Error::SnapshotTooOld { .. }) => too_old += 1,
            Err(e) => panic!("a check beside a writer failed: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    println!(
        "checks beside a writer: {clean} clean, {too_old} too old, {} damaged",
        damaged.len()
    );
    assert!(
        damaged.is_empty(),
        "a sound store reported damaged: {:?}",
        damaged.first()
    );
    assert!(
        too_old > 0,
        "no check passed the budget: the test tests nothing"
    );
    assert!(store.check().unwrap().is_ok());
}
