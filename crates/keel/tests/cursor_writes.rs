//! A cursor of a write transaction while the same transaction writes the table: through the
//! same handle (a cursor does not borrow its table) or a second handle. Whatever the writes
//! split, merge or shift, the cursor never loses, repeats or misorders a row, never reports
//! false corruption, and sees each row as it is when it reaches it (rows written ahead of it
//! are seen, rows written behind it are not), in both writer modes, for the borrowed-row
//! `cursor` and the owned rows of `range`, forward and backward.

use keel::{Config, Store};

fn key(i: u32) -> [u8; 8] {
    u64::from(i).to_be_bytes()
}

fn store(dir: &std::path::Path) -> Store {
    let s = Store::open(
        dir,
        Config {
            page_size: 4096,
            pool_size: 4 << 20,
            ..Config::default()
        },
    )
    .unwrap();
    let tx = s.write().unwrap();
    let mut t = tx.table("t").unwrap();
    for i in (0..4000).step_by(2) {
        t.insert(&key(i), &[1u8; 40]).unwrap();
    }
    tx.commit().unwrap();
    s
}

/// How the scan reads.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scan {
    /// `Table::cursor` (borrowed rows, forward).
    Cursor,
    /// `Table::range` (owned rows), forward.
    Rows,
    /// `Table::range(..).rev()`.
    RowsBack,
}

/// Scans the table while writing it every `every` rows: inserts of odd keys just behind and
/// far ahead of the scan (splits on both sides), and removes of even keys ahead of it.
fn scan_while_writing(s: &Store, concurrent: bool, every: usize, second_handle: bool, scan: Scan) {
    let tx = if concurrent {
        s.write_concurrent().unwrap()
    } else {
        s.write().unwrap()
    };
    let mut t = tx.table("t").unwrap();
    let mut t2 = tx.table("t").unwrap();
    let mut c = t.cursor(..).unwrap();
    let mut r = t.range(..).unwrap();
    let mut next = || -> keel::Result<Option<(Vec<u8>, Vec<u8>)>> {
        match scan {
            Scan::Cursor => Ok(c.next()?.map(|(k, v)| (k.to_vec(), v.to_vec()))),
            Scan::Rows => r.next().transpose(),
            Scan::RowsBack => r.next_back().transpose(),
        }
    };
    // +1: ahead is above (forward); -1: ahead is below.
    let dir: i64 = if scan == Scan::RowsBack { -1 } else { 1 };
    let in_table = |x: i64| (0..4000).contains(&x);
    let mut expect: std::collections::BTreeSet<i64> = (0..4000).step_by(2).collect();
    let mut seen = Vec::new();
    let mut n = 0;
    while let Some((k, v)) = next().unwrap_or_else(|e| panic!("after {n} rows: {e}")) {
        let k = u64::from_be_bytes(k.as_slice().try_into().unwrap()) as i64;
        assert_eq!(v.len(), if k % 2 == 0 { 40 } else { 300 }, "key {k}");
        seen.push(k);
        n += 1;
        if n % every == 0 {
            let w = if second_handle { &mut t2 } else { &mut t };
            // Behind: never seen. Ahead: seen when reached (unless removed again).
            for b in [1, 3, 5].map(|d| k - dir * d) {
                if in_table(b) && b % 2 != 0 {
                    w.insert(&key(b as u32), &[2u8; 300]).unwrap();
                }
            }
            for a in (101..400).map(|d| k + dir * d) {
                if in_table(a) && a % 2 != 0 {
                    w.insert(&key(a as u32), &[2u8; 300]).unwrap();
                    expect.insert(a);
                }
            }
            for x in (2..60).map(|d| k + dir * d) {
                if in_table(x) && x % 2 == 0 && w.remove(&key(x as u32)).unwrap().is_some() {
                    expect.remove(&x);
                }
            }
        }
    }
    let mut expect: Vec<i64> = expect.into_iter().collect();
    if dir < 0 {
        expect.reverse();
    }
    if seen != expect {
        let i = seen.iter().zip(&expect).take_while(|(a, b)| a == b).count();
        panic!(
            "concurrent={concurrent} every={every} second={second_handle} {scan:?}: \
             from row {i} seen {:?}, expected {:?} ({} rows seen, {} expected)",
            &seen[i..(i + 8).min(seen.len())],
            &expect[i..(i + 8).min(expect.len())],
            seen.len(),
            expect.len()
        );
    }
    drop(c);
    drop(r);
    tx.abort();
}

#[test]
fn a_cursor_sees_its_own_transaction_write_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    for concurrent in [false, true] {
        for every in [7, 64] {
            for second in [false, true] {
                for scan in [Scan::Cursor, Scan::Rows, Scan::RowsBack] {
                    scan_while_writing(&s, concurrent, every, second, scan);
                }
            }
        }
    }
}
