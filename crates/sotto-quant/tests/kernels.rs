//! Every ISA path against the scalar reference, and ggml's own accuracy thresholds
//! (`tests/test-quantize-fns.cpp`).

mod common;

use common::element_bound;
use sotto_quant::{
    dequantize_row, quantize_activations, quantize_row, vec_dot, vec_dot_avx512_variant,
    vec_dot_ref, Isa, QuantType,
};

/// Deterministic values in [-scale, scale) (xorshift32).
fn data(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            ((s as f64 / u32::MAX as f64) * 2.0 - 1.0) as f32 * scale
        })
        .collect()
}

fn quantized(t: QuantType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.row_bytes(x.len())];
    quantize_row(t, x, &mut q);
    q
}

fn activations(t: QuantType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.activation_type().row_bytes(x.len())];
    quantize_activations(t, x, &mut q);
    q
}

fn dequantized(t: QuantType, q: &[u8], n: usize) -> Vec<f32> {
    let mut y = vec![0.0; n];
    dequantize_row(t, q, &mut y);
    y
}

/// Σ over blocks of |block term| from the dequantized values: the scale of the rounding
/// error a different summation order can make.
fn magnitude(t: QuantType, w: &[u8], a: &[u8], n: usize) -> f32 {
    let x = dequantized(t, w, n);
    let y = dequantized(t.activation_type(), a, n);
    x.iter().zip(&y).map(|(p, q)| (p * q).abs()).sum()
}

/// Weight rows with awkward content: varied scales, a zero block, a constant block and
/// sign patterns that hit q4_0/q5_0's clamp.
fn weight_row(n: usize, seed: u32) -> Vec<f32> {
    let mut x = data(n, seed, 1.0);
    for (b, block) in x.chunks_mut(32).enumerate() {
        let scale = [1.0, 1e-3, 40.0, 0.25][b % 4];
        block.iter_mut().for_each(|v| *v *= scale);
        match b % 7 {
            3 => block.fill(0.0),
            5 => block.fill(-0.75),
            6 => block[b % 32] = -3.0 * scale,
            _ => {}
        }
    }
    x
}

#[test]
fn every_isa_matches_the_reference_at_every_length() {
    let isas = sotto_isa::available();
    eprintln!("paths: {isas:?}");
    for t in QuantType::WEIGHTS {
        for n in (32..=4096).step_by(32) {
            let w = quantized(t, &weight_row(n, n as u32));
            let a = activations(t, &data(n, 7 + n as u32, 3.0));
            let want = vec_dot_ref(t, n, &w, &a);
            let tol = 1e-5 * magnitude(t, &w, &a, n) + 1e-6;
            let mut got: Vec<(String, f32)> = isas
                .iter()
                .map(|&isa| (isa.name().to_string(), vec_dot(isa, t, n, &w, &a)))
                .collect();
            for vnni in [false, true] {
                if let Some(v) = vec_dot_avx512_variant(vnni, t, n, &w, &a) {
                    got.push((format!("avx512 vnni={vnni}"), v));
                }
            }
            for (path, v) in got {
                assert!(
                    (v - want).abs() <= tol,
                    "{t} n={n} {path}: {v} vs reference {want} (tolerance {tol})"
                );
            }
        }
    }
}

#[test]
fn scalar_path_is_the_reference_bit_for_bit() {
    for t in QuantType::WEIGHTS {
        let n = 320;
        let w = quantized(t, &weight_row(n, 3));
        let a = activations(t, &data(n, 4, 1.0));
        let (p, q) = (
            vec_dot(Isa::Scalar, t, n, &w, &a),
            vec_dot_ref(t, n, &w, &a),
        );
        assert_eq!(p.to_bits(), q.to_bits(), "{t}");
    }
}

/// ggml's `generate_data`: `0.1 + 2·cos(i + offset)`.
fn ggml_data(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1 + 2.0 * (i as f32 + offset).cos() as f64) as f32)
        .collect()
}

/// test-quantize-fns.cpp: total quantization error (`sqrt(Σ diff²) / n` — its metric)
/// under MAX_QUANTIZATION_TOTAL_ERROR = 0.002, and the dot-product error
/// `|dot_q − dot_f32| / n` under MAX_DOT_PRODUCT_ERROR = 0.02, for every path.
#[test]
fn ggml_test_quantize_fns_thresholds() {
    let n = 32 * 128;
    let (x1, x2) = (ggml_data(0.0, n), ggml_data(1.0, n));
    let exact: f64 = x1.iter().zip(&x2).map(|(a, b)| *a as f64 * *b as f64).sum();
    for t in QuantType::WEIGHTS {
        let q = quantized(t, &x1);
        let y = dequantized(t, &q, n);
        let sq: f64 = x1
            .iter()
            .zip(&y)
            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
            .sum();
        let total = sq.sqrt() as f32 / n as f32;
        assert!(total < 0.002, "{t}: total quantization error {total}");
        let a = activations(t, &x2);
        for isa in sotto_isa::available() {
            let err = (vec_dot(isa, t, n, &q, &a) as f64 - exact).abs() as f32 / n as f32;
            assert!(err < 0.02, "{t} {isa:?}: dot product error {err}");
        }
    }
}

#[test]
fn dequantized_values_stay_within_the_per_format_bound() {
    let n = 32 * 64;
    let x = weight_row(n, 11);
    for t in QuantType::WEIGHTS.into_iter().chain([QuantType::Q8_1]) {
        let y = dequantized(t, &quantized(t, &x), n);
        for (b, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
            let bound = element_bound(t, xb);
            for (j, (p, q)) in xb.iter().zip(yb).enumerate() {
                assert!(
                    (p - q).abs() <= bound,
                    "{t} block {b}[{j}]: {p} → {q}, bound {bound}"
                );
            }
        }
    }
}

#[test]
fn hand_checked_blocks() {
    // q8_0 of i - 12.5: amax 18.5, d = 18.5/127, element 0 → round(-85.8) = -86.
    let x: Vec<f32> = (0..32).map(|i| i as f32 - 12.5).collect();
    let q = quantized(QuantType::Q8_0, &x);
    assert_eq!(
        half::f16::from_le_bytes([q[0], q[1]]),
        half::f16::from_f32(18.5 / 127.0)
    );
    assert_eq!(q[2] as i8, -86);
    assert_eq!(q[33] as i8, 127);
    // d = 1: halves round away from zero (C's roundf), not to even.
    let mut x = [0.0f32; 32];
    (x[0], x[1], x[2]) = (127.0, 2.5, -2.5);
    let q = quantized(QuantType::Q8_0, &x);
    assert_eq!((q[3] as i8, q[4] as i8), (3, -3));
    for t in QuantType::WEIGHTS {
        let q = quantized(t, &[0.0; 32]);
        assert_eq!(dequantized(t, &q, 32), [0.0; 32], "{t}");
    }
    // q4_0: the largest magnitude maps to code 0, its negation clamps to 15.
    let mut x = [0.0f32; 32];
    x[0] = 4.0;
    x[17] = -4.0;
    let q = quantized(QuantType::Q4_0, &x);
    assert_eq!(half::f16::from_le_bytes([q[0], q[1]]).to_f32(), -0.5);
    assert_eq!(q[2] & 0x0F, 0); // 4 / -0.5 = -8 → code 0
    assert_eq!(q[3] >> 4, 15); // element 17: +8 → 16 → clamped to 15
    assert_eq!(q[4], 0x88); // zeros → code 8
                            // q5_1: codes above 15 set qh bits.
    let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let q = quantized(QuantType::Q5_1, &x);
    assert_eq!(u32::from_le_bytes([q[4], q[5], q[6], q[7]]), 0xFFFF_0000);
    assert_eq!(dequantized(QuantType::Q5_1, &q, 32), x);
    // q8_1 stores d·Σq.
    let q = quantized(QuantType::Q8_1, &[1.0; 32]);
    assert_eq!(half::f16::from_le_bytes([q[2], q[3]]).to_f32(), 32.0);
}

/// Real tiny.en rows and whisper.cpp's bytes for them (`scripts/goldens/quant_rows.sh`,
/// which takes the bytes only from files whose md5 is whisper-quantize's): quantize_row
/// must reproduce them, and every path's dot product over them must match the reference.
#[test]
fn quantize_row_matches_whisper_cpp_bytes() {
    let x = sotto_testdata::read_f32(&sotto_testdata::golden("quant_rows_input.f32"));
    assert_eq!(x.len(), 16 * 384);
    for t in QuantType::WEIGHTS {
        let want = std::fs::read(sotto_testdata::golden(&format!("quant_rows_{t}.bin"))).unwrap();
        let got = quantized(t, &x);
        if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
            let block = i / t.block_bytes();
            panic!(
                "{t}: byte {i} (row {}, block {}) differs",
                block / 12,
                block % 12
            );
        }
        assert_eq!(got.len(), want.len(), "{t}");
        let a = activations(t, &data(384, 5, 0.5));
        for row in want.chunks_exact(t.row_bytes(384)) {
            let r = vec_dot_ref(t, 384, row, &a);
            let tol = 1e-5 * magnitude(t, row, &a, 384) + 1e-6;
            for isa in sotto_isa::available() {
                let v = vec_dot(isa, t, 384, row, &a);
                assert!((v - r).abs() <= tol, "{t} {isa:?}: {v} vs {r}");
            }
        }
    }
}
