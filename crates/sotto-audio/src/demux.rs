//! The containers symphonia does not read (AVI, DV, MXF, FLV, Wave64, Sun `.au` and raw
//! telephony files, raw G.722, G.723.1, G.729 and GSM, DSS, MPEG program and transport
//! streams), AIFF-C's IMA 4:1, and the codecs in WAV files that it does not decode, made
//! into what it reads: an elementary stream or a WAV file (decoded as it is read where
//! sotto's own decoder makes PCM of it), with the extension that tells symphonia's probe
//! which; or what one of sotto's own format readers, which no probe finds, opens
//! ([`OwnReader`]). Nothing here decodes a codec: `decode.rs` does, from what this gives.

use std::io::{Read, Seek, SeekFrom};

use symphonia::core::io::{MediaSource, ReadOnlySource};

use crate::decode::corrupt;
use crate::{AudioError, Result};

/// A format reader of sotto's that `decode.rs` opens in place of symphonia's probe.
pub(crate) enum OwnReader {
    /// What the probe finds.
    Probe,
    /// WMA in a WAV file (or an AVI file's, made one): its format and data chunk, for
    /// `wma::WavReader`.
    WmaWav(Vec<u8>, (u64, u64)),
    /// Opus in a transport stream: its PMT's channel configuration, for `ts_opus.rs`.
    OpusTs(Option<u8>),
    /// A stream's packets, each a chunk of the file (Vorbis and Speex in AVI), for
    /// `codec::ChunkReader`.
    Chunks(symphonia::core::codecs::CodecParameters, Vec<(u64, u64)>),
}

/// What [`unwrap`] makes of a file.
pub(crate) struct Unwrapped<'a> {
    pub(crate) src: Box<dyn MediaSource>,
    /// The extension to hint symphonia's probe with.
    pub(crate) ext: Option<&'a str>,
    pub(crate) reader: OwnReader,
    /// Apple's IMA 4:1 in CAF (or AIFF-C, shown as CAF), which symphonia's CAF reader
    /// takes for WAV's IMA ADPCM.
    pub(crate) ima4: bool,
}

/// `src`, a file (`name`) that starts with `head`, hinted `ext`, as [`Unwrapped`] says;
/// the file as it is where it is none of these. Errors name what is missing or refused.
pub(crate) fn unwrap<'a>(
    mut src: Box<dyn MediaSource>,
    head: &[u8],
    name: &str,
    mut ext: Option<&'a str>,
) -> Result<Unwrapped<'a>> {
    let mut reader = OwnReader::Probe;
    let mut ima4 = head.starts_with(b"caff") && head.get(28..32) == Some(b"ima4");
    if head.starts_with(b"fLaC") {
        src = crate::flac_meta::without_tags(src);
    }
    if crate::avi::is_avi(head) {
        use crate::avi::{AviAudio, AviError};
        let mut audio = AviAudio::open(src).map_err(|e| match e {
            AviError::NoAudio => AudioError::Empty {
                input: name.to_string(),
            },
            AviError::Format(tag) => AudioError::Codec {
                input: name.to_string(),
                detail: format!(
                    "WAV format tag {tag:#06x} in AVI (sotto decodes PCM, ADPCM, Flash and Yamaha ADPCM, \
                     A-law, μ-law, GSM, G.722, G.723.1, G.726, G.729, MPEG audio, AAC, AC-3, \
                     DTS, FLAC, Speex, Vorbis and WMA there)"
                ),
            },
            AviError::Corrupt(why) => corrupt(name, format!("AVI: {why}")),
        })?;
        ext = Some(audio.ext);
        src = if audio.dv {
            let (file, frames) = audio.into_parts();
            ext = Some("wav");
            let pcm = crate::dv::DvWav::new(file, frames).map_err(|e| dv_error(name, e))?;
            Box::new(ReadOnlySource::new(pcm))
        } else if audio.speech {
            // A speech codec's WAV file (kilobytes a minute), made in memory for
            // `speech_wav`, which seeks in it.
            let mut wav = Vec::new();
            audio
                .read_to_end(&mut wav)
                .map_err(|source| AudioError::Io {
                    input: name.to_string(),
                    source,
                })?;
            match speech_wav(Box::new(std::io::Cursor::new(wav))) {
                SpeechWav::Decoded(pcm) | SpeechWav::Other(pcm) => pcm,
                SpeechWav::Wma(file, fmt, data) => {
                    reader = OwnReader::WmaWav(fmt, data);
                    file
                }
                SpeechWav::Unsupported(detail) => {
                    return Err(AudioError::Codec {
                        input: name.to_string(),
                        detail: format!("{detail} in AVI"),
                    })
                }
            }
        } else if let Some(params) = audio.packets.take() {
            let (file, chunks) = audio.into_parts();
            reader = OwnReader::Chunks(params, chunks);
            file
        } else {
            Box::new(ReadOnlySource::new(audio))
        };
    } else if crate::dv::is_dv(head) {
        let audio = crate::dv::DvWav::raw(src).map_err(|e| dv_error(name, e))?;
        ext = Some("wav");
        src = Box::new(ReadOnlySource::new(audio));
    } else if crate::mxf::is_mxf(head) {
        use crate::mxf::MxfError;
        let audio = crate::mxf::open(src).map_err(|e| match e {
            MxfError::NoAudio => AudioError::Empty {
                input: name.to_string(),
            },
            MxfError::Codec(what) => AudioError::Codec {
                input: name.to_string(),
                detail: format!("MXF: {what}"),
            },
            MxfError::Corrupt(why) => corrupt(name, format!("MXF: {why}")),
        })?;
        ext = Some("wav");
        src = Box::new(ReadOnlySource::new(audio));
    } else if crate::flv::is_flv(head) {
        use crate::flv::FlvError;
        let audio = crate::flv::open(src).map_err(|e| match e {
            FlvError::NoAudio => AudioError::Empty {
                input: name.to_string(),
            },
            FlvError::Codec(what) => AudioError::Codec {
                input: name.to_string(),
                detail: format!(
                    "{what} (sotto decodes AAC, MP3, PCM, G.711, ADPCM, Nellymoser and Speex there)"
                ),
            },
            FlvError::Corrupt(why) => corrupt(name, format!("FLV: {why}")),
        })?;
        ext = Some(audio.ext);
        src = Box::new(ReadOnlySource::new(audio.reader));
    } else if crate::w64::is_w64(head) {
        let audio = crate::w64::open(src)
            .ok_or_else(|| corrupt(name, "Wave64: no format chunk before the data"))?;
        ext = Some(audio.ext);
        src = Box::new(ReadOnlySource::new(audio));
    } else if let Some(coded) = crate::caf::coded(&mut *src, head) {
        use crate::{avi::AviAudio, caf::Coded};
        src = match coded {
            // 8-bit CAF: the same samples (signed) as AIFF-C's.
            Coded::Pcm8(channels, rate, data) => {
                let audio = crate::au::with_aifc(src, (b"NONE", 8), channels, rate, data);
                ext = Some(audio.ext);
                Box::new(ReadOnlySource::new(audio))
            }
            Coded::Behind(head, format, data) => {
                ext = Some(format);
                let audio = AviAudio::with_header(src, head, vec![data], format);
                Box::new(ReadOnlySource::new(audio))
            }
            Coded::Gsm(rate, (at, len)) => {
                let raw = crate::gsm::GsmBlocks::new(crate::gsm::Packing::Raw);
                let pcm = crate::codec::DecodedWav::new(src, raw, (at, at + len), rate);
                ext = Some("wav");
                Box::new(ReadOnlySource::new(pcm))
            }
        };
    } else if crate::aifc::is_aifc(head) {
        src = match crate::aifc::mend(src) {
            Ok(mended) => {
                ext = Some(mended.ext);
                ima4 = mended.ext == "caf";
                Box::new(mended.src)
            }
            Err(src) => src,
        };
    } else if crate::au::is_au(head) {
        src = match crate::au::open(src).map_err(|e| au_error(name, e))? {
            crate::au::Opened::Aifc(audio) => {
                ext = Some(audio.ext);
                Box::new(ReadOnlySource::new(*audio))
            }
            crate::au::Opened::Decoded(pcm) => {
                ext = Some("wav");
                pcm
            }
        };
    } else if crate::avi::is_wav(head) {
        src = match crate::avi::AviAudio::coded_wav(src, head) {
            Ok(audio) => {
                ext = Some(audio.ext);
                Box::new(ReadOnlySource::new(audio))
            }
            Err(src) => match speech_wav(src) {
                SpeechWav::Decoded(pcm) => {
                    ext = Some("wav");
                    pcm
                }
                SpeechWav::Other(src) => src,
                SpeechWav::Wma(src, fmt, data) => {
                    reader = OwnReader::WmaWav(fmt, data);
                    src
                }
                SpeechWav::Unsupported(detail) => {
                    return Err(AudioError::Codec {
                        input: name.to_string(),
                        detail,
                    })
                }
            },
        };
    } else if let Some(raw) = ext.filter(|e| crate::au::is_raw(e)) {
        let audio = crate::au::open_raw(src, raw).map_err(|e| au_error(name, e))?;
        ext = Some(audio.ext);
        src = Box::new(ReadOnlySource::new(audio));
    } else if ext == Some("g722") {
        let len = src.byte_len().unwrap_or(0);
        let pcm = crate::codec::DecodedWav::new(src, crate::g722::G722::new(), (0, len), 16_000);
        ext = Some("wav");
        src = Box::new(ReadOnlySource::new(pcm));
    } else if matches!(ext, Some("tco" | "rco" | "g723_1")) {
        // Raw G.723.1 frames, by FFmpeg's extensions for them.
        let mut bytes = Vec::new();
        src.read_to_end(&mut bytes)
            .map_err(|source| AudioError::Io {
                input: name.to_string(),
                source,
            })?;
        let stream = crate::g723::frame_stream(bytes, crate::g723::Framing::Plain);
        ext = Some("wav");
        src = Box::new(ReadOnlySource::new(crate::g723::G7231Wav::new(stream)));
    } else if ext == Some("g729") {
        // 8 kbit/s frames, as FFmpeg's raw G.729 reader takes every `.g729` file.
        let len = src.byte_len().unwrap_or(0);
        let pcm =
            crate::codec::DecodedWav::new(src, crate::g729::G729::new(false), (0, len), 8_000);
        ext = Some("wav");
        src = Box::new(ReadOnlySource::new(pcm));
    } else if crate::gsm::is_raw(head, ext) {
        let len = src.byte_len().unwrap_or(0);
        let raw = crate::gsm::GsmBlocks::new(crate::gsm::Packing::Raw);
        let pcm = crate::codec::DecodedWav::new(src, raw, (0, len), 8_000);
        ext = Some("wav");
        src = Box::new(ReadOnlySource::new(pcm));
    } else if crate::dss::is_dss(head) {
        use crate::dss::DssError;
        let pcm = crate::dss::open(src).map_err(|e| match e {
            DssError::Codec(what) => AudioError::Codec {
                input: name.to_string(),
                detail: format!("{what} (sotto decodes DSS's standard and long play)"),
            },
            DssError::Io(why) => corrupt(name, format!("DSS: {why}")),
        })?;
        ext = Some("wav");
        src = Box::new(ReadOnlySource::new(pcm));
    } else if crate::ps::is_ps(head) {
        use crate::ps::PsError;
        let audio = crate::ps::open(src).map_err(|e| match e {
            PsError::NoAudio => AudioError::Empty {
                input: name.to_string(),
            },
            PsError::Codec(what) => AudioError::Codec {
                input: name.to_string(),
                detail: format!(
                    "{what} (sotto decodes MPEG audio, AC-3, DTS, TrueHD and 16- to 24-bit LPCM \
                     in MPEG program streams)"
                ),
            },
            PsError::Io(why) => corrupt(name, format!("MPEG program stream: {why}")),
        })?;
        ext = Some(audio.ext);
        src = Box::new(ReadOnlySource::new(audio.reader));
    } else if head.starts_with(b"OggS") {
        src = crate::ogg_mend::split_lone_pages(src);
    } else if let Some(layout) = crate::ts::layout(head) {
        use crate::ts::{TsAudio, TsError};
        let audio = TsAudio::open(src, layout).map_err(|e| match e {
            TsError::NoAudio => AudioError::Empty {
                input: name.to_string(),
            },
            TsError::Codec(t) => AudioError::Codec {
                input: name.to_string(),
                detail: format!(
                    "stream type {t:#04x} in a transport stream (sotto decodes AAC, in ADTS \
                     or LATM, MPEG audio, AC-3, DTS, TrueHD, Blu-ray LPCM, SMPTE 302M and Opus \
                     there)"
                ),
            },
            TsError::Io(why) => corrupt(name, format!("transport stream: {why}")),
        })?;
        ext = audio.ext;
        if ext == Some("opus-ts") {
            reader = OwnReader::OpusTs(audio.opus_config);
        }
        src = if matches!(ext, Some("bd-lpcm" | "s302m")) {
            // Blu-ray LPCM and SMPTE 302M: their samples as the WAV file they make.
            use crate::ts_pcm::{aes3_refusal, refusal, PcmWav};
            let refused = |what: &str| AudioError::Codec {
                input: name.to_string(),
                detail: what.to_string(),
            };
            let bd = ext == Some("bd-lpcm");
            let header = audio
                .pes_header
                .ok_or_else(|| corrupt(name, "PCM in a transport stream without its header"))?;
            if let Some(what) = if bd {
                refusal(header)
            } else {
                aes3_refusal(header)
            } {
                return Err(refused(what));
            }
            let wav = match bd {
                true => PcmWav::bd(audio, header),
                false => PcmWav::aes3(audio, header),
            };
            ext = Some("wav");
            Box::new(ReadOnlySource::new(
                wav.ok_or_else(|| refused("PCM in a transport stream"))?,
            ))
        } else {
            Box::new(ReadOnlySource::new(audio))
        };
    }
    Ok(Unwrapped {
        src,
        ext,
        reader,
        ima4,
    })
}

/// What a WAV file holds, for the sake of the codecs sotto decodes itself (`avi::own_codec`).
enum SpeechWav {
    /// Another format: the file, to read as it is.
    Other(Box<dyn MediaSource>),
    /// GSM 06.10, G.722, G.723.1, G.726 or G.729: the 16-bit PCM WAV file it decodes to,
    /// as it is read.
    Decoded(Box<dyn MediaSource>),
    /// WMA: the file (at its start), its format and where its data chunk is, for
    /// [`crate::wma::WavReader`].
    Wma(Box<dyn MediaSource>, Vec<u8>, (u64, u64)),
    /// One of them in a form no decoder takes: what is wrong.
    Unsupported(String),
}

/// `src`, a WAV file at its start, as [`SpeechWav`] sorts it.
fn speech_wav(mut src: Box<dyn MediaSource>) -> SpeechWav {
    use crate::codec::DecodedWav;
    let (fmt, data) = crate::avi::wav_chunks(&mut *src);
    let tag = fmt.as_deref().and_then(crate::avi::format_tag);
    if let (Some(fmt), Some(data), Some(t)) = (&fmt, data, tag) {
        if crate::wma::WAV_TAGS.contains(&t) && src.seek(SeekFrom::Start(0)).is_ok() {
            return SpeechWav::Wma(src, fmt.clone(), data);
        }
    }
    let codec = tag.and_then(crate::avi::speech_codec);
    let (Some(fmt), Some((start, len)), Some(tag), Some(codec)) = (fmt, data, tag, codec) else {
        let _ = src.seek(SeekFrom::Start(0));
        return SpeechWav::Other(src);
    };
    let field = |i: usize| fmt.get(i..i + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let (channels, block) = (field(2).unwrap_or(0), usize::from(field(12).unwrap_or(0)));
    let rate = fmt
        .get(4..8)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if !(1..=192_000).contains(&rate) {
        return SpeechWav::Unsupported(format!("{codec} at {rate} Hz"));
    }
    // (FFmpeg, the one writer of this tag, makes blocks of 4096 samples: a kilobyte and more.)
    if tag == crate::adpcm_swf::WAV_TAG && (1..=2).contains(&channels) && block >= 256 {
        // Flash ADPCM: each block is an FLV tag's packet (mono or stereo).
        let mut chunks = Vec::new();
        for at in (start..start + len).step_by(block) {
            let mut first = [0u8];
            if src
                .seek(SeekFrom::Start(at))
                .and_then(|_| src.read_exact(&mut first))
                .is_err()
            {
                break;
            }
            chunks.push((at, (block as u64).min(start + len - at), first[0]));
        }
        let pcm = crate::adpcm_swf::SwfWav::new(src, chunks, rate, channels);
        return SpeechWav::Decoded(Box::new(ReadOnlySource::new(pcm)));
    }
    if tag == crate::adpcm_swf::WAV_TAG {
        return SpeechWav::Unsupported(format!(
            "Flash ADPCM in {channels} channels, in blocks of {block} bytes"
        ));
    }
    if tag == crate::adpcm_yamaha::WAV_TAG && (1..=2).contains(&channels) {
        let yamaha = crate::adpcm_yamaha::Yamaha::new(channels == 2);
        return decoded(src, yamaha, (start, start + len), rate);
    }
    if channels != 1 {
        return SpeechWav::Unsupported(format!("{codec} in {channels} channels (it is mono)"));
    }
    let range = (start, start + len);
    fn decoded<D: crate::codec::BlockDecode + Send + Sync + 'static>(
        src: Box<dyn MediaSource>,
        decoder: D,
        range: (u64, u64),
        rate: u32,
    ) -> SpeechWav {
        let pcm = DecodedWav::new(src, decoder, range, rate);
        SpeechWav::Decoded(Box::new(ReadOnlySource::new(pcm)))
    }
    match tag {
        crate::gsm::WAV_TAG => match crate::gsm::ms_block_ok(block) {
            true => {
                let packing = crate::gsm::Packing::Ms { block };
                decoded(src, crate::gsm::GsmBlocks::new(packing), range, rate)
            }
            false => SpeechWav::Unsupported(format!("GSM 06.10 in blocks of {block} bytes")),
        },
        crate::g722::WAV_TAG => decoded(src, crate::g722::G722::new(), range, rate),
        t if crate::g723::WAV_TAGS.contains(&t) => {
            // Frames of 24, 20, 4 or 1 bytes, by their first byte (a few kB a minute).
            let mut bytes = Vec::new();
            let read = src
                .seek(SeekFrom::Start(start))
                .and_then(|_| (&mut src).take(len).read_to_end(&mut bytes));
            if let Err(e) = read {
                return SpeechWav::Unsupported(format!("G.723.1 data unreadable: {e}"));
            }
            let stream = crate::g723::frame_stream(bytes, crate::g723::Framing::Plain);
            let pcm = crate::g723::G7231Wav::new(stream);
            SpeechWav::Decoded(Box::new(ReadOnlySource::new(pcm)))
        }
        t if crate::g729::WAV_TAGS.contains(&t) => {
            // Annex D's 8-byte frames where the byte rate says 6.4 kbit/s, as FFmpeg's parser
            // tells them.
            let byte_rate = fmt
                .get(8..12)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            let annex_d = u64::from(byte_rate) * 8 < 8000;
            decoded(src, crate::g729::G729::new(annex_d), range, rate)
        }
        _ => {
            let bits = u32::from(field(14).unwrap_or(0));
            match crate::g726::G726::new(bits) {
                Some(g726) => decoded(src, g726, range, rate),
                None => SpeechWav::Unsupported(format!(
                    "G.726 of {bits} bits a sample (it takes 2 to 5)"
                )),
            }
        }
    }
}

fn dv_error(name: &str, e: crate::dv::DvError) -> AudioError {
    match e {
        crate::dv::DvError::NoAudio => AudioError::Empty {
            input: name.to_string(),
        },
        crate::dv::DvError::Io(why) => corrupt(name, format!("DV: {why}")),
    }
}

fn au_error(name: &str, e: crate::au::AuError) -> AudioError {
    match e {
        crate::au::AuError::Encoding(n) => AudioError::Codec {
            input: name.to_string(),
            detail: format!(
                ".au encoding {n} (sotto decodes μ-law, A-law, linear PCM, float, G.722 and G.726 \
                 there)"
            ),
        },
        crate::au::AuError::Corrupt(why) => corrupt(name, format!(".au: {why}")),
    }
}
