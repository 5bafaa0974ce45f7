//! What a whole-store integrity check finds: every B-tree's structure (the catalog's and each
//! table's), and an account of every page of the data file.
//!
//! Invariants checked (each has a test in `tests/check.rs` that breaks it on purpose):
//! - Every page id below the meta page's `page_count` is in exactly one place: the meta page
//!   (page 0), a node or overflow page of exactly one B-tree (the catalog or one table), a
//!   free-list trunk page, or a free id (in the meta page's array or in a trunk). A page in two
//!   places is reported ("both ... and ..."), a page in none is reported as leaked.
//! - Every B-tree passes `BTree::check` (key order within nodes and against the parents'
//!   bounds, levels, hint prefixes, overflow chains of the right length).
//! - Every page that is read passes the page checks of the read path (checksum, page id, torn
//!   page): the check reads through the buffer pool, so a page that is not resident is read
//!   from the file and verified; a resident page is the newest version and was verified when
//!   it was read.
//!
//! - The doublewrite area's header decodes, and every slot's directory and images are read;
//!   a slot holding bytes whose directory does not decode is a warning (a crash during that
//!   slot's write leaves one; recovery skips it).
//!
//! The check reads the newest commit as a snapshot and changes nothing. An error that says
//! nothing about the stored data (the snapshot dropped for the version budget, a poisoned
//! store) ends it as an error, never as a problem line (`about_the_data`; test
//! `a_check_whose_snapshot_passes_the_budget_says_so_and_reports_no_damage`).

use crate::meta::{self, MetaInfo, META_PAGE};
use crate::store::Inner;
use crate::table::SnapReader;
use crate::{Error, Result};
use keel_btree::BTree;
use keel_buffer_pool::Snapshot;
use keel_page::{PageHeader, PageId, PageType};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One table as [`Store::check`](crate::Store::check) found it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableCheck {
    /// The table's name.
    pub name: String,
    /// Its root page.
    pub root: u64,
    /// Rows.
    pub rows: u64,
    /// Levels of its B-tree (1: the root is a leaf).
    pub depth: u64,
    /// Leaf pages.
    pub leaves: u64,
    /// Inner pages.
    pub inners: u64,
    /// Overflow pages (values too large for a leaf cell).
    pub overflow_pages: u64,
}

/// What [`Store::check`](crate::Store::check) found: the account of the file's pages, each
/// table, and one line per problem (empty when the store is sound).
///
/// `Store::check` returns `Ok` with the problems it found: a caller that only propagates the
/// error has checked nothing (three crash tests did, until session 39), hence `must_use`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[must_use = "a check's problems are in the report (Store::check returns Ok with them): look at is_ok()"]
pub struct CheckReport {
    /// Pages allocated in the data file (the meta page's `page_count`).
    pub page_count: u64,
    /// Pages of the catalog B-tree.
    pub catalog_pages: u64,
    /// Free page ids (in the meta page's array and in trunk pages).
    pub free_pages: u64,
    /// Free-list trunk pages.
    pub trunk_pages: u64,
    /// The tables, in name order.
    pub tables: Vec<TableCheck>,
    /// What the doublewrite area holds (`None`: the store has none).
    pub doublewrite: Option<keel_flush::DoublewriteInspection>,
    /// One line per problem, each naming the file and page.
    pub problems: Vec<String>,
    /// Findings that are not damage by themselves: a doublewrite slot whose directory does not
    /// decode is what a crash during that slot's write leaves (recovery skips it), or damage.
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl CheckReport {
    /// Whether the check found no problem.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Where a page was found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Owner {
    Meta,
    Catalog,
    Table(String),
    Trunk,
    Free,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Meta => write!(f, "the meta page"),
            Owner::Catalog => write!(f, "a page of the catalog"),
            Owner::Table(t) => write!(f, "a page of table {t:?}"),
            Owner::Trunk => write!(f, "a free-list trunk page"),
            Owner::Free => write!(f, "a free page"),
        }
    }
}

/// The account of every page: who holds it, and what went wrong so far.
struct Account {
    file: String,
    page_count: u64,
    owners: HashMap<u64, Owner>,
    problems: Vec<String>,
}

impl Account {
    fn problem(&mut self, page: Option<PageId>, detail: impl std::fmt::Display) {
        let line = match page {
            Some(p) => format!("{}: page {}: {detail}", self.file, p.0),
            None => format!("{}: {detail}", self.file),
        };
        self.problems.push(line);
    }

    /// Records that `owner` holds `id`; a page beyond the file or held twice is a problem.
    fn claim(&mut self, id: PageId, owner: Owner) {
        if id.0 >= self.page_count {
            let count = self.page_count;
            self.problem(
                Some(id),
                format!("{owner} lies beyond the {count} allocated pages"),
            );
            return;
        }
        if let Some(prev) = self.owners.get(&id.0) {
            let line = format!("is both {prev} and {owner}");
            self.problem(Some(id), line);
            return;
        }
        self.owners.insert(id.0, owner);
    }
}

/// Runs the check on the committed state at snapshot `snap`.
pub(crate) fn check_store(inner: &Inner, snap: &Snapshot) -> Result<CheckReport> {
    let file = inner.writer.data_path().display().to_string();
    let ps = inner.config.page_size;
    let pages = SnapReader::new(&inner.pool, snap);
    let meta_bytes = inner.pool.read_at(META_PAGE, snap)?.to_vec();
    let info = meta::read_meta(&meta_bytes, inner.writer.data_path())?;
    let mut acc = Account {
        file,
        page_count: info.page_count,
        owners: HashMap::new(),
        problems: Vec::new(),
    };
    acc.claim(META_PAGE, Owner::Meta);
    let mut report = CheckReport {
        page_count: info.page_count,
        ..CheckReport::default()
    };

    // The catalog, then each table it names.
    let catalog = BTree::open(info.catalog_root, ps);
    let mut entries: Vec<(String, PageId)> = Vec::new();
    // Trees whose walk stopped at damage: the pages past it are not claimed.
    let mut cut_short: Vec<String> = Vec::new();
    match catalog.check_with_pages(&pages).map(|(_, ids)| ids) {
        Err(e) => {
            acc.problem(
                Some(info.catalog_root),
                format!("catalog B-tree: {}", about_the_data(e.into())?),
            );
            cut_short.push("the catalog".into());
        }
        Ok(ids) => {
            report.catalog_pages = ids.len() as u64;
            for id in ids {
                acc.claim(id, Owner::Catalog);
            }
            for row in catalog.range(pages, ..) {
                match row {
                    Err(e) => {
                        let e = about_the_data(e.into())?;
                        acc.problem(Some(info.catalog_root), format!("catalog B-tree: {e}"));
                        break;
                    }
                    Ok((k, v)) => {
                        let name = String::from_utf8_lossy(&k).into_owned();
                        match crate::table::catalog_entry(&name, &v) {
                            Ok(root) => entries.push((name, root)),
                            Err(detail) => acc.problem(Some(info.catalog_root), detail),
                        }
                    }
                }
            }
        }
    }
    for (name, root) in entries {
        let tree = BTree::open(root, ps);
        match tree.check_with_pages(&pages) {
            Err(e) => {
                acc.problem(
                    Some(root),
                    format!("table {name:?}: {}", about_the_data(e.into())?),
                );
                cut_short.push(format!("table {name:?}"));
            }
            Ok((stats, ids)) => {
                for id in ids {
                    acc.claim(id, Owner::Table(name.clone()));
                }
                report.tables.push(TableCheck {
                    name,
                    root: root.0,
                    rows: stats.entries as u64,
                    depth: stats.depth as u64,
                    leaves: stats.leaves as u64,
                    inners: stats.inners as u64,
                    overflow_pages: stats.overflow_pages as u64,
                });
            }
        }
    }

    // The free list: the meta page's array, then the chain of trunk pages.
    for id in meta::free_array(&meta_bytes, &info) {
        report.free_pages += 1;
        acc.claim(id, Owner::Free);
    }
    walk_trunks(inner, snap, &info, &mut acc, &mut report)?;

    // Every allocated page must be somewhere. Counted, not walked id by id: a damaged meta page
    // may claim 2^40 pages (walking and listing them aborted the check on a failed 4 GiB
    // allocation: a tester); the first leaked ids lie among the first `claimed + 20`.
    let claimed = acc
        .owners
        .keys()
        .filter(|&&id| id >= 1 && id < info.page_count)
        .count() as u64;
    let n = info.page_count.saturating_sub(1).saturating_sub(claimed);
    if n > 0 {
        let shown: Vec<String> = (1..info.page_count)
            .take((claimed + 21) as usize)
            .filter(|id| !acc.owners.contains_key(id))
            .take(20)
            .map(|id| id.to_string())
            .collect();
        let more = if n > 20 { ", ..." } else { "" };
        // Past a tree whose walk stopped at damage, its own pages are not reached: said so,
        // not called leaked (a damaged leaf made 22 sound pages of its table "leaked": a tester).
        let what = if cut_short.is_empty() {
            "leaked (neither used nor free)".to_string()
        } else {
            format!(
                "neither free nor reached (the walk of {} stopped at the damage above: they may be its pages, or leaked)",
                cut_short.join(", ")
            )
        };
        acc.problem(
            None,
            format!(
                "{n} page(s) {what} of the {} the meta page counts: {}{more}",
                info.page_count,
                shown.join(", ")
            ),
        );
    }
    // The doublewrite area: its header, every slot directory and image checksum.
    match inner.writer.inspect_doublewrite() {
        Ok(dw) => {
            if let Some(d) = &dw {
                let area = inner.dir.join(keel_flush::DOUBLEWRITE_FILE_NAME);
                for s in &d.damaged_slots {
                    report.warnings.push(format!(
                        "{}: {s} (torn by a crash during its write, or damaged; recovery skips it)",
                        area.display()
                    ));
                }
            }
            report.doublewrite = dw;
        }
        Err(e) => acc.problem(None, format!("doublewrite area: {e}")),
    }
    report.problems = acc.problems;
    Ok(report)
}

/// Follows the free-list trunk chain from the meta page, claiming each trunk and its ids.
fn walk_trunks(
    inner: &Inner,
    snap: &Snapshot,
    info: &MetaInfo,
    acc: &mut Account,
    report: &mut CheckReport,
) -> Result<()> {
    let mut trunk = info.trunk_head;
    let mut seen = std::collections::HashSet::new();
    while trunk.0 != 0 {
        // A trunk met twice: the chain has a cycle. Said once — walking on claimed every id of
        // the cycle's trunks again on each lap, a problem line per id until the walk passed
        // the page count (1.5 million lines for one bad pointer in a 3,000-page store).
        if !seen.insert(trunk) {
            acc.problem(Some(trunk), "the free-list trunk chain has a cycle");
            return Ok(());
        }
        if trunk.0 >= info.page_count {
            acc.claim(trunk, Owner::Trunk);
            return Ok(());
        }
        let bytes = match inner.pool.read_at(trunk, snap) {
            Ok(g) => g.to_vec(),
            Err(e) => {
                let e = about_the_data(Error::from(e))?;
                acc.problem(Some(trunk), format!("free-list trunk: {e}"));
                return Ok(());
            }
        };
        let ty = PageHeader::read(&bytes).map(|h| h.page_type);
        if ty != Some(PageType::FREE) {
            acc.problem(
                Some(trunk),
                format!("free-list trunk page has page type {ty:?}, not FREE"),
            );
            return Ok(());
        }
        acc.claim(trunk, Owner::Trunk);
        report.trunk_pages += 1;
        match meta::read_trunk(&bytes, trunk, inner.writer.data_path()) {
            Err(e) => {
                acc.problem(Some(trunk), e);
                return Ok(());
            }
            Ok((next, ids)) => {
                for id in ids {
                    report.free_pages += 1;
                    if id.0 == 0 {
                        acc.problem(Some(trunk), "free-list trunk holds page 0");
                        continue;
                    }
                    acc.claim(id, Owner::Free);
                }
                trunk = next;
            }
        }
    }
    Ok(())
}

/// A walk's error as a problem of the stored data, or — when it says nothing about the data —
/// the error that ends the check: the check's snapshot dropped for the version budget
/// (`SnapshotTooOld`, retryable: a check under writers that passed the budget reported the
/// pages it had not reached as leaked, "126 page(s) leaked", on a sound store: a tester), or a
/// poisoned store.
fn about_the_data(e: Error) -> Result<Error> {
    if matches!(e, Error::SnapshotTooOld { .. }) || e.is_poisoned() {
        return Err(e);
    }
    Ok(e)
}
