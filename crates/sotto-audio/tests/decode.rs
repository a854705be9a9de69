//! Decoding, downmixing, resampling and error reporting on generated WAVs and the fixtures
//! made by scripts/make-audio-fixtures.sh.

use std::f64::consts::PI;
use std::path::{Path, PathBuf};

use sotto_audio::{
    decode_bytes, decode_file, decode_file_keeping_stereo, decode_reader, load_16k_mono,
    resample_to_16k,
};

/// A fresh scratch folder for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sotto-audio-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Phase in f64: an f32 phase would itself be off by ~1e-3 rad after a second.
fn sine(freq: f64, rate: u32, n: usize, amp: f64) -> Vec<f32> {
    (0..n)
        .map(|i| (amp * (2.0 * PI * freq * i as f64 / f64::from(rate)).sin()) as f32)
        .collect()
}

/// Writes 16-bit interleaved PCM with hound.
fn write_wav(path: &Path, rate: u32, channels: &[Vec<f32>]) {
    let spec = hound::WavSpec {
        channels: channels.len() as u16,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for i in 0..channels.first().map_or(0, Vec::len) {
        for ch in channels {
            w.write_sample((ch[i] * 32767.0).round() as i16).unwrap();
        }
    }
    w.finalize().unwrap();
}

/// Largest deviation from `amp * sin(2 pi f n / 16000)`, away from the filter's edge effects.
fn max_error_vs_sine(y: &[f32], freq: f64, amp: f64) -> f32 {
    let ideal = sine(freq, 16000, y.len(), amp);
    let edge = 400;
    y[edge..y.len() - edge]
        .iter()
        .zip(&ideal[edge..])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

#[test]
fn stereo_44k_wav_downmixes_and_resamples_to_16k() {
    let dir = scratch("stereo");
    let path = dir.join("stereo.wav");
    let n = 44100 * 2;
    let left = sine(1000.0, 44100, n, 0.8);
    let right = vec![0.0; n];
    write_wav(&path, 44100, &[left.clone(), right]);

    let audio = decode_file(&path).unwrap();
    assert_eq!(audio.sample_rate, 44100);
    assert_eq!(audio.channels_in, 2);
    assert_eq!(audio.samples.len(), n);
    assert!((audio.duration_s - 2.0).abs() < 1e-9);
    // Mean of the channels: half the left channel, to 16-bit precision.
    for (got, l) in audio.samples.iter().zip(&left) {
        assert!(
            (got - l / 2.0).abs() < 1.0 / 32768.0,
            "{got} vs {}",
            l / 2.0
        );
    }

    let y = resample_to_16k(&audio.samples, 44100).unwrap();
    assert_eq!(y.len(), 32000);
    let err = max_error_vs_sine(&y, 1000.0, 0.4);
    eprintln!("44100 Hz -> 16 kHz: 1 kHz sine max error {err:e}");
    assert!(
        err < 2e-4,
        "1 kHz sine after 44.1 -> 16 kHz: max error {err}"
    );

    let via_path = load_16k_mono(path.to_str().unwrap()).unwrap();
    assert_eq!(via_path, y);
    assert!(audio.stereo.is_none(), "channels kept only when asked for");

    // The channels apart too (for --diarize), each resampled as the mix is.
    let kept = sotto_audio::load_16k(path.to_str().unwrap(), true).unwrap();
    assert_eq!(kept.mono, y);
    let [l16, r16] = kept.stereo.expect("two channels kept");
    // The mix is half the left channel, and resampling is linear.
    assert_eq!(l16.len(), y.len());
    let off = l16
        .iter()
        .zip(&y)
        .map(|(l, m)| (l - 2.0 * m).abs())
        .fold(0.0, f32::max);
    assert!(off < 1e-5, "left channel vs twice the mix: {off}");
    assert!(r16.iter().all(|&v| v == 0.0) && r16.len() == y.len());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn common_rates_resample_with_low_error() {
    for rate in [8000u32, 11025, 22050, 24000, 32000, 48000, 96000] {
        let n = rate as usize + 123;
        let x = sine(1000.0, rate, n, 0.5);
        let y = resample_to_16k(&x, rate).unwrap();
        let want = ((n as u64 * 16000 + rate as u64 / 2) / rate as u64) as usize;
        assert_eq!(y.len(), want, "rate {rate}");
        let err = max_error_vs_sine(&y, 1000.0, 0.5);
        eprintln!("{rate} Hz -> 16 kHz: 1 kHz sine max error {err:e}");
        assert!(err < 5e-4, "rate {rate}: max error {err}");
    }
    let x = sine(1000.0, 16000, 1000, 0.5);
    assert_eq!(resample_to_16k(&x, 16000).unwrap(), x);
}

/// Resampling to 16 kHz gives FFmpeg's samples (libswresample's defaults, which
/// faster-whisper's PyAV and openai-whisper's ffmpeg CLI use): 8 kHz speech up (G.729,
/// which FFmpeg passes to 4 kHz and a little past, where a steep filter would cut at 3.8)
/// and 22.05 kHz stereo tones down, ends included. faster-whisper's `decode_audio` gives
/// sotto's to within its 16-bit rounding (0.5 of a step); the ffmpeg CLI's 16-bit path,
/// which made these fixtures, rounds its taps and sums otherwise: within 4 steps (the
/// steep filter missed by 300).
#[test]
fn resampling_gives_ffmpegs_samples() {
    for (name, want) in [
        ("speech.g729", "speech.g729.16k.flac"),
        ("tones.flac", "tones.16k.flac"),
    ] {
        let got = sotto_audio::load_16k(fixture(name).to_str().unwrap(), true).unwrap();
        let want = decode_file_keeping_stereo(&fixture(want)).unwrap();
        assert_eq!(want.sample_rate, 16_000);
        let pairs: Vec<(&[f32], &[f32])> = match (&got.stereo, &want.stereo) {
            (Some([gl, gr]), Some([wl, wr])) => vec![(gl, wl), (gr, wr)],
            _ => vec![(&got.mono, &want.samples)],
        };
        for (g, w) in pairs {
            assert_eq!(g.len(), w.len(), "{name}");
            let worst = max_difference(g, w) * 32768.0;
            eprintln!("{name}: {worst} steps");
            assert!(worst <= 4.0, "{name}: {worst} steps");
        }
    }
}

#[test]
fn resampling_removes_content_above_8k() {
    // A 10 kHz tone at 48 kHz is above the 16 kHz Nyquist: it must not alias into the output.
    let x = sine(10_000.0, 48000, 48000, 0.5);
    let y = resample_to_16k(&x, 48000).unwrap();
    let peak = y[400..y.len() - 400]
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()));
    eprintln!("10 kHz at 48 kHz -> 16 kHz: alias peak {peak:e}");
    assert!(peak < 1e-3, "alias peak {peak}");
}

/// Best alignment of `decoded` (which may start late by an encoder delay) against `source`,
/// and the signal-to-noise ratio there in dB.
fn aligned_snr_db(source: &[f32], decoded: &[f32], max_lag: usize) -> (usize, f64) {
    let score = |lag: usize| -> f64 {
        source
            .iter()
            .zip(decoded.iter().skip(lag))
            .map(|(a, b)| f64::from(a * b))
            .sum()
    };
    let lag = (0..=max_lag.min(decoded.len()))
        .max_by(|&a, &b| score(a).total_cmp(&score(b)))
        .unwrap();
    let (mut sig, mut noise) = (0f64, 0f64);
    for (a, b) in source.iter().zip(decoded.iter().skip(lag)) {
        sig += f64::from(a * a);
        noise += f64::from((a - b) * (a - b));
    }
    (lag, 10.0 * (sig / noise.max(1e-30)).log10())
}

#[test]
fn flac_mp3_ogg_fixtures_decode_like_the_wav_source() {
    let wav = decode_file(&fixture("tones.wav")).unwrap();
    assert_eq!((wav.sample_rate, wav.channels_in), (22050, 2));
    assert_eq!(wav.samples.len(), 11025);

    let flac = decode_file(&fixture("tones.flac")).unwrap();
    assert_eq!(flac, wav, "FLAC is lossless");

    for (name, min_snr) in [("tones.mp3", 15.0), ("tones.ogg", 15.0)] {
        let lossy = decode_file(&fixture(name)).unwrap();
        assert_eq!((lossy.sample_rate, lossy.channels_in), (22050, 2), "{name}");
        let extra = lossy.samples.len() as i64 - wav.samples.len() as i64;
        assert!(
            (0..=2400).contains(&extra),
            "{name}: {extra} samples more than the source"
        );
        let (lag, snr) = aligned_snr_db(&wav.samples, &lossy.samples, 2400);
        eprintln!(
            "{name}: {} samples, lag {lag}, SNR {snr:.1} dB",
            lossy.samples.len()
        );
        assert!(snr > min_snr, "{name}: SNR {snr:.1} dB at lag {lag}");
    }
}

/// Opus (which symphonia demuxes but does not decode: `opus.rs`) against libopus's own
/// decoder: `tones.opus.flac` is `opusdec --rate 48000 tones.opus` (16-bit, kept as FLAC). Same length
/// (the pre-skip dropped, the end padding trimmed), same samples to 16-bit precision, each
/// channel and the mix. The same packets in MP4 (`dOps`, its fields big-endian; the edit
/// list dropping the pre-skip, not the decoder too) decode to the same samples.
#[test]
fn opus_decodes_as_libopus_does() {
    let ours = decode_file_keeping_stereo(&fixture("tones.opus")).unwrap();
    let mp4 = decode_file_keeping_stereo(&fixture("tones.opus.mp4")).unwrap();
    assert_eq!(mp4, ours, "Opus in MP4");
    let libopus = decode_file_keeping_stereo(&fixture("tones.opus.flac")).unwrap();
    assert_eq!((ours.sample_rate, ours.channels_in), (48_000, 2));
    assert_eq!((libopus.sample_rate, libopus.channels_in), (48_000, 2));
    assert_eq!(ours.samples.len(), libopus.samples.len());
    assert_eq!(ours.samples.len(), 24_000, "0.5 s at 48 kHz");
    let ([l, r], [rl, rr]) = (ours.stereo.unwrap(), libopus.stereo.unwrap());
    for (what, a, b) in [
        ("mix", &ours.samples, &libopus.samples),
        ("left", &l, &rl),
        ("right", &r, &rr),
    ] {
        let d = max_difference(a, b);
        assert!(d < 1e-4, "{what}: {d} from libopus's decode");
    }

    // At 16 kHz (decoded at 48 kHz, then resampled) as libopus's own decode at 16 kHz
    // (`opusdec --rate 16000`, where CELT keeps its bands below 8 kHz and every third
    // sample): within 5e-4 (the 16-bit rounding and the edges); two 48 kHz samples of
    // misalignment would be off by 0.19.
    let ours = sotto_audio::load_16k(fixture("tones.opus").to_str().unwrap(), true).unwrap();
    let libopus = decode_file_keeping_stereo(&fixture("tones.opus.16k.flac")).unwrap();
    assert_eq!(libopus.sample_rate, 16_000);
    assert_eq!(ours.mono.len(), 8_000, "0.5 s at 16 kHz");
    let ([l, r], [rl, rr]) = (ours.stereo.unwrap(), libopus.stereo.unwrap());
    for (what, a, b) in [
        ("mix", &ours.mono, &libopus.samples),
        ("left", &l, &rl),
        ("right", &r, &rr),
    ] {
        assert_eq!(a.len(), b.len(), "{what}");
        let d = max_difference(a, b);
        assert!(d < 1e-3, "{what} at 16 kHz: {d} from libopus's decode");
    }
}

/// Opus in WebM (Matroska, as browsers record it) and AAC in MP4 (`.m4a`, as phones
/// record it), made from `tones.wav` by ffmpeg: the source's tones at 16 kHz, in time.
/// 5.1 Opus (mapping family 1: four streams a packet) decodes as libopus does
/// (`opusdec --no-dither`, its six channels in a WAVE_FORMAT_EXTENSIBLE file), mixed down.
#[test]
fn surround_opus_decodes_as_libopus_does() {
    let ours = decode_file_keeping_stereo(&fixture("tones.51.opus")).unwrap();
    let libopus = decode_file_keeping_stereo(&fixture("tones.51.opus.flac")).unwrap();
    assert_eq!((ours.sample_rate, ours.channels_in), (48_000, 6));
    assert_eq!(libopus.channels_in, 6);
    assert_eq!(ours.samples.len(), libopus.samples.len());
    // The mix, and the front left and right channels (first in WAV's order, as opusdec
    // writes them, and as `--diarize` reads them).
    let ([l, r], [rl, rr]) = (ours.stereo.unwrap(), libopus.stereo.unwrap());
    for (what, a, b) in [
        ("mix", &ours.samples, &libopus.samples),
        ("left", &l, &rl),
        ("right", &r, &rr),
    ] {
        let d = max_difference(a, b);
        assert!(d < 1e-4, "{what}: {d} from libopus's decode");
        assert!(a.iter().any(|v| v.abs() > 0.1), "{what}: not silence");
    }
}

/// AAC past AAC-LC in stereo decodes as FFmpeg (so faster-whisper) does, to within a
/// step of the 16-bit reference (FFmpeg's decode, in FLAC): 5.1 in MP4, as films carry
/// it, and HE-AAC v2 in ADTS frames (SBR doubling the 11.025 kHz core's rate, parametric
/// stereo making two channels of one, both signalled only in the frames). The mix, and
/// the front left and right (first, in FFmpeg's order, as `--diarize` reads them).
#[test]
fn surround_and_he_aac_decode_as_ffmpeg_does() {
    for (name, channels) in [("tones.51.m4a", 6), ("tones.he.aac", 2)] {
        let ours = decode_file_keeping_stereo(&fixture(name)).unwrap();
        let ffmpeg = decode_file_keeping_stereo(&fixture(&format!("{name}.flac"))).unwrap();
        assert_eq!(
            (ours.sample_rate, ours.channels_in),
            (22_050, channels),
            "{name}"
        );
        assert_eq!(ffmpeg.channels_in, channels, "{name}");
        // FFmpeg keeps the MP4's padding past the edit list's end, which we cut.
        let n = ours.samples.len();
        assert!(
            (n..=n + 1024).contains(&ffmpeg.samples.len()),
            "{name}: {n} samples, FFmpeg {}",
            ffmpeg.samples.len()
        );
        let ([l, r], [fl, fr]) = (ours.stereo.unwrap(), ffmpeg.stereo.unwrap());
        for (what, a, b) in [
            ("mix", &ours.samples, &ffmpeg.samples),
            ("left", &l, &fl),
            ("right", &r, &fr),
        ] {
            let d = max_difference(a, b);
            assert!(d < 1e-4, "{name} {what}: {d} from FFmpeg's decode");
            assert!(
                a.iter().any(|v| v.abs() > 0.1),
                "{name} {what}: not silence"
            );
        }
        // The two sides are the source's two (a tone, a sweep), not one copied.
        let apart = max_difference(&l, &r);
        assert!(apart > 0.1, "{name}: left and right the same");
    }
}

/// AC-3 and E-AC-3 decode as FFmpeg's decoder does: 5.1 (coupling, an LFE; E-AC-3's
/// frame-level strategies), the mix and the front pair, to within the dither both
/// decoders add where a coefficient has no bits (random, and not the same random: A/52
/// leaves the generator to the decoder). E-AC-3 in MP4 (`ec-3`) and WAV (FFmpeg's Dolby
/// Digital Plus sub-format, as in AVI) decodes as its frames do.
#[test]
fn ac3_decodes_as_ffmpeg_does() {
    for name in ["tones.51.ac3", "tones.51.eac3"] {
        ac3_matches_ffmpeg(name);
    }
    let frames = decode_file(&fixture("tones.51.eac3")).unwrap();
    for name in ["tones.51.eac3.mp4", "tones.51.eac3.wav"] {
        let contained = decode_file(&fixture(name)).unwrap();
        assert!(contained.samples == frames.samples, "{name}");
    }
}

fn ac3_matches_ffmpeg(name: &str) {
    let ours = decode_file_keeping_stereo(&fixture(name)).unwrap();
    let ffmpeg = decode_file_keeping_stereo(&fixture(&format!("{name}.flac"))).unwrap();
    assert_eq!((ours.sample_rate, ours.channels_in), (32_000, 6), "{name}");
    assert_eq!(ours.samples.len(), ffmpeg.samples.len(), "{name}");
    let ([l, r], [fl, fr]) = (ours.stereo.unwrap(), ffmpeg.stereo.unwrap());
    for (what, a, b) in [
        ("mix", &ours.samples, &ffmpeg.samples),
        ("left", &l, &fl),
        ("right", &r, &fr),
    ] {
        let (signal, noise) = a.iter().zip(b).fold((0f64, 0f64), |(s, n), (x, y)| {
            (s + f64::from(*y).powi(2), n + f64::from(x - y).powi(2))
        });
        let snr = 10.0 * (signal / noise).log10();
        let d = max_difference(a, b);
        eprintln!("{name} {what}: SNR {snr:.1} dB, max difference {d}");
        assert!(
            snr > 60.0 && d < 2e-3,
            "{name} {what}: SNR {snr:.1} dB, {d} apart"
        );
        assert!(
            a.iter().any(|v| v.abs() > 0.1),
            "{name} {what}: not silence"
        );
    }
}

/// More than two channels mix to mono as FFmpeg's resampler mixes them (so as
/// faster-whisper's `decode_audio` hears them: checked to one step of 16 bits), the centre
/// weighed most and the LFE not at all: the 5.1 FLAC against `ffmpeg -ac 1`'s mix of it;
/// and 5.1 from every decoder that names its channels, AC-3 and AAC as FLAC does.
#[test]
fn surround_mixes_to_mono_as_ffmpeg_does() {
    let ours = decode_file(&fixture("tones.51.ac3.flac")).unwrap();
    let ffmpeg = decode_file(&fixture("tones.51.ac3.mono.flac")).unwrap();
    assert_eq!((ours.channels_in, ffmpeg.channels_in), (6, 1));
    assert_eq!(ours.samples.len(), ffmpeg.samples.len());
    let d = max_difference(&ours.samples, &ffmpeg.samples);
    assert!(d < 1e-4, "{d} from FFmpeg's mix");
    // The AC-3 itself mixes as its FLAC decode does (its own dither apart).
    let ac3 = decode_file(&fixture("tones.51.ac3")).unwrap();
    let d = max_difference(&ac3.samples, &ffmpeg.samples);
    assert!(d < 2e-3, "AC-3: {d} from FFmpeg's mix");
}

/// MPEG audio Layer II decodes as FFmpeg decodes it (to about one 16-bit step: FFmpeg's
/// default MP2 decoder is fixed-point), mono at 384 kb/s (what FFmpeg writes by default,
/// which the standard does not pair and symphonia refused), joint stereo with a CRC
/// (TwoLAME's), and in MP4 (named MP3) and QuickTime (`.mp2`).
#[test]
fn mp2_decodes_as_ffmpeg_does() {
    let step = 1.0 / 32768.0;
    for (name, reference) in [
        ("tones.mono.mp2", "tones.mono.mp2.flac"),
        ("tones.mp2.mp4", "tones.mono.mp2.flac"),
        ("tones.mp2.mov", "tones.mono.mp2.flac"),
        ("speech.joint.mp2", "speech.joint.mp2.flac"),
    ] {
        let ours = decode_file_keeping_stereo(&fixture(name)).unwrap();
        let ffmpeg = decode_file_keeping_stereo(&fixture(reference)).unwrap();
        assert_eq!(
            (ours.sample_rate, ours.channels_in),
            (ffmpeg.sample_rate, ffmpeg.channels_in),
            "{name}"
        );
        let pairs = match (&ours.stereo, &ffmpeg.stereo) {
            (Some([l, r]), Some([fl, fr])) => vec![(l, fl), (r, fr)],
            _ => vec![(&ours.samples, &ffmpeg.samples)],
        };
        for (a, b) in pairs {
            assert_eq!(a.len(), b.len(), "{name}");
            let d = max_difference(a, b);
            assert!(d < 2.0 * step, "{name}: {} steps from FFmpeg", d / step);
        }
        assert!(
            ours.samples.iter().any(|v| v.abs() > 0.05),
            "{name}: silent"
        );
    }
}

/// DTS decodes as FFmpeg's decoder does: 5.1 (an LFE, ADPCM prediction, transients) mixed
/// to mono as FFmpeg mixes it, and stereo channel by channel, each to half a step of 16
/// bits (the FLAC decodes' rounding: the two decoders' floats agree to ~1e-7).
#[test]
fn dts_decodes_as_ffmpeg_does() {
    let ours = decode_file(&fixture("tones.51.dts")).unwrap();
    let ffmpeg = decode_file(&fixture("tones.51.dts.mono.flac")).unwrap();
    assert_eq!((ours.sample_rate, ours.channels_in), (22_050, 6));
    assert_eq!(ours.samples.len(), ffmpeg.samples.len());
    let d = max_difference(&ours.samples, &ffmpeg.samples);
    assert!(d < 2e-5, "5.1: {d} from FFmpeg's mix");
    assert!(ours.samples.iter().any(|v| v.abs() > 0.1), "not silence");

    let ours = decode_file_keeping_stereo(&fixture("tones.dts.mkv")).unwrap();
    let ffmpeg = decode_file_keeping_stereo(&fixture("tones.dts.mkv.flac")).unwrap();
    assert_eq!((ours.sample_rate, ours.channels_in), (22_050, 2));
    let ([l, r], [fl, fr]) = (ours.stereo.unwrap(), ffmpeg.stereo.unwrap());
    assert_eq!(l.len(), fl.len());
    for (what, a, b) in [("left", &l, &fl), ("right", &r, &fr)] {
        let d = max_difference(a, b);
        assert!(d < 2e-5, "{what}: {d} from FFmpeg's");
    }
    assert!(max_difference(&l, &r) > 0.1, "left and right the same");
}

/// The coding tools FFmpeg's encoder never writes decode as FFmpeg's decoder decodes them:
/// its frames rewritten by `scripts/dts-tools-fixture.py` with Huffman-coded scale factors
/// (all five books) and bit allocations, transients, scale adjustments, high-frequency VQ,
/// joint intensity, 128x LFE, CRC and dynamic range words, DSYNC after every subsubframe,
/// sum/difference pairs, the perfect-reconstruction filter and no predictor history.
#[test]
fn dts_coding_tools_decode_as_ffmpeg_does() {
    let ours = decode_file(&fixture("tones.51.tools.dts")).unwrap();
    let ffmpeg = decode_file(&fixture("tones.51.tools.dts.mono.flac")).unwrap();
    assert_eq!((ours.sample_rate, ours.channels_in), (22_050, 6));
    assert_eq!(ours.samples.len(), ffmpeg.samples.len());
    let d = max_difference(&ours.samples, &ffmpeg.samples);
    assert!(d < 2e-5, "{d} from FFmpeg's mix");
    assert!(ours.samples.iter().any(|v| v.abs() > 0.1), "not silence");
}

/// TrueHD (Blu-ray's lossless track) and MLP (DVD-Audio's) decode to FFmpeg's samples bit
/// for bit: stereo TrueHD (24-bit) and MLP (16-bit) channel by channel against FLAC
/// copies of FFmpeg's decodes, the same TrueHD as a `.thd` file, and 5.1 TrueHD (two
/// substreams: the stereo mix and the 5.1) mixed to mono as FFmpeg mixes it.
#[test]
fn truehd_and_mlp_decode_as_ffmpeg_does() {
    for (name, rate) in [("tones.thd.mka", 44_100), ("tones.mlp.mka", 44_100)] {
        let ours = decode_file_keeping_stereo(&fixture(name)).unwrap();
        let ffmpeg = decode_file_keeping_stereo(&fixture(&format!("{name}.flac"))).unwrap();
        assert_eq!((ours.sample_rate, ours.channels_in), (rate, 2), "{name}");
        assert_eq!(ours.stereo, ffmpeg.stereo, "{name}");
        let [l, r] = ours.stereo.as_ref().unwrap();
        assert!(
            max_difference(l, r) > 0.1,
            "{name}: left and right the same"
        );
    }
    // The same access units alone (a `.thd` file, as mkvextract writes them).
    let units = decode_file(&fixture("tones.thd")).unwrap();
    let mka = decode_file(&fixture("tones.thd.mka")).unwrap();
    assert_eq!(units.samples, mka.samples);
    let ours = decode_file(&fixture("tones.51.thd.mka")).unwrap();
    let ffmpeg = decode_file(&fixture("tones.51.thd.mka.mono.flac")).unwrap();
    assert_eq!((ours.sample_rate, ours.channels_in), (44_100, 6));
    assert_eq!(ours.samples.len(), ffmpeg.samples.len());
    let d = max_difference(&ours.samples, &ffmpeg.samples);
    assert!(d < 2e-5, "5.1: {d} from FFmpeg's mix");
    assert!(ours.samples.iter().any(|v| v.abs() > 0.1), "not silence");
}

/// A Blu-ray's TrueHD track in a transport stream (stream type 0x83), its access units
/// in PES packets of one PID with an AC-3 copy's, told apart by the PES extension's
/// stream id: the TrueHD decodes, as from its `.thd` file.
#[test]
fn blu_ray_truehd_in_a_transport_stream_decodes() {
    let thd = std::fs::read(fixture("tones.thd")).unwrap();
    let ac3 = std::fs::read(fixture("tones.ac3")).unwrap();
    let packet = |pid: u16, start: bool, payload: &[u8]| {
        let mut p = vec![
            0x47,
            u8::from(start) << 6 | (pid >> 8) as u8,
            pid as u8,
            0x30,
        ];
        p.push((183 - payload.len()) as u8); // an adaptation field stuffs the rest
        if payload.len() < 183 {
            p.push(0);
            p.resize(188 - payload.len(), 0xFF);
        }
        p.extend_from_slice(payload);
        p
    };
    let psi = |table: &[u8]| [&[0u8][..], table, &[0; 4]].concat();
    let mut ts = packet(
        0,
        true,
        &psi(&[0, 0xB0, 13, 0, 1, 0xC1, 0, 0, 0, 1, 0xF0, 0]),
    );
    let pmt = [
        2, 0xB0, 18, 0, 1, 0xC1, 0, 0, 0xE1, 1, 0xF0, 0, 0x83, 0xE1, 1, 0xF0, 0,
    ];
    ts.extend(packet(0x1000, true, &psi(&pmt)));
    let mut emit = |id: u8, body: &[u8]| {
        // Stream id 0xFD; a PTS and the extension that names the substream.
        let head = [
            0, 0, 1, 0xFD, 0, 0, 0x80, 0x81, 8, 0x21, 0, 1, 0, 1, 0x01, 0x81, id,
        ];
        let pes = [&head[..], body].concat();
        for (i, chunk) in pes.chunks(180).enumerate() {
            ts.extend(packet(0x101, i == 0, chunk));
        }
    };
    let mut units = &thd[..];
    let mut copy = ac3.chunks(768);
    while units.len() >= 4 {
        // Four access units a PES packet, then a piece of the AC-3 copy.
        let mut len = 0;
        for _ in 0..4 {
            if len + 4 <= units.len() {
                len += usize::from(u16::from_be_bytes([units[len], units[len + 1]]) & 0xFFF) * 2;
            }
        }
        let (these, rest) = units.split_at(len.min(units.len()));
        emit(0x72, these);
        if let Some(frames) = copy.next() {
            emit(0x76, frames);
        }
        units = rest;
    }
    let got = decode_bytes("bd.m2ts", ts, None).unwrap();
    let want = decode_file(&fixture("tones.thd")).unwrap();
    assert_eq!(got.samples, want.samples);
}

/// DTS in every container that carries it decodes to what its frames decode to: Matroska's
/// and MP4's tracks (which symphonia's readers leave unnamed), a transport stream's
/// (Blu-ray's stream type 0x82), a WAV file's (format 0x2001); and the frames in each of
/// their other word forms (16-bit little-endian, and the 14-bit words of DTS audio CDs).
#[test]
fn dts_of_every_container_and_word_form_decodes_alike() {
    let frames = decode_file(&fixture("tones.dts.mkv")).unwrap();
    for name in ["tones.dts.mp4", "tones.dts.ts", "tones.dts.wav"] {
        let other = decode_file(&fixture(name)).unwrap();
        assert_eq!(other.samples, frames.samples, "{name}");
    }
    let be = std::fs::read(fixture("tones.51.dts")).unwrap();
    let want = decode_bytes("be.dts", be.clone(), None).unwrap();
    let mut le = be.clone();
    le.chunks_exact_mut(2).for_each(|w| w.swap(0, 1));
    let got = decode_bytes("le.dts", le, None).unwrap();
    assert_eq!(got.samples, want.samples, "16-bit little-endian");
    for little in [false, true] {
        let got = decode_bytes("14.dts", fourteen_bit_words(&be, little), None).unwrap();
        assert_eq!(got.samples, want.samples, "14-bit, little-endian: {little}");
    }
}

/// A DTS-HD substream (its header, then zeros) of 64 bytes: what follows each core frame
/// of a DTS-HD track, or stands alone where there is no core.
fn dts_hd_substream() -> Vec<u8> {
    // The sync; 8 user bits, index 0, narrow sizes; the header's and the frame's sizes.
    let mut frame = vec![0x64, 0x58, 0x20, 0x25, 0, 0, 0, 0];
    let (header, size): (u32, u32) = (15, 63);
    let bits = u64::from((header << 16) | size) << (64 - 11 - 24);
    frame[4..8].copy_from_slice(&bits.to_be_bytes()[..4]);
    frame.resize(64, 0);
    frame
}

/// DTS-HD: the substream after each core frame (the high-resolution or lossless audio that
/// sotto skips, as players without those extensions do) leaves the core's decode as it
/// is, whether it starts right after the core or, where the core's size is not a multiple
/// of 4 bytes, after padding to one; as frames and inside Matroska's blocks.
#[test]
fn dts_hd_substreams_after_each_core_are_skipped() {
    let be = std::fs::read(fixture("tones.51.dts")).unwrap();
    let want = decode_bytes("core.dts", be.clone(), None).unwrap();
    for pad in [0, 2] {
        let mut hd = Vec::new();
        for frame in dts_frames(&be) {
            // A core `pad` bytes longer (zeros after its audio, which is 4-byte aligned),
            // then padding to the 4-byte boundary the substream starts at.
            let size = frame.len();
            let mut frame = frame.to_vec();
            assert_eq!(size % 4, 0);
            frame.resize(size + pad, 0);
            let longer = (size + pad - 1) as u32;
            frame[5] = (frame[5] & !3) | (longer >> 12) as u8;
            frame[6] = (longer >> 4) as u8;
            frame[7] = (frame[7] & 0x0F) | ((longer & 0xF) << 4) as u8;
            frame.resize(frame.len().next_multiple_of(4), 0);
            hd.extend_from_slice(&frame);
            hd.extend_from_slice(&dts_hd_substream());
        }
        let got = decode_bytes("hd.dts", hd, None).unwrap();
        assert_eq!(got.samples, want.samples, "a core of {pad} more bytes");
    }
}

/// DTS-HD audio with no core (DTS Express, lossless-only): its substreams say so, by name.
#[test]
fn dts_hd_without_a_core_is_refused_by_name() {
    let e = decode_bytes("x.dts", dts_hd_substream().repeat(3), None)
        .unwrap_err()
        .to_string();
    assert_one_line(
        &e,
        "x.dts: its audio codec is not supported: dts: DTS-HD audio without a core (DTS \
         Express, or lossless only)",
    );
}

/// DTS frames (16-bit big-endian words) as 14-bit ones: each frame's bits 14 to a word,
/// sign-extended to 16, in either byte order.
fn fourteen_bit_words(frames: &[u8], little: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in dts_frames(frames) {
        let bits = frame.len() * 8;
        for w in 0..bits.div_ceil(14) {
            let mut v = 0u16;
            for b in w * 14..w * 14 + 14 {
                let bit = frame.get(b / 8).map_or(0, |x| (x >> (7 - b % 8)) & 1);
                v = (v << 1) | u16::from(bit);
            }
            let v = ((v << 2) as i16 >> 2) as u16;
            out.extend_from_slice(&if little {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            });
        }
    }
    out
}

/// A stream of DTS core frames (16-bit big-endian words), frame by frame: each is as long
/// as its header's FSIZE says.
fn dts_frames(mut rest: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    while rest.len() >= 8 {
        let size = ((usize::from(rest[5] & 3) << 12)
            | (usize::from(rest[6]) << 4)
            | usize::from(rest[7] >> 4))
            + 1;
        let (frame, next) = rest.split_at(size.min(rest.len()));
        frames.push(frame);
        rest = next;
    }
    frames
}

/// PCM of a channel count symphonia's Matroska reader names no layout for (7.1 LPCM, as
/// Blu-ray remuxes carry it) decodes, and mixes as FFmpeg mixes it: by its guess of the
/// layout from the count, to one step of 16 bits.
#[test]
fn pcm_of_eight_channels_in_matroska_mixes_as_ffmpeg_does() {
    let ours = decode_file(&fixture("tones.71.mka")).unwrap();
    let ffmpeg = decode_file(&fixture("tones.71.mka.mono.flac")).unwrap();
    assert_eq!((ours.sample_rate, ours.channels_in), (8_000, 8));
    assert_eq!(ours.samples.len(), ffmpeg.samples.len());
    let d = max_difference(&ours.samples, &ffmpeg.samples);
    assert!(d < 1e-4, "{d} from FFmpeg's mix");
    assert!(ours.samples.iter().any(|v| v.abs() > 0.05), "not silence");
}

/// AC-3 in every container that carries it decodes to what its frames decode to alone:
/// Matroska's and MP4's tracks (which symphonia's readers leave unnamed), a transport
/// stream's as ATSC and DVB mark it, AVI's, a DVD's VOB's and CAF's (`CONTAINERS` takes
/// them through a pipe).
#[test]
fn ac3_of_every_container_decodes_alike() {
    let raw = decode_file_keeping_stereo(&fixture("tones.ac3")).unwrap();
    assert_eq!((raw.sample_rate, raw.channels_in), (32_000, 2));
    assert!(raw.samples.iter().any(|v| v.abs() > 0.1));
    let [l, r] = raw.stereo.as_ref().unwrap();
    let apart = max_difference(l, r);
    assert!(apart > 0.1, "left and right the same");
    for name in [
        "tones.ac3.mkv",
        "tones.ac3.m4a",
        "tones.ac3.ts",
        "tones.dvb.ac3.ts",
        "tones.ac3.avi",
        "tones.ac3.vob",
        "tones.ac3.caf",
    ] {
        let a = decode_file(&fixture(name)).unwrap();
        assert_eq!((a.sample_rate, a.channels_in), (32_000, 2), "{name}");
        assert_eq!(a.samples, raw.samples, "{name}");
    }
}

/// Blu-ray LPCM in `.m2ts` (stream type 0x80: big-endian samples behind each PES packet's
/// header) and SMPTE 302M in a transport stream (AES3's bit-reversed pairs) decode to
/// FFmpeg's samples exactly.
#[test]
fn blu_ray_lpcm_and_smpte_302m_decode_as_ffmpeg_does() {
    let dir = scratch("bd-lpcm");
    decodes_to_ffmpegs(
        "tones.s302m.ts",
        48_000,
        2,
        "4c503ee5c44fa5d694e0e1df75e9fd80",
        &dir,
    );
    // `ffmpeg -i F -f f32le - | md5sum`, FFmpeg 5.1.
    decodes_to_ffmpegs(
        "tones.bd.m2ts",
        48_000,
        2,
        "bab5c0101691ad68887bd3fc2007dff0",
        &dir,
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// Opus in a transport stream (SRT and RIST feeds, recorded): the Ogg fixtures'
/// packets remuxed by ffmpeg, in stereo and 5.1, decode to the Ogg files' samples exactly:
/// the trims of the first and last units (the pre-skip, the end padding) applied.
#[test]
fn opus_in_a_transport_stream_decodes_as_its_ogg_source() {
    for name in ["tones.opus", "tones.51.opus"] {
        let ogg = decode_file_keeping_stereo(&fixture(name)).unwrap();
        let ts = decode_file_keeping_stereo(&fixture(&format!("{name}.ts"))).unwrap();
        assert_eq!(ts.sample_rate, 48_000, "{name}");
        assert_eq!(ts.channels_in, ogg.channels_in, "{name}");
        assert_eq!(ts.samples, ogg.samples, "{name}");
        assert_eq!(ts.stereo, ogg.stereo, "{name}");
    }
}

#[test]
fn webm_opus_and_m4a_aac_decode_like_the_wav_source() {
    let wav = load_16k_mono(fixture("tones.wav").to_str().unwrap()).unwrap();
    for (name, rate) in [("tones.webm", 48_000), ("tones.m4a", 22_050)] {
        let file = decode_file(&fixture(name)).unwrap();
        assert_eq!((file.sample_rate, file.channels_in), (rate, 2), "{name}");
        let lossy = load_16k_mono(fixture(name).to_str().unwrap()).unwrap();
        let extra = lossy.len() as i64 - wav.len() as i64;
        assert!(
            (0..=1600).contains(&extra),
            "{name}: {extra} samples more than the source"
        );
        let (lag, snr) = aligned_snr_db(&wav, &lossy, 1600);
        eprintln!(
            "{name}: {} samples, lag {lag}, SNR {snr:.1} dB",
            lossy.len()
        );
        assert!(snr > 15.0, "{name}: SNR {snr:.1} dB at lag {lag}");
        assert!(lag <= 16, "{name}: starts {lag} samples late");
    }
}

#[test]
fn reader_and_bytes_decode_like_the_file() {
    let file = decode_file(&fixture("tones.ogg")).unwrap();
    let bytes = std::fs::read(fixture("tones.ogg")).unwrap();
    let from_reader = decode_reader(&bytes[..], None).unwrap();
    assert_eq!(from_reader, file);
    let from_bytes = decode_bytes("x.ogg", bytes, Some("ogg")).unwrap();
    assert_eq!(from_bytes, file);
}

fn assert_one_line(msg: &str, want: &str) {
    assert_eq!(msg, want);
    assert!(!msg.contains('\n'));
}

#[test]
fn bad_inputs_give_one_line_errors_naming_the_input() {
    let dir = scratch("errors");
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, "Meeting notes: nothing to hear here.\n".repeat(50)).unwrap();
    let e = decode_file(&notes).unwrap_err().to_string();
    assert_one_line(
        &e,
        &format!(
            "{}: not a supported audio file (wav, flac, mp3, ogg, opus, m4a/mp4, aac, ac3, dts, thd, webm/mkv, avi, flv, ts, aiff, caf, au, gsm, amr/awb/3gp, wma/asf, mpg/vob, mxf, dv, mp2, spx, dss, wv, tta)",
            notes.display()
        ),
    );

    let empty = dir.join("empty.wav");
    write_wav(&empty, 16000, &[vec![]]);
    let e = decode_file(&empty).unwrap_err().to_string();
    assert_one_line(
        &e,
        &format!("{}: contains no audio samples", empty.display()),
    );

    let zero = dir.join("zero.mp3");
    std::fs::write(&zero, b"").unwrap();
    let e = decode_file(&zero).unwrap_err().to_string();
    assert_one_line(
        &e,
        &format!("{}: contains no audio samples", zero.display()),
    );

    let missing = dir.join("missing.flac");
    let e = decode_file(&missing).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: cannot read: ", missing.display())),
        "{e}"
    );

    let e = decode_reader(&b"plain text, not audio at all"[..], None).unwrap_err();
    assert_one_line(
        &e.to_string(),
        "stdin: not a supported audio file (wav, flac, mp3, ogg, opus, m4a/mp4, aac, ac3, dts, thd, webm/mkv, avi, flv, ts, aiff, caf, au, gsm, amr/awb/3gp, wma/asf, mpg/vob, mxf, dv, mp2, spx, dss, wv, tta)",
    );

    // A container sotto reads with audio in a codec it does not decode (RealAudio 1.0 in
    // Matroska) names the codec, by the container's name for it, as the trouble; one with
    // video alone has no audio.
    let e = decode_file(&fixture("tones.ra144.mkv"))
        .unwrap_err()
        .to_string();
    assert_one_line(
        &e,
        &format!(
            "{}: its audio codec is not supported: Matroska codec A_REAL/14_4, a codec sotto \
             does not decode",
            fixture("tones.ra144.mkv").display()
        ),
    );
    // A WAV file in a format sotto lacks (Sony's ATRAC3, as FFmpeg writes it) names it.
    let mut fmt = vec![0x70, 0x02, 1, 0];
    fmt.extend_from_slice(&16_000u32.to_le_bytes());
    fmt.extend_from_slice(&[0, 0, 0, 0, 0, 0, 16, 0]);
    let mut wav = b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0".to_vec();
    wav.extend_from_slice(&fmt);
    wav.extend_from_slice(b"data\x04\0\0\0\x01\x02\x03\x04");
    let e = decode_bytes("atrac3.wav", wav, None)
        .unwrap_err()
        .to_string();
    assert_one_line(
        &e,
        "atrac3.wav: its audio codec is not supported: ATRAC3 in WAV (format tag 0x0270; sotto \
         decodes PCM, float, A-law, μ-law, ADPCM, Flash and Yamaha ADPCM, MPEG audio, AC-3, DTS, \
         FLAC, GSM, G.722, G.723.1, G.726, G.729 and WMA there)",
    );
    let e = decode_file(&fixture("video.mkv")).unwrap_err().to_string();
    assert_one_line(
        &e,
        &format!(
            "{}: contains no audio samples",
            fixture("video.mkv").display()
        ),
    );

    // A WAV cut inside its header.
    let wav = std::fs::read(fixture("tones.wav")).unwrap();
    let e = decode_bytes("cut.wav", wav[..30].to_vec(), None)
        .unwrap_err()
        .to_string();
    assert_one_line(
        &e,
        "cut.wav: corrupt audio data: truncated before the audio data",
    );

    // An ASF file cut inside its header (then what looks like an MPEG frame sync, which
    // a probe could chase to the end) is a cut file.
    let mut wma = vec![0x30, 0x26, 0xb2, 0x75, 0x8e, 0x66, 0xcf, 0x11];
    wma.extend_from_slice(&[0xa6, 0xd9, 0x00, 0xaa, 0x00, 0x62, 0xce, 0x6c]);
    wma.extend_from_slice(&[0xff, 0xfb, 0x90, 0x64, 0, 0, 0, 0]);
    let e = decode_bytes("a.wma", wma, None).unwrap_err().to_string();
    assert_eq!(
        e,
        "a.wma: corrupt audio data: truncated before the audio data"
    );

    // A header declaring 0 Hz panics inside symphonia 0.5: caught, quoted, one line.
    let mut wav = std::fs::read(fixture("tones.wav")).unwrap();
    assert_eq!(&wav[12..16], b"fmt ");
    wav[24..28].copy_from_slice(&0u32.to_le_bytes());
    let e = decode_bytes("rate0.wav", wav, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("rate0.wav: corrupt audio data: the decoder failed on malformed data (")
            && !e.contains('\n'),
        "{e}"
    );

    let e = load_16k_mono(missing.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("{}: cannot read", missing.display())),
        "{e}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn truncated_wav_keeps_the_decoded_part() {
    let wav = std::fs::read(fixture("tones.wav")).unwrap();
    let cut = wav[..wav.len() / 2].to_vec();
    let audio = decode_bytes("half.wav", cut, None).unwrap();
    assert!(
        (5400..=5600).contains(&audio.samples.len()),
        "{}",
        audio.samples.len()
    );
}

#[test]
fn headers_claiming_absurd_lengths_do_not_allocate_them() {
    // WAV: RIFF and data sizes of u32::MAX (what streaming encoders write), 100 real frames.
    let mut wav = Vec::new();
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&u32::MAX.to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&16000u32.to_le_bytes());
    wav.extend_from_slice(&32000u32.to_le_bytes());
    wav.extend_from_slice(&2u16.to_le_bytes());
    wav.extend_from_slice(&16u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&u32::MAX.to_le_bytes());
    for i in 0..100i16 {
        wav.extend_from_slice(&(i * 100).to_le_bytes());
    }
    let audio = decode_bytes("streamed.wav", wav, None).unwrap();
    assert_eq!(audio.samples.len(), 100);
    assert_eq!(audio.samples[1], 100.0 / 32768.0);

    // FLAC: STREAMINFO's 36-bit total-samples field set to its maximum (~6.9e10 frames).
    let mut flac = std::fs::read(fixture("tones.flac")).unwrap();
    // "fLaC", block header (4), then STREAMINFO; total samples are the low 36 bits of bytes 21..26.
    assert_eq!(&flac[..4], b"fLaC");
    flac[21] |= 0x0f;
    flac[22..26].copy_from_slice(&[0xff; 4]);
    let audio = decode_bytes("huge.flac", flac, None).unwrap();
    assert_eq!(audio.samples.len(), 11025);
}

#[test]
fn a_length_bound_stops_decoding_past_it() {
    let dir = scratch("length-bound");
    let path = dir.join("two-seconds.wav");
    write_wav(&path, 48_000, &[sine(440.0, 48_000, 96_000, 0.5)]);
    let bytes = std::fs::read(&path).unwrap();
    let ok = sotto_audio::decode_bytes_within("two.wav", bytes.clone(), Some("wav"), 2.5, false)
        .unwrap();
    assert_eq!(ok.samples.len(), 96_000);
    let err =
        sotto_audio::decode_bytes_within("two.wav", bytes, Some("wav"), 1.5, false).unwrap_err();
    assert!(
        matches!(err, sotto_audio::AudioError::TooLarge { .. }),
        "{err}"
    );
    assert_eq!(err.to_string(), "two.wav: too large: longer than 1.5 s");
}

/// A fixture in every container and codec decoded.
const CONTAINERS: [&str; 122] = [
    "tones.nelly.mov",
    "tones.yamaha.wav",
    "tones.yamaha.mov",
    "tones.g726.au",
    "tones.s302m.ts",
    "tones.bd.m2ts",
    "tones.g722.au",
    "tones.flac.caf",
    "speech.spx.mkv",
    "speech.spx.asf",
    "speech.spx.mov",
    "tones.speex.avi",
    "tones.vorbis.avi",
    "tones.vorbis.asf",
    "tones.vorbis.mp4",
    "tones.vorbis.mov",
    "tones.swf.wav",
    "tones.swf.mov",
    "tones.ac3.caf",
    "tones.gsm.caf",
    "tones.gsm.mov",
    "tones.ima.caf",
    "tones.adpcm.caf",
    "tones.flac.wav",
    "tones.flac.avi",
    "speech.tta",
    "tones.tta.mkv",
    "tones.u8.mkv",
    "tones.wv.mkv",
    "tones.wv",
    "tones.hybrid.wv",
    "tones.hybrid.mkv",
    "tones.flt.wv",
    "tones.51.wv",
    "tones.s8.mov",
    "tones.s8.caf",
    "tones.u8.aiff",
    "tones.opus.mp4",
    "tones.adpcm.flv",
    "speech.lp.dss",
    "noise.g729d.wav",
    "noise.dss",
    "tones.lpcm24.vob",
    "tones.speex.flv",
    "speech.spx",
    "speech.nb.spx",
    "tones.spx",
    "tones.mpg",
    "tones.lpcm.vob",
    "tones.ac3.vob",
    "tones.wma",
    "speech.wmav1.wma",
    "speech.wmav2.wma",
    "tones.wma.mkv",
    "tones.wma.wav",
    "tones.wma.avi",
    "tones.mulaw.mkv",
    "tones.adpcm.asf",
    "tones.adpcm.mov",
    "tones.g726.mov",
    "tones.g722.wav",
    "tones.w64",
    "tones.ima4.caf",
    "tones.ima4.aiff",
    "tones.ima4.mov",
    "tones.alac.caf",
    "tones.alac.mkv",
    "tones.alac.mov",
    "tones.mp3.mkv",
    "tones.mono.mp2",
    "speech.joint.mp2",
    "tones.mp2.mp4",
    "tones.aac.avi",
    "tones.g726.avi",
    "tones.gsm.avi",
    "tones.mxf",
    "tones.opatom.mxf",
    "speech.dv",
    "speech.dv.avi",
    "tones.nelly.flv",
    "tones.flv",
    "tones.alaw.flv",
    "tones.g726-40.wav",
    "speech.amr",
    "speech.3gp",
    "speech.awb",
    "speech.awb.3gp",
    "tones.wav",
    "tones.dts.wav",
    "tones.au",
    "tones.gsm.wav",
    "tones.gsm",
    "tones.rf64.wav",
    "tones.flac",
    "tones.mp3",
    "tones.ogg",
    "tones.opus",
    "speech.short.opus",
    "speech.short.ogg",
    "tones.webm",
    "tones.m4a",
    "tones.aac",
    "tones.51.m4a",
    "tones.he.aac",
    "tones.latm.ts",
    "tones.he.latm.ts",
    "tones.pcm.mkv",
    "tones.s24.mka",
    "tones.avi",
    "tones.mp3.avi",
    "tones.ts",
    "tones.ac3",
    "tones.51.ac3",
    "tones.ac3.mkv",
    "tones.51.opus.ts",
    "tones.51.eac3",
    "tones.51.eac3.wav",
    "tones.71.mka",
    "tones.51.dts",
    "tones.dts.mkv",
    "tones.thd.mka",
    "jfk.m4a",
];

/// Resampling as packets decode gives what decoding whole and then resampling gives, bit
/// for bit, in every container (the MP4 edit list and Opus pre-skip applied on the way),
/// channels kept apart or not, from a path or from bytes; the length bound holds there too.
#[test]
fn resampling_while_decoding_equals_resampling_after() {
    let dir = scratch("streamed");
    let stereo = dir.join("stereo48.wav");
    let n = 48_000 + 777;
    write_wav(
        &stereo,
        48_000,
        &[sine(440.0, 48_000, n, 0.5), sine(3000.0, 48_000, n, 0.25)],
    );
    let mut paths: Vec<PathBuf> = CONTAINERS.iter().map(|f| fixture(f)).collect();
    paths.push(stereo);
    for path in &paths {
        let name = path.to_str().unwrap();
        for keep in [false, true] {
            let whole = sotto_audio::to_16k(if keep {
                decode_file_keeping_stereo(path).unwrap()
            } else {
                decode_file(path).unwrap()
            })
            .unwrap();
            let streamed = sotto_audio::load_16k(name, keep).unwrap();
            assert_eq!(streamed, whole, "{name}, channels kept: {keep}");
            let bytes = std::fs::read(path).unwrap();
            let from_bytes =
                sotto_audio::decode_bytes_16k_within(name, bytes, None, f64::INFINITY, keep)
                    .unwrap();
            assert_eq!(
                from_bytes, whole,
                "{name} from bytes, channels kept: {keep}"
            );
        }
    }
    let bytes = std::fs::read(&paths[paths.len() - 1]).unwrap();
    let err = sotto_audio::decode_bytes_16k_within("s.wav", bytes, None, 0.5, false).unwrap_err();
    assert_eq!(err.to_string(), "s.wav: too large: longer than 0.5 s");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A reader that hands out at most 100 bytes a call, as a pipe may.
struct Trickle(std::io::Cursor<Vec<u8>>);

impl std::io::Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(100);
        self.0.read(&mut buf[..n])
    }
}

/// `bytes` decoded from a pipe that hands out 100 bytes a call, channels kept.
fn trickled(bytes: &[u8]) -> sotto_audio::Audio16k {
    let pipe = Trickle(std::io::Cursor::new(bytes.to_vec()));
    sotto_audio::decode_stream_16k(pipe, "pipe", None, true).unwrap()
}

/// From a pipe, every container decodes as from its file: WAV, FLAC and MP3 while the
/// bytes arrive, the others (Ogg, WebM, MP4) read whole first; and a pipe that ends early keeps
/// what decoded, as a truncated file does.
#[test]
fn a_pipe_decodes_as_the_file() {
    for f in CONTAINERS {
        let path = fixture(f);
        let file = sotto_audio::load_16k(path.to_str().unwrap(), true).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let piped = trickled(&bytes);
        assert_eq!(piped, file, "{f}");
        if f == "tones.wav" {
            let cut = bytes[..bytes.len() / 2].to_vec();
            let half =
                sotto_audio::decode_stream_16k(std::io::Cursor::new(cut), "pipe", None, false)
                    .unwrap();
            assert!(half.mono.len() > 1000 && half.mono.len() < file.mono.len());
        }
    }
    let e = sotto_audio::decode_stream_16k(
        std::io::Cursor::new(b"RIFF1234WAVEjunk".repeat(3)),
        "pipe",
        None,
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("pipe: ") && !e.contains('\n'), "{e}");
    let e = sotto_audio::decode_stream_16k(std::io::empty(), "pipe", None, false).unwrap_err();
    assert_eq!(e.to_string(), "pipe: contains no audio samples");
}

/// AVI (older cameras and recorders) and MPEG transport streams (broadcast and HLS
/// recordings), which symphonia has no reader for: the audio stream, interleaved with the
/// video's, decodes to what it holds: AVI's PCM to `tones.wav`'s samples exactly, its MP3
/// and the stream's AAC to their streams copied out (`ffmpeg -c:a copy -f mp3`, `-f adts`),
/// and AAC in LATM (DVB's; AAC-LC and HE-AAC v2) to the ADTS stream it was copied from,
/// from a file, from bytes and from a pipe (read whole: neither is WAV, MP3 or ADTS).
/// Sun `.au` (as AIFF-C to symphonia) decodes to `tones.wav`'s samples too, and FLV's AAC
/// (behind ADTS headers made from its sequence header), MP3 and A-law to their streams
/// copied out, as MP3 in WAV and QuickTime's μ-law do, and MPEG program streams' MP2
/// (beside MPEG-1 video) and DVD LPCM, 16- and 24-bit. AVI's AAC (raw access units, as
/// cameras and FFmpeg write them) decodes as the ADTS stream it was copied from, and its
/// G.726 and GSM (IP cameras', CCTV exports') as the WAV files they were copied from.
#[test]
fn avi_and_ts_decode_as_their_audio_stream() {
    let pairs = [
        ("tones.avi", "tones.wav"),
        ("tones.au", "tones.wav"),
        ("tones.mp3.avi", "tones.mp3.avi.mp3"),
        ("tones.aac.avi", "tones.aac"),
        ("tones.g726.avi", "tones.g726.wav"),
        ("tones.gsm.avi", "tones.gsm.wav"),
        ("tones.ts", "tones.ts.aac"),
        ("tones.latm.ts", "tones.ts.aac"),
        ("tones.he.latm.ts", "tones.he.aac"),
        ("tones.flv", "tones.flv.aac"),
        ("tones.mp3.flv", "tones.mp3.flv.mp3"),
        ("tones.alaw.flv", "tones.alaw.flv.wav"),
        ("tones.mp3.wav", "tones.mp3.wav.mp3"),
        ("tones.ulaw.mov", "tones.ulaw.mov.wav"),
        ("tones.mpg", "tones.mpg.mp2"),
        ("tones.lpcm.vob", "tones.lpcm.vob.flac"),
        ("tones.lpcm24.vob", "tones.lpcm24.vob.flac"),
    ];
    for (avi, plain) in pairs {
        let want = decode_file_keeping_stereo(&fixture(plain)).unwrap();
        let got = decode_file_keeping_stereo(&fixture(avi)).unwrap();
        assert_eq!(got, want, "{avi}");
        let bytes = std::fs::read(fixture(avi)).unwrap();
        let mono = decode_bytes(avi, bytes.clone(), None).unwrap();
        assert_eq!(mono.samples, want.samples, "{avi} from bytes");
        let want16 = sotto_audio::load_16k(fixture(plain).to_str().unwrap(), true).unwrap();
        assert_eq!(trickled(&bytes), want16, "{avi} from a pipe");
    }
}

/// MXF (broadcast and professional cameras' files): the first sound track's PCM, beside
/// MPEG-2 video (OP1a, 24-bit stereo) or alone (Avid's OP-Atom, 16-bit mono), decodes to
/// FFmpeg's samples exactly, from a file and from bytes.
#[test]
fn mxf_decodes_its_first_sound_track() {
    for (mxf, rate, channels) in [("tones.mxf", 48_000, 2), ("tones.opatom.mxf", 48_000, 1)] {
        let want = decode_file_keeping_stereo(&fixture(&format!("{mxf}.flac"))).unwrap();
        let got = decode_file_keeping_stereo(&fixture(mxf)).unwrap();
        assert_eq!(
            (got.sample_rate, got.channels_in),
            (rate, channels),
            "{mxf}"
        );
        assert_eq!(got, want, "{mxf}");
        let bytes = std::fs::read(fixture(mxf)).unwrap();
        let mono = decode_bytes(mxf, bytes, None).unwrap();
        assert_eq!(mono.samples, want.samples, "{mxf} from bytes");
    }
}

/// DV (MiniDV tapes captured): the first stereo pair, shuffled across each frame's audio
/// blocks, decodes to FFmpeg's samples exactly, raw (`.dv`) and in a "type 1" AVI (the
/// DV frames as its one stream); two 525/60 frames hold 1600 and 1602 samples.
#[test]
fn dv_decodes_its_first_stereo_pair() {
    let want = decode_file_keeping_stereo(&fixture("speech.dv.flac")).unwrap();
    assert_eq!(want.stereo.as_ref().unwrap()[0].len(), 3202);
    for dv in ["speech.dv", "speech.dv.avi"] {
        let got = decode_file_keeping_stereo(&fixture(dv)).unwrap();
        assert_eq!((got.sample_rate, got.channels_in), (48_000, 2), "{dv}");
        assert_eq!(got, want, "{dv}");
        let bytes = std::fs::read(fixture(dv)).unwrap();
        let mono = decode_bytes(dv, bytes, None).unwrap();
        assert_eq!(mono.samples, want.samples, "{dv} from bytes");
    }
}

/// A WAV file whose sizes say 0xFFFFFFFF (FFmpeg's to a pipe, RF64's, and sotto's own
/// past 4 GiB), where symphonia's reader would stop at 4 GiB, is read on to its end by
/// sotto's: the same samples as the file with its sizes, from a path, bytes and a pipe.
#[test]
fn wav_sizes_of_all_ones_read_to_the_end() {
    tones_wav_with_sizes(0xFFFF_FFFF, "open.wav");
}

/// `tones.wav` with its RIFF and `data` sizes set to `size`, decoded from a path, bytes and
/// a pipe: the samples of `tones.wav` itself.
fn tones_wav_with_sizes(size: u32, name: &str) {
    let mut bytes = std::fs::read(fixture("tones.wav")).unwrap();
    let data = bytes.windows(4).position(|w| w == b"data").unwrap();
    bytes[4..8].copy_from_slice(&size.to_le_bytes());
    bytes[data + 4..data + 8].copy_from_slice(&size.to_le_bytes());
    let want = decode_file_keeping_stereo(&fixture("tones.wav")).unwrap();
    let path = scratch(name).join(name);
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(decode_file_keeping_stereo(&path).unwrap(), want, "{name}");
    let from_bytes = decode_bytes(name, bytes.clone(), None).unwrap();
    assert_eq!(from_bytes.samples, want.samples, "{name} from bytes");
    let want16 = sotto_audio::load_16k(fixture("tones.wav").to_str().unwrap(), true).unwrap();
    assert_eq!(trickled(&bytes), want16, "{name} piped");
}

/// A chained Ogg file (two files end to end, as radio recordings and joined voice messages
/// are) decodes whole, each link as it decodes alone, Vorbis and Opus, from a path and
/// from a pipe; the first link alone was all there was before.
#[test]
fn chained_ogg_decodes_every_link() {
    for name in ["tones.ogg", "tones.opus"] {
        let one = decode_file_keeping_stereo(&fixture(name)).unwrap();
        let bytes = std::fs::read(fixture(name)).unwrap();
        let chained = [bytes.clone(), bytes].concat();
        let path = scratch("chained").join(name);
        std::fs::write(&path, &chained).unwrap();
        let two = decode_file_keeping_stereo(&path).unwrap();
        assert_eq!(
            two.samples,
            [one.samples.clone(), one.samples.clone()].concat(),
            "{name}"
        );
        assert_eq!(
            (two.sample_rate, two.channels_in),
            (one.sample_rate, one.channels_in)
        );
        let from_path = sotto_audio::load_16k(path.to_str().unwrap(), true).unwrap();
        assert_eq!(trickled(&chained), from_path, "{name} piped");
    }
}

/// An Ogg file whose audio is one page (0.3 s of speech: a short voice message) decodes
/// to its length, its end trimmed (symphonia's reader gave Opus's 648 samples of padding
/// more: FFmpeg's count is 14,400; FFmpeg keeps Vorbis's 448, sotto trims them as the
/// granule position says); chained before or after another file, each link decodes as it
/// does alone (the short link was dropped, unsaid, when it came first), from a path and
/// from a pipe. Opus and Vorbis.
#[test]
fn a_one_page_ogg_link_is_trimmed_and_kept_in_a_chain() {
    for (short_name, long_name, len, rate) in [
        ("speech.short.opus", "tones.opus", 14_400, 48_000),
        // Another file of the same rate: itself (two one-page links).
        ("speech.short.ogg", "speech.short.ogg", 4_800, 16_000),
    ] {
        one_page_link(short_name, long_name, len, rate);
    }
}

fn one_page_link(short_name: &str, long_name: &str, len: usize, rate: u32) {
    let short = decode_file(&fixture(short_name)).unwrap();
    assert_eq!((short.samples.len(), short.sample_rate), (len, rate));
    let long = decode_file(&fixture(long_name)).unwrap();
    let (a, b) = (
        std::fs::read(fixture(short_name)).unwrap(),
        std::fs::read(fixture(long_name)).unwrap(),
    );
    let dir = scratch(&format!("one-page-{short_name}"));
    for (name, bytes, want) in [
        (
            format!("first-{short_name}"),
            [a.clone(), b.clone()].concat(),
            [short.samples.clone(), long.samples.clone()].concat(),
        ),
        (
            format!("last-{short_name}"),
            [b, a].concat(),
            [long.samples.clone(), short.samples.clone()].concat(),
        ),
    ] {
        let path = dir.join(&name);
        std::fs::write(&path, &bytes).unwrap();
        let got = decode_file(&path).unwrap();
        assert!(got.samples == want, "{name}");
        let from_path = sotto_audio::load_16k(path.to_str().unwrap(), true).unwrap();
        assert_eq!(trickled(&bytes), from_path, "{name} piped");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// MP3 files joined end to end (`cat a.mp3 b.mp3`) decode whole, as FFmpeg decodes them:
/// the first file's LAME tag trims its start, and its end only where the stream ends
/// there (symphonia's reader dropped every frame past the first file's length, unsaid).
/// Joined files of other channels or rates (a stereo file and a mono one at 16 kHz)
/// decode too: at 16 kHz each part resampled from its own rate; kept at their rates, a
/// rate that changes is an error. Chained Ogg files change rates the same way.
#[test]
fn joined_files_decode_whole_whatever_their_rates() {
    let one = decode_file_keeping_stereo(&fixture("tones.lame.mp3")).unwrap();
    assert_eq!(
        one.stereo.as_ref().unwrap()[0].len(),
        11_025,
        "gapless alone"
    );
    let bytes = std::fs::read(fixture("tones.lame.mp3")).unwrap();
    let dir = scratch("joined");
    let twice = dir.join("twice.mp3");
    std::fs::write(&twice, [bytes.clone(), bytes.clone()].concat()).unwrap();
    let two = decode_file_keeping_stereo(&twice).unwrap();
    // FFmpeg's count (`ffmpeg -i twice.mp3 -f f32le -`).
    assert_eq!(two.stereo.as_ref().unwrap()[0].len(), 24_239);
    assert_eq!(two.samples[..11_025], one.samples[..]);

    // 22.05 kHz stereo, then 16 kHz mono.
    let speech = std::fs::read(fixture("speech.mp3")).unwrap();
    let mixed = dir.join("mixed.mp3");
    std::fs::write(&mixed, [bytes, speech].concat()).unwrap();
    let e = decode_file(&mixed).unwrap_err().to_string();
    assert!(
        e.contains("sample rate changes mid-stream (22050 -> 16000 Hz)"),
        "{e}"
    );
    let at16 = load_16k_mono(mixed.to_str().unwrap()).unwrap();
    let (first, second) = (
        load_16k_mono(fixture("tones.lame.mp3").to_str().unwrap()).unwrap(),
        load_16k_mono(fixture("speech.mp3").to_str().unwrap()).unwrap(),
    );
    // The first file as it decodes alone (but where its padding, kept, follows), then the
    // second less its first frame (576 samples: the first of a new rate is passed over, as
    // a damaged header would be): what joining keeps of the first's padding and the
    // second's encoder delay makes 69 ms more than the two alone; FFmpeg gives 25,483
    // samples (it drops the second's first frames too).
    let near_end = first.len() - 64;
    assert_eq!(at16[..near_end], first[..near_end]);
    assert_eq!(at16.len(), first.len() + second.len() + 1673 - 576);
    assert!(
        at16[first.len() + 2000..].iter().any(|v| v.abs() > 0.05),
        "speech heard"
    );

    // Ogg: Opus at 48 kHz, then Vorbis at 22.05 kHz, each link resampled as it alone is.
    let chained = [
        std::fs::read(fixture("tones.opus")).unwrap(),
        std::fs::read(fixture("tones.ogg")).unwrap(),
    ]
    .concat();
    let path = dir.join("chained.ogg");
    std::fs::write(&path, &chained).unwrap();
    let want = [
        load_16k_mono(fixture("tones.opus").to_str().unwrap()).unwrap(),
        load_16k_mono(fixture("tones.ogg").to_str().unwrap()).unwrap(),
    ]
    .concat();
    assert_eq!(load_16k_mono(path.to_str().unwrap()).unwrap(), want);
    assert_eq!(trickled(&chained).mono, want, "piped");
}

/// A WAV file whose recorder stopped before writing its sizes (a crash, a dead battery:
/// RIFF and `data` sizes of 0) decodes to its end, as FFmpeg decodes it, where it read as
/// not audio: from a path, bytes and a pipe.
#[test]
fn unfinished_wav_decodes_to_its_end() {
    tones_wav_with_sizes(0, "crash.wav");
}

/// `tones.aac`'s frames: (header, raw data block).
fn adts_frames(bytes: &[u8]) -> Vec<(&[u8], &[u8])> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 7 <= bytes.len() {
        let b = &bytes[at..];
        assert_eq!((b[0], b[1] & 0xF7), (0xFF, 0xF1), "a frame at {at}");
        let len = (usize::from(b[3] & 3) << 11) | (usize::from(b[4]) << 3) | usize::from(b[5] >> 5);
        frames.push((&b[..7], &b[7..len]));
        at += len;
    }
    assert_eq!(at, bytes.len());
    frames
}

/// An ADTS header like `h`, for a frame of `len` bytes in all, holding `blocks` raw blocks.
fn adts_header(h: &[u8], len: usize, blocks: u8, mpeg2: bool, crc: bool) -> Vec<u8> {
    let mut h = h.to_vec();
    h[1] = (h[1] & !0x09) | (u8::from(mpeg2) << 3) | u8::from(!crc);
    h[3] = (h[3] & !3) | ((len >> 11) as u8 & 3);
    h[4] = (len >> 3) as u8;
    h[5] = (h[5] & 0x1F) | (((len & 7) as u8) << 5);
    h[6] = (h[6] & !3) | (blocks - 1);
    h
}

/// ADTS as encoders other than ffmpeg's write it, which symphonia's own reader refused or
/// misread, decodes to what ffmpeg's frames do: MPEG-2 frames (`FF F9`), frames with a CRC
/// (not checked, as FFmpeg does not by default), two raw blocks a frame, and junk between
/// frames (skipped to the next sync).
#[test]
fn adts_of_every_framing_decodes_alike() {
    let bytes = std::fs::read(fixture("tones.aac")).unwrap();
    let want = decode_bytes("tones.aac", bytes.clone(), None).unwrap();
    let frames = adts_frames(&bytes);
    let rewrite = |mpeg2: bool, crc: bool| -> Vec<u8> {
        let mut out = Vec::new();
        for (h, block) in &frames {
            let extra = if crc { 2 } else { 0 };
            out.extend(adts_header(h, 7 + extra + block.len(), 1, mpeg2, crc));
            out.extend(&[0x12, 0x34][..extra]);
            out.extend(*block);
        }
        out
    };
    let mut junk = Vec::new();
    for (i, (h, block)) in frames.iter().enumerate() {
        if i % 3 == 1 {
            junk.extend([0xFF, 0x00, 0xFF, 0xF1, 0x00, 0x42]);
        }
        junk.extend(*h);
        junk.extend(*block);
    }
    let mut paired = Vec::new();
    for pair in frames.chunks(2) {
        let len = 7 + pair.iter().map(|(_, b)| b.len()).sum::<usize>();
        paired.extend(adts_header(pair[0].0, len, pair.len() as u8, false, false));
        for (_, block) in pair {
            paired.extend(*block);
        }
    }
    for (what, bytes) in [
        ("MPEG-2", rewrite(true, false)),
        ("CRC", rewrite(false, true)),
        ("MPEG-2 with a CRC", rewrite(true, true)),
        ("two blocks a frame", paired),
        ("junk between frames", junk),
    ] {
        let got = decode_bytes("x.aac", bytes.clone(), None).unwrap();
        assert_eq!(got, want, "{what}");
        let piped = trickled(&bytes);
        assert_eq!(
            piped.mono.len(),
            sotto_audio::to_16k(want.clone()).unwrap().mono.len(),
            "{what} from a pipe"
        );
    }
}

/// Tables whose counts were damaged into billions are a clear error: symphonia's readers
/// reserve room for every entry a count claims before reading any, which aborts the
/// process for want of memory (found by the fuzz test): an MP4's sample-to-chunk table.
#[test]
fn damaged_table_counts_are_errors_not_aborts() {
    let mut bytes = std::fs::read(fixture("tones.m4a")).unwrap();
    let at = bytes.windows(4).position(|w| w == b"stsc").unwrap();
    bytes[at + 8..at + 12].copy_from_slice(&0xAAAA_AAABu32.to_be_bytes());
    let e = decode_bytes("x.m4a", bytes, None).unwrap_err().to_string();
    assert_eq!(
        e,
        "x.m4a: corrupt audio data: MP4 sample table `stsc` claims more entries than it holds"
    );
}

/// A directory given as a file is named as one, not as an unknown format.
#[test]
fn a_directory_is_not_audio() {
    let dir = scratch("a-dir");
    let e = decode_file(&dir).unwrap_err().to_string();
    assert_eq!(e, format!("{}: cannot read: is a directory", dir.display()));
    std::fs::remove_dir_all(dir).unwrap();
}

/// PCM in Matroska (screen and field recorders, ffmpeg `-c:a pcm_s16le x.mkv`) decodes to
/// the WAV's samples exactly: 16-bit in one block of all 11025 frames (more than the PCM
/// decoder is first made for, so it is made again), and 24-bit in ffmpeg's blocks.
#[test]
fn pcm_in_matroska_decodes_as_the_wav() {
    let want = decode_file_keeping_stereo(&fixture("tones.wav")).unwrap();
    for f in ["tones.pcm.mkv", "tones.s24.mka"] {
        let got = decode_file_keeping_stereo(&fixture(f)).unwrap();
        assert_eq!(got, want, "{f}");
        let bytes = std::fs::read(fixture(f)).unwrap();
        let mono = decode_bytes(f, bytes, None).unwrap();
        assert_eq!(mono.samples.len(), 11025, "{f}");
    }
}

/// `wav` (a RIFF WAV whose chunks are `fmt ` then `data`) as RF64 writes it: 32-bit sizes
/// of 0xFFFFFFFF and the true ones in a `ds64` chunk first.
fn as_rf64(wav: &[u8]) -> Vec<u8> {
    assert_eq!(&wav[12..16], b"fmt ");
    let data_at = 20 + u32::from_le_bytes(wav[16..20].try_into().unwrap()) as usize;
    assert_eq!(&wav[data_at..data_at + 4], b"data");
    let data = &wav[data_at + 8..];
    let mut out = b"RF64\xff\xff\xff\xffWAVEds64".to_vec();
    out.extend_from_slice(&28u32.to_le_bytes());
    let riff = (4 + 36 + (data_at - 12) + 8 + data.len()) as u64;
    out.extend_from_slice(&riff.to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&((data.len() / 4) as u64).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&wav[12..data_at]);
    out.extend_from_slice(b"data\xff\xff\xff\xff");
    out.extend_from_slice(data);
    out
}

/// RF64, the WAV past 4 GiB (EBU Tech 3306; ffmpeg `-rf64`, field recorders), decodes as the
/// same samples in a RIFF WAV do, from a file, from bytes and from a pipe; so does BW64
/// (ITU-R BS.2088), the same layout under another name.
#[test]
fn rf64_decodes_as_riff_wav() {
    let dir = scratch("rf64");
    let (wav, rf64) = (dir.join("a.wav"), dir.join("a.rf64.wav"));
    let n = 44_100 + 321;
    write_wav(
        &wav,
        44_100,
        &[sine(440.0, 44_100, n, 0.5), sine(900.0, 44_100, n, 0.3)],
    );
    let bytes = as_rf64(&std::fs::read(&wav).unwrap());
    std::fs::write(&rf64, &bytes).unwrap();
    let want = decode_file_keeping_stereo(&wav).unwrap();
    let got = decode_file_keeping_stereo(&rf64).unwrap();
    assert_eq!(got, want);
    let want16 = sotto_audio::load_16k(wav.to_str().unwrap(), true).unwrap();
    assert_eq!(
        sotto_audio::load_16k(rf64.to_str().unwrap(), true).unwrap(),
        want16
    );
    let piped = trickled(&bytes);
    assert_eq!(piped, want16);
    assert_eq!(
        decode_bytes("x", bytes.clone(), None).unwrap().samples,
        want.samples
    );
    let mut bw64 = bytes;
    bw64[..4].copy_from_slice(b"BW64");
    assert_eq!(trickled(&bw64), want16, "BW64 piped");
    assert_eq!(
        decode_bytes("x", bw64, None).unwrap().samples,
        want.samples,
        "BW64"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// The largest difference between two signals' samples, over their common length.
fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// A `.au` file: its 24-byte header (with `size`, or unknown), a note, then `data`.
fn au_file(encoding: u32, rate: u32, channels: u32, size: Option<u32>, data: &[u8]) -> Vec<u8> {
    let mut b = b".snd".to_vec();
    let note = b"made by sotto's tests\0\0\0";
    for v in [
        (24 + note.len()) as u32,
        size.unwrap_or(u32::MAX),
        encoding,
        rate,
        channels,
    ] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend_from_slice(note);
    b.extend_from_slice(data);
    b
}

/// A WAV file of format `tag` holding `data` (a WAVEFORMATEX with its extension size,
/// 0, for the formats other than PCM).
fn wav_file(tag: u16, bits: u16, rate: u32, channels: u16, data: &[u8]) -> Vec<u8> {
    let align = channels * bits / 8;
    let ext: &[u8] = if tag == 1 { &[] } else { &[0, 0] };
    let mut b = b"RIFF".to_vec();
    b.extend_from_slice(&(36 + ext.len() as u32 + data.len() as u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&(16 + ext.len() as u32).to_le_bytes());
    b.extend_from_slice(&tag.to_le_bytes());
    b.extend_from_slice(&channels.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate * u32::from(align)).to_le_bytes());
    b.extend_from_slice(&align.to_le_bytes());
    b.extend_from_slice(&bits.to_le_bytes());
    b.extend_from_slice(ext);
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(data);
    b
}

/// Sun `.au` files decode as the same samples in WAV do, in every encoding it shares
/// with WAV (big-endian there, little-endian here), with the size known or not, stereo
/// kept apart, and so do telephony's headerless files named `.ul`, `.alaw`, `.sln`,
/// `.sln16`; encodings sotto lacks and broken headers are errors that say so.
#[test]
fn sun_au_decodes_as_wav() {
    let (rate, n) = (8_000u32, 4_000usize);
    let (l, r) = (sine(440.0, rate, n, 0.5), sine(1000.0, rate, n, 0.25));
    let frames: Vec<[f32; 2]> = l.iter().zip(&r).map(|(a, b)| [*a, *b]).collect();
    // (encoding, WAV tag, bits, one sample as .au's bytes and as WAV's).
    type Code = fn(f32) -> (Vec<u8>, Vec<u8>);
    let s16: Code = |x| {
        let v = (x * 32767.0) as i16;
        (v.to_be_bytes().to_vec(), v.to_le_bytes().to_vec())
    };
    let s24: Code = |x| {
        let v = (x * 8_388_607.0) as i32;
        (v.to_be_bytes()[1..].to_vec(), v.to_le_bytes()[..3].to_vec())
    };
    let s8: Code = |x| {
        let v = (x * 127.0) as i8;
        (vec![v as u8], vec![(v as u8) ^ 0x80])
    };
    let f32c: Code = |x| (x.to_be_bytes().to_vec(), x.to_le_bytes().to_vec());
    let law: Code = |x| {
        let v = ((x + 1.0) * 100.0) as u8;
        (vec![v], vec![v])
    };
    let cases: [(u32, u16, u16, Code); 6] = [
        (3, 1, 16, s16),
        (4, 1, 24, s24),
        (2, 1, 8, s8),
        (6, 3, 32, f32c),
        (1, 7, 8, law),
        (27, 6, 8, law),
    ];
    for (encoding, tag, bits, code) in cases {
        let (mut au, mut wav) = (Vec::new(), Vec::new());
        for f in &frames {
            for &x in f {
                let (a, w) = code(x);
                au.extend(a);
                wav.extend(w);
            }
        }
        let want = sotto_audio::decode_bytes_16k_within(
            "x.wav",
            wav_file(tag, bits, rate, 2, &wav),
            None,
            f64::INFINITY,
            true,
        )
        .unwrap();
        for size in [Some(au.len() as u32), None, Some(u32::MAX - 1)] {
            let file = au_file(encoding, rate, 2, size, &au);
            let got = sotto_audio::decode_bytes_16k_within("x.au", file, None, f64::INFINITY, true)
                .unwrap();
            assert_eq!(got, want, "encoding {encoding}, size {size:?}");
        }
    }
    // Telephony's headerless files, by their names: G.711 at 8 kHz, 16-bit linear.
    let mono: Vec<i16> = l.iter().map(|x| (x * 32767.0) as i16).collect();
    let linear: Vec<u8> = mono.iter().flat_map(|v| v.to_le_bytes()).collect();
    let law: Vec<u8> = l.iter().map(|x| ((x + 1.0) * 100.0) as u8).collect();
    for (ext, data, tag, bits, rate) in [
        ("ul", &law, 7, 8, 8_000),
        ("alaw", &law, 6, 8, 8_000),
        ("sln", &linear, 1, 16, 8_000),
        ("sln16", &linear, 1, 16, 16_000),
    ] {
        let wav = wav_file(tag, bits, rate, 1, data);
        let want = decode_bytes("x.wav", wav, None).unwrap();
        let got = decode_bytes(&format!("x.{ext}"), data.clone(), Some(ext)).unwrap();
        assert_eq!(
            (got.samples, got.sample_rate),
            (want.samples, rate),
            "{ext}"
        );
    }
    let bad = |file: Vec<u8>, says: &str| {
        let e = sotto_audio::decode_bytes("x.au", file, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{says}: {e}");
    };
    bad(au_file(21, rate, 1, None, &[0; 100]), ".au encoding 21");
    bad(au_file(3, rate, 0, None, &[0; 100]), "0 channels");
    bad(au_file(3, 0, 1, None, &[0; 100]), "a sample rate of 0");
    bad(b".snd\0\0\0\x18".to_vec(), "cut short");
    let mut past = au_file(3, rate, 1, None, &[0; 10]);
    past[4..8].copy_from_slice(&1000u32.to_be_bytes());
    bad(past, "the samples start at 1000");
}

/// Nellymoser (Flash Player's microphone) in FLV decodes to FFmpeg's samples but for float
/// rounding: within its 16-bit decode's rounding (sotto computes the IMDCT directly,
/// FFmpeg by an FFT), and by name, bytes and pipe alike.
#[test]
fn nellymoser_decodes_as_ffmpeg_does() {
    let got = decode_file(&fixture("tones.nelly.flv")).unwrap();
    let want = decode_file(&fixture("tones.nelly.flv.flac")).unwrap();
    assert_eq!((got.sample_rate, got.channels_in), (16_000, 1));
    assert_eq!(got.samples.len(), want.samples.len());
    let worst = max_difference(&got.samples, &want.samples);
    assert!(worst <= 1.0 / 32768.0, "{worst}");
    assert!(got.samples.iter().any(|v| v.abs() > 0.1), "not silence");
    let bytes = std::fs::read(fixture("tones.nelly.flv")).unwrap();
    let sniffed = decode_bytes("noname", bytes, None).unwrap();
    assert!(sniffed.samples == got.samples);
    // The same packets in QuickTime (`nmos`), to its edit list's end (FFmpeg's in whole
    // milliseconds: 64 samples short of the FLV's).
    let mov = decode_file(&fixture("tones.nelly.mov")).unwrap();
    assert_eq!(
        (mov.sample_rate, mov.samples.len()),
        (16_000, got.samples.len() - 64)
    );
    assert!(got.samples.starts_with(&mov.samples));
}

/// Windows Media Audio 1 and 2 decode to FFmpeg's samples but for float rounding (within
/// their 16-bit decodes' rounding; sotto's inverse transform is its own): the tones in
/// version 2 at 22.05 kHz, speech at 16 kHz in both versions (noise added to the
/// coefficients at this rate), in ASF by name, bytes and pipe alike, and in Matroska.
#[test]
fn windows_media_audio_decodes_as_ffmpeg_does() {
    for (name, rate, channels) in [
        ("tones.wma", 22_050, 2),
        ("speech.wmav1.wma", 16_000, 1),
        ("speech.wmav2.wma", 16_000, 1),
    ] {
        let got = decode_file_keeping_stereo(&fixture(name)).unwrap();
        let want = decode_file_keeping_stereo(&fixture(&format!("{name}.flac"))).unwrap();
        assert_eq!(
            (got.sample_rate, got.channels_in),
            (rate, channels),
            "{name}"
        );
        assert_eq!(got.samples.len(), want.samples.len(), "{name}");
        let worst = max_difference(&got.samples, &want.samples);
        assert!(worst <= 1.0 / 32768.0, "{name}: {worst}");
        if let (Some(g), Some(w)) = (&got.stereo, &want.stereo) {
            for (g, w) in g.iter().zip(w) {
                let worst = max_difference(g, w);
                assert!(worst <= 1.0 / 32768.0, "{name}: {worst}");
            }
        }
        assert!(got.samples.iter().any(|v| v.abs() > 0.1), "{name}: silence");
        let bytes = std::fs::read(fixture(name)).unwrap();
        let sniffed = decode_bytes("noname", bytes.clone(), None).unwrap();
        assert!(sniffed.samples == got.samples, "{name} sniffed");
        let piped = decode_reader(&bytes[..], None).unwrap();
        assert!(piped.samples == got.samples, "{name} piped");
    }
    // Matroska's `A_MS/ACM` track: FFmpeg's 4096 samples, the last frame's overlap in them.
    let mkv = decode_file_keeping_stereo(&fixture("tones.wma.mkv")).unwrap();
    assert_eq!((mkv.sample_rate, mkv.channels_in), (22_050, 2));
    assert_eq!(mkv.samples.len(), 4096);
    assert!(mkv.samples.iter().any(|v| v.abs() > 0.1), "silence");
    // WMA in WAV and in AVI (format tag 0x0161, as ffmpeg writes them): the ASF file's
    // superframes, so its samples exactly.
    let asf = decode_file_keeping_stereo(&fixture("tones.wma")).unwrap();
    for name in ["tones.wma.wav", "tones.wma.avi"] {
        let got = decode_file_keeping_stereo(&fixture(name)).unwrap();
        assert_eq!((got.sample_rate, got.channels_in), (22_050, 2), "{name}");
        assert!(got.samples == asf.samples, "{name}");
        assert!(got.stereo == asf.stereo, "{name}");
    }
}

/// Speex in Ogg (`.spx`) decodes to FFmpeg's float samples exactly: wideband speech
/// (VBR, with DTX's silent frames, two frames a packet), narrowband speech, and the tones
/// in ultra-wideband stereo (in-band stereo), by name, bytes and pipe alike; and Flash's
/// Speex in FLV.
#[test]
fn speex_decodes_as_ffmpeg_does() {
    let dir = scratch("speex");
    // `ffmpeg -c:a speex -i F -f f32le - | md5sum`, FFmpeg 5.1's own decoder.
    for (name, rate, channels, md5) in [
        ("speech.spx", 16_000, 1, "0103a9fea9e4bbeffd0e718bffdfba2d"),
        (
            "speech.nb.spx",
            8_000,
            1,
            "98b07856e0265d3d37cd3cf85ea9f104",
        ),
        ("tones.spx", 32_000, 2, "9e01bf3859d25b412bfb353a8ff36b9f"),
        (
            "tones.speex.flv",
            16_000,
            1,
            "bc8d9a216ce90bd060c8953be6d46cbb",
        ),
    ] {
        let got = decodes_to_ffmpegs(name, rate, channels, md5, &dir);
        let bytes = std::fs::read(fixture(name)).unwrap();
        let sniffed = decode_bytes("noname", bytes.clone(), None).unwrap();
        assert!(sniffed.samples == got.samples, "{name} sniffed");
        let piped = decode_reader(&bytes[..], None).unwrap();
        assert!(piped.samples == got.samples, "{name} piped");
        // Cut inside its last page (tag): the packets before it stay.
        let cut = decode_bytes("cut", bytes[..bytes.len() - 8].to_vec(), None).unwrap();
        assert!(cut.samples.len() < got.samples.len());
        assert!(got.samples.starts_with(&cut.samples), "{name} cut");
    }
}

/// The fixture `name` decodes at `rate` from `channels`, not silent, its channels
/// interleaved to the md5 of FFmpeg's `-f f32le` output; the decode.
fn decodes_to_ffmpegs(
    name: &str,
    rate: u32,
    channels: u16,
    md5: &str,
    dir: &Path,
) -> sotto_audio::Audio {
    let got = decode_file_keeping_stereo(&fixture(name)).unwrap();
    assert_eq!(
        (got.sample_rate, got.channels_in),
        (rate, channels),
        "{name}"
    );
    let samples = interleaved(&got);
    assert!(samples.iter().any(|v| v.abs() > 0.1), "{name}: silence");
    let got_md5 = f32_md5(&samples, dir);
    if name.contains("spx") || name.contains("speex") {
        same_as_glibc(&got_md5, md5, name);
    } else {
        assert_eq!(got_md5, md5, "{name}");
    }
    got
}

/// Speex and AMR take a few cosines, exponentials and logarithms from the platform's libm
/// (as FFmpeg does), whose last bits differ between glibc, macOS and Windows; their hashes,
/// made with FFmpeg on glibc, are compared there only.
fn same_as_glibc(got: &str, want: &str, what: &str) {
    if cfg!(all(target_os = "linux", target_env = "gnu")) {
        assert_eq!(got, want, "{what}");
    } else {
        eprintln!("{what}: FFmpeg's hash not compared: it depends on glibc's libm");
    }
}

/// ASF streams, Matroska's `A_MS/ACM` tracks and QuickTime's `ms` sample entries in what
/// a WAV file may hold decode as that WAV file would, to FFmpeg's samples exactly
/// (`ffmpeg -i F -f f32le - | md5sum`): G.711 μ-law in Matroska (IP cameras' streams,
/// recorded with `-c copy`), Microsoft ADPCM in ASF and in QuickTime (its chunks' bytes
/// from the version 1 sound description, whose samples are frames), and G.726 in
/// QuickTime (no WAVEFORMATEX: the entry's fields). `CONTAINERS` takes them by bytes and
/// through a pipe.
#[test]
fn wav_formats_in_asf_matroska_and_quicktime_decode_as_ffmpeg_does() {
    let dir = scratch("acm");
    for (name, rate, channels, md5) in [
        (
            "tones.mulaw.mkv",
            8_000,
            1,
            "3b38eaaa0f68319b5b4efb849d477604",
        ),
        (
            "tones.adpcm.asf",
            11_025,
            2,
            "41530efa10d018ab77dbe5add97b450d",
        ),
        (
            "tones.adpcm.mov",
            11_025,
            2,
            "41530efa10d018ab77dbe5add97b450d",
        ),
        (
            "tones.g726.mov",
            8_000,
            1,
            "dda81e0b163e8ebe5c59050a7b2090a0",
        ),
    ] {
        decodes_to_ffmpegs(name, rate, channels, md5, &dir);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// 8-bit PCM where symphonia's readers refuse it decodes to FFmpeg's samples exactly:
/// signed in QuickTime (`sowt` with 8-bit samples, which symphonia takes for 16) and CAF,
/// unsigned in AIFF-C (`raw `) and Matroska. The four files hold the same stereo tones.
#[test]
fn eight_bit_pcm_in_quicktime_caf_and_aiff_c_decodes_as_ffmpeg_does() {
    let dir = scratch("pcm8");
    for name in [
        "tones.s8.mov",
        "tones.s8.caf",
        "tones.u8.aiff",
        "tones.u8.mkv",
    ] {
        // `ffmpeg -i F -f f32le - | md5sum`, FFmpeg 5.1.
        decodes_to_ffmpegs(name, 8_000, 2, "6ecdc24691be27aebcf0b85b517c2130", &dir);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// WavPack decodes to FFmpeg's samples exactly, which are WavPack's own decoder's
/// (`wvunpack`) for each file here: FFmpeg's lossless 16-bit stereo; the `wavpack` tool's
/// hybrid (lossy: 96 kb/s, joint stereo), in `.wv` and in Matroska (the blocks' headers cut
/// down to flags and CRCs), as FFmpeg's lossless is too; its 32-bit float. Its 5.1 (three blocks a frame) decodes as the
/// same samples in FLAC. Cut short, a file keeps its whole frames; a damaged frame fails
/// its CRC (or sooner, its bounds) and is passed over, and a file of nothing else says so.
#[test]
fn wavpack_decodes_as_ffmpeg_and_wvunpack_do() {
    let dir = scratch("wavpack");
    for (name, rate, channels, md5) in [
        ("tones.wv", 22_050, 2, "540956a70057d1f77e5f7f3664ebae5d"),
        (
            "tones.hybrid.wv",
            22_050,
            2,
            "33ad209d4b405e31b0f086ae74ee6f75",
        ),
        (
            "tones.hybrid.mkv",
            22_050,
            2,
            "33ad209d4b405e31b0f086ae74ee6f75",
        ),
        ("tones.flt.wv", 8_000, 2, "58ef7de9cce020d288155b2c07d0fb35"),
    ] {
        decodes_to_ffmpegs(name, rate, channels, md5, &dir);
    }
    std::fs::remove_dir_all(dir).unwrap();
    let six = decode_file(&fixture("tones.51.wv")).unwrap();
    let flac = decode_file(&fixture("tones.51.wv.flac")).unwrap();
    assert_eq!((six.sample_rate, six.channels_in), (8_000, 6));
    assert_eq!(six.samples.len(), 2_000);
    assert!(six.samples == flac.samples);

    // Five frames of 2205 samples: cut inside the fourth, three are kept.
    let bytes = std::fs::read(fixture("tones.hybrid.wv")).unwrap();
    let whole = decode_bytes("tones.hybrid.wv", bytes.clone(), None).unwrap();
    assert_eq!(whole.samples.len(), 11_025);
    let cut = decode_bytes("cut.wv", bytes[..5_000].to_vec(), None).unwrap();
    assert_eq!(cut.samples.len(), 3 * 2_205);
    assert!(whole.samples.starts_with(&cut.samples));
    // A bit flipped in the second frame's bitstream: the frame fails its CRC.
    let mut damaged = bytes;
    damaged[2_500] ^= 0x10;
    let got = decode_bytes("damaged.wv", damaged, None).unwrap();
    assert_eq!(got.samples.len(), 4 * 2_205);
    assert!(got.samples[..2_205] == whole.samples[..2_205]);
    assert!(got.samples[2_205..] == whole.samples[2 * 2_205..]);
    let mut one = std::fs::read(fixture("tones.wv")).unwrap();
    one[10_000] ^= 0x01;
    let err = decode_bytes("one.wv", one, None).unwrap_err().to_string();
    assert!(
        err.contains("no packet could be decoded (wavpack: "),
        "{err}"
    );
}

/// TTA (True Audio) decodes to FFmpeg's samples exactly: 16-bit speech in `.tta`, 24-bit
/// stereo in Matroska (whose last frame's length comes from the segment's duration, as
/// FFmpeg takes it). Cut short, a file keeps its whole frames; a damaged frame fails its
/// CRC and is passed over.
#[test]
fn tta_decodes_as_ffmpeg_does() {
    let dir = scratch("tta");
    decodes_to_ffmpegs(
        "speech.tta",
        8_000,
        1,
        "ad4ebb4dfdd1dd6eb3208191cc2335c0",
        &dir,
    );
    decodes_to_ffmpegs(
        "tones.tta.mkv",
        8_000,
        2,
        "4419182e7ab1156d054bbc279a1e8203",
        &dir,
    );
    std::fs::remove_dir_all(dir).unwrap();
    // Two frames: 8359 samples (256/245 s), then the 3641 left of 1.5 s.
    let bytes = std::fs::read(fixture("speech.tta")).unwrap();
    let whole = decode_bytes("speech.tta", bytes.clone(), None).unwrap();
    assert_eq!(whole.samples.len(), 12_000);
    let cut = decode_bytes("cut.tta", bytes[..bytes.len() - 100].to_vec(), None).unwrap();
    assert!(cut.samples[..] == whole.samples[..8_359]);
    let mut damaged = bytes;
    let at = damaged.len() - 100;
    damaged[at] ^= 0x04;
    let got = decode_bytes("damaged.tta", damaged, None).unwrap();
    assert!(got.samples[..] == whole.samples[..8_359]);
}

/// FLAC in WAV and AVI (format tag 0xF1AC, as FFmpeg writes it) decodes to FFmpeg's
/// samples exactly, as the FLAC stream its frames make behind the STREAMINFO the format
/// carries; without one (a WAVEFORMATEX of 18 bytes), behind one made from the format's
/// channels, rate and bits, to the same samples; so does FLAC in CAF without a magic
/// cookie (FFmpeg's), behind one made from `desc` and the first frame.
#[test]
fn flac_in_wav_avi_and_caf_decodes_as_ffmpeg_does() {
    let dir = scratch("flac-wav");
    for name in ["tones.flac.wav", "tones.flac.avi", "tones.flac.caf"] {
        // `ffmpeg -i F -f f32le - | md5sum`, FFmpeg 5.1.
        decodes_to_ffmpegs(name, 8_000, 2, "de97203e3b11632d9a683b91d9ab2da2", &dir);
    }
    std::fs::remove_dir_all(dir).unwrap();
    let wav = std::fs::read(fixture("tones.flac.wav")).unwrap();
    let at = wav.windows(4).position(|w| w == b"data").unwrap();
    let mut bare = b"RIFF\0\0\0\0WAVEfmt \x12\0\0\0".to_vec();
    bare.extend_from_slice(&wav[20..36]);
    bare.extend_from_slice(&[0, 0]);
    bare.extend_from_slice(&wav[at..]);
    let riff = (bare.len() - 8) as u32;
    bare[4..8].copy_from_slice(&riff.to_le_bytes());
    let whole = decode_bytes("tones.flac.wav", wav, None).unwrap();
    let made = decode_bytes("bare.wav", bare, None).unwrap();
    assert!(made.samples == whole.samples);
}

/// What CAF and QuickTime files hold that symphonia's readers refuse: Apple's GSM 06.10
/// (`agsm`) in CAF and QuickTime decodes as its frames do alone, and IMA and Microsoft
/// ADPCM in CAF (`ms` and the WAVE format, as FFmpeg writes them) to FFmpeg's samples
/// exactly; so do Flash and Yamaha ADPCM in WAV and QuickTime, and G.722 and G.726 in
/// `.au`.
#[test]
fn gsm_and_adpcm_in_caf_wav_and_quicktime_decode_as_ffmpeg_does() {
    let raw = decode_file(&fixture("tones.gsm")).unwrap();
    for name in ["tones.gsm.caf", "tones.gsm.mov"] {
        let got = decode_file(&fixture(name)).unwrap();
        assert_eq!((got.sample_rate, got.channels_in), (8_000, 1), "{name}");
        assert!(got.samples == raw.samples, "{name}");
    }
    let dir = scratch("caf-adpcm");
    // `ffmpeg -i F -f f32le - | md5sum`, FFmpeg 5.1.
    decodes_to_ffmpegs(
        "tones.ima.caf",
        8_000,
        2,
        "f2ab7e01efbf5910436e046e0bfb5f6f",
        &dir,
    );
    decodes_to_ffmpegs(
        "tones.adpcm.caf",
        8_000,
        2,
        "cb4b620d15ca1b706409ad6bcaf0841f",
        &dir,
    );
    // G.722 and G.726 (its codes least significant bit first) in `.au` (encodings 24, 23).
    decodes_to_ffmpegs(
        "tones.g722.au",
        16_000,
        1,
        "a7ca52b4e5cb76b5f86962cf83ffdaca",
        &dir,
    );
    decodes_to_ffmpegs(
        "tones.g726.au",
        8_000,
        1,
        "dda81e0b163e8ebe5c59050a7b2090a0",
        &dir,
    );
    // Yamaha's ADPCM, stereo, in WAV and QuickTime.
    for name in ["tones.yamaha.wav", "tones.yamaha.mov"] {
        decodes_to_ffmpegs(name, 11_025, 2, "1c334ece3adf796139803df6f6ef9fb8", &dir);
    }
    // Flash ADPCM, stereo: in WAV (its blocks FLV's packets) and QuickTime.
    for name in ["tones.swf.wav", "tones.swf.mov"] {
        decodes_to_ffmpegs(name, 11_025, 2, "70c6f23f731c12eee411a02e547cf09b", &dir);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Vorbis outside Ogg, as FFmpeg writes it (the headers Xiph-laced after AVI's and ASF's
/// WAVEFORMATEX, in MP4's `esds` of object type 0xDD, in QuickTime's `glbl`), decodes as
/// the same packets in Ogg do: AVI's and ASF's to FFmpeg's length (no end trim to know),
/// MP4's and QuickTime's to the Ogg file's (the edit list's end; its start, the first
/// packet's length, is what the decoder gives none of).
#[test]
fn vorbis_in_avi_asf_mp4_and_quicktime_decodes_as_in_ogg() {
    let ogg = decode_file_keeping_stereo(&fixture("tones.vorbis.ogg")).unwrap();
    assert_eq!((ogg.sample_rate, ogg.channels_in), (11_025, 2));
    assert_eq!(ogg.samples.len(), 5_513);
    for (name, len) in [
        ("tones.vorbis.avi", 5_632),
        ("tones.vorbis.asf", 5_632),
        ("tones.vorbis.mp4", 5_513),
        ("tones.vorbis.mov", 5_513),
    ] {
        let got = decode_file_keeping_stereo(&fixture(name)).unwrap();
        assert_eq!((got.sample_rate, got.channels_in), (11_025, 2), "{name}");
        assert_eq!(got.samples.len(), len, "{name}");
        assert!(got.samples[..5_513] == ogg.samples[..], "{name}");
        assert!(
            interleaved(&got)[..2 * 5_513] == interleaved(&ogg)[..],
            "{name}"
        );
    }
}

/// Speex outside Ogg and FLV, as FFmpeg writes it (the Speex header after the
/// WAVEFORMATEX of Matroska's `A_MS/ACM`, ASF and AVI; in QuickTime's `glbl`), decodes as
/// the same packets in Ogg do, and to FFmpeg's samples exactly.
#[test]
fn speex_in_matroska_asf_avi_and_quicktime_decodes_as_in_ogg() {
    let ogg = decode_file(&fixture("speech.spx")).unwrap();
    for name in ["speech.spx.mkv", "speech.spx.asf", "speech.spx.mov"] {
        let got = decode_file(&fixture(name)).unwrap();
        assert_eq!((got.sample_rate, got.channels_in), (16_000, 1), "{name}");
        assert!(got.samples == ogg.samples, "{name}");
    }
    let dir = scratch("speex-avi");
    // `ffmpeg -i F -f f32le - | md5sum`, FFmpeg 5.1.
    decodes_to_ffmpegs(
        "tones.speex.avi",
        16_000,
        1,
        "bc8d9a216ce90bd060c8953be6d46cbb",
        &dir,
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// DSS (Olympus's and Philips's dictation recorders) in standard-play mode decodes to
/// FFmpeg's samples exactly: a file of random frames (FFmpeg has no DSS encoder; any bits
/// decode, and every step of the decoder's integer arithmetic shows in the result), its
/// frames stored in FFmpeg's swapped order across block headers; cut short, it keeps its
/// whole frames. A codec byte other than standard and long play's is named.
#[test]
fn dss_decodes_as_ffmpeg_does() {
    let got = decode_file(&fixture("noise.dss")).unwrap();
    assert_eq!((got.sample_rate, got.channels_in), (11_025, 1));
    // `ffmpeg -i noise.dss -f s16le - | md5sum`, FFmpeg 5.1.
    assert_eq!(
        s16_md5(&got.samples, &scratch("dss")),
        "2cf6f1a9665e258d7dd40f0770e5ed0c"
    );
    let bytes = std::fs::read(fixture("noise.dss")).unwrap();
    let sniffed = decode_bytes("noname", bytes.clone(), None).unwrap();
    assert!(sniffed.samples == got.samples);
    let cut = decode_bytes("cut.dss", bytes[..bytes.len() - 50].to_vec(), None).unwrap();
    assert_eq!(cut.samples.len(), got.samples.len() - 264 * 2);
    assert!(got.samples.starts_with(&cut.samples));
    let mut other = bytes;
    other[0x2a4] = 7;
    let e = decode_bytes("x.dss", other, None).unwrap_err().to_string();
    assert!(e.contains("a DSS codec sotto does not know"), "{e}");
}

/// A decode's samples as FFmpeg writes them: its two channels interleaved, or the mono.
fn interleaved(audio: &sotto_audio::Audio) -> Vec<f32> {
    match &audio.stereo {
        Some([l, r]) => l.iter().zip(r).flat_map(|(&l, &r)| [l, r]).collect(),
        None => audio.samples.clone(),
    }
}

/// `samples` (a 16-bit decode) as little-endian bytes, and their md5.
/// The md5 of `samples` as `ffmpeg -f f32le` writes them (the hashes tests hold), through
/// a file in `dir`.
fn f32_md5(samples: &[f32], dir: &Path) -> String {
    let raw = dir.join("decoded.f32");
    let le: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    std::fs::write(&raw, le).unwrap();
    sotto_testdata::md5(&raw)
}

fn s16_md5(samples: &[f32], dir: &Path) -> String {
    let raw = dir.join("decoded.s16");
    let le: Vec<u8> = samples
        .iter()
        .flat_map(|&s| ((s * 32768.0) as i16).to_le_bytes())
        .collect();
    std::fs::write(&raw, le).unwrap();
    sotto_testdata::md5(&raw)
}

/// G.729 (VoIP call recordings) decodes to FFmpeg's samples exactly: raw `.g729` frames of
/// real speech (bcg729's encoding, four frames lost and concealed), the same frames in WAV
/// (format 0x0083 or 0x729A), and Annex D's 6.4 kbit/s frames in WAV (random bits, which
/// reach the decoder's overflow and postfilter paths). The extension is read in either
/// case; a file cut inside a frame keeps its whole frames; G.729 in stereo WAV is named.
#[test]
fn g729_decodes_as_ffmpeg_does() {
    let dir = scratch("g729");
    let got = decode_file(&fixture("speech.g729")).unwrap();
    assert_eq!((got.sample_rate, got.channels_in), (8_000, 1));
    assert_eq!(got.samples.len(), 300 * 80);
    assert!(got.samples.iter().any(|v| v.abs() > 0.1), "not silence");
    // `ffmpeg -i F -f s16le - | md5sum`, FFmpeg 5.1.
    assert_eq!(
        s16_md5(&got.samples, &dir),
        "f29f48073a8562d12fb69a398eb14370"
    );
    let frames = std::fs::read(fixture("speech.g729")).unwrap();
    let hinted = decode_bytes("CALL", frames.clone(), Some("G729")).unwrap();
    assert!(hinted.samples == got.samples, "from bytes");
    let whole = sotto_audio::to_16k(got.clone()).unwrap();
    let path = fixture("speech.g729");
    let streamed = sotto_audio::load_16k(path.to_str().unwrap(), false).unwrap();
    assert_eq!(streamed, whole, "resampled as it decodes");
    let cut = frames[..frames.len() - 5].to_vec();
    let cut = decode_bytes("cut", cut, Some("g729")).unwrap();
    assert!(got.samples.starts_with(&cut.samples));
    assert_eq!(cut.samples.len(), got.samples.len() - 80);
    for tag in [0x0083u16, 0x729A] {
        let wav = coded_wav(tag, 1, 1_000, 10, &frames);
        let sniffed = decode_bytes("noname", wav, None).unwrap();
        assert!(sniffed.samples == got.samples, "WAV {tag:#06x}");
    }
    let annex_d = decode_file(&fixture("noise.g729d.wav")).unwrap();
    assert_eq!(annex_d.samples.len(), 100 * 80);
    assert_eq!(
        s16_md5(&annex_d.samples, &dir),
        "2ce966169f4ac319104bc51e98ef98a6"
    );
    let stereo = coded_wav(0x0083, 2, 2_000, 20, &frames);
    let e = decode_bytes("x.wav", stereo, None).unwrap_err().to_string();
    assert!(e.contains("G.729 in 2 channels"), "{e}");
}

/// G.723.1 decodes to FFmpeg's samples exactly: raw `.tco` frames of real speech
/// (FFmpeg's encoder at 6.3 kbit/s, with a pause of comfort noise and four frames of a
/// forbidden lag, concealed then muted spliced in), random frames of all four kinds (5.3
/// kbit/s too), the speech in WAV (format 0x0042, 0x0111, 0xA100) and as a DSS
/// recorder's long-play file (its frames across the block headers, ended by 0xFF
/// padding). A file cut inside a frame keeps its whole frames.
#[test]
fn g723_1_decodes_as_ffmpeg_does() {
    let dir = scratch("g723");
    // `ffmpeg -i F -f s16le - | md5sum`, FFmpeg 5.1.
    for (name, frames, md5) in [
        ("speech.tco", 121, "4a8585f02b4735db5dd8967a825779b5"),
        ("noise.tco", 100, "5d311ead513bcb4836842e55f9749d69"),
        ("speech.lp.dss", 121, "4a8585f02b4735db5dd8967a825779b5"),
    ] {
        let got = decode_file(&fixture(name)).unwrap();
        assert_eq!((got.sample_rate, got.channels_in), (8_000, 1), "{name}");
        assert_eq!(got.samples.len(), frames * 240, "{name}");
        assert_eq!(s16_md5(&got.samples, &dir), md5, "{name}");
    }
    let speech = decode_file(&fixture("speech.tco")).unwrap();
    assert!(speech.samples.iter().any(|v| v.abs() > 0.1), "not silence");
    let frames = std::fs::read(fixture("speech.tco")).unwrap();
    let cut = frames[..frames.len() - 5].to_vec();
    let cut = decode_bytes("cut", cut, Some("tco")).unwrap();
    assert!(speech.samples.starts_with(&cut.samples));
    assert_eq!(cut.samples.len(), speech.samples.len() - 240);
    for tag in [0x0042u16, 0x0111, 0xA100] {
        let wav = coded_wav(tag, 1, 800, 24, &frames);
        let sniffed = decode_bytes("noname", wav, None).unwrap();
        assert!(sniffed.samples == speech.samples, "WAV {tag:#06x}");
    }
    let dss = std::fs::read(fixture("speech.lp.dss")).unwrap();
    let sniffed = decode_bytes("noname", dss, None).unwrap();
    assert!(sniffed.samples == speech.samples, "DSS sniffed");
}

/// Flash ADPCM in FLV decodes to FFmpeg's samples exactly: FFmpeg's encoding of the
/// stereo tones (4-bit codes), and random packets of 2- to 5-bit codes, of every length,
/// in mono.
#[test]
fn flash_adpcm_decodes_as_ffmpeg_does() {
    let dir = scratch("adpcm_swf");
    // `ffmpeg -i F -f s16le - | md5sum`, FFmpeg 5.1 (channels interleaved).
    for (name, rate, channels, md5) in [
        (
            "tones.adpcm.flv",
            22_050,
            2,
            "daf2360729a6bee42392922acf57d158",
        ),
        (
            "noise.adpcm.flv",
            11_025,
            1,
            "8a0528e017134f380536fc8269a3feff",
        ),
    ] {
        let got = decode_file_keeping_stereo(&fixture(name)).unwrap();
        assert_eq!(
            (got.sample_rate, got.channels_in),
            (rate, channels),
            "{name}"
        );
        let samples = interleaved(&got);
        assert_eq!(s16_md5(&samples, &dir), md5, "{name}");
    }
}

/// A CAF file in a format sotto does not decode names it: four letters (`QDM2`), or a
/// Microsoft WAVE format tag (ffmpeg writes GSM 06.10 as `ms\0\x31`).
#[test]
fn caf_in_a_format_sotto_lacks_names_it() {
    let caf = |id: &[u8; 4]| {
        let mut f = b"caff\0\x01\0\0desc".to_vec();
        f.extend_from_slice(&32u64.to_be_bytes());
        f.extend_from_slice(&8000f64.to_be_bytes());
        f.extend_from_slice(id);
        f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 65, 0, 0, 1, 64, 0, 0, 0, 1, 0, 0, 0, 0]);
        f.extend_from_slice(b"data");
        f.extend_from_slice(&69u64.to_be_bytes());
        f.extend_from_slice(&[0; 69]);
        f
    };
    for (id, want) in [
        (b"QDM2", "format 'QDM2' in CAF"),
        (b"ms\0\x31", "WAVE format 0x0031 in CAF"),
    ] {
        let e = decode_bytes("x.caf", caf(id), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want) && e.contains("its audio codec"), "{e}");
    }
}

/// An 8 kHz WAV file of one codec's `data`, `block` bytes a block: a WAVEFORMATEX with no
/// extra bytes.
fn coded_wav(tag: u16, channels: u16, byte_rate: u32, block: u16, data: &[u8]) -> Vec<u8> {
    let mut fmt = Vec::new();
    fmt.extend_from_slice(&tag.to_le_bytes());
    fmt.extend_from_slice(&channels.to_le_bytes());
    fmt.extend_from_slice(&8_000u32.to_le_bytes());
    fmt.extend_from_slice(&byte_rate.to_le_bytes());
    fmt.extend_from_slice(&block.to_le_bytes());
    fmt.extend_from_slice(&[0; 4]);
    let mut body = b"WAVEfmt ".to_vec();
    body.extend_from_slice(&(fmt.len() as u32).to_le_bytes());
    body.extend_from_slice(&fmt);
    body.extend_from_slice(b"data");
    body.extend_from_slice(&(data.len() as u32).to_le_bytes());
    body.extend_from_slice(data);
    let mut wav = b"RIFF".to_vec();
    wav.extend_from_slice(&(body.len() as u32).to_le_bytes());
    wav.extend_from_slice(&body);
    wav
}

/// An ASF file: a header of file properties and one audio stream in WAVE format `tag`,
/// then a data object of one 64-byte packet (no payloads).
fn asf_file(tag: u16) -> Vec<u8> {
    fn object(guid: [u8; 16], body: &[u8]) -> Vec<u8> {
        let mut o = guid.to_vec();
        o.extend_from_slice(&(24 + body.len() as u64).to_le_bytes());
        o.extend_from_slice(body);
        o
    }
    fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[..4].copy_from_slice(&a.to_le_bytes());
        g[4..6].copy_from_slice(&b.to_le_bytes());
        g[6..8].copy_from_slice(&c.to_le_bytes());
        g[8..].copy_from_slice(&d);
        g
    }
    let ms = [0x8E, 0xE4, 0x00, 0xC0, 0x0C, 0x20, 0x53, 0x65];
    let mut file_props = vec![0u8; 80];
    file_props[68..72].copy_from_slice(&64u32.to_le_bytes());
    file_props[72..76].copy_from_slice(&64u32.to_le_bytes());
    let mut fmt = tag.to_le_bytes().to_vec();
    fmt.extend_from_slice(&[2, 0, 0x44, 0xAC, 0, 0, 0, 0x7D, 0, 0, 0, 8, 16, 0, 0, 0]);
    let mut stream = guid(
        0xF869_9E40,
        0x5B4D,
        0x11CF,
        [0xA8, 0xFD, 0, 0x80, 0x5F, 0x5C, 0x44, 0x2B],
    )
    .to_vec();
    stream.extend_from_slice(&[0; 16 + 8]);
    stream.extend_from_slice(&(fmt.len() as u32).to_le_bytes());
    stream.extend_from_slice(&0u32.to_le_bytes());
    stream.extend_from_slice(&[1, 0, 0, 0, 0, 0]);
    stream.extend_from_slice(&fmt);
    let objects = [
        object(guid(0x8CAB_DCA1, 0xA947, 0x11CF, ms), &file_props),
        object(
            guid(
                0xB7DC_0791,
                0xA9B7,
                0x11CF,
                [0x8E, 0xE6, 0, 0xC0, 0x0C, 0x20, 0x53, 0x65],
            ),
            &stream,
        ),
    ]
    .concat();
    let header = [0xA6, 0xD9, 0x00, 0xAA, 0x00, 0x62, 0xCE, 0x6C];
    let mut body = 2u32.to_le_bytes().to_vec();
    body.extend_from_slice(&[1, 2]);
    body.extend_from_slice(&objects);
    let mut file = object(guid(0x75B2_2630, 0x668E, 0x11CF, header), &body);
    let mut data = vec![0u8; 16 + 8 + 2];
    data[16..24].copy_from_slice(&1u64.to_le_bytes());
    data.extend_from_slice(&[0x82, 0, 0, 0x01, 0x5D, 0, 0, 0, 0, 0, 0]);
    data.resize(26 + 64, 0);
    file.extend_from_slice(&object(guid(0x75B2_2636, 0x668E, 0x11CF, header), &data));
    file
}

/// Formats sotto knows but does not decode are named, not taken for noise or a cut file:
/// Windows Media's other codecs, and a Speex header it cannot decode by.
#[test]
fn windows_media_pro_and_ogg_speex_are_named() {
    for (tag, what) in [
        (0x0162, "WMA Pro"),
        (0x0163, "WMA Lossless"),
        (0x000A, "WMA Voice"),
    ] {
        let e = decode_bytes("talk.wma", asf_file(tag), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "talk.wma: its audio codec is not supported: {what}"
            )),
            "{e}"
        );
    }
    // A WMA 2 stream with no packets holds no audio.
    let e = decode_bytes("empty.wma", asf_file(0x0161), None)
        .unwrap_err()
        .to_string();
    assert_eq!(e, "empty.wma: contains no audio samples");
    // An Ogg page of one segment holding a Speex header of no rate.
    let mut ogg = b"OggS\0\x02".to_vec();
    ogg.extend_from_slice(&[0; 20]);
    ogg.push(1);
    ogg.push(80);
    ogg.extend_from_slice(b"Speex   1.2.1");
    ogg.resize(27 + 1 + 80, 0);
    let e = decode_bytes("note.spx", ogg, None).unwrap_err().to_string();
    assert!(e.contains("a Speex header with a bad rate or mode"), "{e}");
}

/// Apple's IMA 4:1 ADPCM (`ima4`) decodes to FFmpeg's samples exactly in CAF (which
/// symphonia takes for WAV's IMA ADPCM), AIFF-C (which it refuses; shown to it as CAF)
/// and QuickTime (an entry it does not know); Apple Lossless in CAF behind FFmpeg's
/// `frma`-wrapped cookie, and Wave64, decode to the samples they hold.
#[test]
fn apple_ima4_caf_alac_and_wave64_decode() {
    let want = decode_file_keeping_stereo(&fixture("tones.ima4.flac")).unwrap();
    assert_eq!(want.channels_in, 2);
    for name in ["tones.ima4.caf", "tones.ima4.aiff", "tones.ima4.mov"] {
        let got = decode_file_keeping_stereo(&fixture(name)).unwrap();
        assert_eq!(got, want, "{name}");
        let bytes = std::fs::read(fixture(name)).unwrap();
        let sniffed = decode_bytes("noname", bytes, None).unwrap();
        assert_eq!(sniffed.samples, want.samples, "{name} sniffed");
    }
    let wav = decode_file_keeping_stereo(&fixture("tones.wav")).unwrap();
    let alac = decode_file_keeping_stereo(&fixture("tones.alac.caf")).unwrap();
    assert_eq!(alac.stereo.as_ref().unwrap()[0].len(), 2205);
    // Sony Wave64 too (its data chunk's size, as FFmpeg writes and reads it, counts the
    // padding to 8 bytes: one frame of zeros more).
    let w64 = decode_file_keeping_stereo(&fixture("tones.w64")).unwrap();
    assert_eq!(w64.stereo.as_ref().unwrap()[0].len(), 2206);
    for c in 0..2 {
        let w = &wav.stereo.as_ref().unwrap()[c];
        let a = &alac.stereo.as_ref().unwrap()[c];
        assert!(a[..] == w[..2205], "channel {c}");
        let s = &w64.stereo.as_ref().unwrap()[c];
        assert!(s[..2205] == w[..2205] && s[2205] == 0.0, "channel {c}");
    }
}

/// Matroska's `DiscardPadding`, the encoder's padding after the audio's end (FFmpeg writes
/// it for Opus and MP3), is dropped as FFmpeg drops it; ALAC in Matroska and QuickTime
/// decodes to the samples it holds.
#[test]
fn matroska_end_padding_is_dropped_and_alac_decodes() {
    // FFmpeg's frame counts (`ffmpeg -i FILE -f f32le -`): 648 and 542 fewer than the
    // blocks decode to.
    for (name, frames) in [("tones.webm", 24_000), ("tones.mp3.mkv", 12_130)] {
        let a = decode_file_keeping_stereo(&fixture(name)).unwrap();
        assert_eq!(a.stereo.as_ref().unwrap()[0].len(), frames, "{name}");
        assert_eq!(a.samples.len(), frames, "{name}");
    }
    let wav = decode_file_keeping_stereo(&fixture("tones.wav")).unwrap();
    // And in QuickTime, its cookie in a `wave` atom (a version 1 sound description).
    for name in ["tones.alac.mkv", "tones.alac.mov"] {
        let alac = decode_file_keeping_stereo(&fixture(name)).unwrap();
        assert_eq!((alac.sample_rate, alac.channels_in), (22_050, 2), "{name}");
        for c in 0..2 {
            let a = &alac.stereo.as_ref().unwrap()[c];
            let w = &wav.stereo.as_ref().unwrap()[c];
            assert!(a[..] == w[..2205], "{name}: channel {c}");
        }
    }
}

/// An FLV recording cut short (OBS stopped by a crash) keeps what it has; FLV audio in a
/// codec sotto does not decode is named, and an FLV of video alone has no audio.
#[test]
fn flv_cut_short_and_flv_refusals() {
    let bytes = std::fs::read(fixture("tones.flv")).unwrap();
    let whole = decode_bytes("tones.flv", bytes.clone(), None).unwrap();
    let cut = decode_bytes("cut.flv", bytes[..bytes.len() * 3 / 4].to_vec(), None).unwrap();
    assert!(cut.samples.len() > 1000 && cut.samples.len() < whole.samples.len());
    assert!(cut.samples[..] == whole.samples[..cut.samples.len()]);

    // A file header, then one tag of `kind` holding `data`.
    let flv = |kind: u8, data: &[u8]| {
        let mut f = b"FLV\x01\x05\0\0\0\x09\0\0\0\0".to_vec();
        f.push(kind);
        f.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
        f.extend_from_slice(&[0; 7]);
        f.extend_from_slice(data);
        f.extend_from_slice(&(11 + data.len() as u32).to_be_bytes());
        f
    };
    let e = decode_bytes("x.flv", flv(8, &[0x96, 1, 2, 3]), None).unwrap_err();
    assert!(
        e.to_string().contains("ADPCM, Nellymoser and Speex there"),
        "{e}"
    );
    assert!(e.to_string().contains("enhanced FLV audio"), "{e}");
    let e = decode_bytes("x.flv", flv(9, &[0x12, 0, 0, 0]), None).unwrap_err();
    assert_eq!(e.to_string(), "x.flv: contains no audio samples");
    let e = decode_bytes("x.flv", flv(8, &[0xAF, 1, 2, 3]), None).unwrap_err();
    assert!(e.to_string().contains("without its sequence header"), "{e}");
}

/// AMR-NB (phones' voice and call recorders: `.amr`, and `samr` tracks in 3GP) decodes to
/// FFmpeg's float samples exactly, in all eight modes, from a file, bytes, and bytes with
/// no name; the comfort-noise and no-data frames of a pause, which FFmpeg drops (moving
/// every later word), are silence of their length.
#[test]
fn amr_decodes_as_ffmpeg_does() {
    let bytes = std::fs::read(fixture("speech.amr")).unwrap();
    // Walk the frames: every mode is there, and the pause's frames (SID, then no data).
    let mut types = Vec::new();
    let mut at = 6;
    while at < bytes.len() {
        let ft = (bytes[at] >> 3) & 0xF;
        types.push(ft);
        at += [13, 14, 16, 18, 20, 21, 27, 32, 6, 1, 1, 1, 1, 1, 1, 1][usize::from(ft)];
    }
    assert_eq!(types.len(), 200);
    assert!((0..8).all(|m| types.contains(&m)));
    assert_eq!(types[161..164], [8, 15, 15]);

    let amr = decode_file(&fixture("speech.amr")).unwrap();
    assert_eq!((amr.sample_rate, amr.channels_in), (8_000, 1));
    assert_eq!(amr.samples.len(), 200 * 160);
    let pause = 161 * 160..164 * 160;
    assert!(amr.samples[pause.clone()].iter().all(|&s| s == 0.0));
    assert!(amr.samples.iter().any(|s| s.abs() > 0.1), "not silence");
    let mut spoken = amr.samples.clone();
    spoken.drain(pause);
    // `ffmpeg -i speech.amr -f f32le - | md5sum`, FFmpeg 5.1.
    same_as_glibc(
        &f32_md5(&spoken, &scratch("amr")),
        "4930dfd247f22ea347313e68756be48d",
        "speech.amr",
    );

    let three_gp = decode_file(&fixture("speech.3gp")).unwrap();
    assert!(three_gp.samples == amr.samples, "3gp");
    for (name, hint) in [("speech.amr", Some("amr")), ("speech.3gp", None)] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        let from_bytes = decode_bytes(name, bytes.clone(), hint).unwrap();
        assert!(from_bytes.samples == amr.samples, "{name} from bytes");
        let sniffed = decode_bytes("noname", bytes, None).unwrap();
        assert!(sniffed.samples == amr.samples, "{name} sniffed");
    }

    // A cut last frame keeps the frames before it.
    let cut = decode_bytes("cut.amr", bytes[..bytes.len() - 5].to_vec(), None).unwrap();
    assert!(cut.samples[..] == amr.samples[..199 * 160]);
    // Multichannel AMR is refused by name.
    for head in [
        &b"#!AMR_MC1.0\n\0\0\0\x02"[..],
        &b"#!AMR-WB_MC1.0\n\0\0\0\x02"[..],
    ] {
        let mut file = head.to_vec();
        file.extend_from_slice(&[0u8; 64]);
        let e = decode_bytes("x.amr", file, None).unwrap_err().to_string();
        assert!(
            e.contains("multichannel AMR") && e.contains("codec is not supported"),
            "{e}"
        );
    }
}

/// AMR-WB ("HD voice" calls and recorders: `.awb`, and `sawb` tracks in 3GP) decodes to
/// FFmpeg's float samples exactly, in all nine modes, its high band's noise included; a
/// SID frame, which FFmpeg drops, is silence of its length, and no-data frames and a
/// frame marked bad are silence, as in FFmpeg.
#[test]
fn amr_wb_decodes_as_ffmpeg_does() {
    let bytes = std::fs::read(fixture("speech.awb")).unwrap();
    let bits: [u16; 16] = [
        132, 177, 253, 285, 317, 365, 397, 461, 477, 40, 0, 0, 0, 0, 0, 0,
    ];
    let mut types = Vec::new();
    let mut at = 9;
    while at < bytes.len() {
        types.push((bytes[at] >> 3) & 0xF);
        at += 1 + usize::from(bits[usize::from((bytes[at] >> 3) & 0xF)]).div_ceil(8);
    }
    assert_eq!(types.len(), 203);
    assert!((0..9).all(|m| types.contains(&m)));
    assert_eq!(types[100..103], [9, 15, 15]);

    let awb = decode_file(&fixture("speech.awb")).unwrap();
    assert_eq!((awb.sample_rate, awb.channels_in), (16_000, 1));
    assert_eq!(awb.samples.len(), 203 * 320);
    assert!(awb.samples[100 * 320..103 * 320].iter().all(|&s| s == 0.0));
    assert!(awb.samples[153 * 320..154 * 320].iter().all(|&s| s == 0.0));
    assert!(awb.samples.iter().any(|s| s.abs() > 0.1), "not silence");
    let mut kept = awb.samples.clone();
    kept.drain(100 * 320..101 * 320);
    // `ffmpeg -i speech.awb -f f32le - | md5sum`, FFmpeg 5.1.
    same_as_glibc(
        &f32_md5(&kept, &scratch("amr-wb")),
        "6f448584e07d0cfb31ef506f3acbbba4",
        "speech.awb",
    );

    let three_gp = decode_file(&fixture("speech.awb.3gp")).unwrap();
    assert!(three_gp.samples == awb.samples, "3gp");
    for name in ["speech.awb", "speech.awb.3gp"] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        let sniffed = decode_bytes("noname", bytes, None).unwrap();
        assert!(sniffed.samples == awb.samples, "{name} sniffed");
    }
}

/// GSM 06.10 (voicemail and call recorders: WAV49, format 0x31, and raw `.gsm` frames),
/// G.722 (wideband SIP phones: format 0x028F, and raw `.g722`) and G.726 (format 0x0045,
/// 4- and 5-bit codes) decode to FFmpeg's samples exactly (its 16-bit decode, in FLAC), so
/// to faster-whisper's; from bytes, and by sniffing where there is something to sniff (not
/// raw G.722's bytes).
#[test]
fn gsm_g722_and_g726_decode_as_ffmpeg_does() {
    for (name, hint, rate) in [
        ("tones.gsm.wav", None, 8_000),
        ("tones.gsm", Some("gsm"), 8_000),
        ("tones.g722.wav", None, 16_000),
        ("tones.g722", Some("g722"), 16_000),
        ("tones.g726.wav", None, 8_000),
        ("tones.g726-40.wav", None, 8_000),
    ] {
        let got = decode_file(&fixture(name)).unwrap();
        let want = decode_file(&fixture(&format!("{name}.flac"))).unwrap();
        assert_eq!((got.sample_rate, got.channels_in), (rate, 1), "{name}");
        assert_eq!(got.samples.len(), want.samples.len(), "{name}");
        assert!(
            got.samples == want.samples,
            "{name}: {}",
            max_difference(&got.samples, &want.samples)
        );
        assert!(
            got.samples.iter().any(|v| v.abs() > 0.1),
            "{name}: not silence"
        );
        let bytes = std::fs::read(fixture(name)).unwrap();
        let from_bytes = decode_bytes(name, bytes.clone(), hint).unwrap();
        assert!(from_bytes.samples == want.samples, "{name} from bytes");
        if name != "tones.g722" {
            let sniffed = decode_bytes("noname", bytes, None).unwrap();
            assert!(sniffed.samples == want.samples, "{name} sniffed");
        }
    }
    // GSM is mono, in Microsoft's block sizes: anything else says so.
    let mut stereo = std::fs::read(fixture("tones.gsm.wav")).unwrap();
    stereo[22] = 2;
    let e = decode_bytes("x.wav", stereo, None).unwrap_err().to_string();
    assert!(e.contains("GSM 06.10 in 2 channels"), "{e}");
    // G.726's codes are 2 to 5 bits.
    let mut six = std::fs::read(fixture("tones.g726.wav")).unwrap();
    six[34] = 6;
    let e = decode_bytes("x.wav", six, None).unwrap_err().to_string();
    assert!(e.contains("G.726 of 6 bits a sample"), "{e}");
}

/// A FLAC file whose Vorbis comment claims a 3 GB vendor string (as one damaged bit can
/// make it) decodes to its samples, from a file and streamed: the tags are never read, where
/// symphonia's reader would reserve the 3 GB before reading them and abort.
#[test]
fn a_flac_file_with_a_damaged_comment_length_decodes() {
    let good = std::fs::read(fixture("tones.16k.flac")).unwrap();
    // fLaC, STREAMINFO (4 + 34 bytes), then the comment block's header and vendor length.
    assert_eq!(good[42] & 0x7f, 4, "a Vorbis comment block");
    let mut bad = good.clone();
    bad[46..50].copy_from_slice(&0xB400_0000u32.to_le_bytes());
    let want = decode_bytes("good.flac", good, None).unwrap().samples;
    assert_eq!(
        decode_bytes("bad.flac", bad.clone(), None).unwrap().samples,
        want
    );
    let streamed =
        sotto_audio::decode_stream_16k(std::io::Cursor::new(bad.clone()), "stdin", None, false);
    let whole = sotto_audio::decode_bytes_16k_mono("bad.flac", bad).unwrap();
    assert_eq!(streamed.unwrap().mono, whole);
}

/// An MP4 file whose tag (`udta/meta/ilst/©too/data`) claims 4 GB decodes to the samples
/// of the undamaged file: the metadata boxes are never read, where symphonia's reader would
/// reserve the 4 GB first.
#[test]
fn an_mp4_file_with_a_damaged_tag_size_decodes() {
    let good = std::fs::read(fixture("jfk.m4a")).unwrap();
    let data = good
        .windows(8)
        .position(|w| w == b"\xa9too\0\0\0\x1d")
        .unwrap()
        + 4;
    assert_eq!(&good[data + 4..data + 8], b"data");
    let mut bad = good.clone();
    bad[data..data + 4].copy_from_slice(&0xFFFF_FF00u32.to_be_bytes());
    let want = decode_bytes("good.m4a", good, None).unwrap().samples;
    assert_eq!(decode_bytes("bad.m4a", bad, None).unwrap().samples, want);
}
