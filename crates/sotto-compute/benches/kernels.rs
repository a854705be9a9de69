//! Kernel and op benchmarks at Whisper tiny/base sizes, per ISA path.
//!
//! `cargo bench -p sotto-compute --bench kernels` (on a quiet machine).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rayon::prelude::*;
use sotto_compute::kernels::{self, WRows};
use sotto_compute::{f16, CpuBackend, Linear, Mask, PackedKv, Weight};

fn vals(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32
                - 0.5
        })
        .collect()
}

fn small_m(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul_t_f16");
    for (n, k) in [(384, 384), (1536, 384), (384, 1536), (51864, 384)] {
        let w: Vec<f16> = vals(n * k, 1).into_iter().map(f16::from_f32).collect();
        for m in [1, 5] {
            let x = vals(m * k, 2);
            let mut out = vec![0.0; n * m];
            g.throughput(Throughput::Bytes((n * k * 2) as u64));
            for isa in sotto_isa::available() {
                g.bench_function(
                    BenchmarkId::new(format!("{}/m{m}", isa.name()), format!("{n}x{k}")),
                    |b| b.iter(|| kernels::matmul_t(isa, &x, m, k, WRows::F16(&w), &mut out)),
                );
            }
        }
    }
    g.finish();
}

fn decoder_linear(c: &mut Criterion) {
    let mut g = c.benchmark_group("linear_small_m");
    g.sample_size(20);
    let be = CpuBackend::new(2).unwrap();
    for (n, k) in [(384, 384), (51864, 384)] {
        let w: Vec<f16> = vals(n * k, 1).into_iter().map(f16::from_f32).collect();
        let lin = Linear::new(Weight::F16(w), None, n, k).unwrap();
        g.throughput(Throughput::Bytes((n * k * 2) as u64));
        for m in [1, 5] {
            let x = vals(m * k, 2);
            let mut out = vec![0.0; n * m];
            g.bench_function(BenchmarkId::new(format!("m{m}"), format!("{n}x{k}")), |b| {
                b.iter(|| be.linear(&x, m, &lin, &mut out).unwrap())
            });
        }
    }
    g.finish();
}

/// A decoder prompt pass's MLP product at base's shape (227 rows · 512×2048, f16 tiles) on one
/// thread: each tile meets every row.
fn prompt_linear_1t(c: &mut Criterion) {
    let mut g = c.benchmark_group("prompt_1t");
    g.sample_size(20);
    let be = CpuBackend::new(1).unwrap();
    let (m, n, k) = (227, 2048, 512);
    g.throughput(Throughput::Elements((2 * m * n * k) as u64));
    let w: Vec<f16> = vals(n * k, 1).into_iter().map(f16::from_f32).collect();
    let tiles = Weight::F16(w).for_decoding(n, k).unwrap();
    let lin = Linear::new(tiles, None, n, k).unwrap();
    let x = vals(m * k, 2);
    let mut out = vec![0.0; m * n];
    g.bench_function(format!("f16_tiles_{m}x{k}x{n}"), |b| {
        b.iter(|| be.linear(&x, m, &lin, &mut out).unwrap())
    });
    g.finish();
}

/// A prompt pass's cross-attention at base's shape (227 query rows over a window's 1500
/// packed f16 keys and values, 8 heads of 64) on one thread.
fn prompt_cross_attention_1t(c: &mut Criterion) {
    let mut g = c.benchmark_group("prompt_1t");
    g.sample_size(20);
    let be = CpuBackend::new(1).unwrap();
    let (m, tk, heads, d) = (227, 1500, 8, 512);
    g.throughput(Throughput::Elements((4 * m * tk * d) as u64));
    let mut kv = PackedKv::new(tk, heads, d).unwrap();
    kv.pack(be.isa(), &vals(tk * d, 1), &vals(tk * d, 2))
        .unwrap();
    let q = vals(m * d, 3);
    let mut out = vec![0.0; m * d];
    g.bench_function(format!("cross_attention_{m}x{tk}"), |b| {
        b.iter(|| be.attention_packed(&q, m, &kv, &mut out).unwrap())
    });
    g.finish();
}

/// A decoder step's cross-attention over one layer's packed keys and values at base's shape
/// (1500 keys, 8 heads of 64), on one thread: greedy's one query row and five beams'.
fn step_cross_attention_1t(c: &mut Criterion) {
    let mut g = c.benchmark_group("step_1t");
    let be = CpuBackend::new(1).unwrap();
    let (tk, heads, d) = (1500, 8, 512);
    let mut kv = PackedKv::new(tk, heads, d).unwrap();
    kv.pack(be.isa(), &vals(tk * d, 1), &vals(tk * d, 2))
        .unwrap();
    // Bytes of keys and values a step reads.
    g.throughput(Throughput::Bytes((2 * 2 * tk * d) as u64));
    for m in [1, 5] {
        let q = vals(m * d, 3);
        let mut out = vec![0.0; m * d];
        g.bench_function(format!("cross_attention_{m}x{tk}"), |b| {
            b.iter(|| be.attention_packed(&q, m, &kv, &mut out).unwrap())
        });
    }
    g.finish();
}

fn encoder_ops(c: &mut Criterion) {
    let mut g = c.benchmark_group("encoder");
    g.sample_size(10);
    let be = CpuBackend::new(2).unwrap();
    let (t, d) = (1500, 384);
    let x = vals(t * d, 3);
    let lin = Linear::new(
        Weight::F32(vals(4 * d * d, 4)),
        Some(vals(4 * d, 5)),
        4 * d,
        d,
    )
    .unwrap();
    let mut out = vec![0.0; t * 4 * d];
    let norm = sotto_compute::Norm {
        gamma: vals(d, 6),
        beta: vals(d, 7),
        eps: 1e-5,
    };
    let mut ln_out = vec![0.0; t * d];
    g.bench_function("layer_norm_1500x384", |b| {
        b.iter(|| be.layer_norm(&x, &norm, &mut ln_out).unwrap())
    });
    g.bench_function("linear_gelu_1500x384x1536_f32", |b| {
        b.iter(|| be.linear_gelu(&x, t, &lin, &mut out).unwrap())
    });
    let l16 = Linear::new(
        Weight::F16(vals(4 * d * d, 4).into_iter().map(f16::from_f32).collect()),
        None,
        4 * d,
        d,
    )
    .unwrap();
    g.bench_function("linear_1500x384x1536_f16_convert_per_call", |b| {
        b.iter(|| be.linear(&x, t, &l16, &mut out).unwrap())
    });
    let (q, k, v) = (vals(t * d, 6), vals(t * d, 7), vals(t * d, 8));
    let mut att = vec![0.0; t * d];
    g.bench_function("attention_1500x1500_6x64", |b| {
        b.iter(|| {
            be.attention(&q, t, &k, &v, t, 6, Mask::None, &mut att)
                .unwrap()
        })
    });
    let mut big = vals(t * 4 * d, 9);
    g.bench_function("gelu_1500x1536", |b| b.iter(|| be.gelu(&mut big)));
    g.finish();
}

/// Encoder self-attention at tiny.en's shape on one thread: f32 vs bf16 and int16 operands.
fn encoder_attention_bf16(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention_bf16");
    g.sample_size(10);
    let be = CpuBackend::new(1).unwrap();
    let (t, nh, dh) = (1500, 6, 64);
    let d = nh * dh;
    let (q, k, v) = (vals(t * d, 6), vals(t * d, 7), vals(t * d, 8));
    let mut att = vec![0.0; t * d];
    // Two products of 2·t²·d flops each.
    g.throughput(Throughput::Elements((4 * t * t * d) as u64));
    g.bench_function("f32_1500x1500_6x64_1t", |b| {
        b.iter(|| {
            be.attention(&q, t, &k, &v, t, nh, Mask::None, &mut att)
                .unwrap()
        })
    });
    g.bench_function("bf16_1500x1500_6x64_1t", |b| {
        b.iter(|| be.attention_bf16(&q, t, &k, &v, t, nh, &mut att).unwrap())
    });
    g.bench_function("mixed_1500x1500_6x64_1t", |b| {
        b.iter(|| be.attention_mixed(&q, t, &k, &v, t, nh, &mut att).unwrap())
    });
    // The int16 encoder's (P·V on 16-bit integers on AVX2; elsewhere the f32 path).
    g.bench_function("int16_1500x1500_6x64_1t", |b| {
        b.iter(|| be.attention_int16(&q, t, &k, &v, t, nh, &mut att).unwrap())
    });
    // The encoder's default on two threads, for the scaling (half the one-thread time is ideal).
    let be2 = CpuBackend::new(2).unwrap();
    g.bench_function("mixed_1500x1500_6x64_2t", |b| {
        b.iter(|| be2.attention_mixed(&q, t, &k, &v, t, nh, &mut att).unwrap())
    });
    // The gemm-crate path that AVX2 keeps (its products still run the gemm crate's own
    // AVX-512 kernels where the CPU has them; only the softmax is 8 lanes wide).
    let gemm_path = CpuBackend::with_isa(1, sotto_compute::Isa::Avx2).unwrap();
    g.bench_function("f32_gemm_avx2_1500x1500_6x64_1t", |b| {
        b.iter(|| {
            gemm_path
                .attention(&q, t, &k, &v, t, nh, Mask::None, &mut att)
                .unwrap()
        })
    });
    g.finish();
}

/// Decoder products on one thread at tiny.en's shapes: tiled f16 against ggml-quantized
/// rows as they are and regrouped (`Weight::for_decoding`); throughput in weight bytes.
fn decoder_quant_1t(c: &mut Criterion) {
    let mut g = c.benchmark_group("decoder_quant_1t");
    let be = CpuBackend::new(1).unwrap();
    for (n, k) in [(51864, 384), (1536, 384), (384, 1536)] {
        let w32 = vals(n * k, 1);
        let w16: Vec<f16> = w32.iter().map(|&v| f16::from_f32(v)).collect();
        let mut weights = vec![(
            "f16_tiled".to_string(),
            Weight::F16(w16).for_decoding(n, k).unwrap(),
            n * k * 2,
        )];
        for t in sotto_compute::QuantType::WEIGHTS {
            let rb = t.row_bytes(k);
            let mut data = vec![0u8; n * rb];
            for (wr, q) in w32.chunks_exact(k).zip(data.chunks_exact_mut(rb)) {
                sotto_quant::quantize_row(t, wr, q);
            }
            let plain = Weight::Quant {
                t,
                data,
                n_out: n,
                n_in: k,
            };
            if t == sotto_compute::QuantType::Q8_0 {
                weights.push((format!("{t}_rows"), plain.clone(), n * rb));
            }
            weights.push((
                format!("{t}_tiled"),
                plain.for_decoding(n, k).unwrap(),
                n * rb,
            ));
        }
        for (name, w, bytes) in weights {
            let lin = Linear::new(w, None, n, k).unwrap();
            g.throughput(Throughput::Bytes(bytes as u64));
            for m in [1, 5] {
                let x = vals(m * k, 2);
                let mut out = vec![0.0; n * m];
                let id = BenchmarkId::new(format!("{name}/m{m}"), format!("{n}x{k}"));
                g.bench_function(id, |b| b.iter(|| be.linear(&x, m, &lin, &mut out).unwrap()));
            }
        }
    }
    g.finish();
}
/// An encoder MLP product at base's shape (1500×512 · 512×2048) on one thread, per weight
/// format of the many-row GEMM: f32 (gemm crate), bf16 and int8 (where the CPU has them).
fn encoder_gemm_formats_1t(c: &mut Criterion) {
    let mut g = c.benchmark_group("encoder_gemm_1t");
    g.sample_size(10);
    let be = CpuBackend::new(1).unwrap();
    let (m, n, k) = (1500, 2048, 512);
    g.throughput(Throughput::Elements((2 * m * n * k) as u64));
    let x = vals(m * k, 3);
    let mut out = vec![0.0; m * n];
    let w = vals(n * k, 4);
    let formats = [
        ("f32", Weight::F32(w.clone())),
        (
            "bf16",
            Weight::F32(w.clone()).for_bf16_gemm(n, k, true).unwrap(),
        ),
        (
            "int8",
            Weight::F32(w.clone()).for_int8_gemm(n, k, true).unwrap(),
        ),
        // The int16 encoder's layout: the AVX2 pair tile with wide levels.
        (
            "int16",
            Weight::F32(w.clone()).for_int16_gemm(n, k).unwrap(),
        ),
        (
            "f32_packed",
            Weight::F32(w.clone()).for_f32_gemm(n, k, true).unwrap(),
        ),
        // An f16 file's weights: f16 panels for the AVX2 tile.
        (
            "f16_packed",
            Weight::F16(w.iter().map(|&v| f16::from_f32(v)).collect())
                .for_f32_gemm(n, k, true)
                .unwrap(),
        ),
    ];
    // Where the bf16 and int8 products run on AMX tiles, their AVX-512 kernels too.
    let avx512 = be
        .amx()
        .then(|| CpuBackend::new(1).unwrap().with_amx(false));
    for (name, weight) in formats {
        if name != "f32" && matches!(weight, Weight::F32(_) | Weight::F16(_)) {
            continue; // this CPU lacks the format's kernel
        }
        let lin = Linear::new(weight, Some(vals(n, 5)), n, k).unwrap();
        let amx = if be.amx() && matches!(name, "bf16" | "int8") {
            "_amx"
        } else {
            ""
        };
        g.bench_function(format!("{name}{amx}_{m}x{k}x{n}"), |b| {
            b.iter(|| be.linear_gelu(&x, m, &lin, &mut out).unwrap())
        });
        if let (Some(be), "_amx") = (&avx512, amx) {
            g.bench_function(format!("{name}_avx512_{m}x{k}x{n}"), |b| {
                b.iter(|| be.linear_gelu(&x, m, &lin, &mut out).unwrap())
            });
        }
    }
    g.finish();
}

/// The encoder's other linear shapes at base's width (an attention projection, and fc2
/// with its deep k), bf16 and int8 where the CPU has them, no GELU, on one thread and on
/// two (what the split into blocks costs).
fn encoder_gemm_shapes(c: &mut Criterion) {
    let mut g = c.benchmark_group("encoder_gemm_shapes");
    g.sample_size(10);
    let backends = [CpuBackend::new(1).unwrap(), CpuBackend::new(2).unwrap()];
    for (m, k, n) in [(1500, 512, 512), (1500, 2048, 512)] {
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        let x = vals(m * k, 3);
        let mut out = vec![0.0; m * n];
        let w = Weight::F32(vals(n * k, 4));
        let formats = [
            ("bf16", w.clone().for_bf16_gemm(n, k, true).unwrap()),
            ("int8", w.clone().for_int8_gemm(n, k, true).unwrap()),
        ];
        for (name, weight) in formats {
            if matches!(weight, Weight::F32(_)) {
                continue; // this CPU lacks the format's kernel
            }
            let lin = Linear::new(weight, Some(vals(n, 5)), n, k).unwrap();
            for be in &backends {
                let t = be.threads();
                g.bench_function(format!("{name}_{t}t_{m}x{k}x{n}"), |b| {
                    b.iter(|| be.linear(&x, m, &lin, &mut out).unwrap())
                });
            }
        }
    }
    g.finish();
}

/// What one rayon fork/join costs at the decoder's op granularity.
fn pool_overhead(c: &mut Criterion) {
    let be = CpuBackend::new(2).unwrap();
    let mut v = [0.0f32; 8];
    c.bench_function("rayon_install_par2_empty", |b| {
        b.iter(|| be.install(|| v.par_chunks_mut(4).for_each(|c| c[0] += 1.0)))
    });
    // 100 ops back to back, as in a decoder step: rayon's fork/joins from inside its pool,
    // and the backend's own pool (which decoder steps use) from the calling thread.
    c.bench_function("rayon_in_pool_par2_empty_x100", |b| {
        b.iter(|| {
            be.install(|| {
                for _ in 0..100 {
                    v.par_chunks_mut(4).for_each(|c| c[0] += 1.0);
                }
            })
        })
    });
    let hits: Vec<std::sync::atomic::AtomicU32> = (0..2).map(|_| Default::default()).collect();
    c.bench_function("team_par_for2_empty_x100", |b| {
        b.iter(|| {
            for _ in 0..100 {
                be.par_for(2, |i| {
                    hits[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                });
            }
        })
    });
}

/// The int8 encoder's products at tiny's width on one thread, each as the encoder calls it
/// (activations quantized per call): q/k/v's shape alone, the out-projection with its
/// residual add, and fc1 with GELU. Against the int8 peak (`sotto bench`), what the
/// quantization, the epilogue and the memory around the tile cost.
fn encoder_int8_ops_1t(c: &mut Criterion) {
    let mut g = c.benchmark_group("encoder_int8_1t");
    g.sample_size(10);
    let be = CpuBackend::new(1).unwrap();
    let (m, d) = (1500, 384);
    for (name, k, n) in [("linear", d, d), ("residual", d, d), ("gelu", d, 4 * d)] {
        let w = Weight::F32(vals(n * k, 4))
            .for_int8_gemm(n, k, true)
            .unwrap();
        if matches!(w, Weight::F32(_)) {
            break; // this CPU lacks the int8 GEMM
        }
        let lin = Linear::new(w, Some(vals(n, 5)), n, k).unwrap();
        let x = vals(m * k, 3);
        let mut out = vals(m * n, 6);
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        g.bench_function(format!("{name}_{m}x{k}x{n}"), |b| match name {
            "linear" => b.iter(|| be.linear(&x, m, &lin, &mut out).unwrap()),
            "residual" => b.iter(|| be.linear_residual(&x, m, &lin, &mut out).unwrap()),
            _ => b.iter(|| be.linear_gelu(&x, m, &lin, &mut out).unwrap()),
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    small_m,
    decoder_linear,
    prompt_linear_1t,
    prompt_cross_attention_1t,
    encoder_ops,
    encoder_attention_bf16,
    encoder_gemm_formats_1t,
    encoder_gemm_shapes,
    encoder_int8_ops_1t,
    decoder_quant_1t,
    step_cross_attention_1t,
    pool_overhead
);
criterion_main!(benches);
