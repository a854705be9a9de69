use super::*;

fn timing(word: &str, tokens: &[u32]) -> WordTiming {
    WordTiming {
        word: word.into(),
        tokens: tokens.to_vec(),
        // Each token starts at its id, in seconds: where merged tokens went shows.
        token_times: tokens.iter().map(|&t| f64::from(t)).collect(),
        start: 0.0,
        end: 0.0,
        probability: 1.0,
    }
}

#[test]
fn dtw_follows_the_strongest_diagonal() {
    // Row i is strongest at columns 2i and 2i + 1 (every other cell costs): the path steps
    // right twice per row.
    let (n, m) = (3, 6);
    let mut x = vec![-1f32; n * m];
    for i in 0..n {
        x[i * m + 2 * i] = 1.0;
        x[i * m + 2 * i + 1] = 1.0;
    }
    let path = negative_dtw(&x, n, m);
    assert_eq!(path.first(), Some(&(0, 0)));
    assert_eq!(path.last(), Some(&(n - 1, m - 1)));
    assert_eq!(path, [(0, 0), (0, 1), (1, 2), (1, 3), (2, 4), (2, 5)]);
    // Monotone in both coordinates, one step at a time.
    for w in path.windows(2) {
        let (di, dj) = (w[1].0 - w[0].0, w[1].1 - w[0].1);
        assert!(di <= 1 && dj <= 1 && di + dj >= 1);
    }
}

#[test]
fn median_filter_reflects_at_the_edges() {
    let x = [5.0, 1.0, 9.0, 2.0, 7.0, 3.0, 8.0, 4.0];
    let mut out = [0f32; 8];
    median_filter(&x, 7, &mut out);
    // j = 0 reads x[3], x[2], x[1], x[0], x[1], x[2], x[3] = 2 9 1 5 1 9 2 -> median 2.
    assert_eq!(out[0], 2.0);
    // j = 4 reads x[1..8] -> 1 9 2 7 3 8 4 -> median 4.
    assert_eq!(out[4], 4.0);
    // j = 7 reads x[4], x[5], x[6], x[7], x[6], x[5], x[4] = 7 3 8 4 8 3 7 -> 7.
    assert_eq!(out[7], 7.0);
    // Rows no longer than half the width pass through.
    let mut short = [0f32; 3];
    median_filter(&[3.0, 1.0, 2.0], 7, &mut short);
    assert_eq!(short, [3.0, 1.0, 2.0]);
}

#[test]
fn punctuation_merges_into_neighbours() {
    let mut a = vec![
        timing(" \"", &[1]),
        timing(" Hello", &[2]),
        timing(",", &[3]),
        timing(" world", &[4]),
        timing(".\"", &[5]),
    ];
    merge_punctuations(&mut a, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS);
    let words: Vec<&str> = a.iter().map(|w| w.word.as_str()).collect();
    assert_eq!(words, ["", " \" Hello,", "", " world", ".\""]);
    assert_eq!(a[1].tokens, [1, 2, 3]);
    assert_eq!(a[1].token_times, [1.0, 2.0, 3.0]);
    assert_eq!(a[4].token_times, [5.0]);
    assert!(a[0].tokens.is_empty() && a[2].tokens.is_empty());
    assert!(a[0].token_times.is_empty() && a[2].token_times.is_empty());
}

#[test]
fn known_heads_by_shape_else_second_half() {
    assert_eq!(default_alignment_heads(4, 6, 80, false, "x")[0], (1, 0));
    assert_eq!(default_alignment_heads(6, 8, 80, true, "x").len(), 8);
    assert_eq!(default_alignment_heads(32, 20, 128, true, "x")[0], (7, 0));
    assert_eq!(
        default_alignment_heads(32, 20, 80, true, "large-v1")[0],
        (9, 19)
    );
    let other = default_alignment_heads(4, 20, 128, true, "turbo");
    assert_eq!(other.len(), 40);
    assert_eq!(other[0], (2, 0));
}

#[test]
fn long_first_word_after_a_pause_is_cut() {
    let mut cut = Cut {
        start: 10.0,
        end: 14.0,
        tokens: Vec::new(),
        logprobs: Vec::new(),
        words: Vec::new(),
    };
    let word = |w: &str, start, end| Word {
        start,
        end,
        word: w.into(),
        probability: 1.0,
        tokens: Vec::new(),
        token_times: Vec::new(),
    };
    let mut words = vec![word(" a", 9.0, 12.0), word(" b", 12.0, 12.4)];
    adjust_bounds(&mut cut, &mut words, 0.0, 0.3, 0.6);
    // The first word is shortened to the max duration; the segment starts with it.
    assert!((words[0].start - 11.4).abs() < 1e-9);
    assert!((cut.start - 11.4).abs() < 1e-9);
    // The segment's end (14.0) is past the last word's: it follows the word.
    assert_eq!(cut.end, 12.4);
}

#[test]
fn round2_matches_python() {
    assert_eq!(round2(1.0 + 0.28), 1.28);
    assert_eq!(round2(0.125), 0.12);
    assert_eq!(round2(2.675), 2.67);
}
