use super::*;
use crate::filters::{LogitFilter, SuppressTokens};
use crate::greedy::Greedy;
use crate::mock::MockInference;

const N: usize = 16;
const EOT: u32 = 10;

/// A mock whose next-token distribution depends on the generated tokens: `tree` lists
/// (generated, [(token, probability)]); any other sequence continues with token 0 (never
/// ending); unlisted tokens get logit -30.
/// (generated tokens, [(next token, probability)]).
type Tree = Vec<(Vec<u32>, Vec<(u32, f32)>)>;

fn tree(tree: Tree) -> MockInference {
    let mut inf = MockInference::new(N, move |ctx| {
        let mut l = vec![-30.0f32; N];
        match tree.iter().find(|(g, _)| g.as_slice() == ctx.generated) {
            Some((_, next)) => next.iter().for_each(|&(t, p)| l[t as usize] = p.ln()),
            None => l[0] = 0.0,
        }
        l
    });
    inf.encode(&[]).unwrap();
    inf
}

fn task<'a>(filters: &'a [&'a dyn LogitFilter], max_steps: usize) -> DecodeTask<'a> {
    DecodeTask {
        prompt: &[11, 13],
        sot_index: 1,
        forced: &[],
        eot: EOT,
        no_speech: 12,
        max_steps,
        filters,
    }
}

fn beam(beam_size: usize, patience: f64, length_penalty: f64) -> BeamSearch {
    BeamSearch {
        beam_size,
        patience,
        length_penalty,
        entropy_threshold: None,
    }
}

/// Greedy takes 3 (0.6) and ends at 0.3; the beam finds 4, 5 at 0.4.
fn garden_path() -> MockInference {
    tree(vec![
        (vec![], vec![(3, 0.6), (4, 0.4)]),
        (vec![3], vec![(7, 0.5), (8, 0.5)]),
        (vec![3, 7], vec![(EOT, 1.0)]),
        (vec![3, 8], vec![(EOT, 1.0)]),
        (vec![4], vec![(5, 1.0)]),
        (vec![4, 5], vec![(EOT, 1.0)]),
    ])
}

#[test]
fn beam_finds_the_likelier_sequence_greedy_misses() {
    let mut inf = garden_path();
    let g = Greedy.search(&mut inf, &task(&[], 20)).unwrap();
    assert_eq!(g.tokens, vec![3, 7]);
    let r = beam(2, 1.0, 1.0).search(&mut inf, &task(&[], 20)).unwrap();
    assert_eq!(r.tokens, vec![4, 5]);
    assert!(
        (r.sum_logprob - 0.4f64.ln()).abs() < 1e-4,
        "{}",
        r.sum_logprob
    );
    assert!((r.avg_logprob - 0.4f64.ln() / 3.0).abs() < 1e-4);
    // The prompt decodes once; the batch is broadcast to the beams, then follows their
    // origins: after step 1 the best beam (4, 5) comes from beam 1 and (3, 7) from beam 0.
    assert_eq!(inf.prompts.last().unwrap(), &vec![11, 13]);
    assert_eq!(inf.reorders, vec![vec![0, 0], vec![1, 0]]);
    assert_eq!(inf.batches, vec![2, 2]);
}

#[test]
fn last_step_finishes_every_beam_with_its_last_token() {
    let mut inf = garden_path();
    let r = beam(2, 1.0, 1.0).search(&mut inf, &task(&[], 2)).unwrap();
    assert_eq!(r.tokens, vec![4, 5]);
    // No end token was chosen, so none is scored.
    assert!((r.sum_logprob - 0.4f64.ln()).abs() < 1e-4);
    assert_eq!(inf.batches, vec![2]);
}

/// 3 then the end (0.55), or 4, 5, 6 then the end (0.45): shorter but less likely per token.
fn short_or_long() -> MockInference {
    tree(vec![
        (vec![], vec![(3, 0.55), (4, 0.45)]),
        (vec![3], vec![(EOT, 1.0)]),
        (vec![4], vec![(5, 1.0)]),
        (vec![4, 5], vec![(6, 1.0)]),
        (vec![4, 5, 6], vec![(EOT, 1.0)]),
    ])
}

#[test]
fn length_penalty_ranks_finished_hypotheses() {
    let mut inf = short_or_long();
    // len^1: ln .45 / 3 > ln .55 / 1.
    let r = beam(2, 1.0, 1.0).search(&mut inf, &task(&[], 20)).unwrap();
    assert_eq!(r.tokens, vec![4, 5, 6]);
    // The finished beam (3, end) was replaced by the best not-ending candidate (3, 0).
    assert_eq!(inf.reorders[1], vec![0, 1]);
    // len^0: the raw sums.
    let r = beam(2, 1.0, 0.0).search(&mut inf, &task(&[], 20)).unwrap();
    assert_eq!(r.tokens, vec![3]);
    assert!((r.avg_logprob - 0.55f64.ln() / 2.0).abs() < 1e-4);
}

#[test]
fn patience_sets_how_many_hypotheses_end_the_search() {
    let mut inf = short_or_long();
    // round(2 × 0.5) = 1: the first finished hypothesis ends the search at step 1.
    let r = beam(2, 0.5, 1.0).search(&mut inf, &task(&[], 20)).unwrap();
    assert_eq!(r.tokens, vec![3]);
    assert_eq!(inf.batches, vec![2]);
    inf.batches.clear();
    // round(2 × 1) = 2: three more steps until (4, 5, 6, end).
    beam(2, 1.0, 1.0).search(&mut inf, &task(&[], 20)).unwrap();
    assert_eq!(inf.batches, vec![2, 2, 2]);
    assert!(beam(2, 0.2, 1.0).search(&mut inf, &task(&[], 20)).is_err());
    assert!(beam(0, 1.0, 1.0).search(&mut inf, &task(&[], 20)).is_err());
}

#[test]
fn filters_apply_per_beam_with_its_own_tokens() {
    let mut inf = garden_path();
    // Banning 5 leaves (4, x) at -30: the beam falls back to (3, 7).
    let ban = SuppressTokens::new(vec![5]);
    let filters: [&dyn LogitFilter; 1] = [&ban];
    let r = beam(2, 1.0, 1.0)
        .search(&mut inf, &task(&filters, 20))
        .unwrap();
    assert_eq!(r.tokens, vec![3, 7]);
}

#[test]
fn beam_of_one_is_greedy() {
    let mut inf = garden_path();
    let r = beam(1, 1.0, 1.0).search(&mut inf, &task(&[], 20)).unwrap();
    let g = Greedy.search(&mut inf, &task(&[], 20)).unwrap();
    assert_eq!(r.tokens, g.tokens);
    assert!((r.sum_logprob - g.sum_logprob).abs() < 1e-5);
}

/// Scores from a small set (many ties), some NaN and −∞, across many chunks: the same
/// list as a stable sort of every score.
#[test]
fn top_k_equals_a_full_sort() {
    let mut state = 0x9e37_79b9u32;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    for len in [1, 63, 64, 65, 1000, 5 * 51_864] {
        let s: Vec<f32> = (0..len)
            .map(|_| match next() % 50 {
                0 => f32::NAN,
                1 => f32::NEG_INFINITY,
                r => (r % 23) as f32 * 0.25 - 2.0,
            })
            .collect();
        let mut all: Vec<(usize, f32)> = s
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, v)| !v.is_nan())
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1));
        for m in [1, 2, 10] {
            let got: Vec<(usize, f32)> = (top_k(&s, len, &[0.0], m).iter())
                .map(|c| (c.flat, c.score))
                .collect();
            assert_eq!(got, all[..m.min(all.len())], "len {len}, m {m}");
        }
    }
}

#[test]
fn top_k_is_sorted_and_keeps_the_first_of_ties() {
    let s = [0.5, f32::NAN, 2.0, 0.5, -1.0, 2.0, f32::NEG_INFINITY];
    let flats: Vec<usize> = top_k(&s, 7, &[0.0], 4).iter().map(|c| c.flat).collect();
    assert_eq!(flats, vec![2, 5, 0, 3]);
    assert_eq!(top_k(&s, 7, &[0.0], 10).len(), 6);
}

#[test]
fn top_k_adds_each_rows_shift_as_the_written_row_would() {
    // Rows whose length is no multiple of the pre-check's chunks, each with its own shift;
    // the answer is that of the shifted rows written out, ties to the lower index, among
    // them two logits that differ but tie once shifted (100 and the next f32 up, plus 1e5).
    let n = 1000;
    let mut state = 7u32;
    let mut rows: Vec<f32> = (0..3 * n)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            match state >> 26 {
                0 => f32::NAN,
                1 => f32::NEG_INFINITY,
                r => (r % 17) as f32 * 0.5,
            }
        })
        .collect();
    rows[3] = 100.0;
    rows[10] = f32::from_bits(100f32.to_bits() + 1);
    let shifts = [1e5f32, -3.0, 0.25];
    let written: Vec<f32> = (rows.chunks(n).zip(shifts))
        .flat_map(|(r, d)| r.iter().map(move |&v| v + d))
        .collect();
    let mut all: Vec<(usize, f32)> = (written.iter().copied().enumerate())
        .filter(|(_, v)| !v.is_nan())
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1));
    for m in [1, 2, 10, 40] {
        let got: Vec<(usize, f32)> = (top_k(&rows, n, &shifts, m).iter())
            .map(|c| (c.flat, c.score))
            .collect();
        assert_eq!(got, all[..m], "m {m}");
    }
    assert_eq!(
        top_k(&rows, n, &shifts, 1)[0].flat,
        3,
        "the tie after the shift"
    );
}

#[test]
fn forced_prefix_scores_zero_and_shields_secondary_ends() {
    // After [3]: 4 (0.5) is best, the end (0.3) second.
    let after_3 = || {
        tree(vec![
            (vec![], vec![(3, 1.0)]),
            (vec![3], vec![(4, 0.5), (EOT, 0.3), (5, 0.2)]),
            (vec![3, 4], vec![(EOT, 1.0)]),
            (vec![3, 5], vec![(EOT, 1.0)]),
        ])
    };
    // One finished hypothesis ends the search.
    let mut b = beam(2, 0.5, 1.0);
    // Decoded freely, the end at the second candidate finishes [3] and stops the search.
    let r = b.search(&mut after_3(), &task(&[], 10)).unwrap();
    assert_eq!(r.tokens, vec![3]);
    // Forced, 3 scores 0 and, as CTranslate2 does right after a prefix, the secondary end is
    // not taken: the search goes on to [3, 4].
    let t = DecodeTask {
        forced: &[3],
        ..task(&[], 10)
    };
    let r = b.search(&mut after_3(), &t).unwrap();
    assert_eq!(r.tokens, vec![3, 4]);
    assert_eq!(r.logprobs[0], 0.0);
    assert!(
        (r.sum_logprob - 0.5f64.ln()).abs() < 1e-4,
        "{}",
        r.sum_logprob
    );
    // Greedy and sampling start from the forced tokens too.
    let r = Greedy.search(&mut after_3(), &t).unwrap();
    assert_eq!((r.tokens, r.logprobs[0]), (vec![3, 4], 0.0));
}

/// 3 (0.6) then "1 3 1 3 ..." or 4 (0.4) then "5 6 7 8 9 4 ...", 40 tokens before the end:
/// the loop is likelier, and its last 32 tokens are spread over 2 ids (entropy ln 2), the
/// other's over 6 (ln 6).
pub(crate) fn loop_or_cycle(n: usize, eot: u32) -> MockInference {
    let mut inf = MockInference::new(n, move |ctx| {
        let mut l = vec![-30.0f32; n];
        let g = ctx.generated;
        let next = match g.first() {
            None => {
                (l[3], l[4]) = (0.6f32.ln(), 0.4f32.ln());
                return l;
            }
            Some(_) if g.len() >= 40 => eot,
            Some(3) => [3, 1][g.len() % 2],
            Some(_) => 4 + (g.len() % 6) as u32,
        };
        l[next as usize] = 0.0;
        l
    });
    inf.encode(&[]).unwrap();
    inf
}

/// whisper.cpp's entropy test judges each finished hypothesis: with a threshold the
/// likelier loop ranks after the hypothesis that passes it.
#[test]
fn entropy_threshold_ranks_looping_hypotheses_last() {
    let mut inf = loop_or_cycle(N, EOT);
    // Off; the loop fails at 1; at 5 both fail and the likeliest is kept (the fallback
    // then retries it).
    for (threshold, start) in [
        (None, [3, 1, 3]),
        (Some(1.0), [4, 5, 6]),
        (Some(5.0), [3, 1, 3]),
    ] {
        let mut search = BeamSearch {
            entropy_threshold: threshold,
            ..beam(2, 1.0, 1.0)
        };
        let r = search.search(&mut inf, &task(&[], 60)).unwrap();
        assert_eq!(r.tokens[..3], start, "{threshold:?}");
    }
}
