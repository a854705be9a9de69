//! A long hunt for inputs that crash the decoder: the test fixtures with random bits
//! flipped, decoded whole and resampled as they decode, each case printed on stderr before
//! it runs. The fuzz test (`tests/fuzz.rs`) catches panics; this finds aborts too (a
//! damaged length that makes a reader reserve gigabytes), which end the process and so
//! leave the case that caused them as the last line:
//!
//! ```sh
//! (ulimit -v 3000000; cargo run --release -p sotto-audio --example hunt 2>&1 | tail -3)
//! ```
//!
//! `EXT=.caf` hunts in the fixtures whose names end so; `SEED=n` starts elsewhere;
//! `ROUNDS=n` stops after n cases (default: a million).

fn main() {
    let env = |k: &str| std::env::var(k).ok();
    let mut seed: u64 = env("SEED").map_or(0x9e37_79b9_7f4a_7c15, |s| s.parse().unwrap());
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| env("EXT").is_none_or(|x| p.to_string_lossy().ends_with(&x)))
        .collect();
    files.sort();
    let rounds: u64 = env("ROUNDS").map_or(1_000_000, |s| s.parse().unwrap());
    for round in 0..rounds {
        let file = &files[(rnd() % files.len() as u64) as usize];
        let mut bytes = std::fs::read(file).unwrap();
        let mut flips = vec![];
        for _ in 0..1 + rnd() % 15 {
            // Half the flips land in the first 256 bytes, where the headers are.
            let span = if rnd() % 2 == 0 {
                256.min(bytes.len())
            } else {
                bytes.len()
            };
            let (at, bit) = ((rnd() % span as u64) as usize, rnd() % 8);
            bytes[at] ^= 1 << bit;
            flips.push((at, bit));
        }
        eprintln!("{round} {} {flips:?}", file.display());
        let _ = sotto_audio::decode_bytes_16k_within("x", bytes.clone(), None, f64::INFINITY, true);
        let _ = sotto_audio::decode_bytes("x", bytes, None);
    }
}
