//! Sony Wave64 (`.w64`: Sound Forge's and Vegas's recordings, and other tools' past
//! 4 GiB), which symphonia does not read: WAV's chunks under 128-bit GUIDs with 64-bit
//! sizes. Its format and sample data are handed to symphonia as the WAV file they make
//! (whose 32-bit data size stops it after 4 GiB of samples, as RF64's does).

use std::io::{Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

use crate::avi::AviAudio;

/// The GUIDs' common tail, after the four-letter names (`riff`'s differs).
const TAIL: [u8; 12] = [
    0xF3, 0xAC, 0xD3, 0x11, 0x8C, 0xD1, 0x00, 0xC0, 0x4F, 0x8E, 0xDB, 0x8A,
];
const RIFF: [u8; 16] = [
    b'r', b'i', b'f', b'f', 0x2E, 0x91, 0xCF, 0x11, 0xA5, 0xD6, 0x28, 0xDB, 0x04, 0xC1, 0x00, 0x00,
];
/// Most chunks walked before the data.
const MAX_CHUNKS: usize = 1024;
/// Largest format chunk read (a WAVEFORMATEXTENSIBLE is 40 bytes).
const MAX_FORMAT: u64 = 1 << 16;

fn guid(name: &[u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..4].copy_from_slice(name);
    g[4..].copy_from_slice(&TAIL);
    g
}

/// Whether a file starting with `head` is Wave64.
pub(crate) fn is_w64(head: &[u8]) -> bool {
    head.get(..16) == Some(&RIFF[..]) && head.get(24..40) == Some(&guid(b"wave")[..])
}

/// `src` (a Wave64 file at its start) as the WAV file it holds; None where it has no
/// format before its data.
pub(crate) fn open(mut src: Box<dyn MediaSource>) -> Option<AviAudio> {
    let len = src.byte_len()?;
    let mut fmt: Option<Vec<u8>> = None;
    let mut at = 40u64;
    for _ in 0..MAX_CHUNKS {
        let mut head = [0u8; 24];
        src.seek(SeekFrom::Start(at)).ok()?;
        src.read_exact(&mut head).ok()?;
        let size = u64::from_le_bytes(head[16..24].try_into().ok()?);
        let body = at + 24;
        if size < 24 {
            return None;
        }
        if head[..16] == guid(b"fmt ") {
            let n = (size - 24).min(MAX_FORMAT);
            let mut f = Vec::new();
            src.by_ref().take(n).read_to_end(&mut f).ok()?;
            fmt = Some(f);
        } else if head[..16] == guid(b"data") {
            let data = (size - 24).min(len.saturating_sub(body));
            let header = crate::avi::wav_header(&fmt?, data);
            src.seek(SeekFrom::Start(0)).ok()?;
            return Some(AviAudio::with_header(
                src,
                header,
                vec![(body, data)],
                "wav",
            ));
        }
        // Chunks start 8-byte aligned.
        at = at.checked_add(size.checked_add(7)? & !7)?;
    }
    None
}
