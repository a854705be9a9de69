//! WAV headers mended before symphonia reads them:
//! - RF64 (EBU Tech 3306), the WAV that recorders and ffmpeg write past 4 GiB, and BW64
//!   (ITU-R BS.2088, broadcast's: the same layout under its own name), which symphonia does
//!   not read: a RIFF WAV whose 32-bit sizes say `0xFFFFFFFF`, with a first chunk, `ds64`,
//!   holding the 64-bit ones. Shown to symphonia as `RIFF` with `ds64` renamed `JUNK` (a
//!   chunk every reader skips), it reads as a WAV whose data size saturates; `long_wav.rs`
//!   reads its data on past 4 GiB, to the size `ds64` gives.
//! - An unfinished WAV, whose recorder stopped (a crash, a dead battery) before it wrote
//!   its sizes: RIFF and `data` sizes of 0, which symphonia refuses (or reads as no audio).
//!   Shown with sizes of `0xFFFFFFFF`, its data is read to the end of the file, as FFmpeg
//!   reads it.

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

/// Bytes to write over a file's (offset, bytes): an RF64 file's `RIFF` and `JUNK`, or an
/// unfinished WAV file's sizes of all ones; none for any other file. `head` is the file's
/// start, as far as it was read.
pub(crate) fn mends(head: &[u8]) -> Vec<(u64, [u8; 4])> {
    if is_rf64(head) {
        return vec![(0, *b"RIFF"), (12, *b"JUNK")];
    }
    if !crate::avi::is_wav(head) {
        return Vec::new();
    }
    let size = |at: usize| {
        head.get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    // A RIFF size of 0 marks it unfinished (a finished empty file says 36 or more).
    if size(4) != Some(0) {
        return Vec::new();
    }
    let mut out = vec![(4, [0xFF; 4])];
    // The chunks up to `data`, as far as `head` goes.
    let mut at = 12;
    while let (Some(id), Some(len)) = (head.get(at..at + 4), size(at + 4)) {
        if id == b"data" {
            if len == 0 {
                out.push((at as u64 + 4, [0xFF; 4]));
            }
            break;
        }
        at += 8 + len as usize + len as usize % 2;
    }
    out
}

/// Writes `mends` over `head` (a file's first bytes) in place.
pub(crate) fn patch(head: &mut [u8], mends: &[(u64, [u8; 4])]) {
    for &(at, bytes) in mends {
        for (i, b) in bytes.iter().enumerate() {
            if let Some(h) = head.get_mut(at as usize + i) {
                *h = *b;
            }
        }
    }
}

/// A source read with `mends` written over it.
pub(crate) struct Mended {
    inner: Box<dyn MediaSource>,
    pos: u64,
    mends: Vec<(u64, [u8; 4])>,
}

impl Mended {
    /// `inner` at its start.
    pub(crate) fn new(inner: Box<dyn MediaSource>, mends: Vec<(u64, [u8; 4])>) -> Self {
        Self {
            inner,
            pos: 0,
            mends,
        }
    }
}

impl Read for Mended {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &(at, bytes) in &self.mends {
            for (i, &b) in bytes.iter().enumerate() {
                let p = at + i as u64;
                if (self.pos..self.pos + n as u64).contains(&p) {
                    buf[(p - self.pos) as usize] = b;
                }
            }
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Mended {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.inner.seek(to)?;
        Ok(self.pos)
    }
}

impl MediaSource for Mended {
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
        patch(&mut want, &mends(&file));
        assert_eq!(&want[..16], b"RIFF\xff\xff\xff\xffWAVEJUNK");
        assert_eq!(want[16..], file[16..]);
        let mends = mends(&file);
        let mut r = Mended::new(Box::new(Cursor::new(file)), mends);
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

    #[test]
    fn unfinished_wav_sizes_are_mended_to_all_ones() {
        let mut wav = b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0".to_vec();
        wav.extend_from_slice(&[1, 0, 1, 0, 0x80, 0x3E, 0, 0, 0, 0x7D, 0, 0, 2, 0, 16, 0]);
        wav.extend_from_slice(b"LIST\x03\0\0\0abc\0data\0\0\0\0");
        assert_eq!(mends(&wav), vec![(4, [0xFF; 4]), (52, [0xFF; 4])]);
        // A finished one (empty, or not), and a head cut before its data chunk: nothing.
        let mut done = wav.clone();
        done[4] = 44;
        assert!(mends(&done).is_empty());
        done[52] = 1;
        assert!(mends(&done).is_empty());
        assert_eq!(mends(&wav[..40]), vec![(4, [0xFF; 4])]);
        assert!(mends(b"fLaC").is_empty());
    }
}
