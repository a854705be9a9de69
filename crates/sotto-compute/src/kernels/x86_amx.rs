//! Intel AMX kernels for [`crate::bf16`]: the bf16 GEMM's output tiles as tile-register
//! products (`tdpbf16ps`), about ten times the rate of AVX-512's `vdpbf16ps`.
//!
//! Every tile register is configured as 16 rows of 64 bytes: 16 bf16 pairs of activations
//! (A), 16 pairs × 16 columns of a packed weight panel (B, which is already the layout
//! `tdpbf16ps` reads: row p holds each column's pair p), or 16 × 16 f32 sums (C). One
//! [`tile`] call makes a 32 × 32 output block from 2 × 2 sum tiles, so each pair of A and
//! B loads feeds four products. A product takes 16 cycles; a tile load ~8 from L1 (then
//! the products hide it) but ~50 when, as in the GEMM's stream of panels, its 16 lines
//! come from L2, and then the loads set the pace. The compiler never uses tile registers,
//! so they keep their contents from one `asm!` block to the next; each parallel task loads
//! the one configuration as it starts ([`reconfigure`]) and nothing releases it.

use std::arch::asm;
use std::arch::x86_64::*;

use super::x86_int8::Finish;
use crate::int8::Epilogue;

/// Output rows per [`tile`] call.
pub(crate) const TR: usize = 32;
/// Output columns per [`tile`] call.
pub(crate) const TC: usize = 32;
/// bf16 pairs per tile step (one row of an A tile: 64 bytes).
const STEP: usize = 16;

/// The 64-byte `ldtilecfg` operand: palette 1, tiles 0..8 each 16 rows × 64 bytes.
#[repr(C, align(64))]
struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
    reserved2: [u8; 16],
}

static CONFIG: Config = {
    let mut colsb = [0u16; 16];
    let mut rows = [0u8; 16];
    let mut t = 0;
    while t < 8 {
        colsb[t] = 64;
        rows[t] = 16;
        t += 1;
    }
    Config {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb,
        rows,
        reserved2: [0; 16],
    }
};

/// Loads [`CONFIG`] into this thread's tile registers. Every tile kernel here uses that one
/// configuration and none releases it, so callers load it once per parallel task, as the
/// task begins (`ldtilecfg` per tile cost ~12% of a 32 × 32 block's time), and not once per
/// thread: other code in the process (another library's AMX kernels) may change or release
/// the tiles between our tasks.
///
/// # Safety
/// The CPU must have AMX-TILE, and this process the tile state.
#[inline]
pub(crate) unsafe fn reconfigure() {
    // SAFETY: AMX-TILE runs with the tile state granted (the contract); CONFIG is a valid
    // palette-1 configuration.
    unsafe { asm!("ldtilecfg [{0}]", in(reg) &CONFIG, options(nostack, readonly)) };
}

/// Releases this thread's tiles (configuration and data), as another library's AMX
/// kernel may between our tasks.
///
/// # Safety
/// The CPU must have AMX-TILE.
#[cfg(test)]
pub(crate) unsafe fn release_behind_our_back() {
    // SAFETY: AMX-TILE runs (the contract); releasing is always allowed.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// An f32 output block of [`TR`] × [`TC`], 64-byte rows: scratch for a partial block, or
/// a product that is folded into its destination afterwards ([`fold`]).
#[repr(C, align(64))]
pub(crate) struct Block(pub(crate) [f32; TR * TC]);

impl Block {
    pub(crate) fn new() -> Self {
        Block([0.0; TR * TC])
    }
}

/// Pairs for a last partial step of A (32 rows × 16 pairs) or B (16 pairs × 32 columns).
#[repr(C, align(64))]
struct Pairs([u32; TR * STEP]);

/// Zeroes the sum tiles tmm0..tmm3.
///
/// # Safety
/// This thread's tiles must hold [`CONFIG`].
#[inline]
unsafe fn zero_sums() {
    // SAFETY: the tiles are configured (the contract); zeroing touches no memory.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        )
    };
}

/// Stores the sum tiles tmm0..tmm3 as a 32 × 32 block of 4-byte values at `c`, rows `ldcb`
/// bytes apart.
///
/// # Safety
/// This thread's tiles must hold [`CONFIG`]; `c` must be writable at 32 rows of 128 bytes.
#[inline]
unsafe fn store_sums(c: *mut f32, ldcb: usize) {
    // SAFETY: the tiles are configured and the 32 rows writable (the contract).
    unsafe {
        let c16 = c.byte_add(16 * ldcb);
        asm!(
            "tilestored [{c} + {s}], tmm0",
            "tilestored [{c} + {s} + 64], tmm1",
            "tilestored [{c16} + {s}], tmm2",
            "tilestored [{c16} + {s} + 64], tmm3",
            c = in(reg) c, c16 = in(reg) c16, s = in(reg) ldcb,
            options(nostack),
        )
    };
}

/// Defines `$name(units, a, lda, (b, ldb, next))`: the sum tiles tmm0..tmm3 (2 × 2 of
/// 16 × 16) plus `$op`'s products of A (32 rows `lda` apart of `units` k units: bf16 pairs
/// or int8 quads) and B (unit p of columns 0..16 at `b[p·ldb..][..16]`, of columns 16..32
/// at `b[next + p·ldb..][..16]`). Whole steps of 16 units load in place; the last partial
/// step is copied, zero-padded, to whole tiles first (zeros add nothing).
macro_rules! tile_products {
    ($name:ident, $op:literal) => {
        /// # Safety
        /// The CPU must run the instruction, this process hold the tile state and this
        /// thread the tiles [`CONFIG`] sets up; `a` must hold 32 rows `lda` apart of `units`
        /// units, `b` `units` rows `ldb` apart of 16 units from 0 and from `next`.
        unsafe fn $name(
            units: usize,
            a: *const u32,
            lda: usize,
            (b, ldb, next): (*const u32, usize, usize),
        ) {
            let (full, rest) = (units / STEP, units % STEP);
            // SAFETY: every tile load reads 16 rows of 64 bytes: A rows 0..32 of units
            // p..p + 16 (p + 16 <= units for the whole steps), B rows p..p + 16 from 0 and
            // from `next` (the contract), or the padded copies of the last step.
            unsafe {
                if full > 0 {
                    asm!(
                        "2:",
                        "tileloadd tmm4, [{a} + {sa}]",
                        "tileloadd tmm6, [{b} + {sb}]",
                        "tileloadd tmm7, [{b2} + {sb}]",
                        concat!($op, " tmm0, tmm4, tmm6"),
                        "tileloadd tmm5, [{a16} + {sa}]",
                        concat!($op, " tmm1, tmm4, tmm7"),
                        concat!($op, " tmm2, tmm5, tmm6"),
                        concat!($op, " tmm3, tmm5, tmm7"),
                        "add {a}, 64",
                        "add {a16}, 64",
                        "add {b}, {bstep}",
                        "add {b2}, {bstep}",
                        "dec {n}",
                        "jnz 2b",
                        a = inout(reg) a => _,
                        a16 = inout(reg) a.add(16 * lda) => _,
                        b = inout(reg) b => _,
                        b2 = inout(reg) b.add(next) => _,
                        n = inout(reg) full => _,
                        sa = in(reg) lda * 4,
                        sb = in(reg) ldb * 4,
                        bstep = in(reg) STEP * ldb * 4,
                        options(nostack, readonly),
                    );
                }
                if rest > 0 {
                    let p0 = full * STEP;
                    let (mut ap, mut bp) = (Pairs([0; TR * STEP]), Pairs([0; TR * STEP]));
                    for r in 0..TR {
                        let src = std::slice::from_raw_parts(a.add(r * lda + p0), rest);
                        ap.0[r * STEP..r * STEP + rest].copy_from_slice(src);
                    }
                    for p in 0..rest {
                        for (half, off) in [0, next].into_iter().enumerate() {
                            let src = std::slice::from_raw_parts(b.add(off + (p0 + p) * ldb), 16);
                            bp.0[p * TC + 16 * half..][..16].copy_from_slice(src);
                        }
                    }
                    let (ap, bp) = (ap.0.as_ptr(), bp.0.as_ptr());
                    asm!(
                        "tileloadd tmm4, [{a} + {sa}]",
                        "tileloadd tmm5, [{a} + {sa} + 1024]",
                        "tileloadd tmm6, [{b} + {sb}]",
                        "tileloadd tmm7, [{b} + {sb} + 64]",
                        concat!($op, " tmm0, tmm4, tmm6"),
                        concat!($op, " tmm1, tmm4, tmm7"),
                        concat!($op, " tmm2, tmm5, tmm6"),
                        concat!($op, " tmm3, tmm5, tmm7"),
                        a = in(reg) ap, b = in(reg) bp, sa = in(reg) STEP * 4, sb = in(reg) TC * 4,
                        options(nostack, readonly),
                    );
                }
            }
        }
    };
}

tile_products!(products_bf16, "tdpbf16ps");
tile_products!(products_i8, "tdpbsud");

/// One output block of `rows` × `cols` (at most 32 × 32): `c[r·ldc + j] = (acc ? c : 0) +
/// Σ_p a[r·lda + p] · b[p·ldb + j] (+ bias[j])` for `p < kp`, in f32 from bf16 pairs.
/// `tdpbf16ps` treats subnormal inputs and results as zero and rounds its sums to nearest
/// even; its order of addition within a step is the hardware's.
///
/// `a` Shape: [32, lda] bf16 pairs (all 32 rows are read: pad past the last real row);
/// `b`: pair p of columns 0..16 at `b[p·ldb..][..16]` and of columns 16..32 at
/// `b[next + p·ldb..][..16]` (all 32 read: zero past the weight's last column); `c` Shape:
/// [rows, ldc] f32.
///
/// # Safety
/// The CPU must have AMX-TILE, AMX-BF16 and AVX-512 F, this process the tile state
/// (`sotto_isa::amx_bf16`) and this thread's tiles [`CONFIG`] ([`reconfigure`] since its
/// task began). `a` must hold 32 rows `lda` apart of `kp` pairs, `b` `kp` rows `ldb` apart
/// of 16 pairs from 0 and from `next`; `c` rows `0..rows` must be readable (when `acc`) and
/// writable at columns `0..cols`; `rows <= 32`, `cols <= 32`; `bias`, when given, holds
/// `cols` values.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile(
    kp: usize,
    a: *const u32,
    lda: usize,
    (b, ldb, next): (*const u32, usize, usize),
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    acc: bool,
    bias: Option<&[f32]>,
) {
    debug_assert!(rows <= TR && cols <= TC);
    let whole = rows == TR && cols == TC;
    // Sums go straight to `c` for a whole block, else through `blk` (row stride 32; only
    // then made: zeroing 4 KiB per call was ~1% of an encoder profile).
    let mut blk = (!whole).then(Block::new);
    let (cp, ldcb) = match blk.as_mut() {
        None => (c, ldc * 4),
        Some(blk) => {
            if acc {
                for r in 0..rows {
                    // SAFETY: c row r is readable at columns 0..cols (the contract).
                    let src = unsafe { std::slice::from_raw_parts(c.add(r * ldc), cols) };
                    blk.0[r * TC..r * TC + cols].copy_from_slice(src);
                }
            }
            (blk.0.as_mut_ptr(), TC * 4)
        }
    };
    // SAFETY: the CPU runs AMX, the process holds the tile state and the thread's tiles are
    // configured, and a and b hold what the products read (the contract). The sum tiles'
    // loads and stores cover C's 32 rows × 32 columns at `cp` (in `c` for a whole block,
    // else in `blk`).
    unsafe {
        let c16 = cp.byte_add(16 * ldcb);
        if acc {
            asm!(
                "tileloadd tmm0, [{c} + {s}]",
                "tileloadd tmm1, [{c} + {s} + 64]",
                "tileloadd tmm2, [{c16} + {s}]",
                "tileloadd tmm3, [{c16} + {s} + 64]",
                c = in(reg) cp, c16 = in(reg) c16, s = in(reg) ldcb,
                options(nostack, readonly),
            );
        } else {
            zero_sums();
        }
        products_bf16(kp, a, lda, (b, ldb, next));
        store_sums(cp, ldcb);
    }
    if let Some(bias) = bias {
        let (lo, hi) = (low_mask(cols.min(16)), low_mask(cols.saturating_sub(16)));
        // SAFETY: bias holds `cols` values (the contract); the masks stay inside them.
        let (b0, b1) = unsafe {
            (
                _mm512_maskz_loadu_ps(lo, bias.as_ptr()),
                _mm512_maskz_loadu_ps(hi, bias.as_ptr().add(16.min(cols))),
            )
        };
        for r in 0..rows {
            // SAFETY: row r of the block at `cp` (ldcb bytes apart) holds 32 columns.
            unsafe {
                let o = cp.byte_add(r * ldcb);
                _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), b0));
                let o = o.add(16);
                _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), b1));
            }
        }
    }
    if let Some(blk) = &blk {
        for r in 0..rows {
            // SAFETY: c row r is writable at columns 0..cols (the contract).
            let dst = unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc), cols) };
            dst.copy_from_slice(&blk.0[r * TC..r * TC + cols]);
        }
    }
}

/// The int8 GEMM's output tile on AMX (`tdpbsud`, exact i32 sums): `c[r·ldc + j] =
/// (Σ_p a[r·k4 + p] · b[p·32 + j] − 128·a_sums[r]) · a_scales[r] · w_scales[j] (+ bias[j])`
/// for `r < rows`, `j < cols`: the bits of the VNNI tile (`x86_int8::tile`), whose
/// operands and epilogue these are.
///
/// `a` Shape: [32, k4] quads of signed bytes (all 32 rows are read: pad past the last real
/// row); `b` Shape: [k4, 32] quads of unsigned bytes (`q + 128`, one packed column panel);
/// `c` Shape: [rows, ldc] f32.
///
/// # Safety
/// The CPU must have AMX-TILE, AMX-INT8 and AVX-512 F, this process the tile state
/// (`sotto_isa::amx_int8`) and this thread's tiles [`CONFIG`] ([`reconfigure`] since its
/// task began). `a` must hold `32·k4` quads and `b` `k4·32`; `c` rows
/// `0..rows` must be writable at columns `0..cols`; `rows <= 32`, `cols <= 32`; `a_scales`
/// and `a_sums` must hold 32 values, `w_scales` 32 and `bias`, when given, `cols`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile_i8(
    k4: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    (rows, cols): (usize, usize),
    (a_scales, a_sums): (&[f32], &[i32]),
    (w_scales, bias, add): (&[f32], Option<&[f32]>, bool),
) {
    debug_assert!(rows <= TR && cols <= TC && a_scales.len() >= TR && a_sums.len() >= TR);
    // Every element is written by the tile stores below: no zeroing.
    let mut blk = std::mem::MaybeUninit::<Block>::uninit();
    let (cp, ldcb) = (blk.as_mut_ptr() as *mut f32, TC * 4);
    // SAFETY: the CPU runs AMX-INT8, the process holds the tile state and the thread's tiles
    // are configured, and a and b hold what the products read (the contract); the stores
    // write the 32 × 32 i32 sums into `blk`.
    unsafe {
        zero_sums();
        products_i8(k4, a, k4, (b, TC, 16));
        store_sums(cp, ldcb);
    }
    // The stores wrote i32 sums into the block.
    let sums = cp as *const i32;
    let epi = Epilogue {
        w_scales,
        bias,
        add,
    };
    // SAFETY: AVX-512 F runs; w_scales holds 32 values and bias `cols` (the contract).
    let finish = unsafe { Finish::new(&epi, cols) };
    for r in 0..rows {
        // SAFETY: row r of the sums holds 32 values; row r < rows of c is writable at
        // columns 0..cols (the contract).
        unsafe {
            let row = sums.add(r * TC);
            let v = (
                _mm512_loadu_si512(row as _),
                _mm512_loadu_si512(row.add(16) as _),
            );
            finish.row(v, a_scales[r], a_sums[r], c.add(r * ldc));
        }
    }
}

/// `o[r·ldo + j] = ((acc ? o[r·ldo + j]·before[r] : 0) + t[r·TC + j])·after[r]` for
/// `r < rows`, `j < cols`, each factor 1 when None: a fresh product block folded into the
/// encoder attention's running output (the online softmax's rescale, then 1/l).
///
/// # Safety
/// The CPU must have AVX-512 F; `o` rows `0..rows` must be readable (when `acc`) and
/// writable at columns `0..cols`; `rows <= TR`, `cols <= TC`; each of `before` and
/// `after`, when given, holds `rows` values.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn fold(
    t: &Block,
    o: *mut f32,
    ldo: usize,
    rows: usize,
    cols: usize,
    acc: bool,
    before: Option<&[f32]>,
    after: Option<&[f32]>,
) {
    debug_assert!(rows <= TR && cols <= TC);
    let masks = [low_mask(cols.min(16)), low_mask(cols.saturating_sub(16))];
    for r in 0..rows {
        let f0 = _mm512_set1_ps(before.map_or(1.0, |b| b[r]));
        let f1 = _mm512_set1_ps(after.map_or(1.0, |a| a[r]));
        for (h, &mk) in masks.iter().enumerate() {
            // SAFETY: row r of `o` holds `cols` columns (the contract); the masks keep to
            // them, and t's row r holds TC values.
            unsafe {
                let dst = o.add(r * ldo + 16 * h);
                let mut x = _mm512_loadu_ps(t.0.as_ptr().add(r * TC + 16 * h));
                if acc {
                    x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, dst), f0, x);
                }
                _mm512_mask_storeu_ps(dst, mk, _mm512_mul_ps(x, f1));
            }
        }
    }
}

/// Operations per iteration of [`peak`]: four 16 × 16 × 32 tile products × (mul + add).
pub(crate) const PEAK_FLOPS: u64 = 4 * 16 * 16 * 32 * 2;

/// `iters` rounds of four independent `tdpbf16ps` on tiles of 1.0 and 2⁻²⁰; returns one
/// sum, `iters`·32·2⁻²⁰ (exact below 2²⁴ rounds).
///
/// # Safety
/// The CPU must have AMX-TILE and AMX-BF16, and this process the tile state
/// (`sotto_isa::amx_bf16`).
pub(crate) unsafe fn peak(iters: u64) -> f32 {
    let a = Pairs([0x3f80_3f80; TR * STEP]);
    // 2⁻²⁰ as bf16: exponent 127 − 20.
    let b = Pairs([0x3580_3580; TR * STEP]);
    let mut out = Block::new();
    if iters == 0 {
        return 0.0;
    }
    // SAFETY: the CPU runs AMX and the process holds the tile state (the contract); the
    // loads read 16 rows of 64 bytes of `a` and `b` (32 rows each), the store writes 16
    // rows of 64 bytes of `out` (32 rows).
    unsafe {
        reconfigure();
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm4, [{a} + {s}]",
            "tileloadd tmm5, [{a} + {s}]",
            "tileloadd tmm6, [{b} + {s}]",
            "tileloadd tmm7, [{b} + {s}]",
            "2:",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "dec {n}",
            "jnz 2b",
            "tilestored [{o} + {s}], tmm0",
            a = in(reg) a.0.as_ptr(), b = in(reg) b.0.as_ptr(), o = in(reg) out.0.as_mut_ptr(),
            s = in(reg) 64usize, n = inout(reg) iters => _,
            options(nostack),
        );
    }
    out.0[0]
}

/// A mask of the low `n` of 16 lanes.
#[inline(always)]
fn low_mask(n: usize) -> __mmask16 {
    debug_assert!(n <= 16);
    ((1u32 << n) - 1) as __mmask16
}
