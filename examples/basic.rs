//! Embedding Keel: open (or recover) a store, write tables in a transaction, read point values
//! and ordered ranges (forward and reverse), commit, read committed data in a read transaction,
//! take a checkpoint, and print the counters of every layer as JSON.
//!
//! ```sh
//! cargo run --release --example basic -- [DIR]     # DIR defaults to ./keel-basic (wiped first)
//! ```

use keel::{Config, Store};
use std::path::PathBuf;
use std::process::ExitCode;

fn run(dir: PathBuf) -> keel::Result<()> {
    // A fresh store each run, so the output is the same every time.
    let _ = std::fs::remove_dir_all(&dir);
    let config = Config {
        page_size: 4096,
        pool_size: 8 << 20,
        log_file_size: 4 << 20,
        ..Config::default()
    };
    let store = Store::open(&dir, config)?;
    println!(
        "opened {} (created: {}), torn-page protection {} ({}), I/O backend {}",
        store.dir().display(),
        store.recovery().created,
        store.effective().torn_page,
        store.effective().torn_page_reason,
        store.effective().io_backend
    );

    // One write transaction, two tables created on first use.
    let tx = store.write()?;
    {
        let mut fruit = tx.table("fruit")?;
        for (k, v) in [
            ("apple", "red"),
            ("banana", "yellow"),
            ("cherry", "dark red"),
            ("damson", "purple"),
            ("elderberry", "black"),
        ] {
            fruit.insert(k.as_bytes(), v.as_bytes())?;
        }
        let old = fruit.insert(b"apple", b"green")?;
        println!(
            "replaced apple: was {:?}",
            old.map(|v| String::from_utf8_lossy(&v).into_owned())
        );
        fruit.remove(b"damson")?;
        // The transaction sees its own changes.
        println!(
            "inside the transaction apple = {:?}",
            fruit
                .get(b"apple")?
                .map(|v| String::from_utf8_lossy(&v).into_owned())
        );
        let mut counts = tx.table("counts")?;
        for i in 0u32..1000 {
            counts.insert(format!("n{i:04}").as_bytes(), &i.to_le_bytes())?;
        }
    }
    tx.commit()?; // durable under Durability::Sync (the default) when it returns
    println!("committed");

    // A read transaction: a consistent view of committed data.
    {
        let r = store.read()?;
        let fruit = r.table("fruit")?;
        let show = |kv: keel::Result<(Vec<u8>, Vec<u8>)>| -> keel::Result<String> {
            let (k, v) = kv?;
            Ok(format!(
                "{}={}",
                String::from_utf8_lossy(&k),
                String::from_utf8_lossy(&v)
            ))
        };
        let all = fruit
            .range(..)?
            .map(show)
            .collect::<keel::Result<Vec<_>>>()?;
        println!("fruit, ascending:  {}", all.join(", "));
        let rev = fruit
            .range(b"b".as_slice()..b"e".as_slice())?
            .rev()
            .map(show)
            .collect::<keel::Result<Vec<_>>>()?;
        println!("fruit in [b, e), descending: {}", rev.join(", "));
        let counts = r.table("counts")?;
        let mut sum = 0u64;
        let mut n = 0;
        for kv in counts.range(b"n0100".as_slice()..=b"n0199".as_slice())? {
            let (_, v) = kv?;
            let bytes: [u8; 4] = v.as_slice().try_into().unwrap_or([0; 4]);
            sum += u64::from(u32::from_le_bytes(bytes));
            n += 1;
        }
        println!("counts n0100..=n0199: {n} rows, sum {sum}");
        println!(
            "damson after commit: {:?}",
            fruit.get(b"damson")?.map(|v| v.len())
        );
    }

    // A transaction that is dropped changes nothing.
    {
        let tx = store.write()?;
        tx.table("fruit")?.insert(b"fig", b"never committed")?;
        tx.abort();
    }
    println!(
        "fig after abort: {:?}",
        store.read()?.table("fruit")?.get(b"fig")?
    );

    let lsn = store.checkpoint()?;
    println!("checkpoint at LSN {}", lsn.0);
    let stats = store.stats();
    match serde_json::to_string_pretty(&stats) {
        Ok(s) => println!("stats:\n{s}"),
        Err(e) => eprintln!("basic: cannot serialise stats: {e}"),
    }
    store.close()?;
    Ok(())
}

fn main() -> ExitCode {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("keel-basic"));
    match run(dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("basic: {e}");
            ExitCode::FAILURE
        }
    }
}
