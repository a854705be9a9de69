//! k-quants: sotto's reading of ggml's super-blocks against ggml's own
//! `dequantize_row_*` (whisper.cpp's library, through `scripts/ggml-kquant.py`), and
//! their transcoding into the types sotto has kernels for.

use half::f16;
use sotto_quant::{dequantize_row, KQuant, QK_K};

/// `n` super-blocks of random codes and scales, with random finite f16 super-scales
/// (`d`, and `dmin` where the type has one), some negative as files have them.
fn blocks(k: KQuant, n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let bytes = k.block_bytes();
    let mut out = vec![0u8; n * bytes];
    for b in out.chunks_exact_mut(bytes) {
        for v in b.iter_mut() {
            *v = next() as u8;
        }
        let halves: &[usize] = match k {
            KQuant::Q2_K => &[80, 82],
            KQuant::Q3_K => &[108],
            KQuant::Q4_K | KQuant::Q5_K => &[0, 2],
            KQuant::Q6_K => &[208],
        };
        for &at in halves {
            let x = (next() % 20_000) as f32 / 1e6 - 0.004;
            b[at..at + 2].copy_from_slice(&f16::from_f32(x).to_le_bytes());
        }
    }
    out
}

fn dequantized(k: KQuant, q: &[u8]) -> Vec<f32> {
    let mut y = vec![0f32; q.len() / k.block_bytes() * QK_K];
    k.dequantize_row(q, &mut y);
    y
}

/// ggml's values of the same blocks; `None` without whisper.cpp's Python.
fn ggml_dequantized(k: KQuant, q: &[u8]) -> Option<Vec<f32>> {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("blocks"), dir.path().join("values"));
    std::fs::write(&src, q).unwrap();
    let args = [
        "dequantize".as_ref(),
        k.name().as_ref(),
        src.as_os_str(),
        dst.as_os_str(),
    ];
    if !sotto_testdata::ggml_kquant(&args) {
        return None;
    }
    Some(sotto_testdata::read_f32(&dst))
}

#[test]
fn k_quants_dequantize_as_ggml_does() {
    for (i, k) in KQuant::ALL.into_iter().enumerate() {
        let q = blocks(k, 64, 0x9e37_79b9 + i as u64);
        let ours = dequantized(k, &q);
        let Some(theirs) = ggml_dequantized(k, &q) else {
            return;
        };
        assert_eq!(ours.len(), theirs.len());
        for (j, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{}: value {j}: {a} against {b}",
                k.name()
            );
        }
    }
}

/// q4_K and q5_K become q4_1 and q5_1 with the same codes: each value within 2⁻¹⁰ of its
/// sub-block's larger term (the f16 rounding of `d·s` and `dmin·m`); the others become
/// q8_0, within half an 8-bit step of their 32 values' largest.
#[test]
fn k_quants_transcode_to_their_targets_within_rounding() {
    for (i, k) in KQuant::ALL.into_iter().enumerate() {
        let q = blocks(k, 64, 0x51ed_2701 + i as u64);
        let want = dequantized(k, &q);
        let target = k.target();
        let mut t = vec![0u8; target.row_bytes(want.len())];
        k.transcode_row(&q, &mut t);
        let mut got = vec![0f32; want.len()];
        dequantize_row(target, &t, &mut got);
        for (block, (g, w)) in got.chunks(32).zip(want.chunks(32)).enumerate() {
            let amax = w.iter().fold(0f32, |m, v| m.max(v.abs()));
            let (lo, hi) = w
                .iter()
                .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            let bound = match target {
                sotto_quant::QuantType::Q8_0 => amax / 127.0 * 0.5 + amax * 1e-3,
                _ => (hi - lo).max(amax) * 2f32.powi(-10) * 2.0,
            };
            for (a, b) in g.iter().zip(w) {
                assert!(
                    (a - b).abs() <= bound,
                    "{} block {block}: {a} against {b} (bound {bound})",
                    k.name()
                );
            }
        }
    }
}

#[test]
fn ggml_type_ids_name_the_k_quants() {
    for (id, k) in (10..).zip(KQuant::ALL) {
        assert_eq!(KQuant::from_ggml_type_id(id), Some(k));
        assert_eq!(k.ggml_type_id(), id);
    }
    for id in [-1, 0, 8, 9, 15, 30] {
        assert_eq!(KQuant::from_ggml_type_id(id), None);
    }
}
