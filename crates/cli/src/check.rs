//! `keel check DIR`: what is wrong with a store, one line per problem.

use crate::open::open_read_only;
use keel::CheckReport;
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;

/// The JSON form of a check.
#[derive(Serialize)]
struct CheckOutput<'a> {
    dir: &'a Path,
    ok: bool,
    /// Why the store could not be opened read-only (then nothing else was checked).
    open_error: Option<String>,
    report: Option<CheckReport>,
}

/// Runs the check and prints it; exit status 0 when the store is sound, 1 otherwise.
pub fn run(dir: &Path, json: bool) -> ExitCode {
    let (report, open_error) = match open_read_only(dir) {
        Err(e) => (None, Some(e.to_string())),
        Ok((store, _)) => match store.check() {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e.to_string())),
        },
    };
    let ok = open_error.is_none() && report.as_ref().is_some_and(CheckReport::is_ok);
    if json {
        let out = CheckOutput {
            dir,
            ok,
            open_error,
            report,
        };
        match serde_json::to_string_pretty(&out) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("keel check: cannot encode the report: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else if let Some(e) = &open_error {
        println!("{e}");
        println!("{}: cannot be checked (1 problem)", dir.display());
    } else if let Some(r) = &report {
        for p in &r.problems {
            println!("{p}");
        }
        for w in &r.warnings {
            println!("warning: {w}");
        }
        let rows: u64 = r.tables.iter().map(|t| t.rows).sum();
        let table_pages: u64 = r
            .tables
            .iter()
            .map(|t| t.leaves + t.inners + t.overflow_pages)
            .sum();
        let verdict = if r.is_ok() {
            "OK".to_string()
        } else {
            format!("{} problem(s)", r.problems.len())
        };
        let area = r.doublewrite.as_ref().map_or(String::new(), |d| {
            format!(
                "; doublewrite area: {} of {} slots valid, {} valid images",
                d.slots_valid, d.slots_scanned, d.images_valid
            )
        });
        println!(
            "{}: {verdict}: {} pages (meta 1, catalog {}, tables {table_pages}, free-list trunks {}, free {}); {} table(s), {rows} rows{area}",
            dir.display(),
            r.page_count,
            r.catalog_pages,
            r.trunk_pages,
            r.free_pages,
            r.tables.len()
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
