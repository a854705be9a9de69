//! E-AC-3 (A/52 Annex E): a frame's bit stream information and audio frame fields, and
//! spectral extension (§E.3.6), on top of AC-3's blocks (`blocks.rs`).

use super::blocks::{bands, read_structure, Blocks, Syntax};
use super::tables::{DB_PER_BIT, DEFAULT_SPX_BANDS, FAST_DECAY, FLOOR, FRAME_STRATEGIES};
use super::tables::{SLOW_DECAY, SLOW_GAIN};
use super::{Bits, Header, Parse, BLOCKS, CHANNELS, CPL, LFE};

/// E-AC-3's spectral extension (A/52 §E.3.6): the band above `src` rebuilt from copies of
/// the band from `dst`, scaled to each band's coded energy and blended with noise.
#[derive(Default)]
pub(super) struct Spx {
    pub(super) in_use: bool,
    pub(super) uses: [bool; 5],
    pub(super) first_coords: [bool; 5],
    pub(super) dst: usize,
    pub(super) src: usize,
    pub(super) end: usize,
    pub(super) bands: Vec<usize>,
    /// The sub-bands' structure flags (see [`read_structure`]).
    pub(super) flags: [u8; 18],
    /// Each channel's notch at the wrap points, where coded (A/52 table E.25's code).
    pub(super) atten: [Option<u32>; 5],
    pub(super) noise: [[f32; 17]; 5],
    pub(super) signal: [[f32; 17]; 5],
}

impl Blocks {
    /// An E-AC-3 frame's bit stream information and audio frame fields (A/52 §E.1.2.2–3),
    /// from after its bsid: the switches of what its blocks carry, and its strategies.
    pub(super) fn eac3_header(&mut self, r: &mut Bits, h: &Header) -> Parse<()> {
        let (acmod, blocks) = (h.acmod, h.blocks);
        let programs = if acmod == 0 { 2 } else { 1 };
        let stream_type = h.stream_type;
        for _ in 0..programs {
            r.skip(5)?; // dialnorm
            if r.bit()? {
                r.skip(8)?; // compr
            }
        }
        if r.bit()? {
            // Mixing metadata.
            if acmod > 2 {
                r.skip(2)?;
                if acmod & 1 != 0 {
                    r.skip(6)?;
                }
                if acmod & 4 != 0 {
                    r.skip(6)?;
                }
            }
            if h.lfe && r.bit()? {
                r.skip(5)?;
            }
            if stream_type == 0 {
                for _ in 0..programs {
                    if r.bit()? {
                        r.skip(6)?;
                    }
                }
                if r.bit()? {
                    r.skip(6)?;
                }
                match r.get(2)? {
                    1 => r.skip(5)?,
                    2 => r.skip(12)?,
                    3 => {
                        let bits = (r.get(5)? as usize + 2) * 8;
                        r.skip(bits)?;
                    }
                    _ => {}
                }
                if acmod < 2 {
                    for _ in 0..programs {
                        if r.bit()? {
                            r.skip(14)?;
                        }
                    }
                }
                if r.bit()? {
                    for _ in 0..blocks {
                        if blocks == 1 || r.bit()? {
                            r.skip(5)?;
                        }
                    }
                }
            }
        }
        if r.bit()? {
            // Informational metadata.
            r.skip(5)?;
            if acmod == 2 {
                r.skip(4)?;
            }
            if acmod >= 6 {
                r.skip(2)?;
            }
            for _ in 0..programs {
                if r.bit()? {
                    r.skip(8)?;
                }
            }
            r.skip(1)?;
        }
        if stream_type == 0 && blocks != 6 {
            r.skip(1)?;
        }
        if stream_type == 2 && (blocks == 6 || r.bit()?) {
            r.skip(6)?;
        }
        if r.bit()? {
            let len = r.get(6)? as usize + 1;
            r.skip(8 * len)?;
        }
        let (lut_strategies, aht) = match blocks {
            6 => (!r.bit()?, r.bit()?),
            _ => (false, false),
        };
        let snr_strategy = r.get(2)?;
        let transient = r.bit()?;
        self.syntax = Syntax {
            eac3: true,
            independent: stream_type == 0,
            block_switch: r.bit()?,
            dither: r.bit()?,
            bit_alloc: r.bit()?,
            fast_gain: r.bit()?,
            dba: r.bit()?,
            skip: r.bit()?,
            snr_strategy,
        };
        let atten = r.bit()?;
        if !self.syntax.block_switch {
            self.block_switch = [false; 5];
        }
        if !self.syntax.dither {
            self.dither = [true; 5];
        }
        if !self.syntax.bit_alloc {
            self.slow_decay = SLOW_DECAY[2];
            self.fast_decay = FAST_DECAY[1];
            self.slow_gain = SLOW_GAIN[1];
            self.db_per_bit = DB_PER_BIT[2];
            self.floor = FLOOR[7];
        }
        for blk in 0..blocks {
            self.cpl_strategy[blk] = acmod > 1 && (blk == 0 || r.bit()?);
            self.cpl_use[blk] = match (acmod > 1, self.cpl_strategy[blk]) {
                (false, _) => false,
                (true, true) => r.bit()?,
                (true, false) => self.cpl_use[blk - 1],
            };
        }
        let cpl_blocks = self.cpl_use[..blocks].iter().filter(|&&u| u).count();
        if lut_strategies {
            let cpl = (cpl_blocks > 0).then_some(CPL);
            for ch in cpl.into_iter().chain(0..self.full) {
                let code = r.get(5)? as usize;
                for (block, &strategy) in self.strategies.iter_mut().zip(&FRAME_STRATEGIES[code]) {
                    block[ch] = strategy;
                }
            }
        } else {
            for blk in 0..blocks {
                let cpl = self.cpl_use[blk].then_some(CPL);
                for ch in cpl.into_iter().chain(0..self.full) {
                    self.strategies[blk][ch] = r.get(2)? as u8;
                }
            }
        }
        if h.lfe {
            for blk in 0..blocks {
                self.strategies[blk][LFE] = r.get(1)? as u8;
            }
        }
        if stream_type == 0 && (blocks == 6 || r.bit()?) {
            r.skip(5 * self.full)?;
        }
        // The adaptive hybrid transform, for channels whose exponents (and, for the
        // coupling channel, coupling) hold over the frame.
        self.aht = [false; CHANNELS];
        if aht {
            let cpl = (cpl_blocks == 6).then_some(CPL);
            let lfe = h.lfe.then_some(LFE);
            for ch in cpl.into_iter().chain(0..self.full).chain(lfe) {
                let reused = (1..BLOCKS)
                    .all(|b| self.strategies[b][ch] == 0 && (ch != CPL || !self.cpl_strategy[b]));
                self.aht[ch] = reused && r.bit()?;
            }
        }
        if snr_strategy == 0 {
            let coarse = (r.get(6)? as i32 - 15) << 4;
            let snr = (coarse + r.get(4)? as i32) << 2;
            self.snr = [snr; CHANNELS];
        }
        if transient {
            for _ in 0..self.full {
                if r.bit()? {
                    r.skip(18)?;
                }
            }
        }
        for ch in 0..self.full {
            self.spx.atten[ch] = match atten && r.bit()? {
                true => Some(r.get(5)?),
                false => None,
            };
        }
        if blocks > 1 && r.bit()? {
            let bits = (h.len - 2).ilog2() as usize;
            r.skip((blocks - 1) * (4 + bits))?;
        }
        self.spx.first_coords = [true; 5];
        self.first_cpl_coords = [true; 5];
        self.first_cpl_leak = true;
        Ok(())
    }

    /// E-AC-3's spectral extension strategy: which channels, and its range and bands.
    pub(super) fn spx_strategy(&mut self, r: &mut Bits, first: bool) -> Parse<()> {
        if !first && !r.bit()? {
            return Ok(());
        }
        self.spx.in_use = r.bit()?;
        if !self.spx.in_use {
            self.spx.uses = [false; 5];
            self.spx.first_coords = [true; 5];
            return Ok(());
        }
        for ch in 0..self.full {
            self.spx.uses[ch] = self.acmod == 1 || r.bit()?;
        }
        let dst = r.get(2)? as usize;
        let widen = |b: usize| if b > 7 { 2 * b - 7 } else { b };
        let begin = widen(r.get(3)? as usize + 2);
        let end = widen(r.get(3)? as usize + 5);
        let (dst, src, stop) = (25 + 12 * dst, 25 + 12 * begin, 25 + 12 * end);
        if begin >= end || dst >= src {
            return Err("ac3: an empty spectral extension range");
        }
        (self.spx.dst, self.spx.src, self.spx.end) = (dst, src, stop);
        let range = (begin, end);
        read_structure(
            r,
            true,
            first,
            range,
            &mut self.spx.flags,
            &DEFAULT_SPX_BANDS,
        )?;
        self.spx.bands = bands(&self.spx.flags, range);
        Ok(())
    }

    /// E-AC-3's spectral extension coordinates: each band's signal and noise levels.
    pub(super) fn spx_coordinates(&mut self, r: &mut Bits) -> Parse<()> {
        if !self.spx.in_use {
            return Ok(());
        }
        for ch in 0..self.full {
            if !self.spx.uses[ch] {
                self.spx.first_coords[ch] = true;
                continue;
            }
            if !self.spx.first_coords[ch] && !r.bit()? {
                continue;
            }
            self.spx.first_coords[ch] = false;
            let blend = r.get(5)? as f32 / 32.0;
            let master = 3 * r.get(2)? as i32;
            let mut bin = self.spx.src;
            for (band, &size) in self.spx.bands.iter().enumerate() {
                let ratio = ((bin + size / 2) as f32 / self.spx.end as f32 - blend).clamp(0.0, 1.0);
                bin += size;
                let exp = r.get(4)? as i32;
                let mant = r.get(2)? as f32;
                let mant = if exp == 15 { 2.0 * mant } else { mant + 4.0 };
                let coord = mant * ((2 - exp - master) as f32).exp2();
                // Noise of unit variance: uniform in ±1, scaled by √3.
                self.spx.noise[ch][band] = (3.0 * ratio).sqrt() * coord;
                self.spx.signal[ch][band] = (1.0 - ratio).sqrt() * coord;
            }
        }
        Ok(())
    }

    /// Rebuilds the spectral extension band of the channels that use it: copies of the
    /// band from `dst` (wrapping where they reach `src`), notched at the wraps where the
    /// frame says, scaled to each band's coded level and blended with noise of its energy.
    pub(super) fn extend_spectrum(&mut self) {
        let Spx { dst, src, .. } = self.spx;
        let bands = self.spx.bands.clone();
        let mut wrap = vec![false; bands.len()];
        wrap[0] = true;
        let mut copies = Vec::new();
        let mut bin = dst;
        for (band, &size) in bands.iter().enumerate() {
            if bin + size > src {
                copies.push(bin - dst);
                bin = dst;
                wrap[band] = true;
            }
            let mut i = 0;
            while i < size {
                if bin == src {
                    copies.push(bin - dst);
                    bin = dst;
                }
                let n = (size - i).min(src - bin);
                bin += n;
                i += n;
            }
        }
        copies.push(bin - dst);
        for ch in 0..self.full {
            if !self.spx.uses[ch] {
                continue;
            }
            let c = &mut self.coeffs[ch];
            let mut at = src;
            for &n in &copies {
                c.copy_within(dst..dst + n, at);
                at += n;
            }
            let mut rms = Vec::with_capacity(bands.len());
            let mut at = src;
            for &size in &bands {
                let energy: f32 = c[at..at + size].iter().map(|v| v * v).sum();
                rms.push((energy / size as f32).sqrt());
                at += size;
            }
            if let Some(code) = self.spx.atten[ch] {
                let a = |k: u32| (-(((k + 1) * (code + 1)) as f32) / 15.0).exp2();
                let notch = [a(0), a(1), a(2), a(1), a(0)];
                let mut at = src - 2;
                for (band, &size) in bands.iter().enumerate() {
                    if wrap[band] {
                        for (v, g) in c[at..at + 5].iter_mut().zip(notch) {
                            *v *= g;
                        }
                    }
                    at += size;
                }
            }
            let mut at = src;
            for (band, &size) in bands.iter().enumerate() {
                let noise = self.spx.noise[ch][band] * rms[band];
                let signal = self.spx.signal[ch][band];
                for i in at..at + size {
                    // Uniform in ±1: the dither's ±√½, widened.
                    let uniform = self.dither_value() * std::f32::consts::SQRT_2;
                    let c = &mut self.coeffs[ch];
                    c[i] = c[i] * signal + noise * uniform;
                }
                at += size;
            }
        }
    }
}
