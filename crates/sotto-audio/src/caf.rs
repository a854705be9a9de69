//! A check on CAF files before symphonia reads them: its reader reserves room for every
//! packet a packet table (`pakt`) claims before reading any, and for a magic cookie
//! (`kuki`) of the size its chunk claims, so a damaged count or size (billions) would abort
//! the process for want of memory.

use std::io::{Read, Seek, SeekFrom};

/// Most chunks walked (a real file has a handful); more is taken for damage.
const MAX_CHUNKS: usize = 4096;

/// What of `src`, a CAF file, claims more than it holds, at the places symphonia's reader
/// will look for it: its packet table (more packets than its chunk has bytes, each taking
/// one at least, or a packet larger than the file), its magic cookie (more bytes than the
/// file has) or its frames (so large that the 1152 symphonia reads at a time would be
/// larger than the file and 1 MiB); leaves `src` at its start.
pub(crate) fn overlong_chunk<S: Read + Seek + ?Sized>(src: &mut S) -> Option<&'static str> {
    let overlong = walk(src).flatten();
    let _ = src.seek(SeekFrom::Start(0));
    overlong
}

/// Walks the chunks as symphonia's reader does, which is not always by their sizes: it
/// reads a channel layout (`chan`) and a packet table by their contents, and an audio
/// chunk of unknown size (-1) is followed by more chunks read from its first bytes. `None`
/// where symphonia's reader stops with an error of its own (or the file ends) before
/// reserving anything.
fn walk<S: Read + Seek + ?Sized>(src: &mut S) -> Option<Option<&'static str>> {
    let len = src.seek(SeekFrom::End(0)).ok()?;
    src.seek(SeekFrom::Start(0)).ok()?;
    let mut head = [0u8; 8];
    src.read_exact(&mut head).ok()?;
    if &head[..4] != b"caff" {
        return Some(None);
    }
    let mut at = 8u64;
    // Bytes and frames a packet, from `desc`: which fields a packet table's entries have.
    let mut packet = None;
    let mut data = None;
    for _ in 0..MAX_CHUNKS {
        if at == len {
            // Uncompressed audio is read 1152 frames at a time (of `desc`'s bytes a packet),
            // the audio chunk's size allowing.
            let (bytes, _) = packet?;
            let read = (u64::from(bytes) * 1152).min(data.unwrap_or(u64::MAX));
            return Some(
                (read > len.max(1 << 20)).then_some("CAF frames are larger than the file"),
            );
        }
        let mut chunk = [0u8; 12];
        src.seek(SeekFrom::Start(at)).ok()?;
        src.read_exact(&mut chunk).ok()?;
        let size = i64::from_be_bytes(chunk[4..12].try_into().ok()?);
        let body = at + 12;
        let left = len.saturating_sub(body);
        let mut field = [0u8; 24];
        at = match &chunk[..4] {
            b"desc" if size == 32 => {
                src.read_exact(&mut field).ok()?;
                let word = |i: usize| u32::from_be_bytes(field[i..i + 4].try_into().unwrap());
                packet = Some((word(16), word(20)));
                body + 32
            }
            b"data" if size == -1 => {
                data = None;
                body + 4
            }
            b"data" if size >= 4 => {
                data = Some(size as u64 - 4);
                body.checked_add(size as u64)?
            }
            b"chan" if size >= 12 => {
                src.read_exact(&mut field[..12]).ok()?;
                let descriptions = u32::from_be_bytes(field[8..12].try_into().unwrap());
                body + 12 + 20 * u64::from(descriptions)
            }
            b"pakt" if size >= 24 => {
                let (bytes, frames) = packet?;
                src.read_exact(&mut field).ok()?;
                let packets = i64::from_be_bytes(field[..8].try_into().unwrap());
                let valid = i64::from_be_bytes(field[8..16].try_into().unwrap());
                if packets < 0 || valid < 0 {
                    return None;
                }
                if size as u64 > left || packets > size - 24 {
                    return Some(Some("CAF packet table claims more packets than it holds"));
                }
                // Each entry: a size where `desc` has none, then frames where it has none.
                let (sizes, numbers) = match (bytes, frames) {
                    (0, 0) => (Sizes::Even, 2 * packets as u64),
                    (0, _) => (Sizes::All, packets as u64),
                    (_, 0) => (Sizes::None, packets as u64),
                    _ if packets > 0 => return None,
                    _ => (Sizes::None, 0),
                };
                let (used, largest) = numbers_end(src, numbers, sizes)?;
                if largest > len || (packets > 0 && sizes == Sizes::None && u64::from(bytes) > len)
                {
                    return Some(Some("CAF packet table has a packet larger than the file"));
                }
                body + 24 + used
            }
            b"kuki" if u64::try_from(size).map_or(true, |n| n > left) => {
                return Some(Some("CAF magic cookie runs past the end of the file"));
            }
            b"desc" | b"data" | b"chan" | b"pakt" => return None,
            _ => body.checked_add(u64::try_from(size).ok()?)?,
        };
    }
    Some(Some("CAF file has thousands of chunks"))
}

/// Which of a packet table's numbers are packet sizes.
#[derive(Clone, Copy, PartialEq)]
enum Sizes {
    None,
    All,
    Even,
}

/// The bytes `count` variable-length numbers take (7 bits a byte, the last byte's top bit
/// clear, at most 9 bytes), read from where `src` stands, and the largest of those that
/// are `sizes`; `None` at the file's end or at a number of 9 bytes that goes on, where
/// symphonia's reader stops too.
fn numbers_end<S: Read + ?Sized>(src: &mut S, count: u64, sizes: Sizes) -> Option<(u64, u64)> {
    let mut buf = vec![0u8; 1 << 16];
    let (mut used, mut done, mut run, mut value, mut largest) = (0u64, 0u64, 0u32, 0u64, 0u64);
    while done < count {
        let n = src.read(&mut buf).ok().filter(|&n| n > 0)?;
        for &byte in &buf[..n] {
            used += 1;
            run += 1;
            value = value << 7 | u64::from(byte & 0x7f);
            if byte & 0x80 == 0 {
                let is_size = match sizes {
                    Sizes::None => false,
                    Sizes::All => true,
                    Sizes::Even => done % 2 == 0,
                };
                if is_size {
                    largest = largest.max(value);
                }
                done += 1;
                (run, value) = (0, 0);
                if done == count {
                    return Some((used, largest));
                }
            } else if run == 9 {
                return None;
            }
        }
    }
    Some((used, largest))
}

/// A CAF file's `desc` chunk (always its first): the rate, the format and its flags
/// (bit 0: float), bytes and frames a packet, channels, bits.
struct Desc {
    rate: u32,
    format: [u8; 4],
    flags: u32,
    packet_bytes: u32,
    packet_frames: u32,
    channels: u16,
    bits: u32,
}

fn desc(head: &[u8]) -> Option<Desc> {
    let field = |at: usize| Some(u32::from_be_bytes(head.get(at..at + 4)?.try_into().ok()?));
    if !head.starts_with(b"caff") || head.get(8..12)? != b"desc" {
        return None;
    }
    let rate = f64::from_be_bytes(head.get(20..28)?.try_into().ok()?);
    if rate.fract() != 0.0 || !(1.0..=768_000.0).contains(&rate) {
        return None;
    }
    Some(Desc {
        rate: rate as u32,
        format: head.get(28..32)?.try_into().ok()?,
        flags: field(32)?,
        packet_bytes: field(36)?,
        packet_frames: field(40)?,
        channels: u16::try_from(field(44)?)
            .ok()
            .filter(|c| (1..=32).contains(c))?,
        bits: field(48)?,
    })
}

/// What sotto reads of a CAF file in a format symphonia's CAF reader refuses.
pub(crate) enum Coded {
    /// 8-bit integer PCM (signed, as FFmpeg's `pcm_s8`): channels, rate, the samples.
    Pcm8(u16, u32, (u64, u64)),
    /// The data behind a head of `ext`'s format: a WAV header made from `desc` for a WAV
    /// format (`ms` and its tag, as FFmpeg writes IMA and Microsoft ADPCM in CAF); nothing
    /// for AC-3's syncframes; `fLaC` and a STREAMINFO made from `desc` and the first frame
    /// for FLAC without a magic cookie (as FFmpeg writes it).
    Behind(Vec<u8>, &'static str, (u64, u64)),
    /// Apple's GSM 06.10 (`agsm`: 33-byte frames of 160 samples, mono): the rate, frames.
    Gsm(u32, (u64, u64)),
}

/// `src`, a CAF file at its start with `head`, where its format is one of [`Coded`]'s
/// (its data: offset, bytes, cut to the file); leaves `src` at its start.
pub(crate) fn coded<S: Read + Seek + ?Sized>(src: &mut S, head: &[u8]) -> Option<Coded> {
    let d = desc(head)?;
    let kind = match &d.format {
        b"lpcm" if d.bits == 8 && d.flags & 1 == 0 => 0,
        [b'm', b's', 0, 0x02 | 0x11] if d.packet_bytes > 0 && d.packet_frames > 0 => 1,
        b"ac-3" => 2,
        b"agsm" if d.channels == 1 => 3,
        b"flac" => 4,
        _ => return None,
    };
    let found = data_chunk(src);
    // FLAC's first frame, which says what FFmpeg's files leave out.
    let mut first = [0u8; 16];
    if let Some(((at, _), _)) = found {
        let _ = src
            .seek(SeekFrom::Start(at))
            .and_then(|_| src.read(&mut first));
    }
    src.seek(SeekFrom::Start(0)).ok()?;
    let (data, cookie) = found?;
    Some(match kind {
        0 => Coded::Pcm8(d.channels, d.rate, data),
        1 => {
            let header = crate::avi::wav_header(&waveformatex(&d)?, data.1);
            Coded::Behind(header, "wav", data)
        }
        2 => Coded::Behind(Vec::new(), "ac3", data),
        3 => Coded::Gsm(d.rate, data),
        // With a cookie (Apple's files), symphonia's reader takes it.
        _ if cookie => return None,
        _ => {
            let head = crate::avi::flac_stream_head(d.channels, d.rate, None, &first)?;
            Coded::Behind(head, "flac", data)
        }
    })
}

/// The WAVEFORMATEX of IMA or Microsoft ADPCM packets that `d` describes: its block is
/// the packet, its samples a block the packet's frames (Microsoft's with the standard
/// seven coefficient pairs, which are all FFmpeg writes).
fn waveformatex(d: &Desc) -> Option<Vec<u8>> {
    let tag = u16::from(d.format[3]);
    let block = u16::try_from(d.packet_bytes).ok()?;
    let frames = u16::try_from(d.packet_frames).ok()?;
    let byte_rate = u64::from(d.rate) * u64::from(block) / u64::from(frames);
    let mut f = crate::avi::waveformatex(tag, d.channels, d.rate, byte_rate, block, 4);
    if tag == 0x11 {
        f.extend(2u16.to_le_bytes());
        f.extend(frames.to_le_bytes());
    } else {
        const COEFFICIENTS: [(i16, i16); 7] = [
            (256, 0),
            (512, -256),
            (0, 0),
            (192, 64),
            (240, 0),
            (460, -208),
            (392, -232),
        ];
        f.extend(32u16.to_le_bytes());
        f.extend(frames.to_le_bytes());
        f.extend(7u16.to_le_bytes());
        for (a, b) in COEFFICIENTS {
            f.extend(a.to_le_bytes());
            f.extend(b.to_le_bytes());
        }
    }
    Some(f)
}

/// The samples of the `data` chunk (after its edit count), to its end or the file's.
/// And whether a magic cookie (`kuki`) comes before it.
fn data_chunk<S: Read + Seek + ?Sized>(src: &mut S) -> Option<((u64, u64), bool)> {
    let len = src.seek(SeekFrom::End(0)).ok()?;
    let mut at = 8u64;
    let mut cookie = false;
    for _ in 0..MAX_CHUNKS {
        let mut chunk = [0u8; 12];
        src.seek(SeekFrom::Start(at)).ok()?;
        src.read_exact(&mut chunk).ok()?;
        let size = i64::from_be_bytes(chunk[4..12].try_into().ok()?);
        let body = at + 12;
        match &chunk[..4] {
            b"data" => {
                let end = u64::try_from(size).map_or(len, |n| body.saturating_add(n).min(len));
                return Some(((body + 4, end.checked_sub(body + 4)?), cookie));
            }
            b"kuki" => cookie = true,
            _ => {}
        }
        at = body.checked_add(u64::try_from(size).ok()?)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn caf(packets: i64, table: &[u8]) -> Vec<u8> {
        let mut b = b"caff\0\x01\0\0".to_vec();
        b.extend_from_slice(b"desc");
        b.extend_from_slice(&32i64.to_be_bytes());
        b.extend_from_slice(&[0; 32]);
        b.extend_from_slice(b"pakt");
        b.extend_from_slice(&(24 + table.len() as i64).to_be_bytes());
        b.extend_from_slice(&packets.to_be_bytes());
        b.extend_from_slice(&[0; 16]);
        b.extend_from_slice(table);
        b
    }

    #[test]
    fn a_packet_table_longer_than_its_chunk_is_found() {
        let mut f = Cursor::new(caf(3, &[5, 7, 9]));
        assert_eq!(overlong_chunk(&mut f), None);
        assert_eq!(f.position(), 0);
        let long = overlong_chunk(&mut Cursor::new(caf(1 << 40, &[5, 7, 9])));
        assert!(long.is_some_and(|what| what.contains("packet table")));
        assert_eq!(
            overlong_chunk(&mut Cursor::new(b"RIFF....WAVE".to_vec())),
            None
        );
        assert_eq!(overlong_chunk(&mut Cursor::new(Vec::new())), None);
    }

    #[test]
    fn a_magic_cookie_past_the_file_is_found() {
        let cookie = |size: i64| {
            let mut b = b"caff\0\x01\0\0kuki".to_vec();
            b.extend_from_slice(&size.to_be_bytes());
            b.extend_from_slice(&[0; 24]);
            b
        };
        assert_eq!(overlong_chunk(&mut Cursor::new(cookie(24))), None);
        for size in [25, 1 << 37, -5] {
            let long = overlong_chunk(&mut Cursor::new(cookie(size)));
            assert!(
                long.is_some_and(|what| what.contains("magic cookie")),
                "{size}"
            );
        }
    }

    /// A chunk header: type, size.
    fn chunk(b: &mut Vec<u8>, kind: &[u8; 4], size: i64) {
        b.extend_from_slice(kind);
        b.extend_from_slice(&size.to_be_bytes());
    }

    /// A `desc` chunk of 16-bit stereo of `bytes` and `frames` a packet.
    fn desc(b: &mut Vec<u8>, format: &[u8; 4], bytes: u32, frames: u32) {
        chunk(b, b"desc", 32);
        b.extend_from_slice(&44100f64.to_be_bytes());
        b.extend_from_slice(format);
        b.extend_from_slice(&0u32.to_be_bytes());
        for v in [bytes, frames, 2, 16] {
            b.extend_from_slice(&v.to_be_bytes());
        }
    }

    #[test]
    fn a_cookie_where_symphonia_reads_past_a_channel_layout_is_found() {
        // A `chan` chunk whose size (12) leaves out its one channel description: symphonia
        // reads the description (20 bytes) and takes the bytes after it for the next chunk.
        let file = |cookie: i64| {
            let mut b = b"caff\0\x01\0\0".to_vec();
            desc(&mut b, b"lpcm", 4, 1);
            chunk(&mut b, b"chan", 12);
            b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            chunk(&mut b, b"free", 8);
            b.extend_from_slice(&[0; 8]);
            chunk(&mut b, b"kuki", cookie);
            b.extend_from_slice(&[0; 4]);
            b
        };
        assert_eq!(overlong_chunk(&mut Cursor::new(file(4))), None);
        let long = overlong_chunk(&mut Cursor::new(file(1 << 50)));
        assert!(long.is_some_and(|what| what.contains("magic cookie")));
    }

    #[test]
    fn a_packet_or_frame_larger_than_the_file_is_found() {
        // Variable-size packets (ALAC's, AAC's): the table's sizes.
        let table = |size: &[u8]| {
            let mut b = b"caff\0\x01\0\0".to_vec();
            desc(&mut b, b"alac", 0, 4096);
            chunk(&mut b, b"pakt", 24 + 1 + size.len() as i64);
            b.extend_from_slice(&2i64.to_be_bytes());
            b.extend_from_slice(&[0; 16]);
            b.push(3);
            b.extend_from_slice(size);
            chunk(&mut b, b"data", 4 + 3);
            b.extend_from_slice(&[0; 7]);
            b
        };
        assert_eq!(overlong_chunk(&mut Cursor::new(table(&[4]))), None);
        // 2^40 in eight bytes of seven bits.
        let huge = [0x80 | 0x20, 0x80, 0x80, 0x80, 0x80, 0x80, 0];
        let long = overlong_chunk(&mut Cursor::new(table(&huge)));
        assert!(long.is_some_and(|what| what.contains("packet larger")));
        // PCM is read 1152 frames at a time: 4 GiB frames would be 4.9 TB. (The audio of
        // unknown size, read by symphonia as chunks, is one empty chunk.)
        let pcm = |bytes: u32| {
            let mut b = b"caff\0\x01\0\0".to_vec();
            desc(&mut b, b"lpcm", bytes, 1);
            chunk(&mut b, b"data", -1);
            b.extend_from_slice(&[0; 4 + 12]);
            b
        };
        assert_eq!(overlong_chunk(&mut Cursor::new(pcm(4))), None);
        let long = overlong_chunk(&mut Cursor::new(pcm(u32::MAX)));
        assert!(long.is_some_and(|what| what.contains("frames are larger")));
    }
}
