//! Decodes an audio or video file as sotto hears it, at its own rate:
//! `cargo run --release -p sotto-audio --example decode -- FILE [OUT.f32]` prints the
//! sample count, rate and channels (or the error) and writes the mono mix as f32le, as
//! `ffmpeg -i FILE -ac 1 -f f32le OUT.f32` does (`scripts/sweep-containers` compares the two).

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(input) = args.first() else {
        eprintln!("usage: decode FILE [OUT.f32]");
        return ExitCode::from(2);
    };
    let audio = match sotto_audio::decode_file(std::path::Path::new(input)) {
        Ok(audio) => audio,
        Err(e) => {
            println!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{} samples at {} Hz ({} channels)",
        audio.samples.len(),
        audio.sample_rate,
        audio.channels_in
    );
    if let Some(out) = args.get(1) {
        let bytes: Vec<u8> = audio.samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        if let Err(e) = std::fs::File::create(out).and_then(|mut f| f.write_all(&bytes)) {
            eprintln!("{out}: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
