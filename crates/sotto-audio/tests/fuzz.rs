//! Any bytes give Ok or an error, never a panic: random data, and the fixtures truncated and
//! bit-flipped.

use std::path::Path;

use proptest::prelude::*;
use sotto_audio::{decode_bytes, decode_bytes_16k_within, to_16k};

/// Every fixture the decode tests use: containers and codecs, and the references beside them.
fn fixtures() -> &'static [Vec<u8>] {
    static ALL: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        paths.sort();
        paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
    })
}

/// A 16 kHz mono 16-bit PCM WAV header whose sizes claim more than follows, as a recorder
/// that stopped before writing them leaves.
const WAV_HEADER: [u8; 44] = *b"RIFF\xff\xff\xff\x7fWAVEfmt \x10\0\0\0\x01\0\x01\0\x80\x3e\0\0\0\x7d\0\0\x02\0\x10\0data\xff\xff\xff\x7f";

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
    fixtures()[i].clone()
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
    #![proptest_config(ProptestConfig::with_cases(sotto_testdata::fuzz_cases(200)))]

    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096), hint in 0..HINTS.len()) {
        check(bytes, HINTS[hint]);
    }

    #[test]
    fn random_bytes_behind_a_wav_header(tail in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut bytes = WAV_HEADER.to_vec();
        bytes.extend(tail);
        check(bytes, None);
    }

    #[test]
    fn truncated_fixtures(which in 0..fixtures().len(), cut in 0.0..1.0f64) {
        let bytes = fixture(which);
        let len = (bytes.len() as f64 * cut) as usize;
        check(bytes[..len].to_vec(), None);
    }

    #[test]
    fn bit_flipped_fixtures(
        which in 0..fixtures().len(),
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
