//! Speex in Ogg (`.spx`), which symphonia's Ogg reader passes over (it knows Vorbis, Opus
//! and FLAC): the pages of the first logical stream whose first packet is a Speex header
//! are put back into packets; the header configures the decoder, the comment packet after
//! it is skipped (as FFmpeg skips it), and the rest are audio, handed out in order. Pages
//! of other streams are passed over; a file cut short keeps its whole packets.

use std::collections::VecDeque;

use symphonia::core::audio::Channels;
use symphonia::core::codecs::CodecParameters;
use symphonia::core::errors::{end_of_stream_error, Error, Result};
use symphonia::core::formats::{Cue, FormatReader, Packet, Track};
use symphonia::core::io::{MediaSourceStream, ReadBytes};
use symphonia::core::meta::MetadataLog;

use crate::speex::{Config, CODEC_TYPE_SPEEX};

/// Whether a file starting with `head` is Ogg whose first packet is a Speex header.
pub(crate) fn is_ogg_speex(head: &[u8]) -> bool {
    head.starts_with(b"OggS")
        && head.get(26).is_some_and(|&n| {
            head.get(27 + usize::from(n)..)
                .is_some_and(|p| p.starts_with(b"Speex   "))
        })
}

/// A packet's length, at the most (64 frames of the richest mode are under 8 KiB).
const MAX_PACKET: usize = 1 << 20;
/// Pages read looking for the stream's header.
const MAX_PAGES_TO_HEADER: usize = 64;

/// A page: its stream's serial number, whether it begins it, its segments' lengths and
/// its data.
struct Page {
    serial: u32,
    bos: bool,
    lacing: Vec<u8>,
    data: Vec<u8>,
}

pub(crate) struct OggSpeexReader {
    src: MediaSourceStream,
    tracks: Vec<Track>,
    cues: Vec<Cue>,
    metadata: MetadataLog,
    serial: Option<u32>,
    /// A packet continued on the next page.
    partial: Vec<u8>,
    ready: VecDeque<Vec<u8>>,
    /// Samples a packet decodes to, and those handed out so far.
    per_packet: u64,
    ts: u64,
    comment_skipped: bool,
}

impl OggSpeexReader {
    /// Reads pages up to the stream's header (its comment packet is skipped later).
    pub(crate) fn open(src: MediaSourceStream) -> Result<Self> {
        let mut reader = Self {
            src,
            tracks: Vec::new(),
            cues: Vec::new(),
            metadata: MetadataLog::default(),
            serial: None,
            partial: Vec::new(),
            ready: VecDeque::new(),
            per_packet: 0,
            ts: 0,
            comment_skipped: false,
        };
        for _ in 0..MAX_PAGES_TO_HEADER {
            let Some(page) = reader.next_page()? else {
                break;
            };
            if reader.serial.is_none() && page.bos && page.data.starts_with(b"Speex   ") {
                reader.serial = Some(page.serial);
            }
            reader.take(page);
            if let Some(header) = reader.ready.pop_front() {
                let config = Config::from_header(&header).map_err(Error::Unsupported)?;
                let mut params = CodecParameters::new();
                params
                    .for_codec(CODEC_TYPE_SPEEX)
                    .with_sample_rate(config.rate)
                    .with_channels(match config.channels {
                        1 => Channels::FRONT_CENTRE,
                        _ => Channels::FRONT_LEFT | Channels::FRONT_RIGHT,
                    })
                    .with_extra_data(header.into_boxed_slice());
                reader.per_packet = (config.frame_size * config.frames_per_packet) as u64;
                reader.tracks.push(Track::new(0, params));
                return Ok(reader);
            }
        }
        Err(Error::DecodeError("ogg: no Speex header"))
    }

    /// The next page; None at the end of the file (or inside a page cut short).
    fn next_page(&mut self) -> Result<Option<Page>> {
        let mut h = [0u8; 27];
        let eof = |e: &std::io::Error| e.kind() == std::io::ErrorKind::UnexpectedEof;
        match self.src.read_buf_exact(&mut h) {
            Ok(()) => {}
            Err(e) if eof(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        if &h[..4] != b"OggS" || h[4] != 0 {
            return Err(Error::DecodeError(
                "ogg: a page without its capture pattern",
            ));
        }
        let mut lacing = vec![0u8; usize::from(h[26])];
        match self.src.read_buf_exact(&mut lacing) {
            Ok(()) => {}
            Err(e) if eof(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        // A page cut short keeps what it has: the packets it holds whole.
        let mut data = vec![0u8; lacing.iter().map(|&l| usize::from(l)).sum()];
        let mut got = 0;
        while got < data.len() {
            match self.src.read_buf(&mut data[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if eof(&e) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        data.truncate(got);
        Ok(Some(Page {
            serial: u32::from_le_bytes(h[14..18].try_into().expect("four bytes")),
            bos: h[5] & 2 != 0,
            lacing,
            data,
        }))
    }

    /// The packets a page of the stream ends, queued.
    fn take(&mut self, page: Page) {
        if Some(page.serial) != self.serial {
            return;
        }
        let mut at = 0;
        for &l in &page.lacing {
            let l = usize::from(l);
            let Some(segment) = page.data.get(at..at + l) else {
                self.partial.clear();
                return;
            };
            if self.partial.len() + l > MAX_PACKET {
                // No Speex packet is this long: a damaged page's run of 255s.
                self.partial.clear();
            }
            self.partial.extend_from_slice(segment);
            at += l;
            if l < 255 {
                self.ready.push_back(std::mem::take(&mut self.partial));
            }
        }
    }
}

impl FormatReader for OggSpeexReader {
    fn try_new(
        src: MediaSourceStream,
        _options: &symphonia::core::formats::FormatOptions,
    ) -> Result<Self> {
        Self::open(src)
    }

    crate::codec::front_to_back_reader_methods!();

    fn next_packet(&mut self) -> Result<Packet> {
        loop {
            if let Some(p) = self.ready.pop_front() {
                if !self.comment_skipped {
                    // The comment packet after the header is not audio.
                    self.comment_skipped = true;
                    continue;
                }
                let ts = self.ts;
                self.ts += self.per_packet;
                return Ok(Packet::new_from_boxed_slice(
                    0,
                    ts,
                    self.per_packet,
                    p.into_boxed_slice(),
                ));
            }
            match self.next_page()? {
                Some(page) => self.take(page),
                None => return end_of_stream_error(),
            }
        }
    }

    fn into_inner(self: Box<Self>) -> MediaSourceStream {
        self.src
    }
}
