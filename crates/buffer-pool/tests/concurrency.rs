//! A pool of 1/8 of the data set under two threads of random reads and writes plus the page
//! cleaner (and periodic checkpoints), through keel-flush's page writer on SimFs: no errors, no
//! deadlock (bounded time), every page read is self-consistent (pins and latches hold), and at the
//! end every page holds its last committed version.

mod common;

use common::modellog::ModelLog;
use common::*;
use keel_buffer_pool::{BufferPool, PoolConfig, PoolError};
use keel_flush::{PageWriter, PageWriterConfig, TornPageProtection};
use keel_io::sim::{SimConfig, SimFs};
use keel_page::{PageId, PageSize, PAGE_HEADER_SIZE};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

const PAGES: u64 = 512;
const FRAMES: usize = 64; // 1/8 of the data
const OPS: u64 = 3000;

fn run(protection: TornPageProtection) {
    let fs = Arc::new(SimFs::new(SimConfig::seeded(3)));
    let log = ModelLog::new();
    let writer = Arc::new(
        PageWriter::open(
            fs,
            Path::new("/db"),
            PageWriterConfig::new(PageSize::K4, protection),
            log.clone(),
        )
        .unwrap(),
    );
    seed(&*writer, PAGES);
    let cfg = PoolConfig {
        page_size: PageSize::K4,
        pool_bytes: FRAMES * 4096,
        cleaner_interval_ms: 2,
        cleaner_batch_pages: 16,
        ..PoolConfig::default()
    };
    let pool = Arc::new(BufferPool::new(cfg, writer.clone()).unwrap());
    let cleaner = pool.start_cleaner().unwrap();
    // The latest committed version of every page.
    let versions: Arc<Vec<AtomicU64>> = Arc::new((0..PAGES).map(|_| AtomicU64::new(0)).collect());
    let (done_tx, done_rx) = mpsc::channel();
    for t in 0..2u64 {
        let pool = pool.clone();
        let log = log.clone();
        let versions = versions.clone();
        let done = done_tx.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(t + 100);
            let res = (|| -> Result<(u64, u64), PoolError> {
                let (mut reads, mut writes) = (0, 0);
                for i in 0..OPS {
                    let id = rng.below(PAGES);
                    if rng.below(5) == 0 {
                        // Write a whole new version of one of this thread's pages.
                        let id = id - id % 2 + t;
                        let txn = pool.begin();
                        let mut g = txn.write(PageId(id))?;
                        let v = check_page(&g, id) + 1;
                        let img = page_image(4096, id, v, keel_page::Lsn(0));
                        g.write(PAGE_HEADER_SIZE, &img[PAGE_HEADER_SIZE..4096 - 8])?;
                        drop(g);
                        txn.commit(&log)?;
                        versions[id as usize].store(v, Ordering::SeqCst);
                        writes += 1;
                    } else {
                        let g = pool.read(PageId(id))?;
                        let v = check_page(&g, id);
                        assert!(v >= versions[id as usize].load(Ordering::SeqCst) || id % 2 != t);
                        reads += 1;
                    }
                    if t == 0 && i % 500 == 499 {
                        let target = pool.begin_checkpoint(&log);
                        pool.flush_up_to(target)?;
                        log.checkpoint(pool.checkpoint_lsn(&log))?;
                    }
                    if i % 300 == 0 {
                        log.sync()?;
                    }
                }
                Ok((reads, writes))
            })();
            let _ = done.send(res);
        });
    }
    drop(done_tx);
    for _ in 0..2 {
        match done_rx.recv_timeout(Duration::from_secs(240)) {
            Ok(Ok((r, w))) => assert!(r > 0 && w > 0),
            Ok(Err(e)) => panic!("{protection:?}: worker failed: {e}"),
            Err(e) => panic!("{protection:?}: no progress in 240 s (deadlock?): {e}"),
        }
    }
    assert!(cleaner.last_error().is_none(), "{:?}", cleaner.last_error());
    cleaner.stop();
    let s = pool.stats();
    println!("{protection:?}: {s:?}");
    assert!(s.evictions > 0 && s.misses > 0 && s.hits > 0, "{s:?}");
    assert!(s.cleaner_rounds > 0, "{s:?}");
    // Every page holds its last committed version, in the pool and, after a flush, on disk.
    pool.flush_all().unwrap();
    for id in 0..PAGES {
        let want = versions[id as usize].load(Ordering::SeqCst);
        assert_eq!(
            check_page(&pool.read(PageId(id)).unwrap(), id),
            want,
            "page {id}"
        );
        let mut buf = vec![0u8; 4096];
        writer.read_page(PageId(id), &mut buf).unwrap();
        assert_eq!(check_page(&buf, id), want, "page {id} on disk");
    }
}

#[test]
fn an_eighth_of_the_data_under_two_threads_and_the_cleaner_doublewrite() {
    run(TornPageProtection::Doublewrite { batch_pages: 16 });
}

#[test]
fn an_eighth_of_the_data_under_two_threads_and_the_cleaner_full_page_writes() {
    run(TornPageProtection::FullPageWrites);
}
