//! What is one data request, as the two engines (`pwrite`, `uring`) and the error mapping see
//! it: its [`Kind`] and, for io_uring, an [`Op`] holding a raw view of the caller's buffer.
//!
//! Invariant: an `Op` borrows its buffer for `'a`, so the buffer outlives every use of `ptr`
//! (the io_uring engine waits for every completion before returning, see `uring`); the kernel
//! only reads through the pointer of a write.

use std::marker::PhantomData;

/// What kind of data request an [`Op`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
    AtomicWrite,
}

/// One data request for the io_uring engine: a raw view of a caller's buffer, borrowed for `'a`.
#[derive(Debug)]
pub(crate) struct Op<'a> {
    pub(super) kind: Kind,
    pub(super) offset: u64,
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> Op<'a> {
    /// A write (plain or atomic) of `buf` at `offset`. The kernel only reads through `ptr`.
    pub(crate) fn write(buf: &'a [u8], offset: u64, kind: Kind) -> Op<'a> {
        Op {
            kind,
            offset,
            ptr: buf.as_ptr() as *mut u8,
            len: buf.len(),
            _buf: PhantomData,
        }
    }

    /// A read into `buf` from `offset`.
    pub(crate) fn read(buf: &'a mut [u8], offset: u64) -> Op<'a> {
        Op {
            kind: Kind::Read,
            offset,
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            _buf: PhantomData,
        }
    }
}
