//! Every CUDA kernel run on the host (tests/common/emu_host.hpp) against its CPU reference,
//! at the launch shapes sotto_cuda plans. The elementwise, norm, softmax and dequantize
//! kernels are also in tests/conformance.rs's table, which checks them here and on a GPU.
//! Where a C++ compiler is missing these print "skipped" (CI requires the compiler).

mod common;

use common::emu::{self, ptr, ptr_mut, Arg, Emu};
use common::{nmse, values};
use half::f16;
use sotto_compute::kernels::{self as cpu, Isa};
use sotto_cuda::{kernels, launch, plan, QuantType};

fn u32_of(n: usize) -> Arg {
    Arg::U32(u32::try_from(n).unwrap())
}

fn quantized(t: QuantType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.row_bytes(x.len())];
    sotto_quant::quantize_row(t, x, &mut q);
    q
}

fn dequantized(t: QuantType, q: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0.0; n];
    sotto_quant::dequantize_row(t, q, &mut out);
    out
}

fn same_bits(a: u16, b: u16) -> bool {
    a == b || (f16::from_bits(a).is_nan() && f16::from_bits(b).is_nan())
}

#[test]
fn f16_conversions_match_the_half_crate_bit_for_bit() {
    let Some(e) = emu::get() else { return };
    let bits: Vec<u16> = (0..=u16::MAX).collect();
    let mut wide = vec![0f32; bits.len()];
    let l = launch::elementwise("t", bits.len()).unwrap().unwrap();
    e.launch_1d(
        "sotto_f16_to_f32",
        l,
        &[ptr(&bits), ptr_mut(&mut wide), u32_of(bits.len())],
    );
    for (&b, &w) in bits.iter().zip(&wide) {
        let want = f16::from_bits(b).to_f32();
        assert!(
            w.to_bits() == want.to_bits() || (w.is_nan() && want.is_nan()),
            "{b:#06x}: {w} != {want}"
        );
    }
    // Narrowing: every half, the midpoints between neighbours (ties go to even), values
    // just either side of them, the overflow edge and random values.
    let mut x: Vec<f32> = Vec::new();
    for b in 0..0x7c00u16 {
        let (lo, hi) = (f16::from_bits(b).to_f32(), f16::from_bits(b + 1).to_f32());
        let mid = ((lo as f64 + hi as f64) / 2.0) as f32;
        for v in [
            lo,
            mid,
            f32::from_bits(mid.to_bits() + 1),
            f32::from_bits(mid.to_bits() - 1),
        ] {
            x.extend([v, -v]);
        }
    }
    x.extend([
        65519.99,
        65520.0,
        1e9,
        f32::INFINITY,
        f32::NAN,
        1e-30,
        -1e-30,
    ]);
    x.extend(values(10_000, 9, 70_000.0));
    let mut half = vec![0u16; x.len()];
    let l = launch::elementwise("t", x.len()).unwrap().unwrap();
    e.launch_1d(
        "sotto_f32_to_f16",
        l,
        &[ptr(&x), ptr_mut(&mut half), u32_of(x.len())],
    );
    for (&v, &h) in x.iter().zip(&half) {
        let want = f16::from_f32(v).to_bits();
        assert!(same_bits(h, want), "{v:e}: {h:#06x} != {want:#06x}");
    }
}

#[test]
fn dequantize_to_f16_matches_the_cpu_bit_for_bit() {
    let Some(e) = emu::get() else { return };
    for t in QuantType::WEIGHTS {
        let x = values(4 * 384, 21, 3.0);
        let q = quantized(t, &x);
        let want: Vec<u16> = dequantized(t, &q, x.len())
            .iter()
            .map(|&v| f16::from_f32(v).to_bits())
            .collect();
        let mut out = vec![0u16; x.len()];
        let name = kernels::for_type("sotto_dequantize_half", t).unwrap();
        let l = launch::elementwise("t", x.len()).unwrap().unwrap();
        e.launch_1d(name, l, &[ptr(&q), ptr_mut(&mut out), u32_of(x.len())]);
        assert_eq!(out, want, "{t}");
    }
}

/// `y[r, o] = Σ x[r, k] · W[o, k]` in f64 over the dequantized weights.
fn mat_vec_reference(w: &[f32], x: &[f32], m: usize, n_out: usize, n_in: usize) -> Vec<f32> {
    let mut y = vec![0.0; m * n_out];
    for r in 0..m {
        for o in 0..n_out {
            let (wr, xr) = (&w[o * n_in..][..n_in], &x[r * n_in..][..n_in]);
            y[r * n_out + o] = wr
                .iter()
                .zip(xr)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum::<f64>() as f32;
        }
    }
    y
}

fn mat_vec(
    e: &Emu,
    t: QuantType,
    q: &[u8],
    x: &[f32],
    m: usize,
    n_out: usize,
    n_in: usize,
) -> Vec<f32> {
    // NaN-filled: an output the kernel skips shows up.
    let mut y = vec![f32::NAN; m * n_out];
    let name = kernels::for_type("sotto_mul_mat_vec", t).unwrap();
    let l = launch::mul_mat_vec("t", m, n_out, n_in).unwrap().unwrap();
    let args = [
        ptr(q),
        ptr(x),
        ptr_mut(&mut y),
        u32_of(n_in),
        u32_of(n_out),
        u32_of(m),
    ];
    e.launch_1d(name, l, &args);
    y
}

#[test]
fn quantized_mat_vec_matches_the_dequantized_product() {
    let Some(e) = emu::get() else { return };
    // Outputs not a multiple of the 4 per block; rows of fewer blocks than lanes, of more,
    // and of a multiple of 32 blocks.
    let shapes = [(7usize, 64usize), (51, 384), (9, 1536), (5, 1024 + 96)];
    for t in QuantType::WEIGHTS {
        for (i, &(n_out, n_in)) in shapes.iter().enumerate() {
            let w = values(n_out * n_in, 31 + i as u64, 1.0);
            let q = quantized(t, &w);
            let wq = dequantized(t, &q, w.len());
            for m in [1usize, 2, 5, kernels::MMV_ROWS] {
                let x = values(m * n_in, 41 + m as u64, 2.0);
                let got = mat_vec(e, t, &q, &x, m, n_out, n_in);
                let want = mat_vec_reference(&wq, &x, m, n_out, n_in);
                let err = nmse(&got, &want);
                assert!(err < 1e-11, "{t} m {m} [{n_out}, {n_in}]: nmse {err:e}");
            }
        }
    }
}

#[test]
fn f16_mat_vec_matches_the_widened_product() {
    let Some(e) = emu::get() else { return };
    // Even rows (one 32-bit load per pair), odd rows, rows shorter than a warp's 64.
    let shapes = [(7usize, 384usize), (9, 1537), (5, 31), (3, 2)];
    for (i, &(n_out, n_in)) in shapes.iter().enumerate() {
        let w: Vec<f16> = values(n_out * n_in, 51 + i as u64, 1.0)
            .iter()
            .map(|&v| f16::from_f32(v))
            .collect();
        let wf: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
        for m in [1usize, 3, kernels::MMV_ROWS] {
            let x = values(m * n_in, 61 + m as u64, 2.0);
            let mut y = vec![f32::NAN; m * n_out];
            let l = launch::mul_mat_vec("t", m, n_out, n_in).unwrap().unwrap();
            let args = [
                ptr(&w),
                ptr(&x),
                ptr_mut(&mut y),
                u32_of(n_in),
                u32_of(n_out),
                u32_of(m),
            ];
            e.launch_1d("sotto_mul_mat_vec_f16", l, &args);
            let err = nmse(&y, &mat_vec_reference(&wf, &x, m, n_out, n_in));
            assert!(err < 1e-11, "m {m} [{n_out}, {n_in}]: nmse {err:e}");
        }
    }
}

#[test]
fn quantized_mat_vec_reads_only_its_rows() {
    let Some(e) = emu::get() else { return };
    // Rows past m hold NaN: a kernel that read them would return NaN.
    let (n_out, n_in, m) = (12, 256, 3);
    let t = QuantType::Q8_0;
    let w = values(n_out * n_in, 5, 1.0);
    let q = quantized(t, &w);
    let mut x = values(kernels::MMV_ROWS * n_in, 6, 1.0);
    x[m * n_in..].fill(f32::NAN);
    let got = mat_vec(e, t, &q, &x, m, n_out, n_in);
    let want = mat_vec_reference(&dequantized(t, &q, w.len()), &x, m, n_out, n_in);
    assert!(nmse(&got, &want) < 1e-11);
}

/// x[r] = table[tok[r]] + pos[pos0 + r % n_new]
fn embed_reference(
    table: &[f32],
    tok: &[u32],
    pos: &[f32],
    d: usize,
    n_new: usize,
    pos0: usize,
) -> Vec<f32> {
    let mut x = vec![0.0; tok.len() * d];
    for (r, &t) in tok.iter().enumerate() {
        for c in 0..d {
            x[r * d + c] = table[t as usize * d + c] + pos[(pos0 + r % n_new) * d + c];
        }
    }
    x
}

#[test]
fn embeddings_from_every_table_type() {
    let Some(e) = emu::get() else { return };
    let (n_vocab, d, n_ctx) = (50, 96, 12);
    let table = values(n_vocab * d, 61, 1.0);
    let pos = values(n_ctx * d, 62, 0.5);
    // Two sequences of three new tokens at position 4.
    let (tok, n_new, pos0) = (vec![3u32, 49, 0, 7, 7, 12], 3, 4);
    let n = tok.len() * d;
    let l = launch::elementwise("t", n).unwrap().unwrap();
    let run = |name: &str, table: Arg| {
        let mut x = vec![f32::NAN; n];
        let at = [pos0 as u32];
        let args = [
            table,
            ptr(&tok),
            ptr(&pos),
            ptr_mut(&mut x),
            u32_of(d),
            u32_of(n_new),
            ptr(&at),
            u32_of(n),
        ];
        e.launch_1d(name, l, &args);
        x
    };
    let got = run("sotto_embed_f32", ptr(&table));
    assert_eq!(got, embed_reference(&table, &tok, &pos, d, n_new, pos0));
    let h: Vec<f16> = table.iter().map(|&v| f16::from_f32(v)).collect();
    let hf: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
    let got = run("sotto_embed_f16", ptr(&h));
    assert_eq!(got, embed_reference(&hf, &tok, &pos, d, n_new, pos0));
    for t in QuantType::WEIGHTS {
        let q = quantized(t, &table);
        let got = run(kernels::for_type("sotto_embed", t).unwrap(), ptr(&q));
        let want = embed_reference(&dequantized(t, &q, table.len()), &tok, &pos, d, n_new, pos0);
        assert_eq!(got, want, "{t}");
    }
}

#[test]
fn bias_and_gelu() {
    let Some(e) = emu::get() else { return };
    let (rows, cols) = (5, 300);
    let y0 = values(rows * cols, 71, 3.0);
    let b = values(cols, 72, 1.0);
    for (has_bias, gelu) in [(1, 0), (0, 1), (1, 1)] {
        let mut want = y0.clone();
        if has_bias == 1 {
            want.chunks_exact_mut(cols)
                .for_each(|r| r.iter_mut().zip(&b).for_each(|(v, b)| *v += b));
        }
        if gelu == 1 {
            cpu::gelu(Isa::Scalar, &mut want);
        }
        let mut y = y0.clone();
        let l = launch::elementwise("t", y.len()).unwrap().unwrap();
        let args = [
            ptr_mut(&mut y),
            ptr(&b),
            u32_of(cols),
            u32_of(rows * cols),
            Arg::I32(has_bias),
            Arg::I32(gelu),
        ];
        e.launch_1d("sotto_bias_act", l, &args);
        let err = nmse(&y, &want);
        assert!(err < 1e-12, "bias {has_bias} gelu {gelu}: nmse {err:e}");
    }
}

#[test]
fn im2col_of_both_layouts() {
    let Some(e) = emu::get() else { return };
    let (t_in, c_in) = (37, 5);
    let x = values(t_in * c_in, 81, 1.0);
    for stride in [1usize, 2] {
        // Channel-major (the mel: x(t, c) at c·t_in + t) and time-major (t·c_in + c).
        for (ts, cs) in [(1, t_in), (c_in, 1)] {
            let t_out = plan::conv_out_len(t_in, stride);
            let mut cols = vec![f32::NAN; t_out * c_in * 3];
            let mut want = vec![0.0; cols.len()];
            for t in 0..t_out {
                for c in 0..c_in {
                    for k in 0..3 {
                        let ti = (t * stride + k) as isize - 1;
                        want[t * c_in * 3 + c * 3 + k] = if (0..t_in as isize).contains(&ti) {
                            x[ti as usize * ts + c * cs]
                        } else {
                            0.0
                        };
                    }
                }
            }
            let l = launch::elementwise("t", cols.len()).unwrap().unwrap();
            let args = [
                ptr(&x),
                ptr_mut(&mut cols),
                u32_of(t_in),
                u32_of(c_in),
                u32_of(t_out),
                u32_of(stride),
                u32_of(ts),
                u32_of(cs),
            ];
            e.launch_1d("sotto_im2col", l, &args);
            assert_eq!(cols, want, "stride {stride}, strides ({ts}, {cs})");
        }
    }
}

#[test]
fn kv_write_appends_each_sequence() {
    let Some(e) = emu::get() else { return };
    let (batch, n_new, d, n_ctx, pos0) = (3, 2, 8, 10, 4);
    let src = values(batch * n_new * d, 91, 1.0);
    let mut cache = vec![7.0f32; batch * n_ctx * d];
    let mut want = cache.clone();
    for s in 0..batch {
        for i in 0..n_new {
            let dst = &mut want[(s * n_ctx + pos0 + i) * d..][..d];
            dst.copy_from_slice(&src[(s * n_new + i) * d..][..d]);
        }
    }
    let n = src.len();
    let l = launch::elementwise("t", n).unwrap().unwrap();
    let at = [pos0 as u32];
    let args = [
        ptr(&src),
        ptr_mut(&mut cache),
        u32_of(d),
        u32_of(n_new),
        ptr(&at),
        u32_of(n_ctx * d),
        u32_of(n),
    ];
    e.launch_1d("sotto_kv_write", l, &args);
    assert_eq!(cache, want);
}

struct AttentionCase {
    batch: usize,
    n_new: usize,
    n_head: usize,
    dh: usize,
    n_keys: usize,
    /// Some(q_pos0): causal self-attention over a cache; None: every row sees all keys.
    causal: Option<usize>,
    /// Keys and values per sequence (self-attention cache) or shared (cross-attention).
    per_sequence: bool,
}

/// softmax(q kᵀ / √dh) v per head, in f64.
fn attention_reference(c: &AttentionCase, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
    let d = c.n_head * c.dh;
    let rows = c.batch * c.n_new;
    let mut out = vec![0.0; rows * d];
    let scale = 1.0 / (c.dh as f64).sqrt();
    for r in 0..rows {
        let (s, i) = (r / c.n_new, r % c.n_new);
        let base = if c.per_sequence { s * c.n_keys * d } else { 0 };
        let nk = c.causal.map_or(c.n_keys, |p| (p + i + 1).min(c.n_keys));
        for h in 0..c.n_head {
            let qr = &q[r * d + h * c.dh..][..c.dh];
            let sc: Vec<f64> = (0..nk)
                .map(|j| {
                    let kr = &k[base + j * d + h * c.dh..][..c.dh];
                    qr.iter()
                        .zip(kr)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = w.iter().sum();
            for cc in 0..c.dh {
                let acc: f64 = (0..nk)
                    .map(|j| w[j] * v[base + j * d + h * c.dh + cc] as f64)
                    .sum();
                out[r * d + h * c.dh + cc] = (acc / z) as f32;
            }
        }
    }
    out
}

#[test]
fn attention_self_causal_and_cross() {
    let Some(e) = emu::get() else { return };
    let cases = [
        // A prompt pass: 5 new rows from position 0 of one sequence.
        AttentionCase {
            batch: 1,
            n_new: 5,
            n_head: 2,
            dh: 64,
            n_keys: 5,
            causal: Some(0),
            per_sequence: true,
        },
        // Beams: 3 sequences, one new row each at position 6 of a 9-slot cache.
        AttentionCase {
            batch: 3,
            n_new: 1,
            n_head: 3,
            dh: 64,
            n_keys: 9,
            causal: Some(6),
            per_sequence: true,
        },
        // Cross-attention: rows of two sequences over 300 shared keys (more than the block).
        AttentionCase {
            batch: 2,
            n_new: 2,
            n_head: 2,
            dh: 64,
            n_keys: 300,
            causal: None,
            per_sequence: false,
        },
        // Encoder self-attention: no mask, head width 80 (more than one pass of lanes? no:
        // the block is 128) over 150 keys.
        AttentionCase {
            batch: 1,
            n_new: 6,
            n_head: 2,
            dh: 80,
            n_keys: 150,
            causal: None,
            per_sequence: true,
        },
    ];
    for (ci, c) in cases.iter().enumerate() {
        let d = c.n_head * c.dh;
        let rows = c.batch * c.n_new;
        let kv_rows = if c.per_sequence {
            c.batch * c.n_keys
        } else {
            c.n_keys
        };
        let q = values(rows * d, 100 + ci as u64, 1.0);
        let k = values(kv_rows * d, 110 + ci as u64, 1.0);
        let v = values(kv_rows * d, 120 + ci as u64, 1.0);
        let mut out = vec![f32::NAN; rows * d];
        let q_pos0 = [c.causal.unwrap_or(0) as u32];
        let l = plan::attention(rows, c.n_head, c.dh, c.n_keys).unwrap();
        let stride = if c.per_sequence { c.n_keys * d } else { 0 };
        let args = [
            ptr(&q),
            ptr(&k),
            ptr(&v),
            ptr_mut(&mut out),
            u32_of(d),
            u32_of(c.dh),
            u32_of(c.n_new),
            u32_of(stride),
            u32_of(c.n_keys),
            Arg::I32(c.causal.is_some() as i32),
            ptr(&q_pos0),
            Arg::F32(1.0 / (c.dh as f32).sqrt()),
        ];
        e.launch(
            "sotto_attention",
            (l.rows, l.heads, 1),
            (l.block, 1, 1),
            l.shared_bytes,
            &args,
        );
        let err = nmse(&out, &attention_reference(c, &q, &k, &v));
        assert!(err < 1e-11, "case {ci}: nmse {err:e}");
    }
}

#[test]
fn flash_attention_matches_the_reference() {
    let Some(e) = emu::get() else { return };
    // (rows, heads, keys): one whole tile, partial row and key tiles, a single key, and
    // more keys than one tile with rows spanning several tiles.
    let cases = [
        (16usize, 2usize, 64usize),
        (37, 3, 150),
        (20, 1, 1),
        (50, 2, 200),
    ];
    for (ci, &(rows, n_head, n_keys)) in cases.iter().enumerate() {
        let c = AttentionCase {
            batch: 1,
            n_new: rows,
            n_head,
            dh: kernels::FLASH_DH,
            n_keys,
            causal: None,
            per_sequence: false,
        };
        let d = n_head * c.dh;
        let q = values(rows * d, 200 + ci as u64, 1.5);
        let k = values(n_keys * d, 210 + ci as u64, 1.5);
        let v = values(n_keys * d, 220 + ci as u64, 1.0);
        let mut out = vec![f32::NAN; rows * d];
        let l = plan::flash_attention(rows, n_head, c.dh, n_keys).unwrap();
        let args = [
            ptr(&q),
            ptr(&k),
            ptr(&v),
            ptr_mut(&mut out),
            u32_of(rows),
            u32_of(n_keys),
            u32_of(d),
            Arg::F32(1.0 / (c.dh as f32).sqrt()),
        ];
        e.launch(
            "sotto_flash_attention",
            (l.rows, l.heads, 1),
            (l.block, 1, 1),
            l.shared_bytes,
            &args,
        );
        let err = nmse(&out, &attention_reference(&c, &q, &k, &v));
        assert!(
            err < 1e-11,
            "case {ci} ({rows} rows, {n_keys} keys): nmse {err:e}"
        );
    }
}
