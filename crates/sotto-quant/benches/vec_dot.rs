//! `cargo bench -p sotto-quant`: one weight row against quantized activations, per type
//! and per ISA path, at Whisper's widths (384 = tiny, 1536 = tiny's MLP, 4096).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sotto_quant::{quantize_activations, quantize_row, vec_dot, QuantType};

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 2.0 - 1.0
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    for t in QuantType::WEIGHTS {
        let mut group = c.benchmark_group(format!("vec_dot/{t}"));
        for n in [384usize, 1536, 4096] {
            let mut w = vec![0u8; t.row_bytes(n)];
            quantize_row(t, &data(n, 1), &mut w);
            let mut act = vec![0u8; t.activation_type().row_bytes(n)];
            quantize_activations(t, &data(n, 2), &mut act);
            group.throughput(Throughput::Elements(n as u64));
            for isa in sotto_isa::available() {
                group.bench_with_input(BenchmarkId::new(isa.name(), n), &n, |b, &n| {
                    b.iter(|| vec_dot(isa, t, n, black_box(&w), black_box(&act)))
                });
            }
        }
        group.finish();
    }
    let x = data(1536, 3);
    let mut out = vec![0u8; QuantType::Q8_0.row_bytes(1536)];
    c.bench_function("quantize_activations/q8_0/1536", |b| {
        b.iter(|| quantize_activations(QuantType::Q8_0, black_box(&x), &mut out))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
