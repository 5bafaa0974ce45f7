//! The plain backend: one `pread`/`pwrite`/`pwritev2` system call per request (more when the
//! kernel transfers fewer bytes than asked: short transfers are continued; a short atomic write
//! is a failure, never continued, since its two halves would not be atomic together).

use super::{Failure, RWF_ATOMIC};
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Fills `buf` from `offset`.
pub(crate) fn read_exact(file: &fs::File, buf: &mut [u8], offset: u64) -> Result<(), Failure> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => return Err(Failure::ShortRead { got: done }),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Failure::Errno(errno_of(&e))),
        }
    }
    Ok(())
}

/// Writes all of `buf` at `offset`.
pub(crate) fn write_all(file: &fs::File, buf: &[u8], offset: u64) -> Result<(), Failure> {
    let mut done = 0;
    while done < buf.len() {
        match file.write_at(&buf[done..], offset + done as u64) {
            Ok(0) => return Err(Failure::WriteZero { done }),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Failure::Errno(errno_of(&e))),
        }
    }
    Ok(())
}

/// One `pwritev2(fd, [buf], 1, offset, RWF_ATOMIC)`.
pub(crate) fn write_atomic(file: &fs::File, buf: &[u8], offset: u64) -> Result<(), Failure> {
    let iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    loop {
        // SAFETY: `iov` describes `buf`, which is borrowed for the whole call and only read by
        // the kernel (pwritev2 does not write through iov_base); the iovec array has exactly the
        // 1 element passed; the fd is owned by `file`, alive for the call.
        let n =
            unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, offset as libc::off_t, RWF_ATOMIC) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Failure::Errno(errno_of(&e)));
        }
        let n = n as usize;
        return match n {
            _ if n == buf.len() => Ok(()),
            0 => Err(Failure::WriteZero { done: 0 }),
            _ => Err(Failure::ShortAtomic { got: n }),
        };
    }
}
