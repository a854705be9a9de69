//! G.726 ADPCM (ITU-T G.726: 16, 24, 32 or 40 kbit/s at 8 kHz; voice recorders, IP
//! cameras, and telephony's WAV files: format 0x0045, and 0x0014 and 0x0040 as Antex
//! named G.723 and G.721). 2 to 5 bits a sample, most significant first (least in `.au`).
//!
//! The decoder follows FFmpeg's (`g726.c`: G.726's integer arithmetic with its 11-bit
//! floating-point products), so its samples are faster-whisper's. Decoded samples go to
//! symphonia as a 16-bit PCM WAV file (see [`crate::codec::DecodedWav`]).

use crate::codec::BlockDecode;

/// WAV's format tags for G.726.
pub(crate) const WAV_TAGS: [u16; 3] = [0x0045, 0x0014, 0x0040];

/// Per code size (2 to 5 bits): the inverse quantizer (log2 of the difference, Q7), the
/// scale factor's adaptation, and the rate of change the speed control tracks.
struct Tables {
    iquant: &'static [i16],
    w: &'static [i16],
    f: &'static [u8],
}

const TABLES: [Tables; 4] = [
    Tables {
        iquant: &[116, 365, 365, 116],
        w: &[-22, 439, 439, -22],
        f: &[0, 7, 7, 0],
    },
    Tables {
        iquant: &[i16::MIN, 135, 273, 373, 373, 273, 135, i16::MIN],
        w: &[-4, 30, 137, 582, 582, 137, 30, -4],
        f: &[0, 1, 2, 7, 7, 2, 1, 0],
    },
    Tables {
        iquant: &[
            i16::MIN,
            4,
            135,
            213,
            273,
            323,
            373,
            425,
            425,
            373,
            323,
            273,
            213,
            135,
            4,
            i16::MIN,
        ],
        w: &[
            -12, 18, 41, 64, 112, 198, 355, 1122, 1122, 355, 198, 112, 64, 41, 18, -12,
        ],
        f: &[0, 0, 0, 1, 1, 1, 3, 7, 7, 3, 1, 1, 1, 0, 0, 0],
    },
    Tables {
        iquant: &[
            i16::MIN,
            -66,
            28,
            104,
            169,
            224,
            274,
            318,
            358,
            395,
            429,
            459,
            488,
            514,
            539,
            566,
            566,
            539,
            514,
            488,
            459,
            429,
            395,
            358,
            318,
            274,
            224,
            169,
            104,
            28,
            -66,
            i16::MIN,
        ],
        w: &[
            14, 14, 24, 39, 40, 41, 58, 100, 141, 179, 219, 280, 358, 440, 529, 696, 696, 529, 440,
            358, 280, 219, 179, 141, 100, 58, 41, 40, 39, 24, 14, 14,
        ],
        f: &[
            0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 3, 4, 5, 6, 6, 6, 6, 5, 4, 3, 2, 1, 1, 1, 1, 1, 0, 0,
            0, 0, 0,
        ],
    },
];

/// G.726's floating-point form of a value: sign, 4-bit exponent, 6-bit mantissa.
#[derive(Clone, Copy, Default)]
struct Float11 {
    sign: bool,
    exp: u8,
    mant: u8,
}

/// The position of the highest set bit of `v`'s low 16 (0 for 0 and 1).
fn log2_16(v: i32) -> u8 {
    let v = (v & 0xFFFF) as u16;
    match v {
        0 => 0,
        v => (15 - v.leading_zeros()) as u8,
    }
}

impl Float11 {
    fn from(i: i32) -> Self {
        let sign = i < 0;
        let i = i.abs();
        let exp = log2_16(i) + u8::from(i != 0);
        let mant = match i {
            0 => 1 << 5,
            i => ((i << 6) >> exp) as u8,
        };
        Self { sign, exp, mant }
    }

    /// The product of two, as a 16-bit integer.
    fn mult(self, other: Self) -> i32 {
        let exp = i32::from(self.exp) + i32::from(other.exp);
        let res = ((i32::from(self.mant) * i32::from(other.mant)) + 0x30) >> 4;
        let res = if exp > 19 {
            res << (exp - 19)
        } else {
            res >> (19 - exp)
        };
        i32::from((if self.sign ^ other.sign { -res } else { res }) as i16)
    }
}

fn sgn(v: i32) -> i32 {
    if v < 0 {
        -1
    } else {
        1
    }
}

/// A G.726 decoder of `code_size`-bit codes.
pub(crate) struct G726 {
    code_size: u32,
    sr: [Float11; 2],
    dq: [Float11; 6],
    a: [i32; 2],
    b: [i32; 6],
    pk: [i32; 2],
    ap: i32,
    yu: i32,
    yl: i32,
    dms: i32,
    dml: i32,
    /// Whether codes come least significant bit first.
    lsb_first: bool,
    td: bool,
    se: i32,
    sez: i32,
    y: i32,
}

impl G726 {
    /// A decoder of 2- to 5-bit codes; None for other sizes.
    pub(crate) fn new(code_size: u32) -> Option<Self> {
        if !(2..=5).contains(&code_size) {
            return None;
        }
        let zero = Float11 {
            sign: false,
            exp: 0,
            mant: 1 << 5,
        };
        Some(Self {
            code_size,
            lsb_first: false,
            sr: [zero; 2],
            dq: [zero; 6],
            a: [0; 2],
            b: [0; 6],
            pk: [1; 2],
            ap: 0,
            yu: 544,
            yl: 34816,
            dms: 0,
            dml: 0,
            td: false,
            se: 0,
            sez: 0,
            y: 544,
        })
    }

    /// The same, its codes packed least significant first (`.au`'s G.721 and G.723, as
    /// FFmpeg's `g726le`).
    pub(crate) fn lsb_first(code_size: u32) -> Option<Self> {
        Some(Self {
            lsb_first: true,
            ..Self::new(code_size)?
        })
    }

    fn tables(&self) -> &'static Tables {
        &TABLES[self.code_size as usize - 2]
    }

    fn inverse_quant(&self, i: usize) -> i32 {
        let dql = i32::from(self.tables().iquant[i]) + (self.y >> 2);
        let dex = (dql >> 7) & 0xF;
        let dqt = (1 << 7) + (dql & 0x7F);
        if dql < 0 {
            0
        } else {
            (dqt << dex) >> 7
        }
    }

    /// One code to a sample.
    fn sample(&mut self, code: u32) -> i16 {
        let i = code as usize;
        let negative = (code >> (self.code_size - 1)) != 0;
        let mut dq = self.inverse_quant(i);
        // A transition (from a tone) resets the predictor.
        let ylint = self.yl >> 15;
        let ylfrac = (self.yl >> 10) & 0x1F;
        let thr2 = if ylint > 9 {
            0x1F << 10
        } else {
            (0x20 + ylfrac) << ylint
        };
        let tr = self.td && dq > ((3 * thr2) >> 2);
        if negative {
            dq = -dq;
        }
        let re_signal = i32::from((self.se + dq) as i16);
        let pk0 = if self.sez + dq != 0 {
            sgn(self.sez + dq)
        } else {
            0
        };
        let dq0 = if dq != 0 { sgn(dq) } else { 0 };
        if tr {
            self.a = [0; 2];
            self.b = [0; 6];
        } else {
            // It really is +255, not +256.
            let fa1 = ((-self.a[0] * self.pk[0] * pk0) >> 5).clamp(-256, 255);
            self.a[1] += 128 * pk0 * self.pk[1] + fa1 - (self.a[1] >> 7);
            self.a[1] = self.a[1].clamp(-12288, 12288);
            self.a[0] += 64 * 3 * pk0 * self.pk[0] - (self.a[0] >> 8);
            self.a[0] = self.a[0].clamp(-(15360 - self.a[1]), 15360 - self.a[1]);
            for (b, dqi) in self.b.iter_mut().zip(&self.dq) {
                *b += 128 * dq0 * sgn(-i32::from(dqi.sign)) - (*b >> 8);
            }
        }
        self.pk[1] = self.pk[0];
        self.pk[0] = if pk0 != 0 { pk0 } else { 1 };
        self.sr[1] = self.sr[0];
        self.sr[0] = Float11::from(re_signal);
        self.dq.copy_within(..5, 1);
        self.dq[0] = Float11::from(dq);
        // The sign is the code's, which differs from the value's for a zero difference.
        self.dq[0].sign = negative;
        self.td = self.a[1] < -11776;

        let t = self.tables();
        let f = i32::from(t.f[i]);
        self.dms += (f << 4) + ((-self.dms) >> 5);
        self.dml += (f << 4) + ((-self.dml) >> 7);
        if tr {
            self.ap = 256;
        } else {
            self.ap += (-self.ap) >> 4;
            if self.y <= 1535 || self.td || ((self.dms << 2) - self.dml).abs() >= (self.dml >> 3) {
                self.ap += 0x20;
            }
        }
        self.yu = (self.y + i32::from(t.w[i]) + ((-self.y) >> 5)).clamp(544, 5120);
        self.yl += self.yu + ((-self.yl) >> 6);
        let al = if self.ap >= 256 { 1 << 6 } else { self.ap >> 2 };
        self.y = (self.yl + (self.yu - (self.yl >> 6)) * al) >> 6;

        self.se = 0;
        for (b, dq) in self.b.iter().zip(&self.dq) {
            self.se += Float11::from(b >> 2).mult(*dq);
        }
        self.sez = self.se >> 1;
        for (a, sr) in self.a.iter().zip(&self.sr) {
            self.se += Float11::from(a >> 2).mult(*sr);
        }
        self.se >>= 1;
        // FFmpeg stores the clipped value in 16 bits, which wraps ±65535.
        (re_signal * 4).clamp(-0xFFFF, 0xFFFF) as i16
    }
}

impl BlockDecode for G726 {
    const PARTIAL: bool = true;
    type Sample = i16;

    /// `code_size` bytes: 8 codes.
    fn block(&self) -> usize {
        self.code_size as usize
    }

    fn samples_per_block(&self) -> usize {
        8
    }

    fn decode(&mut self, block: &[u8], out: &mut Vec<i16>) {
        let bits = block.len() * 8;
        let size = self.code_size as usize;
        let mut at = 0;
        while at + size <= bits {
            let bit = |k: usize| match self.lsb_first {
                false => u32::from(block[k / 8] >> (7 - k % 8) & 1),
                true => u32::from(block[k / 8] >> (k % 8) & 1),
            };
            let code = match self.lsb_first {
                false => (at..at + size).fold(0, |c, k| c << 1 | bit(k)),
                true => (at..at + size).rev().fold(0, |c, k| c << 1 | bit(k)),
            };
            out.push(self.sample(code));
            at += size;
        }
    }
}
