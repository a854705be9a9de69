//! `transcribe_timed`'s books: decoder steps (one token per sequence) apart from the other
//! decoder calls, on tiny.en and `samples/jfk.wav`.

use sotto::{Model, TranscribeOptions};

#[test]
fn steps_are_booked_apart_from_other_calls() {
    let model = Model::load(&sotto_testdata::model_dir("tiny.en")).expect("model loads");
    let wav = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav");
    let audio = sotto::audio::load_16k_mono(wav.to_str().unwrap()).expect("jfk decodes");
    let mut session = model.session(2).expect("session");
    for beam_size in [1, 5] {
        let opts = TranscribeOptions {
            beam_size,
            ..Default::default()
        };
        let (t, tm) = session
            .transcribe_timed(&audio, &opts, &mut |_| true)
            .expect("transcribes");
        let tokens: usize = t.segments.iter().map(|s| s.tokens.len()).sum();
        assert_eq!(tm.windows, 1, "beam {beam_size}");
        // Every emitted token took a step (plus the one that ended the text).
        assert!(
            tm.steps > tokens,
            "beam {beam_size}: {tm:?}, {tokens} tokens"
        );
        assert!(tm.steps <= tm.decode_calls, "beam {beam_size}: {tm:?}");
        assert!(tm.step_time <= tm.decode, "beam {beam_size}: {tm:?}");
        assert!(tm.decode <= tm.total, "beam {beam_size}: {tm:?}");
    }
}
