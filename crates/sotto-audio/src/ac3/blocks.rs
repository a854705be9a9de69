//! The audio blocks of AC-3 (A/52 §5.4.3, §7) and E-AC-3: each block's side information,
//! exponents, parametric bit allocation, mantissas, coupling and rematrixing, to the
//! transform coefficients of every channel.

use super::aht::HEBAP;
use super::eac3::Spx;
use super::tables::*;
use super::{Bits, Parse, BLOCKS, CHANNELS, CPL, LFE, NO_ECPL};

/// The mantissas of bit allocation pointers 1, 2 and 4, which come in groups of three,
/// three and two values: the values of a group not yet used, across a block's channels.
#[derive(Default)]
pub(super) struct Groups {
    pub(super) b1: Group<3>,
    pub(super) b2: Group<3>,
    pub(super) b4: Group<2>,
}

/// A group's values in the order they are used, and how many are left.
pub(super) struct Group<const N: usize>([f32; N], usize);

impl<const N: usize> Group<N> {
    /// The group's next value; a new group from `read` (its codes, most significant
    /// first, of a quantizer of `levels` levels) where this one is used up.
    pub(super) fn next(
        &mut self,
        read: impl FnOnce() -> Parse<[u32; N]>,
        levels: u32,
    ) -> Parse<f32> {
        if self.1 == 0 {
            self.0 = read()?.map(|c| level(c, levels));
            self.1 = N;
        }
        self.1 -= 1;
        Ok(self.0[N - 1 - self.1])
    }
}

impl<const N: usize> Default for Group<N> {
    fn default() -> Self {
        Self([0.0; N], 0)
    }
}

/// The value of level `code` of a symmetric quantizer of `levels` levels.
fn level(code: u32, levels: u32) -> f32 {
    (2 * code as i32 - (levels as i32 - 1)) as f32 / levels as f32
}

/// One delta bit allocation segment: its offset in bands, length and value.
pub(super) type Segment = (u8, u8, u8);

/// What a frame's blocks carry over from one to the next (and, as FFmpeg keeps it, from
/// one frame to the next).
pub(super) struct Blocks {
    pub(super) full: usize,
    pub(super) acmod: u8,
    pub(super) lfe: bool,
    /// log2 of the rate divisor of bsid 9 and 10.
    pub(super) shift: u32,
    pub(super) fscod: usize,
    pub(super) block_switch: [bool; 5],
    pub(super) dither: [bool; 5],
    pub(super) dynrng: [f32; 2],
    pub(super) cpl_in_use: bool,
    pub(super) in_cpl: [bool; 5],
    pub(super) phase_in_use: bool,
    pub(super) cpl_bands: Vec<usize>,
    /// The coupling sub-bands' structure flags (see [`read_structure`]).
    pub(super) cpl_flags: [u8; 18],
    pub(super) cpl_coords: [[f32; 18]; 5],
    pub(super) phase: [bool; 18],
    pub(super) rematrix: [bool; 4],
    pub(super) rematrix_bands: usize,
    pub(super) strategy: [u8; CHANNELS],
    pub(super) start: [usize; CHANNELS],
    pub(super) end: [usize; CHANNELS],
    pub(super) exps: [[u8; 256]; CHANNELS],
    pub(super) slow_decay: i32,
    pub(super) fast_decay: i32,
    pub(super) slow_gain: i32,
    pub(super) db_per_bit: i32,
    pub(super) floor: i32,
    pub(super) snr: [i32; CHANNELS],
    pub(super) fast_gain: [i32; CHANNELS],
    pub(super) cpl_leak: (i32, i32),
    pub(super) dba_mode: [u8; CHANNELS],
    pub(super) dba: [Vec<Segment>; CHANNELS],
    /// What each channel's bit allocation was last computed from, besides its exponents
    /// (which set `fresh`): blocks that change neither reuse it, as most do.
    pub(super) computed: [Option<Allocation>; CHANNELS],
    pub(super) fresh: [bool; CHANNELS],
    pub(super) bap: [[u8; 256]; CHANNELS],
    pub(super) coeffs: [[f32; 256]; CHANNELS],
    /// The dither's state (a 32-bit xorshift).
    pub(super) seed: u32,
    pub(super) syntax: Syntax,
    /// The block being read.
    pub(super) block: usize,
    /// E-AC-3's channels under the adaptive hybrid transform this frame, and their values
    /// for each of its blocks (`aht.rs`).
    pub(super) aht: [bool; CHANNELS],
    pub(super) pre: Box<[[[f32; BLOCKS]; 256]; CHANNELS]>,
    /// E-AC-3's frame header: whether each block has a coupling strategy, and uses
    /// coupling; each block's exponent strategies.
    pub(super) cpl_strategy: [bool; BLOCKS],
    pub(super) cpl_use: [bool; BLOCKS],
    pub(super) strategies: [[u8; CHANNELS]; BLOCKS],
    pub(super) first_cpl_coords: [bool; 5],
    pub(super) first_cpl_leak: bool,
    pub(super) spx: Spx,
}

/// E-AC-3's switches for what a frame's blocks carry (A/52 §E.1.2.3); AC-3's are all on,
/// with an SNR offset for each channel.
#[derive(Clone, Copy)]
pub(super) struct Syntax {
    pub(super) eac3: bool,
    /// An independent stream's frame (not one converted from AC-3).
    pub(super) independent: bool,
    pub(super) block_switch: bool,
    pub(super) dither: bool,
    pub(super) bit_alloc: bool,
    pub(super) fast_gain: bool,
    pub(super) dba: bool,
    pub(super) skip: bool,
    pub(super) snr_strategy: u32,
}

pub(super) const AC3_SYNTAX: Syntax = Syntax {
    eac3: false,
    independent: false,
    block_switch: true,
    dither: true,
    bit_alloc: true,
    fast_gain: false,
    dba: true,
    skip: true,
    snr_strategy: 2,
};

/// The inputs of a channel's bit allocation other than its exponents.
#[derive(Clone, PartialEq)]
pub(super) struct Allocation {
    pub(super) range: (usize, usize),
    pub(super) decay: (i32, i32),
    pub(super) slow_gain: i32,
    pub(super) db_per_bit: i32,
    pub(super) floor: i32,
    pub(super) snr: i32,
    pub(super) fast_gain: i32,
    pub(super) cpl_leak: (i32, i32),
    pub(super) dba: Option<Vec<Segment>>,
    pub(super) rate: (usize, u32),
    pub(super) aht: bool,
}

/// A delta bit allocation mode: reuse, new, none (3 is reserved).
pub(super) const DBA_NONE: u8 = 2;

impl Blocks {
    pub(super) fn new() -> Self {
        Self {
            full: 0,
            acmod: 0,
            lfe: false,
            shift: 0,
            fscod: 0,
            block_switch: [false; 5],
            dither: [false; 5],
            dynrng: [1.0; 2],
            cpl_in_use: false,
            in_cpl: [false; 5],
            phase_in_use: false,
            cpl_bands: Vec::new(),
            cpl_flags: [0; 18],
            cpl_coords: [[0.0; 18]; 5],
            phase: [false; 18],
            rematrix: [false; 4],
            rematrix_bands: 0,
            strategy: [0; CHANNELS],
            start: [0; CHANNELS],
            end: [0; CHANNELS],
            exps: [[0; 256]; CHANNELS],
            slow_decay: 0,
            fast_decay: 0,
            slow_gain: 0,
            db_per_bit: 0,
            floor: 0,
            snr: [0; CHANNELS],
            fast_gain: [0; CHANNELS],
            cpl_leak: (0, 0),
            dba_mode: [DBA_NONE; CHANNELS],
            dba: Default::default(),
            computed: Default::default(),
            fresh: [true; CHANNELS],
            bap: [[0; 256]; CHANNELS],
            coeffs: [[0.0; 256]; CHANNELS],
            seed: 0x2545_F491,
            syntax: AC3_SYNTAX,
            block: 0,
            aht: [false; CHANNELS],
            pre: Box::new([[[0.0; BLOCKS]; 256]; CHANNELS]),
            cpl_strategy: [false; BLOCKS],
            cpl_use: [false; BLOCKS],
            strategies: [[0; CHANNELS]; BLOCKS],
            first_cpl_coords: [true; 5],
            first_cpl_leak: false,
            spx: Spx::default(),
        }
    }

    /// The channels with exponents and mantissas this block, in their coded order: the
    /// coupling channel (where in use), the full-bandwidth ones, the LFE.
    pub(super) fn coded(&self) -> impl Iterator<Item = usize> {
        let cpl = self.cpl_in_use.then_some(CPL);
        let lfe = self.lfe.then_some(LFE);
        cpl.into_iter().chain(0..self.full).chain(lfe)
    }

    /// A dither value, uniform in ±0.707 (A/52 §7.3.4).
    pub(super) fn dither_value(&mut self) -> f32 {
        let mut x = self.seed;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.seed = x;
        (x as f32 / u32::MAX as f32 - 0.5) * std::f32::consts::SQRT_2
    }

    /// Reads audio block `blk`'s side information and mantissas into `coeffs`.
    pub(super) fn read(&mut self, r: &mut Bits, blk: usize) -> Parse<()> {
        let full = self.full;
        let first = blk == 0;
        let syntax = self.syntax;
        self.block = blk;
        if syntax.block_switch {
            for ch in 0..full {
                self.block_switch[ch] = r.bit()?;
            }
        }
        if syntax.dither {
            for ch in 0..full {
                self.dither[ch] = r.bit()?;
            }
        }
        for i in 0..1 + usize::from(self.acmod == 0) {
            if r.bit()? {
                // A 3-bit signed power of two, then five bits of mantissa below an implied 1.
                let v = r.get(8)?;
                let exp = ((v as i32) << 24 >> 29) as f32;
                self.dynrng[i] = exp.exp2() * (32 + (v & 0x1F)) as f32 / 32.0;
            } else if first {
                self.dynrng[i] = 1.0;
            }
        }
        if syntax.eac3 {
            self.spx_strategy(r, first)?;
            self.spx_coordinates(r)?;
        }
        self.coupling_strategy(r, blk)?;
        if self.cpl_in_use {
            self.coupling_coordinates(r, first)?;
        }
        if self.acmod == 2 {
            if (syntax.eac3 && first) || r.bit()? {
                self.rematrix_bands = 4;
                if self.cpl_in_use && self.start[CPL] <= 61 {
                    self.rematrix_bands -= 1 + usize::from(self.start[CPL] == 37);
                } else if self.spx.in_use && self.spx.src <= 61 {
                    self.rematrix_bands -= 1;
                }
                for f in &mut self.rematrix[..self.rematrix_bands] {
                    *f = r.bit()?;
                }
            } else if first {
                self.rematrix_bands = 0;
            }
        }
        let coded: Vec<usize> = self.coded().collect();
        for &ch in &coded {
            self.strategy[ch] = match syntax.eac3 {
                true => self.strategies[blk][ch],
                false => r.get(if ch == LFE { 1 } else { 2 })? as u8,
            };
        }
        self.bandwidths(r)?;
        for &ch in &coded {
            self.exponents(r, ch)?;
        }
        self.allocation_parameters(r, first, &coded)?;
        if syntax.skip && r.bit()? {
            let skip = r.get(9)? as usize;
            r.skip(8 * skip)?;
        }
        for &ch in &coded {
            self.allocate(ch)?;
        }
        self.mantissas(r)?;
        if self.spx.in_use {
            self.extend_spectrum();
        }
        Ok(())
    }

    pub(super) fn coupling_strategy(&mut self, r: &mut Bits, blk: usize) -> Parse<()> {
        let eac3 = self.syntax.eac3;
        let exists = match eac3 {
            true => self.cpl_strategy[blk],
            false => r.bit()?,
        };
        if !exists {
            return match blk == 0 && !eac3 {
                true => Err("ac3: no coupling strategy in a frame's first block"),
                false => Ok(()),
            };
        }
        self.cpl_in_use = match eac3 {
            true => self.cpl_use[blk],
            false => r.bit()?,
        };
        if !self.cpl_in_use {
            self.in_cpl = [false; 5];
            self.first_cpl_coords = [true; 5];
            self.first_cpl_leak = eac3;
            self.phase_in_use = false;
            return Ok(());
        }
        if self.acmod < 2 {
            return Err("ac3: coupling in mono or dual mono");
        }
        if eac3 && r.bit()? {
            return Err(NO_ECPL);
        }
        for ch in 0..self.full {
            self.in_cpl[ch] = (eac3 && self.acmod == 2) || r.bit()?;
        }
        if self.acmod == 2 {
            self.phase_in_use = r.bit()?;
        }
        let begin = r.get(4)? as usize;
        let end = match self.spx.in_use {
            true => (self.spx.src.saturating_sub(37)) / 12,
            false => r.get(4)? as usize + 3,
        };
        if begin >= end {
            return Err("ac3: an empty coupling range");
        }
        self.start[CPL] = 37 + 12 * begin;
        self.end[CPL] = 37 + 12 * end;
        let range = (begin, end);
        read_structure(
            r,
            eac3,
            blk == 0,
            range,
            &mut self.cpl_flags,
            &DEFAULT_CPL_BANDS,
        )?;
        self.cpl_bands = bands(&self.cpl_flags, range);
        Ok(())
    }

    pub(super) fn coupling_coordinates(&mut self, r: &mut Bits, first: bool) -> Parse<()> {
        let mut any = false;
        for ch in 0..self.full {
            if !self.in_cpl[ch] {
                self.first_cpl_coords[ch] = true;
                continue;
            }
            if (self.syntax.eac3 && self.first_cpl_coords[ch]) || r.bit()? {
                self.first_cpl_coords[ch] = false;
                any = true;
                let master = 3 * r.get(2)? as i32;
                for band in 0..self.cpl_bands.len() {
                    let exp = r.get(4)? as i32;
                    let mant = r.get(4)? as f32;
                    let value = match exp {
                        15 => mant / 16.0,
                        _ => (mant + 16.0) / 32.0,
                    };
                    self.cpl_coords[ch][band] = value * ((-(exp + master)) as f32).exp2();
                }
            } else if first {
                return Err("ac3: no coupling coordinates in a frame's first block");
            }
        }
        if self.acmod == 2 && any {
            for band in 0..self.cpl_bands.len() {
                self.phase[band] = self.phase_in_use && r.bit()?;
            }
        }
        Ok(())
    }

    /// The full-bandwidth channels' ends: the coupling range's start for coupled ones,
    /// the spectral extension's for those that use it, their bandwidth code's for the
    /// others.
    pub(super) fn bandwidths(&mut self, r: &mut Bits) -> Parse<()> {
        for ch in 0..self.full {
            self.start[ch] = 0;
            if self.strategy[ch] == 0 {
                continue;
            }
            self.end[ch] = if self.in_cpl[ch] {
                self.start[CPL]
            } else if self.spx.uses[ch] && self.spx.in_use {
                self.spx.src
            } else {
                let code = r.get(6)? as usize;
                if code > 60 {
                    return Err("ac3: a bandwidth code above 60");
                }
                73 + 3 * code
            };
        }
        self.start[LFE] = 0;
        self.end[LFE] = 7;
        Ok(())
    }

    /// Channel `ch`'s exponents, where its strategy is not to reuse them: an absolute
    /// first one, then groups of three differences in 7 bits, each covering 1, 2 or 4
    /// coefficients.
    pub(super) fn exponents(&mut self, r: &mut Bits, ch: usize) -> Parse<()> {
        let strategy = self.strategy[ch];
        if strategy == 0 {
            return Ok(());
        }
        self.fresh[ch] = true;
        let size = 1usize << (strategy - 1);
        let (start, end) = (self.start[ch], self.end[ch]);
        let groups = match ch {
            CPL => (end - start) / (3 * size),
            LFE => 2,
            _ => (end + 3 * size - 4) / (3 * size),
        };
        let mut exp = r.get(4)? as i32;
        let exps = &mut self.exps[ch];
        let mut at = start;
        if ch == CPL {
            exp <<= 1;
        } else {
            exps[0] = exp as u8;
            at += 1;
        }
        for _ in 0..groups {
            let g = r.get(7)? as i32;
            for d in [g / 25, g % 25 / 5, g % 5] {
                exp += d - 2;
                if !(0..=24).contains(&exp) {
                    return Err("ac3: an exponent out of range");
                }
                let run = exps
                    .get_mut(at..at + size)
                    .ok_or("ac3: exponents past the last coefficient")?;
                run.fill(exp as u8);
                at += size;
            }
        }
        if ch < CPL {
            r.skip(2)?; // gainrng
        }
        Ok(())
    }

    pub(super) fn allocation_parameters(
        &mut self,
        r: &mut Bits,
        first: bool,
        coded: &[usize],
    ) -> Parse<()> {
        let syntax = self.syntax;
        if syntax.bit_alloc {
            if r.bit()? {
                self.slow_decay = SLOW_DECAY[r.get(2)? as usize] >> self.shift;
                self.fast_decay = FAST_DECAY[r.get(2)? as usize] >> self.shift;
                self.slow_gain = SLOW_GAIN[r.get(2)? as usize];
                self.db_per_bit = DB_PER_BIT[r.get(2)? as usize];
                self.floor = FLOOR[r.get(3)? as usize];
            } else if first {
                return Err("ac3: no bit allocation parameters in a frame's first block");
            }
        }
        // E-AC-3 codes its SNR offsets once a frame: in its header (strategy 0), or in its
        // first block, for all channels (1) or each (2).
        if !syntax.eac3 || first {
            if syntax.snr_strategy != 0 && r.bit()? {
                let coarse = (r.get(6)? as i32 - 15) << 4;
                let mut snr = 0;
                for (i, &ch) in coded.iter().enumerate() {
                    if i == 0 || syntax.snr_strategy == 2 {
                        snr = (coarse + r.get(4)? as i32) << 2;
                    }
                    self.snr[ch] = snr;
                    if !syntax.eac3 {
                        self.fast_gain[ch] = FAST_GAIN[r.get(3)? as usize];
                    }
                }
            } else if !syntax.eac3 && first {
                return Err("ac3: no SNR offsets in a frame's first block");
            }
        }
        if syntax.fast_gain && r.bit()? {
            for &ch in coded {
                self.fast_gain[ch] = FAST_GAIN[r.get(3)? as usize];
            }
        } else if syntax.eac3 && first {
            for &ch in coded {
                self.fast_gain[ch] = FAST_GAIN[4];
            }
        }
        if syntax.independent && r.bit()? {
            r.skip(10)?; // the converter's SNR offset
        }
        if self.cpl_in_use {
            if self.first_cpl_leak || r.bit()? {
                self.cpl_leak = (r.get(3)? as i32, r.get(3)? as i32);
            } else if first && !syntax.eac3 {
                return Err("ac3: no coupling leak in a frame's first block");
            }
            self.first_cpl_leak = false;
        }
        let dba: Vec<usize> = coded.iter().copied().filter(|&c| c != LFE).collect();
        if syntax.dba && r.bit()? {
            for &ch in &dba {
                self.dba_mode[ch] = r.get(2)? as u8;
                if self.dba_mode[ch] == 3 {
                    return Err("ac3: a reserved delta bit allocation mode");
                }
            }
            for &ch in &dba {
                if self.dba_mode[ch] == 1 {
                    let segments = r.get(3)? as usize + 1;
                    self.dba[ch].clear();
                    for _ in 0..segments {
                        let seg = (r.get(5)? as u8, r.get(4)? as u8, r.get(3)? as u8);
                        self.dba[ch].push(seg);
                    }
                }
            }
        } else if first {
            self.dba_mode = [DBA_NONE; CHANNELS];
        }
        Ok(())
    }

    /// Channel `ch`'s bit allocation pointers from its exponents (A/52 §7.2), where they or
    /// the allocation's parameters changed since they were last computed.
    pub(super) fn allocate(&mut self, ch: usize) -> Parse<()> {
        let (start, end) = (self.start[ch], self.end[ch]);
        let inputs = Allocation {
            range: (start, end),
            decay: (self.slow_decay, self.fast_decay),
            slow_gain: self.slow_gain,
            db_per_bit: self.db_per_bit,
            floor: self.floor,
            snr: self.snr[ch],
            fast_gain: self.fast_gain[ch],
            cpl_leak: if ch == CPL { self.cpl_leak } else { (0, 0) },
            dba: (ch != LFE && self.dba_mode[ch] <= 1).then(|| self.dba[ch].clone()),
            rate: (self.fscod, self.shift),
            aht: self.aht[ch],
        };
        if !std::mem::take(&mut self.fresh[ch]) && self.computed[ch].as_ref() == Some(&inputs) {
            return Ok(());
        }
        self.computed[ch] = None;
        self.allocate_anew(ch)?;
        self.computed[ch] = Some(inputs);
        Ok(())
    }

    pub(super) fn allocate_anew(&mut self, ch: usize) -> Parse<()> {
        let (start, end) = (self.start[ch], self.end[ch]);
        if end <= start || end > 253 {
            self.bap[ch].fill(0);
            return if end > 253 {
                Err("ac3: coefficients past the last band")
            } else {
                Ok(())
            };
        }
        let snr = self.snr[ch];
        if snr == -960 {
            self.bap[ch].fill(0);
            return Ok(());
        }
        let exps = &self.exps[ch];
        let mut psd = [0i32; 256];
        for bin in start..end {
            psd[bin] = 3072 - (i32::from(exps[bin]) << 7);
        }
        // Power in each band, by log addition.
        let mut band_psd = [0i32; 50];
        let mut bin = start;
        let mut band = usize::from(BIN_BAND[start]);
        loop {
            let mut v = psd[bin];
            bin += 1;
            let band_end = usize::from(BAND_START[band + 1]).min(end);
            while bin < band_end {
                let max = v.max(psd[bin]);
                let at = (max - ((v + psd[bin] + 1) >> 1)).min(255) as usize;
                v = max + i32::from(LOG_ADD[at]);
                bin += 1;
            }
            band_psd[band] = v;
            band += 1;
            if end <= usize::from(BAND_START[band]) {
                break;
            }
        }
        let mask = self.mask(ch, &band_psd)?;
        // Each coefficient's pointer, by how far its power stands above its band's mask.
        let floor = self.floor;
        let table = if self.aht[ch] { &HEBAP } else { &BAP };
        let bap = &mut self.bap[ch];
        let mut bin = start;
        let mut band = usize::from(BIN_BAND[start]);
        loop {
            let m = ((mask[band] - snr - floor).max(0) & 0x1FE0) + floor;
            band += 1;
            let band_end = usize::from(BAND_START[band]).min(end);
            while bin < band_end {
                bap[bin] = table[((psd[bin] - m) >> 5).clamp(0, 63) as usize];
                bin += 1;
            }
            if end <= band_end {
                break;
            }
        }
        Ok(())
    }

    /// The masking curve of channel `ch`'s bands: the excitation its own power spreads,
    /// above the hearing threshold, moved by the delta bit allocation.
    pub(super) fn mask(&self, ch: usize, band_psd: &[i32; 50]) -> Parse<[i32; 50]> {
        let (start, end) = (self.start[ch], self.end[ch]);
        let lfe = ch == LFE;
        let fast_gain = self.fast_gain[ch];
        let (fast_decay, slow_decay, slow_gain) =
            (self.fast_decay, self.slow_decay, self.slow_gain);
        let band_start = usize::from(BIN_BAND[start]);
        let band_end = usize::from(BIN_BAND[end - 1]) + 1;
        let mut excite = [0i32; 50];
        let (mut fast_leak, mut slow_leak);
        let begin;
        let lowcomp1 = |a: i32, b0: i32, b1: i32, c: i32| {
            if b0 + 256 == b1 {
                c
            } else if b0 > b1 {
                (a - 64).max(0)
            } else {
                a
            }
        };
        let lowcomp = |a: i32, b0: i32, b1: i32, band: usize| match band {
            0..=6 => lowcomp1(a, b0, b1, 384),
            7..=19 => lowcomp1(a, b0, b1, 320),
            _ => (a - 128).max(0),
        };
        if band_start == 0 {
            let p = band_psd;
            let mut low = lowcomp1(0, p[0], p[1], 384);
            excite[0] = p[0] - fast_gain - low;
            low = lowcomp1(low, p[1], p[2], 384);
            excite[1] = p[1] - fast_gain - low;
            let mut from = 7;
            fast_leak = 0;
            slow_leak = 0;
            for band in 2..7 {
                let skip = lfe && band == 6;
                if !skip {
                    low = lowcomp1(low, p[band], p[band + 1], 384);
                }
                fast_leak = p[band] - fast_gain;
                slow_leak = p[band] - slow_gain;
                excite[band] = fast_leak - low;
                if !skip && p[band] <= p[band + 1] {
                    from = band + 1;
                    break;
                }
            }
            for band in from..band_end.min(22) {
                if !(lfe && band == 6) {
                    low = lowcomp(low, p[band], p[band + 1], band);
                }
                fast_leak = (fast_leak - fast_decay).max(p[band] - fast_gain);
                slow_leak = (slow_leak - slow_decay).max(p[band] - slow_gain);
                excite[band] = (fast_leak - low).max(slow_leak);
            }
            begin = 22;
        } else {
            begin = band_start;
            fast_leak = (self.cpl_leak.0 << 8) + 768;
            slow_leak = (self.cpl_leak.1 << 8) + 768;
        }
        for band in begin..band_end {
            fast_leak = (fast_leak - fast_decay).max(band_psd[band] - fast_gain);
            slow_leak = (slow_leak - slow_decay).max(band_psd[band] - slow_gain);
            excite[band] = fast_leak.max(slow_leak);
        }
        let mut mask = [0i32; 50];
        for band in band_start..band_end {
            let knee = self.db_per_bit - band_psd[band];
            if knee > 0 {
                excite[band] += knee >> 2;
            }
            let hearing = i32::from(HEARING[band >> self.shift][self.fscod]);
            mask[band] = hearing.max(excite[band]);
        }
        if ch != LFE && self.dba_mode[ch] <= 1 {
            let mut band = band_start;
            for &(offset, len, value) in &self.dba[ch] {
                band += usize::from(offset);
                if band + usize::from(len) > 50 {
                    return Err("ac3: delta bit allocation past the last band");
                }
                let delta = (i32::from(value) - if value >= 4 { 3 } else { 4 }) << 7;
                for m in &mut mask[band..band + usize::from(len)] {
                    *m += delta;
                }
                band += usize::from(len);
            }
        }
        Ok(mask)
    }

    /// The block's mantissas, as coefficients: each full-bandwidth channel's, the coupling
    /// channel's after the first coupled one's (and the coupled channels' from them), then
    /// the LFE's.
    pub(super) fn mantissas(&mut self, r: &mut Bits) -> Parse<()> {
        let mut groups = Groups::default();
        let mut got_cpl = false;
        for ch in 0..self.full {
            self.channel_mantissas(r, ch, &mut groups)?;
            let end = if self.in_cpl[ch] && self.cpl_in_use {
                if !got_cpl {
                    self.channel_mantissas(r, CPL, &mut groups)?;
                    self.uncouple();
                    got_cpl = true;
                }
                self.end[CPL]
            } else {
                self.end[ch]
            };
            self.coeffs[ch][end..].fill(0.0);
        }
        if self.lfe {
            self.channel_mantissas(r, LFE, &mut groups)?;
            self.coeffs[LFE][7..].fill(0.0);
        }
        if self.acmod == 2 {
            let end = self.end[0].min(self.end[1]);
            for band in 0..self.rematrix_bands {
                if !self.rematrix[band] {
                    continue;
                }
                let hi = end.min(REMATRIX_BANDS[band + 1]);
                for i in REMATRIX_BANDS[band]..hi {
                    let (l, r) = (self.coeffs[0][i], self.coeffs[1][i]);
                    self.coeffs[0][i] = l + r;
                    self.coeffs[1][i] = l - r;
                }
            }
        }
        Ok(())
    }

    pub(super) fn channel_mantissas(
        &mut self,
        r: &mut Bits,
        ch: usize,
        groups: &mut Groups,
    ) -> Parse<()> {
        if self.aht[ch] {
            if self.block == 0 {
                self.aht_mantissas(r, ch)?;
            }
            let blk = self.block;
            for bin in self.start[ch]..self.end[ch] {
                let exp = usize::from(self.exps[ch][bin]);
                self.coeffs[ch][bin] = self.pre[ch][bin][blk] * POW2_NEG[exp];
            }
            return Ok(());
        }
        let dither = ch == CPL || (ch < CPL && self.dither[ch]);
        for bin in self.start[ch]..self.end[ch] {
            let m = match self.bap[ch][bin] {
                0 if dither => self.dither_value(),
                0 => 0.0,
                1 => groups.b1.next(
                    || {
                        r.get(5)
                            .map(|g| [g / 9, g / 3 % 3, g % 3])
                            .map_err(Into::into)
                    },
                    3,
                )?,
                2 => groups.b2.next(
                    || {
                        r.get(7)
                            .map(|g| [g / 25, g / 5 % 5, g % 5])
                            .map_err(Into::into)
                    },
                    5,
                )?,
                3 => level(r.get(3)?, 7),
                4 => groups.b4.next(
                    || r.get(7).map(|g| [g / 11, g % 11]).map_err(Into::into),
                    11,
                )?,
                5 => level(r.get(4)?, 15),
                bap => {
                    let bits = MANTISSA_BITS[usize::from(bap)];
                    r.signed(bits)? as f32 * (1.0 - bits as f32).exp2()
                }
            };
            self.coeffs[ch][bin] = m * POW2_NEG[usize::from(self.exps[ch][bin])];
        }
        Ok(())
    }

    /// The coupled channels' coefficients in the coupling range: the coupling channel's,
    /// scaled by each one's coordinates (A/52 §7.4.3), and without the dither a channel
    /// that does not dither would not have had.
    pub(super) fn uncouple(&mut self) {
        let mut bin = self.start[CPL];
        for (band, &size) in self.cpl_bands.iter().enumerate() {
            for ch in 0..self.full {
                if !self.in_cpl[ch] {
                    continue;
                }
                let mut scale = 8.0 * self.cpl_coords[ch][band];
                if ch == 1 && self.acmod == 2 && self.phase[band] {
                    scale = -scale;
                }
                for i in bin..bin + size {
                    self.coeffs[ch][i] = if !self.dither[ch] && self.bap[CPL][i] == 0 {
                        0.0
                    } else {
                        self.coeffs[CPL][i] * scale
                    };
                }
            }
            bin += size;
        }
    }
}

/// A band structure's flags for sub-bands `begin + 1..end` (1 joins a sub-band to the one
/// before): as coded, or E-AC-3's defaults where its first block codes none; a later block
/// that codes none keeps the flags it had, over whatever range it now has (A/52 §E.2.3.3).
pub(super) fn read_structure(
    r: &mut Bits,
    eac3: bool,
    first: bool,
    (begin, end): (usize, usize),
    flags: &mut [u8; 18],
    default: &[u8],
) -> Parse<()> {
    if !eac3 || r.bit()? {
        for flag in &mut flags[begin + 1..end] {
            *flag = u8::from(r.bit()?);
        }
    } else if first {
        let default = default
            .get(begin + 1..end)
            .ok_or("ac3: a band structure past its table")?;
        flags[begin + 1..end].copy_from_slice(default);
    }
    Ok(())
}

/// The sizes of the bands that `flags` make of sub-bands `begin..end`, 12 coefficients each.
pub(super) fn bands(flags: &[u8; 18], (begin, end): (usize, usize)) -> Vec<usize> {
    let mut bands = vec![12];
    for &join in &flags[begin + 1..end] {
        match join {
            1 => *bands.last_mut().expect("one band at least") += 12,
            _ => bands.push(12),
        }
    }
    bands
}
