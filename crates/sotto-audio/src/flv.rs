//! FLV (`.flv`: OBS Studio's recordings, live-stream captures, Flash-era video), which
//! symphonia does not read. Its audio tags, interleaved with the video's, hold AAC, MP3,
//! PCM, G.711, Flash ADPCM or Nellymoser (Flash Player's microphone); they are handed to symphonia one
//! after another as the stream they make: AAC's access units each behind the ADTS header
//! its sequence header (an AudioSpecificConfig) describes, MP3's frames as they are, PCM
//! and G.711 behind a WAV header, Nellymoser and Speex decoded by sotto (`nelly.rs`,
//! `speex/`) into a float WAV, Flash ADPCM (`adpcm_swf.rs`) into a 16-bit one. Only the tag headers are read to find them (the video is never read), and a
//! recording cut short (a crash mid-stream) keeps the tags it has.

use std::io::{Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

use crate::avi::AviAudio;

/// Whether a file starting with `head` is an FLV file (version 1).
pub(crate) fn is_flv(head: &[u8]) -> bool {
    head.starts_with(b"FLV\x01")
}

/// Most tags walked (an hour at 30 video and 43 audio tags a second holds ~260 thousand).
const MAX_TAGS: usize = 1 << 24;

/// Why an FLV file gives no audio to decode.
#[derive(Debug, PartialEq)]
pub(crate) enum FlvError {
    /// No audio tags.
    NoAudio,
    /// Audio in a codec sotto does not decode: its name.
    Codec(&'static str),
    /// The header is malformed, or the audio's description is.
    Corrupt(String),
}

/// An audio tag's SoundFormat (FLV 10.1 §E.4.2.1).
mod format {
    pub const PCM: u8 = 0;
    pub const ADPCM: u8 = 1;
    pub const MP3: u8 = 2;
    pub const PCM_LE: u8 = 3;
    pub const NELLYMOSER_16K: u8 = 4;
    pub const NELLYMOSER_8K: u8 = 5;
    pub const NELLYMOSER: u8 = 6;
    pub const ALAW: u8 = 7;
    pub const MULAW: u8 = 8;
    pub const EX_HEADER: u8 = 9;
    pub const AAC: u8 = 10;
    pub const SPEEX: u8 = 11;
    pub const MP3_8K: u8 = 14;
}

/// The first audio stream of an FLV file, as the file symphonia decodes (of the format
/// `ext` names).
pub(crate) struct FlvAudio {
    pub(crate) reader: Box<dyn Read + Send + Sync>,
    pub(crate) ext: &'static str,
}

/// Nellymoser's blocks held in memory at the most (16 kHz is 4 KB a second: 4 hours).
const MAX_NELLY: u64 = 64 << 20;

/// The first audio stream of an FLV file, read as the file symphonia decodes.
pub(crate) fn open(mut src: Box<dyn MediaSource>) -> Result<FlvAudio, FlvError> {
    let corrupt = |e: std::io::Error| FlvError::Corrupt(e.to_string());
    let len = match src.byte_len() {
        Some(n) => n,
        None => src.seek(SeekFrom::End(0)).map_err(corrupt)?,
    };
    let mut head = [0u8; 9];
    src.seek(SeekFrom::Start(0)).map_err(corrupt)?;
    src.read_exact(&mut head).map_err(corrupt)?;
    let header = u64::from(u32::from_be_bytes([head[5], head[6], head[7], head[8]]));
    if header < 9 {
        return Err(FlvError::Corrupt(format!("a header of {header} bytes")));
    }
    // Past the header and the first PreviousTagSize.
    let mut at = header + 4;
    // The first audio tag's flags: its codec, and PCM's rate, width and channels.
    let mut first: Option<u8> = None;
    let mut config: Option<Vec<u8>> = None;
    let mut chunks = Vec::new();
    // Each chunk's first byte (Flash ADPCM's code size).
    let mut firsts = Vec::new();
    for _ in 0..MAX_TAGS {
        let mut tag = [0u8; 13];
        if at + 11 > len || src.seek(SeekFrom::Start(at)).is_err() {
            break;
        }
        // The tag's header, and its data's first two bytes (an audio tag's flags and
        // AAC's packet type).
        let got = read_up_to(&mut *src, &mut tag).map_err(corrupt)?;
        if got < 11 {
            break;
        }
        let size = u64::from(u32::from_be_bytes([0, tag[1], tag[2], tag[3]]));
        let data = at + 11;
        at = data + size + 4;
        // Audio (8); bit 5 marks an encrypted tag (Adobe Access), which nothing decodes.
        if tag[0] & 0x1F != 8 || size == 0 {
            continue;
        }
        if tag[0] & 0x20 != 0 {
            return Err(FlvError::Codec("encrypted FLV audio"));
        }
        let sound = tag[11] >> 4;
        match first {
            None => first = Some(tag[11]),
            // A stream that changes codec: the first one's tags alone.
            Some(f) if f >> 4 != sound => continue,
            Some(_) => {}
        }
        if sound == format::AAC {
            if size < 2 || got < 13 {
                continue;
            }
            if tag[12] == 0 {
                // The sequence header: the AudioSpecificConfig.
                if config.is_none() {
                    let mut asc = vec![0u8; (size - 2).min(64) as usize];
                    src.seek(SeekFrom::Start(data + 2)).map_err(corrupt)?;
                    let n = read_up_to(&mut *src, &mut asc).map_err(corrupt)?;
                    asc.truncate(n);
                    config = Some(asc);
                }
            } else {
                chunks.push((data + 2, size - 2));
            }
        } else {
            chunks.push((data + 1, size - 1));
            firsts.push(if got >= 13 { tag[12] } else { 0 });
        }
    }
    let flags = first.ok_or(FlvError::NoAudio)?;
    let (header, ext, adts) = match flags >> 4 {
        format::AAC => {
            let asc = config
                .ok_or_else(|| FlvError::Corrupt("AAC audio without its sequence header".into()))?;
            let adts = adts_template(&asc).map_err(FlvError::Corrupt)?;
            (Vec::new(), "aac", Some(adts))
        }
        format::MP3 | format::MP3_8K => (Vec::new(), "mp3", None),
        format::PCM | format::PCM_LE | format::ALAW | format::MULAW => {
            let data: u64 = chunks.iter().map(|c| c.1).sum();
            (pcm_header(flags, data), "wav", None)
        }
        format::NELLYMOSER_16K | format::NELLYMOSER_8K | format::NELLYMOSER => {
            let rate = match flags >> 4 {
                format::NELLYMOSER_16K => 16_000,
                format::NELLYMOSER_8K => 8_000,
                _ => [5_512, 11_025, 22_050, 44_100][usize::from((flags >> 2) & 3)],
            };
            let total: u64 = chunks.iter().map(|c| c.1).sum();
            if total > MAX_NELLY {
                return Err(FlvError::Codec("more than 4 hours of Nellymoser"));
            }
            let mut blocks = Vec::with_capacity(total as usize);
            for (at, len) in chunks {
                src.seek(SeekFrom::Start(at)).map_err(corrupt)?;
                let got = src
                    .by_ref()
                    .take(len)
                    .read_to_end(&mut blocks)
                    .map_err(corrupt)?;
                if (got as u64) < len {
                    break;
                }
            }
            let len = blocks.len() as u64;
            let blocks = Box::new(std::io::Cursor::new(blocks));
            let pcm =
                crate::codec::DecodedWav::new(blocks, crate::nelly::Nelly::new(), (0, len), rate);
            return Ok(FlvAudio {
                reader: Box::new(pcm),
                ext: "wav",
            });
        }
        format::ADPCM => {
            let rate = [5_512, 11_025, 22_050, 44_100][usize::from((flags >> 2) & 3)];
            let channels = u16::from(flags & 1) + 1;
            let tags = chunks
                .into_iter()
                .zip(firsts)
                .map(|((at, len), first)| (at, len, first))
                .collect();
            let pcm = crate::adpcm_swf::SwfWav::new(src, tags, rate, channels);
            return Ok(FlvAudio {
                reader: Box::new(pcm),
                ext: "wav",
            });
        }
        format::SPEEX => {
            // Flash's Speex: wideband, one packet a tag, no header (as FFmpeg takes it).
            let pcm = crate::speex::PacketsWav::new(src, chunks, 16_000);
            return Ok(FlvAudio {
                reader: Box::new(pcm),
                ext: "wav",
            });
        }
        format::EX_HEADER => return Err(FlvError::Codec("enhanced FLV audio (a FourCC codec)")),
        _ => return Err(FlvError::Codec("an FLV audio format sotto does not know")),
    };
    src.seek(SeekFrom::Start(0)).map_err(corrupt)?;
    let mut audio = AviAudio::with_header(src, header, chunks, ext);
    audio.frame_header = adts;
    Ok(FlvAudio {
        reader: Box::new(audio),
        ext,
    })
}

/// Reads into `buf` until it is full or the source ends; how much was read.
fn read_up_to(src: &mut dyn MediaSource, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match src.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// A WAV header for PCM (8-bit unsigned or 16-bit little-endian), A-law or μ-law audio
/// that an audio tag's `flags` describe, before `data` bytes of it.
fn pcm_header(flags: u8, data: u64) -> Vec<u8> {
    let sound = flags >> 4;
    let channels: u16 = if flags & 1 == 1 { 2 } else { 1 };
    let (tag, rate, bits): (u16, u32, u16) = match sound {
        format::ALAW => (6, 8_000, 8),
        format::MULAW => (7, 8_000, 8),
        _ => {
            // 5.5 kHz is 5512 Hz, as FFmpeg reads it.
            let rate = [5_512, 11_025, 22_050, 44_100][usize::from((flags >> 2) & 3)];
            (1, rate, if flags & 2 == 2 { 16 } else { 8 })
        }
    };
    let block = channels * bits / 8;
    let mut fmt = Vec::with_capacity(16);
    fmt.extend_from_slice(&tag.to_le_bytes());
    fmt.extend_from_slice(&channels.to_le_bytes());
    fmt.extend_from_slice(&rate.to_le_bytes());
    fmt.extend_from_slice(&(rate * u32::from(block)).to_le_bytes());
    fmt.extend_from_slice(&block.to_le_bytes());
    fmt.extend_from_slice(&bits.to_le_bytes());
    if tag != 1 {
        // A WAVEFORMATEX's extra size, which a format but PCM's has.
        fmt.extend_from_slice(&0u16.to_le_bytes());
    }
    crate::avi::wav_header(&fmt, data)
}

/// The ADTS header (ISO 14496-3 §1.A.2.2) of an access unit of AAC that the
/// AudioSpecificConfig `asc` describes, its 13-bit length left zero: the profile, the
/// sampling frequency's index and the channel configuration. HE-AAC's explicit signalling
/// (object type 5 or 29) gives the core's object type and rate, as ADTS carries HE-AAC
/// (the decoder finds the SBR data itself).
pub(crate) fn adts_template(asc: &[u8]) -> Result<[u8; 7], String> {
    let mut r = crate::codec::Bits::new(asc);
    let cut = |_| "an AudioSpecificConfig cut short".to_string();
    let object_type = |r: &mut crate::codec::Bits| -> crate::codec::Parse<u32> {
        match r.get(5)? {
            31 => Ok(32 + r.get(6)?),
            t => Ok(t),
        }
    };
    let mut aot = object_type(&mut r).map_err(cut)?;
    let rate_index = r.get(4).map_err(cut)?;
    if rate_index == 15 {
        return Err("AAC at a sampling rate ADTS cannot name".into());
    }
    let channels = r.get(4).map_err(cut)?;
    if aot == 5 || aot == 29 {
        // The extension's rate, then the core's object type; ADTS carries the core's rate.
        let _extension_rate = r.get(4).map_err(cut)?;
        aot = object_type(&mut r).map_err(cut)?;
    }
    if !(1..=4).contains(&aot) {
        return Err(format!("AAC of object type {aot}, which ADTS cannot carry"));
    }
    if channels == 0 || channels > 7 {
        return Err(format!("AAC of channel configuration {channels}"));
    }
    let profile = aot - 1;
    Ok([
        0xFF,
        0xF1,
        ((profile << 6) | (rate_index << 2) | (channels >> 2)) as u8,
        ((channels & 3) << 6) as u8,
        0,
        0x1F,
        0xFC,
    ])
}

/// `template` with the frame length (header included) of an access unit of `len` bytes.
pub(crate) fn adts_header(template: [u8; 7], len: u64) -> [u8; 7] {
    let frame = (len + 7).min(0x1FFF) as u32;
    let mut h = template;
    h[3] = (h[3] & 0xFC) | (frame >> 11) as u8;
    h[4] = (frame >> 3) as u8;
    h[5] = (((frame & 7) << 5) as u8) | 0x1F;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adts_headers_from_audio_specific_configs() {
        // AAC-LC, 44.1 kHz (index 4), stereo.
        let lc = adts_template(&[0x12, 0x10]).unwrap();
        assert_eq!(lc[..4], [0xFF, 0xF1, 0x50, 0x80]);
        let h = adts_header(lc, 300);
        assert_eq!(
            ((usize::from(h[3] & 3) << 11) | (usize::from(h[4]) << 3) | usize::from(h[5] >> 5)),
            307
        );
        // HE-AAC, explicit: object type 5, 24 kHz core (index 6) of 48 kHz, stereo, then
        // the core's type (2): the core's header.
        let he = adts_template(&[0x2B, 0x11, 0x88, 0x00]).unwrap();
        assert_eq!(he[2], (1 << 6) | (6 << 2));
        assert!(adts_template(&[0x12]).is_err());
        assert!(adts_template(&[0x17, 0x90]).is_err(), "an explicit rate");
        assert!(adts_template(&[0x12, 0x00]).is_err(), "a PCE's channels");
    }
}
