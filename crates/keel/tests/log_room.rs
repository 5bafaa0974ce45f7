//! A transaction too large for the log is refused at commit and rolled back (never a hang
//! waiting for log space that cannot come), and the check charges what the transaction can
//! really log in the configured torn-page mode (issue 16): page images only where full-page
//! writes log them, so the default log holds a 10,000-row transaction of random keys.

use keel::{Config, Error, Store, TornPage};
use keel_io::{SimConfig, SimFs};
use std::path::Path;
use std::sync::Arc;

/// A xorshift key stream: random 16-byte keys, as the peers harness uses.
fn keys(n: usize, seed: u64) -> Vec<[u8; 16]> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            let mut k = [0u8; 16];
            for half in k.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                half.copy_from_slice(&x.to_le_bytes());
            }
            k
        })
        .collect()
}

fn sim_store(config: Config) -> (SimFs, Store) {
    let fs = SimFs::new(SimConfig::seeded(3));
    let store = Store::open_with_fs(Arc::new(fs.clone()), Path::new("/db"), config).unwrap();
    (fs, store)
}

#[test]
fn the_default_log_holds_a_10000_row_transaction_of_random_keys() {
    let config = Config {
        direct_io: false,
        ..Config::default()
    };
    assert_eq!(config.torn_page, TornPage::Doublewrite);
    let (fs, store) = sim_store(config.clone());
    let tx = store.write().unwrap();
    {
        let mut t = tx.table("bulk").unwrap();
        for k in keys(10_000, 42) {
            t.insert(&k, &[7u8; 100]).unwrap();
        }
    }
    tx.commit().unwrap();
    store.close().unwrap();
    let store = Store::open_with_fs(Arc::new(fs), Path::new("/db"), config).unwrap();
    assert_eq!(
        store.read().unwrap().table("bulk").unwrap().len().unwrap(),
        10_000
    );
    assert!(store.check().unwrap().problems.is_empty());
}

/// In every mode, a transaction whose redo outgrows the log's room is refused with a typed
/// error, nothing of it is committed (now or after a reopen), and the store goes on working.
#[test]
fn a_transaction_too_large_for_the_log_is_refused_and_rolled_back() {
    for mode in [
        TornPage::Doublewrite,
        TornPage::FullPageWrites,
        TornPage::None,
    ] {
        let config = Config {
            page_size: 4096,
            pool_size: 1024 * 4096,
            log_file_size: 256 * 1024,
            log_file_count: 2,
            torn_page: mode,
            direct_io: false,
            ..Config::default()
        };
        let (fs, store) = sim_store(config.clone());
        let tx = store.write().unwrap();
        tx.table("small").unwrap().insert(b"k", b"v").unwrap();
        tx.commit().unwrap();
        let tx = store.write().unwrap();
        {
            let mut t = tx.table("big").unwrap();
            for k in keys(3_000, 9) {
                t.insert(&k, &[1u8; 100]).unwrap();
            }
        }
        match tx.commit() {
            Err(Error::TxnTooLargeForLog { redo_bytes, room }) => {
                assert!(redo_bytes > room, "{mode:?}: {redo_bytes} <= {room}")
            }
            other => panic!("{mode:?}: expected TxnTooLargeForLog, got {other:?}"),
        }
        let r = store.read().unwrap();
        assert_eq!(
            r.list_tables().unwrap(),
            vec!["small".to_string()],
            "{mode:?}"
        );
        drop(r);
        let tx = store.write().unwrap();
        tx.table("small").unwrap().insert(b"k2", b"v2").unwrap();
        tx.commit().unwrap();
        store.close().unwrap();
        let store = Store::open_with_fs(Arc::new(fs), Path::new("/db"), config).unwrap();
        let r = store.read().unwrap();
        assert_eq!(
            r.list_tables().unwrap(),
            vec!["small".to_string()],
            "{mode:?}"
        );
        assert_eq!(r.table("small").unwrap().len().unwrap(), 2, "{mode:?}");
    }
}

/// Full-page writes charge an image per page held; the other modes do not. A transaction of
/// a few rows on many pages fits a doublewrite store's log but not a full-page-writes one's
/// (where those images would really be logged after the checkpoint).
#[test]
fn full_page_writes_charge_images_that_doublewrite_does_not() {
    let outcome = |mode: TornPage| {
        let config = Config {
            page_size: 4096,
            pool_size: 4096 * 4096,
            log_file_size: 4 * 1024 * 1024,
            log_file_count: 2,
            torn_page: mode,
            direct_io: false,
            ..Config::default()
        };
        let (_fs, store) = sim_store(config);
        for batch in keys(40_000, 5).chunks(250) {
            let tx = store.write().unwrap();
            {
                let mut t = tx.table("t").unwrap();
                for k in batch {
                    t.insert(k, &[3u8; 20]).unwrap();
                }
            }
            tx.commit().unwrap();
        }
        store.checkpoint().unwrap();
        // One small change on each of many leaves: little redo, many pages.
        let tx = store.write().unwrap();
        {
            let mut t = tx.table("t").unwrap();
            for k in keys(40_000, 5).iter().step_by(4) {
                t.insert(k, &[4u8; 20]).unwrap();
            }
        }
        tx.commit()
    };
    outcome(TornPage::Doublewrite).unwrap();
    assert!(matches!(
        outcome(TornPage::FullPageWrites),
        Err(Error::TxnTooLargeForLog { .. })
    ));
}

/// A full-page-writes store whose log leaves one transaction little room: a one-row insert that
/// splits the tree is refused as too large for the log, saying what to do, and the store is not
/// stuck — opened with doublewrite protection (which logs no images) it takes the rows. (An
/// open-time refusal below 8 images, tried in session 45, refused working stores — every hot
/// `keel backup` of a small-log store, whose copy opens under full-page writes — and still let
/// deeper trees with long keys outgrow the room: a tester.)
#[test]
fn a_full_page_writes_log_too_small_for_a_split_says_what_to_do() {
    for page_size in [4096usize, 16384] {
        let small = Config {
            page_size,
            pool_size: 8 << 20,
            torn_page: TornPage::FullPageWrites,
            // Room for fewer images than a root split changes.
            log_file_size: (page_size as u64 * 4).max(32 << 10),
            log_file_count: 2,
            ..Config::default()
        };
        let fs = SimFs::new(SimConfig::seeded(4));
        let dir = Path::new("/db");
        let s = Store::open_with_fs(Arc::new(fs.clone()), dir, small.clone()).unwrap();
        let mut refused = None;
        let mut stored = Vec::new();
        for k in keys(400, 9) {
            let r = s.write().and_then(|tx| {
                tx.table("t")?.insert(&k, &[1; 100])?;
                tx.commit()
            });
            match r {
                Ok(()) => stored.push(k),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let e = refused.unwrap_or_else(|| panic!("{page_size}: every insert fit"));
        assert!(matches!(e, Error::TxnTooLargeForLog { .. }), "{e}");
        assert!(e.to_string().contains("doublewrite"), "{e}");
        drop(s);
        let dw = Config {
            torn_page: TornPage::Doublewrite,
            ..small
        };
        let s = Store::open_with_fs(Arc::new(fs), dir, dw).unwrap();
        for k in keys(400, 9) {
            let tx = s.write().unwrap();
            tx.table("t").unwrap().insert(&k, &[1; 100]).unwrap();
            tx.commit()
                .unwrap_or_else(|e| panic!("{page_size}: refused under doublewrite: {e}"));
        }
        let r = s.read().unwrap();
        assert_eq!(r.table("t").unwrap().range(..).unwrap().count(), 400);
    }
}
