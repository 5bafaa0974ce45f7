//! The compact binary row encoding: little-endian integers, length-prefixed strings and
//! fixed-width CHAR(n) fields ([`Enc`]), and a decoder that never reads past the value and says
//! which table, key and offset went wrong ([`Dec`]).

use super::keys::corrupt;
use crate::error::TpccResult;

/// Appends fields to a row buffer (little-endian integers, length-prefixed strings,
/// fixed-width CHAR(n) fields without a prefix).
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub(super) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub(super) fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// VARCHAR up to 255 bytes: u8 length + bytes (longer input is truncated).
    pub(super) fn str8(&mut self, s: &str) -> &mut Self {
        let b = &s.as_bytes()[..s.len().min(255)];
        self.0.push(b.len() as u8);
        self.0.extend_from_slice(b);
        self
    }
    /// VARCHAR up to 65535 bytes: u16 length + bytes.
    pub(super) fn str16(&mut self, s: &str) -> &mut Self {
        let b = &s.as_bytes()[..s.len().min(65535)];
        self.0.extend_from_slice(&(b.len() as u16).to_le_bytes());
        self.0.extend_from_slice(b);
        self
    }
    /// CHAR(n): exactly n bytes, space-padded or truncated.
    pub(super) fn fixed(&mut self, s: &str, n: usize) -> &mut Self {
        let b = s.as_bytes();
        for i in 0..n {
            self.0.push(*b.get(i).unwrap_or(&b' '));
        }
        self
    }
    pub(super) fn opt_i64(&mut self, v: Option<i64>) -> &mut Self {
        match v {
            Some(x) => self.u8(1).i64(x),
            None => self.u8(0),
        }
    }
    pub(super) fn opt_u8(&mut self, v: Option<u8>) -> &mut Self {
        match v {
            Some(x) => self.u8(1).u8(x),
            None => self.u8(0),
        }
    }
}

/// Reads fields back; every read is bounds-checked and reports the table and key.
pub struct Dec<'a> {
    table: &'static str,
    key: &'a [u8],
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    /// A decoder over `buf`, the value of `key` in `table`.
    pub fn new(table: &'static str, key: &'a [u8], buf: &'a [u8]) -> Dec<'a> {
        Dec {
            table,
            key,
            buf,
            pos: 0,
        }
    }
    pub(super) fn take(&mut self, n: usize) -> TpccResult<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(e) => {
                let s = &self.buf[self.pos..e];
                self.pos = e;
                Ok(s)
            }
            None => Err(corrupt(
                self.table,
                self.key,
                format!(
                    "value truncated: need {n} bytes at offset {} of {}",
                    self.pos,
                    self.buf.len()
                ),
            )),
        }
    }
    pub(super) fn u8(&mut self) -> TpccResult<u8> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u16(&mut self) -> TpccResult<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub(super) fn u32(&mut self) -> TpccResult<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(super) fn i32(&mut self) -> TpccResult<i32> {
        let b = self.take(4)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(super) fn i64(&mut self) -> TpccResult<i64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }
    pub(super) fn utf8(&self, b: &[u8]) -> TpccResult<String> {
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| corrupt(self.table, self.key, "string field is not UTF-8"))
    }
    pub(super) fn str8(&mut self) -> TpccResult<String> {
        let n = self.u8()? as usize;
        let b = self.take(n)?;
        self.utf8(b)
    }
    pub(super) fn str16(&mut self) -> TpccResult<String> {
        let n = self.u16()? as usize;
        let b = self.take(n)?;
        self.utf8(b)
    }
    pub(super) fn fixed(&mut self, n: usize) -> TpccResult<String> {
        let b = self.take(n)?;
        self.utf8(b)
    }
    pub(super) fn opt_i64(&mut self) -> TpccResult<Option<i64>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.i64()?)),
            t => Err(corrupt(self.table, self.key, format!("bad option tag {t}"))),
        }
    }
    pub(super) fn opt_u8(&mut self) -> TpccResult<Option<u8>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.u8()?)),
            t => Err(corrupt(self.table, self.key, format!("bad option tag {t}"))),
        }
    }
    pub(super) fn end(&self) -> TpccResult<()> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(corrupt(
                self.table,
                self.key,
                format!(
                    "{} unexpected trailing bytes at offset {}",
                    self.buf.len() - self.pos,
                    self.pos
                ),
            ))
        }
    }
}
