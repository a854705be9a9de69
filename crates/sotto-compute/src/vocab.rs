//! The decoder's last product, the logits over the vocabulary (51 864 rows: half the bytes
//! a base decoder step reads), at half the bytes when a search needs only its best tokens.
//!
//! [`VocabWeights`] holds the text-token rows as two q8_0 planes: `hi`, each f16 row
//! quantized, and `lo`, what `hi` misses, quantized again. `w' = hi + lo` is within
//! 1/300 of a q8_0 step of the f16 value: closer than f16's own rounding for every weight
//! above 1/16 of its block's largest. The input is split the same way, `x̃ = x̂ + x̂₂` (its
//! q8_0 blocks and what they miss, in steps of 1/256 of the block's scale:
//! `sotto_quant::QuantActs::split_q8`), and the product is `w'·x̃`, summed as exact integer
//! block dots by the same VNNI kernels as q8_0 weights, the two parts as two rows; AVX2
//! takes each pair as one row of 16-bit values (`256·x̂ + x̂₂` in steps), half the work of
//! its byte rows. Rows from `n_text` on (Whisper's special and timestamp tokens, which the
//! timestamp rules sum over) stay f16.
//!
//! [`CpuBackend::vocab_logits`] with a [`VocabTop`] streams only `hi` and bounds what each
//! row misses by Cauchy–Schwarz, `|lo_t·x̃| ≤ ‖lo_t‖·‖x̃‖` (plus a margin for the f32
//! sums). Every row whose upper bound reaches the k-th best lower bound is recomputed with
//! `lo`: so the k best rows come out as the full product gives them, and every other row
//! keeps a value that ranks below those k, within its bound of the full product.

use std::cell::Cell;

use half::f16;
use sotto_quant::{QuantActs, QuantTiles, QuantType, GROUP_ROWS};

use crate::kernels::{self, WRows};
use crate::linear::SMALL_M;
use crate::{shape_err, CpuBackend, Linear, OutPtr, Result, Weight};

/// Margin for the f32 sums, relative to `(‖hi_t‖ + ‖lo_t‖)·‖x̃‖`: the kernels add a few
/// dozen exactly summed integer block dots times f32 scales, and the recomputation sums
/// n_in f32 products, each erring by far less than 1e-6 of `Σ|w'_i x̃_i|`.
const SUM_SLACK: f32 = 1e-5;
/// Candidate rows each thread's [`Recompute`] widens to f32 at a time (a multiple of the
/// product kernels' row groups, so a chunk's sums are those of one whole pass).
const RECOMPUTE_CHUNK: usize = 64;
/// Candidate indices each thread's [`Recompute`] holds from the start: a step recomputes a
/// few to a few dozen rows, a flat distribution some hundreds.
const KEEP_CANDS: usize = 2048;
/// Groups per local output block of the kernels: one block of a plane (~48 KiB at 384
/// inputs) stays in L2 while every input row's passes read it.
const LOCAL_GROUPS: usize = 8;

/// A vocabulary projection's weights (see the module docs): `n_out` rows of `n_in` values,
/// the first `n_text` as two q8_0 planes, the rest f16.
#[derive(Clone, Debug)]
pub struct VocabWeights {
    n_out: usize,
    n_in: usize,
    n_text: usize,
    /// Rows `0..n_text`, q8_0, grouped for the decoder's kernels: the screen.
    hi: QuantTiles,
    /// Rows `0..n_text`: q8_0 of each row minus its `hi`, times a power of two that keeps
    /// the block scales out of f16's subnormals.
    lo: QuantTiles,
    /// Per text row: the power of two that undoes `lo`'s.
    lo_scale: Vec<f32>,
    /// Per text row: the bound's coefficient, `‖lo_t‖ + SUM_SLACK·(‖hi_t‖ + ‖lo_t‖)`,
    /// rounded up (what the screen may miss is at most this times `‖x̃‖`).
    slack: Vec<f32>,
    /// Rows `n_text..n_out` as they were; None when there are none.
    tail: Option<Linear>,
}

impl VocabWeights {
    /// Bytes a screened step streams: the first q8_0 plane and the unscreened tail rows
    /// (the rows a step recomputes with both planes come on top, a few per step).
    pub fn screen_bytes(&self) -> usize {
        let plane = self.n_text * QuantType::Q8_0.row_bytes(self.n_in);
        plane + self.tail.as_ref().map_or(0, |t| t.stream_bytes())
    }
}

/// `‖v‖₂` of f32 values summed in f64, rounded up so that it bounds the true norm.
fn norm_up(v: &[f32]) -> f32 {
    // Eight partial sums, so the loop vectorizes.
    let mut acc = [0f64; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f64::from(x) * f64::from(x);
        }
    }
    for (a, &x) in acc.iter_mut().zip(chunks.remainder()) {
        *a += f64::from(x) * f64::from(x);
    }
    (acc.iter().sum::<f64>().sqrt() * (1.0 + 1e-6)) as f32
}

impl VocabWeights {
    /// Splits f16 rows (Shape: [n_out, n_in]), given as little-endian bytes at any
    /// alignment (a mapped model file's), into the planes without an f16 copy of them;
    /// `n_text ≤ n_out` rows are screened, and `n_in` must be a whole number of 32-value
    /// blocks.
    pub fn from_f16_bytes(rows: &[u8], n_out: usize, n_in: usize, n_text: usize) -> Result<Self> {
        let q8 = QuantType::Q8_0;
        if rows.len() != 2 * n_out * n_in
            || n_in == 0
            || !n_in.is_multiple_of(QuantType::BLOCK)
            || n_text > n_out
        {
            return Err(shape_err(
                "vocabulary weights",
                format!(
                    "{} f16 bytes for {n_out}×{n_in} rows, {n_text} screened \
                     (rows must be whole blocks of 32)",
                    rows.len()
                ),
            ));
        }
        let rb = q8.row_bytes(n_in);
        let isa = sotto_isa::isa();
        // Row r as f32, through an aligned f16 copy so the conversion is the SIMD one.
        let widen = |r: usize, h: &mut [f16], w: &mut [f32]| {
            let src = &rows[2 * r * n_in..2 * (r + 1) * n_in];
            for (d, c) in h.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_bits(u16::from_le_bytes([c[0], c[1]]));
            }
            kernels::f16_to_f32(isa, h, w);
        };
        // Both planes group by group, straight into their tiles: each row is widened
        // once, and no row-major plane is ever held.
        let scratch = || (vec![f16::ZERO; n_in], vec![0f32; n_in], vec![0f32; n_in]);
        let fill = |(h, w, back): &mut (Vec<f16>, Vec<f32>, Vec<f32>),
                    g,
                    his: &mut [u8],
                    los: &mut [u8]| {
            let mut found = [(1f32, 0f32); GROUP_ROWS];
            let rows = his.chunks_exact_mut(rb).zip(los.chunks_exact_mut(rb));
            for (l, (hq, lq)) in rows.enumerate() {
                widen(g * GROUP_ROWS + l, h, w);
                sotto_quant::quantize_row(q8, w, hq);
                sotto_quant::dequantize_row(q8, hq, back);
                let hi_norm = norm_up(back);
                w.iter_mut().zip(back.iter()).for_each(|(v, h)| *v -= h);
                // A row of small weights leaves remainders whose block scales fall below
                // f16's normal range (2^-14): scaled to a largest value near 1.
                let amax = w.iter().fold(0f32, |a, v| a.max(v.abs()));
                let e = if amax > 0.0 && amax.is_finite() {
                    amax.log2().ceil().clamp(-100.0, 100.0) as i32
                } else {
                    0
                };
                let undo = 2f32.powi(e);
                w.iter_mut().for_each(|v| *v *= 2f32.powi(-e));
                sotto_quant::quantize_row(q8, w, lq);
                sotto_quant::dequantize_row(q8, lq, back);
                // Scaling by a power of two is exact, norms included.
                let lo_norm = norm_up(back) * undo;
                let c = lo_norm + SUM_SLACK * (hi_norm + lo_norm);
                found[l] = (undo, c * (1.0 + 1e-6));
            }
            found
        };
        let (hi, lo, found) = QuantTiles::pair_from_groups(q8, n_text, n_in, scratch, fill);
        let (lo_scale, slack): (Vec<f32>, Vec<f32>) =
            found.into_iter().flatten().take(n_text).unzip();
        let tail = if n_out > n_text {
            let n = n_out - n_text;
            let tail = rows[2 * n_text * n_in..]
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]))
                .collect();
            let w = Weight::F16(tail).for_decoding(n, n_in)?;
            Some(Linear::new(w, None, n, n_in)?)
        } else {
            None
        };
        Ok(Self {
            n_out,
            n_in,
            n_text,
            hi,
            lo,
            lo_scale,
            slack,
            tail,
        })
    }

    pub fn n_out(&self) -> usize {
        self.n_out
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }

    /// Rows below this are screened (the text tokens).
    pub fn n_text(&self) -> usize {
        self.n_text
    }

    /// Text row `r` (`hi + lo`) as f32. Panics unless `r < n_text` and both slices hold
    /// `n_in` values.
    fn text_row(&self, r: usize, out: &mut [f32], scratch: &mut [f32]) {
        self.hi.row_f32(r, out);
        self.lo.row_f32(r, scratch);
        let undo = self.lo_scale[r];
        out.iter_mut()
            .zip(scratch.iter())
            .for_each(|(v, l)| *v += l * undo);
    }

    /// Copies logical (row-major) elements `start..start + out.len()` into `out` as f32:
    /// `w'` for text rows, the f16 values past them. Panics when the range passes the end.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        let (k, end) = (self.n_in, start + out.len());
        assert!(
            end <= self.n_out * k,
            "read_f32: {start}..{end} past the end"
        );
        // Whole rows (the token embedding's lookups, every decoder step) straight into `out`,
        // with a stack scratch: the decode loop allocates nothing.
        if start.is_multiple_of(k) && out.len().is_multiple_of(k) && k <= 2048 {
            let mut scratch = [0f32; 2048];
            for (r, dst) in (start / k..).zip(out.chunks_exact_mut(k)) {
                match &self.tail {
                    Some(tail) if r >= self.n_text => {
                        tail.weight.read_f32((r - self.n_text) * k, dst)
                    }
                    _ => self.text_row(r, dst, &mut scratch[..k]),
                }
            }
            return;
        }
        let (mut row, mut lo) = (vec![0f32; k], vec![0f32; k]);
        let mut at = start;
        while at < end {
            let (r, p) = (at / k, at % k);
            let take = (k - p).min(end - at);
            let dst = &mut out[at - start..at - start + take];
            if r < self.n_text {
                self.text_row(r, &mut row, &mut lo);
                dst.copy_from_slice(&row[p..p + take]);
            } else {
                let tail = self.tail.as_ref().expect("rows past n_text are the tail");
                tail.weight.read_f32((r - self.n_text) * k + p, dst);
            }
            at += take;
        }
    }
}

/// What a screened product must give exactly: the `k` best rows below `text_end`, not
/// counting the `excluded` ones (rows the caller masks anyway). Every row from `text_end`
/// on is always exact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VocabTop {
    k: usize,
    text_end: usize,
    /// Bit r set: row r is excluded (rows past its end are not).
    excluded: Vec<u64>,
}

impl VocabTop {
    /// `excluded` ids at or past `text_end` are ignored (those rows are exact anyway).
    pub fn new(k: usize, text_end: usize, excluded: &[u32]) -> Self {
        let kept = || {
            excluded
                .iter()
                .map(|&id| id as usize)
                .filter(|&id| id < text_end)
        };
        // Sized by the ids, not by text_end (which a caller may pass as large as it likes).
        let mut bits = vec![0u64; kept().max().map_or(0, |m| m / 64 + 1)];
        for id in kept() {
            bits[id / 64] |= 1 << (id % 64);
        }
        VocabTop {
            k,
            text_end,
            excluded: bits,
        }
    }

    pub fn k(&self) -> usize {
        self.k
    }
}

thread_local! {
    /// The calling thread's split activations (see [`CpuBackend::vocab_logits`]).
    static SPLIT: Cell<QuantActs> = const { Cell::new(QuantActs::new()) };
    /// Each thread's buffers for finishing a screened row (see [`Recompute`]).
    static RECOMPUTE: Cell<Recompute> = Cell::new(Recompute::default());
    /// Each thread's output block of both planes when a product has more than
    /// [`SMALL_M`] rows (fewer use the stack).
    static BLOCKS: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// Sizes this thread's [`SPLIT`] (each row and its remainder: twice the rows) and
/// [`RECOMPUTE`] for `shapes`.
pub(crate) fn reserve_thread(shapes: &crate::DecodeShapes) {
    let mut acts = SPLIT.take();
    acts.reserve(2 * shapes.rows, shapes.d);
    SPLIT.set(acts);
    let mut r = RECOMPUTE.take();
    r.reserve(shapes.d);
    RECOMPUTE.set(r);
    if shapes.rows > SMALL_M {
        let mut b = BLOCKS.take();
        b.reserve((2 * LOCAL_GROUPS * GROUP_ROWS * 2 * shapes.rows).saturating_sub(b.len()));
        BLOCKS.set(b);
    }
}

/// Buffers for finishing one screened row, kept per thread so a decoder step allocates
/// nothing.
#[derive(Default)]
struct Recompute {
    /// The threshold's running best, then the recomputed values.
    lower: Vec<f32>,
    /// Rows to recompute.
    cands: Vec<u32>,
    /// Those rows as f32. Shape: [cands, k]
    rows: Vec<f32>,
    scratch: Vec<f32>,
}

impl Recompute {
    /// Room for [`KEEP_CANDS`] candidates and a [`RECOMPUTE_CHUNK`] of rows of `k` values,
    /// so the buffers do not grow during a decode (only a step with more candidates than
    /// that grows `cands`).
    fn reserve(&mut self, k: usize) {
        let grow = |v: &mut Vec<f32>, n: usize| v.reserve(n.saturating_sub(v.len()));
        grow(&mut self.lower, RECOMPUTE_CHUNK);
        grow(&mut self.rows, RECOMPUTE_CHUNK * k);
        grow(&mut self.scratch, k);
        self.cands
            .reserve(KEEP_CANDS.saturating_sub(self.cands.len()));
    }

    /// Recomputes in full the text rows of `row` (the screened values of input `x̃`) that
    /// `top` needs or that might rank with them.
    fn recompute(
        &mut self,
        isa: crate::Isa,
        v: &VocabWeights,
        top: &VocabTop,
        row: &mut [f32],
        xt: &[f32],
    ) {
        let k = v.n_in;
        self.reserve(k);
        select(
            isa,
            v,
            top,
            row,
            norm_up(xt),
            &mut self.lower,
            &mut self.cands,
        );
        if self.cands.is_empty() {
            return;
        }
        self.scratch.resize(k, 0.0);
        for chunk in self.cands.chunks(RECOMPUTE_CHUNK) {
            self.rows.resize(chunk.len() * k, 0.0);
            for (c, dst) in chunk.iter().zip(self.rows.chunks_exact_mut(k)) {
                v.text_row(*c as usize, dst, &mut self.scratch);
            }
            self.lower.resize(chunk.len(), 0.0);
            kernels::matmul_t(isa, xt, 1, k, WRows::F32(&self.rows), &mut self.lower);
            for (&c, &val) in chunk.iter().zip(&self.lower) {
                row[c as usize] = val;
            }
        }
    }
}

/// The input rows split for the planes' kernels ([`QuantActs::split_q8`]): `acts` gets 2m
/// rows, 2i the q8_0 codes of `x_i` and 2i + 1 what they miss in steps of 1/256 of its
/// scale; `buf` ends as their sum `x̃` (Shape: [m, k]).
fn split(x: &[f32], m: usize, k: usize, acts: &mut QuantActs, buf: &mut Vec<f32>) {
    buf.clear();
    buf.resize((m + 1) * k, 0.0);
    let (tilde, scratch) = buf.split_at_mut(m * k);
    acts.split_q8(x, m, k);
    for (i, t) in tilde.chunks_exact_mut(k).enumerate() {
        acts.dequantize(2 * i, t);
        acts.dequantize(2 * i + 1, scratch);
        t.iter_mut().zip(scratch.iter()).for_each(|(a, b)| *a += b);
    }
    buf.truncate(m * k);
}

impl CpuBackend {
    /// `logits = x̃ · W'ᵀ` for the vocabulary projection `w` (see the module docs). With
    /// `top` and [`VocabWeights`], only the rows `top` asks for, and those that might rank
    /// with them, are computed in full; the others keep their screened values. Without,
    /// it is [`CpuBackend::linear`].
    ///
    /// `x` Shape: [m, n_in]; `logits` Shape: [m, n_out].
    pub fn vocab_logits(
        &self,
        x: &[f32],
        m: usize,
        w: &Linear,
        top: Option<&VocabTop>,
        logits: &mut [f32],
    ) -> Result<()> {
        let (Weight::Vocab(v), Some(top)) = (&w.weight, top) else {
            return self.linear(x, m, w, logits);
        };
        if x.len() != m * v.n_in || logits.len() != m * v.n_out || w.bias.is_some() {
            return Err(shape_err(
                "vocab_logits",
                format!(
                    "{} inputs and {} logits for {m} rows of [{}, {}]",
                    x.len(),
                    logits.len(),
                    v.n_out,
                    v.n_in
                ),
            ));
        }
        self.observe(&[w], x, m);
        if m == 0 {
            return Ok(());
        }
        let k = v.n_in;
        let mut acts = SPLIT.with(Cell::take);
        let mut tilde = self.scratch_f32.take_dirty();
        split(x, m, k, &mut acts, &mut tilde);
        self.planes(v, &acts, m, false, logits);
        SPLIT.with(|c| c.set(acts));
        self.tail(v, x, m, logits)?;
        let (isa, n) = (self.isa, v.n_out);
        let finish = |(row, xi): (&mut [f32], &[f32])| {
            RECOMPUTE.with(|cell| {
                let mut s = cell.take();
                s.recompute(isa, v, top, &mut row[..v.n_text], xi);
                cell.set(s);
            })
        };
        if m == 1 {
            finish((logits, &tilde));
        } else {
            self.par_chunks_mut(logits, n, |i, row| {
                finish((row, &tilde[i * k..(i + 1) * k]))
            });
        }
        self.scratch_f32.give(tilde);
        Ok(())
    }

    /// [`CpuBackend::linear`] for [`VocabWeights`]: every row in full, both planes against
    /// all input rows in one pass over each, then the f16 tail.
    pub(crate) fn vocab_exact(&self, x: &[f32], m: usize, v: &VocabWeights, out: &mut [f32]) {
        let k = v.n_in;
        let mut acts = SPLIT.with(Cell::take);
        let mut tilde = self.scratch_f32.take_dirty();
        split(&x[..m * k], m, k, &mut acts, &mut tilde);
        // The planes write each row's text columns; the tail fills the rest below.
        self.planes(v, &acts, m, true, out);
        SPLIT.with(|c| c.set(acts));
        self.scratch_f32.give(tilde);
        self.tail(v, x, m, out)
            .expect("the tail's shapes follow from the checked ones");
    }

    /// `logits[i][r] = hi_r · x̃_i` (and `+ lo_r · x̃_i` when `both`) for every text row r,
    /// `acts` holding the 2m split rows: contiguous runs of groups across threads, each
    /// block of groups read from memory once for all m rows (the kernels' passes over the
    /// rows find it in cache).
    fn planes(&self, v: &VocabWeights, acts: &QuantActs, m: usize, both: bool, logits: &mut [f32]) {
        let (n, isa, n_groups) = (v.n_out, self.isa, v.hi.groups());
        let dst = OutPtr(logits.as_mut_ptr());
        let run = |g0: usize, g1: usize| {
            const SMALL: usize = LOCAL_GROUPS * GROUP_ROWS * 2 * SMALL_M;
            let (mut hi_s, mut lo_s) = ([0.0f32; SMALL], [0.0f32; SMALL]);
            let mut heap = Vec::new();
            let len = LOCAL_GROUPS * GROUP_ROWS * 2 * m;
            let (hi, lo) = if m <= SMALL_M {
                (&mut hi_s[..], &mut lo_s[..])
            } else {
                heap = BLOCKS.take();
                heap.resize(2 * len, 0.0);
                heap.split_at_mut(len)
            };
            for b0 in (g0..g1).step_by(LOCAL_GROUPS) {
                let b1 = (b0 + LOCAL_GROUPS).min(g1);
                let (r0, r1) = (b0 * GROUP_ROWS, (b1 * GROUP_ROWS).min(v.n_text));
                let ldb = (b1 - b0) * GROUP_ROWS;
                let hb = &mut hi[..ldb * 2 * m];
                let lb = &mut lo[..ldb * 2 * m];
                let whole = plane(isa, &v.hi, b0..b1, acts, hb, ldb);
                if both {
                    plane(isa, &v.lo, b0..b1, acts, lb, ldb);
                }
                for i in 0..m {
                    // SAFETY: i < m and r0..r1 lies in 0..n_text ⊆ 0..n, so the run lies in
                    // `logits` ([m, n]); tasks cover disjoint groups, hence disjoint runs.
                    let out =
                        unsafe { std::slice::from_raw_parts_mut(dst.at(i * n + r0), r1 - r0) };
                    out.copy_from_slice(&pair(hb, i, ldb, whole)[..r1 - r0]);
                    if both {
                        out.iter_mut()
                            .zip(pair(lb, i, ldb, whole))
                            .zip(&v.lo_scale[r0..r1])
                            .for_each(|((o, x), s)| *o += x * s);
                    }
                }
            }
            if m > SMALL_M {
                BLOCKS.set(heap);
            }
        };
        self.in_runs(n_groups, run);
    }

    /// The f16 rows past the text ones into `logits[i][n_text..]`.
    fn tail(&self, v: &VocabWeights, x: &[f32], m: usize, logits: &mut [f32]) -> Result<()> {
        let Some(tail) = &v.tail else {
            return Ok(());
        };
        let (n, nt) = (v.n_out, v.n_out - v.n_text);
        let mut out = self.scratch_f32.take_dirty();
        out.resize(m * nt, 0.0);
        self.linear_act(x, m, tail, &mut out, false)?;
        for (dst, src) in logits.chunks_exact_mut(n).zip(out.chunks_exact(nt)) {
            dst[v.n_text..].copy_from_slice(src);
        }
        self.scratch_f32.give(out);
        Ok(())
    }
}

/// One plane's product with the split rows `acts` over `groups` into `buf` ([2m, ldb]):
/// true when each input row's product is whole in row i (a kernel that takes each pair as
/// one row), false when rows 2i and 2i + 1 hold the pair's two parts.
fn plane(
    isa: crate::Isa,
    w: &QuantTiles,
    groups: std::ops::Range<usize>,
    acts: &QuantActs,
    buf: &mut [f32],
    ldb: usize,
) -> bool {
    if sotto_quant::tiled_matmul_split(isa, w, groups.clone(), acts, buf, ldb) {
        return true;
    }
    sotto_quant::tiled_matmul(isa, w, groups, acts, buf, ldb);
    false
}

/// Input row i's product from [`plane`]'s `buf` (one row of `ldb`, summed when in parts;
/// the parts' sum is written over row 2i).
fn pair(buf: &mut [f32], i: usize, ldb: usize, whole: bool) -> &[f32] {
    if whole {
        return &buf[i * ldb..(i + 1) * ldb];
    }
    let (a, b) = buf[2 * i * ldb..(2 * i + 2) * ldb].split_at_mut(ldb);
    a.iter_mut().zip(b.iter()).for_each(|(x, y)| *x += y);
    a
}

/// The text rows of one input row that must be computed in full, into `cands`: those
/// below `top.text_end` whose upper bound reaches the k-th best lower bound among the rows
/// not excluded, and every screened row at or past `top.text_end`. `row` holds the
/// screened values; `xn` is `‖x̃‖`.
fn select(
    isa: crate::Isa,
    v: &VocabWeights,
    top: &VocabTop,
    row: &[f32],
    xn: f32,
    best: &mut Vec<f32>,
    cands: &mut Vec<u32>,
) {
    let end = top.text_end.min(v.n_text);
    cands.clear();
    let (s, c) = (&row[..end], &v.slack[..end]);
    let tau = kernels::screen_floor(isa, s, c, xn, top.k, &top.excluded, best);
    kernels::screen_reach(isa, s, c, xn, tau, cands);
    cands.extend(end as u32..v.n_text as u32);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rand_vec;

    /// Where this CPU has no tile kernels, vocabularies are not screened: nothing to test.
    fn unscreened() -> bool {
        let no = !sotto_quant::tiles_have_kernels();
        if no {
            eprintln!("skipped: no QuantTiles kernels on this CPU, so no screened vocabulary");
        }
        no
    }

    /// Rows like a token embedding (small values, a few large per row) and inputs like a
    /// final layer norm's output (unit scale, one dimension a hundred times larger).
    fn case(n_out: usize, k: usize, m: usize, seed: u64) -> (Vec<f16>, Vec<f32>) {
        let rows = rand_vec(n_out * k, seed)
            .iter()
            .enumerate()
            .map(|(i, &v)| f16::from_f32(if i % 97 == 0 { 4.0 * v } else { 0.1 * v }))
            .collect();
        let mut x = rand_vec(m * k, seed + 1);
        for xi in x.chunks_exact_mut(k) {
            xi.iter_mut().for_each(|v| *v *= 3.0);
            xi[k / 3] = 140.0;
        }
        (rows, x)
    }

    fn bytes(rows: &[f16]) -> Vec<u8> {
        rows.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn vocab(rows: &[f16], n_out: usize, k: usize, n_text: usize) -> Linear {
        let w = Weight::vocab_from_f16_bytes(&bytes(rows), n_out, k, n_text)
            .unwrap()
            .unwrap();
        assert!(matches!(w, Weight::Vocab(_)));
        Linear::new(w, None, n_out, k).unwrap()
    }

    fn planes(w: &Linear) -> &VocabWeights {
        match &w.weight {
            Weight::Vocab(v) => v,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_planes_stay_within_a_small_step_of_the_f16_rows() {
        if unscreened() {
            return;
        }
        let (n_out, k, n_text) = (70, 96, 50);
        let (rows, _) = case(n_out, k, 1, 3);
        let w = vocab(&rows, n_out, k, n_text);
        let mut got = vec![0f32; n_out * k];
        w.weight.read_f32(0, &mut got);
        for (r, (g, f)) in got.chunks_exact(k).zip(rows.chunks_exact(k)).enumerate() {
            for (gb, fb) in g.chunks_exact(32).zip(f.chunks_exact(32)) {
                let amax = fb.iter().map(|v| v.to_f32().abs()).fold(0.0, f32::max);
                for (a, b) in gb.iter().zip(fb) {
                    let err = (a - b.to_f32()).abs();
                    if r < n_text {
                        assert!(
                            err <= amax / 127.0 / 300.0,
                            "row {r}: {a} vs {b}, amax {amax}"
                        );
                    } else {
                        assert_eq!(*a, b.to_f32(), "tail row {r}");
                    }
                }
            }
        }
        // Whole rows (the lookup path; across the text/tail boundary too) and a range starting
        // and ending inside rows read the same values.
        for r in [7, n_text - 1] {
            let mut rows2 = vec![0f32; 2 * k];
            w.weight.read_f32(r * k, &mut rows2);
            assert_eq!(rows2, got[r * k..(r + 2) * k], "rows {r}..{}", r + 2);
        }
        let mut part = vec![0f32; 3 * k];
        w.weight.read_f32(n_text * k - k - 5, &mut part);
        assert_eq!(part, got[n_text * k - k - 5..n_text * k + 2 * k - 5]);
    }

    /// `x̃` of each input row, and its distance to `x` (what the split misses).
    fn tilde(x: &[f32], m: usize, k: usize) -> Vec<f32> {
        let (mut acts, mut t) = (QuantActs::new(), Vec::new());
        split(x, m, k, &mut acts, &mut t);
        for (a, b) in x.chunks_exact(32).zip(t.chunks_exact(32)) {
            let amax = a.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (u, v) in a.iter().zip(b) {
                // Within 1/256 of a q8_0 step (QuantActs::split_q8).
                assert!(
                    (u - v).abs() <= amax / 127.0 / 256.0 * 1.001,
                    "split {u} → {v}"
                );
            }
        }
        t
    }

    fn split_acts(x: &[f32], m: usize, k: usize) -> QuantActs {
        let (mut acts, mut t) = (QuantActs::new(), Vec::new());
        split(x, m, k, &mut acts, &mut t);
        acts
    }

    #[test]
    fn the_exact_product_is_the_planes_times_the_split_input_on_every_path() {
        if unscreened() {
            return;
        }
        let (n_out, k, n_text) = (600, 64, 520);
        for m in [1, 3, 9] {
            let (rows, x) = case(n_out, k, m, 5 + m as u64);
            let xt = tilde(&x, m, k);
            let w = vocab(&rows, n_out, k, n_text);
            let mut wf = vec![0f32; n_out * k];
            w.weight.read_f32(0, &mut wf);
            for isa in sotto_isa::available() {
                let be = CpuBackend::with_isa(2, isa).unwrap();
                let mut got = vec![f32::NAN; m * n_out];
                be.linear(&x, m, &w, &mut got).unwrap();
                for i in 0..m {
                    for r in 0..n_out {
                        // Text rows meet x̃, the f16 tail x itself.
                        let xs = if r < n_text { &xt } else { &x };
                        let (xi, wr) = (&xs[i * k..(i + 1) * k], &wf[r * k..(r + 1) * k]);
                        let want: f64 = xi.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum();
                        let mag: f64 = xi.iter().zip(wr).map(|(&a, &b)| (a * b).abs() as f64).sum();
                        let g = got[i * n_out + r] as f64;
                        assert!(
                            (g - want).abs() <= 1e-5 * mag + 1e-6,
                            "{} m={m} row {r} input {i}: {g} vs {want}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_screened_product_gives_the_k_best_rows_exactly_and_bounds_the_rest() {
        if unscreened() {
            return;
        }
        let (n_out, k, n_text) = (3000, 128, 2900);
        for (isa, (m, top_k, text_end, seed)) in
            sotto_isa::available().into_iter().flat_map(|isa| {
                [
                    (1, 1, 2900, 1),
                    (2, 12, 2900, 2),
                    (5, 10, 2850, 3),
                    (13, 10, 2850, 4),
                ]
                .map(|c| (isa, c))
            })
        {
            let be = CpuBackend::with_isa(2, isa).unwrap();
            let (rows, x) = case(n_out, k, m, seed);
            let xt = tilde(&x, m, k);
            let w = vocab(&rows, n_out, k, n_text);
            let v = planes(&w);
            let mut exact = vec![0f32; m * n_out];
            be.linear(&x, m, &w, &mut exact).unwrap();
            // Exclude the best row of each input: the k after it must still be exact.
            let excluded: Vec<u32> = exact
                .chunks_exact(n_out)
                .map(|e| {
                    (0..text_end)
                        .max_by(|&a, &b| e[a].total_cmp(&e[b]))
                        .unwrap() as u32
                })
                .collect();
            let top = VocabTop::new(top_k, text_end, &excluded);
            let mut got = vec![f32::NAN; m * n_out];
            be.vocab_logits(&x, m, &w, Some(&top), &mut got).unwrap();
            for i in 0..m {
                let (e, g) = (&exact[i * n_out..][..n_out], &got[i * n_out..][..n_out]);
                let close = |r: usize| (g[r] - e[r]).abs() <= 1e-5 * e[r].abs().max(1.0);
                // Everything from text_end on, and the k best of the rest.
                assert!(
                    (text_end..n_out).all(close),
                    "m={m} input {i}: special rows"
                );
                let mut order: Vec<usize> = (0..text_end)
                    .filter(|r| !excluded.contains(&(*r as u32)))
                    .collect();
                order.sort_by(|&a, &b| e[b].total_cmp(&e[a]));
                for &r in &order[..top_k] {
                    assert!(
                        close(r),
                        "m={m} input {i}: top row {r}: {} vs {}",
                        g[r],
                        e[r]
                    );
                }
                // Every other row within its bound, and ranked below the k best.
                let kth = e[order[top_k - 1]];
                let xn = norm_up(&xt[i * k..(i + 1) * k]);
                for &r in &order[top_k..] {
                    assert!(
                        (g[r] - e[r]).abs() <= v.slack[r] * xn,
                        "m={m} input {i} row {r}"
                    );
                    assert!(g[r] <= kth + 1e-5 * kth.abs(), "m={m} input {i} row {r}");
                }
                // The screen spared most rows the second plane.
                let (mut best, mut cands) = (Vec::new(), Vec::new());
                let mut screened = vec![0f32; m * n_out];
                be.planes(v, &split_acts(&x, m, k), m, false, &mut screened);
                let row = &screened[i * n_out..i * n_out + n_text];
                select(isa, v, &top, row, xn, &mut best, &mut cands);
                let n_c = cands.len();
                assert!(n_c >= top_k && n_c < text_end / 10, "{n_c} rows recomputed");
            }
        }
    }

    #[test]
    fn the_screen_threshold_and_reach_agree_on_every_path() {
        if unscreened() {
            return;
        }
        let n = 1000;
        let s: Vec<f32> = (0..n)
            .map(|i| match i {
                5 => f32::NAN,
                _ => ((i * 7919) % 1000) as f32,
            })
            .collect();
        let c: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        let xn = 0.5;
        // The row with the best lower bound is excluded.
        let best = (0..n).max_by(|&a, &b| (s[a] - c[a] * xn).total_cmp(&(s[b] - c[b] * xn)));
        let best = best.unwrap();
        let mut excluded = vec![0u64; n.div_ceil(64)];
        excluded[best / 64] |= 1 << (best % 64);
        let mut lbs: Vec<f32> = (0..n)
            .filter(|&r| r != best && !s[r].is_nan())
            .map(|r| s[r] - c[r] * xn)
            .collect();
        lbs.sort_by(|a, b| b.total_cmp(a));
        let mut best = vec![9.0];
        for isa in sotto_isa::available() {
            for k in [1, 3, 12] {
                let tau = kernels::screen_floor(isa, &s, &c, xn, k, &excluded, &mut best);
                assert_eq!(tau, lbs[k - 1], "{} k={k}", isa.name());
                let mut out = Vec::new();
                kernels::screen_reach(isa, &s, &c, xn, tau, &mut out);
                let want: Vec<u32> = (0..n)
                    .filter(|&r| {
                        (s[r] + c[r] * xn).partial_cmp(&tau) != Some(std::cmp::Ordering::Less)
                    })
                    .map(|r| r as u32)
                    .collect();
                assert_eq!(out, want, "{} k={k}", isa.name());
                assert!(out.contains(&5), "NaN rows reach");
            }
            assert_eq!(
                kernels::screen_floor(isa, &s, &c, xn, 0, &[], &mut best),
                f32::INFINITY
            );
            let few = kernels::screen_floor(isa, &s[..3], &c[..3], xn, 5, &[], &mut best);
            assert_eq!(few, f32::NEG_INFINITY);
        }
    }

    #[test]
    fn a_top_request_is_sized_by_its_exclusions() {
        let top = VocabTop::new(3, usize::MAX, &[5, 70, 70]);
        assert_eq!(top.excluded, vec![1 << 5, 1 << 6]);
        let top = VocabTop::new(3, 60, &[5, 70]);
        assert_eq!(top.excluded, vec![1 << 5]);
        assert!(VocabTop::new(1, 100, &[]).excluded.is_empty());
    }

    #[test]
    fn bad_shapes_are_errors_and_odd_widths_keep_f16_tiles() {
        assert!(VocabWeights::from_f16_bytes(&[0; 128], 2, 32, 3).is_err());
        assert!(VocabWeights::from_f16_bytes(&[0; 120], 2, 30, 1).is_err());
        // Rows that are not whole blocks are left to the caller's f16 tiles.
        assert!(Weight::vocab_from_f16_bytes(&[0; 120], 2, 30, 1).is_none());
        if unscreened() {
            return;
        }
        let (rows, x) = case(40, 32, 1, 9);
        let w = vocab(&rows, 40, 32, 40);
        let be = CpuBackend::new(1).unwrap();
        let top = VocabTop::new(1, 40, &[]);
        let mut out = vec![0f32; 39];
        assert!(be.vocab_logits(&x, 1, &w, Some(&top), &mut out).is_err());
    }
}
