//! The model the randomised tests compare a store with: table "t" as a sorted map, and how to
//! read it from a store or a snapshot.

// Each test binary uses a part of it.
#![allow(dead_code)]

use keel::{Error, ReadTxn, Store};
use std::collections::BTreeMap;

/// Table "t": key → value.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// What read transaction `r` sees of table "t" (empty if there is no such table).
pub fn seen_by(r: &ReadTxn) -> Result<Model, Error> {
    let t = match r.table("t") {
        Ok(t) => t,
        Err(Error::TableNotFound(_)) => return Ok(Model::new()),
        Err(e) => return Err(e),
    };
    t.range(..)?.collect()
}

/// Table "t" at the newest commit of `store`.
pub fn contents(store: &Store) -> Result<Model, Error> {
    seen_by(&store.read()?)
}
