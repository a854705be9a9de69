//! `cargo bench -p sotto-quant --bench tiled`: the grouped small-M kernel at tiny.en's
//! decoder shapes (vocabulary 51864×384, MLP 1536×384 and 384×1536), m = 1 and 5 input
//! rows, one thread, best ISA path; throughput in weight bytes.

use criterion::measurement::WallTime;
use criterion::{
    black_box, criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use sotto_quant::{
    quantize_row, tiled_matmul, tiled_matmul_split, QuantActs, QuantTiles, QuantType, GROUP_ROWS,
};

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

/// `n` rows of `k` random values quantized to `t`, grouped for the kernels.
fn weights(t: QuantType, n: usize, k: usize) -> QuantTiles {
    let rb = t.row_bytes(k);
    let mut rows = vec![0u8; n * rb];
    for (r, q) in rows.chunks_exact_mut(rb).enumerate() {
        quantize_row(t, &data(k, r as u32 + 1), q);
    }
    QuantTiles::new(t, &rows, n, k)
}

/// Times `w` (`n` rows of `k`) against 1 and 5 input rows, their activations prepared on
/// every call: quantized to its type, or (`split`) split for the screen's kernel.
fn rows(group: &mut BenchmarkGroup<WallTime>, w: &QuantTiles, (n, k): (usize, usize), split: bool) {
    let (isa, t) = (sotto_isa::isa(), w.quant_type());
    group.throughput(Throughput::Bytes(w.data().len() as u64));
    for m in [1usize, 5] {
        let x = data(m * k, 99);
        let mut acts = QuantActs::new();
        let ldo = w.groups() * GROUP_ROWS;
        let mut out = vec![0.0f32; m * ldo];
        let id = BenchmarkId::new(format!("{}/m{m}", isa.name()), format!("{n}x{k}"));
        group.bench_function(id, |b| {
            b.iter(|| {
                if split {
                    acts.split_q8(black_box(&x), m, k);
                    tiled_matmul_split(isa, w, 0..w.groups(), &acts, &mut out, ldo);
                } else {
                    acts.quantize(t, black_box(&x), m, k);
                    tiled_matmul(isa, w, 0..w.groups(), &acts, &mut out, ldo);
                }
            })
        });
    }
}

fn bench(c: &mut Criterion) {
    for t in QuantType::WEIGHTS {
        let mut group = c.benchmark_group(format!("tiled_matmul/{t}"));
        for (n, k) in [(51864usize, 384usize), (1536, 384), (384, 1536)] {
            rows(&mut group, &weights(t, n, k), (n, k), false);
        }
        group.finish();
    }
}

/// The vocabulary screen of an f16 base model (51864×512 q8_0, split activations: each
/// input row and what its q8_0 codes miss), greedy's one row and five beams'.
fn screen(c: &mut Criterion) {
    let (n, k) = (51864usize, 512usize);
    let mut group = c.benchmark_group("tiled_matmul_split/q8_0");
    rows(&mut group, &weights(QuantType::Q8_0, n, k), (n, k), true);
    group.finish();
}

criterion_group!(benches, bench, screen);
criterion_main!(benches);
