//! Heap buffers aligned for O_DIRECT.
//!
//! Invariant: an [`AlignedBuf`] of length `len` owns exactly `len` initialised bytes starting at an
//! address that is a multiple of its alignment (a power of two ≥ 512). Tested by
//! `alignment_holds_for_every_size`.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The alignment Keel uses for page buffers: enough for O_DIRECT on 512 B and 4 KiB sector devices.
pub const PAGE_ALIGN: usize = 4096;

/// Alignment and advice unit of [`AlignedBuf::huge`]: the x86-64 / arm64 transparent huge page.
pub const HUGE_PAGE: usize = 2 << 20;

/// A zero-initialised heap buffer whose start address is aligned to a power of two.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    align: usize,
    /// `Some(mapped length)` when the bytes are an anonymous mapping of their own
    /// ([`AlignedBuf::huge`]), unmapped on drop; `None` for the global allocator.
    mapped: Option<usize>,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Vec<u8>); no interior mutability.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out &[u8]; mutation needs &mut self.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes aligned to `align` (a power of two). A zero `len` is allowed.
    ///
    /// # Panics
    /// If `align` is not a power of two, or the allocator fails (as `Vec` does).
    pub fn zeroed(len: usize, align: usize) -> AlignedBuf {
        match AlignedBuf::try_zeroed(len, align) {
            Some(b) => b,
            None => match Layout::from_size_align(len, align) {
                Ok(layout) => alloc::handle_alloc_error(layout),
                Err(e) => panic!("a buffer of {len} bytes aligned to {align}: {e}"),
            },
        }
    }

    /// [`zeroed`](Self::zeroed), or `None` where the allocator cannot give `len` bytes (or
    /// `len` rounded to `align` overflows), instead of aborting the process.
    ///
    /// # Panics
    /// If `align` is not a power of two.
    pub fn try_zeroed(len: usize, align: usize) -> Option<AlignedBuf> {
        assert!(
            align.is_power_of_two(),
            "alignment {align} is not a power of two"
        );
        if len == 0 {
            // A dangling pointer aligned to `align` is valid for a zero-length slice.
            let ptr = NonNull::new(align as *mut u8).unwrap_or(NonNull::dangling());
            return Some(AlignedBuf {
                ptr,
                len,
                align,
                mapped: None,
            });
        }
        let layout = Layout::from_size_align(len, align).ok()?;
        // SAFETY: layout has non-zero size (len > 0 checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)?;
        Some(AlignedBuf {
            ptr,
            len,
            align,
            mapped: None,
        })
    }

    /// A zeroed buffer of `len` bytes for a large, long-lived arena (the buffer pool's frames):
    /// its own anonymous mapping, 2 MiB aligned, advised `MADV_HUGEPAGE` before any byte is
    /// touched, so that with transparent huge pages in `madvise` mode (this machine's default)
    /// the kernel backs it with 2 MiB pages and a random page access costs one TLB entry per
    /// 2 MiB instead of per 4 KiB. Below 2 MiB, or if the mapping fails, it is
    /// [`AlignedBuf::page`]. The advice is best effort: without THP it is ordinary memory.
    pub fn huge(len: usize) -> AlignedBuf {
        match AlignedBuf::try_huge(len) {
            Some(b) => b,
            None => AlignedBuf::page(len),
        }
    }

    /// [`huge`](Self::huge), or `None` where neither a mapping nor the allocator can give
    /// `len` bytes, instead of aborting the process (a pool sized beyond the machine).
    pub fn try_huge(len: usize) -> Option<AlignedBuf> {
        if len < HUGE_PAGE {
            return AlignedBuf::try_zeroed(len, PAGE_ALIGN);
        }
        let Some(map_len) = len
            .div_ceil(HUGE_PAGE)
            .checked_add(1)
            .and_then(|p| p.checked_mul(HUGE_PAGE))
        else {
            return AlignedBuf::try_zeroed(len, PAGE_ALIGN);
        };
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing aliases no
        // existing memory; the arguments are valid constants and a length > 0.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return AlignedBuf::try_zeroed(len, PAGE_ALIGN);
        }
        let base = raw as usize;
        let start = base.next_multiple_of(HUGE_PAGE);
        let head = start - base;
        let tail = map_len - head - len.next_multiple_of(HUGE_PAGE);
        // SAFETY: `base..start` and the range after `start + len` rounded up to 2 MiB lie inside
        // the mapping just made and are not used by anything; unmapping them keeps exactly
        // `start .. start + round_up(len)`. `madvise` only gives advice on that range.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap(
                    (start + len.next_multiple_of(HUGE_PAGE)) as *mut libc::c_void,
                    tail,
                );
            }
            libc::madvise(
                start as *mut libc::c_void,
                len.next_multiple_of(HUGE_PAGE),
                libc::MADV_HUGEPAGE,
            );
        }
        let Some(ptr) = NonNull::new(start as *mut u8) else {
            return AlignedBuf::try_zeroed(len, PAGE_ALIGN);
        };
        Some(AlignedBuf {
            ptr,
            len,
            align: HUGE_PAGE,
            mapped: Some(len.next_multiple_of(HUGE_PAGE)),
        })
    }

    /// A zeroed buffer of `len` bytes aligned to [`PAGE_ALIGN`].
    pub fn page(len: usize) -> AlignedBuf {
        AlignedBuf::zeroed(len, PAGE_ALIGN)
    }

    /// A page-aligned copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::page(bytes.len());
        b.copy_from_slice(bytes);
        b
    }

    /// The alignment of the start address.
    pub fn align(&self) -> usize {
        self.align
    }

    /// Whether the bytes are a mapping of their own ([`AlignedBuf::huge`] above 2 MiB), which
    /// [`populate`](Self::populate) can fault in ahead of use.
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// Faults in, writable, the bytes `from..to` (clipped to the buffer, `from` rounded down to
    /// a 4 KiB page) of a buffer made by [`AlignedBuf::huge`], ahead of their first use:
    /// `madvise(MADV_POPULATE_WRITE)` (Linux 5.14). No byte changes: where the kernel maps a
    /// page it maps zeroes, as the first write would have, and a page already present is left
    /// alone; so it may run while other threads read and write the buffer through pointers
    /// into it. The cost of the first touch (the fault and the kernel zeroing the memory) is
    /// paid by the calling thread instead of by the first writer.
    ///
    /// Returns false if nothing was done: not a mapped buffer, an empty range, or a kernel
    /// without the advice (`EINVAL`), or memory short (`ENOMEM`).
    pub fn populate(&self, from: usize, to: usize) -> bool {
        let Some(map_len) = self.mapped else {
            return false;
        };
        let from = from - from % 4096;
        let to = to.min(map_len);
        if from >= to {
            return false;
        }
        // SAFETY: `ptr .. ptr + map_len` is the mapping `huge` made and self owns until drop;
        // `from < to <= map_len`, so the advised range lies inside it and starts on a page
        // boundary (`ptr` is 2 MiB aligned). MADV_POPULATE_WRITE only populates page tables
        // (present pages are untouched, absent ones become zero-filled pages, which is what
        // the bytes already read as), so it creates no reference to the bytes and changes none
        // of them: concurrent accesses through other pointers are unaffected.
        let r = unsafe {
            libc::madvise(
                self.ptr.as_ptr().add(from).cast(),
                to - from,
                libc::MADV_POPULATE_WRITE,
            )
        };
        r == 0
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points to len initialised bytes owned by self (or is dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        if let Some(map_len) = self.mapped {
            // SAFETY: `ptr .. ptr + map_len` is exactly what `huge` kept mapped, owned by self
            // alone and not unmapped before.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), map_len) };
            return;
        }
        let layout = Layout::from_size_align(self.len, self.align).expect("valid layout");
        // SAFETY: allocated in `zeroed` with exactly this layout and not freed before.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(self.len, self.align);
        b.copy_from_slice(self);
        b
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes, align {})", self.len, self.align)
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_holds_for_every_size() {
        for align in [512usize, 4096, 16384] {
            for len in [0usize, 1, 511, 4096, 16384, 100_000] {
                let b = AlignedBuf::zeroed(len, align);
                assert_eq!(b.len(), len);
                assert_eq!(b.as_ptr() as usize % align, 0, "len {len} align {align}");
                assert!(b.iter().all(|&x| x == 0));
            }
        }
    }

    #[test]
    fn huge_buffers_are_zeroed_aligned_and_writable() {
        for len in [4096usize, HUGE_PAGE - 1, HUGE_PAGE, 3 * HUGE_PAGE + 4096] {
            let mut b = AlignedBuf::huge(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % PAGE_ALIGN, 0);
            if len >= HUGE_PAGE {
                assert_eq!(b.as_ptr() as usize % HUGE_PAGE, 0, "len {len}");
            }
            assert!(b.iter().all(|&x| x == 0));
            b[len - 1] = 7;
            b[0] = 9;
            assert_eq!((b[0], b[len - 1]), (9, 7));
        }
    }

    #[test]
    fn clone_and_from_slice_copy_bytes() {
        let b = AlignedBuf::from_slice(b"hello");
        let c = b.clone();
        assert_eq!(&c[..], b"hello");
        assert_eq!(c.as_ptr() as usize % PAGE_ALIGN, 0);
    }
}
