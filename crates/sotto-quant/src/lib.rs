//! ggml's legacy block-quantized formats, bit-compatible with whisper.cpp.
//!
//! Every format cuts a row into blocks of [`QuantType::BLOCK`] = 32 values, each stored as
//! an f16 scale (and for the `_1` types an f16 offset) plus packed integers:
//!
//! | type | bytes | layout | value |
//! |---|---|---|---|
//! | q4_0 | 18 | `d, qs[16]` | `(q - 8)·d` |
//! | q4_1 | 20 | `d, m, qs[16]` | `q·d + m` |
//! | q5_0 | 22 | `d, qh[4], qs[16]` | `(q - 16)·d` |
//! | q5_1 | 24 | `d, m, qh[4], qs[16]` | `q·d + m` |
//! | q8_0 | 34 | `d, qs[32]` | `q·d` |
//! | q8_1 | 36 | `d, s, qs[32]` | `q·d`, with `s = d·Σq` |
//!
//! Nibble `j` of `qs` (low half) is element `j`, the high half element `j + 16`; bit `j`
//! of the little-endian `qh` is the fifth bit of element `j`.
//!
//! [`quantize_row`] is ggml's `quantize_row_*_ref`, byte for byte (what whisper.cpp's
//! `whisper-quantize` writes). A matrix-vector product quantizes the activations once
//! with [`quantize_activations`] (into [`QuantType::activation_type`] blocks, as ggml's
//! `vec_dot_type`) and then calls [`vec_dot`] per weight row.
//!
//! For the decoder's few-row products, [`QuantTiles`] regroups the rows 16 at a time and
//! [`tiled_matmul`] computes all input rows ([`QuantActs`]) in one pass over them.
//!
//! Lengths are a contract, not input: every function panics when a length is not a whole
//! number of blocks or a buffer does not have exactly the size the type implies. The
//! checks run once per call (never per block), so they stay on in release builds, where
//! they also guard the SIMD kernels' unchecked loads.

mod gptq;
mod kquant;
#[cfg(target_arch = "aarch64")]
mod neon;
mod reference;
mod refine;
mod tiled;
#[cfg(target_arch = "aarch64")]
mod tiled_neon;
#[cfg(target_arch = "x86_64")]
mod tiled_x86;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_512;

pub use gptq::{GptqError, GptqFactor};
pub use kquant::{KQuant, QK_K};
pub use sotto_isa::Isa;
pub use tiled::{
    tiled_matmul, tiled_matmul_ref, tiled_matmul_split, tiled_matmul_variant, QuantActs,
    QuantTiles, GROUP_ROWS,
};

/// A ggml block-quantized type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum QuantType {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    /// Activations only (the `vec_dot_type` of q4_1 and q5_1); whisper.cpp files never hold it.
    Q8_1,
}

impl QuantType {
    /// Values per block, for every type.
    pub const BLOCK: usize = 32;

    /// The five weight types whisper.cpp's quantizer writes.
    pub const WEIGHTS: [QuantType; 5] = [
        QuantType::Q4_0,
        QuantType::Q4_1,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q8_0,
    ];

    /// Bytes of one block of 32 values.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantType::Q4_0 => 18,
            QuantType::Q4_1 => 20,
            QuantType::Q5_0 => 22,
            QuantType::Q5_1 => 24,
            QuantType::Q8_0 => 34,
            QuantType::Q8_1 => 36,
        }
    }

    /// Bytes of a row of `n` values. Panics unless `n` is a multiple of [`Self::BLOCK`].
    pub fn row_bytes(self, n: usize) -> usize {
        assert!(
            n.is_multiple_of(Self::BLOCK),
            "{} row of {n} values is not whole blocks of 32",
            self.name()
        );
        n / Self::BLOCK * self.block_bytes()
    }

    /// ggml's name (`"q4_0"`, …).
    pub fn name(self) -> &'static str {
        match self {
            QuantType::Q4_0 => "q4_0",
            QuantType::Q4_1 => "q4_1",
            QuantType::Q5_0 => "q5_0",
            QuantType::Q5_1 => "q5_1",
            QuantType::Q8_0 => "q8_0",
            QuantType::Q8_1 => "q8_1",
        }
    }

    /// Parses a name as [`Self::name`] writes it (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        let t = match s.trim().to_ascii_lowercase().as_str() {
            "q4_0" => QuantType::Q4_0,
            "q4_1" => QuantType::Q4_1,
            "q5_0" => QuantType::Q5_0,
            "q5_1" => QuantType::Q5_1,
            "q8_0" => QuantType::Q8_0,
            "q8_1" => QuantType::Q8_1,
            _ => return None,
        };
        Some(t)
    }

    /// The type activations are quantized to for [`vec_dot`] (ggml's `vec_dot_type`):
    /// q8_1 for the offset types q4_1/q5_1 (their dot needs `Σq` of the activations),
    /// q8_0 otherwise.
    pub fn activation_type(self) -> QuantType {
        match self {
            QuantType::Q4_1 | QuantType::Q5_1 | QuantType::Q8_1 => QuantType::Q8_1,
            _ => QuantType::Q8_0,
        }
    }

    /// ggml's tensor type id (`GGML_TYPE_Q4_0` = 2, …).
    pub fn ggml_type_id(self) -> i32 {
        match self {
            QuantType::Q4_0 => 2,
            QuantType::Q4_1 => 3,
            QuantType::Q5_0 => 6,
            QuantType::Q5_1 => 7,
            QuantType::Q8_0 => 8,
            QuantType::Q8_1 => 9,
        }
    }

    /// The inverse of [`Self::ggml_type_id`].
    pub fn from_ggml_type_id(id: i32) -> Option<Self> {
        [QuantType::Q8_1]
            .into_iter()
            .chain(Self::WEIGHTS)
            .find(|t| t.ggml_type_id() == id)
    }
}

impl std::fmt::Display for QuantType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn check_row(t: QuantType, n: usize, q: usize, what: &str) {
    let want = t.row_bytes(n);
    assert!(
        q == want,
        "{what}: {q} bytes for a {t} row of {n} values (expected {want})"
    );
}

/// Quantizes `x` (a whole number of blocks) into `out` (`t.row_bytes(x.len())` bytes),
/// exactly as ggml's `quantize_row_<t>_ref` does.
pub fn quantize_row(t: QuantType, x: &[f32], out: &mut [u8]) {
    check_row(t, x.len(), out.len(), "quantize_row");
    #[cfg(target_arch = "x86_64")]
    if t == QuantType::Q8_0 {
        // Bit-identical bytes, checked in the tests: the same Rust arithmetic compiled for
        // AVX-512 (its rounding loop vectorizes there), AVX2 intrinsics elsewhere. A
        // screened vocabulary quantizes ~53M values at load this way.
        if Isa::Avx512.is_supported() {
            // SAFETY: the CPU has AVX-512 F/BW/VL, AVX2, FMA and F16C (just checked).
            return unsafe { q8_0_avx512(x, out) };
        }
        if Isa::Avx2.is_supported() {
            // SAFETY: the CPU has AVX2, FMA and F16C (just checked).
            return unsafe { q8_0_avx2(x, out) };
        }
    }
    reference::quantize(t, x, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q8_0_avx512(x: &[f32], out: &mut [u8]) {
    q8_0_rows(x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_avx2(x: &[f32], out: &mut [u8]) {
    // SAFETY: AVX2 (this fn's features); x is whole blocks and out their bytes
    // (`quantize_row` checked the row).
    unsafe { x86::q8_0(x, out) }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn q8_0_rows(x: &[f32], out: &mut [u8]) {
    let bb = QuantType::Q8_0.block_bytes();
    for (xb, yb) in x
        .chunks_exact(QuantType::BLOCK)
        .zip(out.chunks_exact_mut(bb))
    {
        reference::q8_0(xb, yb);
    }
}

/// Quantizes `x` (a whole number of blocks) into `out` in `t`'s format, each block's scale
/// (and minimum) chosen to minimise its weighted squared error rather than by ggml's max
/// rule: same layout, so whisper.cpp reads it; lower error for the 4- and 5-bit types (q8_0
/// is as [`quantize_row`]).
pub fn quantize_row_refined(t: QuantType, x: &[f32], out: &mut [u8]) {
    check_row(t, x.len(), out.len(), "quantize_row_refined");
    for (xb, yb) in x
        .chunks_exact(QuantType::BLOCK)
        .zip(out.chunks_exact_mut(t.block_bytes()))
    {
        refine::quantize_block(t, xb, yb);
    }
}

/// Expands `q` (`t.row_bytes(out.len())` bytes) into `out`, as ggml's `dequantize_row_*`.
pub fn dequantize_row(t: QuantType, q: &[u8], out: &mut [f32]) {
    check_row(t, out.len(), q.len(), "dequantize_row");
    reference::dequantize(t, q, out);
}

/// Quantizes activations `x` into `t.activation_type()` blocks for [`vec_dot`]
/// (`out` is `t.activation_type().row_bytes(x.len())` bytes). Uses the reference
/// rounding, so the result does not depend on the ISA.
pub fn quantize_activations(t: QuantType, x: &[f32], out: &mut [u8]) {
    quantize_row(t.activation_type(), x, out);
}

fn check_dot(t: QuantType, n: usize, w: &[u8], act: &[u8]) {
    assert!(
        t != QuantType::Q8_1,
        "q8_1 is an activation type, not a weight type"
    );
    check_row(t, n, w.len(), "vec_dot weights");
    check_row(t.activation_type(), n, act.len(), "vec_dot activations");
}

/// Dot product of a weight row `w` (`n` values of type `t`) with activations `act`
/// (quantized by [`quantize_activations`]) on the `isa` path. A path this CPU cannot run
/// falls back to the best one below it, so any `Isa` is safe to pass.
///
/// SIMD paths sum in a different order than [`vec_dot_ref`]; results agree to f32
/// rounding, not bit for bit.
pub fn vec_dot(isa: Isa, t: QuantType, n: usize, w: &[u8], act: &[u8]) -> f32 {
    check_dot(t, n, w, act);
    let nb = n / QuantType::BLOCK;
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if Isa::Avx512.is_supported() => {
            x86_512::vec_dot(x86_512::has_vnni(), t, nb, w, act)
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Avx2 if Isa::Avx2.is_supported() => {
            // SAFETY: the CPU has AVX2/FMA/F16C (checked above) and check_dot sized both rows.
            unsafe { x86::vec_dot(t, nb, w, act) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => neon::vec_dot(t, nb, w, act),
        _ => reference::vec_dot(t, nb, w, act),
    }
}

/// Whether this CPU multiplies [`QuantTiles`] on SIMD kernels (x86-64; aarch64 with the
/// dot-product extension), so that decoders should regroup quantized weights into them.
/// Elsewhere [`tiled_matmul`] runs the scalar oracle, and row-wise [`vec_dot`] is faster.
pub fn tiles_have_kernels() -> bool {
    #[cfg(target_arch = "aarch64")]
    return neon::has_dotprod();
    #[cfg(not(target_arch = "aarch64"))]
    cfg!(target_arch = "x86_64")
}

/// Scalar dot product, summed in ggml's generic order (the reference for every path).
pub fn vec_dot_ref(t: QuantType, n: usize, w: &[u8], act: &[u8]) -> f32 {
    check_dot(t, n, w, act);
    reference::vec_dot(t, n / QuantType::BLOCK, w, act)
}

#[doc(hidden)]
/// Test hook: the AVX-512 kernel with VNNI on or off (`None` when the CPU lacks AVX-512,
/// or lacks VNNI and `vnni` is asked for).
pub fn vec_dot_avx512_variant(
    vnni: bool,
    t: QuantType,
    n: usize,
    w: &[u8],
    act: &[u8],
) -> Option<f32> {
    check_dot(t, n, w, act);
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx512.is_supported() && (!vnni || x86_512::has_vnni()) {
        return Some(x86_512::vec_dot(vnni, t, n / QuantType::BLOCK, w, act));
    }
    let _ = vnni;
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn wide_q8_0_rows_match_the_reference_bytes() {
        // Ties (x·127/amax exactly k + 0.5), values just off them, zeros, negatives.
        let mut x: Vec<f32> = (0usize..32 * 40)
            .map(|i| match (i % 32, i / 32 % 4) {
                (0, _) => 127.0 * (1 + i / 128) as f32,
                (j, 0) => j as f32 - 15.5,
                (j, 1) => f32::from_bits((j as f32 + 0.5).to_bits() + 1),
                (_, 2) => 0.0,
                (j, _) => -(((i * 2654435761) % 997) as f32) / 13.0 + j as f32,
            })
            .collect();
        // Blocks with NaN, ±inf, −0, subnormals (1/d overflows to inf), and huge values.
        let odd = [
            f32::NAN,
            f32::INFINITY,
            -0.0,
            1e-42,
            -3e-41,
            f32::MAX,
            -f32::MAX,
            1e30,
        ];
        for (b, &v) in odd.iter().enumerate() {
            let block: Vec<f32> = (0..32)
                .map(|j| match j % 4 {
                    0 => v,
                    1 => -v,
                    2 => v * (j as f32 / 31.0),
                    _ => [0.0, -0.0, 1e-44, 2.5][b % 4],
                })
                .collect();
            x.extend(block);
        }
        x.extend((0..32).map(|j| f32::from_bits(j + 1)));
        // Random bit patterns (every class of f32), and random values at random scales.
        let mut s = 0x9E37_79B9u32;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        };
        x.extend((0..32 * 500).map(|_| f32::from_bits(next())));
        x.extend((0..32 * 500).map(|i| {
            let v = next() as f32 / u32::MAX as f32 - 0.5;
            v * 2f32.powi(i / 32 % 80 - 40)
        }));
        let mut want = vec![0u8; QuantType::Q8_0.row_bytes(x.len())];
        reference::quantize(QuantType::Q8_0, &x, &mut want);
        let mut got = vec![0u8; want.len()];
        if Isa::Avx512.is_supported() {
            // SAFETY: AVX-512 F/BW/VL, AVX2, FMA and F16C checked.
            unsafe { q8_0_avx512(&x, &mut got) };
            assert_eq!(got, want, "avx512");
        }
        if Isa::Avx2.is_supported() {
            // SAFETY: AVX2, FMA and F16C checked.
            unsafe { q8_0_avx2(&x, &mut got) };
            assert_eq!(got, want, "avx2");
        }
        quantize_row(QuantType::Q8_0, &x, &mut got);
        assert_eq!(got, want, "dispatch");
    }

    #[test]
    fn names_sizes_and_activation_types() {
        for t in QuantType::WEIGHTS {
            assert_eq!(QuantType::parse(t.name()), Some(t));
            assert_eq!(t.row_bytes(64), 2 * t.block_bytes());
            assert_eq!(QuantType::from_ggml_type_id(t.ggml_type_id()), Some(t));
        }
        assert_eq!(QuantType::parse("Q5_1"), Some(QuantType::Q5_1));
        assert_eq!(QuantType::parse("q3_k"), None);
        assert_eq!(QuantType::from_ggml_type_id(1), None);
        assert_eq!(QuantType::Q4_0.activation_type(), QuantType::Q8_0);
        assert_eq!(QuantType::Q5_0.activation_type(), QuantType::Q8_0);
        assert_eq!(QuantType::Q8_0.activation_type(), QuantType::Q8_0);
        assert_eq!(QuantType::Q4_1.activation_type(), QuantType::Q8_1);
        assert_eq!(QuantType::Q5_1.activation_type(), QuantType::Q8_1);
    }

    #[test]
    #[should_panic(expected = "not whole blocks")]
    fn partial_blocks_panic() {
        QuantType::Q8_0.row_bytes(48);
    }

    #[test]
    #[should_panic(expected = "expected 36")]
    fn short_activation_buffer_panics() {
        let w = [0u8; 20];
        vec_dot(Isa::Scalar, QuantType::Q4_1, 32, &w, &[0u8; 34]);
    }
}
