//! Batched decoding agrees with decoding each sequence alone.

use std::sync::Arc;

use crate::testmodel::{file, max_abs_diff, HP};
use crate::{Session, Whisper};

fn session(threads: usize) -> Session {
    let model = Arc::new(Whisper::from_file(&file()).unwrap());
    let mut s = Session::new(model, threads).unwrap();
    let mel: Vec<f32> = (0..HP.n_mels * 2 * HP.n_audio_ctx)
        .map(|i| ((i * 37 % 11) as f32 - 5.0) / 5.0)
        .collect();
    s.encode(&mel).unwrap();
    s
}

/// The last-row logits of `seq` decoded alone, from a fresh sequence.
fn alone(s: &mut Session, seq: &[u32]) -> Vec<f32> {
    s.reset_text();
    let mut l = vec![0.0; HP.n_vocab];
    s.decode(seq, &[seq.len() - 1], &mut l).unwrap();
    l
}

#[test]
fn batched_steps_follow_reorders_and_match_single_sequences() {
    let v = HP.n_vocab;
    let prompt = [1u32, 7, 3];
    let mut a = session(2);
    let mut b = session(1);
    let mut first = vec![0.0; v];
    a.decode(&prompt, &[2], &mut first).unwrap();
    // Broadcast to three beams, one token each.
    a.reorder(&[0, 0, 0]).unwrap();
    assert_eq!((a.batch(), a.text_len()), (3, 3));
    let mut l = vec![0.0; 3 * v];
    a.decode_batch(&[4, 9, 0], 3, &mut l).unwrap();
    for (i, t) in [4u32, 9, 0].into_iter().enumerate() {
        let want = alone(&mut b, &[1, 7, 3, t]);
        assert!(
            max_abs_diff(&l[i * v..(i + 1) * v], &want) < 1e-4,
            "beam {i}"
        );
    }
    // Keep beams 2 and 0 (swapped, 1 dropped), then two tokens each in one pass.
    a.reorder(&[2, 0]).unwrap();
    let mut l = vec![0.0; 2 * v];
    a.decode_batch(&[5, 6, 8, 2], 2, &mut l).unwrap();
    assert_eq!(a.text_len(), 6);
    let want0 = alone(&mut b, &[1, 7, 3, 0, 5, 6]);
    let want1 = alone(&mut b, &[1, 7, 3, 4, 8, 2]);
    assert!(max_abs_diff(&l[..v], &want0) < 1e-4);
    assert!(max_abs_diff(&l[v..], &want1) < 1e-4);
    // Growing past the first capacity keeps the sequences.
    a.reorder(&[1, 1, 0, 1, 0]).unwrap();
    let mut l = vec![0.0; 5 * v];
    a.decode_batch(&[3; 5], 5, &mut l).unwrap();
    let want = alone(&mut b, &[1, 7, 3, 0, 5, 6, 3]);
    assert!(max_abs_diff(&l[2 * v..3 * v], &want) < 1e-4);
    assert!(max_abs_diff(&l[4 * v..], &want) < 1e-4);
}

#[test]
fn batch_calls_are_checked() {
    let v = HP.n_vocab;
    let mut s = session(1);
    let mut l = vec![0.0; 2 * v];
    s.decode(&[1, 2], &[1], &mut l[..v]).unwrap();
    assert!(s.reorder(&[]).is_err());
    assert!(s.reorder(&[1]).is_err());
    s.reorder(&[0, 0]).unwrap();
    // A batch of two is not a batch of one.
    assert!(s.decode(&[1], &[0], &mut l[..v]).is_err());
    assert!(s.decode_batch(&[1, 2], 1, &mut l[..v]).is_err());
    assert!(s.decode_batch(&[1, 2, 3], 2, &mut l).is_err());
    assert!(s.decode_batch(&[1, 99], 2, &mut l).is_err());
    assert!(s.decode_batch(&[1, 2], 2, &mut l[..v]).is_err());
    // Two positions used: eight more fit in n_text_ctx 10, nine do not.
    let err = s.decode_batch(&[1; 18], 2, &mut l).unwrap_err();
    assert!(err.to_string().contains("n_text_ctx"), "{err}");
    assert_eq!((s.batch(), s.text_len()), (2, 2));
    s.decode_batch(&[1; 16], 2, &mut l).unwrap();
    assert_eq!(s.text_len(), 10);
    s.reset_text();
    assert_eq!((s.batch(), s.text_len()), (1, 0));
}

/// A mel window of its own for each seed.
fn mel(seed: usize) -> Vec<f32> {
    (0..HP.n_mels * 2 * HP.n_audio_ctx)
        .map(|i| (((i + seed) * (37 + seed) % 11) as f32 - 5.0) / 5.0)
        .collect()
}

/// The last-row logits of `seq` decoded alone against window `w` in a session of its own.
fn alone_on(w: &[f32], seq: &[u32]) -> Vec<f32> {
    let model = Arc::new(Whisper::from_file(&file()).unwrap());
    let mut s = Session::new(model, 1).unwrap();
    s.encode(w).unwrap();
    let mut l = vec![0.0; HP.n_vocab];
    s.decode(seq, &[seq.len() - 1], &mut l).unwrap();
    l
}

#[test]
fn windows_decoded_together_match_each_window_alone() {
    let v = HP.n_vocab;
    let mels: Vec<Vec<f32>> = (1..=3).map(mel).collect();
    let refs: Vec<&[f32]> = mels.iter().map(|m| &m[..]).collect();
    // The windows' audio tells them apart (else the test could not fail).
    let (a, b) = (alone_on(&mels[0], &[1, 7]), alone_on(&mels[1], &[1, 7]));
    assert!(max_abs_diff(&a, &b) > 1e-3);
    let mut s = session(2);
    s.encode_windows(&refs).unwrap();
    assert_eq!((s.windows(), s.batch(), s.text_len()), (3, 3, 0));
    // Each window's prompt, in one pass.
    let mut l = vec![0.0; 3 * v];
    s.decode_batch(&[1, 7, 1, 7, 1, 7], 3, &mut l).unwrap();
    for (i, m) in mels.iter().enumerate() {
        let want = alone_on(m, &[1, 7]);
        assert!(
            max_abs_diff(&l[i * v..(i + 1) * v], &want) < 1e-4,
            "window {i}"
        );
    }
    // Window 1 finishes; windows 2 and 0 go on, swapped; then window 2 as two beams.
    s.reorder(&[2, 0]).unwrap();
    let mut l = vec![0.0; 2 * v];
    s.decode_batch(&[4, 9], 2, &mut l).unwrap();
    assert!(max_abs_diff(&l[..v], &alone_on(&mels[2], &[1, 7, 4])) < 1e-4);
    assert!(max_abs_diff(&l[v..], &alone_on(&mels[0], &[1, 7, 9])) < 1e-4);
    s.reorder(&[1, 0, 0]).unwrap();
    let mut l = vec![0.0; 3 * v];
    s.decode_batch(&[3, 5, 6], 3, &mut l).unwrap();
    assert!(max_abs_diff(&l[..v], &alone_on(&mels[0], &[1, 7, 9, 3])) < 1e-4);
    assert!(max_abs_diff(&l[v..2 * v], &alone_on(&mels[2], &[1, 7, 4, 5])) < 1e-4);
    assert!(max_abs_diff(&l[2 * v..], &alone_on(&mels[2], &[1, 7, 4, 6])) < 1e-4);
    // One window again: the session is an ordinary one.
    s.encode(&mels[1]).unwrap();
    assert_eq!((s.windows(), s.batch()), (1, 1));
    let mut l = vec![0.0; v];
    s.decode(&[1, 7], &[1], &mut l).unwrap();
    assert!(max_abs_diff(&l, &alone_on(&mels[1], &[1, 7])) < 1e-4);
    // Bad windows are refused.
    assert!(s.encode_windows(&[]).is_err());
    assert!(s.encode_windows(&[&mels[0], &mels[1][1..]]).is_err());
}
