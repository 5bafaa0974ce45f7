//! Configuration: which torn-page protection to use, and what `Auto` resolves to.

use keel_io::{AtomicSupport, Capabilities};
use keel_page::{Checksum, PageSize};
use serde::{Deserialize, Serialize};
use std::fmt;

/// InnoDB's `innodb_doublewrite_pages` default (MySQL 8.4): batches must be big — a default of 4
/// made MySQL 8.0 bulk loads 3–16× slower.
pub const DEFAULT_BATCH_PAGES: usize = 128;

/// How pages are protected from torn writes (selectable at open).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TornPageProtection {
    /// InnoDB's doublewrite: a batch of page images is written sequentially to the doublewrite
    /// area and synced, then written in place and the data file synced.
    Doublewrite {
        /// Pages per batch (per doublewrite slot). Default [`DEFAULT_BATCH_PAGES`].
        batch_pages: usize,
    },
    /// Every page is one `RWF_ATOMIC` O_DIRECT write, naturally aligned. Opening fails when the
    /// probe says pages of this size cannot be atomic here.
    Atomic,
    /// `Atomic` when atomic writes of the page size are hardware-backed, otherwise `Doublewrite`
    /// with the default batch.
    Auto,
    /// PostgreSQL's `full_page_writes`: the buffer pool logs a full page image with the first
    /// change of a page after a checkpoint; pages are written in place.
    FullPageWrites,
    /// No protection (for measurement): pages are written in place; a torn page is detected by
    /// its checksum when read and reported as corruption, never used silently.
    None,
}

impl Default for TornPageProtection {
    fn default() -> Self {
        TornPageProtection::Doublewrite {
            batch_pages: DEFAULT_BATCH_PAGES,
        }
    }
}

/// The protection actually in force after `Auto` has been resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResolvedMode {
    /// Doublewrite with this many pages per batch.
    Doublewrite {
        /// Pages per batch.
        batch_pages: usize,
    },
    /// `RWF_ATOMIC` writes.
    Atomic,
    /// Full page images in the redo log; pages in place.
    FullPageWrites,
    /// No protection.
    None,
}

impl fmt::Display for ResolvedMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolvedMode::Doublewrite { batch_pages } => {
                write!(f, "doublewrite (batch {batch_pages} pages)")
            }
            ResolvedMode::Atomic => f.write_str("atomic writes"),
            ResolvedMode::FullPageWrites => f.write_str("full page writes"),
            ResolvedMode::None => f.write_str("none"),
        }
    }
}

/// What the configured protection resolved to, and why (readable back with
/// [`crate::PageWriter::resolved`], logged with `tracing` at open).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedProtection {
    /// What was asked for.
    pub requested: TornPageProtection,
    /// The mode in force.
    pub mode: ResolvedMode,
    /// Why: for `Auto` what the atomic-write probe found; otherwise "configured".
    pub reason: String,
}

/// How the page writer is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageWriterConfig {
    /// The store's page size.
    pub page_size: PageSize,
    /// The checksum pages are sealed and verified with.
    pub checksum: Checksum,
    /// The torn-page protection.
    pub protection: TornPageProtection,
    /// MariaDB MDEV-19738 ("init on flush"): pages whose redo since the last checkpoint begins
    /// with a whole-page init skip the doublewrite (or the atomic write, or the full page image).
    /// Default true; off for the E2 comparison.
    pub init_on_flush_skip: bool,
    /// Open the data file and the doublewrite area with O_DIRECT where the file system can (else
    /// buffered, with the reason in [`crate::PageWriter::direct_io`]). `Atomic` always opens the
    /// data file with O_DIRECT (RWF_ATOMIC needs it). Default false here; the `keel` facade
    /// defaults it to true.
    pub direct_io: bool,
    /// The store the writer belongs to (the `keel` facade passes its log's salt; 0: none). The
    /// doublewrite area records it in its header, and an area recording another store is
    /// refused at recovery instead of restoring another store's pages
    /// (`FlushError::DoublewriteArea`).
    #[serde(default)]
    pub store: u32,
}

impl Default for PageWriterConfig {
    fn default() -> Self {
        PageWriterConfig {
            page_size: PageSize::default(),
            checksum: Checksum::default(),
            protection: TornPageProtection::default(),
            init_on_flush_skip: true,
            direct_io: false,
            store: 0,
        }
    }
}

impl PageWriterConfig {
    /// A default configuration with this page size and protection.
    pub fn new(page_size: PageSize, protection: TornPageProtection) -> PageWriterConfig {
        PageWriterConfig {
            page_size,
            protection,
            ..PageWriterConfig::default()
        }
    }
}

/// Resolves `requested` against what the probe found (`caps`, possibly absent when the probe
/// failed). `Atomic` with unsupported atomic writes is an error message (returned as `Err`).
pub(crate) fn resolve(
    requested: TornPageProtection,
    page_size: PageSize,
    caps: Option<&Capabilities>,
) -> Result<ResolvedProtection, String> {
    let support = |caps: Option<&Capabilities>| match caps {
        Some(c) => c.atomic_support(page_size.bytes()),
        None => AtomicSupport::Unsupported {
            reason: "the file system could not be probed".into(),
        },
    };
    let describe = |caps: Option<&Capabilities>| match caps {
        Some(c) => format!(
            "file system {}, atomic unit {}..={} bytes, hardware (unit_max_opt) {} bytes",
            c.filesystem, c.atomic.unit_min, c.atomic.unit_max, c.atomic.unit_max_opt
        ),
        None => "no probe".into(),
    };
    let configured = |mode| ResolvedProtection {
        requested,
        mode,
        reason: "configured".into(),
    };
    Ok(match requested {
        TornPageProtection::Doublewrite { batch_pages } => {
            configured(ResolvedMode::Doublewrite { batch_pages })
        }
        TornPageProtection::FullPageWrites => configured(ResolvedMode::FullPageWrites),
        TornPageProtection::None => configured(ResolvedMode::None),
        TornPageProtection::Atomic => match support(caps) {
            AtomicSupport::Unsupported { reason } => {
                return Err(format!("{reason} ({})", describe(caps)))
            }
            AtomicSupport::Hardware => ResolvedProtection {
                requested,
                mode: ResolvedMode::Atomic,
                reason: format!(
                    "configured; {page_size} atomic writes are hardware-backed ({})",
                    describe(caps)
                ),
            },
            AtomicSupport::SoftwareFallback => ResolvedProtection {
                requested,
                mode: ResolvedMode::Atomic,
                reason: format!(
                    "configured; {page_size} atomic writes use the file system's slow software \
                     fallback ({})",
                    describe(caps)
                ),
            },
        },
        TornPageProtection::Auto => {
            let dw = ResolvedMode::Doublewrite {
                batch_pages: DEFAULT_BATCH_PAGES,
            };
            match support(caps) {
                AtomicSupport::Hardware => ResolvedProtection {
                    requested,
                    mode: ResolvedMode::Atomic,
                    reason: format!(
                        "auto: {page_size} atomic writes are hardware-backed ({})",
                        describe(caps)
                    ),
                },
                AtomicSupport::SoftwareFallback => ResolvedProtection {
                    requested,
                    mode: dw,
                    reason: format!(
                        "auto: {page_size} atomic writes would use the file system's software \
                         fallback, slower than doublewrite ({})",
                        describe(caps)
                    ),
                },
                AtomicSupport::Unsupported { reason } => ResolvedProtection {
                    requested,
                    mode: dw,
                    reason: format!(
                        "auto: atomic writes of {page_size} pages unsupported: {reason} ({})",
                        describe(caps)
                    ),
                },
            }
        }
    })
}

/// Whether the data file and the doublewrite area are opened with O_DIRECT, and why (readable
/// back with [`crate::PageWriter::direct_io`], reported in the store's `effective()`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectIo {
    /// O_DIRECT is in force.
    pub in_force: bool,
    /// Why: the probe's alignment when on, or why it fell back to buffered I/O.
    pub reason: String,
}

/// Resolves the `direct_io` request against the probe: on only where the file system opens
/// O_DIRECT files and its alignment divides the page size (pages are page-aligned in memory and
/// in the file, so any such alignment is met); otherwise buffered, with the reason. Never an
/// error: buffered I/O is correct everywhere, only slower to measure honestly.
pub(crate) fn resolve_direct_io(
    requested: bool,
    page_size: PageSize,
    caps: Option<&Capabilities>,
) -> DirectIo {
    let buffered = |reason: String| DirectIo {
        in_force: false,
        reason,
    };
    if !requested {
        return buffered(
            "configured off (direct_io = false): the data file goes through the OS page cache"
                .into(),
        );
    }
    let Some(caps) = caps else {
        return buffered("fell back to buffered I/O: the file system could not be probed".into());
    };
    match caps.direct_io {
        None => buffered(format!(
            "fell back to buffered I/O: the {} file system does not open files with O_DIRECT",
            caps.filesystem
        )),
        Some(a)
            if a.offset == 0
                || a.memory == 0
                || !page_size.bytes().is_multiple_of(a.offset as usize)
                || !page_size.bytes().is_multiple_of(a.memory as usize) =>
        {
            buffered(format!(
                "fell back to buffered I/O: the {} file system needs {}-byte offsets and \
                 {}-byte buffers for O_DIRECT, which {page_size} pages do not meet",
                caps.filesystem, a.offset, a.memory
            ))
        }
        Some(a) => DirectIo {
            in_force: true,
            reason: format!(
                "O_DIRECT on {} ({}-byte offset and {}-byte memory alignment)",
                caps.filesystem, a.offset, a.memory
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_io::AtomicWriteLimits;

    fn caps(atomic: AtomicWriteLimits) -> Capabilities {
        Capabilities {
            path: "/x".into(),
            filesystem: "xfs".into(),
            direct_io: None,
            logical_block_size: 512,
            physical_block_size: 4096,
            atomic,
            io_uring: false,
            free_bytes: None,
        }
    }

    const SOFT: AtomicWriteLimits = AtomicWriteLimits {
        unit_min: 4096,
        unit_max: 1 << 20,
        segments_max: 1,
        unit_max_opt: 0,
    };

    #[test]
    fn auto_picks_atomic_only_when_hardware_backed() {
        let hw = AtomicWriteLimits {
            unit_max_opt: 65536,
            ..SOFT
        };
        let r = resolve(TornPageProtection::Auto, PageSize::K16, Some(&caps(hw))).unwrap();
        assert_eq!(r.mode, ResolvedMode::Atomic);
        assert!(r.reason.contains("hardware"), "{}", r.reason);

        let r = resolve(TornPageProtection::Auto, PageSize::K16, Some(&caps(SOFT))).unwrap();
        assert_eq!(r.mode, ResolvedMode::Doublewrite { batch_pages: 128 });
        assert!(r.reason.contains("software fallback"), "{}", r.reason);

        let r = resolve(
            TornPageProtection::Auto,
            PageSize::K16,
            Some(&caps(AtomicWriteLimits::NONE)),
        )
        .unwrap();
        assert_eq!(r.mode, ResolvedMode::Doublewrite { batch_pages: 128 });
        assert!(r.reason.contains("unsupported"), "{}", r.reason);

        // A 64 KiB page at unit_max_opt is hardware-backed; 16 KiB above an 8 KiB one is not.
        let r = resolve(TornPageProtection::Auto, PageSize::K64, Some(&caps(hw))).unwrap();
        assert_eq!(r.mode, ResolvedMode::Atomic);
        let small_hw = AtomicWriteLimits {
            unit_max_opt: 8192,
            ..SOFT
        };
        let r = resolve(
            TornPageProtection::Auto,
            PageSize::K16,
            Some(&caps(small_hw)),
        )
        .unwrap();
        assert_eq!(r.mode, ResolvedMode::Doublewrite { batch_pages: 128 });
    }

    #[test]
    fn atomic_without_support_is_an_error_naming_the_probe() {
        let err = resolve(
            TornPageProtection::Atomic,
            PageSize::K16,
            Some(&caps(AtomicWriteLimits::NONE)),
        )
        .unwrap_err();
        assert!(err.contains("unit_max = 0"), "{err}");
        assert!(err.contains("xfs"), "{err}");
        let err = resolve(
            TornPageProtection::Atomic,
            PageSize::K64,
            Some(&caps(AtomicWriteLimits {
                unit_max: 16384,
                ..SOFT
            })),
        )
        .unwrap_err();
        assert!(err.contains("outside the atomic unit range"), "{err}");
    }

    #[test]
    fn protection_round_trips_through_serde() {
        for p in [
            TornPageProtection::Doublewrite { batch_pages: 8 },
            TornPageProtection::Atomic,
            TornPageProtection::Auto,
            TornPageProtection::FullPageWrites,
            TornPageProtection::None,
        ] {
            let s = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<TornPageProtection>(&s).unwrap(), p);
        }
        assert_eq!(
            serde_json::to_string(&TornPageProtection::FullPageWrites).unwrap(),
            "\"full_page_writes\""
        );
    }

    #[test]
    fn direct_io_falls_back_with_a_reason_where_the_file_system_cannot() {
        use keel_io::DirectIoAlignment;
        let with = |d| Capabilities {
            direct_io: d,
            ..caps(AtomicWriteLimits::NONE)
        };
        let ok = with(Some(DirectIoAlignment {
            memory: 4,
            offset: 512,
        }));
        let r = resolve_direct_io(true, PageSize::K16, Some(&ok));
        assert!(r.in_force, "{}", r.reason);
        assert!(r.reason.contains("512-byte offset"), "{}", r.reason);

        let r = resolve_direct_io(false, PageSize::K16, Some(&ok));
        assert!(!r.in_force);
        assert!(r.reason.contains("configured off"), "{}", r.reason);

        let mut tmpfs = with(None);
        tmpfs.filesystem = "tmpfs".into();
        let r = resolve_direct_io(true, PageSize::K16, Some(&tmpfs));
        assert!(!r.in_force);
        assert!(r.reason.contains("tmpfs"), "{}", r.reason);

        let r = resolve_direct_io(true, PageSize::K16, None);
        assert!(!r.in_force);
        assert!(r.reason.contains("could not be probed"), "{}", r.reason);

        let huge = with(Some(DirectIoAlignment {
            memory: 4,
            offset: 65536,
        }));
        let r = resolve_direct_io(true, PageSize::K16, Some(&huge));
        assert!(!r.in_force);
        assert!(r.reason.contains("65536-byte offsets"), "{}", r.reason);
    }
}
