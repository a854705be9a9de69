//! The edit list of an MP4 (`.m4a`, `.mp4`, `.mov`) audio track, which symphonia's MP4
//! reader does not apply: AAC encoders put 1024–2112 samples of priming before the audio,
//! and the edit list says where the audio starts and how long it runs. Without it every
//! timestamp of an `.m4a` transcript comes out ~25–50 ms late.

use std::io::{Read, Seek, SeekFrom};

/// Largest `moov` box read into memory (its sample tables grow with the length: hours of
/// AAC take a few MB).
const MAX_MOOV: u64 = 64 << 20;
/// Most top-level boxes walked before giving up.
const MAX_BOXES: usize = 4096;

/// What the first audio track's edit list keeps of its media, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Edit {
    /// Media before this is not played (the encoder's priming).
    pub start_s: f64,
    /// How long the edit plays; None: to the end.
    pub duration_s: Option<f64>,
}

/// What sotto reads of an MP4 file's `moov` itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Moov {
    /// The first audio track's edit, where it has one.
    pub edit: Option<Edit>,
    /// Whether there is an audio track at all (`hdlr` `soun`), whatever its codec.
    pub sound: bool,
    /// The first audio track's sample entry type (`mp4a`, `ms\0\x11`...), for an error to
    /// name.
    pub sound_entry: Option<[u8; 4]>,
    /// The first audio track's sample entry where its codec is one symphonia leaves
    /// without one: AMR (3GPP's `samr`, `sawb`), Apple's IMA 4:1 (`ima4`), QuickTime's
    /// G.711 (`ulaw`, `alaw`), MPEG audio Layer II (`.mp2`), or ALAC whose magic cookie is
    /// in a `wave` atom (QuickTime's version 1 sound description, as FFmpeg's `.mov`), or
    /// in a WAVE format (`ms` and a format tag; its WAVEFORMATEX is the config), 8-bit
    /// PCM (`twos`, `sowt`; see [`SoundEntry::is_pcm8`]), Apple's GSM (`agsm`),
    /// Nellymoser (`nmos`), or
    /// Vorbis (FFmpeg's `mp4a` of object type 0xDD, `msVo`; its headers the config) and
    /// Speex (`spex`; its header).
    pub coded_track: Option<SoundEntry>,
    /// A sample table (of any track) whose entry count is more than its box holds:
    /// symphonia reserves room for every entry a count claims before reading any, so a
    /// damaged count (billions) would abort the process for want of memory.
    pub overlong_table: Option<&'static str>,
    /// Where in the file the types of the metadata boxes (`udta`, `meta`) of `moov` and
    /// its tracks are. Transcription needs none of them, and symphonia's reader trusts the
    /// sizes of what they hold (a tag's `data` box of 4 GB is reserved before it is read),
    /// so the decoder is shown them as `free`, which it skips.
    pub tags: Vec<u64>,
}

/// Reads the `moov` of `src` when it is an MP4 file; leaves `src` at its start. Anything
/// malformed or absent is the default: the file then decodes as symphonia reads it.
pub(crate) fn read_moov<S: Read + Seek + ?Sized>(src: &mut S) -> Moov {
    let moov = find_moov(src).map_or_else(Moov::default, |(at, moov)| Moov {
        edit: parse_moov(&moov),
        sound: sound_trak(&moov).is_some(),
        sound_entry: sound_entry(&moov),
        coded_track: coded_track(&moov),
        overlong_table: overlong_table(&moov),
        tags: tag_boxes(&moov)
            .into_iter()
            .map(|i| at + i as u64)
            .collect(),
    });
    match src.seek(SeekFrom::Start(0)) {
        Ok(_) => moov,
        Err(_) => Moov::default(),
    }
}

/// [`read_moov`]'s edit.
#[cfg(test)]
fn read_edit<S: Read + Seek + ?Sized>(src: &mut S) -> Option<Edit> {
    read_moov(src).edit
}

/// The `moov` box's body and where it starts, if the file starts with `ftyp`.
fn find_moov<S: Read + Seek + ?Sized>(src: &mut S) -> Option<(u64, Vec<u8>)> {
    src.seek(SeekFrom::Start(0)).ok()?;
    let mut at = 0u64;
    for i in 0..MAX_BOXES {
        let mut head = [0u8; 16];
        src.seek(SeekFrom::Start(at)).ok()?;
        src.read_exact(&mut head[..8]).ok()?;
        let kind: [u8; 4] = head[4..8].try_into().ok()?;
        if i == 0 && &kind != b"ftyp" {
            return None;
        }
        let (size, header) = match u32::from_be_bytes(head[..4].try_into().ok()?) {
            1 => {
                src.read_exact(&mut head[8..16]).ok()?;
                (u64::from_be_bytes(head[8..16].try_into().ok()?), 16)
            }
            0 => return None, // to the end of the file: only `mdat` does that
            n => (u64::from(n), 8),
        };
        if size < header {
            return None;
        }
        if &kind == b"moov" {
            let len = size - header;
            if len > MAX_MOOV {
                return None;
            }
            let mut body = Vec::new();
            src.take(len).read_to_end(&mut body).ok()?;
            return (body.len() as u64 == len).then_some((at + header, body));
        }
        at = at.checked_add(size)?;
    }
    None
}

/// The boxes directly inside `b`: (type, body).
fn boxes(mut b: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 8 {
            return None;
        }
        let size = u32::from_be_bytes(b[..4].try_into().ok()?) as u64;
        let (size, header) = match size {
            1 if b.len() >= 16 => (u64::from_be_bytes(b[8..16].try_into().ok()?), 16),
            0 => (b.len() as u64, 8),
            n => (n, 8),
        };
        if size < header || size > b.len() as u64 {
            return None;
        }
        let (this, rest) = b.split_at(size as usize);
        b = rest;
        Some((&this[4..8], &this[header as usize..]))
    })
}

/// The boxes inside `b` as a reader that trusts their sizes meets them: a box that says
/// it runs past its parent's end is taken to run to that end.
fn boxes_cut(mut b: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    std::iter::from_fn(move || {
        let (size, header) = match u32::from_be_bytes(b.get(..4)?.try_into().ok()?) {
            1 => (be64(b, 8)?, 16usize),
            n => (u64::from(n), 8),
        };
        let end = if size < header as u64 || size > b.len() as u64 {
            b.len()
        } else {
            size as usize
        };
        let (this, rest) = b.split_at(end);
        b = rest;
        Some((this.get(4..8)?, this.get(header..).unwrap_or_default()))
    })
}

/// Where the types of `moov`'s metadata boxes and its tracks' are (see [`Moov::tags`]),
/// as offsets into `moov`.
fn tag_boxes(moov: &[u8]) -> Vec<usize> {
    let offset = |kind: &[u8]| kind.as_ptr() as usize - moov.as_ptr() as usize;
    let is_tag = |kind: &[u8]| kind == b"udta" || kind == b"meta";
    let mut found = Vec::new();
    for (kind, body) in boxes_cut(moov) {
        if is_tag(kind) {
            found.push(offset(kind));
        } else if kind == b"trak" {
            found.extend(
                boxes_cut(body)
                    .filter(|(k, _)| is_tag(k))
                    .map(|(k, _)| offset(k)),
            );
        }
    }
    found
}

/// The first sample table symphonia reads whose entry count its box cannot hold (see
/// [`Moov::overlong_table`]): (box, where its count is, bytes an entry takes).
fn overlong_table(moov: &[u8]) -> Option<&'static str> {
    const TABLES: [(&str, usize, u64); 5] = [
        ("stco", 4, 4),
        ("co64", 4, 8),
        ("stts", 4, 8),
        ("stsc", 4, 12),
        ("stsz", 8, 4),
    ];
    for (_, trak) in boxes_cut(moov).filter(|(k, _)| *k == b"trak") {
        let Some(stbl) = nested(trak, b"mdia")
            .and_then(|m| nested(m, b"minf"))
            .and_then(|m| nested(m, b"stbl"))
        else {
            continue;
        };
        for (kind, body) in boxes_cut(stbl) {
            for (name, count_at, entry) in TABLES {
                // `stsz` lists sizes only where they differ (a size of 0 before the count).
                let listed = name != "stsz" || be32(body, 4) == Some(0);
                if kind != name.as_bytes() || !listed {
                    continue;
                }
                let Some(count) = be32(body, count_at) else {
                    continue;
                };
                let room = body.len().saturating_sub(count_at + 4) as u64;
                if u64::from(count) * entry > room {
                    return Some(name);
                }
            }
        }
    }
    None
}

/// [`child`] among [`boxes_cut`].
fn nested<'a>(b: &'a [u8], kind: &[u8]) -> Option<&'a [u8]> {
    boxes_cut(b).find(|(k, _)| *k == kind).map(|(_, body)| body)
}

fn child<'a>(b: &'a [u8], kind: &[u8]) -> Option<&'a [u8]> {
    boxes(b).find(|(k, _)| *k == kind).map(|(_, body)| body)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The timescale of an `mvhd` or `mdhd` body (versions 0 and 1).
fn timescale(b: &[u8]) -> Option<u32> {
    let at = if *b.first()? == 1 { 20 } else { 12 };
    be32(b, at).filter(|&t| t > 0)
}

/// The first audio track (`hdlr` `soun`): its place among the `trak`s, and its body.
fn sound_track(moov: &[u8]) -> Option<(usize, &[u8])> {
    let sound = |t: &[u8]| {
        child(t, b"mdia")
            .and_then(|m| child(m, b"hdlr"))
            .and_then(|h| h.get(8..12))
            == Some(b"soun")
    };
    boxes(moov)
        .filter(|(k, _)| *k == b"trak")
        .map(|(_, t)| t)
        .enumerate()
        .find(|(_, t)| sound(t))
}

/// The body of the first audio track.
fn sound_trak(moov: &[u8]) -> Option<&[u8]> {
    sound_track(moov).map(|(_, t)| t)
}

/// An audio track's sample entry: the track's number (symphonia's track id: its place
/// among the `trak`s), the entry's type, its channels and rate, and its codec's
/// configuration where sotto reads it (ALAC's cookie, in its `wave` atom).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SoundEntry {
    pub id: u32,
    pub kind: [u8; 4],
    pub channels: u16,
    pub rate: u32,
    pub config: Option<Vec<u8>>,
    /// The track's chunks (file offset, bytes), where sotto reads them itself: QuickTime's
    /// WAVE formats, whose byte counts symphonia's reader takes one a sample frame.
    pub chunks: Option<Vec<(u64, u64)>>,
}

impl SoundEntry {
    /// Whether this is QuickTime's 8-bit PCM, which symphonia refuses: its chunks are read
    /// as AIFF-C's samples.
    pub(crate) fn is_pcm8(&self) -> bool {
        matches!(&self.kind, b"twos" | b"sowt")
    }
}

/// [`Moov::sound_entry`].
fn sound_entry(moov: &[u8]) -> Option<[u8; 4]> {
    let stbl = child(child(child(sound_trak(moov)?, b"mdia")?, b"minf")?, b"stbl")?;
    child(stbl, b"stsd")?.get(12..16)?.try_into().ok()
}

/// The atoms inside the first sample entry of `stsd`, after its fields (more of them in
/// QuickTime's version 1 and 2 sound descriptions).
fn entry_children(stsd: &[u8]) -> Option<&[u8]> {
    let entry = stsd.get(8..8 + usize::try_from(be32(stsd, 8)?).ok()?)?;
    let at = match entry.get(16..18)? {
        [0, 1] => 52,
        [0, 2] => 72,
        _ => 36,
    };
    entry.get(at..)
}

/// Vorbis's headers in an `esds` box: an ES descriptor (0x03) holding a decoder config
/// (0x04) of object type 0xDD (as FFmpeg writes it), whose decoder-specific info (0x05) is
/// the three headers, Xiph-laced.
fn esds_vorbis(esds: &[u8]) -> Option<Vec<u8>> {
    // A descriptor: its tag, then its size in 7-bit groups (high bit: more).
    fn descriptor(b: &[u8], tag: u8) -> Option<&[u8]> {
        let (&t, mut rest) = b.split_first()?;
        if t != tag {
            return None;
        }
        let mut size = 0usize;
        for _ in 0..4 {
            let (&v, r) = rest.split_first()?;
            rest = r;
            size = size << 7 | usize::from(v & 0x7F);
            if v & 0x80 == 0 {
                break;
            }
        }
        rest.get(..size)
    }
    let es = descriptor(esds.get(4..)?, 0x03)?;
    let flags = *es.get(2)?;
    // The ES id and flags, then what the flags say follows: a dependence, a URL, an OCR id.
    let mut at = 3;
    if flags & 0x80 != 0 {
        at += 2;
    }
    if flags & 0x40 != 0 {
        at += 1 + usize::from(*es.get(at)?);
    }
    if flags & 0x20 != 0 {
        at += 2;
    }
    let config = descriptor(es.get(at..)?, 0x04)?;
    if *config.first()? != 0xDD {
        return None;
    }
    crate::vorbis::config(descriptor(config.get(13..)?, 0x05)?)
}

/// The `wave` atom of a version 1 sound description (16 bytes longer than version 0's),
/// the first entry of `stsd`.
fn wave_atom(stsd: &[u8]) -> Option<&[u8]> {
    let entry = stsd.get(8..8 + usize::try_from(be32(stsd, 8)?).ok()?)?;
    if entry.get(16..18)? != [0, 1] {
        return None;
    }
    child(entry.get(52..)?, b"wave")
}

/// Bits a sample of G.722, G.726 and Yamaha's ADPCM take, as FFmpeg reads them (G.726's
/// is the entry's sample size; G.722's and Yamaha's entries say 16 where codes are 4).
fn codec_bits(tag: u16, stsd: &[u8]) -> Option<u16> {
    if tag == crate::g722::WAV_TAG || tag == crate::adpcm_yamaha::WAV_TAG {
        Some(4)
    } else if crate::g726::WAV_TAGS.contains(&tag) {
        Some(u16::from_be_bytes(stsd.get(34..36)?.try_into().ok()?)).filter(|b| (2..=5).contains(b))
    } else {
        None
    }
}

/// The WAVEFORMATEX of a G.722 or G.726 sample entry without a `wave` atom (as FFmpeg
/// writes them): the entry's channels and rate, and the codec's bits a sample, which is
/// all their WAV decoders read.
fn plain_waveformatex(tag: u16, stsd: &[u8]) -> Option<Vec<u8>> {
    let bits = codec_bits(tag, stsd)?;
    let channels = u16::from_be_bytes(stsd.get(32..34)?.try_into().ok()?);
    let rate = u32::from(u16::from_be_bytes(stsd.get(40..42)?.try_into().ok()?));
    let byte_rate = u64::from(rate) * u64::from(bits) * u64::from(channels) / 8;
    let mut fmt = crate::avi::waveformatex(tag, channels, rate, byte_rate, channels, bits);
    fmt.extend(0u16.to_le_bytes());
    Some(fmt)
}

/// The WAVEFORMATEX of Flash ADPCM (as FFmpeg writes it in QuickTime: no `wave` atom, a
/// packet a sample), whose block is a packet: 4096 samples a channel, in the size of
/// the first (`stsz`), 4 bits a sample.
fn swf_format(stsd: &[u8], stbl: &[u8]) -> Option<(Vec<u8>, FrameBytes)> {
    let stsz = child(stbl, b"stsz")?;
    let block = match be32(stsz, 4)? {
        0 => be32(stsz, 12)?,
        n => n,
    };
    let block16 = u16::try_from(block).ok().filter(|&b| b > 0)?;
    let channels = u16::from_be_bytes(stsd.get(32..34)?.try_into().ok()?);
    let rate = u32::from(u16::from_be_bytes(stsd.get(40..42)?.try_into().ok()?));
    let byte_rate = u64::from(rate) * u64::from(block) / 4096;
    let tag = crate::adpcm_swf::WAV_TAG;
    let mut fmt = crate::avi::waveformatex(tag, channels, rate, byte_rate, block16, 4);
    fmt.extend(0u16.to_le_bytes());
    let packets = FrameBytes::Packets {
        frames: 4096,
        bytes: u64::from(block),
    };
    Some((fmt, packets))
}

/// How many bytes a number of sample frames of a WAVE-format entry take: a version 1
/// description's bytes per packet of so many frames, or a codec's bits a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
enum FrameBytes {
    /// `frames` frames in `bytes` (a block of ADPCM).
    Packets { frames: u64, bytes: u64 },
    /// Bits a frame (all channels).
    Bits(u64),
}

impl FrameBytes {
    fn of(self, frames: u64) -> u64 {
        match self {
            FrameBytes::Packets { frames: per, bytes } => frames.div_ceil(per) * bytes,
            FrameBytes::Bits(bits) => (frames * bits).div_ceil(8),
        }
    }
}

fn frame_bytes(tag: u16, stsd: &[u8]) -> Option<FrameBytes> {
    let version = u16::from_be_bytes(stsd.get(24..26)?.try_into().ok()?);
    let (per, bytes) = (be32(stsd, 44), be32(stsd, 52));
    match (version, per, bytes) {
        (1, Some(per @ 1..), Some(bytes @ 1..)) => Some(FrameBytes::Packets {
            frames: u64::from(per),
            bytes: u64::from(bytes),
        }),
        _ => {
            let channels = u16::from_be_bytes(stsd.get(32..34)?.try_into().ok()?);
            let bits = u64::from(codec_bits(tag, stsd)?) * u64::from(channels);
            (bits > 0).then_some(FrameBytes::Bits(bits))
        }
    }
}

/// Every chunk of a track (`stbl`) as (file offset, bytes): the offsets of `stco` or
/// `co64`, the samples of `stsc`, and their sizes in `stsz`: each its own (a size of 0),
/// all alike, or (QuickTime's size of 1 for compressed sound, its samples being frames)
/// what `bytes` makes of the frames.
fn chunk_ranges(stbl: &[u8], bytes: FrameBytes) -> Option<Vec<(u64, u64)>> {
    let offsets: Vec<u64> = if let Some(stco) = child(stbl, b"stco") {
        let n = be32(stco, 4)? as usize;
        (0..n)
            .map(|i| be32(stco, 8 + 4 * i).map(u64::from))
            .collect::<Option<_>>()?
    } else {
        let co64 = child(stbl, b"co64")?;
        let n = be32(co64, 4)? as usize;
        (0..n)
            .map(|i| be64(co64, 8 + 8 * i))
            .collect::<Option<_>>()?
    };
    let stsc = child(stbl, b"stsc")?;
    let runs: Vec<(u64, u64)> = (0..be32(stsc, 4)? as usize)
        .map(|i| {
            Some((
                u64::from(be32(stsc, 8 + 12 * i)?),
                u64::from(be32(stsc, 12 + 12 * i)?),
            ))
        })
        .collect::<Option<_>>()?;
    let stsz = child(stbl, b"stsz")?;
    let (size, count) = (be32(stsz, 4)?, be32(stsz, 8)? as usize);
    let mut sample = 0usize;
    let mut ranges = Vec::with_capacity(offsets.len());
    for (i, &at) in offsets.iter().enumerate() {
        // The last run that starts at or before this chunk (numbered from 1).
        let n = runs
            .iter()
            .rev()
            .find(|r| r.0 <= i as u64 + 1)
            .map_or(0, |r| r.1);
        let len = match size {
            0 => {
                let end = sample.saturating_add(n as usize).min(count);
                (sample..end)
                    .map(|k| be32(stsz, 12 + 4 * k).map(u64::from))
                    .sum::<Option<u64>>()?
            }
            1 => bytes.of(n),
            size => n * u64::from(size),
        };
        sample = sample.saturating_add(n as usize);
        ranges.push((at, len));
    }
    Some(ranges)
}

/// [`Moov::coded_track`].
fn coded_track(moov: &[u8]) -> Option<SoundEntry> {
    let (index, trak) = sound_track(moov)?;
    let stbl = child(child(child(trak, b"mdia")?, b"minf")?, b"stbl")?;
    // Version and flags, the entry count, then the first entry's size and type, and its
    // body: 8 bytes, version, revision and vendor (8), channels, sample size, compression
    // id, packet size, and the rate in 16.16.
    let stsd = child(stbl, b"stsd")?;
    let kind: [u8; 4] = stsd.get(12..16)?.try_into().ok()?;
    let mut config = None;
    let mut chunks = None;
    match &kind {
        b"samr" | b"sawb" | b"ima4" | b"ulaw" | b"alaw" | b".mp2" => {}
        // Vorbis (FFmpeg's: `mp4a` with object type 0xDD, or `msVo`): its headers, from
        // the `esds` or the `glbl` atom; its packets are the samples.
        b"mp4a" => {
            let esds = child(entry_children(stsd)?, b"esds")?;
            config = Some(esds_vorbis(esds)?);
        }
        b"msVo" => {
            config = Some(crate::vorbis::config(child(
                entry_children(stsd)?,
                b"glbl",
            )?)?);
        }
        // Speex (FFmpeg's `spex`): its header in the `glbl` atom.
        b"spex" => {
            let header = child(entry_children(stsd)?, b"glbl")?;
            crate::speex::Config::from_header(header).ok()?;
            config = Some(header.to_vec());
        }
        // Nellymoser (Flash's, as FFmpeg writes it in QuickTime): 64-byte blocks of 256.
        b"nmos" => {
            let blocks = FrameBytes::Packets {
                frames: 256,
                bytes: 64,
            };
            chunks = Some(chunk_ranges(stbl, blocks)?);
        }
        // Apple's GSM 06.10: 33-byte frames of 160 samples.
        b"agsm" => {
            let frames = FrameBytes::Packets {
                frames: 160,
                bytes: 33,
            };
            chunks = Some(chunk_ranges(stbl, frames)?);
        }
        // QuickTime's 8-bit PCM (signed), which symphonia's reader refuses for taking
        // these types for 16 bits: its chunks, a byte a sample.
        b"twos" | b"sowt" if stsd.get(34..36)? == [0, 8] => {
            let channels = u16::from_be_bytes(stsd.get(32..34)?.try_into().ok()?);
            chunks = Some(chunk_ranges(
                stbl,
                FrameBytes::Bits(8 * u64::from(channels)),
            )?);
        }
        b"alac" => {
            // A version 1 sound description (16 bytes more) whose children hold a `wave`
            // atom: `frma`, then the `alac` atom with the cookie.
            config = Some(wave_atom(stsd)?.to_vec());
        }
        [b'm', b's', hi, lo] => {
            // QuickTime's WAVE formats (`ms` and the format tag): the `wave` atom holds an
            // atom of the entry's type whose body is the WAVEFORMATEX (FFmpeg's ADPCM);
            // without one, G.722 and G.726 are known by the entry's own fields. Taken
            // where a WAV file of it decodes.
            let tag = u16::from_be_bytes([*hi, *lo]);
            let swf = (tag == crate::adpcm_swf::WAV_TAG).then(|| swf_format(stsd, stbl));
            let fmt = match (wave_atom(stsd).and_then(|w| child(w, &kind)), &swf) {
                (Some(fmt), _) => fmt.to_vec(),
                (None, Some(swf)) => swf.as_ref()?.0.clone(),
                (None, None) => plain_waveformatex(tag, stsd)?,
            };
            if !crate::avi::format_tag(&fmt).is_some_and(crate::avi::wav_tag_decoded) {
                return None;
            }
            let bytes = match swf {
                Some(swf) => swf?.1,
                None => frame_bytes(tag, stsd)?,
            };
            chunks = Some(chunk_ranges(stbl, bytes)?);
            config = Some(fmt);
        }
        _ => return None,
    }
    Some(SoundEntry {
        id: u32::try_from(index).ok()?,
        kind,
        channels: u16::from_be_bytes(stsd.get(32..34)?.try_into().ok()?),
        rate: u32::from(u16::from_be_bytes(stsd.get(40..42)?.try_into().ok()?)),
        config,
        chunks,
    })
}

fn parse_moov(moov: &[u8]) -> Option<Edit> {
    let movie_scale = timescale(child(moov, b"mvhd")?)?;
    let trak = sound_trak(moov)?;
    let media_scale = timescale(child(child(trak, b"mdia")?, b"mdhd")?)?;
    let elst = child(child(trak, b"edts")?, b"elst")?;
    let (version, count) = (*elst.first()?, be32(elst, 4)?);
    let entry = if version == 1 { 20 } else { 12 };
    // The first edit that plays media; an empty edit (media time -1) before it would
    // delay the track, which a transcript of the track alone ignores.
    (0..count.min(64) as usize).find_map(|i| {
        let at = 8 + i * entry;
        let (duration, media_time) = if version == 1 {
            (be64(elst, at)?, be64(elst, at + 8)? as i64)
        } else {
            (
                u64::from(be32(elst, at)?),
                i64::from(be32(elst, at + 4)? as i32),
            )
        };
        (media_time >= 0).then(|| Edit {
            start_s: media_time as f64 / f64::from(media_scale),
            duration_s: (duration > 0).then(|| duration as f64 / f64::from(movie_scale)),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn chunks_are_sized_by_stsz_or_by_the_sound_description() {
        let words = |w: &[u32]| w.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
        // Two chunks at 100 and 5000: 3 samples, then 2 (from chunk 2 on).
        let stco = bx(b"stco", &words(&[0, 2, 100, 5000]));
        let stsc = bx(b"stsc", &words(&[0, 2, 1, 3, 1, 2, 2, 1]));
        let table = |stsz: &[u32]| [stco.clone(), stsc.clone(), bx(b"stsz", &words(stsz))].concat();
        let packets = FrameBytes::Packets {
            frames: 2,
            bytes: 512,
        };
        // Each sample its own size.
        let own = table(&[0, 0, 5, 10, 20, 30, 40, 50]);
        assert_eq!(
            chunk_ranges(&own, packets),
            Some(vec![(100, 60), (5000, 90)])
        );
        // QuickTime's 1: the samples are frames, two to a 512-byte packet (the last whole).
        let frames = table(&[0, 1, 5]);
        assert_eq!(
            chunk_ranges(&frames, packets),
            Some(vec![(100, 1024), (5000, 512)])
        );
        assert_eq!(
            chunk_ranges(&frames, FrameBytes::Bits(4)),
            Some(vec![(100, 2), (5000, 1)])
        );
        // All alike.
        let alike = table(&[0, 7, 5]);
        assert_eq!(
            chunk_ranges(&alike, packets),
            Some(vec![(100, 21), (5000, 14)])
        );
        // A table cut short is no table.
        assert_eq!(chunk_ranges(&table(&[0, 0, 5, 10]), packets), None);
    }

    fn bx(kind: &[u8], body: &[u8]) -> Vec<u8> {
        let mut b = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(body);
        b
    }

    /// An MP4 with one audio track: movie timescale 1000, media 22050, and `elst` entries
    /// (duration, media time).
    fn mp4(edits: &[(u32, i32)]) -> Vec<u8> {
        let mut mvhd = vec![0u8; 100];
        mvhd[12..16].copy_from_slice(&1000u32.to_be_bytes());
        let mut mdhd = vec![0u8; 24];
        mdhd[12..16].copy_from_slice(&22050u32.to_be_bytes());
        let mut hdlr = vec![0u8; 24];
        hdlr[8..12].copy_from_slice(b"soun");
        let mut elst = vec![0u8; 4];
        elst.extend_from_slice(&(edits.len() as u32).to_be_bytes());
        for &(d, t) in edits {
            elst.extend_from_slice(&d.to_be_bytes());
            elst.extend_from_slice(&t.to_be_bytes());
            elst.extend_from_slice(&0x0001_0000u32.to_be_bytes());
        }
        let mdia = [bx(b"mdhd", &mdhd), bx(b"hdlr", &hdlr)].concat();
        let trak = [bx(b"edts", &bx(b"elst", &elst)), bx(b"mdia", &mdia)].concat();
        let moov = [bx(b"mvhd", &mvhd), bx(b"trak", &trak)].concat();
        [
            bx(b"ftyp", b"M4A \0\0\0\0"),
            bx(b"mdat", &[0; 40]),
            bx(b"moov", &moov),
        ]
        .concat()
    }

    #[test]
    fn the_priming_and_length_of_the_audio_track() {
        let mut f = Cursor::new(mp4(&[(500, 1024)]));
        let e = read_edit(&mut f).unwrap();
        assert!((e.start_s - 1024.0 / 22050.0).abs() < 1e-12);
        assert_eq!(e.duration_s, Some(0.5));
        assert_eq!(f.position(), 0, "left at the start for the decoder");
        // An empty edit first is skipped.
        let e = read_edit(&mut Cursor::new(mp4(&[(100, -1), (500, 2112)]))).unwrap();
        assert!((e.start_s - 2112.0 / 22050.0).abs() < 1e-12);
    }

    #[test]
    fn no_edit_or_not_mp4_is_none() {
        assert_eq!(read_edit(&mut Cursor::new(mp4(&[]))), None);
        assert_eq!(read_edit(&mut Cursor::new(b"RIFF....WAVE".to_vec())), None);
        assert_eq!(read_edit(&mut Cursor::new(Vec::new())), None);
    }

    #[test]
    fn a_table_longer_than_its_box_is_named() {
        let mut stsc = vec![0u8; 4];
        stsc.extend_from_slice(&1u32.to_be_bytes());
        stsc.extend_from_slice(&[0; 12]);
        let file = |stsc: &[u8]| {
            let stbl = bx(b"stbl", &bx(b"stsc", stsc));
            let trak = bx(b"mdia", &bx(b"minf", &stbl));
            let moov = bx(b"trak", &trak);
            [bx(b"ftyp", b"M4A \0\0\0\0"), bx(b"moov", &moov)].concat()
        };
        assert_eq!(
            read_moov(&mut Cursor::new(file(&stsc))).overlong_table,
            None
        );
        stsc[4..8].copy_from_slice(&0xAAAA_AAABu32.to_be_bytes());
        let moov = read_moov(&mut Cursor::new(file(&stsc)));
        assert_eq!(moov.overlong_table, Some("stsc"));
        // The shipped fixtures' tables are whole.
        for f in ["tones.m4a", "jfk.m4a", "tones.51.m4a"] {
            let path = format!("{}/tests/fixtures/{f}", env!("CARGO_MANIFEST_DIR"));
            let moov = read_moov(&mut std::fs::File::open(path).unwrap());
            assert!(moov.sound && moov.overlong_table.is_none(), "{f}");
        }
    }

    proptest::proptest! {
        /// Damaged files (any byte changed, or cut short) give None or an edit, never a
        /// panic, and leave the reader at the start.
        #[test]
        fn damaged_files_do_not_panic(at in 0usize..400, v in proptest::num::u8::ANY, cut in 0usize..400) {
            let mut b = mp4(&[(500, 1024)]);
            let n = b.len();
            b[at % n] = v;
            b.truncate(n - cut % n);
            let mut f = Cursor::new(b);
            let _ = read_edit(&mut f);
            proptest::prop_assert_eq!(f.position(), 0);
        }
    }
}
