//! WAV data past 4 GiB: RF64's and BW64's (whose 32-bit data size says `0xFFFFFFFF` and
//! whose `ds64` chunk holds the real one), and the WAV files sotto makes of Wave64, AVI,
//! MXF and DV audio, whose sizes saturate there. symphonia's WAV reader stops at the
//! 32-bit size (6.2 hours of 48 kHz 16-bit stereo: a day's court or broadcast recording
//! would lose its end unsaid), so such PCM is read on from where its reader found the
//! data: whole frames, to the `ds64` size or the end of the stream.

use symphonia::core::codecs::CodecParameters;
use symphonia::core::errors::{Error, Result};
use symphonia::core::formats::{Cue, FormatOptions, FormatReader, Packet, Track};
use symphonia::core::io::{MediaSourceStream, ReadBytes};
use symphonia::core::meta::MetadataLog;

/// Frames a packet holds, at most.
const PACKET_FRAMES: usize = 4096;

/// Whether a WAV reader's track, of PCM frames of `frame` bytes, has the data size that
/// saturates at 4 GiB.
pub(crate) fn saturated(params: &CodecParameters, frame: usize) -> bool {
    frame > 0 && params.n_frames == Some(u64::from(u32::MAX) / frame as u64)
}

/// PCM frames read on from a WAV reader's data start.
pub(crate) struct LongPcm {
    src: MediaSourceStream,
    tracks: Vec<Track>,
    cues: Vec<Cue>,
    metadata: MetadataLog,
    frame: usize,
    /// Bytes of data left, where the file says (RF64's `ds64`); else to the end.
    left: Option<u64>,
    /// Frames handed out so far.
    ts: u64,
}

impl LongPcm {
    /// The frames of `frame` bytes that `src` holds from where it is (a WAV reader's data
    /// start), `data` bytes of them where that is known, as track `track` of `params`.
    pub(crate) fn new(
        src: MediaSourceStream,
        track: u32,
        params: &CodecParameters,
        frame: usize,
        data: Option<u64>,
    ) -> Self {
        let mut params = params.clone();
        params.n_frames = data.map(|d| d / frame as u64);
        params.with_max_frames_per_packet(PACKET_FRAMES as u64);
        Self {
            src,
            tracks: vec![Track::new(track, params)],
            cues: Vec::new(),
            metadata: MetadataLog::default(),
            frame,
            left: data,
            ts: 0,
        }
    }
}

impl FormatReader for LongPcm {
    fn try_new(_src: MediaSourceStream, _options: &FormatOptions) -> Result<Self> {
        Err(Error::Unsupported(
            "long_wav: made from a WAV reader's stream",
        ))
    }

    crate::codec::front_to_back_reader_methods!();

    fn next_packet(&mut self) -> Result<Packet> {
        let mut want = (PACKET_FRAMES * self.frame) as u64;
        if let Some(left) = self.left {
            want = want.min(left - left % self.frame as u64);
        }
        let mut buf = vec![0u8; want as usize];
        let mut got = 0;
        while got < buf.len() {
            // MediaSourceStream says the end with an error, where a reader returns 0.
            match self.src.read_buf(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        // A frame cut off by the end of the file is dropped.
        buf.truncate(got - got % self.frame);
        if buf.is_empty() {
            return Err(Error::IoError(std::io::ErrorKind::UnexpectedEof.into()));
        }
        if let Some(left) = &mut self.left {
            *left -= buf.len() as u64;
        }
        let frames = (buf.len() / self.frame) as u64;
        let packet = Packet::new_from_boxed_slice(self.tracks[0].id, self.ts, frames, buf.into());
        self.ts += frames;
        Ok(packet)
    }

    fn into_inner(self: Box<Self>) -> MediaSourceStream {
        self.src
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symphonia::core::codecs::CODEC_TYPE_PCM_S16LE;

    fn reader(bytes: Vec<u8>, data: Option<u64>) -> LongPcm {
        let mss = MediaSourceStream::new(Box::new(std::io::Cursor::new(bytes)), Default::default());
        let mut params = CodecParameters::new();
        params.for_codec(CODEC_TYPE_PCM_S16LE);
        LongPcm::new(mss, 3, &params, 4, data)
    }

    fn frames(mut r: LongPcm) -> Vec<(u64, u64, usize)> {
        let mut out = Vec::new();
        loop {
            match r.next_packet() {
                Ok(p) => out.push((p.ts, p.dur, p.data.len())),
                Err(Error::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return out
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn frames_are_read_to_the_end_or_the_size_given() {
        // 5000 frames and half of one: two packets, the half frame dropped.
        let all = frames(reader(vec![1; 4 * 5000 + 2], None));
        assert_eq!(all, vec![(0, 4096, 4 * 4096), (4096, 904, 4 * 904)]);
        // The size RF64's `ds64` gives stops it before what follows the data.
        let sized = frames(reader(vec![1; 4 * 5000 + 2], Some(4 * 100 + 3)));
        assert_eq!(sized, vec![(0, 100, 400)]);
        assert!(frames(reader(Vec::new(), None)).is_empty());
        let mut p = CodecParameters::new();
        p.with_n_frames(u64::from(u32::MAX) / 6);
        assert!(saturated(&p, 6));
        p.with_n_frames(u64::from(u32::MAX) / 6 - 1);
        assert!(!saturated(&p, 6));
    }
}
