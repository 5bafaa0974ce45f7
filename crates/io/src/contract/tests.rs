//! Each rule of the pre-I/O contract, first on [`Contract`] itself, then through the [`File`]
//! trait of every backend (OsFs with pwrite and, where a ring can be set up, io_uring; SimFs) with
//! the same limits: the same request gets the same error, names the file and offset, and has no
//! effect (nothing written, nothing counted).

use super::*;
use crate::os::{io_uring_status, OsFile};
use crate::sim::{SimConfig, SimFs, XFS_LIKE_ATOMIC};
use crate::{AlignedBuf, Backend, File, FileClass, FileSystem, OpenOptions, OsFs};
use std::path::PathBuf;
use std::sync::Arc;

const ALIGN: u32 = 4096;

fn direct_contract() -> Contract {
    Contract {
        direct: true,
        align: DirectIoAlignment {
            memory: ALIGN,
            offset: ALIGN,
        },
        atomic: XFS_LIKE_ATOMIC,
    }
}

fn buffered_contract() -> Contract {
    Contract {
        direct: false,
        align: DirectIoAlignment::default(),
        atomic: AtomicWriteLimits::NONE,
    }
}

fn p() -> PathBuf {
    PathBuf::from("/some/file")
}

/// The offset an error names (every contract error names one, or none for AtomicUnsupported).
fn named(e: &IoError) -> (PathBuf, Option<u64>) {
    match e {
        IoError::OutOfRange { path, offset, .. }
        | IoError::Misaligned { path, offset, .. }
        | IoError::AtomicRejected { path, offset, .. } => (path.clone(), Some(*offset)),
        IoError::AtomicUnsupported { path, .. } => (path.clone(), None),
        other => panic!("not a contract error: {other:?}"),
    }
}

#[test]
fn rule_1_range_end_may_reach_but_not_pass_i64_max() {
    let path = p();
    assert_eq!(end_of(&path, 0, 0).unwrap(), 0);
    assert_eq!(end_of(&path, MAX_FILE_END, 0).unwrap(), MAX_FILE_END);
    assert_eq!(
        end_of(&path, MAX_FILE_END - 4096, 4096).unwrap(),
        MAX_FILE_END
    );
    for (offset, len) in [
        (MAX_FILE_END, 1),
        (MAX_FILE_END - 4095, 4096),
        (MAX_FILE_END + 1, 0),
        (u64::MAX, 1),
        (u64::MAX - 10, 4096),
        (1, u64::MAX),
    ] {
        match end_of(&path, offset, len) {
            Err(IoError::OutOfRange {
                path: got,
                offset: o,
                len: l,
            }) => assert_eq!((got, o, l), (p(), offset, len)),
            other => panic!("{offset} + {len}: {other:?}"),
        }
    }
    let e = end_of(&path, u64::MAX, 1).unwrap_err().to_string();
    assert!(
        e.contains("/some/file") && e.contains(&u64::MAX.to_string()),
        "{e}"
    );
}

#[test]
fn rule_1_range_comes_first_for_every_kind_of_request() {
    let buf = AlignedBuf::page(4096);
    for c in [direct_contract(), buffered_contract()] {
        // Aligned enough to pass rule 4 on its own: only the range is wrong.
        let off = u64::MAX - 4095;
        for e in [
            c.check_read(&p(), &buf, off).unwrap_err(),
            c.check_write(&p(), &buf, off).unwrap_err(),
            // A buffered file refuses atomic writes, but the range is reported first.
            c.check_atomic(&p(), &buf, off).unwrap_err(),
            c.check_io(&p(), MAX_FILE_END, 1, 0).unwrap_err(),
        ] {
            let named_request = |offset: u64, len: u64| {
                (offset, len) == (off, 4096) || (offset, len) == (MAX_FILE_END, 1)
            };
            assert!(
                matches!(e, IoError::OutOfRange { offset, len, .. } if named_request(offset, len)),
                "{e:?}"
            );
        }
    }
}

#[test]
fn rule_4_alignment_of_offset_length_and_buffer_on_direct_files_only() {
    let c = direct_contract();
    let buf = AlignedBuf::page(3 * 4096);
    assert!(c.check_write(&p(), &buf[..4096], 8192).is_ok());
    assert!(
        c.check_write(&p(), &buf[..0], 0).is_ok(),
        "empty is aligned"
    );
    let cases: [(&str, u64, &[u8]); 3] = [
        ("offset", 512, &buf[..4096]),
        ("length", 0, &buf[..4000]),
        ("buffer", 0, &buf[512..4608]),
    ];
    for (what, offset, b) in cases {
        for e in [
            c.check_read(&p(), b, offset).unwrap_err(),
            c.check_write(&p(), b, offset).unwrap_err(),
        ] {
            match e {
                IoError::Misaligned {
                    path,
                    offset: o,
                    len,
                    addr,
                    align,
                } => {
                    assert_eq!(
                        (path, o, len, addr),
                        (p(), offset, b.len(), b.as_ptr() as usize)
                    );
                    assert_eq!(align, 4096, "{what}");
                }
                other => panic!("{what}: {other:?}"),
            }
        }
        assert!(buffered_contract().check_write(&p(), b, offset).is_ok());
        assert!(buffered_contract().check_read(&p(), b, offset).is_ok());
    }
}

#[test]
fn rule_4_reports_the_alignment_that_was_broken() {
    // Memory and offset alignment differ (as statx may report): each is checked on its own.
    let c = Contract {
        direct: true,
        align: DirectIoAlignment {
            memory: 512,
            offset: 4096,
        },
        atomic: AtomicWriteLimits::NONE,
    };
    let buf = AlignedBuf::page(8192);
    assert!(c.check_write(&p(), &buf[512..512 + 4096], 4096).is_ok());
    let align_of = |e: IoError| match e {
        IoError::Misaligned { align, .. } => align,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        align_of(c.check_write(&p(), &buf[..4096], 512).unwrap_err()),
        4096
    );
    assert_eq!(
        align_of(c.check_write(&p(), &buf[..512], 0).unwrap_err()),
        4096
    );
    assert_eq!(
        align_of(c.check_write(&p(), &buf[1..4097], 0).unwrap_err()),
        512
    );
    // Both broken: the offset alignment is named.
    assert_eq!(
        align_of(c.check_write(&p(), &buf[1..513], 0).unwrap_err()),
        4096
    );
}

#[test]
fn rule_2_atomic_writes_need_a_direct_file_with_an_atomic_unit() {
    let buf = AlignedBuf::page(16384);
    let e = buffered_contract().check_atomic(&p(), &buf, 0).unwrap_err();
    assert!(
        matches!(&e, IoError::AtomicUnsupported { reason, .. } if reason.contains("direct")),
        "{e:?}"
    );
    let no_unit = Contract {
        atomic: AtomicWriteLimits::NONE,
        ..direct_contract()
    };
    let e = no_unit.check_atomic(&p(), &buf, 0).unwrap_err();
    assert!(
        matches!(&e, IoError::AtomicUnsupported { reason, .. } if reason.contains("unit")),
        "{e:?}"
    );
    assert_eq!(named(&e), (p(), None));
    // Atomic limits on a buffered file do not make it atomic-capable.
    let buffered_with_limits = Contract {
        direct: false,
        ..direct_contract()
    };
    assert!(matches!(
        buffered_with_limits.check_atomic(&p(), &buf, 0),
        Err(IoError::AtomicUnsupported { .. })
    ));
}

#[test]
fn rule_3_atomic_unit_power_of_two_in_range_naturally_aligned() {
    let c = direct_contract();
    let buf = AlignedBuf::page(4 << 20);
    assert!(c.check_atomic(&p(), &buf[..16384], 16384).is_ok());
    assert!(c.check_atomic(&p(), &buf[..4096], 4096).is_ok());
    assert!(c.check_atomic(&p(), &buf[..1 << 20], 1 << 20).is_ok());
    let cases: [(u64, usize, &str); 5] = [
        (4096, 16384, "naturally aligned"),
        (0, 12288, "power of two"),
        (0, 2048, "range"),
        (0, 2 << 20, "range"),
        (0, 0, "power of two"),
    ];
    for (offset, len, why) in cases {
        match c.check_atomic(&p(), &buf[..len], offset) {
            Err(IoError::AtomicRejected {
                path,
                offset: o,
                len: l,
                reason,
            }) => {
                assert_eq!((path, o, l), (p(), offset, len));
                assert!(reason.contains(why), "{offset}+{len}: {reason}");
            }
            other => panic!("{offset}+{len}: {other:?}"),
        }
        assert_eq!(
            atomic_unit(&XFS_LIKE_ATOMIC, offset, len).unwrap_err(),
            XFS_LIKE_ATOMIC.check(offset, len).unwrap_err(),
            "AtomicWriteLimits::check is the same rule"
        );
    }
    assert!(atomic_unit(&AtomicWriteLimits::NONE, 0, 4096).is_err());
}

#[test]
fn rule_4_applies_to_atomic_writes_after_the_unit_rules() {
    // Unit rules pass (4 KiB at 0) but the buffer is not aligned: Misaligned.
    let c = direct_contract();
    let buf = AlignedBuf::page(8192);
    assert!(matches!(
        c.check_atomic(&p(), &buf[512..4608], 0),
        Err(IoError::Misaligned { align: 4096, .. })
    ));
}

#[test]
fn a_batch_is_refused_whole_naming_its_first_bad_request() {
    let c = direct_contract();
    let buf = AlignedBuf::page(3 * 4096);
    let writes = [
        WriteOp {
            offset: 0,
            buf: &buf[..4096],
        },
        WriteOp {
            offset: 8192 + 100,
            buf: &buf[4096..8192],
        },
        WriteOp {
            offset: u64::MAX - 4095,
            buf: &buf[8192..],
        },
    ];
    assert_eq!(
        named(&c.check_writes(&p(), &writes).unwrap_err()).1,
        Some(8292)
    );
    assert_eq!(
        named(&c.check_writes(&p(), &writes[2..]).unwrap_err()).1,
        Some(u64::MAX - 4095)
    );
    assert!(c.check_writes(&p(), &writes[..1]).is_ok());
    assert!(c.check_writes(&p(), &[]).is_ok());
    let atomic = [
        WriteOp {
            offset: 0,
            buf: &buf[..4096],
        },
        WriteOp {
            offset: 4096,
            buf: &buf[..8192],
        },
    ];
    assert!(matches!(
        c.check_atomic_writes(&p(), &atomic).unwrap_err(),
        IoError::AtomicRejected {
            offset: 4096,
            len: 8192,
            ..
        }
    ));
    let (mut a, mut b) = (AlignedBuf::page(4096), AlignedBuf::page(4096));
    let reads = [
        ReadOp {
            offset: 4096,
            buf: &mut a[..],
        },
        ReadOp {
            offset: MAX_FILE_END,
            buf: &mut b[..],
        },
    ];
    assert!(matches!(
        c.check_reads(&p(), &reads).unwrap_err(),
        IoError::OutOfRange {
            offset: MAX_FILE_END,
            len: 4096,
            ..
        }
    ));
}

/// One backend: its name, its file system (for the counters) and a file opened on it.
type OneBackend = (String, Arc<dyn FileSystem>, Arc<dyn File>);

/// One request made through a file: the offset its error must name (`None`: the error names no
/// offset) and the result.
type Request<'a> = &'a dyn Fn(&dyn File) -> (Option<u64>, crate::Result<()>);

/// A file of every backend with the same contract as [`direct_contract`] (4 KiB alignment,
/// XFS-like atomic limits) or [`buffered_contract`], each holding 8 KiB of 0x11 bytes.
fn backends(dir: &Path, direct: bool) -> Vec<OneBackend> {
    let class = FileClass::Data;
    let mut out: Vec<OneBackend> = Vec::new();
    let mut os = vec![Backend::Pwrite];
    match io_uring_status() {
        Ok(()) => os.push(Backend::IoUring),
        Err(why) => println!("SKIPPED: io_uring backend: {why}"),
    }
    for backend in os {
        let fs = OsFs::new(backend);
        let path = dir.join(format!("contract-{backend}"));
        // Opened buffered whatever the contract says: the checks are what is tested, and a
        // buffered descriptor accepts the requests the contract lets through on any file system.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let c = if direct {
            direct_contract()
        } else {
            buffered_contract()
        };
        let f = OsFile::faked(
            &fs,
            file,
            path,
            OpenOptions::new(class).direct(direct),
            c.align,
            c.atomic,
        );
        out.push((backend.to_string(), Arc::new(fs), Arc::new(f)));
    }
    let sim = SimFs::new(
        SimConfig::seeded(1)
            .direct_alignment(ALIGN)
            .atomic(XFS_LIKE_ATOMIC),
    );
    let f = sim
        .open(
            Path::new("/contract-sim"),
            &OpenOptions::new(class).create(true).direct(direct),
        )
        .unwrap();
    out.push(("simfs".into(), Arc::new(sim), f));
    for (_, _, f) in &out {
        f.write_all_at(&AlignedBuf::from_slice(&[0x11; 8192]), 0)
            .unwrap();
    }
    out
}

/// The request is refused by every backend with the error `expect` accepts, naming
/// the file and the request's offset, with no effect on the file or the counters.
fn refused_everywhere(direct: bool, expect: fn(&IoError) -> bool) -> impl Fn(&str, Request<'_>) {
    move |what, request| {
        let dir = tempfile::tempdir().unwrap();
        for (name, fs, f) in backends(dir.path(), direct) {
            let before = fs.counters().snapshot();
            let (offset, result) = request(f.as_ref());
            let e = result.expect_err(&format!("{name}: {what} was accepted"));
            assert!(expect(&e), "{name}: {what}: {e:?}");
            assert_eq!(
                named(&e),
                (f.path().to_path_buf(), offset),
                "{name}: {what}: {e}"
            );
            assert_eq!(fs.counters().snapshot(), before, "{name}: {what}: counted");
            assert_eq!(f.len().unwrap(), 8192, "{name}: {what}: length changed");
            let mut back = AlignedBuf::page(8192);
            f.read_exact_at(&mut back, 0).unwrap();
            assert!(
                back.iter().all(|&b| b == 0x11),
                "{name}: {what}: bytes changed"
            );
        }
    }
}

#[test]
fn every_backend_refuses_out_of_range_requests_before_io() {
    for direct in [false, true] {
        let check = refused_everywhere(direct, |e| matches!(e, IoError::OutOfRange { .. }));
        let page = AlignedBuf::page(4096);
        let off = u64::MAX - 4095;
        check("write past the end", &|f| {
            (Some(off), f.write_all_at(&page, off))
        });
        check("write ending at i64::MAX + 1", &|f| {
            (
                Some(MAX_FILE_END - 4095),
                f.write_all_at(&page, MAX_FILE_END - 4095),
            )
        });
        check("read past the end", &|f| {
            let mut b = AlignedBuf::page(4096);
            (Some(off), f.read_exact_at(&mut b, off))
        });
        check("atomic write past the end", &|f| {
            (Some(off), f.write_atomic(&page, off))
        });
        check("second write of a batch", &|f| {
            let w = [
                WriteOp {
                    offset: 8192,
                    buf: &page,
                },
                WriteOp {
                    offset: off,
                    buf: &page,
                },
            ];
            (Some(off), f.write_batch(&w))
        });
        check("allocate past the end", &|f| {
            (Some(MAX_FILE_END), f.allocate(MAX_FILE_END, 1))
        });
        check("set_len past the end", &|f| {
            (Some(0), f.set_len(MAX_FILE_END + 1))
        });
    }
}

#[test]
fn every_backend_refuses_misaligned_direct_requests_before_io() {
    let check = refused_everywhere(true, |e| {
        matches!(e, IoError::Misaligned { align: 4096, .. })
    });
    let buf = AlignedBuf::page(3 * 4096);
    check("offset", &|f| {
        (Some(512), f.write_all_at(&buf[..4096], 512))
    });
    check("length", &|f| (Some(0), f.write_all_at(&buf[..4000], 0)));
    check("buffer", &|f| (Some(0), f.write_all_at(&buf[512..4608], 0)));
    check("read offset", &|f| {
        let mut b = AlignedBuf::page(4096);
        (Some(100), f.read_exact_at(&mut b, 100))
    });
    check("batch", &|f| {
        let w = [
            WriteOp {
                offset: 8192,
                buf: &buf[..4096],
            },
            WriteOp {
                offset: 12288 + 512,
                buf: &buf[4096..8192],
            },
        ];
        (Some(12288 + 512), f.write_batch(&w))
    });
    check("atomic write, buffer", &|f| {
        (Some(0), f.write_atomic(&buf[512..4608], 0))
    });
}

#[test]
fn every_backend_refuses_atomic_writes_breaking_the_unit_rules_before_io() {
    let check = refused_everywhere(true, |e| matches!(e, IoError::AtomicRejected { .. }));
    let buf = AlignedBuf::page(2 << 20);
    check("not naturally aligned", &|f| {
        (Some(4096), f.write_atomic(&buf[..16384], 4096))
    });
    check("not a power of two", &|f| {
        (Some(0), f.write_atomic(&buf[..12288], 0))
    });
    check("above unit_max", &|f| {
        (Some(0), f.write_atomic(&buf[..2 << 20], 0))
    });
    check("second of a batch", &|f| {
        let w = [
            WriteOp {
                offset: 0,
                buf: &buf[..4096],
            },
            WriteOp {
                offset: 4096,
                buf: &buf[..8192],
            },
        ];
        (Some(4096), f.write_atomic_batch(&w))
    });
    let unsupported = refused_everywhere(false, |e| matches!(e, IoError::AtomicUnsupported { .. }));
    unsupported("buffered file", &|f| {
        (None, f.write_atomic(&buf[..4096], 0))
    });
}

#[test]
fn every_backend_lets_the_contract_s_good_requests_through() {
    for direct in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let page = AlignedBuf::from_slice(&[0x22; 4096]);
        for (name, _, f) in backends(dir.path(), direct) {
            f.write_all_at(&page, 4096).unwrap();
            let mut b = AlignedBuf::page(4096);
            f.read_exact_at(&mut b, 4096).unwrap();
            assert_eq!(b[..], page[..], "{name}");
            // An accepted atomic write reaches the device only on SimFs: the OS files here are
            // buffered underneath, and the kernel refuses RWF_ATOMIC on those.
            if direct && name == "simfs" {
                f.write_atomic(&page, 8192).unwrap();
                assert_eq!(f.len().unwrap(), 12288, "{name}");
            }
        }
    }
}
