//! The store identity file and the meta page (page 0): page allocation and the free list.
//!
//! Invariants (tested):
//! - The identity file `store.keel` is checksummed; a store is never opened with another page
//!   size or checksum algorithm than it was created with (clear [`Error::Config`]). It is
//!   written last when a store is created (see [`crate::layout`]) and never re-created.
//! - Page allocation and freeing go through the meta page inside the transaction, so they are
//!   logged and rolled back with it: an aborted transaction allocates nothing.
//! - No freed page is lost: when the meta page's free array is full, the page being freed
//!   becomes a *trunk page* holding the whole array (and the previous trunk's id); allocation
//!   refills the array from the newest trunk and hands out the trunk page itself. Every free id
//!   is in exactly one place (`freed_pages_are_reused_through_trunk_pages` checks that a store
//!   does not grow when freed pages are allocated again; a trunk whose ids are out of range is
//!   reported, `a_corrupt_trunk_is_an_error`).
//! - The meta page records the store it belongs to (its log's salt, design invariant 10); a
//!   data file recording another store than the log's is never opened (`check_store`, broken
//!   on purpose by `tests/open.rs: a_file_of_a_twin_store_is_refused` without the check).

use crate::{Error, Result};
use keel_buffer_pool::PageTxn;
use keel_io::{FileClass, FileSystem, OpenOptions};
use keel_page::{Checksum, PageId, PAGE_HEADER_SIZE, PAGE_TRAILER_SIZE};
use std::path::Path;

/// The identity file's name.
pub const IDENTITY_FILE: &str = "store.keel";
const IDENTITY_MAGIC: &[u8; 8] = b"KEELSTOR";
const FORMAT_VERSION: u32 = 2;
/// Bytes of the identity file.
pub(crate) const IDENTITY_LEN: usize = 24;

/// The meta page.
pub(crate) const META_PAGE: PageId = PageId(0);
const META_MAGIC: &[u8; 8] = b"KEELMETA";
const M_MAGIC: usize = PAGE_HEADER_SIZE;
const M_VERSION: usize = PAGE_HEADER_SIZE + 8;
const M_PAGE_SIZE: usize = PAGE_HEADER_SIZE + 12;
const M_PAGE_COUNT: usize = PAGE_HEADER_SIZE + 16;
const M_CATALOG_ROOT: usize = PAGE_HEADER_SIZE + 24;
const M_FREE_COUNT: usize = PAGE_HEADER_SIZE + 32;
/// The store the data file belongs to: its log's salt (0: not recorded, a store made before).
pub(crate) const M_STORE: usize = PAGE_HEADER_SIZE + 36;
const M_TRUNK: usize = PAGE_HEADER_SIZE + 40;
// Trunk page payload: next trunk u64, id count u32, reserved u32, then the ids.
const T_NEXT: usize = PAGE_HEADER_SIZE;
const T_COUNT: usize = PAGE_HEADER_SIZE + 8;
const T_IDS: usize = PAGE_HEADER_SIZE + 16;
const M_FREE: usize = PAGE_HEADER_SIZE + 48;

fn encode_identity(page_size: usize, checksum: Checksum) -> [u8; IDENTITY_LEN] {
    let mut b = [0u8; IDENTITY_LEN];
    b[..8].copy_from_slice(IDENTITY_MAGIC);
    b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&(page_size as u32).to_le_bytes());
    b[16] = checksum.tag();
    let crc = crc32c(&b[..20]);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
    b
}

fn crc32c(bytes: &[u8]) -> u32 {
    Checksum::Crc32c.compute(bytes)
}

/// Publishes the identity of a store being created: written to `store.keel.tmp`, synced, then
/// renamed to `store.keel` (the rename syncs the directory). The last step of creation: from
/// here on the directory is a store.
///
/// # Errors
/// I/O errors writing, syncing or renaming.
pub(crate) fn publish_identity(
    fs: &dyn FileSystem,
    dir: &Path,
    page_size: usize,
    checksum: Checksum,
) -> Result<()> {
    let tmp = dir.join(crate::layout::IDENTITY_TMP_FILE);
    let f = fs.open(&tmp, &OpenOptions::new(FileClass::Other).create(true))?;
    f.set_len(0)?;
    f.write_all_at(&encode_identity(page_size, checksum), 0)?;
    f.sync_all()?;
    drop(f);
    fs.rename(&tmp, &dir.join(IDENTITY_FILE))?;
    Ok(())
}

/// What `store.keel` says: the settings fixed when the store was created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StoreIdentity {
    /// The store format version.
    pub format_version: u32,
    /// The page size in bytes.
    pub page_size: usize,
    /// The page checksum algorithm.
    pub checksum: Checksum,
}

/// Reads the identity file of the store in `dir` (real files): what a tool needs to know to
/// open a store made with any settings.
///
/// # Errors
///
/// [`Error::Io`](crate::Error) if it cannot be opened, [`Error::Format`] if it is damaged or
/// not a Keel store's.
pub fn read_identity(dir: &Path) -> Result<StoreIdentity> {
    identity(&keel_io::OsFs::new(keel_io::Backend::Pwrite), dir)
}

/// Reads and checks (magic, checksum, format version) the identity file in `dir`.
pub(crate) fn identity(fs: &dyn FileSystem, dir: &Path) -> Result<StoreIdentity> {
    let path = dir.join(IDENTITY_FILE);
    let f = fs.open(&path, &OpenOptions::new(FileClass::Other).read_only(true))?;
    let mut b = [0u8; IDENTITY_LEN];
    f.read_exact_at(&mut b, 0).map_err(|e| Error::Format {
        path: path.clone(),
        detail: format!("cannot read the store identity: {e}"),
    })?;
    decode_identity(&b, &path)
}

/// Decodes and checks (length, magic, checksum, format version, checksum tag) the bytes of the
/// identity file `path` (`store.keel`).
///
/// # Errors
/// [`Error::Format`] naming `path` for anything that is not a valid identity.
pub fn decode_identity(b: &[u8], path: &Path) -> Result<StoreIdentity> {
    let format = |detail: String| Error::Format {
        path: path.to_path_buf(),
        detail,
    };
    let Some(b) = b.get(..IDENTITY_LEN) else {
        return Err(format(format!(
            "the identity is {} bytes, expected {IDENTITY_LEN}",
            b.len()
        )));
    };
    if &b[..8] != IDENTITY_MAGIC {
        return Err(format("not a Keel store (bad magic)".into()));
    }
    let crc = u32::from_le_bytes([b[20], b[21], b[22], b[23]]);
    if crc != crc32c(&b[..20]) {
        return Err(format(format!(
            "identity checksum mismatch: stored {crc:#010x}, computed {:#010x}",
            crc32c(&b[..20])
        )));
    }
    let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    if version != FORMAT_VERSION {
        return Err(format(format!(
            "format version {version}; this build reads version {FORMAT_VERSION}"
        )));
    }
    let page_size = u32::from_le_bytes([b[12], b[13], b[14], b[15]]) as usize;
    let checksum = Checksum::from_tag(b[16])
        .ok_or_else(|| format(format!("unknown checksum algorithm tag {}", b[16])))?;
    Ok(StoreIdentity {
        format_version: version,
        page_size,
        checksum,
    })
}

/// Checks that the existing identity file matches `page_size` and `checksum`.
///
/// # Errors
/// [`Error::Format`] for a damaged or foreign identity file, [`Error::Config`] for a store made
/// with another page size or checksum.
pub(crate) fn check_identity(
    fs: &dyn FileSystem,
    dir: &Path,
    page_size: usize,
    checksum: Checksum,
) -> Result<()> {
    let path = dir.join(IDENTITY_FILE);
    let id = identity(fs, dir)?;
    if id.page_size != page_size {
        return Err(Error::Config(format!(
            "{}: the store was created with page_size {}, the configuration says {page_size}",
            path.display(),
            id.page_size
        )));
    }
    if id.checksum != checksum {
        return Err(Error::Config(format!(
            "{}: the store was created with checksum {:?}, the configuration says {checksum:?}",
            path.display(),
            id.checksum
        )));
    }
    Ok(())
}

fn rd_u32(p: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]])
}

fn rd_u64(p: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&p[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Free page ids the meta page can hold.
pub(crate) fn free_capacity(page_size: usize) -> usize {
    (page_size - PAGE_TRAILER_SIZE - M_FREE) / 8
}

/// What the meta page says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MetaInfo {
    /// Pages ever allocated (the next new page id).
    pub page_count: u64,
    /// Root of the catalog B-tree.
    pub catalog_root: PageId,
    /// Free page ids remembered.
    pub free_count: u32,
    /// The newest free-list trunk page (0: none).
    pub trunk_head: PageId,
    /// The store the data file belongs to: the salt of its log (`log.header` byte 32), which
    /// is never 0; 0 in a store made before the field, until its first read-write open.
    pub store: u32,
}

/// Decodes and checks the meta page.
pub(crate) fn read_meta(page: &[u8], file: &Path) -> Result<MetaInfo> {
    let format = |detail: String| Error::Format {
        path: file.to_path_buf(),
        detail: format!("meta page: {detail}"),
    };
    if &page[M_MAGIC..M_MAGIC + 8] != META_MAGIC {
        return Err(format("bad magic".into()));
    }
    let version = rd_u32(page, M_VERSION);
    if version != FORMAT_VERSION {
        return Err(format(format!("format version {version}")));
    }
    if rd_u32(page, M_PAGE_SIZE) as usize != page.len() {
        return Err(format(format!(
            "page size {} in a {}-byte page",
            rd_u32(page, M_PAGE_SIZE),
            page.len()
        )));
    }
    let free_count = rd_u32(page, M_FREE_COUNT);
    if free_count as usize > free_capacity(page.len()) {
        return Err(format(format!("free count {free_count} above capacity")));
    }
    // Every id the meta page holds is checked against the allocated range before it is used.
    let page_count = rd_u64(page, M_PAGE_COUNT);
    let catalog_root = PageId(rd_u64(page, M_CATALOG_ROOT));
    let trunk_head = PageId(rd_u64(page, M_TRUNK));
    if page_count == 0 {
        return Err(format("0 pages allocated (page 0 is this page)".into()));
    }
    if catalog_root.0 >= page_count {
        return Err(format(format!(
            "catalog root {catalog_root} beyond the {page_count} allocated pages"
        )));
    }
    if trunk_head.0 >= page_count {
        return Err(format(format!(
            "free-list trunk {trunk_head} beyond the {page_count} allocated pages"
        )));
    }
    Ok(MetaInfo {
        page_count,
        catalog_root,
        free_count,
        trunk_head,
        store: rd_u32(page, M_STORE),
    })
}

/// The store a page 0 image records, without the other checks of [`read_meta`]: `None` unless
/// it is a meta page (its magic) of the right size recording a store. For the open's check of
/// the data file against the log before recovery writes anything.
pub(crate) fn recorded_store(page: &[u8]) -> Option<u32> {
    let magic = page.get(M_MAGIC..M_MAGIC + 8)?;
    if magic != META_MAGIC || page.len() < M_FREE {
        return None;
    }
    Some(rd_u32(page, M_STORE)).filter(|&s| s != 0)
}

/// Refuses a data file whose meta page records another store than the log's: the data file and
/// the log come from different stores (twins with the same history agree in every LSN, so
/// nothing else tells them apart). A meta page recording no store (made before the field) is
/// not checked.
///
/// # Errors
/// [`Error::Format`] naming the data file and both stores.
pub(crate) fn check_store(recorded: Option<u32>, log_salt: u32, file: &Path) -> Result<()> {
    match recorded {
        Some(s) if s != log_salt => Err(Error::Format {
            path: file.to_path_buf(),
            detail: format!(
                "the data file belongs to another store than the log (its meta page records store {s:#010x}, the log's header {log_salt:#010x}): one of them was copied from another store; refusing to open"
            ),
        }),
        _ => Ok(()),
    }
}

/// Decodes and checks the meta page (page 0) as read from `file`: for tools that read the data
/// file without opening the store (`keel dump page`).
///
/// # Errors
///
/// [`Error::Format`] naming the file when the page is not a meta page or a field is out of range.
pub fn decode_meta_page(page: &[u8], file: &Path) -> Result<MetaInfo> {
    read_meta(page, file)
}

/// The free page ids held in the meta page's own array (`info` decoded from the same page).
pub fn meta_free_ids(page: &[u8], info: &MetaInfo) -> Vec<PageId> {
    free_array(page, info)
}

/// Decodes a free-list trunk page `id` read from `file`: the next trunk and the free ids it
/// holds.
///
/// # Errors
///
/// [`Error::Format`] naming the trunk page for an impossible count.
pub fn decode_trunk_page(page: &[u8], id: PageId, file: &Path) -> Result<(PageId, Vec<PageId>)> {
    read_trunk(page, id, file)
}

/// The page ids in the meta page's free array (`info` is what [`read_meta`] decoded from the
/// same page, so the count is within capacity).
pub(crate) fn free_array(meta_page: &[u8], info: &MetaInfo) -> Vec<PageId> {
    (0..info.free_count as usize)
        .map(|i| PageId(rd_u64(meta_page, M_FREE + i * 8)))
        .collect()
}

/// A free-list trunk page's next trunk and the ids it holds, checked: the count within the
/// page's capacity (so every id lies inside the page). Ids are returned as stored; the caller
/// checks them against the allocated pages.
///
/// # Errors
///
/// [`Error::Format`] naming the trunk page for an impossible count.
pub(crate) fn read_trunk(page: &[u8], id: PageId, file: &Path) -> Result<(PageId, Vec<PageId>)> {
    let n = rd_u32(page, T_COUNT) as usize;
    let cap = free_capacity(page.len());
    if n > cap {
        return Err(Error::Format {
            path: file.to_path_buf(),
            detail: format!("free-list trunk page {}: {n} ids, capacity {cap}", id.0),
        });
    }
    let ids = (0..n)
        .map(|i| PageId(rd_u64(page, T_IDS + i * 8)))
        .collect();
    Ok((PageId(rd_u64(page, T_NEXT)), ids))
}

/// Creates the meta page in a new store (page ids 0 = meta; the next page is 1) belonging to
/// `store` (its log's salt).
pub(crate) fn init_meta(txn: &PageTxn<'_>, page_size: usize, store: u32) -> Result<()> {
    let mut g = txn.new_page(META_PAGE, keel_page::PageType::META)?;
    g.write(M_MAGIC, META_MAGIC)?;
    g.write(M_VERSION, &FORMAT_VERSION.to_le_bytes())?;
    g.write(M_PAGE_SIZE, &(page_size as u32).to_le_bytes())?;
    g.write(M_PAGE_COUNT, &1u64.to_le_bytes())?;
    g.write(M_STORE, &store.to_le_bytes())?;
    Ok(())
}

/// Records the store the data file belongs to (a meta page made before the field records none).
pub(crate) fn set_store(txn: &PageTxn<'_>, store: u32) -> Result<()> {
    let mut g = txn.write(META_PAGE)?;
    g.write(M_STORE, &store.to_le_bytes())?;
    Ok(())
}

/// Records the catalog root.
pub(crate) fn set_catalog_root(txn: &PageTxn<'_>, root: PageId) -> Result<()> {
    let mut g = txn.write(META_PAGE)?;
    g.write(M_CATALOG_ROOT, &root.0.to_le_bytes())?;
    Ok(())
}

/// Allocates a page id: the most recently freed page (refilling the meta page's free array from
/// the newest trunk page, which is handed out itself), else a new one.
pub(crate) fn allocate(txn: &PageTxn<'_>, file: &Path) -> Result<PageId> {
    let mut g = txn.write(META_PAGE)?;
    let info = read_meta(&g, file)?;
    if info.free_count == 0 && info.trunk_head.0 != 0 {
        let trunk = info.trunk_head;
        let bad = |detail: String| Error::Format {
            path: file.to_path_buf(),
            detail: format!("free-list trunk page {}: {detail}", trunk.0),
        };
        if trunk.0 >= info.page_count {
            return Err(bad(format!(
                "beyond the {} allocated pages",
                info.page_count
            )));
        }
        drop(g);
        let (next, ids) = {
            let t = txn.write(trunk)?;
            let n = rd_u32(&t, T_COUNT) as usize;
            if n > free_capacity(t.len()) {
                return Err(bad(format!("{n} ids, capacity {}", free_capacity(t.len()))));
            }
            let next = rd_u64(&t, T_NEXT);
            if next >= info.page_count || next == trunk.0 {
                return Err(bad(format!("next trunk {next}")));
            }
            (next, t[T_IDS..T_IDS + n * 8].to_vec())
        };
        for id in ids.chunks_exact(8).map(|c| rd_u64(c, 0)) {
            if id == 0 || id >= info.page_count {
                return Err(bad(format!("holds page {id} of {}", info.page_count)));
            }
        }
        let mut g = txn.write(META_PAGE)?;
        if !ids.is_empty() {
            g.write(M_FREE, &ids)?;
        }
        g.write(M_FREE_COUNT, &((ids.len() / 8) as u32).to_le_bytes())?;
        g.write(M_TRUNK, &next.to_le_bytes())?;
        return Ok(trunk);
    }
    if info.free_count > 0 {
        let n = info.free_count as usize - 1;
        let id = rd_u64(&g, M_FREE + n * 8);
        g.write(M_FREE_COUNT, &(n as u32).to_le_bytes())?;
        if id == 0 || id >= info.page_count {
            return Err(Error::Format {
                path: file.to_path_buf(),
                detail: format!(
                    "meta page: free list holds page {id} of {}",
                    info.page_count
                ),
            });
        }
        return Ok(PageId(id));
    }
    let next = info
        .page_count
        .checked_add(1)
        .filter(|&n| {
            keel_page::PageSize::from_bytes(g.len())
                .is_some_and(|ps| PageId(n).offset(ps).is_some())
        })
        .ok_or_else(|| Error::Format {
            path: file.to_path_buf(),
            detail: format!(
                "meta page: {} pages allocated; no further page fits in a file",
                info.page_count
            ),
        })?;
    g.write(M_PAGE_COUNT, &next.to_le_bytes())?;
    Ok(PageId(info.page_count))
}

/// Returns a page id to the free list. When the meta page's array is full, page `id` becomes a
/// trunk page holding the array and the previous trunk's id, and the array starts empty; then
/// `Ok(true)`: the page stays in use (as the trunk) and must not be dropped as freed.
pub(crate) fn free(txn: &PageTxn<'_>, id: PageId, file: &Path) -> Result<bool> {
    let mut g = txn.write(META_PAGE)?;
    let info = read_meta(&g, file)?;
    let n = info.free_count as usize;
    let cap = free_capacity(g.len());
    if n < cap {
        g.write(M_FREE + n * 8, &id.0.to_le_bytes())?;
        g.write(M_FREE_COUNT, &(n as u32 + 1).to_le_bytes())?;
        return Ok(false);
    }
    let ids = g[M_FREE..M_FREE + n * 8].to_vec();
    g.write(M_FREE_COUNT, &0u32.to_le_bytes())?;
    g.write(M_TRUNK, &id.0.to_le_bytes())?;
    drop(g);
    // Freed first, as any page whose life ends here: a snapshot that can still read the page
    // (one at the newest commit, which no other rule marks as old) then finds its committed
    // image kept (the pool keeps the disk image of a page freed in the transaction before it
    // is started afresh). Without it the trunk — or, once the same transaction allocated it
    // again, another table's page — was read as the freed page's contents (a dropped table
    // read through an older snapshot as another table's rows: a tester).
    txn.free_page(id)?;
    // The trunk starts with a PageInit, so redo alone can rebuild it (init-on-flush).
    let mut t = txn.new_page(id, keel_page::PageType::FREE)?;
    t.write(T_NEXT, &info.trunk_head.0.to_le_bytes())?;
    t.write(T_COUNT, &(n as u32).to_le_bytes())?;
    if !ids.is_empty() {
        t.write(T_IDS, &ids)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_io::SimFs;

    /// Trunk bytes are read from disk: a trunk that names a page beyond the allocated ones (or
    /// an impossible count) is a format error naming the trunk, never an id handed out.
    #[test]
    fn a_corrupt_trunk_is_an_error() {
        use keel_buffer_pool::{BufferPool, MemLog, MemStore, PoolConfig};
        use keel_page::PageSize;
        use std::sync::Arc;
        let ps = 4096;
        let pool = BufferPool::new(
            PoolConfig {
                page_size: PageSize::K4,
                pool_bytes: 1024 * ps,
                ..PoolConfig::default()
            },
            Arc::new(MemStore::new(PageSize::K4)),
        )
        .unwrap();
        let log = MemLog::new();
        let file = Path::new("/db/data.keel");
        let txn = pool.begin();
        init_meta(&txn, ps, 1).unwrap();
        // Allocate enough pages, then free one more than the meta array holds: a trunk is made.
        let cap = free_capacity(ps);
        let ids: Vec<PageId> = (0..cap + 1)
            .map(|_| allocate(&txn, file).unwrap())
            .collect();
        for id in &ids {
            txn.new_page(*id, keel_page::PageType::RAW).unwrap();
        }
        for id in &ids[..cap] {
            assert!(!free(&txn, *id, file).unwrap());
            txn.free_page(*id).unwrap();
        }
        assert!(
            free(&txn, ids[cap], file).unwrap(),
            "the last free makes a trunk"
        );
        txn.commit(&log).unwrap();
        // A sound trunk: allocation hands out the trunk page, then its ids.
        let txn = pool.begin();
        assert_eq!(allocate(&txn, file).unwrap(), ids[cap]);
        assert_eq!(allocate(&txn, file).unwrap(), ids[cap - 1]);
        txn.abort();
        // Break it on purpose: the trunk names a page past the end.
        let txn = pool.begin();
        txn.write(ids[cap])
            .unwrap()
            .write(T_IDS, &u64::MAX.to_le_bytes())
            .unwrap();
        let e = allocate(&txn, file).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("trunk page {}", ids[cap].0)),
            "{e}"
        );
        txn.abort();
        let txn = pool.begin();
        txn.write(ids[cap])
            .unwrap()
            .write(T_COUNT, &u32::MAX.to_le_bytes())
            .unwrap();
        assert!(allocate(&txn, file).is_err());
    }

    #[test]
    fn identity_is_created_then_checked() {
        let fs = SimFs::with_seed(1);
        let dir = Path::new("/s");
        fs.create_dir_all(dir).unwrap();
        assert!(check_identity(&fs, dir, 16384, Checksum::Crc32c).is_err());
        publish_identity(&fs, dir, 16384, Checksum::Crc32c).unwrap();
        assert!(!fs
            .exists(&dir.join(crate::layout::IDENTITY_TMP_FILE))
            .unwrap());
        check_identity(&fs, dir, 16384, Checksum::Crc32c).unwrap();
        let e = check_identity(&fs, dir, 4096, Checksum::Crc32c).unwrap_err();
        assert!(e.to_string().contains("page_size 16384"), "{e}");
        let e = check_identity(&fs, dir, 16384, Checksum::Legacy).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
    }

    /// Breaks the identity checksum on purpose: the open is refused, naming the file.
    #[test]
    fn a_damaged_identity_is_refused() {
        let fs = SimFs::with_seed(2);
        let dir = Path::new("/s");
        fs.create_dir_all(dir).unwrap();
        publish_identity(&fs, dir, 16384, Checksum::Crc32c).unwrap();
        let f = fs
            .open(
                &dir.join(IDENTITY_FILE),
                &OpenOptions::new(FileClass::Other),
            )
            .unwrap();
        f.write_all_at(&[0xFF], 13).unwrap();
        let e = check_identity(&fs, dir, 16384, Checksum::Crc32c).unwrap_err();
        assert!(
            e.to_string().contains("store.keel") && e.to_string().contains("checksum"),
            "{e}"
        );
    }
}
