//! What only the kernel emulation checks, bit for bit: its f16 conversions against the
//! `half` crate over every value (the GPU's PTX `cvt` defines them there), dequantization
//! to f16 including ggml's −0, that a decoder-step product reads only its rows, and that
//! the emulation's two orders expose a missing sync. Every kernel against its CPU
//! reference, in emulation (in both orders) and on the GPU: tests/conformance.rs.

mod common;

use common::emu::{self, ptr, ptr_mut, Arg, Emu, Schedule};
use common::{nmse, values};
use half::f16;
use sotto_cuda::{kernels, launch, QuantType};

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
        Arg::Ptr(0),
        u32_of(n_in),
        u32_of(n_out),
        u32_of(m),
        Arg::I32(0),
        Arg::Ptr(0),
        Arg::Ptr(0),
        Arg::F32(0.0),
    ];
    e.launch_1d(name, l, &args);
    y
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

/// What each thread of `emu_self_check` (tests/common/emu.rs) saw in `mode`, on `blocks`
/// blocks of `threads`, in the order `s`; the launch's failure as an error.
fn self_check(
    e: &Emu,
    mode: i32,
    s: Schedule,
    blocks: u32,
    threads: u32,
) -> Result<Vec<f32>, String> {
    let n = (blocks * threads) as usize;
    let mut out = vec![0f32; n];
    let mut seen = vec![-1f32; n];
    let args = [ptr_mut(&mut out), ptr_mut(&mut seen), Arg::I32(mode)];
    e.try_launch(
        s,
        "emu_self_check",
        (blocks, 1, 1),
        (threads, 1, 1),
        4 * threads,
        &args,
    )?;
    Ok(seen)
}

/// A read of another thread's shared-memory write with no barrier between them gives the
/// written value in one order and not in the other (unwritten dynamic shared memory reads
/// as NaN), where the barrier makes both orders agree; a shuffle orders its warp, not the
/// block; blocks run in both orders; a shuffle half a warp reaches fails the launch.
#[test]
fn the_two_orders_expose_a_missing_sync() {
    use Schedule::{Forward, Reverse};
    let Some(e) = emu::get() else { return };
    let next: Vec<f32> = (0..64).map(|t| ((t + 1) % 64) as f32).collect();
    let prev: Vec<f32> = (0..64).map(|t| ((t + 63) % 64) as f32).collect();
    for s in [Forward, Reverse] {
        assert_eq!(self_check(e, 0, s, 1, 64).unwrap(), next, "{s:?}");
    }
    let is_nan = |v: &[f32]| v.iter().filter(|x| x.is_nan()).count();
    // Without the barrier, thread t reads thread t + 1's slot before (forward: every slot
    // but the wrapped one) or after (reverse) it is written; reading t - 1's, the opposite.
    assert_eq!(is_nan(&self_check(e, 1, Forward, 1, 64).unwrap()), 63);
    assert_eq!(self_check(e, 1, Reverse, 1, 64).unwrap()[..63], next[..63]);
    assert_eq!(self_check(e, 2, Forward, 1, 64).unwrap()[1..], prev[1..]);
    assert_eq!(is_nan(&self_check(e, 2, Reverse, 1, 64).unwrap()), 63);
    // A shuffle syncs its own warp: the other warp's slots are unwritten (whichever warp
    // runs first), the neighbouring lane's written.
    let lane_pair: Vec<f32> = (0..64).map(|t| (t ^ 1) as f32).collect();
    for s in [Forward, Reverse] {
        let other_warp = self_check(e, 3, s, 1, 64).unwrap();
        assert_eq!(is_nan(&other_warp), 32, "{s:?}: {other_warp:?}");
        assert_eq!(self_check(e, 4, s, 1, 64).unwrap(), lane_pair, "{s:?}");
        let err = self_check(e, 5, s, 1, 64).unwrap_err();
        assert!(err.contains("not every lane"), "{err}");
    }
    // Block b reads block b - 1's output: written before it (forward) or not yet (reverse).
    assert_eq!(self_check(e, 6, Forward, 4, 32).unwrap(), vec![1.0; 128]);
    let reverse = self_check(e, 6, Reverse, 4, 32).unwrap();
    assert_eq!(reverse[..32], [1.0; 32]);
    assert_eq!(reverse[32..], [0.0; 96]);
}
