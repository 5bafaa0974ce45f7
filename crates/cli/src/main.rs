//! `keel`: look inside a Keel store and verify it, without writing to it.
//!
//! Every subcommand but `backup` opens the store read-only (a shared lock: it runs beside other
//! readers, never beside a writer; a store that needs recovery is recovered in memory, never on
//! disk); `backup` reads the files of a store another process may hold and write. Each
//! takes `--json` for machine-readable output. `RUST_LOG` (e.g. `RUST_LOG=info`) turns on the
//! engine's tracing events on stderr.
//!
//! - `keel check DIR`: every B-tree's structure, every page accounted for (none leaked, none in
//!   two places), every page read verified; exit status 0 when sound, 1 with one line per
//!   problem naming the file and page.
//! - `keel info DIR`: identity, creation settings, checkpoint and log range, whether recovery
//!   is needed and what it would do (computed in memory, not applied), tables with row and
//!   page counts, file sizes and free space.
//! - `keel backup DIR DEST`: a hot, consistent copy of a store another process may be writing
//!   (the one subcommand that writes, and only to DEST), recovered and checked.
//! - `keel dump page DIR N`: one page read straight from the data file (the store is not
//!   opened): verification, header, and the cells of a node, the fields of the meta page or
//!   the ids of a free-list trunk; exit status 1 when the page is damaged.
//! - `keel dump log DIR [--from LSN]`: the redo log as recovery's scan reads it: header,
//!   checkpoint slot, each complete group's records, and where and why the log ends.

mod backup;
mod check;
mod dump;
mod dump_log;
mod info;
mod log_files;
mod open;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "keel",
    version,
    about = "Look inside a Keel store and verify it (read-only)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Verify a store: B-tree structure, page accounting, page checksums. Exit 1 on any problem.
    Check {
        /// The store directory.
        dir: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Describe a store: identity, settings, checkpoint and log, tables, files.
    Info {
        /// The store directory.
        dir: PathBuf,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Copy a store that another process may be writing: a hot, consistent copy (the data file
    /// copied fuzzily, repaired by the redo log from the checkpoint at the start), recovered and
    /// checked. Writes only to DEST, which must not exist or be empty.
    Backup {
        /// The store directory.
        dir: PathBuf,
        /// Where the copy goes.
        dest: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Decode part of a store's files, damaged or not.
    #[command(subcommand)]
    Dump(Dump),
}

#[derive(Subcommand)]
enum Dump {
    /// One page of the data file: verification, header, and its cells, meta fields or free ids.
    Page {
        /// The store directory.
        dir: PathBuf,
        /// The page number.
        page: u64,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The redo log: header, checkpoint slot, every complete group and its records, the end.
    Log {
        /// The store directory.
        dir: PathBuf,
        /// Leave out groups ending at or before this LSN.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Print at most this many groups.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Restores the default action of `SIGPIPE` (ending the process), which Rust's runtime sets to
/// ignored: a reader that goes away (`keel info DIR | head`) then ends the tool as it ends
/// `cat`, instead of every `println!` after it panicking on `EPIPE`.
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: `signal` with a valid signal number and `SIG_DFL` touches no memory of the
    // process; it runs first in `main`, before any other thread exists or any handler is set.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    end_quietly_on_a_closed_pipe();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Check { dir, json } => check::run(&dir, json),
        Command::Info { dir, json } => info::run(&dir, json),
        Command::Backup { dir, dest, json } => backup::run(&dir, &dest, json),
        Command::Dump(Dump::Page { dir, page, json }) => dump::page(&dir, page, json),
        Command::Dump(Dump::Log {
            dir,
            from,
            limit,
            json,
        }) => dump_log::log(&dir, from, limit, json),
    }
}
