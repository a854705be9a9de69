//! Any bytes give Ok or an error, never a panic: random data, and the fixtures truncated and
//! bit-flipped.

use std::path::Path;

use proptest::prelude::*;
use sotto_audio::{decode_bytes, decode_bytes_16k_within, to_16k};

const FIXTURES: [&str; 105] = [
    "tones.nelly.mov",
    "tones.yamaha.wav",
    "tones.yamaha.mov",
    "tones.g726.au",
    "tones.s302m.ts",
    "tones.bd.m2ts",
    "tones.g722.au",
    "tones.flac.caf",
    "speech.spx.mkv",
    "speech.spx.mov",
    "tones.speex.avi",
    "tones.vorbis.avi",
    "tones.vorbis.asf",
    "tones.vorbis.mp4",
    "tones.swf.wav",
    "tones.swf.mov",
    "tones.gsm.mov",
    "tones.ima.caf",
    "tones.adpcm.caf",
    "tones.flac.wav",
    "speech.tta",
    "tones.tta.mkv",
    "tones.u8.mkv",
    "tones.wv",
    "tones.hybrid.wv",
    "tones.hybrid.mkv",
    "tones.51.wv",
    "tones.s8.mov",
    "tones.s8.caf",
    "tones.u8.aiff",
    "noise.adpcm.flv",
    "speech.lp.dss",
    "noise.g729d.wav",
    "noise.dss",
    "speech.spx",
    "tones.spx",
    "tones.mpg",
    "tones.lpcm.vob",
    "tones.wma",
    "speech.wmav1.wma",
    "tones.wma.mkv",
    "tones.wma.wav",
    "tones.mulaw.mkv",
    "tones.adpcm.asf",
    "tones.adpcm.mov",
    "tones.g726.mov",
    "tones.g722.wav",
    "tones.w64",
    "tones.ima4.caf",
    "tones.ima4.aiff",
    "tones.alac.caf",
    "tones.nelly.flv",
    "tones.flv",
    "tones.g726.wav",
    "tones.g726-40.wav",
    "speech.amr",
    "speech.3gp",
    "speech.awb",
    "speech.awb.3gp",
    "tones.wav",
    "tones.au",
    "tones.gsm.wav",
    "tones.gsm",
    "tones.rf64.wav",
    "tones.flac",
    "tones.mp3",
    "tones.ogg",
    "tones.opus",
    "tones.51.opus",
    "speech.short.opus",
    "speech.short.ogg",
    "tones.webm",
    "tones.mp3.mkv",
    "tones.alac.mkv",
    "tones.mono.mp2",
    "speech.joint.mp2",
    "tones.aac.avi",
    "tones.g726.avi",
    "tones.mxf",
    "speech.dv",
    "tones.lame.mp3",
    "tones.m4a",
    "tones.aac",
    "tones.51.m4a",
    "tones.he.aac",
    "tones.latm.ts",
    "tones.he.latm.ts",
    "tones.51.opus.ts",
    "tones.pcm.mkv",
    "tones.s24.mka",
    "tones.avi",
    "tones.mp3.avi",
    "tones.ts",
    "tones.ac3",
    "tones.51.ac3",
    "tones.ac3.mkv",
    "tones.ac3.m4a",
    "tones.51.eac3",
    "tones.71.mka",
    "tones.51.dts",
    "tones.51.tools.dts",
    "tones.dts.wav",
    "tones.51.thd.mka",
    "tones.mlp.mka",
    "tones.thd",
];
const HINTS: [Option<&str>; 7] = [
    None,
    Some("wav"),
    Some("flac"),
    Some("mp3"),
    Some("ogg"),
    Some("g729"),
    Some("tco"),
];

fn fixture(i: usize) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    std::fs::read(dir.join(FIXTURES[i])).unwrap()
}

/// Decodes and checks the contract: finite samples, or a one-line error naming the input;
/// resampled as it decodes, the same as resampled after.
fn check(bytes: Vec<u8>, hint: Option<&str>) {
    let streamed = decode_bytes_16k_within("fuzz.bin", bytes.clone(), hint, f64::INFINITY, true);
    match decode_bytes("fuzz.bin", bytes, hint) {
        Ok(audio) => {
            assert!(audio.sample_rate > 0 && audio.channels_in > 0);
            assert!(!audio.samples.is_empty());
            assert!(audio.samples.iter().all(|v| v.is_finite()));
            if let Ok(after) = to_16k(audio) {
                assert_eq!(streamed.expect("decodes while resampling").mono, after.mono);
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with("fuzz.bin: ") && !msg.contains('\n'),
                "{msg}"
            );
            // Resampled as it decodes, a stream may change its rate; at its rate, not.
            if !msg.contains("sample rate changes mid-stream") {
                let e = streamed.expect_err("an error while resampling too");
                assert!(e.to_string().starts_with("fuzz.bin: "), "{e}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096), hint in 0..HINTS.len()) {
        check(bytes, HINTS[hint]);
    }

    #[test]
    fn random_bytes_behind_a_wav_header(tail in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut bytes = fixture(0)[..44].to_vec();
        bytes.extend(tail);
        check(bytes, None);
    }

    #[test]
    fn truncated_fixtures(which in 0..FIXTURES.len(), cut in 0.0..1.0f64) {
        let bytes = fixture(which);
        let len = (bytes.len() as f64 * cut) as usize;
        check(bytes[..len].to_vec(), None);
    }

    #[test]
    fn bit_flipped_fixtures(
        which in 0..FIXTURES.len(),
        flips in proptest::collection::vec((0.0..1.0f64, 0..8u8, any::<bool>()), 1..16),
    ) {
        let mut bytes = fixture(which);
        for (at, bit, in_header) in flips {
            // Half the flips land in the first 256 bytes, where the headers are.
            let span = if in_header { 256.min(bytes.len()) } else { bytes.len() };
            let i = (span as f64 * at) as usize;
            bytes[i] ^= 1 << bit;
        }
        check(bytes, None);
    }
}
