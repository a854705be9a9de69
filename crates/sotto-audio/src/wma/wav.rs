//! WMA in a WAV file (format tags 0x0160 and 0x0161, as FFmpeg and Windows' ACM tools
//! write it), and so in AVI, whose chunks `avi.rs` makes one: the data chunk is a run of
//! superframes of `block_align` bytes, handed on one a packet.

use std::io::{Seek, SeekFrom};

use symphonia::core::audio::Channels;
use symphonia::core::codecs::CodecParameters;
use symphonia::core::errors::{end_of_stream_error, Error, Result};
use symphonia::core::formats::{Cue, FormatOptions, FormatReader, Packet, Track};
use symphonia::core::io::{MediaSourceStream, ReadBytes};
use symphonia::core::meta::MetadataLog;

use super::Config;

/// A symphonia [`FormatReader`] over a WAV file's WMA superframes.
pub(crate) struct WavReader {
    src: MediaSourceStream,
    tracks: Vec<Track>,
    cues: Vec<Cue>,
    metadata: MetadataLog,
    block: usize,
    /// Bytes of the data chunk not yet handed out.
    left: u64,
    blocks: u64,
}

impl WavReader {
    /// A reader of `src`, a WAV file whose format is `fmt` (its WAVEFORMATEX) and whose
    /// data chunk is `data` (offset, length).
    pub(crate) fn open(mut src: MediaSourceStream, fmt: &[u8], data: (u64, u64)) -> Result<Self> {
        let config = Config::from_waveformatex(fmt).ok_or(Error::Unsupported("wma: no format"))?;
        if config.block_align == 0 {
            return Err(Error::Unsupported("wma: a block alignment of 0"));
        }
        let channels = match config.channels {
            1 => Channels::FRONT_CENTRE,
            2 => Channels::FRONT_LEFT | Channels::FRONT_RIGHT,
            _ => return Err(Error::Unsupported("wma: more than two channels")),
        };
        src.seek(SeekFrom::Start(data.0))?;
        let mut params = CodecParameters::new();
        params
            .for_codec(config.codec())
            .with_sample_rate(config.rate)
            .with_channels(channels)
            .with_extra_data(fmt.into());
        Ok(Self {
            src,
            tracks: vec![Track::new(0, params)],
            cues: Vec::new(),
            metadata: MetadataLog::default(),
            block: config.block_align,
            left: data.1,
            blocks: 0,
        })
    }
}

impl FormatReader for WavReader {
    fn try_new(_src: MediaSourceStream, _options: &FormatOptions) -> Result<Self> {
        Err(Error::Unsupported("wma: opened from a WAV file's chunks"))
    }

    crate::codec::front_to_back_reader_methods!();

    fn next_packet(&mut self) -> Result<Packet> {
        // A last superframe cut short is dropped (FFmpeg's decoder refuses it too).
        if self.left < self.block as u64 {
            return end_of_stream_error();
        }
        let mut block = vec![0u8; self.block];
        self.src.read_buf_exact(&mut block)?;
        self.left -= self.block as u64;
        let ts = self.blocks;
        self.blocks += 1;
        Ok(Packet::new_from_boxed_slice(0, ts, 1, block.into()))
    }

    fn into_inner(self: Box<Self>) -> MediaSourceStream {
        self.src
    }
}
