//! Creates a store directory, probes its file system and disk, and prints what Keel found:
//! file system, direct-I/O alignment, logical/physical block size, atomic-write limits and whether
//! atomic writes of 4 and 16 KiB are hardware-backed, a software fallback, or unsupported, and
//! io_uring availability with the backend chosen.
//!
//! ```sh
//! cargo run --release --example probe -- [DIR] [--json]     # DIR defaults to ./keel-data
//! ```

use keel_io::os::{io_uring_status, probe_device, DeviceInfo};
use keel_io::{AtomicSupport, Capabilities, FileSystem, OsFs};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Serialize)]
struct Report<'a> {
    capabilities: &'a Capabilities,
    device: &'a DeviceInfo,
    atomic_4k: AtomicSupport,
    atomic_16k: AtomicSupport,
    io_uring_error: Option<String>,
    backend: String,
}

fn support(s: &AtomicSupport) -> String {
    match s {
        AtomicSupport::Hardware => "hardware-backed (unit_max_opt covers it)".into(),
        AtomicSupport::SoftwareFallback => {
            "software fallback (file system copy-on-write: correct but slow)".into()
        }
        AtomicSupport::Unsupported { reason } => format!("unsupported: {reason}"),
    }
}

fn bytes(n: u32) -> String {
    match n {
        0 => "0".into(),
        n if n >= 1 << 20 && n.is_multiple_of(1 << 20) => format!("{} MiB ({n})", n >> 20),
        n if n >= 1 << 10 && n.is_multiple_of(1 << 10) => format!("{} KiB ({n})", n >> 10),
        n => format!("{n} B"),
    }
}

fn main() -> ExitCode {
    let mut json = false;
    let mut dir = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
            "-h" | "--help" => {
                println!("usage: probe [DIR] [--json]   (DIR defaults to ./keel-data)");
                return ExitCode::SUCCESS;
            }
            _ if dir.is_none() => dir = Some(PathBuf::from(arg)),
            _ => {
                eprintln!("probe: unexpected argument {arg:?} (usage: probe [DIR] [--json])");
                return ExitCode::from(2);
            }
        }
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from("keel-data"));
    let fs = OsFs::auto();
    let result = fs
        .create_dir_all(&dir)
        .and_then(|()| fs.capabilities(&dir))
        .and_then(|caps| probe_device(&dir).map(|dev| (caps, dev)));
    let (caps, device) = match result {
        Ok(x) => x,
        Err(e) => {
            eprintln!("probe: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = Report {
        capabilities: &caps,
        device: &device,
        atomic_4k: caps.atomic_support(4096),
        atomic_16k: caps.atomic_support(16384),
        io_uring_error: io_uring_status().err(),
        backend: fs.backend().to_string(),
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("probe: {e}");
                return ExitCode::FAILURE;
            }
        }
        return ExitCode::SUCCESS;
    }
    let shown = std::fs::canonicalize(&dir).unwrap_or(dir.clone());
    println!("Keel storage probe: {}", shown.display());
    println!("  file system            {}", caps.filesystem);
    match &device.disk {
        Some(disk) => println!(
            "  block device           {disk} ({}:{})",
            device.major, device.minor
        ),
        None => println!(
            "  block device           none found for {}:{} (sizes below are fallbacks)",
            device.major, device.minor
        ),
    }
    println!(
        "  logical block size     {}",
        bytes(caps.logical_block_size)
    );
    println!(
        "  physical block size    {}",
        bytes(caps.physical_block_size)
    );
    match caps.direct_io {
        Some(d) => println!(
            "  direct I/O (O_DIRECT)  buffer alignment {}, offset/length alignment {}",
            bytes(d.memory),
            bytes(d.offset)
        ),
        None => println!("  direct I/O (O_DIRECT)  not supported (or not reported by statx)"),
    }
    let a = caps.atomic;
    if a.supported() {
        println!(
            "  atomic writes          unit_min {}, unit_max {}, unit_max_opt {}, segments_max {}",
            bytes(a.unit_min),
            bytes(a.unit_max),
            bytes(a.unit_max_opt),
            a.segments_max
        );
    } else {
        println!("  atomic writes          none (statx STATX_WRITE_ATOMIC reports no unit)");
    }
    println!("    4 KiB atomic write   {}", support(&report.atomic_4k));
    println!("    16 KiB atomic write  {}", support(&report.atomic_16k));
    match &report.io_uring_error {
        None => println!("  io_uring               available"),
        Some(why) => println!("  io_uring               unavailable: {why}"),
    }
    println!("  I/O backend chosen     {}", report.backend);
    ExitCode::SUCCESS
}
