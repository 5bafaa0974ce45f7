//! `keel dump log DIR`: the redo log decoded, in the spirit of `pg_waldump`: the header, the
//! checkpoint slot recovery would use, every complete group from the scan start with its
//! records, and where and why the scan ends. Read straight from the files (the store is not
//! opened), with the same scan recovery runs.

use keel_redo_log::inspect::{decode_header, scan_images, HEADER_BYTES, HEADER_FILE};
use keel_redo_log::Record;
use serde_json::{json, Value};
use std::path::Path;
use std::process::ExitCode;

fn record_json(r: &Record) -> Value {
    let preview = |b: &[u8]| -> String {
        let cut = b.len().min(16);
        let hex: String = b[..cut].iter().map(|x| format!("{x:02x}")).collect();
        if b.len() > cut {
            format!("{hex}…")
        } else {
            hex
        }
    };
    match r {
        Record::PageInit { page_id, page_type } => {
            json!({"op": "init", "page": page_id.0, "page_type": page_type.0})
        }
        Record::PageWrite {
            page_id,
            offset,
            bytes,
        } => {
            json!({"op": "write", "page": page_id.0, "offset": offset, "len": bytes.len(), "bytes": preview(bytes)})
        }
        Record::PageMove {
            page_id,
            src,
            dst,
            len,
        } => json!({"op": "move", "page": page_id.0, "src": src, "dst": dst, "len": len}),
        Record::PageImage { page_id, image } => {
            json!({"op": "image", "page": page_id.0, "len": image.len()})
        }
        Record::PageFree { page_id } => json!({"op": "free", "page": page_id.0}),
        Record::PageCopy { page_id, from } => {
            json!({"op": "copy", "page": page_id.0, "from": from.0})
        }
        Record::Logical { kind, bytes } => {
            json!({"op": "logical", "kind": kind, "len": bytes.len(), "bytes": preview(bytes)})
        }
        #[allow(unreachable_patterns)]
        other => json!({"op": format!("{other:?}")}),
    }
}

/// Decodes and prints the log of the store in `dir`; groups ending at or before `from` are
/// left out, at most `limit` groups are printed. Exit status 0 when the header decodes and the
/// scan runs (a torn tail is normal), 1 otherwise.
pub fn log(dir: &Path, from: u64, limit: usize, json_out: bool) -> ExitCode {
    let log_dir = dir.join(keel::LOG_DIR);
    let header_path = log_dir.join(HEADER_FILE);
    let fail = |what: String| {
        eprintln!("keel dump log: {what}");
        ExitCode::FAILURE
    };
    let header = match crate::log_files::read_header_bytes(&header_path) {
        Ok(b) if b.len() >= HEADER_BYTES => b,
        Ok(b) => {
            return fail(format!(
                "{}: {} bytes, expected {HEADER_BYTES}",
                header_path.display(),
                b.len()
            ))
        }
        Err(e) => return fail(format!("{}: {e}", header_path.display())),
    };
    let (st, slot) = match decode_header(&header_path, &header[..HEADER_BYTES]) {
        Ok(x) => x,
        Err(e) => return fail(e.to_string()),
    };
    let block = st.block_size as usize;
    if block < 64 || st.file_size < block as u64 {
        return fail(format!(
            "{}: block size {block} and file size {} make no log",
            header_path.display(),
            st.file_size
        ));
    }
    let geo = st.geometry();
    let files = match crate::log_files::read(&log_dir, &st) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let refs = crate::log_files::indexed(&files);
    let summary = match scan_images(geo, &refs, slot.scan_start, from, slot.incarnation) {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    let shown: Vec<Value> = summary
        .groups
        .iter()
        .take(limit)
        .map(|g| {
            json!({
                "start_lsn": g.start_lsn.0,
                "end_lsn": g.end_lsn.0,
                "records": g.records.iter().map(record_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    let out = json!({
        "header": {
            "version": st.version,
            "block_size": st.block_size,
            "preallocated": st.preallocated,
            "files": st.files,
            "file_size": st.file_size,
        },
        "checkpoint": {
            "seq": slot.seq,
            "checkpoint_lsn": slot.checkpoint_lsn,
            "scan_start": slot.scan_start,
            "incarnation": slot.incarnation,
        },
        "groups_after_from": summary.groups.len(),
        "groups": shown,
        "end_lsn": summary.end,
        "discarded_bytes": summary.discarded_bytes,
        "stop": summary.stop,
    });
    if json_out {
        match serde_json::to_string_pretty(&out) {
            Ok(s) => println!("{s}"),
            Err(e) => return fail(format!("cannot encode: {e}")),
        }
        return ExitCode::SUCCESS;
    }
    println!(
        "log {}: format {}, {}-byte blocks, {} files of {} bytes",
        log_dir.display(),
        st.version,
        st.block_size,
        if st.preallocated {
            format!("{} preallocated", st.files)
        } else {
            "growing".to_string()
        },
        st.file_size
    );
    println!(
        "checkpoint: slot seq {}, checkpoint LSN {}, scan from LSN {}, incarnation {}",
        slot.seq, slot.checkpoint_lsn, slot.scan_start, slot.incarnation
    );
    for g in &shown {
        let records = g["records"].as_array().map_or(0, Vec::len);
        println!(
            "group LSN {}..{}: {records} records",
            g["start_lsn"], g["end_lsn"]
        );
        if let Some(rs) = g["records"].as_array() {
            for r in rs {
                println!("  {r}");
            }
        }
    }
    if summary.groups.len() > limit {
        println!("... {} more groups (--limit)", summary.groups.len() - limit);
    }
    println!(
        "end: LSN {} ({} bytes of incomplete groups discarded): {}",
        summary.end, summary.discarded_bytes, summary.stop
    );
    ExitCode::SUCCESS
}
