//! Async commit under tokio: many tasks each commit small transactions with
//! `commit_async().await`. The append happens inside a synchronous block (a `WriteTxn` holds the
//! store's writer lock and is not `Send`, so it must not live across an `.await`); the returned
//! future is `Send + 'static` and resolves when the commit is durable, without blocking a runtime
//! thread. Committers that wait at the same time share one log sync (group commit), which the
//! printed log counters show.
//!
//! ```sh
//! cargo run --release --example async_commit -- [DIR] [TASKS] [COMMITS_PER_TASK]
//! ```

use keel::{Config, Store};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

type BoxError = Box<dyn std::error::Error>;

async fn run(dir: PathBuf, tasks: u32, per_task: u32) -> Result<(), BoxError> {
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(
        &dir,
        Config {
            page_size: 4096,
            pool_size: 16 << 20,
            log_file_size: 16 << 20,
            ..Config::default()
        },
    )?;
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..per_task {
                let durable = {
                    let tx = store.write()?;
                    let key = format!("task{task:03}/{i:06}");
                    tx.table("events")?
                        .insert(key.as_bytes(), format!("payload {task} {i}").as_bytes())?;
                    tx.commit_async()
                }; // the writer lock is released here; the next task may start appending
                durable.await?;
            }
            Ok::<(), keel::Error>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let elapsed = t0.elapsed();
    let total = u64::from(tasks) * u64::from(per_task);
    let stats = store.stats();
    println!(
        "{tasks} tasks x {per_task} commits = {total} durable commits in {:.3} s ({:.0} commits/s)",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    println!(
        "log: {} groups appended, {} syncs -> {:.1} commits per sync (group commit)",
        stats.log.groups_appended,
        stats.log.syncs,
        stats.log.groups_appended as f64 / stats.log.syncs.max(1) as f64
    );
    // Verify every commit is visible to a reader.
    let r = store.read()?;
    let rows = r.table("events")?.range(..)?.count();
    println!("rows visible to a reader: {rows} (expected {total})");
    drop(r);
    store.close()?;
    if rows as u64 != total {
        return Err(format!("expected {total} rows, found {rows}").into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("keel-async"));
    let tasks = args.next().and_then(|s| s.parse().ok()).unwrap_or(32);
    let per_task = args.next().and_then(|s| s.parse().ok()).unwrap_or(50);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("async_commit: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(dir, tasks, per_task)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_commit: {e}");
            ExitCode::FAILURE
        }
    }
}
