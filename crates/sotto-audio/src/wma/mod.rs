//! Windows Media Audio 1 and 2 (WAVE format tags 0x0160 and 0x0161): the codec of `.wma`
//! files, of Windows' Sound Recorder before Windows 10, of dictation devices and of
//! Windows Media Player's rips, which faster-whisper decodes through FFmpeg and sotto
//! refused. A transform codec: superframes of `block_align` bytes, each holding frames
//! (and, with the bit reservoir, the end of the last superframe's frame) of
//! `frame_len` samples; a frame is blocks of 128 to 2048 MDCT coefficients, shaped by
//! exponents (a VLC-coded band envelope, or 10 LSPs), their run/level-coded values,
//! noise in place of the upper bands where the bit rate is low, and mid/side stereo.
//!
//! Every step is FFmpeg's `wmadec.c`, in its order and float precision, with its quirks
//! (version 1's exponents read at the frame's band table in every block, the side
//! channel of an uncoded block taken from the mid's transform): only the inverse
//! transform is computed otherwise (through a DCT-IV, `codec::Dct4`), so the samples
//! are FFmpeg's to within float rounding. As FFmpeg does, the first two frames' worth of
//! samples (the transform's warm-up) are dropped, and the last frame's overlap comes out
//! at the end of the stream (an empty packet asks for it).

mod tables;
mod wav;

pub(crate) use wav::WavReader;

use symphonia::core::audio::{AudioBuffer, Channels, Signal};
use symphonia::core::codecs::{decl_codec_type, CodecDescriptor, CodecParameters, CodecType};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::support_codec;

use crate::codec::{buffered_decoder_methods, make_room, Bits, Dct4, Huffman, Parse};
use tables::{COEFS, EXPONENT_BAND_22050, EXPONENT_BAND_32000, EXPONENT_BAND_44100};
use tables::{EXP_CODES, EXP_LENS, HGAIN, LSP_CODEBOOK};

/// WMA version 1 (format tag 0x0160).
pub(crate) const CODEC_TYPE_WMAV1: CodecType = decl_codec_type(b"wma1");
/// WMA version 2 (format tag 0x0161).
pub(crate) const CODEC_TYPE_WMAV2: CodecType = decl_codec_type(b"wma2");
/// The WAVE format tags of WMA 1 and 2.
pub(crate) const WAV_TAGS: [u16; 2] = [0x0160, 0x0161];

/// Whether decoders of `codec` hold samples back until an empty packet asks for them.
pub(crate) fn holds_back(codec: CodecType) -> bool {
    codec == CODEC_TYPE_WMAV1 || codec == CODEC_TYPE_WMAV2
}

/// Log2 of the shortest and the longest block.
const BLOCK_MIN_BITS: u32 = 7;
const BLOCK_MAX_SIZE: usize = 1 << 11;
/// Block sizes there can be (2048 down to 128).
const BLOCK_NB_SIZES: usize = 5;
/// Bands of noise in a block, at the most.
const HIGH_BAND_MAX_SIZE: usize = 16;
const NB_LSP_COEFS: usize = 10;
/// Bytes of a frame that a superframe's bit reservoir may hold over.
const MAX_CODED_SUPERFRAME_SIZE: usize = 32768;
const NOISE_TAB_SIZE: usize = 8192;
const LSP_POW_BITS: u32 = 7;

/// The codec's configuration: the WAVEFORMATEX that ASF, AVI and WAV files describe
/// the stream with (the format tag, channels, rate, bytes a second, block alignment,
/// and the codec's extra bytes, whose flags pick its coding tools).
pub(crate) struct Config {
    pub(crate) version: u8,
    pub(crate) rate: u32,
    pub(crate) channels: usize,
    pub(crate) bit_rate: u32,
    pub(crate) block_align: usize,
    flags2: u16,
    /// Version 2's extra bytes carry 0x000d as their flags (a quirk of some encoders).
    quirk_fixed_blocks: bool,
}

impl Config {
    /// The configuration a WAVEFORMATEX describes, where its tag is WMA 1 or 2.
    pub(crate) fn from_waveformatex(fmt: &[u8]) -> Option<Self> {
        let u16_at = |at: usize| {
            fmt.get(at..at + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
        };
        let u32_at = |at: usize| {
            fmt.get(at..at + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("four bytes")))
        };
        let version = match u16_at(0)? {
            0x0160 => 1,
            0x0161 => 2,
            _ => return None,
        };
        let extra = fmt.get(18..).unwrap_or(&[]);
        let extra = &extra[..usize::from(u16_at(16).unwrap_or(0)).min(extra.len())];
        let le16 = |at: usize| {
            extra
                .get(at..at + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
        };
        let flags2 = match version {
            1 => le16(2),
            _ => le16(4),
        };
        Some(Self {
            version,
            channels: usize::from(u16_at(2)?),
            rate: u32_at(4)?,
            bit_rate: u32_at(8)?.saturating_mul(8),
            block_align: usize::from(u16_at(12)?),
            flags2: flags2.unwrap_or(0),
            quirk_fixed_blocks: version == 2 && extra.len() >= 8 && le16(4) == Some(0x000d),
        })
    }

    /// The codec type of this version.
    pub(crate) fn codec(&self) -> CodecType {
        if self.version == 1 {
            CODEC_TYPE_WMAV1
        } else {
            CODEC_TYPE_WMAV2
        }
    }
}

/// A decoder's fixed tables and its state between superframes (FFmpeg's
/// `WMACodecContext`).
pub(crate) struct Wma {
    version: u8,
    channels: usize,
    block_align: usize,
    use_exp_vlc: bool,
    use_bit_reservoir: bool,
    use_variable_block_len: bool,
    use_noise_coding: bool,
    byte_offset_bits: u32,
    frame_len_bits: u32,
    frame_len: usize,
    nb_block_sizes: usize,
    /// Band widths of each block size, in one run (version 1's exponents walk on into
    /// the next size's bands, as FFmpeg's do).
    exponent_bands: [u16; BLOCK_NB_SIZES * 25],
    high_band_start: [usize; BLOCK_NB_SIZES],
    coefs_start: usize,
    coefs_end: [usize; BLOCK_NB_SIZES],
    exponent_high_bands: [Vec<usize>; BLOCK_NB_SIZES],
    coef_vlc: [Huffman; 2],
    run_table: [Vec<u16>; 2],
    level_table: [Vec<f32>; 2],
    exp_vlc: Option<Huffman>,
    hgain_vlc: Huffman,
    noise_table: Vec<f32>,
    noise_index: usize,
    noise_mult: f32,
    lsp_cos_table: Vec<f32>,
    lsp_pow_e_table: [f32; 256],
    lsp_pow_m_table1: [f32; 1 << LSP_POW_BITS],
    lsp_pow_m_table2: [f32; 1 << LSP_POW_BITS],
    /// The sine window of each block size, and its DCT-IV.
    windows: Vec<Vec<f32>>,
    dct: Vec<Dct4>,
    /// The DCT-IV's output, before it is unfolded into the block's samples.
    dct_out: Box<[f32; BLOCK_MAX_SIZE]>,

    reset_block_lengths: bool,
    block_len_bits: u32,
    next_block_len_bits: u32,
    prev_block_len_bits: u32,
    block_len: usize,
    block_pos: usize,
    ms_stereo: bool,
    channel_coded: [bool; 2],
    exponents_bsize: [u32; 2],
    exponents_initialized: [bool; 2],
    exponents: [Box<[f32; BLOCK_MAX_SIZE]>; 2],
    max_exponent: [f32; 2],
    high_band_coded: [[bool; HIGH_BAND_MAX_SIZE]; 2],
    high_band_values: [[i32; HIGH_BAND_MAX_SIZE]; 2],
    coefs1: [Box<[f32; BLOCK_MAX_SIZE]>; 2],
    coefs: [Box<[f32; BLOCK_MAX_SIZE]>; 2],
    output: Box<[f32; 2 * BLOCK_MAX_SIZE]>,
    frame_out: [Box<[f32; 2 * BLOCK_MAX_SIZE]>; 2],
    /// The bytes of the frame the last superframe began and did not end.
    last_superframe: Vec<u8>,
    last_bitoffset: usize,
}

/// log2 of the samples in a frame (FFmpeg's `ff_wma_get_frame_len_bits` for versions 1
/// and 2).
fn frame_len_bits(rate: u32, version: u8) -> u32 {
    if rate <= 16000 {
        9
    } else if rate <= 22050 || (rate <= 32000 && version == 1) {
        10
    } else {
        11
    }
}

/// FFmpeg's `av_log2`: the index of the highest bit set (0 for 0).
fn log2(v: u32) -> u32 {
    31 - (v | 1).leading_zeros()
}

impl Wma {
    /// The decoder of a stream so configured; why not, where its configuration is one
    /// FFmpeg refuses too.
    pub(crate) fn new(c: &Config) -> std::result::Result<Self, &'static str> {
        let channels = c.channels;
        if c.rate == 0 || c.rate > 50000 || !(1..=2).contains(&channels) || c.bit_rate == 0 {
            return Err("WMA with a rate, channel count or bit rate out of its range");
        }
        if c.block_align == 0 {
            return Err("WMA without a block alignment");
        }
        let flags2 = u32::from(c.flags2);
        let use_exp_vlc = flags2 & 1 != 0;
        let use_bit_reservoir = flags2 & 2 != 0;
        let use_variable_block_len = flags2 & 4 != 0 && !c.quirk_fixed_blocks;
        let rate = c.rate;
        let frame_len_bits = frame_len_bits(rate, c.version);
        let frame_len = 1usize << frame_len_bits;
        let nb_block_sizes = if use_variable_block_len {
            let mut nb = ((flags2 >> 3) & 3) + 1;
            if c.bit_rate / channels as u32 >= 32000 {
                nb += 2;
            }
            nb.min(frame_len_bits - BLOCK_MIN_BITS) as usize + 1
        } else {
            1
        };

        let mut use_noise_coding = true;
        let mut high_freq = rate as f32 * 0.5;
        let mut rate1 = rate;
        if c.version == 2 {
            rate1 = match rate {
                44100.. => 44100,
                22050.. => 22050,
                16000.. => 16000,
                11025.. => 11025,
                8000.. => 8000,
                _ => rate,
            };
        }
        let bps = c.bit_rate as f32 / (channels as u32 * rate) as f32;
        let byte_offset_bits = log2((f64::from(bps * frame_len as f32) / 8.0 + 0.5) as u32) + 2;
        if byte_offset_bits + 3 > 25 {
            return Err("WMA with a bit rate too high for its superframe header");
        }
        let bps1 = if channels == 2 {
            (f64::from(bps) * 1.6) as f32
        } else {
            bps
        };
        let (b, b1) = (f64::from(bps), f64::from(bps1));
        let scale = |f: f32, by: f64| (f64::from(f) * by) as f32;
        match rate1 {
            44100 => {
                if b1 >= 0.61 {
                    use_noise_coding = false;
                } else {
                    high_freq = scale(high_freq, 0.4);
                }
            }
            22050 => {
                if b1 >= 1.16 {
                    use_noise_coding = false;
                } else if b1 >= 0.72 {
                    high_freq = scale(high_freq, 0.7);
                } else {
                    high_freq = scale(high_freq, 0.6);
                }
            }
            16000 => high_freq = scale(high_freq, if b > 0.5 { 0.5 } else { 0.3 }),
            11025 => high_freq = scale(high_freq, 0.7),
            8000 => {
                if b <= 0.625 {
                    high_freq = scale(high_freq, 0.5);
                } else if b > 0.75 {
                    use_noise_coding = false;
                } else {
                    high_freq = scale(high_freq, 0.65);
                }
            }
            _ => {
                let by = if b >= 0.8 {
                    0.75
                } else if b >= 0.6 {
                    0.6
                } else {
                    0.5
                };
                high_freq = scale(high_freq, by);
            }
        }

        // The scale factor bands of each block size.
        const CRITICAL_FREQS: [u32; 25] = [
            100, 200, 300, 400, 510, 630, 770, 920, 1080, 1270, 1480, 1720, 2000, 2320, 2700, 3150,
            3700, 4400, 5300, 6400, 7700, 9500, 12000, 15500, 24500,
        ];
        let coefs_start = if c.version == 1 { 3 } else { 0 };
        let mut exponent_bands = [0u16; BLOCK_NB_SIZES * 25];
        let mut exponent_sizes = [0usize; BLOCK_NB_SIZES];
        let mut high_band_start = [0usize; BLOCK_NB_SIZES];
        let mut coefs_end = [0usize; BLOCK_NB_SIZES];
        let mut exponent_high_bands: [Vec<usize>; BLOCK_NB_SIZES] = Default::default();
        for k in 0..nb_block_sizes {
            let block_len = (frame_len >> k) as u32;
            if c.version == 1 {
                // Every size's bands go to the first row, as FFmpeg writes them.
                let mut lpos = 0;
                let mut i = 0;
                while i < 25 {
                    let pos =
                        ((block_len * 2 * CRITICAL_FREQS[i] + (rate >> 1)) / rate).min(block_len);
                    exponent_bands[i] = (pos - lpos) as u16;
                    i += 1;
                    if pos >= block_len {
                        break;
                    }
                    lpos = pos;
                }
                exponent_sizes[0] = i;
            } else {
                let a = frame_len_bits - BLOCK_MIN_BITS - k as u32;
                let table = if a >= 3 {
                    None
                } else if rate >= 44100 {
                    Some(EXPONENT_BAND_44100[a as usize])
                } else if rate >= 32000 {
                    Some(EXPONENT_BAND_32000[a as usize])
                } else if rate >= 22050 {
                    Some(EXPONENT_BAND_22050[a as usize])
                } else {
                    None
                };
                let row = &mut exponent_bands[k * 25..(k + 1) * 25];
                if let Some(table) = table {
                    let n = usize::from(table[0]);
                    for (r, &t) in row.iter_mut().zip(&table[1..=n]) {
                        *r = u16::from(t);
                    }
                    exponent_sizes[k] = n;
                } else {
                    let (mut j, mut lpos) = (0, 0);
                    for &a in &CRITICAL_FREQS {
                        let pos = ((((block_len * 2 * a) + (rate << 1)) / (4 * rate)) << 2)
                            .min(block_len);
                        if pos > lpos {
                            row[j] = (pos - lpos) as u16;
                            j += 1;
                        }
                        if pos >= block_len {
                            break;
                        }
                        lpos = pos;
                    }
                    exponent_sizes[k] = j;
                }
            }
            coefs_end[k] = (frame_len - (frame_len * 9) / 100) >> k;
            high_band_start[k] =
                (f64::from(block_len as f32 * 2.0 * high_freq / rate as f32) + 0.5) as usize;
            let mut pos = 0;
            for i in 0..exponent_sizes[k] {
                let start = pos;
                pos += usize::from(exponent_bands[k * 25 + i]);
                let (start, end) = (start.max(high_band_start[k]), pos.min(coefs_end[k]));
                if end > start {
                    exponent_high_bands[k].push(end - start);
                }
            }
            exponent_high_bands[k].truncate(HIGH_BAND_MAX_SIZE);
        }

        let windows = (0..nb_block_sizes)
            .map(|k| {
                let n = 1usize << (frame_len_bits as usize - k);
                (0..n)
                    .map(|i| {
                        (((i as f64 + 0.5) * (std::f64::consts::PI / (2.0 * n as f64))) as f32)
                            .sin()
                    })
                    .collect()
            })
            .collect();
        let dct = (0..nb_block_sizes)
            .map(|k| Dct4::new(frame_len >> k))
            .collect();

        let noise_mult: f32 = if use_exp_vlc { 0.02 } else { 0.04 };
        let noise_table = if use_noise_coding {
            let norm = ((1.0 / 2147483648.0) * 3f64.sqrt() * f64::from(noise_mult)) as f32;
            let mut seed = 1u32;
            (0..NOISE_TAB_SIZE)
                .map(|_| {
                    seed = seed.wrapping_mul(314159).wrapping_add(1);
                    seed as i32 as f32 * norm
                })
                .collect()
        } else {
            vec![0.0; NOISE_TAB_SIZE]
        };

        let table = match (rate >= 32000, bps1 < 0.72, bps1 < 1.16) {
            (true, true, _) => 0,
            (true, false, true) => 1,
            _ => 2,
        };
        let coef = |t: usize| {
            let table = &COEFS[t];
            let n = table.lens.len();
            let (mut run, mut level) = (vec![0u16; n], vec![0f32; n]);
            let (mut i, mut l) = (2, 1);
            for &runs in table.levels {
                for j in 0..runs {
                    if i < n {
                        run[i] = j;
                        level[i] = l as f32;
                        i += 1;
                    }
                }
                l += 1;
            }
            (
                Huffman::new(table.lens, table.codes.iter().copied()),
                run,
                level,
            )
        };
        let (vlc0, run0, level0) = coef(table * 2);
        let (vlc1, run1, level1) = coef(table * 2 + 1);

        // The noise bands' gain steps (+ 18), their codes assigned in the table's order
        // from their lengths (FFmpeg's `ff_init_vlc_from_lengths`).
        let (mut hgain_lens, mut hgain_codes, mut code) = ([0u8; 37], [0u32; 37], 0u64);
        for &(symbol, len) in &HGAIN {
            hgain_lens[usize::from(symbol)] = len;
            hgain_codes[usize::from(symbol)] = (code >> (32 - len)) as u32;
            code += 1u64 << (32 - len);
        }

        let mut lsp_cos_table = Vec::new();
        let mut lsp_pow_e_table = [0f32; 256];
        let mut lsp_pow_m_table1 = [0f32; 1 << LSP_POW_BITS];
        let mut lsp_pow_m_table2 = [0f32; 1 << LSP_POW_BITS];
        if !use_exp_vlc {
            let wdel = (std::f64::consts::PI / frame_len as f64) as f32;
            lsp_cos_table = (0..frame_len)
                .map(|i| (2.0 * f64::from(wdel * i as f32).cos()) as f32)
                .collect();
            for (i, e) in lsp_pow_e_table.iter_mut().enumerate() {
                *e = ((i as f64 - 126.0) * -0.25).exp2() as f32;
            }
            let mut b = 1f32;
            for i in (0..1usize << LSP_POW_BITS).rev() {
                let m = (1 << LSP_POW_BITS) + i;
                let a = (m as f64 * (0.5 / f64::from(1u32 << LSP_POW_BITS))) as f32;
                let a = (1.0 / f64::from(a).sqrt().sqrt()) as f32;
                lsp_pow_m_table1[i] = 2.0 * a - b;
                lsp_pow_m_table2[i] = b - a;
                b = a;
            }
        }

        let zeros = || Box::new([0f32; BLOCK_MAX_SIZE]);
        Ok(Self {
            version: c.version,
            channels,
            block_align: c.block_align,
            use_exp_vlc,
            use_bit_reservoir,
            use_variable_block_len,
            use_noise_coding,
            byte_offset_bits,
            frame_len_bits,
            frame_len,
            nb_block_sizes,
            exponent_bands,
            high_band_start,
            coefs_start,
            coefs_end,
            exponent_high_bands,
            coef_vlc: [vlc0, vlc1],
            run_table: [run0, run1],
            level_table: [level0, level1],
            exp_vlc: use_exp_vlc.then(|| Huffman::new(&EXP_LENS, EXP_CODES.iter().copied())),
            hgain_vlc: Huffman::new(&hgain_lens, hgain_codes),
            noise_table,
            noise_index: 0,
            noise_mult,
            lsp_cos_table,
            lsp_pow_e_table,
            lsp_pow_m_table1,
            lsp_pow_m_table2,
            windows,
            dct,
            dct_out: zeros(),
            reset_block_lengths: true,
            block_len_bits: frame_len_bits,
            next_block_len_bits: frame_len_bits,
            prev_block_len_bits: frame_len_bits,
            block_len: frame_len,
            block_pos: 0,
            ms_stereo: false,
            channel_coded: [false; 2],
            exponents_bsize: [0; 2],
            exponents_initialized: [false; 2],
            exponents: [zeros(), zeros()],
            max_exponent: [1.0; 2],
            high_band_coded: [[false; HIGH_BAND_MAX_SIZE]; 2],
            high_band_values: [[0; HIGH_BAND_MAX_SIZE]; 2],
            coefs1: [zeros(), zeros()],
            coefs: [zeros(), zeros()],
            output: Box::new([0.0; 2 * BLOCK_MAX_SIZE]),
            frame_out: [
                Box::new([0.0; 2 * BLOCK_MAX_SIZE]),
                Box::new([0.0; 2 * BLOCK_MAX_SIZE]),
            ],
            last_superframe: Vec::new(),
            last_bitoffset: 0,
        })
    }

    /// Samples in a frame.
    pub(crate) fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Decodes a superframe (`block_align` bytes; FFmpeg's `wma_decode_superframe`),
    /// each channel's samples appended to `out`; nothing where it fails (and the bit
    /// reservoir is emptied, as FFmpeg does).
    pub(crate) fn superframe(&mut self, buf: &[u8], out: &mut [Vec<f32>]) -> Parse<()> {
        let Some(buf) = buf.get(..self.block_align) else {
            return Err("a WMA packet shorter than its block alignment");
        };
        let start: Vec<usize> = out.iter().map(Vec::len).collect();
        let result = self.superframe_inner(buf, out);
        if result.is_err() {
            for (o, &len) in out.iter_mut().zip(&start) {
                o.truncate(len);
            }
        }
        result
    }

    fn superframe_inner(&mut self, buf: &[u8], out: &mut [Vec<f32>]) -> Parse<()> {
        if !self.use_bit_reservoir {
            let mut r = Bits::new(buf);
            return self.frame(&mut r, out);
        }
        let mut r = Bits::new(buf);
        r.skip(4)?; // the superframe's index
        let nb_frames = r.get(4)? as i32 - i32::from(self.last_superframe.is_empty());
        if nb_frames <= 0 {
            // No frame ends here: all of it goes to the reservoir.
            if nb_frames < 0 || r.left() <= 8 {
                return Err("a WMA superframe that ends no frame and holds none");
            }
            if self.last_superframe.len() + buf.len() - 1 > MAX_CODED_SUPERFRAME_SIZE {
                self.last_superframe.clear();
                return Err("a WMA frame longer than its reservoir");
            }
            self.last_superframe.extend_from_slice(&buf[1..]);
            return Ok(());
        }
        let mut nb_frames = nb_frames as usize;
        let header = 4 + 4 + self.byte_offset_bits as usize + 3;
        let failed = |this: &mut Self, why| {
            this.last_superframe.clear();
            Err(why)
        };
        let bit_offset = r.get(self.byte_offset_bits + 3)? as usize;
        if bit_offset > r.left() {
            return failed(self, "a WMA superframe's frame offset past its end");
        }
        if !self.last_superframe.is_empty() {
            // The last superframe's unfinished frame, ended by this one's first bits.
            if self.last_superframe.len() + bit_offset.div_ceil(8) > MAX_CODED_SUPERFRAME_SIZE {
                return failed(self, "a WMA frame longer than its reservoir");
            }
            let whole = self.last_superframe.len() * 8 + bit_offset;
            let mut len = bit_offset;
            while len > 7 {
                self.last_superframe.push(r.get(8)? as u8);
                len -= 8;
            }
            if len > 0 {
                self.last_superframe
                    .push((r.get(len as u32)? << (8 - len)) as u8);
            }
            let last = std::mem::take(&mut self.last_superframe);
            let mut lr = Bits::within(&last, whole);
            let decoded = lr
                .skip(self.last_bitoffset)
                .and_then(|()| self.frame(&mut lr, out));
            self.last_superframe = last;
            if let Err(why) = decoded {
                return failed(self, why);
            }
            nb_frames -= 1;
        }
        let pos = bit_offset + header;
        if pos >= MAX_CODED_SUPERFRAME_SIZE * 8 || pos > buf.len() * 8 {
            return Err("a WMA superframe's frame offset past its end");
        }
        let mut r = Bits::new(buf);
        r.skip(pos)?;
        self.reset_block_lengths = true;
        for _ in 0..nb_frames {
            if let Err(why) = self.frame(&mut r, out) {
                return failed(self, why);
            }
        }
        // The frame this superframe begins and the next ends.
        self.last_bitoffset = r.pos & 7;
        self.last_superframe.clear();
        self.last_superframe.extend_from_slice(&buf[r.pos >> 3..]);
        Ok(())
    }

    /// The samples still held at the end of the stream: the last frame's overlap.
    pub(crate) fn flush(&mut self, out: &mut [Vec<f32>]) {
        for (o, f) in out.iter_mut().zip(&self.frame_out) {
            o.extend_from_slice(&f[..self.frame_len]);
        }
        self.last_superframe.clear();
    }

    /// A frame of `frame_len` samples (FFmpeg's `wma_decode_frame`).
    fn frame(&mut self, r: &mut Bits, out: &mut [Vec<f32>]) -> Parse<()> {
        self.block_pos = 0;
        while !self.block(r)? {}
        let n = self.frame_len;
        for (o, f) in out.iter_mut().zip(self.frame_out.iter_mut()) {
            o.extend_from_slice(&f[..n]);
            f.copy_within(n..2 * n, 0);
        }
        Ok(())
    }

    /// One block; whether it ends its frame (FFmpeg's `wma_decode_block`).
    fn block(&mut self, r: &mut Bits) -> Parse<bool> {
        let channels = self.channels;
        let flb = self.frame_len_bits;
        if self.use_variable_block_len {
            let n = log2(self.nb_block_sizes as u32 - 1) + 1;
            let size = |r: &mut Bits| -> Parse<u32> {
                let v = r.get(n)?;
                if v as usize >= self.nb_block_sizes {
                    return Err("a WMA block size out of range");
                }
                Ok(flb - v)
            };
            if self.reset_block_lengths {
                self.reset_block_lengths = false;
                self.prev_block_len_bits = size(r)?;
                self.block_len_bits = size(r)?;
            } else {
                self.prev_block_len_bits = self.block_len_bits;
                self.block_len_bits = self.next_block_len_bits;
            }
            self.next_block_len_bits = size(r)?;
        } else {
            self.next_block_len_bits = flb;
            self.prev_block_len_bits = flb;
            self.block_len_bits = flb;
        }
        if (flb - self.block_len_bits) as usize >= self.nb_block_sizes {
            return Err("a WMA block size out of range");
        }
        self.block_len = 1 << self.block_len_bits;
        if self.block_pos + self.block_len > self.frame_len {
            return Err("WMA blocks longer than their frame");
        }
        if channels == 2 {
            self.ms_stereo = r.bit()?;
        }
        let mut any = false;
        for ch in 0..channels {
            self.channel_coded[ch] = r.bit()?;
            any |= self.channel_coded[ch];
        }
        let bsize = (flb - self.block_len_bits) as usize;
        if any {
            self.coefficients(r, bsize)?;
        }

        let n4 = self.block_len / 2;
        for ch in 0..channels {
            if self.channel_coded[ch] {
                let m = self.block_len;
                let c = &mut self.dct_out[..m];
                self.dct[bsize].dct4(&self.coefs[ch][..m], 0, 1, c);
                // The IMDCT's 2m samples (FFmpeg's sign and 1/32768 scale): the DCT-IV's
                // periodic extension (c, then c reversed and negated, then c negated)
                // from m/2 on, negated.
                let scale = 1.0 / 32768.0;
                let (h, out) = (m / 2, &mut self.output[..2 * m]);
                let (first, rest) = out.split_at_mut(h);
                let (middle, last) = rest.split_at_mut(m);
                for (o, &v) in first.iter_mut().zip(&c[h..]) {
                    *o = -v * scale;
                }
                for (o, &v) in middle.iter_mut().zip(c.iter().rev()) {
                    *o = v * scale;
                }
                for (o, &v) in last.iter_mut().zip(&c[..h]) {
                    *o = v * scale;
                }
            } else if !(self.ms_stereo && ch == 1) {
                self.output[..2 * self.block_len].fill(0.0);
            }
            let index = self.frame_len / 2 + self.block_pos - n4;
            self.window(ch, index);
        }
        self.block_pos += self.block_len;
        Ok(self.block_pos >= self.frame_len)
    }

    /// A block's exponents, coefficients and their scaling into `coefs`, ready for the
    /// transform.
    fn coefficients(&mut self, r: &mut Bits, bsize: usize) -> Parse<()> {
        let channels = self.channels;
        let mut total_gain = 1u32;
        loop {
            if r.left() < 7 {
                return Err("a WMA block's gain runs past its frame");
            }
            let a = r.get(7)?;
            total_gain += a;
            if a != 127 {
                break;
            }
        }
        let coef_nb_bits = match total_gain {
            0..15 => 13,
            15..32 => 12,
            32..40 => 11,
            40..45 => 10,
            _ => 9,
        };
        let n = self.coefs_end[bsize] as i64 - self.coefs_start as i64;
        let mut nb_coefs = [n; 2];
        let high = self.exponent_high_bands[bsize].len();
        if self.use_noise_coding {
            for (ch, nb) in nb_coefs.iter_mut().enumerate().take(channels) {
                if self.channel_coded[ch] {
                    for i in 0..high {
                        let a = r.bit()?;
                        self.high_band_coded[ch][i] = a;
                        if a {
                            *nb -= self.exponent_high_bands[bsize][i] as i64;
                        }
                    }
                }
            }
            for ch in 0..channels {
                if self.channel_coded[ch] {
                    let mut val = None;
                    for i in 0..high {
                        if self.high_band_coded[ch][i] {
                            let v = match val {
                                None => r.get(7)? as i32 - 19,
                                Some(v) => v + i32::from(r.huffman(&self.hgain_vlc)?) - 18,
                            };
                            val = Some(v);
                            self.high_band_values[ch][i] = v;
                        }
                    }
                }
            }
        }
        // Exponents may be kept from the last block in short ones.
        if self.block_len_bits == self.frame_len_bits || r.bit()? {
            for ch in 0..channels {
                if self.channel_coded[ch] {
                    if self.use_exp_vlc {
                        self.exp_vlc(r, ch)?;
                    } else {
                        self.exp_lsp(r, ch)?;
                    }
                    self.exponents_bsize[ch] = bsize as u32;
                    self.exponents_initialized[ch] = true;
                }
            }
        }
        for ch in 0..channels {
            if self.channel_coded[ch] && !self.exponents_initialized[ch] {
                return Err("a WMA block without exponents");
            }
        }
        for (ch, &nb) in nb_coefs.iter().enumerate().take(channels) {
            if self.channel_coded[ch] {
                let t = usize::from(ch == 1 && self.ms_stereo);
                self.coefs1[ch][..self.block_len].fill(0.0);
                self.run_level(r, t, ch, nb, coef_nb_bits)?;
            }
            if self.version == 1 && channels >= 2 {
                r.align();
            }
        }

        let n4 = self.block_len / 2;
        let mut mdct_norm = 1.0 / n4 as f32;
        if self.version == 1 {
            mdct_norm = (f64::from(mdct_norm) * (n4 as f64).sqrt()) as f32;
        }
        for (ch, &nb) in nb_coefs.iter().enumerate().take(channels) {
            if self.channel_coded[ch] {
                self.scale(ch, bsize, total_gain, mdct_norm, nb);
            }
        }
        if self.ms_stereo && self.channel_coded[1] {
            if !self.channel_coded[0] {
                self.coefs[0][..self.block_len].fill(0.0);
                self.channel_coded[0] = true;
            }
            let (m, s) = self.coefs.split_at_mut(1);
            for (a, b) in m[0][..self.block_len]
                .iter_mut()
                .zip(&mut s[0][..self.block_len])
            {
                let t = *a - *b;
                *a += *b;
                *b = t;
            }
        }
        Ok(())
    }

    /// A channel's coefficients: its decoded values times its exponents and gain, the
    /// noise bands and the bands above and below the coded ones made of noise.
    fn scale(&mut self, ch: usize, bsize: usize, total_gain: u32, norm: f32, nb: i64) {
        let esize = self.exponents_bsize[ch];
        let exps = &self.exponents[ch];
        // FFmpeg walks a pointer over the exponents (of the block size `esize` they were
        // decoded at) by each band's width shifted to them, and reads `i` coefficients
        // past it the same way: `ptr + (i << bsize >> esize)`.
        let shift = |i: i64| (i << bsize) >> esize;
        let e = |ptr: i64, i: i64| -> f32 {
            usize::try_from(ptr + shift(i))
                .ok()
                .and_then(|at| exps.get(at))
                .copied()
                .unwrap_or(0.0)
        };
        let mut mult =
            (10f64.powf(f64::from(total_gain) * 0.05) / f64::from(self.max_exponent[ch])) as f32;
        mult *= norm;
        let coefs1 = &self.coefs1[ch];
        let coefs = &mut self.coefs[ch];
        let mut at = 0usize;
        let mut put = |v: f32| {
            if let Some(c) = coefs.get_mut(at) {
                *c = v;
            }
            at += 1;
        };
        let tail = self.block_len as i64 - self.coefs_end[bsize] as i64;
        if !self.use_noise_coding {
            for _ in 0..self.coefs_start {
                put(0.0);
            }
            for i in 0..nb.max(0) {
                put(coefs1[i as usize & (BLOCK_MAX_SIZE - 1)] * e(0, i) * mult);
            }
            for _ in 0..tail.max(0) {
                put(0.0);
            }
            return;
        }
        let noise = &self.noise_table;
        let index = &mut self.noise_index;
        let mut next_noise = || {
            let v = noise[*index];
            *index = (*index + 1) & (NOISE_TAB_SIZE - 1);
            v
        };
        for i in 0..self.coefs_start as i64 {
            put(next_noise() * e(0, i) * mult);
        }
        let bands = &self.exponent_high_bands[bsize];
        let high_start = self.high_band_start[bsize] as i64;
        // The power of each noise band, from its exponents.
        let mut exp_power = [0f32; HIGH_BAND_MAX_SIZE];
        let mut last_high_band = 0;
        let mut ptr = shift(high_start);
        for (j, &n) in bands.iter().enumerate() {
            let n = n as i64;
            if self.high_band_coded[ch][j] {
                let mut e2 = 0f32;
                for i in 0..n {
                    let v = e(ptr, i);
                    e2 += v * v;
                }
                exp_power[j] = e2 / n as f32;
                last_high_band = j;
            }
            ptr += shift(n);
        }
        let mut ptr = shift(self.coefs_start as i64);
        let mut c1 = 0usize;
        for j in -1..bands.len() as i64 {
            let n = if j < 0 {
                high_start - self.coefs_start as i64
            } else {
                bands[j as usize] as i64
            };
            if j >= 0 && self.high_band_coded[ch][j as usize] {
                let j = j as usize;
                let mut mult1 = f64::from(exp_power[j] / exp_power[last_high_band]).sqrt() as f32;
                mult1 = (f64::from(mult1)
                    * 10f64.powf(f64::from(self.high_band_values[ch][j]) * 0.05))
                    as f32;
                mult1 /= self.max_exponent[ch] * self.noise_mult;
                mult1 *= norm;
                for i in 0..n {
                    put(next_noise() * e(ptr, i) * mult1);
                }
            } else {
                for i in 0..n.max(0) {
                    let v = coefs1[c1 & (BLOCK_MAX_SIZE - 1)];
                    c1 += 1;
                    put((v + next_noise()) * e(ptr, i) * mult);
                }
            }
            ptr += shift(n);
        }
        // The bands above the coded ones: noise at the level of the exponent before.
        let mult1 = mult * e(ptr + ((-(1i64 << bsize)) >> esize), 0);
        for _ in 0..tail.max(0) {
            put(next_noise() * mult1);
        }
    }

    /// Exponents coded as VLC differences, one a band (FFmpeg's `decode_exp_vlc`).
    fn exp_vlc(&mut self, r: &mut Bits, ch: usize) -> Parse<()> {
        let mut band = (self.frame_len_bits - self.block_len_bits) as usize * 25;
        let q_end = self.block_len;
        let exps = &mut self.exponents[ch];
        let mut q = 0;
        // Duff's device in FFmpeg's: a band of 0 fills 4.
        let mut fill = |q: &mut usize, n: u16, v: f32| {
            let mut n = i32::from(n);
            let mut first = if n & 3 == 0 { 4 } else { n & 3 };
            loop {
                for _ in 0..first {
                    if let Some(e) = exps.get_mut(*q) {
                        *e = v;
                    }
                    *q += 1;
                }
                n -= 4;
                if n <= 0 {
                    break;
                }
                first = 4;
            }
        };
        let mut max_scale = 0f32;
        let mut last_exp;
        let band_at = |band: usize| {
            self.exponent_bands
                .get(band)
                .copied()
                .ok_or("WMA exponents past their bands")
        };
        if self.version == 1 {
            last_exp = r.get(5)? as i32 + 10;
            let v = pow_tab(last_exp);
            max_scale = v;
            fill(&mut q, band_at(band)?, v);
            band += 1;
        } else {
            last_exp = 36;
        }
        let vlc = self
            .exp_vlc
            .as_ref()
            .expect("exponent VLC made with its flag");
        while q < q_end {
            let code = i32::from(r.huffman(vlc)?);
            last_exp += code - 60;
            if !(-60..96).contains(&last_exp) {
                return Err("a WMA exponent out of range");
            }
            let v = pow_tab(last_exp);
            max_scale = max_scale.max(v);
            fill(&mut q, band_at(band)?, v);
            band += 1;
        }
        self.max_exponent[ch] = max_scale;
        Ok(())
    }

    /// Exponents coded as 10 line spectral pairs (FFmpeg's `decode_exp_lsp`).
    fn exp_lsp(&mut self, r: &mut Bits, ch: usize) -> Parse<()> {
        let mut lsp = [0f32; NB_LSP_COEFS];
        for (i, l) in lsp.iter_mut().enumerate() {
            let val = if i == 0 || i >= 8 {
                r.get(3)?
            } else {
                r.get(4)?
            };
            *l = LSP_CODEBOOK[i][val as usize];
        }
        let mut val_max = 0f32;
        for i in 0..self.block_len {
            let w = self.lsp_cos_table[i];
            let (mut p, mut q) = (0.5f32, 0.5f32);
            for j in (1..NB_LSP_COEFS).step_by(2) {
                q *= w - lsp[j - 1];
                p *= w - lsp[j];
            }
            p = p * (p * (2.0 - w));
            q = q * (q * (2.0 + w));
            let v = self.pow_m1_4(p + q);
            val_max = val_max.max(v);
            self.exponents[ch][i] = v;
        }
        self.max_exponent[ch] = val_max;
        Ok(())
    }

    /// `x^-1/4` from FFmpeg's exponent and interpolated mantissa tables.
    fn pow_m1_4(&self, x: f32) -> f32 {
        let u = x.to_bits();
        let e = (u >> 23) as usize;
        let m = ((u >> (23 - LSP_POW_BITS)) & ((1 << LSP_POW_BITS) - 1)) as usize;
        let t = f32::from_bits(((u << LSP_POW_BITS) & ((1 << 23) - 1)) | (127 << 23));
        let (a, b) = (self.lsp_pow_m_table1[m], self.lsp_pow_m_table2[m]);
        self.lsp_pow_e_table[e & 255] * (a + b * t)
    }

    /// A channel's run/level-coded coefficients into `coefs1` (FFmpeg's
    /// `ff_wma_run_level_decode` for versions 1 and 2).
    fn run_level(
        &mut self,
        r: &mut Bits,
        t: usize,
        ch: usize,
        num: i64,
        nb_bits: u32,
    ) -> Parse<()> {
        let mask = self.block_len - 1;
        let ptr = &mut self.coefs1[ch];
        let mut offset = 0i64;
        while offset < num {
            let code = usize::from(r.huffman(&self.coef_vlc[t])?);
            if code > 1 {
                offset += i64::from(self.run_table[t][code]);
                let level = self.level_table[t][code];
                ptr[offset as usize & mask] = if r.bit()? { level } else { -level };
            } else if code == 1 {
                break;
            } else {
                let level = r.get(nb_bits)? as f32;
                offset += i64::from(r.get(self.frame_len_bits)?);
                ptr[offset as usize & mask] = if r.bit()? { level } else { -level };
            }
            offset += 1;
        }
        if offset > num {
            return Err("WMA coefficients past their block");
        }
        Ok(())
    }

    /// The block's samples, windowed, added into the frame at `index` (FFmpeg's
    /// `wma_window`).
    fn window(&mut self, ch: usize, index: usize) {
        let out = &mut self.frame_out[ch][index..];
        let input = &self.output[..];
        let flb = self.frame_len_bits;
        let block_len = self.block_len;
        // The left half: added to the last block's right half.
        let (left, right) = out.split_at_mut(block_len);
        if self.block_len_bits <= self.prev_block_len_bits {
            let w = &self.windows[(flb - self.block_len_bits) as usize];
            for ((o, &x), &w) in left.iter_mut().zip(&input[..block_len]).zip(w) {
                *o += x * w;
            }
        } else {
            let bl = 1usize << self.prev_block_len_bits;
            let n = (block_len - bl) / 2;
            let w = &self.windows[(flb - self.prev_block_len_bits) as usize];
            for ((o, &x), &w) in left[n..n + bl].iter_mut().zip(&input[n..n + bl]).zip(w) {
                *o += x * w;
            }
            left[n + bl..].copy_from_slice(&input[n + bl..block_len]);
        }
        // The right half, for the next block to add to.
        let input = &input[block_len..2 * block_len];
        let right = &mut right[..block_len];
        if self.block_len_bits <= self.next_block_len_bits {
            let w = &self.windows[(flb - self.block_len_bits) as usize];
            for ((o, &x), &w) in right.iter_mut().zip(input).zip(w.iter().rev()) {
                *o = x * w;
            }
        } else {
            let bl = 1usize << self.next_block_len_bits;
            let n = (block_len - bl) / 2;
            let w = &self.windows[(flb - self.next_block_len_bits) as usize];
            right[..n].copy_from_slice(&input[..n]);
            for ((o, &x), &w) in right[n..n + bl]
                .iter_mut()
                .zip(&input[n..n + bl])
                .zip(w.iter().rev())
            {
                *o = x * w;
            }
            right[n + bl..].fill(0.0);
        }
    }
}

/// `10^(i/16)` for `i` from -60 to 95, as FFmpeg's table holds it.
fn pow_tab(i: i32) -> f32 {
    (10f64.powf(f64::from(i) / 16.0)) as f32
}

/// A symphonia [`Decoder`] for WMA 1 and 2, configured by the stream's WAVEFORMATEX (its
/// parameters' extra data): each packet is one or more superframes.
pub(crate) struct WmaDecoder {
    params: CodecParameters,
    wma: Wma,
    buf: AudioBuffer<f32>,
    channels: Channels,
    rate: u32,
    /// Samples still to drop from the start (two frames, as FFmpeg drops).
    skip: usize,
    flushed: bool,
    planes: Vec<Vec<f32>>,
}

impl WmaDecoder {
    fn decode_packet(&mut self, data: &[u8]) -> Result<()> {
        self.buf.clear();
        for p in &mut self.planes {
            p.clear();
        }
        if data.is_empty() {
            if !self.flushed {
                self.flushed = true;
                self.wma.flush(&mut self.planes);
            }
        } else {
            // A superframe that fails ends the packet, as in FFmpeg; what came before it
            // stays.
            let mut first_error = None;
            for superframe in data.chunks(self.wma.block_align) {
                if let Err(why) = self.wma.superframe(superframe, &mut self.planes) {
                    first_error = Some(why);
                    break;
                }
            }
            if let Some(why) = first_error.filter(|_| self.planes[0].is_empty()) {
                return decode_error(why);
            }
        }
        let drop = self.skip.min(self.planes[0].len());
        self.skip -= drop;
        let n = self.planes[0].len() - drop;
        make_room(&mut self.buf, self.rate, self.channels, n, n)?;
        self.buf.render_reserved(Some(n));
        for (c, p) in self.planes.iter().enumerate() {
            self.buf.chan_mut(c)[..n].copy_from_slice(&p[drop..]);
        }
        Ok(())
    }
}

impl Decoder for WmaDecoder {
    fn try_new(params: &CodecParameters, _options: &DecoderOptions) -> Result<Self> {
        if params.codec != CODEC_TYPE_WMAV1 && params.codec != CODEC_TYPE_WMAV2 {
            return unsupported_error("wma: not WMA 1 or 2");
        }
        let Some(config) = params
            .extra_data
            .as_deref()
            .and_then(Config::from_waveformatex)
        else {
            return unsupported_error("wma: no WAVEFORMATEX to configure from");
        };
        let wma = match Wma::new(&config) {
            Ok(wma) => wma,
            Err(why) => return unsupported_error(why),
        };
        let channels = if config.channels == 1 {
            Channels::FRONT_CENTRE
        } else {
            Channels::FRONT_LEFT | Channels::FRONT_RIGHT
        };
        let frame_len = wma.frame_len();
        Ok(Self {
            params: params.clone(),
            buf: AudioBuffer::new(
                (frame_len * 16) as u64,
                symphonia::core::audio::SignalSpec::new(config.rate, channels),
            ),
            channels,
            rate: config.rate,
            skip: 2 * frame_len,
            flushed: false,
            planes: vec![Vec::new(); config.channels],
            wma,
        })
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[
            support_codec!(CODEC_TYPE_WMAV1, "wmav1", "Windows Media Audio 1"),
            support_codec!(CODEC_TYPE_WMAV2, "wmav2", "Windows Media Audio 2"),
        ]
    }

    fn reset(&mut self) {
        self.wma.last_superframe.clear();
        self.wma.last_bitoffset = 0;
    }

    buffered_decoder_methods!(|this, packet| this.decode_packet(&packet.data));
}

#[cfg(test)]
mod tests {
    use super::*;
    use symphonia::core::formats::FormatReader;

    /// The WAVEFORMATEX and the superframes of an ASF fixture's first track.
    fn superframes(name: &str) -> (Config, Vec<u8>) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let file = std::fs::File::open(path).unwrap();
        let mss = symphonia::core::io::MediaSourceStream::new(Box::new(file), Default::default());
        let mut asf = crate::asf::AsfReader::try_new(mss, &Default::default()).unwrap();
        let fmt = asf.tracks()[0].codec_params.extra_data.clone().unwrap();
        let mut data = Vec::new();
        while let Ok(p) = asf.next_packet() {
            data.extend_from_slice(&p.data);
        }
        (Config::from_waveformatex(&fmt).unwrap(), data)
    }

    /// The noise gains' code, made from lengths alone, is complete and decodes each step;
    /// the LSP path's `x^-1/4` from tables is within 0.1% of the power.
    #[test]
    fn gain_codes_and_the_lsp_power_are_sound() {
        let config = Config {
            version: 2,
            rate: 16000,
            channels: 1,
            bit_rate: 16000,
            block_align: 64,
            flags2: 0,
            quirk_fixed_blocks: false,
        };
        let wma = Wma::new(&config).unwrap();
        let kraft: f64 = HGAIN
            .iter()
            .map(|&(_, len)| 0.5f64.powi(i32::from(len)))
            .sum();
        assert_eq!(kraft, 1.0);
        let mut code = 0u64;
        for &(symbol, len) in &HGAIN {
            let word = ((code >> (32 - len)) as u32) << (32 - len) | (u32::MAX >> len);
            let bytes = word.to_be_bytes();
            let mut r = Bits::new(&bytes);
            assert_eq!(r.huffman(&wma.hgain_vlc), Ok(u16::from(symbol)));
            assert_eq!(r.pos, usize::from(len));
            code += 1u64 << (32 - len);
        }
        for x in [1e-6f32, 0.01, 0.3, 1.0, 1.7, 42.0, 1e5] {
            let (got, want) = (wma.pow_m1_4(x), x.powf(-0.25));
            assert!((got / want - 1.0).abs() < 1e-3, "{x}: {got} {want}");
        }
    }

    /// Writes bits, most significant first.
    #[derive(Default)]
    struct PutBits {
        bytes: Vec<u8>,
        bits: usize,
    }

    impl PutBits {
        fn put(&mut self, v: u32, n: usize) {
            for i in (0..n).rev() {
                if self.bits.is_multiple_of(8) {
                    self.bytes.push(0);
                }
                let bit = (v >> i) & 1;
                *self.bytes.last_mut().unwrap() |= (bit as u8) << (7 - self.bits % 8);
                self.bits += 1;
            }
        }

        fn put_from(&mut self, src: &[u8], from: usize, n: usize) {
            for i in from..from + n {
                self.put(u32::from(src[i / 8] >> (7 - i % 8)) & 1, 1);
            }
        }
    }

    /// Frames packed with the bit reservoir (as Microsoft's encoders write them, each
    /// superframe ending the frame the last began and beginning one it does not end)
    /// decode to the samples they decode to one a superframe (as FFmpeg's encoder writes
    /// them): the reservoir's bookkeeping loses and moves nothing.
    #[test]
    fn the_bit_reservoir_carries_frames_across_superframes() {
        for name in ["speech.wmav2.wma", "speech.wmav1.wma", "tones.wma"] {
            let (config, data) = superframes(name);
            assert_eq!(config.flags2 & 2, 0, "{name}: already uses the reservoir");
            let mut plain = Wma::new(&config).unwrap();
            let mut want = vec![Vec::new(); config.channels];
            // Each superframe holds one frame: where it ends is where its reading stops.
            let mut frames = Vec::new();
            for sf in data.chunks_exact(config.block_align) {
                let mut r = Bits::new(sf);
                plain.frame(&mut r, &mut want).unwrap();
                frames.push((sf, r.pos));
            }
            plain.flush(&mut want);

            // Pack the frames' bits into superframes of the same size, behind their
            // headers: the count of frames that end in them (one more where none was
            // begun before), and the bits that end the last one's frame.
            let reservoir = Config {
                flags2: config.flags2 | 2,
                ..config
            };
            let mut dec = Wma::new(&reservoir).unwrap();
            let offset_bits = dec.byte_offset_bits as usize + 3;
            let payload = reservoir.block_align * 8 - 8 - offset_bits;
            let (mut packed, mut carry) = (Vec::new(), None::<(usize, usize, usize)>);
            let mut next = 0;
            while next < frames.len() || carry.is_some() {
                let mut w = PutBits::default();
                let (mut ended, mut room) = (0, payload);
                let mut body = PutBits::default();
                let mut bit_offset = 0;
                if let Some((f, from, left)) = carry.take() {
                    assert!(left <= room, "{name}: a frame longer than a superframe");
                    body.put_from(frames[f].0, from, left);
                    bit_offset = left;
                    room -= left;
                    ended += 1;
                }
                let begun_before = bit_offset > 0;
                while next < frames.len() && room > 0 {
                    let (sf, bits) = frames[next];
                    let n = bits.min(room);
                    body.put_from(sf, 0, n);
                    room -= n;
                    if n == bits {
                        ended += 1;
                    } else {
                        carry = Some((next, n, bits - n));
                    }
                    next += 1;
                }
                w.put(0, 4);
                w.put((ended + usize::from(!begun_before)) as u32, 4);
                w.put(bit_offset as u32, offset_bits);
                w.put_from(&body.bytes, 0, body.bits);
                w.bytes.resize(reservoir.block_align, 0);
                packed.push(w.bytes);
            }
            let mut got = vec![Vec::new(); config.channels];
            for sf in &packed {
                dec.superframe(sf, &mut got).unwrap();
            }
            dec.flush(&mut got);
            assert!(packed.len() < frames.len(), "{name}: nothing was carried");
            assert_eq!(got, want, "{name}");
        }
    }
}
