//! Encoder self-attention (no mask) with bf16 operands on CPUs with AVX-512 BF16, flash
//! style: keys in tiles of 512 with an online softmax, so no [tq, tk] score matrix
//! is ever held.
//!
//! Arithmetic, per head (what [`attention_bf16_reference`] models element by element):
//! - Q and K are rounded to bf16 (nearest even) unscaled; a score s = q·k accumulates in f32,
//!   k pairs high element first (as `vdpbf16ps`). The 1/sqrt(d_head) scale is applied in
//!   f32 inside the exponent, so it costs no extra rounding of Q.
//! - Per key tile: m' = max(m, max_j s_j); p_j = bf16(2^(s_j·c − m'·c)) with
//!   c = log2(e)/sqrt(d_head) and a cubic 2^x (relative error < 7.6e-5, far below bf16's
//!   2^-8); the running denominator l = l·2^((m − m')·c) + Σ p_j sums the *rounded* p, so
//!   the weights that multiply V sum to one.
//! - O = O·2^((m − m')·c) + P·V with V rounded to bf16, accumulated in f32 (k pairs along
//!   the keys), and O/l at the end.
//!
//! K and V are rounded and packed once per call into the panels the `vdpbf16ps` tile
//! streams: K per head in panels of 64 keys × d_head pairs, V per head in panels of
//! 64 columns × key pairs.
//!
//! [`CpuBackend::attention_mixed`] takes Q·Kᵀ on 16-bit integers instead: each query row
//! and each key of a head quantized symmetrically by its own scale to `wide_qmax(d_head)`
//! levels a side (5 792 at 64, ~13 bits against bf16's 8: the most whose exact i32 sums
//! cannot overflow), the dot products exact (`vpdpwssd` on i16 pairs), then converted to
//! f32 and scaled; K is packed in f32 panels of 64 keys first (where the projection's
//! blocks put it) and quantized from them. It shares the rest: the softmax as above and the
//! bf16 P·V. Twice the f32 tile's multiply-adds per instruction: the self-attention of a
//! tiny.en window took 0.81× the time of f32 scores, base 0.87× (`sotto bench --ab`,
//! alternated, 2-core Xeon with AMX), within about bf16's unit roundoff of exact.

#[cfg(target_arch = "x86_64")]
use rayon::prelude::*;

use crate::bf16::{bf16_to_f32, f32_to_bf16};
#[cfg(target_arch = "x86_64")]
use crate::blocked::{Epi, FinishBlock, Out};
#[cfg(target_arch = "x86_64")]
use crate::fused::check_norm;
#[cfg(target_arch = "x86_64")]
use crate::Weight;
use crate::{shape_err, CpuBackend, Linear, Mask, Norm, Result};

/// Query rows per parallel task (a multiple of [`MR`]; Whisper's 1500 are 25 blocks).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const Q_BLOCK: usize = 60;
/// Rows and columns of every product tile here (scores in f32 or bf16, P·V in bf16): 6 × 4
/// vectors, as the bf16 GEMM's, so loads do not cap the products; key and value panels
/// are [`NR`] wide (a 64-wide head is one value panel).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const MR: usize = 6;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const NR: usize = 64;
/// Keys per tile of the online softmax (a multiple of the 64-key panels). 512 rather than
/// 256: fewer rescales of the output rows, ~2% faster at Whisper's 1500 keys on one
/// thread (1024 and whole rows measured the same as 512); a task's [64, 512] score tile
/// is 128 KiB, in L2.
const K_TILE: usize = 512;

/// Coefficients of the cubic for 2^f, f ∈ [0, 1) (relative error < 7.6e-5): √2 times the
/// minimax cubic of 2^x on [−0.5, 0.5], moved to x = f − 0.5.
pub(crate) const EXP2_C: [f32; 4] = [0.999_924_9, 0.695_835_2, 0.226_066_41, 0.078_023_344];

/// 2^t (for t ≤ 0) the way the SIMD kernel computes it: t = n + f with n = floor(t) (−∞
/// gives f = 0), a cubic in f (fused multiply-adds), times 2^n. Below 2^−126 the result is
/// subnormal or zero, which bf16 rounding makes zero.
pub(crate) fn exp2_model(t: f32) -> f32 {
    let n = t.floor();
    let f = if t.is_infinite() { 0.0 } else { t - n };
    let p = EXP2_C[3]
        .mul_add(f, EXP2_C[2])
        .mul_add(f, EXP2_C[1])
        .mul_add(f, EXP2_C[0]);
    libm::ldexpf(p, n.max(-1000.0) as i32)
}

/// The shape checks of [`CpuBackend::attention`] for one sequence; returns d.
fn check_shapes(
    q: &[f32],
    tq: usize,
    k: &[f32],
    v: &[f32],
    tk: usize,
    n_head: usize,
    out: &[f32],
) -> Result<usize> {
    let d = q.len().checked_div(tq).unwrap_or(0);
    if tq == 0 || n_head == 0 || d == 0 || !d.is_multiple_of(n_head) || q.len() != tq * d {
        return Err(shape_err(
            "attention",
            format!(
                "q has {} elements for 1×{tq} rows and {n_head} heads",
                q.len()
            ),
        ));
    }
    if tk == 0 || k.len() != tk * d || v.len() != tk * d || out.len() != tq * d {
        return Err(shape_err(
            "attention",
            format!(
                "k {}, v {}, out {} elements for batch 1, stride 0, tk {tk}, tq {tq}, d {d}",
                k.len(),
                v.len(),
                out.len()
            ),
        ));
    }
    Ok(d)
}

impl CpuBackend {
    /// `out = softmax(Q_h K_hᵀ / sqrt(d_head)) V_h` per head h, heads concatenated, with
    /// bf16 operands and f32 accumulation and softmax (see the module docs for the exact
    /// arithmetic); every query sees every key. Same shapes and shape errors as
    /// [`CpuBackend::attention`].
    ///
    /// On a backend whose kernel path is not AVX-512 on a CPU with AVX-512 BF16 (see
    /// [`crate::bf16_gemm_supported`]), this runs the f32 [`CpuBackend::attention`].
    ///
    /// `q` Shape: [tq, d]; `k`, `v` Shape: [tk, d]; `out` Shape: [tq, d]; d = n_head · d_head.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_bf16(
        &self,
        q: &[f32],
        tq: usize,
        k: &[f32],
        v: &[f32],
        tk: usize,
        n_head: usize,
        out: &mut [f32],
    ) -> Result<()> {
        self.bf16_attention(q, tq, k, v, tk, n_head, false, out)
    }
}

impl CpuBackend {
    /// [`CpuBackend::attention_bf16`] with Q·Kᵀ on 13-bit integer levels of Q and K,
    /// exact sums (see the module docs), then the same softmax and bf16 P·V; every query
    /// sees every key. Same shapes, shape errors and fallback as [`CpuBackend::attention_bf16`].
    ///
    /// `q` Shape: [tq, d]; `k`, `v` Shape: [tk, d]; `out` Shape: [tq, d]; d = n_head · d_head.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_mixed(
        &self,
        q: &[f32],
        tq: usize,
        k: &[f32],
        v: &[f32],
        tk: usize,
        n_head: usize,
        out: &mut [f32],
    ) -> Result<()> {
        self.bf16_attention(q, tq, k, v, tk, n_head, true, out)
    }

    /// A transformer block's self-attention from its input: q, k, v = ln(x)·Wᵀ + b (as
    /// [`CpuBackend::layer_norm_linears`]), then [`CpuBackend::attention_mixed`] over them
    /// into `out`. Where AVX-512 BF16 runs the attention and the fused bf16 or int8 GEMMs
    /// the products, the GEMM blocks go straight where the attention reads them (Q into
    /// rows per head, K and V into the packed panels): none reaches memory in the [m, d]
    /// layout, and `q`, `k`, `v` are left unspecified. Elsewhere the two ops in turn. The
    /// same bits either way.
    ///
    /// `x` Shape: [m, d]; `h` (scratch), `q`, `k`, `v`, `out` Shape: [m, d]; the weights
    /// d × d.
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm_attention_mixed(
        &self,
        x: &[f32],
        m: usize,
        norm: &Norm,
        h: &mut [f32],
        (wq, wk, wv): (&Linear, &Linear, &Linear),
        (q, k, v): (&mut [f32], &mut [f32], &mut [f32]),
        n_head: usize,
        out: &mut [f32],
    ) -> Result<()> {
        #[cfg(target_arch = "x86_64")]
        {
            let d = check_shapes(q, m, k, v, m, n_head, out)?;
            check_norm(x, m, norm, h)?;
            for (w, o) in [(wq, &*q), (wk, &*k), (wv, &*v)] {
                crate::linear::check_shapes(x, m, w, o)?;
            }
            let ws = [wq, wk, wv];
            let int8 = self.fuses_int8(ws.into_iter(), m);
            let bf16 = ws.iter().all(|w| self.fuses(w, m));
            let heads_fit = (d / n_head).is_multiple_of(NR);
            if crate::bf16::simd(self.isa()) && (int8.is_some() || bf16) && heads_fit {
                let (pools, amx) = ((&self.scratch_f32, &self.scratch_u32), self.amx());
                let project = |q_out: Out<'_>, put_k: &FinishBlock, put_v: &FinishBlock| {
                    let outs = [
                        (wq, q_out),
                        (wk, Out::Blocks(put_k)),
                        (wv, Out::Blocks(put_v)),
                    ];
                    match int8 {
                        Some(layout) => {
                            let qr = self.quant_rows(x, m, d, layout, Some(norm));
                            // The three products' tasks share the pool at once: one's last
                            // tasks overlap the next one's first.
                            outs.into_par_iter()
                                .for_each(|(w, o)| self.gemm_int8(&qr, m, w, o, Epi::Store));
                            self.recycle(qr);
                        }
                        None => self.with_pairs(
                            |a| self.layer_norm_pairs(x, m, norm, a),
                            |a| {
                                outs.into_par_iter().for_each(|(w, o)| {
                                    let Weight::Bf16(pw) = &w.weight else {
                                        unreachable!("`fuses` holds for bf16 weights only")
                                    };
                                    let bias = w.bias.as_deref();
                                    self.gemm_bf16_packed(
                                        a,
                                        pw.pairs(),
                                        m,
                                        pw,
                                        bias,
                                        o,
                                        Epi::Store,
                                    );
                                })
                            },
                        ),
                    }
                };
                self.install(|| {
                    x86::attention_projected(m, m, d, n_head, amx, out, pools, project)
                });
                return Ok(());
            }
        }
        self.layer_norm_linears(x, m, norm, h, &mut [(wq, q), (wk, k), (wv, v)])?;
        self.attention_mixed(q, m, k, v, m, n_head, out)
    }

    /// The shared body of [`CpuBackend::attention_bf16`] (`int_scores` false) and
    /// [`CpuBackend::attention_mixed`] (true).
    #[allow(clippy::too_many_arguments)]
    fn bf16_attention(
        &self,
        q: &[f32],
        tq: usize,
        k: &[f32],
        v: &[f32],
        tk: usize,
        n_head: usize,
        int_scores: bool,
        out: &mut [f32],
    ) -> Result<()> {
        if !crate::bf16::simd(self.isa()) {
            return self.attention(q, tq, k, v, tk, n_head, Mask::None, out);
        }
        let d = check_shapes(q, tq, k, v, tk, n_head, out)?;
        #[cfg(target_arch = "x86_64")]
        {
            let pools = (&self.scratch_f32, &self.scratch_u32);
            let (amx, k_v) = (self.amx(), (k, v));
            self.install(|| x86::attention(q, tq, k_v, tk, d, n_head, int_scores, amx, out, pools));
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (d, int_scores);
        Ok(())
    }
}

/// Scalar model of [`CpuBackend::attention_bf16`]'s arithmetic (same roundings, key tiles,
/// exponential and accumulation order; only the order of the softmax denominator's sum
/// and the hardware's pair sums differ), used to test it.
///
/// `q` Shape: [tq, d]; `k`, `v` Shape: [tk, d]; `out` Shape: [tq, d]; d = n_head · d_head.
pub fn attention_bf16_reference(
    q: &[f32],
    tq: usize,
    k: &[f32],
    v: &[f32],
    tk: usize,
    n_head: usize,
    out: &mut [f32],
) -> Result<()> {
    reference(q, tq, k, v, tk, n_head, false, out)
}

/// Scalar model of [`CpuBackend::attention_mixed`]'s arithmetic, as
/// [`attention_bf16_reference`] is of `attention_bf16`'s; the scores are f32 sums in order
/// of d_head, as the SIMD tile adds them.
///
/// `q` Shape: [tq, d]; `k`, `v` Shape: [tk, d]; `out` Shape: [tq, d]; d = n_head · d_head.
pub fn attention_mixed_reference(
    q: &[f32],
    tq: usize,
    k: &[f32],
    v: &[f32],
    tk: usize,
    n_head: usize,
    out: &mut [f32],
) -> Result<()> {
    reference(q, tq, k, v, tk, n_head, true, out)
}

/// The two references: `int_scores` quantizes each query row and each key per head to
/// `wide_qmax(d_head)` levels and takes their exact integer dots, as the i16 tile does.
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[f32],
    tq: usize,
    k: &[f32],
    v: &[f32],
    tk: usize,
    n_head: usize,
    int_scores: bool,
    out: &mut [f32],
) -> Result<()> {
    let d = check_shapes(q, tq, k, v, tk, n_head, out)?;
    let dh = d / n_head;
    let c = std::f32::consts::LOG2_E / (dh as f32).sqrt();
    let round = |x: &f32| bf16_to_f32(f32_to_bf16(*x));
    let qk_round = |x: &f32| if int_scores { *x } else { round(x) };
    let (qb, kb, vb): (Vec<f32>, Vec<f32>, Vec<f32>) = (
        q.iter().map(qk_round).collect(),
        k.iter().map(qk_round).collect(),
        v.iter().map(round).collect(),
    );
    // Per head, each query row's and each key's levels and scale (int scores).
    let qmax = crate::int8::wide_qmax(dh) as f32;
    let levels = |x: &[f32], key: bool| {
        let mut l = vec![0i32; x.len()];
        // A key with a non-finite value is all zeros (`quantize_k_panel`); a query row
        // skips NaN as `quantize_levels` does.
        if key && x.iter().any(|v| !v.is_finite()) {
            return (l, 0.0);
        }
        let scale = crate::int8::quantize_levels(x, qmax, |i, v| l[i] = v);
        (l, scale)
    };
    let mut s = vec![0.0f32; K_TILE];
    for h in 0..n_head {
        let c0 = h * dh;
        let keys: Vec<(Vec<i32>, f32)> = match int_scores {
            true => (0..tk)
                .map(|j| levels(&k[j * d + c0..][..dh], true))
                .collect(),
            false => Vec::new(),
        };
        for i in 0..tq {
            let qi = &qb[i * d + c0..][..dh];
            let (ql, qs) = match int_scores {
                true => levels(qi, false),
                false => (Vec::new(), 0.0),
            };
            let o = &mut out[i * d + c0..][..dh];
            o.fill(0.0);
            let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
            for j0 in (0..tk).step_by(K_TILE) {
                let nk = K_TILE.min(tk - j0);
                let s = &mut s[..nk];
                for (j, sj) in s.iter_mut().enumerate() {
                    let kj = &kb[(j0 + j) * d + c0..][..dh];
                    *sj = if int_scores {
                        let (kl, ks) = &keys[j0 + j];
                        let dot: i64 = ql.iter().zip(kl).map(|(&a, &b)| a as i64 * b as i64).sum();
                        (i32::try_from(dot).expect("the levels keep dots inside i32") as f32)
                            * (ks * qs)
                    } else {
                        pair_dot(dh, |e| qi[e], |e| kj[e])
                    };
                }
                let m_new = s.iter().copied().fold(m, f32::max);
                let mc = m_new * c;
                for sj in s.iter_mut() {
                    *sj = round(&exp2_model(sj.mul_add(c, -mc)));
                }
                let corr = ((m - m_new) * c).exp2();
                l = l * corr + s.iter().sum::<f32>();
                m = m_new;
                for (col, oc) in o.iter_mut().enumerate() {
                    let vv = |j: usize| vb[(j0 + j) * d + c0 + col];
                    let init = *oc * corr;
                    *oc = pair_dot_from(init, nk, |j| s[j], vv);
                }
            }
            let inv = 1.0 / l;
            o.iter_mut().for_each(|x| *x *= inv);
        }
    }
    Ok(())
}

/// `Σ_e a(e)·b(e)` over e < n in f32 as `vdpbf16ps` adds it: pair (2p, 2p + 1) in order,
/// the high element's product first, a missing last element zero.
fn pair_dot(n: usize, a: impl Fn(usize) -> f32, b: impl Fn(usize) -> f32) -> f32 {
    pair_dot_from(0.0, n, a, b)
}

/// [`pair_dot`] added onto `init`.
fn pair_dot_from(init: f32, n: usize, a: impl Fn(usize) -> f32, b: impl Fn(usize) -> f32) -> f32 {
    let mut acc = init;
    for p in 0..n.div_ceil(2) {
        if 2 * p + 1 < n {
            acc += a(2 * p + 1) * b(2 * p + 1);
        }
        acc += a(2 * p) * b(2 * p);
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use rayon::prelude::*;

    use super::{K_TILE, MR, NR, Q_BLOCK};
    use crate::kernels::x86_amx::{self, TC, TR};
    use crate::kernels::{self, x86_attn_f32, x86_bf16, x86_bf16_attn};

    /// Rows of the query and probability scratch: a query block in whole AMX row tiles.
    const Q_ROWS: usize = Q_BLOCK.next_multiple_of(TR);
    use std::ops::Range;

    use crate::blocked::{FinishBlock, Out};
    use crate::packed_attention::head_spans;
    use crate::scratch::Pool;
    use crate::{Isa, OutPtr};

    // The f32 score tile fills whole row tiles of a query block and whole key panels.
    const _: () = assert!(Q_BLOCK.is_multiple_of(MR) && K_TILE.is_multiple_of(NR));

    /// K and V of every head rounded to bf16 and packed for the tile kernel (K in f32
    /// for int16 scores, quantized from them by [`Panels::quantize_keys`]).
    struct Panels {
        /// Per head: `k_panels` panels of Shape: [kp, NR] (pairs along d_head × keys);
        /// empty for int16 scores.
        k: Vec<u32>,
        /// Per head: `k_panels` panels of Shape: [dh, NR] (f32, keys past tk zero); empty
        /// for bf16 scores.
        kf: Vec<f32>,
        /// Per head: `k_panels` panels of Shape: [kp, NR] (pairs of i16 along d_head ×
        /// keys), each key quantized by its own scale in `ks`; empty but for int16 scores.
        ki: Vec<u32>,
        /// Per head: `k_panels` × [NR] key scales of `ki`.
        ks: Vec<f32>,
        /// Per head: `v_panels` panels of Shape: [tkp, NR] (pairs along keys × columns).
        v: Vec<u32>,
        dh: usize,
        /// d_head pairs.
        kp: usize,
        /// Key pairs.
        tkp: usize,
        k_panels: usize,
        v_panels: usize,
    }

    impl Panels {
        /// Packs `k`, `v` (Shape: [tk, d]) for `n_head` heads of `dh`, in parallel; K in
        /// f32 for `int_scores`.
        #[allow(clippy::too_many_arguments)]
        fn new(
            k: &[f32],
            v: &[f32],
            tk: usize,
            d: usize,
            n_head: usize,
            int_scores: bool,
            pools: (&Pool<f32>, &Pool<u32>),
        ) -> Self {
            let dh = d / n_head;
            let (kp, tkp) = (dh.div_ceil(2), tk.div_ceil(2));
            let (k_panels, v_panels) = (tk.div_ceil(NR), dh.div_ceil(NR));
            let v_len = v_panels * tkp * NR;
            let (mut pk, mut kf) = (Vec::new(), Vec::new());
            if int_scores {
                let k_len = k_panels * dh * NR;
                // `pack_k_panel` writes every value of a panel, padding keys too.
                kf = pools.0.take_overwritten(n_head * k_len);
                kf.par_chunks_mut(k_len).enumerate().for_each(|(h, kf)| {
                    for (jp, panel) in kf.chunks_exact_mut(dh * NR).enumerate() {
                        let rows = NR.min(tk - jp * NR);
                        let src = &k[jp * NR * d + h * dh..][..(rows - 1) * d + dh];
                        // SAFETY: AVX-512 F runs (checked by the caller); `src` holds rows
                        // ≤ NR keys of dh values d apart, the panel dh·NR values.
                        unsafe {
                            x86_attn_f32::pack_k_panel::<NR>(
                                src.as_ptr(),
                                d,
                                rows,
                                dh,
                                panel.as_mut_ptr(),
                            )
                        };
                    }
                });
            } else {
                let k_len = k_panels * kp * NR;
                pk = pools.1.take(n_head * k_len);
                pk.par_chunks_mut(k_len).enumerate().for_each(|(h, pk)| {
                    let c0 = h * dh;
                    let mut row = vec![0u32; kp];
                    for j in 0..tk {
                        // SAFETY: `attention_bf16` checked the CPU has AVX-512 F and BF16.
                        unsafe { x86_bf16::to_pairs(&k[j * d + c0..][..dh], &mut row) };
                        let panel = &mut pk[(j / NR) * kp * NR..][..kp * NR];
                        for (p, &x) in row.iter().enumerate() {
                            panel[p * NR + j % NR] = x;
                        }
                    }
                });
            }
            // `pack_v_panel` writes every pair of a panel, padding included.
            let mut pv = pools.1.take_overwritten(n_head * v_len);
            pv.par_chunks_mut(v_len).enumerate().for_each(|(h, pv)| {
                let c0 = h * dh;
                for (cp, panel) in pv.chunks_exact_mut(tkp * NR).enumerate() {
                    let cols = NR.min(dh - cp * NR);
                    // SAFETY: AVX-512 F/BW/BF16 as above; rows < tk of v from column
                    // c0 + cp·NR hold `cols` values each (that ends by d), and the
                    // panel has tkp·NR pairs.
                    unsafe {
                        x86_bf16_attn::pack_v_panel(
                            v.as_ptr().add(c0 + cp * NR),
                            d,
                            tk,
                            cols,
                            panel.as_mut_ptr(),
                        )
                    };
                }
            });
            Self {
                k: pk,
                kf,
                ki: Vec::new(),
                ks: Vec::new(),
                v: pv,
                dh,
                kp,
                tkp,
                k_panels,
                v_panels,
            }
        }

        /// Panels for int16 scores that [`PanelsDst`] fills from GEMM blocks (K in f32,
        /// quantized once they are all there): every key and
        /// value the blocks put is written there, so only the padding keys of each head's
        /// last key panel are zeroed here. `dh` must be a multiple of [`NR`] (no padding
        /// columns in the value panels).
        fn for_blocks(tk: usize, d: usize, n_head: usize, pools: (&Pool<f32>, &Pool<u32>)) -> Self {
            let dh = d / n_head;
            assert!(
                dh.is_multiple_of(NR),
                "value panels would need padding columns"
            );
            let (kp, tkp) = (dh.div_ceil(2), tk.div_ceil(2));
            let (k_panels, v_panels) = (tk.div_ceil(NR), dh / NR);
            let k_len = k_panels * dh * NR;
            let mut kf = pools.0.take_overwritten(n_head * k_len);
            let pad = tk - (k_panels - 1) * NR..NR;
            for head in kf.chunks_exact_mut(k_len) {
                for row in head[(k_panels - 1) * dh * NR..].chunks_exact_mut(NR) {
                    row[pad.clone()].fill(0.0);
                }
            }
            Self {
                k: Vec::new(),
                kf,
                ki: Vec::new(),
                ks: Vec::new(),
                v: pools.1.take_overwritten(n_head * v_panels * tkp * NR),
                dh,
                kp,
                tkp,
                k_panels,
                v_panels,
            }
        }

        /// Quantizes the f32 key panels for int16 scores (`ki`, `ks`), in parallel: each
        /// key to `wide_qmax(dh)` levels a side by its own scale.
        fn quantize_keys(&mut self, n_head: usize, pools: (&Pool<f32>, &Pool<u32>)) {
            let (dh, kp, panels) = (self.dh, self.kp, self.k_panels);
            let qmax = crate::int8::wide_qmax(dh) as f32;
            let mut ki = pools.1.take_overwritten(n_head * panels * kp * NR);
            let mut ks = pools.0.take_overwritten(n_head * panels * NR);
            ki.par_chunks_mut(kp * NR)
                .zip(ks.par_chunks_mut(NR))
                .zip(self.kf.par_chunks(dh * NR))
                .for_each(|((kq, scales), kf)| {
                    // SAFETY: AVX-512 F and BW run (the attention's caller checked); the
                    // panel holds dh·NR values, `kq` kp·NR pairs and `scales` NR.
                    unsafe {
                        x86_attn_f32::quantize_k_panel::<NR>(
                            kf.as_ptr(),
                            dh,
                            qmax,
                            kq.as_mut_ptr(),
                            scales.as_mut_ptr(),
                        )
                    }
                });
            (self.ki, self.ks) = (ki, ks);
        }

        /// Hands the buffers back to the pools.
        fn give(self, pools: (&Pool<f32>, &Pool<u32>)) {
            pools.0.give(self.kf);
            pools.0.give(self.ks);
            pools.1.give(self.k);
            pools.1.give(self.ki);
            pools.1.give(self.v);
        }

        /// Integer key panel `jp` of head `h` (Shape: [kp, NR] pairs) and its key scales.
        fn ki_panel(&self, h: usize, jp: usize) -> (&[u32], &[f32]) {
            let at = h * self.k_panels + jp;
            (
                &self.ki[at * self.kp * NR..][..self.kp * NR],
                &self.ks[at * NR..][..NR],
            )
        }

        /// Key panel `jp` of head `h`. Shape: [kp, NR].
        fn k_panel(&self, h: usize, jp: usize) -> &[u32] {
            &self.k[(h * self.k_panels + jp) * self.kp * NR..][..self.kp * NR]
        }

        /// Column panel `cp` of head `h`. Shape: [tkp, NR].
        fn v_panel(&self, h: usize, cp: usize) -> &[u32] {
            &self.v[(h * self.v_panels + cp) * self.tkp * NR..][..self.tkp * NR]
        }
    }

    thread_local! {
        /// Each worker's [`Scratch`], kept between calls: a fresh set per rayon split cost
        /// its allocation and zeroing (a 120 KiB score tile) dozens of times per call.
        static SCRATCH: std::cell::RefCell<Scratch> = const {
            std::cell::RefCell::new(Scratch {
                qa: Vec::new(),
                qf: Vec::new(),
                qi: Vec::new(),
                qs: Vec::new(),
                s: Vec::new(),
                pa: Vec::new(),
                mv: Vec::new(),
                corr: Vec::new(),
                inv_l: Vec::new(),
                m: Vec::new(),
                l: Vec::new(),
            })
        };
    }

    /// Per-thread buffers, reused across tasks.
    struct Scratch {
        /// Query block as bf16 pairs. Shape: [Q_BLOCK, kp].
        qa: Vec<u32>,
        /// Query block in f32 for int16 scores, rows past the block zero (else empty).
        /// Shape: [Q_BLOCK, dh].
        qf: Vec<f32>,
        /// Query block as pairs of i16 for int16 scores, each row by its own scale in
        /// `qs` (else empty). Shape: [Q_BLOCK, kp] and [Q_BLOCK].
        qi: Vec<u32>,
        qs: Vec<f32>,
        /// Score tile. Shape: [Q_BLOCK, K_TILE].
        s: Vec<f32>,
        /// Probability tile as bf16 pairs. Shape: [Q_BLOCK, K_TILE / 2].
        pa: Vec<u32>,
        /// Per row, 16 lane maxima of the key tile's int16 scores (their max is the row's).
        /// Shape: [Q_BLOCK, 16].
        mv: Vec<f32>,
        /// Per row, the key tile's rescale of O (2^((m − m')·c)), and 1/l. Shape: [Q_BLOCK].
        corr: Vec<f32>,
        inv_l: Vec<f32>,
        /// Running row max and softmax denominator. Shape: [Q_BLOCK].
        m: Vec<f32>,
        l: Vec<f32>,
    }

    /// The SIMD path of [`crate::CpuBackend::attention_bf16`] (or, with `int_scores`, of
    /// `attention_mixed`), inside the backend's pool; the caller checked the shapes and
    /// that AVX-512 BF16 runs.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        q: &[f32],
        tq: usize,
        (k, v): (&[f32], &[f32]),
        tk: usize,
        d: usize,
        n_head: usize,
        int_scores: bool,
        amx: bool,
        out: &mut [f32],
        pools: (&Pool<f32>, &Pool<u32>),
    ) {
        let mut panels = Panels::new(k, v, tk, d, n_head, int_scores, pools);
        if int_scores {
            panels.quantize_keys(n_head, pools);
        }
        attend(Queries::Rows(q), tq, &panels, tk, d, n_head, amx, out);
        panels.give(pools);
    }

    /// `attention_mixed` where Q, K and V come from GEMMs that `project` runs: it gets Q's
    /// output ([`Out::Heads`]: the tiles write Q's rows per head themselves) and the
    /// finishes that put K's and V's output blocks ([`Out::Blocks`], Shape: [tk, d])
    /// straight into the packed panels, so none reaches memory in the [_, d] layout. Inside the
    /// backend's pool; the caller checked the shapes, that AVX-512 BF16 runs and that
    /// d_head is a multiple of [`NR`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention_projected(
        tq: usize,
        tk: usize,
        d: usize,
        n_head: usize,
        amx: bool,
        out: &mut [f32],
        pools: (&Pool<f32>, &Pool<u32>),
        project: impl FnOnce(Out<'_>, &FinishBlock, &FinishBlock),
    ) {
        let mut panels = Panels::for_blocks(tk, d, n_head, pools);
        let dst = PanelsDst::new(&mut panels, tk, d);
        // Q by head, each head's rows padded to whole row tiles with zeros.
        let (dh, rows) = (d / n_head, tq.next_multiple_of(MR));
        let mut qh = pools.0.take_overwritten(n_head * rows * dh);
        for head in qh.chunks_exact_mut(rows * dh) {
            head[tq * dh..].fill(0.0);
        }
        let put_k = |r: Range<usize>, c: Range<usize>, blk: &[f32], ld: usize| {
            // SAFETY: AVX-512 F runs (the caller's check); a block's rows and columns are
            // its task's alone, and the panels outlive the GEMM.
            unsafe { dst.put_k(r, c, blk, ld) }
        };
        let put_v = |r: Range<usize>, c: Range<usize>, blk: &[f32], ld: usize| {
            // SAFETY: AVX-512 BF16 runs (the caller's check); as above.
            unsafe { dst.put_v(r, c, blk, ld) }
        };
        project(Out::Heads(&mut qh, rows, dh), &put_k, &put_v);
        panels.quantize_keys(n_head, pools);
        attend(
            Queries::Heads(&qh, rows),
            tq,
            &panels,
            tk,
            d,
            n_head,
            amx,
            out,
        );
        panels.give(pools);
        pools.0.give(qh);
    }

    /// Where a block's query rows are.
    #[derive(Clone, Copy)]
    enum Queries<'a> {
        /// Shape: [tq, d].
        Rows(&'a [f32]),
        /// Rows per head (int16 scores only): Shape: [n_head, rows, d_head], rows ≥ tq a
        /// multiple of [`MR`], the padding rows zero.
        Heads(&'a [f32], usize),
    }

    /// The query blocks of every head against packed panels, in parallel.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        q: Queries<'_>,
        tq: usize,
        panels: &Panels,
        tk: usize,
        d: usize,
        n_head: usize,
        amx: bool,
        out: &mut [f32],
    ) {
        let qf_len = if panels.kf.is_empty() {
            0
        } else {
            Q_BLOCK * panels.dh
        };
        let n_blocks = tq.div_ceil(Q_BLOCK);
        let dst = OutPtr(out.as_mut_ptr());
        let kp = panels.kp;
        (0..n_head * n_blocks).into_par_iter().for_each(|t| {
            // Query blocks outermost, as the GEMMs' row blocks (each worker a run of rows).
            let (h, b) = (t % n_head, t / n_head);
            let i0 = b * Q_BLOCK;
            let i1 = (i0 + Q_BLOCK).min(tq);
            SCRATCH.with_borrow_mut(|sc| {
                // Every element a task reads it writes first, so old contents do not matter.
                // AMX tiles read whole 32-row tiles of Q and P: rows past the block are
                // never stored, so their contents do not matter either.
                sc.qa.resize(Q_ROWS * kp, 0);
                sc.qf.resize(qf_len, 0.0);
                let qi_rows = if panels.ki.is_empty() { 0 } else { Q_BLOCK };
                sc.qi.resize(qi_rows * kp, 0);
                sc.qs.resize(qi_rows, 0.0);
                sc.s.resize(Q_BLOCK * K_TILE, 0.0);
                sc.pa.resize(Q_ROWS * K_TILE / 2, 0);
                sc.mv.resize(Q_BLOCK * 16, 0.0);
                // Rows past a partial block are never stored: any finite factor does.
                sc.corr.resize(Q_BLOCK, 1.0);
                sc.inv_l.resize(Q_BLOCK, 1.0);
                sc.m.resize(Q_BLOCK, 0.0);
                sc.l.resize(Q_BLOCK, 0.0);
                block(q, d, panels, h, (i0, i1), tk, amx, dst, sc);
            });
        });
    }

    /// Where [`attention_projected`]'s GEMM blocks go: the panels of a [`Panels`] for f32
    /// scores, shared by the GEMM's tasks, each of which writes only its own keys.
    #[derive(Clone, Copy)]
    struct PanelsDst {
        kf: *mut f32,
        v: *mut u32,
        tk: usize,
        d: usize,
        dh: usize,
        tkp: usize,
        k_panels: usize,
        v_panels: usize,
    }

    // SAFETY: tasks write disjoint keys and values (see `put_k`, `put_v`).
    unsafe impl Send for PanelsDst {}
    // SAFETY: as above.
    unsafe impl Sync for PanelsDst {}

    impl PanelsDst {
        fn new(p: &mut Panels, tk: usize, d: usize) -> Self {
            PanelsDst {
                kf: p.kf.as_mut_ptr(),
                v: p.v.as_mut_ptr(),
                tk,
                d,
                dh: p.dh,
                tkp: p.tkp,
                k_panels: p.k_panels,
                v_panels: p.v_panels,
            }
        }

        /// The heads that columns `cols` of K or V touch: (head, its columns among `cols`,
        /// the first one's place in the head).
        fn heads(self, cols: Range<usize>) -> impl Iterator<Item = (usize, Range<usize>, usize)> {
            let dh = self.dh;
            head_spans(cols, dh).map(move |(h, seg)| (h, seg.clone(), seg.start - h * dh))
        }

        /// Keys `rows`, columns `cols` of K (the block's row r − rows.start, `ld` apart)
        /// into the f32 key panels.
        ///
        /// # Safety
        /// AVX-512 F must run; no other thread writes these keys' columns meanwhile, and
        /// the panels outlive the call.
        unsafe fn put_k(self, rows: Range<usize>, cols: Range<usize>, blk: &[f32], ld: usize) {
            assert!(
                rows.end <= self.tk && cols.end <= self.d,
                "K block past its panels"
            );
            for (h, seg, p0) in self.heads(cols.clone()) {
                for jp in rows.start / NR..rows.end.div_ceil(NR) {
                    let keys = rows.start.max(jp * NR)..rows.end.min((jp + 1) * NR);
                    let src = &blk[(keys.start - rows.start) * ld + seg.start - cols.start..];
                    assert!(src.len() >= (keys.len() - 1) * ld + seg.len());
                    let panel = (h * self.k_panels + jp) * self.dh * NR + p0 * NR;
                    // SAFETY: `src` holds the keys' rows (checked); panel rows p0..p0 +
                    // seg.len() ≤ dh and keys up to NR lie in head h's panel jp, which
                    // `Panels::for_blocks` sized; AVX-512 F runs (the contract).
                    unsafe {
                        x86_attn_f32::pack_k_keys::<NR>(
                            src.as_ptr(),
                            ld,
                            keys.len(),
                            seg.len(),
                            self.kf.add(panel),
                            keys.start - jp * NR,
                        )
                    };
                }
            }
        }

        /// Keys `rows` (starting even), columns `cols` of V into the bf16 value panels.
        ///
        /// # Safety
        /// AVX-512 F, BW and BF16 must run; no other thread writes these keys' columns
        /// meanwhile, and the panels outlive the call.
        unsafe fn put_v(self, rows: Range<usize>, cols: Range<usize>, blk: &[f32], ld: usize) {
            assert!(
                rows.end <= self.tk && cols.end <= self.d,
                "V block past its panels"
            );
            assert!(rows.start.is_multiple_of(2), "a V block splits a key pair");
            for (h, seg, c0) in self.heads(cols.clone()) {
                for cp in c0 / NR..(c0 + seg.len()).div_ceil(NR) {
                    let pc = c0.max(cp * NR)..(c0 + seg.len()).min((cp + 1) * NR);
                    let src = &blk[pc.start - c0 + seg.start - cols.start..];
                    assert!(src.len() >= (rows.len() - 1) * ld + pc.len());
                    let at =
                        (h * self.v_panels + cp) * self.tkp * NR + (rows.start / 2) * NR + pc.start
                            - cp * NR;
                    // SAFETY: `src` holds the rows' columns (checked); pair rows
                    // rows.start / 2.. < tkp and columns pc (within panel cp) lie in head
                    // h's panel; AVX-512 BF16 runs (the contract).
                    unsafe {
                        x86_bf16_attn::pack_v_cols(
                            src.as_ptr(),
                            ld,
                            rows.len(),
                            pc.len(),
                            self.v.add(at),
                        )
                    };
                }
            }
        }
    }

    /// Head `h`, query rows `i0..i1`: writes `out` rows i0..i1, columns h·dh..(h + 1)·dh,
    /// which no other task touches.
    #[allow(clippy::too_many_arguments)]
    fn block(
        q: Queries<'_>,
        d: usize,
        pn: &Panels,
        h: usize,
        (i0, i1): (usize, usize),
        tk: usize,
        amx: bool,
        out: OutPtr,
        sc: &mut Scratch,
    ) {
        if amx {
            // SAFETY: `amx` says AMX runs and the process has the tile state.
            unsafe { x86_amx::reconfigure() };
        }
        let (bq, kp, dh) = (i1 - i0, pn.kp, pn.dh);
        let c0 = h * dh;
        let c = std::f32::consts::LOG2_E / (dh as f32).sqrt();
        let int_scores = !pn.kf.is_empty();
        // Taken out of the scratch while the block borrows the rest of it.
        let mut qbuf = std::mem::take(&mut sc.qf);
        let qf = match q {
            Queries::Heads(qh, rows) => &qh[(h * rows + i0) * dh..][..bq.div_ceil(MR) * MR * dh],
            Queries::Rows(q) if int_scores => {
                for r in 0..bq.div_ceil(MR) * MR {
                    let dst = &mut qbuf[r * dh..][..dh];
                    match q.get((i0 + r) * d + c0..).filter(|_| r < bq) {
                        Some(src) => dst.copy_from_slice(&src[..dh]),
                        None => dst.fill(0.0),
                    }
                }
                &qbuf[..]
            }
            Queries::Rows(_) => &[],
        };
        if let (Queries::Rows(q), false) = (q, int_scores) {
            for r in 0..bq {
                // SAFETY: `attention` runs only where AVX-512 F and BF16 are available.
                unsafe {
                    x86_bf16::to_pairs(&q[(i0 + r) * d + c0..][..dh], &mut sc.qa[r * kp..][..kp])
                };
            }
        }
        if int_scores {
            let qmax = crate::int8::wide_qmax(dh) as f32;
            for r in 0..bq.div_ceil(MR) * MR {
                // SAFETY: AVX-512 F runs, so AVX2 does; the row has dh values and its
                // pairs kp = dh.div_ceil(2).
                sc.qs[r] = unsafe {
                    kernels::x86_int8::quantize_row_pairs(
                        &qf[r * dh..][..dh],
                        qmax,
                        &mut sc.qi[r * kp..][..kp],
                    )
                };
            }
        }
        sc.m[..bq].fill(f32::NEG_INFINITY);
        sc.l[..bq].fill(0.0);
        let lp = K_TILE / 2;
        for j0 in (0..tk).step_by(K_TILE) {
            let nk = K_TILE.min(tk - j0);
            if int_scores {
                int_scores_tile(sc, pn, h, j0, nk, bq);
            }
            // S = Q·Kᵀ for this key tile, one NR-key panel at a time.
            for jp in (0..nk.div_ceil(NR)).filter(|_| !int_scores) {
                let panel = pn.k_panel(h, j0 / NR + jp);
                let cols = NR.min(nk - jp * NR);
                if amx {
                    for (ic, jc) in amx_blocks(bq, cols) {
                        let (rows, cols) = (TR.min(bq - ic), TC.min(cols - jc));
                        // SAFETY: AMX runs (`amx`), configured as this block began; qa
                        // holds Q_ROWS ≥ ic + TR rows of kp pairs, the panel kp rows of
                        // NR ≥ jc + TC pairs; rows ic..+rows, columns jp·NR + jc..+cols of
                        // the [Q_BLOCK, K_TILE] tile exist.
                        unsafe {
                            x86_amx::tile(
                                kp,
                                sc.qa[ic * kp..].as_ptr(),
                                kp,
                                (panel[jc..].as_ptr(), NR, 16),
                                sc.s[ic * K_TILE + jp * NR + jc..].as_mut_ptr(),
                                K_TILE,
                                rows,
                                cols,
                                false,
                                None,
                            )
                        };
                    }
                    continue;
                }
                for ic in (0..bq).step_by(MR) {
                    // SAFETY: AVX-512 BF16 runs; qa holds Q_BLOCK ≥ ic + MR rows of kp
                    // pairs, the panel kp·NR pairs; rows ic..ic + MR.min(bq − ic) and
                    // columns jp·NR..+cols of the [Q_BLOCK, K_TILE] score tile exist.
                    unsafe {
                        x86_bf16::tile::<MR, { NR / 16 }>(
                            kp,
                            sc.qa[ic * kp..].as_ptr(),
                            kp,
                            (panel.as_ptr(), NR, 16),
                            sc.s[ic * K_TILE + jp * NR..].as_mut_ptr(),
                            K_TILE,
                            MR.min(bq - ic),
                            cols,
                            false,
                            None,
                            (None, None),
                        )
                    };
                }
            }
            // Online softmax: P as bf16 pairs, and the factors that take each O row to the
            // new max (applied by the P·V tile as it loads the row), and after the last
            // key tile to 1/l.
            let kc = nk.div_ceil(2);
            let last = j0 + nk == tk;
            for r in 0..bq {
                let row = &sc.s[r * K_TILE..][..nk];
                let tile_max = if int_scores {
                    kernels::max(Isa::Avx512, &sc.mv[r * 16..][..16])
                } else {
                    kernels::max(Isa::Avx512, row)
                };
                let m_new = tile_max.max(sc.m[r]);
                let p = &mut sc.pa[r * lp..][..kc];
                // SAFETY: AVX-512 F, DQ and BF16 run; p has nk.div_ceil(2) pairs.
                let sum = unsafe { x86_bf16_attn::exp2_pairs(row, c, m_new * c, p) };
                let corr = ((sc.m[r] - m_new) * c).exp2();
                sc.l[r] = sc.l[r] * corr + sum;
                sc.m[r] = m_new;
                sc.corr[r] = corr;
                sc.inv_l[r] = 1.0 / sc.l[r];
            }
            // O += P·V, one NR-column panel at a time.
            for cp in 0..pn.v_panels {
                let panel = &pn.v_panel(h, cp)[(j0 / 2) * NR..][..kc * NR];
                let cols = NR.min(dh - cp * NR);
                if amx {
                    let mut t = x86_amx::Block::new();
                    for (ic, jc) in amx_blocks(bq, cols) {
                        let (rows, cols) = (TR.min(bq - ic), TC.min(cols - jc));
                        let before = (j0 > 0).then(|| &sc.corr[ic..ic + rows]);
                        let after = last.then(|| &sc.inv_l[ic..ic + rows]);
                        // SAFETY: AMX runs (`amx`), configured as this block began; pa
                        // holds Q_ROWS ≥ ic + TR rows of lp ≥ kc pairs, the panel slice kc
                        // rows of NR ≥ jc + TC pairs; `t` is a whole block; rows
                        // i0 + ic..+rows, columns c0 + cp·NR + jc..+cols of `out`
                        // ([tq, d]) belong to this task.
                        unsafe {
                            x86_amx::tile(
                                kc,
                                sc.pa[ic * lp..].as_ptr(),
                                lp,
                                (panel[jc..].as_ptr(), NR, 16),
                                t.0.as_mut_ptr(),
                                TC,
                                TR,
                                TC,
                                false,
                                None,
                            );
                            let o = out.at((i0 + ic) * d + c0 + cp * NR + jc);
                            x86_amx::fold(&t, o, d, rows, cols, j0 > 0, before, after);
                        }
                    }
                    continue;
                }
                for ic in (0..bq).step_by(MR) {
                    let before = (j0 > 0).then(|| &sc.corr[ic..ic + MR]);
                    let after = last.then(|| &sc.inv_l[ic..ic + MR]);
                    // SAFETY: AVX-512 BF16 runs; pa holds Q_BLOCK ≥ ic + MR rows of lp ≥ kc
                    // pairs, the panel slice kc·NR pairs; rows i0 + ic..+MR.min(bq − ic),
                    // columns c0 + cp·NR..+cols of `out` ([tq, d]) belong to this task.
                    unsafe {
                        x86_bf16::tile::<MR, { NR / 16 }>(
                            kc,
                            sc.pa[ic * lp..].as_ptr(),
                            lp,
                            (panel.as_ptr(), NR, 16),
                            out.at((i0 + ic) * d + c0 + cp * NR),
                            d,
                            MR.min(bq - ic),
                            cols,
                            j0 > 0,
                            None,
                            (before, after),
                        )
                    };
                }
            }
        }
        sc.qf = qbuf;
    }

    /// The (row, column) origins of the AMX blocks covering `rows` × `cols`.
    fn amx_blocks(rows: usize, cols: usize) -> impl Iterator<Item = (usize, usize)> {
        (0..rows)
            .step_by(TR)
            .flat_map(move |ic| (0..cols).step_by(TC).map(move |jc| (ic, jc)))
    }

    /// S = Q·Kᵀ on i16 pairs for keys `j0..j0 + nk` into the score tile, from the query
    /// block's pairs and scales (`sc.qi`, `sc.qs`, rows past the block zero) and head `h`'s
    /// integer key panels; each row's lane maxima over those keys into `sc.mv`.
    fn int_scores_tile(sc: &mut Scratch, pn: &Panels, h: usize, j0: usize, nk: usize, bq: usize) {
        let kp = pn.kp;
        sc.mv.fill(f32::NEG_INFINITY);
        for jp in 0..nk.div_ceil(NR) {
            let (panel, scales) = pn.ki_panel(h, j0 / NR + jp);
            let cols = nk - jp * NR;
            for ic in (0..bq).step_by(MR) {
                let s = sc.s[ic * K_TILE + jp * NR..].as_mut_ptr();
                let row_max = Some((sc.mv[ic * 16..].as_mut_ptr(), cols));
                let q = sc.qi[ic * kp..][..MR * kp].as_ptr();
                let k = (panel.as_ptr(), NR);
                let sc_ = (sc.qs[ic..][..MR].as_ptr(), scales.as_ptr());
                // SAFETY: AVX-512 F and VNNI run (`bf16_gemm_supported`); qi holds bq
                // rounded up to MR ≥ ic + MR rows of kp pairs and qs their scales, the
                // panel kp·NR pairs and NR scales, the [Q_BLOCK, K_TILE] score tile rows
                // ic..ic + MR, columns jp·NR..(jp + 1)·NR ≤ K_TILE, and sc.mv rows
                // ic..ic + MR. A last panel with few keys takes a narrower tile.
                unsafe {
                    use x86_attn_f32::scores_i16;
                    match cols {
                        ..=16 => scores_i16::<MR, 1>(kp, q, k, sc_, s, K_TILE, row_max),
                        17..=32 => scores_i16::<MR, 2>(kp, q, k, sc_, s, K_TILE, row_max),
                        33..=48 => scores_i16::<MR, 3>(kp, q, k, sc_, s, K_TILE, row_max),
                        _ => scores_i16::<MR, { NR / 16 }>(kp, q, k, sc_, s, K_TILE, row_max),
                    }
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{backends, max_abs_diff, naive_attention, rand_vec};
    use crate::Isa;

    /// bf16's unit roundoff (8 significant bits).
    const U: f64 = 1.0 / 256.0;

    /// The worst-case error of the bf16 arithmetic against exact attention: every
    /// log-weight moves by at most E = A·(2u + u² + dh·2⁻²³) (Q, K rounding and the f32
    /// dot, A = max_ij Σ_c |q_ic·k_jc| / sqrt(dh)) + 7.6e-5 (the cubic) + u(1 + u) (P
    /// rounding) + |s|·c·2⁻²² (the exponent's argument), so Σ_j |w̃_j − w_j| ≤ e^{2E} − 1;
    /// V rounding adds u·max|v|, the f32 sums tk·2⁻²³·max|v|.
    fn bound(q: &[f32], tq: usize, k: &[f32], v: &[f32], tk: usize, nh: usize) -> f64 {
        let d = q.len() / tq;
        let dh = d / nh;
        let scale = 1.0 / (dh as f64).sqrt();
        let mut a = 0.0f64;
        for h in 0..nh {
            for i in 0..tq {
                for j in 0..tk {
                    let s: f64 = (0..dh)
                        .map(|c| {
                            (q[i * d + h * dh + c] as f64 * k[j * d + h * dh + c] as f64).abs()
                        })
                        .sum();
                    a = a.max(s * scale);
                }
            }
        }
        let vmax = v.iter().fold(0.0f64, |m, x| m.max(x.abs() as f64));
        let f32_eps = 2f64.powi(-23);
        let e = a * (2.0 * U + U * U + dh as f64 * f32_eps)
            + 7.6e-5
            + U * (1.0 + U)
            + a * std::f64::consts::LOG2_E * 4.0 * f32_eps;
        ((2.0 * e).exp_m1() * (1.0 + U) + U + tk as f64 * f32_eps) * vmax
    }

    fn inputs(tq: usize, tk: usize, d: usize, q_gain: f32) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let q = rand_vec(tq * d, 1).iter().map(|x| x * q_gain).collect();
        (q, rand_vec(tk * d, 2), rand_vec(tk * d, 3))
    }

    // (tq, tk, n_head, d_head)
    const SHAPES: [(usize, usize, usize, usize); 9] = [
        (1, 1, 1, 64),
        (7, 65, 2, 40),
        (65, 7, 3, 64),
        (300, 1, 1, 40),
        (65, 300, 6, 64),
        (129, 513, 2, 5),
        (1500, 1500, 1, 64),
        (300, 1500, 6, 64),
        // Two value panels, the second partial; a partial last query block and key panel.
        (61, 130, 2, 80),
    ];

    #[test]
    fn exp2_model_is_close_to_exp2() {
        for i in 0..=4000 {
            let t = -(i as f32) * 0.01;
            let (got, want) = (exp2_model(t) as f64, (t as f64).exp2());
            assert!(
                (got - want).abs() <= 7.6e-5 * want,
                "2^{t}: {got} vs {want}"
            );
        }
        assert_eq!(f32_to_bf16(exp2_model(-127.0)), 0);
        assert_eq!(exp2_model(-200.0), 0.0);
        assert_eq!(exp2_model(f32::NEG_INFINITY), 0.0);
    }

    /// The SIMD exponential of the softmax rounds to the model's bf16 values, specials and
    /// the edges of the subnormal range included.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp2_pairs_matches_model() {
        if !crate::bf16_gemm_supported() {
            eprintln!("skipped: no AVX-512 BF16");
            return;
        }
        let mut t: Vec<f32> = (0..=40_000).map(|i| -(i as f32) * 0.003_7).collect();
        t.extend([
            -1e-30,
            -1e-7,
            -0.5,
            -126.0,
            -126.5,
            -127.0,
            -149.5,
            -1e30,
            f32::NEG_INFINITY,
        ]);
        t.push(-0.0);
        let mut p = vec![0u32; t.len().div_ceil(2)];
        // SAFETY: the CPU has AVX-512 F and BF16 (checked above); p holds t.len()/2 pairs.
        let sum = unsafe { crate::kernels::x86_bf16_attn::exp2_pairs(&t, 1.0, 0.0, &mut p) };
        let mut want_sum = 0.0f64;
        for (i, &ti) in t.iter().enumerate() {
            let got = (p[i / 2] >> (16 * (i % 2))) as u16;
            let want = f32_to_bf16(exp2_model(ti));
            assert_eq!(got, want, "2^{ti}");
            want_sum += bf16_to_f32(want) as f64;
        }
        assert!(
            (sum as f64 - want_sum).abs() <= 1e-5 * want_sum,
            "{sum} vs {want_sum}"
        );
    }

    #[test]
    fn simd_matches_reference() {
        for be in [1, 3].into_iter().flat_map(backends) {
            let (threads, amx) = (be.threads(), be.amx());
            if !crate::bf16::simd(be.isa()) {
                eprintln!("skipped: no AVX-512 BF16");
                return;
            }
            for (tq, tk, nh, dh) in SHAPES {
                let d = nh * dh;
                let (q, k, v) = inputs(tq, tk, d, 3.0);
                let mut want = vec![0.0; tq * d];
                attention_bf16_reference(&q, tq, &k, &v, tk, nh, &mut want).unwrap();
                let mut got = vec![f32::NAN; tq * d];
                be.attention_bf16(&q, tq, &k, &v, tk, nh, &mut got).unwrap();
                let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
                let err = max_abs_diff(&got, &want);
                eprintln!(
                    "{threads} threads, amx {amx}, {tq}×{tk} {nh}×{dh}: {:.1e}",
                    err / scale
                );
                // AMX adds a score's pairs in its own order, so a p next to a bf16 rounding
                // boundary can round one unit (2⁻⁸) the other way: up to 2.4e-4 seen here,
                // against the reference's own 2⁻⁷ or so from exact attention.
                let tol = if amx { 1e-3 } else { 1e-4 };
                assert!(
                    err <= tol * scale,
                    "{threads} threads, amx {amx}, {tq}×{tk}, {nh}×{dh}: {err} (scale {scale})"
                );
            }
        }
    }

    #[test]
    fn reference_is_within_bf16_error_of_exact() {
        // (q gain, shapes, typical limit): a gain of 3 gives scores of about unit spread,
        // 12 a sharp softmax, where Q·K's rounding weighs more.
        for (q_gain, shapes, typical) in
            [(3.0, &SHAPES[..7], 2.0 * U), (12.0, &SHAPES[4..6], 6.0 * U)]
        {
            for &(tq, tk, nh, dh) in shapes {
                let d = nh * dh;
                let (q, k, v) = inputs(tq, tk, d, q_gain);
                let mut got = vec![f32::NAN; tq * d];
                attention_bf16_reference(&q, tq, &k, &v, tk, nh, &mut got).unwrap();
                let want = naive_attention(&q, tq, &k, &v, tk, nh, None);
                let err = max_abs_diff(&got, &want) as f64;
                let bound = bound(&q, tq, &k, &v, tk, nh);
                eprintln!("gain {q_gain} {tq}×{tk} {nh}×{dh}: err {err:.2e} bound {bound:.2e}");
                assert!(err <= bound, "{tq}×{tk}, {nh}×{dh}: {err} > {bound}");
                // The bound is worst case; random roundings land far inside it.
                assert!(err <= typical, "{tq}×{tk}, {nh}×{dh}: {err}");
            }
        }
    }

    #[test]
    fn mixed_simd_matches_reference() {
        for be in [1, 3].into_iter().flat_map(backends) {
            let (threads, amx) = (be.threads(), be.amx());
            if !crate::bf16::simd(be.isa()) {
                eprintln!("skipped: no AVX-512 BF16");
                return;
            }
            for (tq, tk, nh, dh) in SHAPES {
                let d = nh * dh;
                let (q, k, v) = inputs(tq, tk, d, 3.0);
                let mut want = vec![0.0; tq * d];
                attention_mixed_reference(&q, tq, &k, &v, tk, nh, &mut want).unwrap();
                let mut got = vec![f32::NAN; tq * d];
                be.attention_mixed(&q, tq, &k, &v, tk, nh, &mut got)
                    .unwrap();
                let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
                let err = max_abs_diff(&got, &want);
                assert!(
                    err <= 1e-4 * scale,
                    "{threads} threads, amx {amx}, {tq}×{tk}, {nh}×{dh}: {err} (scale {scale})"
                );
            }
        }
    }

    /// The self-attention whose Q, K and V go from the GEMM blocks where the attention
    /// reads them gives the bits of the q, k, v products, then the attention: the same
    /// values are packed the same way. Odd and partial row counts (a key pair split across the last
    /// panel, blocks ending mid-panel), heads of 64 and of 32 (not fused), bf16 and int8
    /// weights, with and without AMX.
    #[test]
    fn projected_attention_matches_separate_ops() {
        use crate::{Linear, Norm, Weight};
        for be in [1, 2].into_iter().flat_map(backends) {
            if !crate::bf16::simd(be.isa()) {
                eprintln!("skipped: no AVX-512 BF16");
                return;
            }
            // (m, n_head, d_head)
            for (m, nh, dh) in [
                (5, 2, 64),
                (97, 2, 64),
                (301, 3, 64),
                (130, 4, 32),
                (600, 1, 128),
            ] {
                let d = nh * dh;
                let norm = Norm {
                    gamma: rand_vec(d, 11),
                    beta: rand_vec(d, 12),
                    eps: 1e-5,
                };
                let x: Vec<f32> = rand_vec(m * d, 13).iter().map(|v| 3.0 * v).collect();
                for format in ["bf16", "int8"] {
                    let lin = |seed| {
                        let w = Weight::F32(rand_vec(d * d, seed));
                        let w = match format {
                            "int8" => w.for_int8_gemm(d, d, true).unwrap(),
                            _ => w.for_bf16_gemm(d, d, true).unwrap(),
                        };
                        Linear::new(w, Some(rand_vec(d, seed + 1)), d, d).unwrap()
                    };
                    let (wq, wk, wv) = (lin(20), lin(22), lin(24));
                    let buf = || vec![f32::NAN; m * d];
                    let (mut h, mut q, mut k, mut v, mut got) = (buf(), buf(), buf(), buf(), buf());
                    be.layer_norm_attention_mixed(
                        &x,
                        m,
                        &norm,
                        &mut h,
                        (&wq, &wk, &wv),
                        (&mut q, &mut k, &mut v),
                        nh,
                        &mut got,
                    )
                    .unwrap();
                    let (mut q2, mut k2, mut v2, mut want) = (buf(), buf(), buf(), buf());
                    let qkv: &mut [(&Linear, &mut [f32])] =
                        &mut [(&wq, &mut q2), (&wk, &mut k2), (&wv, &mut v2)];
                    be.layer_norm_linears(&x, m, &norm, &mut h, qkv).unwrap();
                    be.attention_mixed(&q2, m, &k2, &v2, m, nh, &mut want)
                        .unwrap();
                    let (threads, amx) = (be.threads(), be.amx());
                    let what =
                        format!("{threads} threads, amx {amx}, {format}, {m} rows, {nh}×{dh}");
                    assert_eq!(got, want, "{what}");
                }
            }
        }
    }

    #[test]
    fn mixed_reference_beats_bf16_on_sharp_softmax() {
        // 13-bit scores leave little but P's and V's rounding: within about U of exact, where bf16
        // scores, amplified by a sharp softmax, drift further.
        for (q_gain, typical) in [(3.0, 1.5 * U), (12.0, 1.5 * U)] {
            for &(tq, tk, nh, dh) in &SHAPES[4..6] {
                let d = nh * dh;
                let (q, k, v) = inputs(tq, tk, d, q_gain);
                let want = naive_attention(&q, tq, &k, &v, tk, nh, None);
                let mut mixed = vec![f32::NAN; tq * d];
                attention_mixed_reference(&q, tq, &k, &v, tk, nh, &mut mixed).unwrap();
                let mut bf16 = vec![f32::NAN; tq * d];
                attention_bf16_reference(&q, tq, &k, &v, tk, nh, &mut bf16).unwrap();
                let (e_mixed, e_bf16) = (max_abs_diff(&mixed, &want), max_abs_diff(&bf16, &want));
                eprintln!(
                    "gain {q_gain} {tq}×{tk} {nh}×{dh}: mixed {e_mixed:.2e} bf16 {e_bf16:.2e}"
                );
                assert!(e_mixed as f64 <= typical, "{tq}×{tk}, {nh}×{dh}: {e_mixed}");
                if q_gain > 10.0 {
                    assert!(
                        e_mixed < e_bf16,
                        "{tq}×{tk}, {nh}×{dh}: {e_mixed} ≥ {e_bf16}"
                    );
                }
            }
        }
    }

    #[test]
    fn falls_back_to_f32_without_bf16_simd() {
        let (tq, tk, nh, dh) = (70, 300, 3, 40);
        let d = nh * dh;
        let (q, k, v) = inputs(tq, tk, d, 3.0);
        for isa in [Isa::Scalar, Isa::Avx2] {
            let be = CpuBackend::with_isa(2, isa).unwrap();
            let mut want = vec![0.0; tq * d];
            be.attention(&q, tq, &k, &v, tk, nh, Mask::None, &mut want)
                .unwrap();
            let mut got = vec![f32::NAN; tq * d];
            be.attention_bf16(&q, tq, &k, &v, tk, nh, &mut got).unwrap();
            assert_eq!(got, want, "{isa:?}");
            let mut got = vec![f32::NAN; tq * d];
            be.attention_mixed(&q, tq, &k, &v, tk, nh, &mut got)
                .unwrap();
            assert_eq!(got, want, "{isa:?} mixed");
        }
    }

    #[test]
    fn attention_bf16_rejects_bad_shapes() {
        for isa in sotto_isa::available() {
            let be = CpuBackend::with_isa(1, isa).unwrap();
            let mut out = vec![0.0; 4];
            // 4 columns do not split into 3 heads.
            assert!(be
                .attention_bf16(&[0.0; 4], 1, &[0.0; 4], &[0.0; 4], 1, 3, &mut out)
                .is_err());
            // k has 2 keys, v 1.
            assert!(be
                .attention_bf16(&[0.0; 4], 1, &[0.0; 8], &[0.0; 4], 2, 2, &mut out)
                .is_err());
            assert!(be
                .attention_bf16(&[0.0; 4], 0, &[0.0; 4], &[0.0; 4], 1, 2, &mut out)
                .is_err());
            assert!(be
                .attention_bf16(&[0.0; 4], 1, &[0.0; 4], &[0.0; 4], 1, 2, &mut out[..3])
                .is_err());
            let mut out = vec![0.0; 4];
            assert!(attention_bf16_reference(&[0.0; 4], 1, &[], &[], 0, 2, &mut out).is_err());
            assert!(attention_mixed_reference(&[0.0; 4], 1, &[], &[], 0, 2, &mut out).is_err());
            // k has 2 keys, v 1.
            assert!(be
                .attention_mixed(&[0.0; 4], 1, &[0.0; 8], &[0.0; 4], 2, 2, &mut out)
                .is_err());
            assert!(be
                .attention_mixed(&[0.0; 4], 1, &[0.0; 4], &[0.0; 4], 1, 3, &mut out)
                .is_err());
        }
    }
}
