use super::*;
use crate::tokenizer::tests::toy;

fn text(s: &str) -> Vec<u32> {
    s.bytes().map(u32::from).collect()
}

#[test]
fn split_single_timestamp_ending() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let tokens = [
        vec![tb],
        text("hi"),
        vec![tb + 100, tb + 100],
        text("yo"),
        vec![tb + 200],
    ]
    .concat();
    let (cuts, seek, _) = split_by_timestamps(&tok, &tokens, &[], 1.0, 3000, 30.0, 100);
    assert_eq!(seek, 3100);
    assert_eq!(cuts.len(), 2);
    assert_eq!((cuts[0].start, cuts[0].end), (1.0, 3.0));
    assert_eq!((cuts[1].start, cuts[1].end), (3.0, 5.0));
    assert_eq!(
        cuts[1].tokens,
        [vec![tb + 100], text("yo"), vec![tb + 200]].concat()
    );
}

#[test]
fn split_consecutive_resumes_at_last_timestamp() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let tokens = [
        vec![tb],
        text("hi"),
        vec![tb + 100, tb + 100],
        text("unfinished"),
    ]
    .concat();
    let (cuts, seek, _) = split_by_timestamps(&tok, &tokens, &[], 0.0, 3000, 30.0, 0);
    assert_eq!(cuts.len(), 1);
    assert_eq!(seek, 200);
    assert_eq!(
        cuts[0].tokens,
        [vec![tb], text("hi"), vec![tb + 100]].concat()
    );
}

#[test]
fn split_without_consecutive_timestamps() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    // One closing timestamp: the segment ends there, the whole window is consumed.
    let tokens = [vec![tb], text("hi"), vec![tb + 150]].concat();
    let (cuts, seek, _) = split_by_timestamps(&tok, &tokens, &[], 2.0, 2000, 20.0, 200);
    assert_eq!((cuts[0].start, cuts[0].end, seek), (2.0, 5.0, 2200));
    // No closing timestamp (or only <|0.00|>): the segment spans the window.
    let tokens = [vec![tb], text("hi")].concat();
    let (cuts, seek, _) = split_by_timestamps(&tok, &tokens, &[], 2.0, 2000, 20.0, 200);
    assert_eq!((cuts[0].start, cuts[0].end, seek), (2.0, 22.0, 2200));
    let (cuts, _, _) = split_by_timestamps(&tok, &text("hi"), &[], 0.0, 500, 5.0, 0);
    assert_eq!((cuts[0].start, cuts[0].end), (0.0, 5.0));
}

#[test]
fn cuts_carry_their_tokens_log_probabilities() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let tokens = [vec![tb], text("hi"), vec![tb + 100, tb + 100], text("yo")].concat();
    let logprobs: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();
    let (cuts, _, _) = split_by_timestamps(&tok, &tokens, &logprobs, 0.0, 3000, 30.0, 0);
    assert_eq!(cuts.len(), 1);
    assert_eq!(cuts[0].logprobs, vec![0.0, -1.0, -2.0, -3.0]);
}

fn word(w: &str, start: f64, end: f64, probability: f64) -> Word {
    Word {
        start,
        end,
        word: w.into(),
        probability,
        tokens: text(w),
        token_times: Vec::new(),
    }
}

/// A cut holding `words` (their tokens between two timestamps), bounded by them.
fn cut_of(tok: &Tokenizer, words: Vec<Word>) -> Cut {
    let tb = tok.timestamp_begin();
    let tokens: Vec<u32> = std::iter::once(tb)
        .chain(words.iter().flat_map(|w| w.tokens.clone()))
        .chain(std::iter::once(tb + 10))
        .collect();
    Cut {
        start: words[0].start,
        end: words[words.len() - 1].end,
        logprobs: (0..tokens.len()).map(|i| -0.01 * i as f32).collect(),
        tokens,
        words,
    }
}

#[test]
fn anomaly_scores_follow_faster_whisper() {
    let tok = toy(&[], 99);
    // One improbable word of normal length: score 1 >= 1 word.
    let c = cut_of(&tok, vec![word(" You", 0.0, 0.5, 0.05)]);
    assert!(is_segment_anomaly(Some(&c)));
    // Probable words of normal length are not.
    let c = cut_of(
        &tok,
        vec![word(" Hello", 0.0, 0.4, 0.9), word(" there", 0.4, 0.8, 0.8)],
    );
    assert!(!is_segment_anomaly(Some(&c)));
    // A word longer than 2 s adds its excess; a very short one (2/3 of 0.133 s missing) too.
    let c = cut_of(
        &tok,
        vec![word(" a", 0.0, 4.5, 0.9), word(" b", 4.5, 4.55, 0.9)],
    );
    assert!(is_segment_anomaly(Some(&c)), "2.5 + 1.245 >= 3");
    // Punctuation-only words do not count; no words or no segment is no anomaly.
    let c = cut_of(
        &tok,
        vec![word(" fine", 0.0, 0.5, 0.9), word("!", 0.5, 0.51, 0.01)],
    );
    assert!(!is_segment_anomaly(Some(&c)));
    assert!(!is_segment_anomaly(None));
}

fn span(time_offset: f64) -> WindowSpan {
    WindowSpan {
        time_offset,
        duration: 30.0,
        end_time: time_offset + 30.0,
        content_duration: 100.0,
        seek: (time_offset * 100.0) as usize,
        content_frames: 10_000,
    }
}

#[test]
fn leading_silence_before_a_hallucination_is_skipped() {
    let tok = toy(&[], 99);
    let mut cuts = vec![cut_of(&tok, vec![word(" You", 26.9, 28.3, 0.03)])];
    let mut seek = 3000;
    let v = skip_hallucinations(&mut cuts, &mut seek, &span(0.0), 2.0, 0.0);
    // 26.9 s of silence first: decode again from there, emitting nothing.
    assert_eq!(v, Hallucination::SkipTo(2690));
    // Under the threshold the first-segment rule does not fire; the second one drops it
    // (silence before: it starts within 2 s of the window; after: the window ends).
    let mut cuts = vec![cut_of(&tok, vec![word(" You", 1.0, 1.5, 0.03)])];
    let mut seek = 3000;
    let v = skip_hallucinations(&mut cuts, &mut seek, &span(0.0), 2.0, 0.0);
    assert_eq!(v, Hallucination::Keep);
    assert!(cuts.is_empty());
    assert_eq!(seek, 100, "resumes 1 s into the window");
}

#[test]
fn hallucination_between_speech_is_kept_and_speech_is_untouched() {
    let tok = toy(&[], 99);
    let speech = |a: f64| {
        cut_of(
            &tok,
            vec![
                word(" we", a, a + 0.3, 0.9),
                word(" go", a + 0.3, a + 0.6, 0.9),
            ],
        )
    };
    // An odd segment right between two spoken ones: no silence around it, kept.
    let mut cuts = vec![
        speech(5.0),
        cut_of(&tok, vec![word(" um", 5.7, 6.2, 0.05)]),
        speech(6.3),
    ];
    let mut seek = 3000;
    let v = skip_hallucinations(&mut cuts, &mut seek, &span(0.0), 2.0, 4.0);
    assert_eq!((v, cuts.len(), seek), (Hallucination::Keep, 3, 3000));
    // Followed by 10 s of silence and preceded by 3 s: dropped with what follows.
    let mut cuts = vec![
        speech(5.0),
        cut_of(&tok, vec![word(" um", 8.6, 9.0, 0.05)]),
        speech(19.0),
    ];
    let v = skip_hallucinations(&mut cuts, &mut seek, &span(0.0), 2.0, 4.0);
    assert_eq!((v, cuts.len(), seek), (Hallucination::Keep, 1, 860));
}

#[test]
fn long_segments_split_between_words() {
    let tok = toy(&[], 99);
    let words = vec![
        word(" one", 0.0, 0.5, 0.9),
        word(" two", 0.5, 1.0, 0.9),
        word(" three", 1.0, 1.6, 0.9),
        word(" four.", 1.6, 2.2, 0.9),
    ];
    let cut = cut_of(&tok, words);
    let limits = |c, t| SegmentLimits {
        max_chars: c,
        max_tokens: t,
    };
    // "one two" is 7 characters; adding " three" would make 13.
    let pieces = split_cut(&tok, &cut, limits(Some(8), None)).unwrap();
    let texts: Vec<String> = pieces.iter().map(|p| tok.decode(&p.tokens)).collect();
    assert_eq!(texts, vec![" one two", " three", " four."]);
    assert_eq!(
        pieces.iter().map(|p| (p.start, p.end)).collect::<Vec<_>>(),
        vec![(0.0, 1.0), (1.0, 1.6), (1.6, 2.2)]
    );
    // Tokens and their log-probabilities stay together, timestamps dropped.
    let all: Vec<u32> = pieces.iter().flat_map(|p| p.tokens.clone()).collect();
    assert_eq!(all, cut.tokens[1..cut.tokens.len() - 1]);
    let lps: Vec<f32> = pieces.iter().flat_map(|p| p.logprobs.clone()).collect();
    assert_eq!(lps, cut.logprobs[1..cut.logprobs.len() - 1]);
    // A word longer than the limit stands alone; a token limit counts tokens.
    let pieces = split_cut(&tok, &cut, limits(Some(2), None)).unwrap();
    assert_eq!(pieces.len(), 4);
    let pieces = split_cut(&tok, &cut, limits(None, Some(10))).unwrap();
    let texts: Vec<String> = pieces.iter().map(|p| tok.decode(&p.tokens)).collect();
    assert_eq!(texts, vec![" one two", " three", " four."]);
    // Within the limits, or no limit: no split.
    assert!(split_cut(&tok, &cut, limits(Some(100), Some(100))).is_none());
    assert!(split_cut(&tok, &cut, limits(None, None)).is_none());
    // Words that do not account for the text: left alone.
    let mut odd = cut.clone();
    odd.words[0].tokens.pop();
    assert!(split_cut(&tok, &odd, limits(Some(8), None)).is_none());
}
