//! What the binary's end-to-end tests share: the sample clip and how its text is compared.

pub use sotto_testdata::{jfk, normalise, JFK};

/// 16-bit mono WAV of `samples` at 16 kHz.
pub fn wav(samples: &[f32]) -> Vec<u8> {
    wav_channels(&[samples])
}

/// 16-bit WAV at 16 kHz of `channels` (equal lengths), interleaved.
pub fn wav_channels(channels: &[&[f32]]) -> Vec<u8> {
    let (n, c) = (channels[0].len(), channels.len());
    let interleaved: Vec<f32> = (0..n)
        .flat_map(|i| channels.iter().map(move |ch| ch[i]))
        .collect();
    let data_len = (interleaved.len() * 2) as u32;
    let mut out = Vec::with_capacity(44 + interleaved.len() * 2);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&(c as u16).to_le_bytes());
    out.extend_from_slice(&16_000u32.to_le_bytes());
    out.extend_from_slice(&(32_000 * c as u32).to_le_bytes());
    out.extend_from_slice(&(2 * c as u16).to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    out.extend(s16le(&interleaved));
    out
}

/// A stereo call: jfk's first sentence (to 8 s) on the left channel, the rest on the right.
pub fn jfk_two_speakers() -> Vec<u8> {
    let jfk = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let cut = 8 * 16000;
    let side = |left: bool| -> Vec<f32> {
        (jfk.iter().enumerate())
            .map(|(i, &v)| if (i < cut) == left { v } else { 0.0 })
            .collect()
    };
    wav_channels(&[&side(true), &side(false)])
}

/// `samples` as raw 16-bit little-endian PCM (what `sotto stream` reads).
pub fn s16le(samples: &[f32]) -> Vec<u8> {
    (samples.iter())
        .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32767.0) as i16).to_le_bytes())
        .collect()
}
