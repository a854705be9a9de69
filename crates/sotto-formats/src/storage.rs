//! Cheap-to-clone byte views: a range of a memory-mapped file or of an owned buffer.

use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

use crate::{FormatError, Result};

/// A read-only view of bytes. Cloning shares the underlying buffer; tensors loaded from
/// a file are views into its memory map, so loading copies no tensor data.
///
/// Views are not aligned: a tensor may start at any byte offset (CTranslate2 files pack
/// variables back to back), so read elements with `from_le_bytes`, not by casting.
#[derive(Clone)]
pub struct Storage {
    buf: Buf,
    range: Range<usize>,
}

#[derive(Clone)]
enum Buf {
    Mapped(Arc<Mmap>),
    Owned(Arc<Vec<u8>>),
}

impl Storage {
    /// Maps a whole file read-only.
    pub fn map_file(path: &Path) -> Result<Storage> {
        let io = |source| FormatError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len == 0 {
            // Some platforms refuse zero-length maps; an empty view says the same.
            return Ok(Storage::from_vec(Vec::new()));
        }
        // SAFETY: the map is read-only; like every mmap-based loader we assume the model
        // file is not truncated or rewritten by another process while it is mapped.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let len = map.len();
        Ok(Storage {
            buf: Buf::Mapped(Arc::new(map)),
            range: 0..len,
        })
    }

    /// Wraps an owned buffer.
    pub fn from_vec(bytes: Vec<u8>) -> Storage {
        let len = bytes.len();
        Storage {
            buf: Buf::Owned(Arc::new(bytes)),
            range: 0..len,
        }
    }

    /// The bytes of this view.
    pub fn as_bytes(&self) -> &[u8] {
        let all: &[u8] = match &self.buf {
            Buf::Mapped(m) => m,
            Buf::Owned(v) => v,
        };
        &all[self.range.clone()]
    }

    pub fn len(&self) -> usize {
        self.range.len()
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// A sub-view, `range` relative to this view; `None` when it is out of bounds.
    pub fn slice(&self, range: Range<usize>) -> Option<Storage> {
        if range.start > range.end || range.end > self.len() {
            return None;
        }
        let start = self.range.start + range.start;
        Some(Storage {
            buf: self.buf.clone(),
            range: start..start + range.len(),
        })
    }

    /// Drops this view's pages of a mapped file from the process's resident memory; touched
    /// again, they are read back from the page cache. Model loaders call it once a tensor
    /// is converted, so a load peaks at the converted weights, not those plus the whole
    /// file. Best effort: owned buffers and failed advice are left as they are.
    pub fn release(&self) {
        #[cfg(unix)]
        if let Buf::Mapped(map) = &self.buf {
            if self.range.is_empty() {
                return;
            }
            // SAFETY: the map is a read-only shared file mapping: MADV_DONTNEED only drops
            // resident pages, and later reads refault the same file bytes, so every live
            // `&[u8]` into it keeps seeing the same contents. The range lies in the map.
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    self.range.start,
                    self.range.len(),
                )
            };
        }
    }

    /// Whether the bytes live in a memory map (true for tensors of loaded files).
    pub fn is_mapped(&self) -> bool {
        matches!(self.buf, Buf::Mapped(_))
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.is_mapped() { "mapped" } else { "owned" };
        write!(
            f,
            "Storage({kind}, {} bytes at {})",
            self.len(),
            self.range.start
        )
    }
}

impl PartialEq for Storage {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

/// Little-endian reader over a byte slice whose every read is bounds-checked, with
/// errors that name the file and the offset.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], path: &'a Path) -> Self {
        Reader { buf, pos: 0, path }
    }

    pub(crate) fn path(&self) -> &'a Path {
        self.path
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn invalid(&self, msg: impl Into<String>) -> FormatError {
        FormatError::Invalid {
            path: self.path.to_path_buf(),
            msg: msg.into(),
        }
    }

    /// Consumes `n` bytes and returns their range in the buffer.
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<Range<usize>> {
        if n > self.remaining() {
            return Err(self.invalid(format!(
                "truncated at offset {} reading {what}: need {n} bytes, {} left",
                self.pos,
                self.remaining()
            )));
        }
        let r = self.pos..self.pos + n;
        self.pos += n;
        Ok(r)
    }

    pub(crate) fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let r = self.take(n, what)?;
        Ok(&self.buf[r])
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let b = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
}
