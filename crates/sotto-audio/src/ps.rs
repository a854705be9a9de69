//! MPEG program streams (`.mpg`/`.mpeg`: MPEG-1 and MPEG-2 video, digitised tapes;
//! `.vob`: DVD video; `.mod`/`.tod`: tape-less camcorders), which symphonia does not read
//! (its MPEG audio reader, hunting for frame syncs, found some of an MPEG audio stream's
//! frames in one and lost those a PES header split; AC-3 and LPCM it could not find).
//! The packs are walked once, reading only their headers, for the first audio stream's
//! PES payloads: MPEG audio (stream ids 0xC0–0xDF), and in DVD's private stream 1, AC-3
//! (and E-AC-3), DTS, TrueHD and 16-, 20- and 24-bit LPCM (behind its substream headers,
//! as FFmpeg's reader takes them); they are handed to symphonia as the elementary stream
//! they make (LPCM behind an AIFF-C header: its samples are big-endian).

use std::io::{BufReader, Read};

use symphonia::core::io::MediaSource;

use crate::avi::AviAudio;

/// A pack's start code.
const PACK: [u8; 4] = [0, 0, 1, 0xBA];
const PRIVATE_1: u8 = 0xBD;
/// Bytes walked looking for the first audio packet before giving up.
const MAX_SEARCH: u64 = 64 << 20;
/// Bytes skipped looking for the next start code where one is not where it should be.
const MAX_RESYNC: usize = 1 << 20;
/// Audio payloads indexed at the most (a DVD's 9 GB at one a pack).
const MAX_CHUNKS: usize = 1 << 23;

/// Whether a file starting with `head` is an MPEG program stream: a pack header, MPEG-2's
/// or MPEG-1's.
pub(crate) fn is_ps(head: &[u8]) -> bool {
    head.starts_with(&PACK)
        && head
            .get(4)
            .is_some_and(|&b| b & 0xC0 == 0x40 || b & 0xF0 == 0x20)
}

/// Why a program stream gives no audio to decode.
#[derive(Debug, PartialEq)]
pub(crate) enum PsError {
    NoAudio,
    /// Audio in a form sotto does not decode: its name.
    Codec(&'static str),
    Io(String),
}

/// What an audio stream holds.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Mpeg,
    Ac3,
    Dts,
    TrueHd,
    /// DVD LPCM: big-endian samples of `bits`, interleaved.
    Lpcm {
        bits: u16,
        rate: u32,
        channels: u16,
    },
    /// What sotto does not decode.
    Other(&'static str),
}

/// An audio stream: its PES stream id, and its substream id in private stream 1 (None
/// for AC-3 there without one).
type Id = (u8, Option<u8>);

/// Where a PES packet's data starts in its body (the bytes after its length): past
/// MPEG-1's stuffing, buffer size and timestamps, or MPEG-2's header (FFmpeg's
/// `mpegps_read_pes_header`).
fn pes_data(body: &[u8]) -> Option<usize> {
    let mut at = 0;
    let mut c = *body.get(at)?;
    at += 1;
    while c == 0xFF {
        c = *body.get(at)?;
        at += 1;
    }
    if c & 0xC0 == 0x40 {
        c = *body.get(at + 1)?;
        at += 2;
    }
    if c & 0xE0 == 0x20 {
        at += if c & 0x10 != 0 { 9 } else { 4 };
    } else if c & 0xC0 == 0x80 {
        at += 2 + usize::from(*body.get(at + 1)?);
    } else if c != 0x0F {
        return None;
    }
    (at <= body.len()).then_some(at)
}

/// The audio stream a PES packet of stream `sid` belongs to, what it holds and where its
/// audio starts in `body`; None for one that is not audio (video, subtitles, navigation).
fn audio(sid: u8, body: &[u8]) -> Option<(Id, Kind, usize)> {
    let at = pes_data(body)?;
    if (0xC0..=0xDF).contains(&sid) {
        return Some(((sid, None), Kind::Mpeg, at));
    }
    if sid != PRIVATE_1 {
        return None;
    }
    let p = &body[at..];
    let sub = *p.first()?;
    if sub == 0x0B && p.get(1) == Some(&0x77) {
        return Some(((sid, None), Kind::Ac3, at));
    }
    let (kind, skip) = match sub {
        0x80..=0x87 | 0xC0..=0xCF => (Kind::Ac3, 4),
        0x88..=0x8F | 0x98..=0x9F => (Kind::Dts, 4),
        0xB0..=0xBF => (Kind::TrueHd, 5),
        0xA0..=0xAF => {
            // Behind the substream's 4 bytes, LPCM's 3-byte header (its dynamic range
            // byte 0x80), or MLP (DVD-Audio).
            let h = p.get(4..7)?;
            if h[2] != 0x80 {
                (Kind::Other("MLP in an MPEG program stream"), 7)
            } else {
                let bits = 16 + u16::from(h[1] >> 6) * 4;
                let rate = [48_000, 96_000, 44_100, 32_000][usize::from(h[1] >> 4 & 3)];
                let channels = 1 + u16::from(h[1] & 7);
                let lpcm = Kind::Lpcm {
                    bits,
                    rate,
                    channels,
                };
                match bits {
                    16 | 20 | 24 => (lpcm, 7),
                    _ => (Kind::Other("28-bit DVD LPCM"), 7),
                }
            }
        }
        0x90..=0x97 => (Kind::Other("SDDS"), 4),
        _ => return None,
    };
    (at + skip <= body.len()).then_some(((sid, Some(sub)), kind, at + skip))
}

/// A walk over the packs, reading only headers.
struct Walker<'a> {
    r: BufReader<&'a mut dyn MediaSource>,
    pos: u64,
}

impl Walker<'_> {
    /// Fills `buf` (false where the file ends first).
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        match self.r.read_exact(buf) {
            Ok(()) => {
                self.pos += buf.len() as u64;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads into `buf` what there is, up to its length.
    fn read_some(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.r.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.pos += got as u64;
        Ok(got)
    }

    fn skip(&mut self, n: u64) -> std::io::Result<()> {
        self.r.seek_relative(i64::try_from(n).unwrap_or(i64::MAX))?;
        self.pos += n;
        Ok(())
    }

    /// The next start code's id byte: at once where the stream is in step, else after
    /// bytes skipped up to the next `00 00 01`; None at the end.
    fn start_code(&mut self) -> std::io::Result<Option<u8>> {
        let mut window = [0u8; 4];
        if !self.read(&mut window)? {
            return Ok(None);
        }
        for _ in 0..MAX_RESYNC {
            if window[..3] == [0, 0, 1] && (window[3] >= 0xB9) {
                return Ok(Some(window[3]));
            }
            let mut b = [0u8];
            if !self.read(&mut b)? {
                return Ok(None);
            }
            window.copy_within(1.., 0);
            window[3] = b[0];
        }
        Ok(None)
    }
}

/// The first audio stream of `src` (a program stream at its start), as the elementary
/// stream symphonia decodes.
pub(crate) fn open(mut src: Box<dyn MediaSource>) -> Result<PsAudio, PsError> {
    let io = |e: std::io::Error| PsError::Io(e.to_string());
    let mut found: Option<(Id, Kind)> = None;
    let mut chunks: Vec<(u64, u64)> = Vec::new();
    let mut w = Walker {
        r: BufReader::with_capacity(1 << 16, &mut *src),
        pos: 0,
    };
    while let Some(code) = w.start_code().map_err(io)? {
        match code {
            0xBA => {
                let mut b = [0u8; 10];
                if !w.read(&mut b[..1]).map_err(io)? {
                    break;
                }
                if b[0] & 0xC0 == 0x40 {
                    // MPEG-2: SCR, mux rate, then stuffing as the last byte says.
                    if !w.read(&mut b[1..10]).map_err(io)? {
                        break;
                    }
                    w.skip(u64::from(b[9] & 7)).map_err(io)?;
                } else {
                    w.skip(7).map_err(io)?;
                }
            }
            0xB9 => {}
            sid => {
                let mut len = [0u8; 2];
                if !w.read(&mut len).map_err(io)? {
                    break;
                }
                let len = usize::from(u16::from_be_bytes(len));
                let start = w.pos;
                if sid == PRIVATE_1 || (0xC0..=0xDF).contains(&sid) {
                    // Enough of the body for its headers: MPEG-2's longest and LPCM's.
                    let mut head = vec![0u8; len.min(3 + 255 + 7)];
                    let got = w.read_some(&mut head).map_err(io)?;
                    if let Some((id, kind, at)) = audio(sid, &head[..got]) {
                        let chosen = *found.get_or_insert((id, kind));
                        if chosen.0 == id && len > at {
                            chunks.push((start + at as u64, (len - at) as u64));
                        }
                    }
                }
                if chunks.len() >= MAX_CHUNKS {
                    break;
                }
                let read = w.pos - start;
                w.skip(len as u64 - read).map_err(io)?;
            }
        }
        if found.is_none() && w.pos > MAX_SEARCH {
            break;
        }
    }
    drop(w);
    let ((_, _), kind) = found.ok_or(PsError::NoAudio)?;
    // The last payload may run past a file cut short.
    if let Some(len) = src.byte_len() {
        chunks.retain(|c| c.0 < len);
        if let Some(last) = chunks.last_mut() {
            last.1 = last.1.min(len - last.0);
        }
    }
    let ext = match kind {
        Kind::Mpeg => "mp3",
        Kind::Ac3 => "ac3",
        Kind::Dts => "dts",
        Kind::TrueHd => "thd",
        Kind::Lpcm {
            bits,
            rate,
            channels,
        } => {
            let data: u64 = chunks.iter().map(|c| c.1).sum();
            if bits == 16 {
                let audio =
                    crate::au::with_aifc_chunks(src, (b"NONE", bits), channels, rate, chunks, data);
                return Ok(PsAudio {
                    ext: audio.ext,
                    reader: Box::new(audio),
                });
            }
            let raw = AviAudio::with_header(src, Vec::new(), chunks, "raw");
            return Ok(PsAudio {
                reader: Box::new(Regroup::new(raw, bits, channels, rate, data)),
                ext: "aiff",
            });
        }
        Kind::Other(what) => return Err(PsError::Codec(what)),
    };
    Ok(PsAudio {
        reader: Box::new(AviAudio::with_header(src, Vec::new(), chunks, ext)),
        ext,
    })
}

/// The audio of a program stream, as the file symphonia decodes (of the format `ext`
/// names).
pub(crate) struct PsAudio {
    pub(crate) reader: Box<dyn Read + Send + Sync>,
    pub(crate) ext: &'static str,
}

/// 20- and 24-bit DVD LPCM as 24-bit big-endian samples behind an AIFF-C header: the
/// stream comes in groups of 4 samples (2 in mono), their top 16 bits first, then their
/// low 4 or 8 bits (FFmpeg's `pcm_dvd_decode_samples`).
struct Regroup {
    raw: AviAudio,
    /// Samples in a group, and its bytes.
    samples: usize,
    group: usize,
    wide: bool,
    out: Vec<u8>,
    taken: usize,
    /// Bytes still to hand out (whole frames).
    left: u64,
}

impl Regroup {
    fn new(raw: AviAudio, bits: u16, channels: u16, rate: u32, data: u64) -> Self {
        let samples = if channels == 1 { 2 } else { 4 };
        let wide = bits == 24;
        let group = 2 * samples + if wide { samples } else { samples / 2 };
        let frame = u64::from(channels) * 3;
        let most = u64::from(u32::MAX - 64) / frame * frame;
        let whole = (data / group as u64 * samples as u64 * 3 / frame * frame).min(most);
        Self {
            raw,
            samples,
            group,
            wide,
            out: crate::au::aifc_header(b"NONE", 24, channels, rate, whole as u32),
            taken: 0,
            left: whole,
        }
    }
}

impl Read for Regroup {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.taken == self.out.len() {
            if self.left == 0 {
                return Ok(0);
            }
            let mut g = [0u8; 12];
            if self.raw.read_exact(&mut g[..self.group]).is_err() {
                return Ok(0);
            }
            self.out.clear();
            self.taken = 0;
            let tops = 2 * self.samples;
            for k in 0..self.samples {
                let low = match self.wide {
                    true => g[tops + k],
                    false => (g[tops + k / 2] << (4 * (k % 2))) & 0xF0,
                };
                self.out.extend_from_slice(&[g[2 * k], g[2 * k + 1], low]);
            }
            let keep = (self.out.len() as u64).min(self.left) as usize;
            self.out.truncate(keep);
            self.left -= keep as u64;
        }
        let n = (self.out.len() - self.taken).min(buf.len());
        buf[..n].copy_from_slice(&self.out[self.taken..self.taken + n]);
        self.taken += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An MPEG-2 pack header.
    fn pack() -> Vec<u8> {
        let mut p = PACK.to_vec();
        p.extend_from_slice(&[0x44, 0, 4, 0, 4, 1, 1, 0x89, 0xC3, 0xF8]);
        p
    }

    /// A PES packet of `sid` with an MPEG-2 header (a PTS) and `data`.
    fn pes(sid: u8, data: &[u8]) -> Vec<u8> {
        let mut p = vec![0, 0, 1, sid];
        p.extend_from_slice(&((3 + 5 + data.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0x81, 0x80, 5, 0x21, 0, 1, 0, 1]);
        p.extend_from_slice(data);
        p
    }

    fn read_all(file: Vec<u8>) -> Result<(Vec<u8>, &'static str), PsError> {
        let mut a = open(Box::new(std::io::Cursor::new(file)))?;
        let mut out = Vec::new();
        a.reader.read_to_end(&mut out).unwrap();
        Ok((out, a.ext))
    }

    #[test]
    fn the_first_audio_streams_payloads_read_in_order() {
        let ac3 = |sub: u8, d: &[u8]| pes(PRIVATE_1, &[&[sub, 1, 0, 1][..], d].concat());
        let file = [
            pack(),
            pes(0xE0, &[9; 20]),              // video
            pes(PRIVATE_1, &[0x20, 7, 7, 7]), // a subtitle
            ac3(0x80, &[1, 2, 3]),
            ac3(0x81, &[8, 8]), // another AC-3 stream
            pack(),
            vec![0x55, 0x55], // junk, passed over
            ac3(0x80, &[4, 5]),
            pes(0xC0, &[6, 6]), // MPEG audio, second
            vec![0, 0, 1, 0xB9],
        ]
        .concat();
        assert_eq!(read_all(file).unwrap(), (vec![1, 2, 3, 4, 5], "ac3"));
        let mpeg1 = [
            pack(),
            // MPEG-1's header: stuffing, buffer size, a PTS.
            vec![
                0, 0, 1, 0xC0, 0, 11, 0xFF, 0x40, 0, 0x21, 0, 1, 0, 1, 0xAA, 0xBB, 0xCC,
            ],
        ]
        .concat();
        assert_eq!(read_all(mpeg1).unwrap(), (vec![0xAA, 0xBB, 0xCC], "mp3"));
    }

    #[test]
    fn lpcm_comes_behind_an_aifc_header_and_others_are_named() {
        // 48 kHz stereo, 16-bit; the second packet cut short by the file's end.
        let lpcm = |d: &[u8]| {
            pes(
                PRIVATE_1,
                &[&[0xA0, 1, 0, 4, 0, 0x01, 0x80][..], d].concat(),
            )
        };
        let mut file = [pack(), lpcm(&[1, 2, 3, 4]), lpcm(&[5, 6, 7, 8, 9, 10])].concat();
        file.truncate(file.len() - 1);
        let (out, ext) = read_all(file).unwrap();
        assert_eq!(ext, "aiff");
        assert!(out.starts_with(b"FORM"));
        assert!(out.ends_with(&[1, 2, 3, 4, 5, 6, 7, 8]), "{out:?}");
        let wide = pes(PRIVATE_1, &[0xA0, 1, 0, 4, 0, 0xC1, 0x80, 0, 0, 0]);
        assert_eq!(
            read_all([pack(), wide].concat()).unwrap_err(),
            PsError::Codec("28-bit DVD LPCM")
        );
        // 24-bit stereo: a group of four samples' top 16 bits, then their low bytes.
        let group = [0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC, 0xDE, 0xF0, 1, 2, 3, 4];
        let l24 = pes(
            PRIVATE_1,
            &[&[0xA0, 1, 0, 4, 0, 0x81, 0x80][..], &group].concat(),
        );
        let (out, ext) = read_all([pack(), l24].concat()).unwrap();
        assert_eq!(ext, "aiff");
        assert!(out.ends_with(&[0x12, 0x34, 1, 0x56, 0x78, 2, 0x9A, 0xBC, 3, 0xDE, 0xF0, 4]));
        // 20-bit mono: groups of two samples, their low nibbles in a byte.
        let group = [0x12, 0x34, 0x56, 0x78, 0xAB, 0x9A, 0xBC, 0xDE, 0xF0, 0xCD];
        let l20 = pes(
            PRIVATE_1,
            &[&[0xA0, 1, 0, 4, 0, 0x40, 0x80][..], &group].concat(),
        );
        let (out, _) = read_all([pack(), l20].concat()).unwrap();
        assert!(out
            .ends_with(&[0x12, 0x34, 0xA0, 0x56, 0x78, 0xB0, 0x9A, 0xBC, 0xC0, 0xDE, 0xF0, 0xD0]));
        assert_eq!(
            read_all([pack(), pes(0xE0, &[1, 2])].concat()).unwrap_err(),
            PsError::NoAudio
        );
        // Cut anywhere: never a panic.
        let file = [pack(), lpcm(&[1, 2, 3, 4]), pes(0xC0, &[1])].concat();
        for cut in 0..file.len() {
            let _ = read_all(file[..cut].to_vec());
        }
    }
}
