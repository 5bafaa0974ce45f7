//! The doublewrite area: its on-disk format (docs/format.md, "Doublewrite area"), slot
//! allocation, and the recovery scan.
//!
//! The area is its own file (`doublewrite.keel`): a 4 KiB header naming the geometry, then
//! [`DOUBLEWRITE_SLOTS`] slots. A slot holds one batch: a directory (batch sequence number, and
//! for each image its page id, LSN and a CRC-32C over sequence number, page id, LSN and image)
//! followed by the page images, written with one sequential write.
//!
//! # Invariants this module keeps (each tested by breaking it on purpose)
//!
//! 1. The area is valid on its own after a crash: an image is used by recovery only if its slot
//!    directory passes its checksum and the image passes its own checksum (which binds it to the
//!    directory's sequence number, its page id and LSN) *and* verifies as a page. A torn slot
//!    write, an old directory over new images or a new directory over old images is ignored
//!    (`torn_slot_writes_are_never_restored`).
//! 2. A slot is handed out to one batch at a time and is reused only after the in-place writes
//!    of its batch are durable. States: free → busy (a batch writes the slot, syncs the area,
//!    writes in place) → pending (in-place writes completed, data file not yet synced; the slot
//!    gets generation `++pending_gen`) → free only when a data sync that read
//!    `pending_gen ≥` the slot's generation *before* it started has succeeded
//!    ([`DoublewriteArea::free_pending`]). [`DoublewriteArea::acquire`] with no free slot but
//!    pending ones syncs the data file itself (one thread at a time). A failure before any
//!    in-place write frees the slot; one during or after them leaves it lost (never reused).
//!    Tested by the ordering and crash tests (`tests::order::doublewrite_*`,
//!    `tests::crash::doublewrite_*`), broken on purpose with the `defer_data_sync` fault.
//! 3. A header that cannot be read while the slots hold data is an error, never silently treated
//!    as an empty area (`a_corrupt_header_over_data_is_an_error`).

mod directory;

#[cfg(test)]
pub(crate) use directory::image_crc_of_sealed;
pub(crate) use directory::{decode_directory, encode_directory, image_crc};

use crate::error::{FlushError, Result};
use keel_io::{preallocate, AlignedBuf, File, FileSystem, OpenOptions, Preallocation};
use keel_page::{verify, Checksum, Lsn, PageId, PageSize, PageState};
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Slots in the doublewrite area: how many batches may be between "copied to the area" and
/// "durable in place" at once. A batch leaves its slot pending (in the synced area, written in
/// place, the data file not yet synced); the data file is synced when a batch finds no free
/// slot, so one data sync serves up to this many batches. 8 rather than 4: on the bench machine
/// (virtio, where `fdatasync` after O_DIRECT writes costs ~10 µs) 4 and 8 measured the same
/// (0.75× vs 0.73× of `None`, noise), but on a device with a real cache flush 8 halves the
/// remaining data-sync cost; the area grows to 8 × (dir + batch) — 16.1 MiB for 128 × 16 KiB.
pub const DOUBLEWRITE_SLOTS: usize = 8;

/// Bytes of the area header at the start of the doublewrite file.
pub(crate) const AREA_HEADER_LEN: usize = 4096;
const AREA_MAGIC: &[u8; 8] = b"KEELDWA1";
const SLOT_MAGIC: &[u8; 8] = b"KEELDWSL";
const FORMAT_VERSION: u32 = 1;
/// Offset in the header of the store the area belongs to (its log's salt; 0 in areas made
/// before it was recorded).
const HEADER_STORE: usize = 28;
/// Fixed part of a slot directory; entries follow.
const DIR_FIXED: usize = 64;
/// Bytes per directory entry.
const ENTRY_LEN: usize = 32;
/// Offset of the directory checksum.
const DIR_CRC: usize = 60;

/// The layout of an area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Page size in bytes.
    pub page_size: usize,
    /// Images per slot (the batch size).
    pub capacity: usize,
    /// Number of slots.
    pub slots: usize,
}

impl Geometry {
    /// Bytes of a slot directory: 64 + 32 per image, rounded up to 4 KiB.
    pub fn dir_len(&self) -> usize {
        (DIR_FIXED + ENTRY_LEN * self.capacity).div_ceil(4096) * 4096
    }

    /// Bytes from one slot to the next.
    pub fn stride(&self) -> u64 {
        (self.dir_len() + self.capacity * self.page_size) as u64
    }

    /// File offset of slot `i`.
    pub fn slot_offset(&self, i: usize) -> u64 {
        AREA_HEADER_LEN as u64 + i as u64 * self.stride()
    }

    /// Length of the whole area file.
    pub fn file_len(&self) -> u64 {
        self.slot_offset(self.slots)
    }

    /// The header of an area of this geometry belonging to store `store` (0: none recorded).
    fn encode_header(&self, store: u32) -> AlignedBuf {
        let mut h = AlignedBuf::page(AREA_HEADER_LEN);
        h[0..8].copy_from_slice(AREA_MAGIC);
        put_u32(&mut h, 8, FORMAT_VERSION);
        put_u32(&mut h, 12, self.page_size as u32);
        put_u32(&mut h, 16, self.capacity as u32);
        put_u32(&mut h, 20, self.slots as u32);
        put_u32(&mut h, 24, self.dir_len() as u32);
        put_u32(&mut h, HEADER_STORE, store);
        let crc = crc32c::crc32c(&h[..AREA_HEADER_LEN - 4]);
        put_u32(&mut h, AREA_HEADER_LEN - 4, crc);
        h
    }

    /// Decodes an area header: `Ok(None)` when it is all zero (never written).
    fn decode_header(h: &[u8]) -> std::result::Result<Option<Geometry>, String> {
        if h.len() < AREA_HEADER_LEN {
            return Err(format!(
                "header is {} bytes, expected {AREA_HEADER_LEN}",
                h.len()
            ));
        }
        if keel_page::is_zero(&h[..AREA_HEADER_LEN]) {
            return Ok(None);
        }
        let stored = get_u32(h, AREA_HEADER_LEN - 4);
        let computed = crc32c::crc32c(&h[..AREA_HEADER_LEN - 4]);
        if stored != computed {
            return Err(format!(
                "header checksum mismatch: expected {computed:#010x}, found {stored:#010x}"
            ));
        }
        if &h[0..8] != AREA_MAGIC {
            return Err("header magic is not KEELDWA1".into());
        }
        let version = get_u32(h, 8);
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version}, this build reads {FORMAT_VERSION}"
            ));
        }
        let g = Geometry {
            page_size: get_u32(h, 12) as usize,
            capacity: get_u32(h, 16) as usize,
            slots: get_u32(h, 20) as usize,
        };
        if PageSize::from_bytes(g.page_size).is_none()
            || g.capacity == 0
            || g.capacity > MAX_BATCH_PAGES
            || g.slots == 0
            || g.slots > 64
            || get_u32(h, 24) as usize != g.dir_len()
        {
            return Err(format!("header describes an impossible geometry {g:?}"));
        }
        Ok(Some(g))
    }
}

/// The largest batch a slot may hold.
pub const MAX_BATCH_PAGES: usize = 4096;

/// Formats the doublewrite area at `path`, which records store `old` (or no store), for store
/// `store`: for a copy of a closed store given an identity of its own
/// (`keel::give_new_identity`). The header keeps its geometry and records `store`; every
/// slot's directory is zeroed, so no image is left: recovery restores an image over a valid
/// home page of the same LSN whose bytes differ (a torn page that passes every check), and the
/// meta page's bytes are changed in place. The caller holds the store's exclusive lock and
/// knows every page home and synced (a clean close). The file is synced.
///
/// # Errors
///
/// [`FlushError::DoublewriteArea`] if the header does not decode or records another store than
/// `old`; an I/O error of the read, write or sync.
pub fn reformat_area(fs: &dyn FileSystem, path: &Path, old: u32, store: u32) -> Result<()> {
    let bad = |reason: String| FlushError::DoublewriteArea {
        file: path.to_path_buf(),
        reason,
    };
    let file = fs.open(path, &OpenOptions::new(keel_io::FileClass::Doublewrite))?;
    // An area never formatted (created empty, or its header never written) holds no image and
    // records no store: the next open formats it for the log's store.
    if file.len()? < AREA_HEADER_LEN as u64 {
        return Ok(());
    }
    let mut h = AlignedBuf::page(AREA_HEADER_LEN);
    file.read_exact_at(&mut h, 0)?;
    let Some(g) = Geometry::decode_header(&h).map_err(bad)? else {
        return Ok(());
    };
    let recorded = get_u32(&h, HEADER_STORE);
    if recorded != 0 && recorded != old {
        return Err(bad(format!(
            "the area records store {recorded:#010x}, not {old:#010x}"
        )));
    }
    let zero = AlignedBuf::page(g.dir_len());
    for i in 0..g.slots {
        file.write_all_at(&zero, g.slot_offset(i))?;
    }
    file.write_all_at(&g.encode_header(store), 0)?;
    file.sync_data()?;
    Ok(())
}

/// A valid image found by the recovery scan.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub page_id: PageId,
    pub lsn: Lsn,
    pub seq: u64,
    pub image: AlignedBuf,
}

/// What the scan of the area found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub slots_scanned: usize,
    pub slots_valid: usize,
    pub images_valid: usize,
    pub images_invalid: usize,
    /// Slots whose directory holds bytes but does not decode (torn by a crash during the slot
    /// write, or damaged), with the reason: skipped by recovery, reported by the store check.
    pub slots_damaged: Vec<(usize, String)>,
    pub max_seq: u64,
    pub candidates: Vec<Candidate>,
}

/// The batch size (images per slot) recorded in a doublewrite area's header, `header` being the
/// file's first [`AREA_HEADER_BYTES`] bytes: `None` for a header never written or one that fails
/// its checks (checksum, magic, version, geometry). For tools that open a store with the
/// settings it was made with.
pub fn area_batch_pages(header: &[u8]) -> Option<usize> {
    Geometry::decode_header(header)
        .ok()
        .flatten()
        .map(|g| g.capacity)
}

/// Bytes of a doublewrite area's header.
pub const AREA_HEADER_BYTES: usize = AREA_HEADER_LEN;

/// Where a slot is in its life (docs/design.md invariant 2, read literally: a slot is reused only
/// after the in-place writes of its batch are durable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotUse {
    /// May be written: its images (if any) are no longer needed.
    Free,
    /// A batch is writing it (slot write, area sync, in-place writes).
    Busy,
    /// Its batch is in the synced area and its in-place writes completed, but the data file has
    /// not been synced since: the images are the only durable copy. Freed by a data sync that
    /// started after the slot became pending, i.e. one that read a pending generation at least
    /// this one.
    Pending(u64),
    /// A failure during or after the in-place writes (the writer is poisoned): the images must
    /// survive until recovery; never freed.
    Lost,
}

/// Invariant 2's transitions out of `Busy`: only the batch holding a slot moves it on (to
/// pending, free or lost), and only once (cheap, always on).
fn leave_busy(slot: &mut SlotUse, i: usize, to: SlotUse) {
    assert!(
        *slot == SlotUse::Busy,
        "invariant: doublewrite slot {i} leaves Busy only, once ({slot:?} -> {to:?})"
    );
    *slot = to;
}

#[derive(Debug)]
struct SlotState {
    /// The geometry the file currently has (None: header never written).
    on_disk: Option<Geometry>,
    /// The store the file's header records (0: none).
    on_disk_store: u32,
    slots: Vec<SlotUse>,
    next_seq: u64,
    /// Where the search for a free slot starts.
    next_slot: usize,
    /// The images were restored ([`DoublewriteArea::note_recovered`]): the area may be
    /// formatted, its images are no longer needed.
    recovered: bool,
    /// Recovery has run and the file has the wanted geometry: slots may be written.
    ready: bool,
    /// The generation the last slot that became pending got.
    pending_gen: u64,
    /// A thread in [`DoublewriteArea::acquire`] is syncing the data file to free slots.
    syncing: bool,
}

/// The doublewrite area of an open page writer.
#[derive(Debug)]
pub(crate) struct DoublewriteArea {
    /// The area's file; empty until it is created if it did not exist at open.
    file: OnceLock<Arc<dyn File>>,
    /// How to create the file when it is first formatted, if it did not exist at open (a
    /// doublewrite run on a store without an area): an open refused before that creates
    /// nothing.
    create: Option<(Arc<dyn FileSystem>, OpenOptions)>,
    /// Held while the file is created.
    creating: Mutex<()>,
    path: PathBuf,
    /// The geometry the configuration wants (None: the writer does not use doublewrite and only
    /// keeps the area to recover from it).
    wanted: Option<Geometry>,
    /// The store this writer belongs to (its log's salt; 0: unknown): recorded in the header
    /// when the area is formatted, and an area recording another store is refused by
    /// [`DoublewriteArea::scan`] (its images are another store's pages).
    store: u32,
    state: Mutex<SlotState>,
    freed: Condvar,
}

impl DoublewriteArea {
    /// Opens the area file `file` (just opened or created), reading its header: nothing is
    /// written. Slots take writes once recovery has run ([`finish_recovery`](Self::finish_recovery)
    /// formats the area for `wanted`, an empty file included).
    pub fn open(
        file: Arc<dyn File>,
        wanted: Option<Geometry>,
        store: u32,
    ) -> Result<DoublewriteArea> {
        let path = file.path().to_path_buf();
        Self::with_file(path, Some(file), None, wanted, store)
    }

    /// An area whose file `path` does not exist yet: it is created (by `fs` with `options`)
    /// when the area is first formatted. Nothing is written or created here.
    pub fn open_missing(
        fs: Arc<dyn FileSystem>,
        path: PathBuf,
        options: OpenOptions,
        wanted: Option<Geometry>,
        store: u32,
    ) -> Result<DoublewriteArea> {
        Self::with_file(path, None, Some((fs, options)), wanted, store)
    }

    fn with_file(
        path: PathBuf,
        file: Option<Arc<dyn File>>,
        create: Option<(Arc<dyn FileSystem>, OpenOptions)>,
        wanted: Option<Geometry>,
        store: u32,
    ) -> Result<DoublewriteArea> {
        let len = match &file {
            Some(f) => f.len()?,
            None => 0,
        };
        let header = file.as_ref().filter(|_| len >= AREA_HEADER_LEN as u64);
        let (on_disk, on_disk_store) = if let Some(file) = header {
            let mut h = AlignedBuf::page(AREA_HEADER_LEN);
            file.read_exact_at(&mut h, 0)?;
            match Geometry::decode_header(&h).ok().flatten() {
                Some(g) => (Some(g), get_u32(&h, HEADER_STORE)),
                None => (None, 0),
            }
        } else {
            (None, 0)
        };
        let cell = OnceLock::new();
        if let Some(f) = file {
            // A fresh cell takes its first value.
            let _ = cell.set(f);
        }
        let area = DoublewriteArea {
            file: cell,
            create,
            creating: Mutex::new(()),
            path,
            wanted,
            store,
            state: Mutex::new(SlotState {
                on_disk,
                on_disk_store,
                slots: vec![SlotUse::Free; wanted.map_or(0, |g| g.slots)],
                next_seq: 1,
                next_slot: 0,
                recovered: false,
                ready: false,
                pending_gen: 0,
                syncing: false,
            }),
            freed: Condvar::new(),
        };
        // A brand-new (empty) file has nothing to recover and is formatted when the recovery
        // ends (`finish_recovery`), after the open's checks: formatted here, it recorded the
        // store of whatever log the open was given before the open could refuse that log as
        // another store's, and the area then refused the right log once it was put back
        // (`bad_bytes.rs`, undoing the damage after a refusal).
        Ok(area)
    }

    /// The area's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether slots may be written (recovery has run, geometry is as configured).
    pub fn is_ready(&self) -> bool {
        self.state.lock().ready
    }

    /// Writes zeros over the whole area, then the header for the wanted geometry, and syncs;
    /// if it has them already, writes the header again and syncs (the header read may not be
    /// durable). Called only when nothing in the area is needed any more.
    ///
    /// # Errors
    /// An I/O error of the area's file.
    pub fn format(&self) -> Result<()> {
        let mut st = self.state.lock();
        let Some(g) = self.wanted else {
            // Recovery-only area (the writer runs another mode): once its images are restored it
            // is emptied, so that a page torn later, while no doublewrite protects it, can never
            // be "repaired" with an older image (that would be silently wrong data). Emptied by
            // every open, also one that finds it empty: a truncation whose sync failed (a
            // refused open) reads as done on the same boot and may not be durable.
            if let Some(file) = self.file.get() {
                file.set_len(0)?;
                file.sync_all()?;
                st.on_disk = None;
            }
            st.ready = true;
            return Ok(());
        };
        if st.on_disk == Some(g) && st.on_disk_store == self.store {
            // The header the open read may be one a refused open wrote whose sync failed: the
            // device shows it (an O_DIRECT read, no page cache to drop) but it may never become
            // durable, while the slots written from now on will — and after a power loss a
            // zeroed header beside live slots is refused ("header never written, but the slots
            // hold data": a tester, 40 of 40 stores). So it is written again, the same bytes,
            // and synced, as the log's recovered blocks are (`RedoLog::sync_recovered`): the
            // sync then makes it durable or fails. Nothing in the area is needed now, and a
            // rewrite torn by a power loss leaves either the same bytes (the header was
            // durable) or a damaged header beside a body the refused open had zeroed, which
            // `scan` takes as empty.
            let file = self.file()?;
            file.write_all_at(&g.encode_header(self.store), 0)?;
            file.sync_all()?;
        } else {
            // The old area is emptied durably first: a crash while the new one is written must
            // not leave a zeroed header beside the old slots' bytes, which `scan` refuses as a
            // damaged header hiding images (crash matrix, reopening with another batch size:
            // the store could not be opened again).
            let file = self.file()?;
            file.set_len(0)?;
            file.sync_all()?;
            preallocate(&**file, g.file_len(), Preallocation::Zeroed)?;
            file.write_all_at(&g.encode_header(self.store), 0)?;
            file.sync_all()?;
            st.on_disk = Some(g);
            st.on_disk_store = self.store;
        }
        st.ready = true;
        Ok(())
    }

    /// Refuses an area whose header records another store, or that was made for another page
    /// size: what [`scan`](Self::scan) checks first, from the header read at open, with no
    /// I/O — so an open can refuse before it writes anything.
    ///
    /// # Errors
    /// [`FlushError::DoublewriteArea`] naming the file and both stores or page sizes.
    pub fn check_belongs(&self, page_size: PageSize) -> Result<()> {
        let (on_disk, on_disk_store) = {
            let st = self.state.lock();
            (st.on_disk, st.on_disk_store)
        };
        if self.store != 0 && on_disk_store != 0 && on_disk_store != self.store {
            return Err(FlushError::DoublewriteArea {
                file: self.path.clone(),
                reason: format!(
                    "the area belongs to another store (its header records store {on_disk_store:#010x}, this store's log is {:#010x}): its images are not this store's pages; refusing to restore them (remove the file if it was copied here by mistake)",
                    self.store
                ),
            });
        }
        if let Some(g) = on_disk {
            if g.page_size != page_size.bytes() {
                return Err(FlushError::DoublewriteArea {
                    file: self.path.clone(),
                    reason: format!(
                        "the area holds {} KiB page images but the store uses {page_size} pages",
                        g.page_size / 1024
                    ),
                });
            }
        }
        Ok(())
    }

    /// Reads every slot and returns the valid images (recovery's first half). An area made for
    /// another page size, or whose header records another store, is an error.
    pub fn scan(&self, checksum: Checksum, page_size: PageSize) -> Result<Scan> {
        self.check_belongs(page_size)?;
        let on_disk = self.state.lock().on_disk;
        let len = match self.file.get() {
            Some(f) => f.len()?,
            None => 0,
        };
        let mut scan = Scan::default();
        let g = match on_disk {
            Some(g) => g,
            None => {
                // Header unreadable or never written: only acceptable if nothing else is there.
                if len == 0 {
                    return Ok(scan);
                }
                let mut all = AlignedBuf::page(len.div_ceil(4096) as usize * 4096);
                self.read_upto(&mut all, 0, len)?;
                let header_problem = if len >= AREA_HEADER_LEN as u64 {
                    match Geometry::decode_header(&all[..AREA_HEADER_LEN]) {
                        Err(e) => e,
                        Ok(_) => "header never written".into(),
                    }
                } else {
                    format!("file is only {len} bytes")
                };
                let body = all.get(AREA_HEADER_LEN.min(all.len())..).unwrap_or(&[]);
                if keel_page::is_zero(body) {
                    return Ok(scan);
                }
                return Err(FlushError::DoublewriteArea {
                    file: self.path.clone(),
                    reason: format!(
                        "{header_problem}, but the slots hold data: page images may be hidden; \
                         refusing to treat the area as empty"
                    ),
                });
            }
        };
        for slot in 0..g.slots {
            scan.slots_scanned += 1;
            let off = g.slot_offset(slot);
            let mut dir = AlignedBuf::page(g.dir_len());
            if self.read_upto(&mut dir, off, len)? < DIR_FIXED {
                continue;
            }
            let d = match decode_directory(&dir, &g, slot) {
                Ok(d) => d,
                Err(reason) => {
                    if !keel_page::is_zero(&dir) {
                        scan.slots_damaged.push((slot, reason));
                    }
                    continue;
                }
            };
            scan.slots_valid += 1;
            scan.max_seq = scan.max_seq.max(d.seq);
            let mut images = AlignedBuf::page(d.entries.len() * g.page_size);
            self.read_upto(&mut images, off + g.dir_len() as u64, len)?;
            for (i, e) in d.entries.iter().enumerate() {
                let image = &images[i * g.page_size..(i + 1) * g.page_size];
                let ok = image_crc(d.seq, e.page_id, e.lsn, image) == e.crc
                    && matches!(
                        verify(image, e.page_id, checksum, &self.path),
                        Ok(PageState::Valid(h)) if h.lsn == e.lsn
                    );
                if ok {
                    scan.images_valid += 1;
                    scan.candidates.push(Candidate {
                        page_id: e.page_id,
                        lsn: e.lsn,
                        seq: d.seq,
                        image: AlignedBuf::from_slice(image),
                    });
                } else {
                    scan.images_invalid += 1;
                }
            }
        }
        Ok(scan)
    }

    /// Reads `buf.len()` bytes at `off`, or as many as the file (of `len` bytes) has; the rest of
    /// `buf` is zero. Returns the bytes read.
    /// Writes the whole area again as it reads, before a recovery restores images from it,
    /// and returns its file for the caller to sync: the slots may hold images a killed process
    /// wrote and never synced, or that a failed sync dropped on the device (an O_DIRECT write),
    /// which read back as written on the same boot. Restored home from such a slot and torn
    /// there by a power loss, a page had no durable copy anywhere, and the store could not be
    /// opened (a tester). As the log's recovered blocks are written again
    /// (`RedoLog::sync_recovered`): the sync makes them durable or fails. Torn by a power loss
    /// itself, the rewrite leaves the same bytes where they were durable and a slot that fails
    /// its checks where they were not — skipped by the next recovery, whose home pages are
    /// still untouched. `None` when the area has no file.
    ///
    /// # Errors
    /// An I/O error of the area's file.
    pub(crate) fn rewrite(&self) -> Result<Option<&Arc<dyn File>>> {
        let Some(file) = self.file.get() else {
            return Ok(None);
        };
        let len = file.len()?;
        const CHUNK: usize = 1 << 20;
        let mut buf = AlignedBuf::page(CHUNK);
        let mut off = 0u64;
        while off < len {
            // Direct files move whole 4 KiB blocks (`read_upto`); the file is always a
            // multiple of that.
            let n = self.read_upto(&mut buf, off, len)?;
            if n == 0 {
                break;
            }
            file.write_all_at(&buf[..n], off)?;
            off += n as u64;
        }
        Ok(Some(file))
    }

    fn read_upto(&self, buf: &mut [u8], off: u64, len: u64) -> Result<usize> {
        buf.fill(0);
        let avail = len.saturating_sub(off).min(buf.len() as u64) as usize;
        // Direct files read whole 4 KiB blocks; the file is always a multiple of that.
        let Some(file) = self.file.get() else {
            return Ok(0);
        };
        let n = if file.is_direct() {
            avail / 4096 * 4096
        } else {
            avail
        };
        if n > 0 {
            file.read_exact_at(&mut buf[..n], off)?;
        }
        Ok(n)
    }

    /// Ends recovery (after the restored pages are durable in place): the next batch sequence
    /// number follows `max_seq`, and the area takes the wanted geometry if it had another one;
    /// an area kept only for recovery is emptied. Its images are no longer needed. (Tests; the
    /// page writer notes and formats in two steps.)
    #[cfg(test)]
    pub fn finish_recovery(&self, max_seq: u64) -> Result<()> {
        self.note_recovered(max_seq);
        self.format()
    }

    /// Records that the images were restored (the restored pages durable in place): the next
    /// batch sequence number follows `max_seq`. Writes nothing; [`format`](Self::format) then
    /// readies the area (the page writer's `finish_doublewrite_recovery`, after the open's
    /// checks, or before the first page write).
    pub fn note_recovered(&self, max_seq: u64) {
        let mut st = self.state.lock();
        st.next_seq = st.next_seq.max(max_seq.saturating_add(1));
        st.recovered = true;
    }

    /// Whether [`note_recovered`](Self::note_recovered) ran.
    pub fn is_recovered(&self) -> bool {
        self.state.lock().recovered
    }

    /// Takes a free slot and the batch sequence number to write into it.
    ///
    /// If no slot is free but some are pending, this thread frees them: it calls `sync_data`
    /// (which must sync the data file through the writer, so that a failure poisons, and on
    /// success call [`DoublewriteArea::free_pending`] with the generation it read *before* the
    /// sync) — one thread at a time; the others wait and look again. While every slot is busy it
    /// waits. `check` (the poison check) runs before each attempt, so a waiter returns the
    /// writer's poison instead of waiting for a slot that will never be freed.
    pub fn acquire(
        &self,
        check: impl Fn() -> Result<()>,
        sync_data: impl Fn() -> Result<()>,
    ) -> Result<(usize, u64)> {
        let mut st = self.state.lock();
        loop {
            check()?;
            // Round robin from the slot after the last one handed out, so the most recent
            // batches stay in the area.
            let n = st.slots.len();
            let start = st.next_slot;
            if let Some(i) = (0..n)
                .map(|k| (start + k) % n)
                .find(|&i| st.slots[i] == SlotUse::Free)
            {
                st.slots[i] = SlotUse::Busy;
                st.next_slot = (i + 1) % n;
                let seq = st.next_seq;
                st.next_seq += 1;
                return Ok((i, seq));
            }
            let pending = st.slots.iter().any(|s| matches!(s, SlotUse::Pending(_)));
            if pending && !st.syncing {
                st.syncing = true;
                let r = parking_lot::MutexGuard::unlocked(&mut st, &sync_data);
                st.syncing = false;
                self.freed.notify_all();
                r?;
                continue;
            }
            if n == 0 {
                return Err(FlushError::DoublewriteArea {
                    file: self.path.clone(),
                    reason: "the area is open for recovery only".into(),
                });
            }
            self.freed.wait(&mut st);
        }
    }

    /// The generation of the newest pending slot. A data-file sync reads it *before* it starts
    /// and, on success, passes it to [`DoublewriteArea::free_pending`].
    pub fn pending_gen(&self) -> u64 {
        self.state.lock().pending_gen
    }

    /// Marks busy slot `i` pending: its area copy is synced and its in-place writes completed,
    /// but they are not yet synced. Returns its generation.
    pub fn mark_pending(&self, i: usize) -> u64 {
        let mut st = self.state.lock();
        st.pending_gen += 1;
        let g = st.pending_gen;
        if let Some(s) = st.slots.get_mut(i) {
            leave_busy(s, i, SlotUse::Pending(g));
        }
        g
    }

    /// A data-file sync that read `gen` from [`DoublewriteArea::pending_gen`] before it started
    /// has succeeded: every slot pending with a generation up to `gen` had its in-place writes
    /// completed before that sync started, so they are durable and the slot may be reused.
    /// Returns how many slots were freed.
    pub fn free_pending(&self, gen: u64) -> usize {
        let mut st = self.state.lock();
        let mut freed = 0;
        for s in st.slots.iter_mut() {
            if matches!(*s, SlotUse::Pending(g) if g <= gen) {
                *s = SlotUse::Free;
                freed += 1;
            }
        }
        drop(st);
        if freed > 0 {
            self.freed.notify_all();
        }
        freed
    }

    /// Gives busy slot `i` back as free: only when nothing of its batch reached the data file (a
    /// failure before the in-place writes; the slot's previous batch was durable in place before
    /// the slot was handed out), or under the deliberate `defer_data_sync` test fault.
    pub fn release(&self, i: usize) {
        let mut st = self.state.lock();
        if let Some(s) = st.slots.get_mut(i) {
            leave_busy(s, i, SlotUse::Free);
        }
        drop(st);
        self.freed.notify_all();
    }

    /// Busy slot `i` failed during or after its in-place writes: it is never reused (its images
    /// may be needed by recovery; the writer is poisoned). Wakes waiters so they see the poison.
    pub fn abandon(&self, i: usize) {
        let mut st = self.state.lock();
        if let Some(s) = st.slots.get_mut(i) {
            leave_busy(s, i, SlotUse::Lost);
        }
        drop(st);
        self.freed.notify_all();
    }

    /// Writes a slot (directory followed by its images) with one sequential write.
    pub fn write_slot(&self, i: usize, bytes: &[u8]) -> Result<()> {
        let g = self.wanted.ok_or_else(|| FlushError::DoublewriteArea {
            file: self.path.clone(),
            reason: "the area is open for recovery only".into(),
        })?;
        self.file()?.write_all_at(bytes, g.slot_offset(i))?;
        Ok(())
    }

    /// The area's file handle; the file is created if it did not exist at open.
    ///
    /// # Errors
    /// Its creation failed.
    pub fn file(&self) -> Result<&Arc<dyn File>> {
        if let Some(f) = self.file.get() {
            return Ok(f);
        }
        let _creating = self.creating.lock();
        if self.file.get().is_none() {
            let (fs, options) =
                self.create
                    .as_ref()
                    .ok_or_else(|| FlushError::DoublewriteArea {
                        file: self.path.clone(),
                        reason: "the area has no file and none may be created".into(),
                    })?;
            let f = fs.open(&self.path, &options.create(true))?;
            // Under `creating`, the cell is still empty: it takes this value.
            let _ = self.file.set(f);
        }
        self.file.get().ok_or_else(|| FlushError::DoublewriteArea {
            file: self.path.clone(),
            reason: "the area's file could not be kept".into(),
        })
    }
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod slot_tests {
    use super::{leave_busy, SlotUse};

    #[test]
    fn a_busy_slot_moves_on() {
        for to in [SlotUse::Pending(3), SlotUse::Free, SlotUse::Lost] {
            let mut s = SlotUse::Busy;
            leave_busy(&mut s, 0, to);
            assert_eq!(s, to);
        }
    }

    #[test]
    #[should_panic(expected = "invariant: doublewrite slot 5 leaves Busy only")]
    fn freeing_a_pending_slot_as_if_busy_trips() {
        // A second release of a slot whose batch already went pending would let the slot be
        // reused before its in-place writes are durable.
        let mut s = SlotUse::Pending(7);
        leave_busy(&mut s, 5, SlotUse::Free);
    }
}
