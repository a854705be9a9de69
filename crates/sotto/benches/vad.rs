//! `cargo bench -p sotto --bench vad`: the Silero VAD over a minute of audio (jfk.wav and
//! silence, repeated), on every core and on one thread; and faster-whisper's post-processing
//! of the window probabilities into speech stretches.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use sotto::Vad;

/// One minute: jfk (11 s) then 4 s of silence, four times.
fn minute() -> Vec<f32> {
    let jfk = sotto::audio::load_16k_mono(sotto_testdata::jfk().to_str().unwrap()).unwrap();
    let mut audio = Vec::with_capacity(60 * 16_000);
    while audio.len() < 60 * 16_000 {
        audio.extend_from_slice(&jfk);
        audio.resize(audio.len() + 4 * 16_000, 0.0);
    }
    audio.truncate(60 * 16_000);
    audio
}

fn bench(c: &mut Criterion) {
    let vad = Vad::load(&sotto_testdata::vad_model()).unwrap();
    let audio = minute();
    let mut group = c.benchmark_group("vad");
    group.sample_size(20);
    group.throughput(Throughput::Elements(60));
    group.bench_function("probabilities/60s/all-cores", |b| {
        b.iter(|| vad.probabilities(black_box(&audio)).unwrap())
    });
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    group.bench_function("probabilities/60s/1-thread", |b| {
        b.iter(|| one.install(|| vad.probabilities(black_box(&audio)).unwrap()))
    });
    let probs = vad.probabilities(&audio).unwrap();
    group.bench_function("speech_timestamps/60s", |b| {
        b.iter(|| {
            sotto::audio::vad::speech_timestamps(black_box(&probs), audio.len(), &vad.options)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
