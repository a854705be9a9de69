//! The core audio of a DTS frame (ETSI TS 102 114 §5.3–5.5): the primary audio coding
//! header, each subframe's side information (prediction, bit allocation, transients, scale
//! factors, joint intensity) and its samples, dequantized to the 23-bit subband samples of
//! FFmpeg's decoder, whose integer steps this follows so that its output is matched.

use super::bits::books;
use super::tables::*;
use crate::codec::{Bits, Parse};

/// Subbands of the filter bank, and of the primary channels at most.
pub(super) const BANDS: usize = 32;
pub(super) const MAX_CHANNELS: usize = 5;
/// Past samples each subband keeps for its ADPCM predictor.
const HISTORY: usize = 4;
/// Subband samples per subsubframe.
const SSF_SAMPLES: usize = 8;
/// Subband samples a frame holds at most (the header's 7-bit block count).
pub(super) const MAX_BLOCKS: usize = 128;
/// Past LFE samples the interpolation filter reads.
pub(super) const LFE_HISTORY: usize = 8;
/// Allocation indices above this are invalid.
const ABITS_MAX: u32 = 26;
/// Block code bits by allocation index 1 to 7.
const BLOCK_CODE_BITS: [u32; 7] = [7, 10, 12, 13, 15, 17, 19];

fn clip23(x: i32) -> i32 {
    x.clamp(-(1 << 23), (1 << 23) - 1)
}

/// `a` shifted right by `bits` with rounding, as a 32-bit value (FFmpeg's `norm__`).
fn norm(a: i64, bits: i32) -> i32 {
    if bits > 0 {
        ((a + (1i64 << (bits - 1))) >> bits) as i32
    } else {
        a as i32
    }
}

fn mul(a: i32, b: i32, bits: i32) -> i32 {
    norm(i64::from(a) * i64::from(b), bits)
}

/// The ADPCM codebook entry `index`: four Q13 predictor coefficients.
fn adpcm_coefficients(index: usize) -> [i32; 4] {
    static TABLE: &[u8; 32768] = include_bytes!("adpcm_vq.bin");
    let b = &TABLE[index * 8..][..8];
    std::array::from_fn(|i| i32::from(i16::from_le_bytes([b[2 * i], b[2 * i + 1]])))
}

/// The high-frequency VQ codebook entry `index`: 32 samples.
fn hf_vector(index: usize) -> [i32; 32] {
    static TABLE: &[u8; 32768] = include_bytes!("hf_vq.bin");
    let b = &TABLE[index * 32..][..32];
    std::array::from_fn(|i| i32::from(b[i] as i8))
}

/// What the frame header says (ETSI TS 102 114 §5.3.1), as far as the core decoder needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct FrameHeader {
    /// Subband samples per band in the frame (PCM samples / 32).
    pub(super) blocks: usize,
    pub(super) amode: usize,
    pub(super) rate: u32,
    pub(super) bit_rate: u32,
    pub(super) crc: bool,
    pub(super) drc: bool,
    pub(super) timestamp: bool,
    pub(super) sync_ssf: bool,
    /// 0 none, 1 one LFE sample per 128 PCM samples, 2 per 64.
    pub(super) lfe: usize,
    pub(super) predictor_history: bool,
    pub(super) filter_perfect: bool,
    pub(super) sumdiff_front: bool,
    pub(super) sumdiff_surround: bool,
}

impl FrameHeader {
    /// Reads the header from a frame in 16-bit big-endian words, sync word included.
    pub(super) fn read(r: &mut Bits) -> Parse<Self> {
        if r.get(32)? != 0x7FFE_8001 {
            return Err("dts: not a core sync word");
        }
        let _normal = r.bit()?;
        if r.get(5)? + 1 != 32 {
            return Err("dts: a frame with deficit samples (a short termination frame)");
        }
        let crc = r.bit()?;
        let blocks = r.get(7)? as usize + 1;
        if !blocks.is_multiple_of(SSF_SAMPLES) {
            return Err("dts: a block count that is not a whole number of subsubframes");
        }
        let _size = r.get(14)?;
        let amode = r.get(6)? as usize;
        if amode >= 10 {
            return Err("dts: a user-defined channel arrangement");
        }
        let rate = SAMPLE_RATES[r.get(4)? as usize];
        if rate == 0 {
            return Err("dts: an invalid sample rate code");
        }
        let bit_rate = BIT_RATES[r.get(5)? as usize];
        if r.bit()? {
            return Err("dts: the reserved bit is set");
        }
        let drc = r.bit()?;
        let timestamp = r.bit()?;
        let _aux = r.bit()?;
        let _hdcd = r.bit()?;
        let _ext_type = r.get(3)?;
        let _ext = r.bit()?;
        let sync_ssf = r.bit()?;
        let lfe = r.get(2)? as usize;
        if lfe == 3 {
            return Err("dts: an invalid LFE flag");
        }
        let predictor_history = r.bit()?;
        if crc {
            r.skip(16)?;
        }
        let filter_perfect = r.bit()?;
        let _version = r.get(4)?;
        let _copy_history = r.get(2)?;
        if matches!(r.get(3)?, 4 | 7) {
            return Err("dts: an invalid source PCM resolution");
        }
        let sumdiff_front = r.bit()?;
        let sumdiff_surround = r.bit()?;
        let _dialnorm = r.get(4)?;
        Ok(Self {
            blocks,
            amode,
            rate,
            bit_rate,
            crc,
            drc,
            timestamp,
            sync_ssf,
            lfe,
            predictor_history,
            filter_perfect,
            sumdiff_front,
            sumdiff_surround,
        })
    }
}

/// A primary channel's coding parameters, set by the coding header for the whole frame.
#[derive(Default, Clone, Copy)]
struct Coding {
    bands: usize,
    vq_start: usize,
    /// The channel whose subbands above ours this one takes, scaled, plus one; 0 for none.
    joint: usize,
    tmode_sel: usize,
    scale_sel: u32,
    abits_sel: u32,
    /// Codebook select by allocation index 1 to 10.
    sample_sel: [u8; 10],
    /// Scale factor adjustment (Q22) by allocation index 1 to 10, for Huffman-coded samples.
    adjust: [i32; 10],
}

/// A channel's side information for the current subframe.
#[derive(Clone, Copy, Default)]
struct Side {
    prediction: [bool; BANDS],
    vq: [u16; BANDS],
    abits: [u32; BANDS],
    /// The subsubframe from which a band's second scale factor holds; 0 for none.
    transient: [usize; BANDS],
    scales: [[i32; 2]; BANDS],
    joint_scales: [i32; BANDS],
}

/// The core decoder's state between frames: each channel's subband samples (with the
/// ADPCM history before them) and the LFE samples (with the interpolator's history).
pub(super) struct Core {
    pub(super) channels: usize,
    /// `[channel][band]`: `HISTORY` past samples, then this frame's.
    samples: Vec<[[i32; HISTORY + MAX_BLOCKS]; BANDS]>,
    /// `LFE_HISTORY` past samples, then this frame's.
    pub(super) lfe: [i32; LFE_HISTORY + MAX_BLOCKS / 2],
    coding: [Coding; MAX_CHANNELS],
    side: Box<[Side; MAX_CHANNELS]>,
}

impl Core {
    pub(super) fn new() -> Self {
        Self {
            channels: 0,
            samples: vec![[[0; HISTORY + MAX_BLOCKS]; BANDS]; MAX_CHANNELS],
            lfe: [0; LFE_HISTORY + MAX_BLOCKS / 2],
            coding: [Coding::default(); MAX_CHANNELS],
            side: Box::new([Side::default(); MAX_CHANNELS]),
        }
    }

    /// Forgets the past: ADPCM and LFE histories.
    pub(super) fn reset(&mut self) {
        for ch in &mut self.samples {
            for band in ch.iter_mut() {
                band.fill(0);
            }
        }
        self.lfe.fill(0);
    }

    /// Channel `ch`'s subband samples of this frame, `band` by band.
    pub(super) fn subband(&self, ch: usize, band: usize, blocks: usize) -> &[i32] {
        &self.samples[ch][band][HISTORY..HISTORY + blocks]
    }

    /// Reads a frame's audio, from just past its header, into the subband and LFE samples.
    pub(super) fn read(&mut self, r: &mut Bits, h: &FrameHeader) -> Parse<()> {
        if !h.predictor_history {
            for ch in &mut self.samples {
                for band in ch.iter_mut() {
                    band[..HISTORY].fill(0);
                }
            }
        }
        let subframes = self.coding_header(r, h)?;
        let (mut at, mut lfe_at) = (0, LFE_HISTORY);
        for _ in 0..subframes {
            let ssfs = self.side_information(r, h)?;
            self.audio(r, h, ssfs, &mut at, &mut lfe_at)?;
        }
        // Keep the last samples as the next frame's history; silence inactive subbands.
        for ch in 0..self.channels {
            let c = self.coding[ch];
            let active = match c.joint {
                0 => c.bands,
                j => c.bands.max(self.coding[j - 1].bands),
            };
            for (band, s) in self.samples[ch].iter_mut().enumerate() {
                if band < active {
                    s.copy_within(h.blocks..h.blocks + HISTORY, 0);
                } else {
                    s.fill(0);
                }
            }
        }
        Ok(())
    }

    /// §5.3.2: the primary audio coding header. Returns the number of subframes.
    fn coding_header(&mut self, r: &mut Bits, h: &FrameHeader) -> Parse<usize> {
        let subframes = r.get(4)? as usize + 1;
        let channels = r.get(3)? as usize + 1;
        if channels != usize::from(CHANNELS[h.amode]) {
            return Err("dts: a channel count that does not match the arrangement");
        }
        self.channels = channels;
        let cs = &mut self.coding[..channels];
        for c in cs.iter_mut() {
            c.bands = r.get(5)? as usize + 2;
            if c.bands > BANDS {
                return Err("dts: more than 32 active subbands");
            }
        }
        for c in cs.iter_mut() {
            c.vq_start = r.get(5)? as usize + 1;
        }
        for c in cs.iter_mut() {
            c.joint = r.get(3)? as usize;
            if c.joint > channels {
                return Err("dts: a joint intensity source that is not a channel");
            }
        }
        for c in cs.iter_mut() {
            c.tmode_sel = r.get(2)? as usize;
        }
        for c in cs.iter_mut() {
            c.scale_sel = r.get(3)?;
            if c.scale_sel == 7 {
                return Err("dts: an invalid scale factor codebook");
            }
        }
        for c in cs.iter_mut() {
            c.abits_sel = r.get(3)?;
            if c.abits_sel == 7 {
                return Err("dts: an invalid bit allocation codebook");
            }
        }
        for (n, &bits) in SEL_BITS.iter().enumerate() {
            for c in cs.iter_mut() {
                c.sample_sel[n] = r.get(bits)? as u8;
            }
        }
        for (n, &huffman) in HUFFMAN_SELS.iter().enumerate() {
            for c in cs.iter_mut() {
                if c.sample_sel[n] < huffman {
                    c.adjust[n] = SCALE_ADJ[r.get(2)? as usize];
                }
            }
        }
        if h.crc {
            r.skip(16)?;
        }
        Ok(subframes)
    }

    /// §5.4.1: a subframe's side information. Returns its number of subsubframes.
    fn side_information(&mut self, r: &mut Bits, h: &FrameHeader) -> Parse<usize> {
        let ssfs = r.get(2)? as usize + 1;
        r.skip(3)?; // partial subsubframe sample count
        let n = self.channels;
        let (coding, side) = (&self.coding[..n], &mut self.side[..n]);
        for (c, s) in coding.iter().zip(side.iter_mut()) {
            for band in 0..c.bands {
                s.prediction[band] = r.bit()?;
            }
        }
        for (c, s) in coding.iter().zip(side.iter_mut()) {
            for band in 0..c.bands {
                if s.prediction[band] {
                    s.vq[band] = r.get(12)? as u16;
                }
            }
        }
        for (c, s) in coding.iter().zip(side.iter_mut()) {
            for band in 0..c.vq_start.min(BANDS) {
                let abits = match c.abits_sel {
                    sel @ 0..=4 => r.huffman_at(&books().abits[sel as usize], 1)? as u32,
                    sel => r.get(sel - 1)?,
                };
                if abits > ABITS_MAX {
                    return Err("dts: an invalid bit allocation index");
                }
                s.abits[band] = abits;
            }
        }
        for (c, s) in coding.iter().zip(side.iter_mut()) {
            s.transient = [0; BANDS];
            if ssfs > 1 {
                for band in 0..c.vq_start.min(BANDS) {
                    if s.abits[band] != 0 {
                        s.transient[band] = r.huffman_at(&books().tmode[c.tmode_sel], 0)? as usize;
                    }
                }
            }
        }
        for (c, s) in coding.iter().zip(side.iter_mut()) {
            let mut index = 0;
            for band in 0..c.vq_start.min(BANDS) {
                if s.abits[band] != 0 {
                    s.scales[band][0] = scale(r, &mut index, c.scale_sel)?;
                    if s.transient[band] != 0 {
                        s.scales[band][1] = scale(r, &mut index, c.scale_sel)?;
                    }
                } else {
                    s.scales[band][0] = 0;
                }
            }
            for band in c.vq_start..c.bands {
                s.scales[band][0] = scale(r, &mut index, c.scale_sel)?;
            }
        }
        let mut joint_sel = [0; MAX_CHANNELS];
        for (c, sel) in coding.iter().zip(joint_sel.iter_mut()) {
            if c.joint != 0 {
                *sel = r.get(3)?;
                if *sel == 7 {
                    return Err("dts: an invalid joint scale factor codebook");
                }
            }
        }
        for ch in 0..n {
            let c = coding[ch];
            if c.joint != 0 {
                for band in c.bands..coding[c.joint - 1].bands {
                    let index = match joint_sel[ch] {
                        sel @ 0..=4 => r.huffman_at(&books().scales[sel as usize], -64)?,
                        sel => r.get(sel + 1)? as i32,
                    } + 64;
                    side[ch].joint_scales[band] = *usize::try_from(index)
                        .ok()
                        .and_then(|i| JOINT_SCALES.get(i))
                        .ok_or("dts: an invalid joint scale factor")?;
                }
            }
        }
        if h.drc {
            r.skip(8)?;
        }
        if h.crc {
            r.skip(16)?;
        }
        Ok(ssfs)
    }

    /// §5.5: a subframe's samples: high-frequency VQ, LFE, then each subsubframe's
    /// subband samples; then the ADPCM prediction and joint intensity.
    fn audio(
        &mut self,
        r: &mut Bits,
        h: &FrameHeader,
        ssfs: usize,
        at: &mut usize,
        lfe_at: &mut usize,
    ) -> Parse<()> {
        let len = ssfs * SSF_SAMPLES;
        if *at + len > h.blocks {
            return Err("dts: more subband samples than the frame's blocks");
        }
        let ofs = HISTORY + *at;
        for ch in 0..self.channels {
            let c = self.coding[ch];
            for band in c.vq_start..c.bands {
                let v = hf_vector(r.get(10)? as usize);
                let scale = self.side[ch].scales[band][0];
                for (o, x) in self.samples[ch][band][ofs..ofs + len].iter_mut().zip(v) {
                    *o = clip23((x.wrapping_mul(scale) + 8) >> 4);
                }
            }
        }
        if h.lfe != 0 {
            let count = 2 * h.lfe * ssfs;
            let mut values = [0i32; 16];
            for v in &mut values[..count] {
                *v = r.signed(8)?;
            }
            let index = r.get(8)? as usize;
            let scale = *SCALE7
                .get(index)
                .ok_or("dts: an invalid LFE scale factor")?;
            // The LFE quantizer's step is 0.035 (Q27).
            let scale = mul(4_697_620, scale, 23);
            for (o, v) in self.lfe[*lfe_at..*lfe_at + count].iter_mut().zip(values) {
                *o = clip23(v.wrapping_mul(scale) >> 4);
            }
            *lfe_at += count;
        }
        let steps = if h.bit_rate == 3 {
            &LOSSLESS_STEP
        } else {
            &LOSSY_STEP
        };
        let mut codes = [0i32; SSF_SAMPLES];
        for ssf in 0..ssfs {
            let o = ofs + ssf * SSF_SAMPLES;
            for ch in 0..self.channels {
                let c = self.coding[ch];
                let s = &self.side[ch];
                for band in 0..c.vq_start.min(BANDS) {
                    let abits = s.abits[band];
                    let huffman = samples(r, &mut codes, abits, &c)?;
                    let t = s.transient[band];
                    let mut scale = s.scales[band][usize::from(t != 0 && ssf >= t)];
                    if huffman {
                        let adjust = i64::from(c.adjust[abits as usize - 1]);
                        scale = clip23(((adjust * i64::from(scale)) >> 22) as i32);
                    }
                    let out = &mut self.samples[ch][band][o..o + SSF_SAMPLES];
                    dequantize(out, &codes, steps[abits as usize], scale);
                }
            }
            if (ssf == ssfs - 1 || h.sync_ssf) && r.get(16)? != 0xFFFF {
                return Err("dts: a subsubframe's DSYNC word is missing");
            }
        }
        for ch in 0..self.channels {
            let c = self.coding[ch];
            let s = &self.side[ch];
            for band in 0..c.bands {
                if s.prediction[band] {
                    let k = adpcm_coefficients(usize::from(s.vq[band]));
                    let x = &mut self.samples[ch][band];
                    for j in ofs..ofs + len {
                        let p: i64 = (0..4)
                            .map(|i| i64::from(x[j - 1 - i]) * i64::from(k[i]))
                            .sum();
                        x[j] = clip23(x[j].wrapping_add(clip23(norm(p, 13))));
                    }
                }
            }
        }
        for ch in 0..self.channels {
            let c = self.coding[ch];
            if c.joint != 0 {
                let src = c.joint - 1;
                for band in c.bands..self.coding[src].bands {
                    let scale = self.side[ch].joint_scales[band];
                    for j in ofs..ofs + len {
                        self.samples[ch][band][j] =
                            clip23(mul(self.samples[src][band][j], scale, 17));
                    }
                }
            }
        }
        *at += len;
        Ok(())
    }
}

/// A scale factor: Huffman-coded as a difference from the last one (`sel` 0–4), or as
/// a 6- or 7-bit index.
fn scale(r: &mut Bits, index: &mut i32, sel: u32) -> Parse<i32> {
    let table: &[i32] = if sel > 5 { &SCALE7 } else { &SCALE6 };
    if sel < 5 {
        *index += r.huffman_at(&books().scales[sel as usize], -64)?;
    } else {
        *index = r.get(sel + 1)? as i32;
    }
    usize::try_from(*index)
        .ok()
        .and_then(|i| table.get(i))
        .copied()
        .ok_or("dts: an invalid scale factor index")
}

/// One subsubframe's eight codes of a subband at allocation index `abits`. Returns
/// whether they were Huffman-coded (whose scale factor is adjusted).
fn samples(r: &mut Bits, codes: &mut [i32; SSF_SAMPLES], abits: u32, c: &Coding) -> Parse<bool> {
    if abits == 0 {
        *codes = [0; SSF_SAMPLES];
        return Ok(false);
    }
    let a = abits as usize;
    if a <= 10 {
        let sel = c.sample_sel[a - 1];
        if sel < HUFFMAN_SELS[a - 1] {
            let book = &books().samples[a - 1][usize::from(sel)];
            let offset = -(book.size as i32 / 2);
            for code in codes.iter_mut() {
                *code = r.huffman_at(book, offset)?;
            }
            return Ok(true);
        }
        if a <= 7 {
            // Two block codes of four samples each, in base `levels`.
            let levels = LEVELS[a];
            let bits = BLOCK_CODE_BITS[a - 1];
            for half in codes.chunks_mut(4) {
                let mut code = r.get(bits)? as i32;
                for x in half {
                    *x = code % levels - (levels - 1) / 2;
                    code /= levels;
                }
                if code != 0 {
                    return Err("dts: a block code out of range");
                }
            }
            return Ok(false);
        }
    }
    for code in codes.iter_mut() {
        *code = r.signed(abits - 3)?;
    }
    Ok(false)
}

/// Codes times the quantizer step and scale factor, to 23-bit subband samples.
fn dequantize(out: &mut [i32], codes: &[i32], step: i32, scale: i32) {
    let mut step_scale = i64::from(step) * i64::from(scale);
    let mut shift = 0;
    // The scale's resolution is limited to 22 bits.
    if step_scale > 1 << 23 {
        shift = 64 - (step_scale >> 23).leading_zeros() as i32;
        step_scale >>= shift;
    }
    for (o, &c) in out.iter_mut().zip(codes) {
        *o = clip23(norm(i64::from(c) * step_scale, 22 - shift));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dequantizing_keeps_22_bits_of_the_scale() {
        let mut out = [0; 3];
        // Step 1.0 (Q22) and scale 1000: the code comes out times 1000.
        dequantize(&mut out, &[3, -2, 0], 1 << 22, 1000);
        assert_eq!(out, [3000, -2000, 0]);
        // A product above 2^23 is shifted down to 22 bits first; the result is clipped to
        // 23 bits.
        dequantize(&mut out, &[1, -3, 8], 6_710_886, 1_000_000);
        let exact = 6_710_886f64 * 1_000_000f64 / 4_194_304f64;
        assert!((f64::from(out[0]) - exact).abs() / exact < 1e-5, "{out:?}");
        assert!(
            (f64::from(out[1]) + 3.0 * exact).abs() / exact < 1e-4,
            "{out:?}"
        );
        assert_eq!(out[2], (1 << 23) - 1);
    }

    #[test]
    fn block_codes_unpack_in_base_levels() {
        // abits 1: three levels, 7 bits for four samples; 0 -> -1, 1 -> 0, 2 -> 1.
        let c = Coding {
            sample_sel: [1; 10],
            ..Coding::default()
        };
        let code: u16 = 2 + 3 * (1 + 3 * (3 * 2)); // samples 1, 0, -1, 1
        let two = ((code << 7 | 40) << 2).to_be_bytes(); // then 40: 1, 0, 0, 0
        let mut r = Bits::new(&two);
        let mut codes = [0; 8];
        assert_eq!(samples(&mut r, &mut codes, 1, &c), Ok(false));
        assert_eq!(codes, [1, 0, -1, 1, 0, 0, 0, 0]);
        // A code past 3^4 is damage.
        let mut r = Bits::new(&[0xFF, 0xFF]);
        assert!(samples(&mut r, &mut codes, 1, &c).is_err());
    }
}
