//! How the tool opens a store: read-only, without creating anything, with the page size and
//! checksum the store was created with (read from its identity file first).

use keel::{Config, Store, StoreIdentity, TornPage};
use std::path::Path;

/// The store in `dir`, opened read-only, and its identity (`None` when the identity file could
/// not be read: the open then reports why the directory is not a usable store).
///
/// # Errors
///
/// Why the store cannot be opened read-only: not a store, an incomplete or damaged one, one
/// that needs more recovery than the pool can do in memory, one a writer holds.
pub fn open_read_only(dir: &Path) -> Result<(Store, StoreIdentity), keel::Error> {
    // The store's own creation settings (page size, checksum, log layout), where its files
    // can be read; else the defaults, and the open reports why the directory is not a usable
    // store (no identity file, an interrupted creation, a missing piece) more precisely than
    // a bare read error would.
    // A store whose identity file reads but whose settings do not (a missing or damaged log
    // header): that is the error. The fallback below opened with the default page size and
    // blamed it ("created with page_size 4096, the configuration says 16384": a tester).
    let found = match Config::for_store(dir) {
        Err(e) if keel::read_identity(dir).is_ok() => return Err(e),
        other => other,
    };
    // Without the store's settings, no protection mode that would create a doublewrite area.
    let base = found.as_ref().map_or_else(
        |_| Config {
            torn_page: TornPage::None,
            ..Config::default()
        },
        Clone::clone,
    );
    let cfg = Config {
        read_only: true,
        create: false,
        ..base
    };
    let store = Store::open(dir, cfg)?;
    found?;
    Ok((store, keel::read_identity(dir)?))
}
