//! Each CUDA kernel against its CPU reference, by normalised MSE, in the manner of
//! llama.cpp's test-backend-ops: one line per (op, shape, dtype) case in the table below.
//!
//! Every case runs twice: in host emulation of the kernels (tests/common/emu.rs; always,
//! where a C++ compiler is), and on the GPU. Without libcuda the GPU half prints "skipped:
//! no CUDA driver (libcuda) found". With libcuda present, any failure to open the GPU, compile
//! or launch fails the test. `SOTTO_REQUIRE_CUDA=1` (set by scripts/gpu-check.sh) turns
//! every skip into a failure, so a GPU run cannot pass by skipping.

mod common;

use std::sync::OnceLock;

use common::emu::{self, ptr, ptr_mut, Arg};
use common::{nmse, values};
use sotto_compute::kernels::{self as cpu, Isa};
use sotto_cuda::{f16, kernels, launch, CudaBackend, CudaError, QuantType};

#[derive(Clone, Copy, Debug)]
enum Op {
    /// a += b
    Add,
    Gelu,
    /// Rows of the last dimension, eps 1e-5.
    LayerNorm,
    /// Rows of the last dimension; square shapes get a causal (-inf) mask.
    SoftMax,
    /// The dtype's storage to f32 (ggml's cpy/dequantize).
    ToF32,
}

#[derive(Clone, Copy, Debug)]
enum DType {
    F32,
    F16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
}

/// Largest accepted normalised MSE: rounding-order differences for f32 math, none for
/// storage conversions (both sides do the same f32 products).
fn max_nmse(op: Op) -> f64 {
    match op {
        Op::ToF32 => 1e-14,
        _ => 1e-10,
    }
}

macro_rules! conformance {
    ($($name:ident: $op:ident [$($dim:expr),+] $dtype:ident;)*) => {
        $(
            #[test]
            fn $name() {
                check(Op::$op, &[$($dim),+], DType::$dtype);
            }
        )*
    };
}

conformance! {
    add_7: Add [7] F32;
    add_enc: Add [1500, 384] F32;
    add_odd: Add [3, 1001] F32;
    gelu_1: Gelu [1] F32;
    gelu_mlp: Gelu [1500, 1536] F32;
    gelu_odd: Gelu [4099] F32;
    layer_norm_1x1: LayerNorm [1, 1] F32;
    layer_norm_tiny: LayerNorm [1500, 384] F32;
    layer_norm_large: LayerNorm [3, 1280] F32;
    layer_norm_wide_odd: LayerNorm [2, 2049] F32;
    layer_norm_narrow: LayerNorm [5, 7] F32;
    softmax_small: SoftMax [5, 7] F32;
    softmax_causal: SoftMax [448, 448] F32;
    softmax_vocab: SoftMax [2, 51865] F32;
    softmax_cross: SoftMax [6, 1500] F32;
    to_f32_f16: ToF32 [4097] F16;
    to_f32_f16_wide: ToF32 [384, 1536] F16;
    to_f32_q8_0: ToF32 [8, 384] Q8_0;
    to_f32_q8_0_one_block: ToF32 [1, 32] Q8_0;
    to_f32_q4_0: ToF32 [8, 384] Q4_0;
    to_f32_q4_0_one_block: ToF32 [1, 32] Q4_0;
    to_f32_q4_1: ToF32 [8, 384] Q4_1;
    to_f32_q5_0: ToF32 [8, 384] Q5_0;
    to_f32_q5_1: ToF32 [8, 384] Q5_1;
}

/// The shared backend, or None (after printing why) when this machine has no GPU.
fn backend() -> Option<&'static CudaBackend> {
    static BACKEND: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
    let require = std::env::var_os("SOTTO_REQUIRE_CUDA").is_some_and(|v| v != "0");
    let skip = |why: &str| {
        assert!(!require, "SOTTO_REQUIRE_CUDA is set, but {why}");
        println!("skipped: {why}");
        None
    };
    if !sotto_cuda::driver_present() {
        return skip("no CUDA driver (libcuda) found");
    }
    let opened = BACKEND.get_or_init(|| match CudaBackend::new(0) {
        Ok(b) => Ok(b),
        // The driver library without a GPU (a container with compat libs, say).
        Err(CudaError::NoDevice) => Err(CudaError::NoDevice.to_string()),
        Err(e) => panic!("libcuda is present but the CUDA backend failed: {e}"),
    });
    match opened {
        Ok(b) => Some(b),
        Err(why) => skip(why),
    }
}

/// Inputs, the CPU reference and the CUDA result for one case.
fn check(op: Op, shape: &[usize], dtype: DType) {
    let n: usize = shape.iter().product();
    let cols = *shape.last().unwrap();
    let seed = n as u64 ^ (cols as u64) << 32;
    let x = values(n, seed, 4.0);
    let reference = cpu_reference(op, dtype, &x, cols);
    assert!(
        reference.iter().all(|v| v.is_finite()),
        "CPU reference has non-finite values"
    );
    if let Some(e) = emu::get() {
        let out = run_emulated(e, op, dtype, &x, cols);
        let err = nmse(&out, &reference);
        println!("{op:?} {shape:?} {dtype:?}: nmse {err:.3e} in emulation");
        assert!(
            err.is_finite() && err <= max_nmse(op),
            "{op:?} {shape:?} {dtype:?}: nmse {err:.3e} in emulation"
        );
    }
    let Some(gpu) = backend() else {
        return;
    };
    let out =
        run_cuda(gpu, op, dtype, &x, cols).unwrap_or_else(|e| panic!("{op:?} {shape:?}: {e}"));
    let err = nmse(&out, &reference);
    println!(
        "{op:?} {shape:?} {dtype:?}: nmse {err:.3e} on {}",
        gpu.device()
    );
    assert!(
        err.is_finite() && err <= max_nmse(op),
        "{op:?} {shape:?} {dtype:?}: nmse {err:.3e}"
    );
}

fn gamma_beta(cols: usize) -> (Vec<f32>, Vec<f32>) {
    let gamma = values(cols, 7, 1.0).iter().map(|g| 1.0 + g).collect();
    (gamma, values(cols, 11, 0.5))
}

/// Square shapes get a causal mask: entry (i, j) with j > i is -inf.
fn softmax_input(x: &[f32], cols: usize) -> Vec<f32> {
    let rows = x.len() / cols;
    let mut x = x.to_vec();
    if rows == cols {
        for (i, row) in x.chunks_exact_mut(cols).enumerate() {
            row[i + 1..].fill(f32::NEG_INFINITY);
        }
    }
    x
}

fn quant_type(dtype: DType) -> QuantType {
    match dtype {
        DType::Q8_0 => QuantType::Q8_0,
        DType::Q4_0 => QuantType::Q4_0,
        DType::Q4_1 => QuantType::Q4_1,
        DType::Q5_0 => QuantType::Q5_0,
        DType::Q5_1 => QuantType::Q5_1,
        other => panic!("{other:?} is not a block type"),
    }
}

fn quantized(t: QuantType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.row_bytes(x.len())];
    sotto_quant::quantize_row(t, x, &mut q);
    q
}

fn cpu_reference(op: Op, dtype: DType, x: &[f32], cols: usize) -> Vec<f32> {
    let isa = Isa::Scalar;
    match (op, dtype) {
        (Op::Add, DType::F32) => {
            let mut a = x.to_vec();
            cpu::add(isa, &mut a, &values(x.len(), 3, 2.0));
            a
        }
        (Op::Gelu, DType::F32) => {
            let mut a = x.to_vec();
            cpu::gelu(isa, &mut a);
            a
        }
        (Op::LayerNorm, DType::F32) => {
            let (gamma, beta) = gamma_beta(cols);
            let mut out = vec![0.0; x.len()];
            for (row, o) in x.chunks_exact(cols).zip(out.chunks_exact_mut(cols)) {
                cpu::layer_norm(isa, row, &gamma, &beta, 1e-5, o);
            }
            out
        }
        (Op::SoftMax, DType::F32) => {
            let mut a = softmax_input(x, cols);
            a.chunks_exact_mut(cols)
                .for_each(|row| cpu::softmax(isa, row));
            a
        }
        (Op::ToF32, DType::F16) => {
            let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let mut out = vec![0.0; x.len()];
            cpu::f16_to_f32(isa, &h, &mut out);
            out
        }
        (Op::ToF32, DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1) => {
            let t = quant_type(dtype);
            let mut out = vec![0.0; x.len()];
            sotto_quant::dequantize_row(t, &quantized(t, x), &mut out);
            out
        }
        other => panic!("no case {other:?}"),
    }
}

/// The kernel `CudaBackend` would launch for the case, at the launch shape it plans.
fn run_emulated(e: &emu::Emu, op: Op, dtype: DType, x: &[f32], cols: usize) -> Vec<f32> {
    let n = Arg::U32(x.len() as u32);
    let flat = || launch::elementwise("t", x.len()).unwrap().unwrap();
    match (op, dtype) {
        (Op::Add, DType::F32) => {
            let (mut a, b) = (x.to_vec(), values(x.len(), 3, 2.0));
            e.launch_1d("sotto_add_f32", flat(), &[ptr_mut(&mut a), ptr(&b), n]);
            a
        }
        (Op::Gelu, DType::F32) => {
            let mut a = x.to_vec();
            e.launch_1d("sotto_gelu_f32", flat(), &[ptr_mut(&mut a), n]);
            a
        }
        (Op::LayerNorm, DType::F32) => {
            let (gamma, beta) = gamma_beta(cols);
            let mut out = vec![f32::NAN; x.len()];
            let l = launch::rows("t", x.len() / cols, cols).unwrap().unwrap();
            let args = [
                ptr(x),
                ptr(&gamma),
                ptr(&beta),
                ptr_mut(&mut out),
                Arg::U32(cols as u32),
                Arg::F32(1e-5),
            ];
            e.launch_1d("sotto_layer_norm_f32", l, &args);
            out
        }
        (Op::SoftMax, DType::F32) => {
            let mut a = softmax_input(x, cols);
            let l = launch::rows("t", x.len() / cols, cols).unwrap().unwrap();
            e.launch_1d(
                "sotto_softmax_rows_f32",
                l,
                &[ptr_mut(&mut a), Arg::U32(cols as u32)],
            );
            a
        }
        (Op::ToF32, DType::F16) => {
            let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let mut out = vec![f32::NAN; x.len()];
            e.launch_1d("sotto_f16_to_f32", flat(), &[ptr(&h), ptr_mut(&mut out), n]);
            out
        }
        (Op::ToF32, DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1) => {
            let t = quant_type(dtype);
            let q = quantized(t, x);
            let mut out = vec![f32::NAN; x.len()];
            let name = kernels::for_type("sotto_dequantize", t).unwrap();
            e.launch_1d(name, flat(), &[ptr(&q), ptr_mut(&mut out), n]);
            out
        }
        other => panic!("no case {other:?}"),
    }
}

fn run_cuda(
    gpu: &CudaBackend,
    op: Op,
    dtype: DType,
    x: &[f32],
    cols: usize,
) -> Result<Vec<f32>, CudaError> {
    match (op, dtype) {
        (Op::Add, DType::F32) => {
            let mut a = gpu.upload(x)?;
            gpu.add(&mut a, &gpu.upload(&values(x.len(), 3, 2.0))?)?;
            gpu.download(&a)
        }
        (Op::Gelu, DType::F32) => {
            let mut a = gpu.upload(x)?;
            gpu.gelu(&mut a)?;
            gpu.download(&a)
        }
        (Op::LayerNorm, DType::F32) => {
            let (gamma, beta) = gamma_beta(cols);
            let mut out = gpu.zeros(x.len())?;
            let (xd, g, b) = (gpu.upload(x)?, gpu.upload(&gamma)?, gpu.upload(&beta)?);
            gpu.layer_norm(&xd, &g, &b, 1e-5, &mut out)?;
            gpu.download(&out)
        }
        (Op::SoftMax, DType::F32) => {
            let mut a = gpu.upload(&softmax_input(x, cols))?;
            gpu.softmax_rows(&mut a, cols)?;
            gpu.download(&a)
        }
        (Op::ToF32, DType::F16) => {
            let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let mut out = gpu.zeros(x.len())?;
            gpu.f16_to_f32(&gpu.upload(&h)?, &mut out)?;
            gpu.download(&out)
        }
        (Op::ToF32, DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1) => {
            let t = quant_type(dtype);
            let mut out = gpu.zeros(x.len())?;
            gpu.dequantize(t, &gpu.upload(&quantized(t, x))?, &mut out)?;
            gpu.download(&out)
        }
        other => panic!("no case {other:?}"),
    }
}

#[test]
fn nmse_catches_a_wrong_result() {
    let r = values(1000, 1, 1.0);
    assert_eq!(nmse(&r, &r), 0.0);
    let mut wrong = r.clone();
    wrong[500] += 0.1;
    assert!(nmse(&wrong, &r) > max_nmse(Op::Add));
    let halved: Vec<f32> = r.iter().map(|v| v * 0.5).collect();
    assert!((nmse(&halved, &r) - 0.25).abs() < 1e-6);
}

#[test]
fn values_are_deterministic_and_spread() {
    let a = values(4096, 5, 4.0);
    assert_eq!(a, values(4096, 5, 4.0));
    assert_ne!(a, values(4096, 6, 4.0));
    assert!(a.iter().all(|v| (-4.0..4.0).contains(v)));
    let mean = a.iter().sum::<f32>() / a.len() as f32;
    assert!(mean.abs() < 0.2, "mean {mean}");
}

#[test]
fn probe_lists_devices() {
    match sotto_cuda::probe() {
        Ok(devs) => devs.iter().for_each(|d| println!("{d}")),
        Err(e) => {
            println!("probe: {e}");
            if std::env::var_os("SOTTO_REQUIRE_CUDA").is_some_and(|v| v != "0") {
                panic!("SOTTO_REQUIRE_CUDA is set, but probing failed: {e}");
            }
        }
    }
}

#[test]
fn bad_shapes_are_errors_on_the_gpu() {
    let Some(gpu) = backend() else {
        return;
    };
    let mut a = gpu.upload(&[1.0f32; 8]).unwrap();
    let b = gpu.upload(&[1.0f32; 7]).unwrap();
    assert!(matches!(gpu.add(&mut a, &b), Err(CudaError::Shape { .. })));
    assert!(matches!(
        gpu.softmax_rows(&mut a, 3),
        Err(CudaError::Shape { .. })
    ));
    let q = gpu.upload(&[0u8; 33]).unwrap();
    let mut out = gpu.zeros::<f32>(32).unwrap();
    assert!(gpu.dequantize(QuantType::Q8_0, &q, &mut out).is_err());
    assert!(matches!(
        gpu.dequantize(QuantType::Q8_1, &q, &mut out),
        Err(CudaError::Unsupported { .. })
    ));
}
