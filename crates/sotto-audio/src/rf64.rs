//! RF64 (EBU Tech 3306), the WAV that recorders and ffmpeg write past 4 GiB, and BW64
//! (ITU-R BS.2088, broadcast's: the same layout under its own name), which
//! symphonia does not read: a RIFF WAV whose 32-bit sizes say `0xFFFFFFFF`, with a first
//! chunk, `ds64`, holding the 64-bit ones. Shown to symphonia as `RIFF` with `ds64` renamed
//! `JUNK` (a chunk every reader skips), it reads as a WAV whose data size saturates;
//! `long_wav.rs` reads its data on past 4 GiB, to the size `ds64` gives.

use std::io::{Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

/// Whether a file starting with `head` is RF64 (or BW64).
pub(crate) fn is_rf64(head: &[u8]) -> bool {
    head.len() >= 16 && matches!(&head[..4], b"RF64" | b"BW64") && &head[8..16] == b"WAVEds64"
}

/// The data size an RF64 file's `ds64` chunk gives (the first thing after its header).
pub(crate) fn data_size(head: &[u8]) -> Option<u64> {
    if !is_rf64(head) {
        return None;
    }
    Some(u64::from_le_bytes(head.get(28..36)?.try_into().ok()?))
}

/// The bytes `RIFF`/`JUNK` that replace `RF64`/`ds64` at offsets 0 and 12.
fn patched(pos: u64) -> Option<u8> {
    match pos {
        0..4 => Some(b"RIFF"[pos as usize]),
        12..16 => Some(b"JUNK"[pos as usize - 12]),
        _ => None,
    }
}

/// Rewrites the first 16 bytes of an RF64 file (as read from offset 0) in place.
pub(crate) fn patch(head: &mut [u8]) {
    for (i, b) in head.iter_mut().enumerate().take(16) {
        if let Some(p) = patched(i as u64) {
            *b = p;
        }
    }
}

/// An RF64 source read as a RIFF WAV.
pub(crate) struct AsRiff {
    inner: Box<dyn MediaSource>,
    pos: u64,
}

impl AsRiff {
    /// `inner` at its start.
    pub(crate) fn new(inner: Box<dyn MediaSource>) -> Self {
        Self { inner, pos: 0 }
    }
}

impl Read for AsRiff {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.pos < 16 {
            for (i, b) in buf[..n].iter_mut().enumerate() {
                if let Some(p) = patched(self.pos + i as u64) {
                    *b = p;
                }
            }
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for AsRiff {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.inner.seek(to)?;
        Ok(self.pos)
    }
}

impl MediaSource for AsRiff {
    fn is_seekable(&self) -> bool {
        self.inner.is_seekable()
    }

    fn byte_len(&self) -> Option<u64> {
        self.inner.byte_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn reads_as_riff_from_any_offset() {
        let mut file = b"RF64\xff\xff\xff\xffWAVEds64\x1c\x00\x00\x00".to_vec();
        file.extend(0..40u8);
        assert!(is_rf64(&file));
        let mut want = file.clone();
        patch(&mut want);
        assert_eq!(&want[..16], b"RIFF\xff\xff\xff\xffWAVEJUNK");
        assert_eq!(want[16..], file[16..]);
        let mut r = AsRiff::new(Box::new(Cursor::new(file)));
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        // One byte a read, then again from a seek into the patched bytes.
        while r.read(&mut byte).unwrap() == 1 {
            got.push(byte[0]);
        }
        assert_eq!(got, want);
        r.seek(SeekFrom::Start(2)).unwrap();
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, want[2..]);
        assert!(!is_rf64(&want));
    }
}
