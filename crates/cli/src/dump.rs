//! `keel dump page DIR N`: one page of the data file decoded, damaged or not, read straight
//! from the file (the store is not opened, so this works on a store that cannot be opened).

use keel::inspect::{decode_meta_page, decode_trunk_page, meta_free_ids};
use keel_btree::{dump_node, CellValue};
use keel_page::{verify, PageHeader, PageId, PageState, PageType, PAGE_HEADER_SIZE};
use serde_json::{json, Value};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::ExitCode;

/// Bytes of a value shown in text output before it is cut.
const SHOWN: usize = 32;

/// `bytes` as hex, with the printable text beside it when there is any.
fn show(bytes: &[u8]) -> String {
    let cut = bytes.len().min(SHOWN);
    let hex: String = bytes[..cut].iter().map(|b| format!("{b:02x}")).collect();
    let more = if bytes.len() > cut { "…" } else { "" };
    let text: String = bytes[..cut]
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect();
    format!("{hex}{more} \"{text}{more}\"")
}

fn type_name(t: PageType) -> &'static str {
    match t {
        PageType::UNWRITTEN => "unwritten",
        PageType::FREE => "free-list trunk",
        PageType::META => "meta",
        PageType::BTREE_LEAF => "B-tree leaf",
        PageType::BTREE_INNER => "B-tree inner node",
        PageType::OVERFLOW => "overflow",
        PageType::RAW => "raw",
        _ => "unknown",
    }
}

/// What the page's payload says, by page type (as JSON; the text form is printed from it).
fn body(page: &[u8], id: PageId, ty: PageType, file: &Path) -> Value {
    match ty {
        PageType::META => match decode_meta_page(page, file) {
            Ok(m) => json!({
                "meta": m,
                "free_ids": meta_free_ids(page, &m).iter().map(|p| p.0).collect::<Vec<_>>(),
            }),
            Err(e) => json!({ "error": e.to_string() }),
        },
        PageType::FREE => match decode_trunk_page(page, id, file) {
            Ok((next, ids)) => json!({
                "trunk": { "next": next.0, "ids": ids.iter().map(|p| p.0).collect::<Vec<_>>() }
            }),
            Err(e) => json!({ "error": e.to_string() }),
        },
        PageType::BTREE_LEAF | PageType::BTREE_INNER => match dump_node(page, id) {
            Ok(n) => json!({ "node": n }),
            Err(e) => json!({ "error": e.to_string() }),
        },
        PageType::OVERFLOW => {
            let o = PAGE_HEADER_SIZE;
            let mut next = [0u8; 8];
            next.copy_from_slice(&page[o..o + 8]);
            let mut used = [0u8; 4];
            used.copy_from_slice(&page[o + 8..o + 12]);
            json!({ "overflow": {
                "next": u64::from_le_bytes(next),
                "bytes_used": u32::from_le_bytes(used),
            }})
        }
        _ => Value::Null,
    }
}

/// Reads of a page that fails verification before `dump page` calls it damaged.
const REREADS: u32 = 5;

/// Reads page `n` of the data file in `dir` and prints it decoded. Exit status 0 when the
/// page verifies (or was never written), 1 when it is damaged or cannot be read.
pub fn page(dir: &Path, n: u64, json_out: bool) -> ExitCode {
    let identity = match keel::read_identity(dir) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("keel dump page: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ps = identity.page_size;
    let file = dir.join(keel::layout::DATA_FILE_NAME);
    let Some(offset) = n.checked_mul(ps as u64) else {
        eprintln!("keel dump page: page {n} lies beyond any file");
        return ExitCode::FAILURE;
    };
    let mut page = vec![0u8; ps];
    let f = match keel_io::os::open_without_waiting_read(&file) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("keel dump page: {}: cannot open: {e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    let id = PageId(n);
    // A page that fails verification is read again, up to REREADS times: beside a live
    // writer a buffered read can catch the page mid-write (a sound page was called DAMAGED: a
    // tester, 2 reads in 7 million), as `keel backup` reads again. Damage stays damaged.
    let mut reads = 0;
    let state = loop {
        if let Err(e) = f.read_exact_at(&mut page, offset) {
            let len = f.metadata().map_or(0, |m| m.len());
            eprintln!(
                "keel dump page: {}: cannot read page {n} ({ps} bytes at offset {offset}; the \
                 file holds {len} bytes, {} pages): {e}",
                file.display(),
                len / ps as u64
            );
            return ExitCode::FAILURE;
        }
        reads += 1;
        let s = verify(&page, id, identity.checksum, &file);
        if s.is_ok() || reads >= REREADS {
            break s;
        }
    };
    let verdict = match &state {
        Ok(PageState::Valid(_)) => "valid".to_string(),
        Ok(PageState::Unwritten) => "unwritten (all zeros)".to_string(),
        Err(e) => format!("DAMAGED: {e}"),
    };
    let header = PageHeader::read(&page);
    let ty = header.map_or(PageType::UNWRITTEN, |h| h.page_type);
    let decoded = body(&page, id, ty, &file);
    let out = json!({
        "file": file,
        "page": n,
        "offset": offset,
        "page_size": ps,
        "verify": verdict,
        "header": header.map(|h| json!({
            "page_id": h.page_id.0,
            "lsn": h.lsn.0,
            "type": h.page_type.0,
            "type_name": type_name(h.page_type),
            "checksum": h.checksum,
            "algorithm_tag": h.algorithm_tag,
            // Page 0's file checkpoint (flags bit 0 and bytes 24..32), what an open compares
            // with the log's checkpoint: shown so that a refusal naming it can be looked at.
            "file_checkpoint": keel_page::file_checkpoint(&page).map(|l| l.0),
        })),
        "body": decoded,
    });
    if json_out {
        match serde_json::to_string_pretty(&out) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("keel dump page: cannot encode: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print_text(&out, &page, id, ty, &file);
    }
    if state.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_text(out: &Value, page: &[u8], id: PageId, ty: PageType, file: &Path) {
    println!(
        "page {} of {} ({} bytes at offset {})",
        out["page"],
        file.display(),
        out["page_size"],
        out["offset"]
    );
    println!("  verify: {}", out["verify"].as_str().unwrap_or("?"));
    if let Some(h) = PageHeader::read(page) {
        println!(
            "  header: type {} ({}), page id {}, LSN {}, checksum {:#010x} (algorithm tag {})",
            type_name(h.page_type),
            h.page_type.0,
            h.page_id.0,
            h.lsn.0,
            h.checksum,
            h.algorithm_tag
        );
        if let Some(c) = keel_page::file_checkpoint(page) {
            println!("  file checkpoint: LSN {}", c.0);
        }
    }
    match ty {
        PageType::BTREE_LEAF | PageType::BTREE_INNER => match dump_node(page, id) {
            Ok(n) => {
                println!(
                    "  node: {}, level {}, {} cells, hint prefix {} bytes",
                    if n.leaf { "leaf" } else { "inner" },
                    n.level,
                    n.cells.len(),
                    n.hint_prefix
                );
                for (i, c) in n.cells.iter().enumerate() {
                    if let Some(child) = n.children.get(i) {
                        println!("    child {i}: page {}", child.0);
                    }
                    match &c.value {
                        None => println!("    [{i}] separator {}", show(&c.key)),
                        Some(CellValue::Inline(v)) => println!(
                            "    [{i}] key {} → {} bytes {}",
                            show(&c.key),
                            v.len(),
                            show(v)
                        ),
                        Some(CellValue::Overflow { first, len }) => println!(
                            "    [{i}] key {} → {len} bytes in overflow pages from page {}",
                            show(&c.key),
                            first.0
                        ),
                    }
                }
                if let Some(last) = n.children.last() {
                    println!("    child {}: page {}", n.children.len() - 1, last.0);
                }
            }
            Err(e) => println!("  node: cannot be decoded: {e}"),
        },
        _ => {
            if !out["body"].is_null() {
                println!("  {}", out["body"]);
            }
        }
    }
}
