//! The audio front end on short clips, what a server answers most: an upload of 5 s of
//! 48 kHz stereo WAV decoded and resampled to 16 kHz (the mix alone, and with the two
//! channels kept apart as `--diarize` keeps them), and the log-mel of one 30 s window.
//!
//! `cargo bench -p sotto-audio --bench front` (on a quiet machine).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

/// 5 s of 48 kHz stereo 16-bit WAV: a tone on the left, another on the right.
fn upload() -> Vec<u8> {
    let (rate, n) = (48_000u32, 5 * 48_000usize);
    let mut wav = Vec::with_capacity(44 + 4 * n);
    let data = (4 * n) as u32;
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&2u16.to_le_bytes());
    wav.extend_from_slice(&rate.to_le_bytes());
    wav.extend_from_slice(&(rate * 4).to_le_bytes());
    wav.extend_from_slice(&4u16.to_le_bytes());
    wav.extend_from_slice(&16u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&data.to_le_bytes());
    for i in 0..n {
        let t = i as f32 / rate as f32;
        for f in [440.0, 1250.0] {
            let v = (0.4 * (2.0 * std::f32::consts::PI * f * t).sin() * 32767.0) as i16;
            wav.extend_from_slice(&v.to_le_bytes());
        }
    }
    wav
}

fn bench(c: &mut Criterion) {
    let wav = upload();
    let mut group = c.benchmark_group("front");
    group.sample_size(30);
    group.throughput(Throughput::Elements(5));
    for (name, keep) in [
        ("upload_5s_48k_stereo", false),
        ("upload_5s_48k_stereo/diarize", true),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                sotto_audio::decode_bytes_16k_within("up.wav", wav.clone(), None, 600.0, keep)
                    .unwrap()
            })
        });
    }
    let window = sotto_audio::decode_bytes_16k_mono("up.wav", wav.clone()).unwrap();
    let window: Vec<f32> = window.iter().copied().cycle().take(30 * 16_000).collect();
    group.throughput(Throughput::Elements(30));
    group.bench_function("log_mel_30s", |b| {
        b.iter(|| sotto_audio::log_mel_spectrogram(black_box(&window), 80, 160))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
