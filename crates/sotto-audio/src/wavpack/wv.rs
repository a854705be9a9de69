//! The `.wv` file: WavPack blocks one after another, each behind a 32-byte header that
//! starts `wvpk`. A frame is the run of blocks from one marked initial to one marked final
//! (one block a frame for mono and stereo, more for more channels); each frame is a
//! packet, its blocks whole, as FFmpeg hands them to its decoder. Blocks of no samples
//! (the RIFF header or checksum WavPack may keep) are passed over, and bytes between
//! blocks (a damaged stretch) are skipped to the next `wvpk`.

use symphonia::core::codecs::CodecParameters;
use symphonia::core::errors::{decode_error, end_of_stream_error, Error, Result};
use symphonia::core::formats::{Cue, FormatOptions, FormatReader, Packet, Track};
use symphonia::core::io::{MediaSourceStream, ReadBytes};
use symphonia::core::meta::MetadataLog;
use symphonia::core::probe::{Descriptor, Instantiate, QueryDescriptor};
use symphonia::core::support_format;

use super::{FINAL, HEADER, INITIAL};

/// Largest block taken (WavPack's own limit is about 1 MiB a block).
const MAX_BLOCK: usize = 4 << 20;
/// Most bytes skipped in search of the next block.
const MAX_SKIP: usize = 1 << 20;

pub(crate) struct WvReader {
    src: MediaSourceStream,
    tracks: Vec<Track>,
    cues: Vec<Cue>,
    metadata: MetadataLog,
    /// The first frame, read to learn the stream's format.
    first: Option<Vec<u8>>,
    ts: u64,
}

/// A block: its flags, samples and bytes (header included).
struct RawBlock {
    flags: u32,
    samples: u32,
    bytes: Vec<u8>,
    /// The stream's length in samples, as the header gives it (None: unknown).
    total: Option<u64>,
}

/// Ok(false) at the end of the file, where `r` is Err(UnexpectedEof).
fn more<T>(r: std::io::Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(Error::IoError(e)),
    }
}

impl WvReader {
    fn open(src: MediaSourceStream) -> Result<Self> {
        let mut r = Self {
            src,
            tracks: Vec::new(),
            cues: Vec::new(),
            metadata: MetadataLog::default(),
            first: None,
            ts: 0,
        };
        let (frame, total) = match r.next_frame()? {
            Some(found) => found,
            None => return decode_error("wavpack: no block of samples"),
        };
        let blocks = super::blocks(&frame).map_err(Error::DecodeError)?;
        let (rate, channels, bits) = super::frame_format(&blocks)?;
        let mut params = CodecParameters::new();
        params
            .for_codec(super::CODEC_TYPE_WAVPACK)
            .with_sample_rate(rate)
            .with_channels(channels)
            .with_bits_per_sample(bits);
        if let Some(n) = total {
            params.with_n_frames(n);
        }
        r.tracks.push(Track::new(0, params));
        r.first = Some(frame);
        Ok(r)
    }

    /// The next block; None at the end of the file (a block cut short included).
    fn next_block(&mut self) -> Result<Option<RawBlock>> {
        let mut head = [0u8; HEADER];
        if more(self.src.read_buf_exact(&mut head[..4]))?.is_none() {
            return Ok(None);
        }
        let mut skipped = 0;
        while &head[..4] != b"wvpk" {
            if skipped == MAX_SKIP {
                return decode_error("wavpack: no block within 1 MiB");
            }
            head.copy_within(1..4, 0);
            head[3] = match more(self.src.read_byte())? {
                Some(b) => b,
                None => return Ok(None),
            };
            skipped += 1;
        }
        if more(self.src.read_buf_exact(&mut head[4..]))?.is_none() {
            return Ok(None);
        }
        let le = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
        let size = le(4) as usize + 8;
        if !(HEADER..=MAX_BLOCK).contains(&size) {
            return decode_error("wavpack: a block's size is out of bounds");
        }
        let mut bytes = vec![0u8; size];
        bytes[..HEADER].copy_from_slice(&head);
        if more(self.src.read_buf_exact(&mut bytes[HEADER..]))?.is_none() {
            return Ok(None);
        }
        // The length: 32 bits, and in version 0x410's headers 8 more (byte 11); all ones
        // where the writer did not know it.
        let total = (le(12) != u32::MAX).then(|| u64::from(head[11]) << 32 | u64::from(le(12)));
        Ok(Some(RawBlock {
            flags: le(24),
            samples: le(20),
            bytes,
            total,
        }))
    }

    /// The next frame's blocks, and the stream's length as its first block gives it.
    fn next_frame(&mut self) -> Result<Option<(Vec<u8>, Option<u64>)>> {
        let mut frame = Vec::new();
        let mut total = None;
        loop {
            let Some(block) = self.next_block()? else {
                // A frame whose last blocks are missing is dropped.
                return Ok(None);
            };
            if block.samples == 0 {
                continue;
            }
            if block.flags & INITIAL != 0 {
                // A frame started anew (the last one's final block was lost).
                frame.clear();
                total = block.total;
            } else if frame.is_empty() {
                // The rest of a frame whose first block was lost.
                continue;
            }
            frame.extend_from_slice(&block.bytes);
            if block.flags & FINAL != 0 {
                return Ok(Some((frame, total)));
            }
        }
    }
}

impl QueryDescriptor for WvReader {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "wavpack",
            "WavPack",
            &["wv"],
            &["audio/x-wavpack", "audio/wavpack"],
            &[b"wvpk"]
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

impl FormatReader for WvReader {
    fn try_new(src: MediaSourceStream, _options: &FormatOptions) -> Result<Self> {
        Self::open(src)
    }

    crate::codec::front_to_back_reader_methods!();

    fn next_packet(&mut self) -> Result<Packet> {
        let frame = match self.first.take() {
            Some(f) => f,
            None => match self.next_frame()? {
                Some((f, _)) => f,
                None => return end_of_stream_error(),
            },
        };
        let samples = u64::from(u32::from_le_bytes(
            frame[20..24].try_into().expect("4 bytes"),
        ));
        let ts = self.ts;
        self.ts += samples;
        Ok(Packet::new_from_boxed_slice(
            0,
            ts,
            samples,
            frame.into_boxed_slice(),
        ))
    }

    fn into_inner(self: Box<Self>) -> MediaSourceStream {
        self.src
    }
}
