//! What the binary's end-to-end tests share: the sample clip and how its text is compared.

pub use sotto_testdata::{jfk, normalise, wav_channels, JFK};

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
