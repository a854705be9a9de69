//! What sotto's own decoders share: a bit reader over a frame (DTS, TrueHD), the growth of
//! the buffer a packet's samples go to (AC-3's too), the symphonia [`Decoder`]
//! methods of a decoder that decodes each packet into such a buffer (AAC's and Opus's
//! too), FFmpeg's noise generator (AMR-WB's, Nellymoser's), and, for the speech codecs of
//! telephony (GSM, G.722, G.726, G.729) and Nellymoser, a file whose blocks decode as they are
//! read into a PCM or float WAV file symphonia reads; and a file made of pieces of another
//! and bytes of its own ([`Pieces`]).
//!
//! [`Decoder`]: symphonia::core::codecs::Decoder

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftPlanner};
use symphonia::core::audio::{AudioBuffer, Channels, Signal, SignalSpec};
use symphonia::core::errors::{decode_error, Result};
use symphonia::core::io::MediaSource;

/// A frame's field that runs past it, or holds a value the syntax does not allow.
pub(crate) type Parse<T> = std::result::Result<T, &'static str>;

const OVERRUN: &str = "a frame's fields run past its end";

/// Reads a frame's bits, most significant first.
pub(crate) struct Bits<'a> {
    data: &'a [u8],
    /// Bits read.
    pub(crate) pos: usize,
    /// Bits there are to read.
    end: usize,
}

impl<'a> Bits<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self::within(data, data.len() * 8)
    }

    /// The first `end` bits of `data` (at most all of them).
    pub(crate) fn within(data: &'a [u8], end: usize) -> Self {
        Self {
            data,
            pos: 0,
            end: end.min(data.len() * 8),
        }
    }

    /// Bits left to read.
    pub(crate) fn left(&self) -> usize {
        self.end - self.pos
    }

    /// Skips to the next byte's first bit (or the end).
    pub(crate) fn align(&mut self) {
        self.pos = self.pos.next_multiple_of(8).min(self.end);
    }

    /// The next 32 bits without reading them, zeros past the end.
    #[inline]
    pub(crate) fn peek32(&self) -> u32 {
        let byte = self.pos / 8;
        let word = match self.data.get(byte..byte + 8) {
            Some(eight) => u64::from_be_bytes(eight.try_into().expect("eight bytes")),
            None => {
                let mut word = [0u8; 8];
                let rest = self.data.get(byte..).unwrap_or(&[]);
                word[..rest.len()].copy_from_slice(rest);
                u64::from_be_bytes(word)
            }
        };
        (word << (self.pos % 8) >> 32) as u32
    }

    pub(crate) fn skip(&mut self, n: usize) -> Parse<()> {
        if self.pos + n > self.end {
            return Err(OVERRUN);
        }
        self.pos += n;
        Ok(())
    }

    /// The next `n` (0 to 32) bits.
    pub(crate) fn get(&mut self, n: u32) -> Parse<u32> {
        if n == 0 {
            return Ok(0);
        }
        let v = self.peek32() >> (32 - n);
        self.skip(n as usize)?;
        Ok(v)
    }

    pub(crate) fn bit(&mut self) -> Parse<bool> {
        self.get(1).map(|b| b == 1)
    }

    /// The next `n` (0 to 32) bits as a two's complement number.
    pub(crate) fn signed(&mut self, n: u32) -> Parse<i32> {
        if n == 0 {
            return Ok(0);
        }
        let v = self.get(n)?;
        Ok(((v << (32 - n)) as i32) >> (32 - n))
    }
}

/// Reads bits least significant first, as WavPack and TTA write them; zeros past the end,
/// which [`LeBits::left`] shows as a negative count.
pub(crate) struct LeBits<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> LeBits<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    pub(crate) fn left(&self) -> i64 {
        (self.data.len() * 8) as i64 - self.pos as i64
    }

    pub(crate) fn bit(&mut self) -> u32 {
        let b = self
            .data
            .get(self.pos / 8)
            .map_or(0, |b| u32::from(b >> (self.pos % 8)) & 1);
        self.pos += 1;
        b
    }

    /// The next `n` (0 to 32) bits, the first the least significant.
    pub(crate) fn get(&mut self, n: u32) -> u32 {
        let mut v = 0u64;
        let mut got = 0;
        while got < n {
            let byte = u64::from(self.data.get(self.pos / 8).copied().unwrap_or(0));
            let at = (self.pos % 8) as u32;
            let take = (8 - at).min(n - got);
            v |= ((byte >> at) & ((1 << take) - 1)) << got;
            got += take;
            self.pos += take as usize;
        }
        v as u32
    }

    /// Ones before a zero, at most `most` (the zero is read where it comes before).
    pub(crate) fn unary(&mut self, most: u32) -> u32 {
        let mut n = 0;
        while n < most && self.bit() == 1 {
            n += 1;
        }
        n
    }
}

/// Makes room in `buf` for `samples` more frames of this rate and layout: a packet's
/// frames go one after another, and a layout that changes starts the buffer anew, which
/// it says (the decoder then forgets what it kept of the old layout), where the packet's
/// earlier frames leave nothing to keep.
pub(crate) fn make_room(
    buf: &mut AudioBuffer<f32>,
    rate: u32,
    channels: Channels,
    samples: usize,
    first: usize,
) -> Result<bool> {
    let spec = buf.spec();
    let anew = spec.rate != rate || spec.channels != channels;
    if anew {
        if buf.frames() > 0 {
            return decode_error("the channel layout changes within a packet");
        }
        *buf = AudioBuffer::new(first.max(samples) as u64, SignalSpec::new(rate, channels));
    }
    if buf.capacity() < buf.frames() + samples {
        let size = (2 * buf.capacity()).max(buf.frames() + samples);
        let mut bigger = AudioBuffer::new(size as u64, SignalSpec::new(rate, channels));
        bigger.render_reserved(Some(buf.frames()));
        for c in 0..channels.count() {
            bigger.chan_mut(c).copy_from_slice(buf.chan(c));
        }
        *buf = bigger;
    }
    Ok(anew)
}

/// The buffer a decoder of `codec` starts with, sized `frames`, at the rate and channels
/// its parameters name (48 kHz stereo where they name none; its first frame's header
/// sets them); an error, saying `refusal`, for parameters of another codec.
pub(crate) fn first_buffer(
    params: &symphonia::core::codecs::CodecParameters,
    codec: symphonia::core::codecs::CodecType,
    refusal: &'static str,
    frames: usize,
) -> Result<AudioBuffer<f32>> {
    if params.codec != codec {
        return symphonia::core::errors::unsupported_error(refusal);
    }
    let rate = params.sample_rate.unwrap_or(48_000);
    let channels = params
        .channels
        .filter(|c| c.count() > 0)
        .unwrap_or(Channels::FRONT_LEFT | Channels::FRONT_RIGHT);
    Ok(AudioBuffer::new(
        frames as u64,
        SignalSpec::new(rate, channels),
    ))
}

/// The [`Decoder`](symphonia::core::codecs::Decoder) methods of a decoder with `params`
/// and a `buf` that `|this, packet| expr` decodes a packet into: the packet's samples, or
/// none where it fails.
macro_rules! buffered_decoder_methods {
    (|$this:ident, $packet:ident| $decode:expr) => {
        fn codec_params(&self) -> &symphonia::core::codecs::CodecParameters {
            &self.params
        }

        fn decode(
            &mut self,
            $packet: &symphonia::core::formats::Packet,
        ) -> symphonia::core::errors::Result<symphonia::core::audio::AudioBufferRef<'_>> {
            let $this = &mut *self;
            if let Err(e) = $decode {
                self.buf.clear();
                return Err(e);
            }
            Ok(symphonia::core::audio::AsAudioBufferRef::as_audio_buffer_ref(&self.buf))
        }

        fn finalize(&mut self) -> symphonia::core::codecs::FinalizeResult {
            symphonia::core::codecs::FinalizeResult::default()
        }

        fn last_decoded(&self) -> symphonia::core::audio::AudioBufferRef<'_> {
            symphonia::core::audio::AsAudioBufferRef::as_audio_buffer_ref(&self.buf)
        }
    };
}
pub(crate) use buffered_decoder_methods;

/// A DCT-IV of `m` (even) points computed with a complex FFT of `m / 2`: the heart of an
/// inverse MDCT of `m` coefficients (A/52's, WMA's).
pub(crate) struct Dct4 {
    m: usize,
    fft: Arc<dyn Fft<f32>>,
    /// `e^{iπ(k + 1/4)/m}` and `e^{iπp/m}`: the DCT-IV's twiddles before and after the FFT.
    pre: Vec<Complex32>,
    post: Vec<Complex32>,
    buf: Vec<Complex32>,
    scratch: Vec<Complex32>,
}

impl Dct4 {
    pub(crate) fn new(m: usize) -> Self {
        let fft = FftPlanner::new().plan_fft_inverse(m / 2);
        let twiddle = |a: f64| Complex32::new(a.cos() as f32, a.sin() as f32);
        let pi = std::f64::consts::PI;
        let scratch = vec![Complex32::default(); fft.get_inplace_scratch_len()];
        Self {
            m,
            pre: (0..m / 2)
                .map(|k| twiddle(pi * (k as f64 + 0.25) / m as f64))
                .collect(),
            post: (0..m / 2)
                .map(|p| twiddle(pi * p as f64 / m as f64))
                .collect(),
            buf: vec![Complex32::default(); m / 2],
            fft,
            scratch,
        }
    }

    /// The DCT-IV of `x` (every `step`-th value from `first`, `m` of them) into `c`:
    /// `c[n] = Σ x[k] cos(π/m (n + ½)(k + ½))`.
    pub(crate) fn dct4(&mut self, x: &[f32], first: usize, step: usize, c: &mut [f32]) {
        let m = self.m;
        let at = |k: usize| x[first + k * step];
        for (k, (b, t)) in self.buf.iter_mut().zip(&self.pre).enumerate() {
            *b = Complex32::new(at(2 * k), -at(m - 1 - 2 * k)) * t;
        }
        self.fft
            .process_with_scratch(&mut self.buf, &mut self.scratch);
        for (p, (b, t)) in self.buf.iter().zip(&self.post).enumerate() {
            let w = b * t;
            c[2 * p] = w.re;
            c[m - 1 - 2 * p] = w.im;
        }
    }
}

/// Bits a Huffman code's lookup table is indexed by; longer codes are searched for.
const LOOKUP_BITS: u32 = 9;

/// A Huffman code made ready to decode: (symbol, length) by the next `LOOKUP_BITS` bits,
/// length 0 where the code is longer; those longer codes by length, then code, each
/// length's run found by binary search.
pub(crate) struct Huffman {
    table: Vec<(u16, u8)>,
    long: Vec<(u8, u32, u16)>,
    /// (length, where its codes start in `long`), for each length `long` holds.
    runs: Vec<(u8, usize)>,
    /// Symbols in the code.
    pub(crate) size: usize,
}

impl Huffman {
    /// The code whose `i`-th symbol is coded by the low `lens[i]` bits (1 to 32) of
    /// `codes[i]`.
    pub(crate) fn new(lens: &[u8], codes: impl IntoIterator<Item = u32>) -> Self {
        let mut table = vec![(0, 0); 1 << LOOKUP_BITS];
        let mut long = Vec::new();
        for (i, (&len, code)) in lens.iter().zip(codes).enumerate() {
            let l = u32::from(len);
            if l <= LOOKUP_BITS {
                let start = (code as usize) << (LOOKUP_BITS - l);
                table[start..start + (1 << (LOOKUP_BITS - l))].fill((i as u16, len));
            } else {
                long.push((len, code, i as u16));
            }
        }
        long.sort_unstable();
        let mut runs: Vec<(u8, usize)> = Vec::new();
        for (at, &(len, ..)) in long.iter().enumerate() {
            if runs.last().is_none_or(|&(l, _)| l != len) {
                runs.push((len, at));
            }
        }
        Self {
            table,
            long,
            runs,
            size: lens.len(),
        }
    }
}

impl Bits<'_> {
    /// One symbol of `code`, as its index.
    pub(crate) fn huffman(&mut self, code: &Huffman) -> Parse<u16> {
        let next = self.peek32();
        let (symbol, len) = code.table[(next >> (32 - LOOKUP_BITS)) as usize];
        if len > 0 {
            self.skip(usize::from(len))?;
            return Ok(symbol);
        }
        for (i, &(len, start)) in code.runs.iter().enumerate() {
            let end = code.runs.get(i + 1).map_or(code.long.len(), |r| r.1);
            let want = next >> (32 - u32::from(len));
            let run = &code.long[start..end];
            if let Ok(at) = run.binary_search_by_key(&want, |&(_, c, _)| c) {
                self.skip(usize::from(len))?;
                return Ok(run[at].2);
            }
        }
        Err("a Huffman code that is in no codebook")
    }
}

/// The [`FormatReader`](symphonia::core::formats::FormatReader) methods of a reader with
/// `cues`, `metadata` and `tracks` fields that reads front to back: sotto never seeks.
macro_rules! front_to_back_reader_methods {
    () => {
        fn cues(&self) -> &[symphonia::core::formats::Cue] {
            &self.cues
        }

        fn metadata(&mut self) -> symphonia::core::meta::Metadata<'_> {
            self.metadata.metadata()
        }

        fn seek(
            &mut self,
            _mode: symphonia::core::formats::SeekMode,
            _to: symphonia::core::formats::SeekTo,
        ) -> symphonia::core::errors::Result<symphonia::core::formats::SeekedTo> {
            symphonia::core::errors::seek_error(symphonia::core::errors::SeekErrorKind::Unseekable)
        }

        fn tracks(&self) -> &[symphonia::core::formats::Track] {
            &self.tracks
        }
    };
}
pub(crate) use front_to_back_reader_methods;

/// A stream whose packets are chunks of the file ((offset, length), in order: Vorbis's in
/// AVI), read as they come: a [`FormatReader`](symphonia::core::formats::FormatReader) of
/// one track with `params`.
pub(crate) struct ChunkReader {
    src: symphonia::core::io::MediaSourceStream,
    tracks: Vec<symphonia::core::formats::Track>,
    cues: Vec<symphonia::core::formats::Cue>,
    metadata: symphonia::core::meta::MetadataLog,
    chunks: std::vec::IntoIter<(u64, u64)>,
}

impl ChunkReader {
    pub(crate) fn new(
        src: symphonia::core::io::MediaSourceStream,
        params: symphonia::core::codecs::CodecParameters,
        chunks: Vec<(u64, u64)>,
    ) -> Self {
        Self {
            src,
            tracks: vec![symphonia::core::formats::Track::new(0, params)],
            cues: Vec::new(),
            metadata: Default::default(),
            chunks: chunks.into_iter(),
        }
    }
}

impl symphonia::core::formats::FormatReader for ChunkReader {
    fn try_new(
        _: symphonia::core::io::MediaSourceStream,
        _: &symphonia::core::formats::FormatOptions,
    ) -> Result<Self> {
        symphonia::core::errors::unsupported_error("chunks: opened by sotto alone")
    }

    front_to_back_reader_methods!();

    fn next_packet(&mut self) -> Result<symphonia::core::formats::Packet> {
        let Some(chunk) = self.chunks.next() else {
            return symphonia::core::errors::end_of_stream_error();
        };
        match read_chunk(&mut self.src, chunk)? {
            Some(data) => Ok(symphonia::core::formats::Packet::new_from_boxed_slice(
                0,
                0,
                0,
                data.into_boxed_slice(),
            )),
            // The file ends inside the chunk: what came before is all there is.
            None => symphonia::core::errors::end_of_stream_error(),
        }
    }

    fn into_inner(self: Box<Self>) -> symphonia::core::io::MediaSourceStream {
        self.src
    }
}

/// FFmpeg's lagged Fibonacci generator (`av_lfg_get`), from the state `av_lfg_init` makes
/// of a seed (words 8 to 63 from MD5 digests of the seed and their index, each over the
/// last digest's bytes; computed once, and kept by the decoders that use it).
pub(crate) struct Lfg {
    state: [u32; 64],
    index: u32,
}

impl Lfg {
    pub(crate) fn new(state: [u32; 64]) -> Self {
        Self { state, index: 0 }
    }

    pub(crate) fn next(&mut self) -> u32 {
        let i = self.index;
        let a = self.state[(i.wrapping_sub(24) & 63) as usize]
            .wrapping_add(self.state[(i.wrapping_sub(55) & 63) as usize]);
        self.state[(i & 63) as usize] = a;
        self.index = i.wrapping_add(1);
        a
    }
}

/// A speech codec's decoder over fixed-size blocks of bytes, each into mono samples.
pub(crate) trait BlockDecode {
    /// Whether a shorter last block still decodes (G.722's bytes are each a sample pair).
    const PARTIAL: bool;
    /// 16-bit integers, or floats (Nellymoser's).
    type Sample: WavSample;
    /// Bytes a block takes.
    fn block(&self) -> usize;
    /// Samples a whole block decodes to (of all its channels).
    fn samples_per_block(&self) -> usize;
    fn decode(&mut self, block: &[u8], out: &mut Vec<Self::Sample>);
    /// Channels, their samples interleaved: one but for Yamaha's ADPCM in stereo.
    fn channels(&self) -> u16 {
        1
    }
}

/// A sample as a WAV file holds it.
pub(crate) trait WavSample: Copy {
    /// The format tag (PCM, IEEE float) and bits a sample.
    const FORMAT: u16;
    const BITS: u16;
    fn push_le(self, out: &mut Vec<u8>);
}

impl WavSample for i16 {
    const FORMAT: u16 = 1;
    const BITS: u16 = 16;
    fn push_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl WavSample for f32 {
    const FORMAT: u16 = 3;
    const BITS: u16 = 32;
    fn push_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

/// The `len` bytes of `src` at `at` (a container's packet), or None where the file ends
/// inside them.
pub(crate) fn read_chunk(
    src: &mut dyn symphonia::core::io::MediaSource,
    (at, len): (u64, u64),
) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::SeekFrom;
    let mut packet = vec![0u8; len as usize];
    src.seek(SeekFrom::Start(at))?;
    Ok(src.read_exact(&mut packet).is_ok().then_some(packet))
}

/// Bytes made and not yet handed out by a reader that decodes as it is read (a WAV header,
/// then each block's or packet's samples).
pub(crate) struct Pending {
    bytes: Vec<u8>,
    taken: usize,
}

impl Pending {
    /// Starting with `header`.
    pub(crate) fn new(header: Vec<u8>) -> Self {
        Self {
            bytes: header,
            taken: 0,
        }
    }

    /// Whether all made has been handed out.
    pub(crate) fn is_empty(&self) -> bool {
        self.taken == self.bytes.len()
    }

    /// Makes `samples` the bytes to hand out next.
    pub(crate) fn refill<S: WavSample>(&mut self, samples: impl IntoIterator<Item = S>) {
        self.bytes.clear();
        self.taken = 0;
        for s in samples {
            s.push_le(&mut self.bytes);
        }
    }

    /// Empties the bytes to hand out, for the caller to fill with the next ones.
    pub(crate) fn refill_bytes(&mut self) -> &mut Vec<u8> {
        self.bytes.clear();
        self.taken = 0;
        &mut self.bytes
    }

    /// Hands out what fits in `buf`.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> usize {
        let n = (self.bytes.len() - self.taken).min(buf.len());
        buf[..n].copy_from_slice(&self.bytes[self.taken..self.taken + n]);
        self.taken += n;
        n
    }
}

/// The blocks in a byte range of `src`, decoded as they are read and handed out as a
/// mono WAV file of the decoder's samples.
pub(crate) struct DecodedWav<D> {
    src: Box<dyn symphonia::core::io::MediaSource>,
    dec: D,
    /// Where the next block is, and where the blocks end.
    at: u64,
    end: u64,
    pending: Pending,
}

impl<D: BlockDecode> DecodedWav<D> {
    /// The blocks `dec` decodes in `src` from `start` to `end`, at `rate` Hz.
    pub(crate) fn new(
        src: Box<dyn symphonia::core::io::MediaSource>,
        dec: D,
        (start, end): (u64, u64),
        rate: u32,
    ) -> Self {
        let block = dec.block() as u64;
        let bytes = end.saturating_sub(start);
        let (blocks, rest) = (bytes / block, bytes % block);
        let samples = blocks * dec.samples_per_block() as u64
            + if D::PARTIAL {
                rest * dec.samples_per_block() as u64 / block
            } else {
                0
            };
        let end = if D::PARTIAL {
            start + bytes
        } else {
            start + blocks * block
        };
        let bytes = u64::from(D::Sample::BITS / 8);
        let data = u32::try_from(samples * bytes)
            .unwrap_or(u32::MAX)
            .min(u32::MAX - 46);
        let channels = dec.channels();
        let align = bytes as u32 * u32::from(channels);
        let mut fmt = Vec::with_capacity(18);
        fmt.extend_from_slice(&D::Sample::FORMAT.to_le_bytes());
        fmt.extend_from_slice(&channels.to_le_bytes());
        fmt.extend_from_slice(&rate.to_le_bytes());
        fmt.extend_from_slice(&rate.saturating_mul(align).to_le_bytes());
        fmt.extend_from_slice(&(align as u16).to_le_bytes());
        fmt.extend_from_slice(&D::Sample::BITS.to_le_bytes());
        if D::Sample::FORMAT != 1 {
            // A WAVEFORMATEX's extra size, which a format but PCM's has.
            fmt.extend_from_slice(&0u16.to_le_bytes());
        }
        let h = crate::avi::wav_header(&fmt, u64::from(data));
        Self {
            src,
            dec,
            at: start,
            end,
            pending: Pending::new(h),
        }
    }
}

impl<D: BlockDecode> std::io::Read for DecodedWav<D> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::{Seek, SeekFrom};
        if self.pending.is_empty() {
            let size = (self.dec.block() as u64).min(self.end.saturating_sub(self.at));
            if size == 0 {
                return Ok(0);
            }
            let mut block = vec![0u8; size as usize];
            self.src.seek(SeekFrom::Start(self.at))?;
            if self.src.read_exact(&mut block).is_err() {
                // The file ends inside a block: what decoded is all there is.
                self.end = self.at;
                return Ok(0);
            }
            self.at += size;
            let mut samples = Vec::with_capacity(self.dec.samples_per_block());
            self.dec.decode(&block, &mut samples);
            self.pending.refill(samples);
        }
        Ok(self.pending.read(buf))
    }
}

/// A part of a file [`Pieces`] shows: bytes of the source (offset, length), or bytes made
/// here.
pub(crate) enum Piece {
    Src(u64, u64),
    Bytes(Vec<u8>),
}

impl Piece {
    fn len(&self) -> u64 {
        match self {
            Piece::Src(_, n) => *n,
            Piece::Bytes(b) => b.len() as u64,
        }
    }
}

/// The file its pieces make, read and seeked in as one (Ogg pages split in two, an AIFF-C
/// file's sound data behind a CAF header).
pub(crate) struct Pieces {
    src: Box<dyn MediaSource>,
    pieces: Vec<Piece>,
    /// Where each piece starts in the file shown.
    starts: Vec<u64>,
    len: u64,
    pos: u64,
}

impl Pieces {
    pub(crate) fn new(src: Box<dyn MediaSource>, pieces: Vec<Piece>) -> Self {
        let mut starts = Vec::with_capacity(pieces.len());
        let mut len = 0;
        for p in &pieces {
            starts.push(len);
            len += p.len();
        }
        Self {
            src,
            pieces,
            starts,
            len,
            pos: 0,
        }
    }
}

impl Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.len || buf.is_empty() {
            return Ok(0);
        }
        // The piece the position is in: the last that starts at or before it.
        let i = self.starts.partition_point(|&s| s <= self.pos) - 1;
        let into = self.pos - self.starts[i];
        let left = self.pieces[i].len() - into;
        let want = left.min(buf.len() as u64) as usize;
        let n = match &self.pieces[i] {
            Piece::Bytes(b) => {
                buf[..want].copy_from_slice(&b[into as usize..into as usize + want]);
                want
            }
            Piece::Src(offset, _) => {
                self.src.seek(SeekFrom::Start(offset + into))?;
                self.src.read(&mut buf[..want])?
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Pieces {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let at = match to {
            SeekFrom::Start(n) => i128::from(n),
            SeekFrom::End(d) => i128::from(self.len) + i128::from(d),
            SeekFrom::Current(d) => i128::from(self.pos) + i128::from(d),
        };
        self.pos = u64::try_from(at).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "a seek before the start")
        })?;
        Ok(self.pos)
    }
}

impl MediaSource for Pieces {
    fn is_seekable(&self) -> bool {
        true
    }

    fn byte_len(&self) -> Option<u64> {
        Some(self.len)
    }
}

/// `src`, a seekable file at its start, with the bytes at each `(offset, bytes)` (in order,
/// apart) shown as `bytes`; `src` as it is where there is nothing to change or its length
/// is unknown.
pub(crate) fn patched(
    mut src: Box<dyn MediaSource>,
    patches: Vec<(u64, Vec<u8>)>,
) -> Box<dyn MediaSource> {
    use std::io::SeekFrom;
    let len = src.byte_len().or_else(|| src.seek(SeekFrom::End(0)).ok());
    let _ = src.seek(SeekFrom::Start(0));
    let Some(len) = len.filter(|_| !patches.is_empty()) else {
        return src;
    };
    let mut pieces = Vec::new();
    let mut at = 0;
    for (offset, bytes) in patches {
        let end = (offset + bytes.len() as u64).min(len);
        if offset < at || end <= offset {
            continue;
        }
        pieces.push(Piece::Src(at, offset - at));
        pieces.push(Piece::Bytes(bytes[..(end - offset) as usize].to_vec()));
        at = end;
    }
    pieces.push(Piece::Src(at, len - at));
    Box::new(Pieces::new(src, pieces))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_signs_and_overruns() {
        let mut r = Bits::new(&[0b1011_0011, 0xFF, 0x00, 0x80, 0x01]);
        assert_eq!(r.get(1), Ok(1));
        assert_eq!(r.get(3), Ok(0b011));
        assert_eq!(r.signed(4), Ok(3));
        assert_eq!(r.signed(8), Ok(-1));
        assert_eq!(r.get(23), Ok(0x80 << 7));
        assert_eq!(r.pos, 39);
        assert!(r.get(2).is_err());
        assert_eq!(r.get(1), Ok(1));
        assert_eq!(r.signed(0), Ok(0));
    }

    #[test]
    fn the_buffer_grows_and_starts_anew_for_a_new_layout() {
        let stereo = Channels::FRONT_LEFT | Channels::FRONT_RIGHT;
        let mut buf = AudioBuffer::new(4, SignalSpec::new(48_000, stereo));
        assert!(!make_room(&mut buf, 48_000, stereo, 3, 4).unwrap());
        buf.render_reserved(Some(3));
        buf.chan_mut(1)[2] = 0.5;
        assert!(!make_room(&mut buf, 48_000, stereo, 10, 4).unwrap());
        assert!(buf.capacity() >= 13);
        assert_eq!((buf.frames(), buf.chan(1)[2]), (3, 0.5));
        assert!(make_room(&mut buf, 44_100, stereo, 3, 4).is_err());
        buf.clear();
        assert!(make_room(&mut buf, 44_100, Channels::FRONT_CENTRE, 3, 4).unwrap());
        assert_eq!(buf.spec().channels, Channels::FRONT_CENTRE);
    }

    #[test]
    fn pieces_read_and_seek_as_one_file() {
        let src = Box::new(std::io::Cursor::new(b"0123456789".to_vec()));
        let mut p = Pieces::new(
            src,
            vec![
                Piece::Src(0, 3),
                Piece::Bytes(b"abc".to_vec()),
                Piece::Src(5, 5),
            ],
        );
        let mut all = Vec::new();
        p.read_to_end(&mut all).unwrap();
        assert_eq!(all, b"012abc56789");
        p.seek(SeekFrom::End(-4)).unwrap();
        let mut four = [0u8; 4];
        p.read_exact(&mut four).unwrap();
        assert_eq!(&four, b"6789");
        assert!(p.seek(SeekFrom::Current(-20)).is_err());
        assert_eq!(p.byte_len(), Some(11));
    }
}
