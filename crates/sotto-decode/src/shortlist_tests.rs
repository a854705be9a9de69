use super::*;
use crate::beam::BeamSearch;
use crate::filters::{ApplyTimestampRules, LogitFilter, SuppressBlank, SuppressTokens};
use crate::greedy::{DecodeTask, Greedy, Rng, Search};
use crate::inference::Inference;
use crate::mock::MockInference;
use crate::tokenizer::tests::toy;

/// Values in [-8, 8) with repeats (ties), some NaN and −inf.
fn row(n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n)
        .map(|_| match rng.next_u64() % 97 {
            0 => f32::NAN,
            1 | 2 => f32::NEG_INFINITY,
            r if r < 20 => 3.0,
            _ => (rng.next_f64() * 16.0 - 8.0) as f32,
        })
        .collect()
}

fn spec(n: usize, text_end: usize, top: usize, pinned: &[u32]) -> ShortlistSpec {
    ShortlistSpec::from_need(
        n,
        text_end,
        &LogitNeed::Top {
            top,
            text_end: text_end as u32,
            never: pinned.to_vec(),
            watch: Vec::new(),
        },
    )
}

fn reduced(spec: &ShortlistSpec, rows: &[f32]) -> Shortlists {
    let mut s = Shortlists::new(spec.clone());
    s.full_rows(rows.len() / spec.n_vocab())
        .copy_from_slice(rows);
    s.reduce();
    s
}

#[test]
fn a_record_holds_the_rest_the_best_the_pinned_and_the_tail() {
    let mut rng = Rng::new(5);
    for (n, te, k, pinned) in [
        (1864, 256, 3, vec![0u32, 7, 9, 200, 255]),
        (1864, 256, 10, vec![]),
        (300, 300, 4, vec![1, 2]),
        (300, 120, 0, vec![5]),
        (40, 30, 64, vec![3]),
    ] {
        let sp = spec(n, te, k, &pinned);
        let x = row(n, &mut rng);
        let mut s = reduced(&sp, &x);
        assert_eq!(s.rows(), 1);
        let rec = s.records().to_vec();
        assert_eq!(rec.len(), sp.record_len());
        let rest: Vec<(usize, f32)> = (0..te)
            .filter(|i| !pinned.contains(&(*i as u32)))
            .map(|i| (i, x[i]))
            .collect();
        let finite: Vec<f32> = rest.iter().map(|r| r.1).filter(|v| !v.is_nan()).collect();
        let m = finite.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(rec[0], m);
        let sum: f64 = finite.iter().map(|&v| f64::from(v - m).exp()).sum();
        assert!((f64::from(rec[1]) - sum).abs() <= 1e-5 * sum.max(1.0));
        // The best k: by value, ties to the lower id; NaN and −inf never.
        let mut best: Vec<(usize, f32)> = rest
            .iter()
            .copied()
            .filter(|r| r.1 > f32::NEG_INFINITY)
            .collect();
        best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for j in 0..k {
            let (id, l) = best
                .get(j)
                .map_or((-1.0, f32::NEG_INFINITY), |&(i, v)| (i as f32, v));
            assert_eq!((rec[2 + j], rec[2 + k + j]), (id, l), "slot {j} of {k}");
        }
        let held = &rec[2 + 2 * k..];
        for (j, &p) in pinned.iter().filter(|&&p| (p as usize) < te).enumerate() {
            assert_eq!(held[j].to_bits(), x[p as usize].to_bits());
        }
        let tail = &held[sp.pinned().len()..];
        assert!(tail
            .iter()
            .zip(&x[te..])
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        // Each held entry reads back.
        for (id, l) in s.row(0).entries() {
            assert_eq!(l.to_bits(), x[id as usize].to_bits(), "id {id}");
        }
    }
}

/// A filter's masks on a shortlist agree with its masks on the whole row: every held
/// entry, the maximum and normalizer of the ranges the filters read, and the search's
/// offset and choice.
pub(crate) fn check_against_full(
    f: &dyn LogitFilter,
    full: &[f32],
    generated: &[u32],
    text_end: u32,
    top: usize,
) -> Vec<f32> {
    let task = DecodeTask {
        prompt: &[],
        sot_index: 0,
        forced: &[],
        eot: text_end,
        no_speech: 0,
        max_steps: 1,
        filters: &[],
    };
    let filters = [f];
    let need = DecodeTask {
        filters: &filters,
        ..task
    }
    .logit_need(top);
    let sp = ShortlistSpec::from_need(full.len(), text_end as usize, &need);
    let mut lists = reduced(&sp, full);
    let mut short = lists.row(0);
    let mut whole = full.to_vec();
    f.apply(&mut Row::Full(&mut whole), generated);
    f.apply(&mut Row::Short(&mut short), generated);
    for (id, l) in short.entries() {
        let w = whole[id as usize];
        assert!(l.to_bits() == w.to_bits(), "id {id}: {l} vs {w}");
    }
    let n = full.len();
    let te = text_end as usize;
    let close = |a: f32, b: f32| a == b || (a - b).abs() <= 1e-5 * a.abs().max(1.0);
    for (a, b) in [(0, te), (0, te + 5), (te, n), (te + 3, n), (0, n)] {
        let full_row = Row::Full(&mut whole);
        let (m, lse) = (full_row.max(a, b), full_row.logsumexp(a, b));
        let s = Row::Short(&mut short);
        assert_eq!(s.max(a, b), m, "max over {a}..{b}");
        assert!(close(s.logsumexp(a, b), lse), "lse over {a}..{b}");
    }
    let d = crate::math::log_softmax_offset(&whole, 0.0);
    assert!(close(short.offset(0.0), d));
    // The choice: the first maximum of the whole row, among the held entries.
    let want = crate::greedy::argmax(&whole);
    if whole[want as usize] > f32::NEG_INFINITY {
        let got = (short.entries()).filter(|e| !e.1.is_nan()).fold(
            (u32::MAX, f32::NEG_INFINITY),
            |b, e| {
                if e.1 > b.1 || (e.1 == b.1 && e.0 < b.0) {
                    e
                } else {
                    b
                }
            },
        );
        assert_eq!(got.0, want);
    }
    whole
}

#[test]
fn filters_mask_a_shortlist_as_they_mask_the_whole_row() {
    let tok = toy(&[], 99);
    let (tb, eot) = (tok.timestamp_begin(), tok.eot());
    let n = tok.n_vocab();
    let sup = SuppressTokens::new(vec![3, 5, 40, eot + 2, u32::MAX]);
    let blank = SuppressBlank::new(&tok);
    let rules = ApplyTimestampRules::new(&tok, Some(50));
    let free = ApplyTimestampRules::new(&tok, None);
    let filters: [&dyn LogitFilter; 4] = [&sup, &blank, &rules, &free];
    let histories: [&[u32]; 6] = [
        &[],
        &[tb + 10],
        &[tb, b'a' as u32, tb + 20],
        &[tb, b'a' as u32, tb + 20, tb + 20],
        &[tb, b'a' as u32, tb + 20, tb + 20, b'a' as u32],
        &[b'a' as u32, b' ' as u32],
    ];
    let mut rng = Rng::new(11);
    for trial in 0..16 {
        let mut x = row(n, &mut rng);
        if trial % 2 == 0 {
            // Timestamps likely enough to take over sometimes.
            for v in &mut x[tb as usize..] {
                *v = (rng.next_f64() * 4.0) as f32;
            }
        }
        x[b' ' as usize] = 9.0;
        for f in filters {
            for g in histories {
                for top in [1, 3, 10] {
                    check_against_full(f, &x, g, eot, top);
                }
            }
        }
    }
}

/// A filter that says nothing of what it masks: the search then pins every text token,
/// so the record is the whole row.
struct Opaque(u32);

impl LogitFilter for Opaque {
    fn apply(&self, row: &mut Row, _generated: &[u32]) {
        row.mask_range(self.0 as usize, self.0 as usize + 7);
    }
}

#[test]
fn filters_that_say_nothing_get_the_whole_row() {
    let tok = toy(&[], 99);
    let mut rng = Rng::new(3);
    let x = row(tok.n_vocab(), &mut rng);
    let whole = check_against_full(&Opaque(100), &x, &[], tok.eot(), 3);
    assert!(whole[100..107].iter().all(|&v| v == f32::NEG_INFINITY));
}

/// A model of random logits, the same for the same sequence.
fn random_model(n: usize, eot: u32, seed: u64) -> MockInference {
    let mut inf = MockInference::new(n, move |ctx| {
        let h = ctx
            .sequence
            .iter()
            .fold(seed, |h, &t| h.wrapping_mul(0x100_0000_01b3) ^ u64::from(t));
        let mut rng = Rng::new(h);
        let mut l: Vec<f32> = (0..n)
            .map(|_| (rng.next_f64() * 12.0 - 6.0) as f32)
            .collect();
        // Ends become likelier as the sequence grows, so searches finish.
        l[eot as usize] = ctx.generated.len() as f32 - 4.0;
        l
    });
    inf.encode(&[]).unwrap();
    inf
}

/// Greedy and beam search over records that hold the best few text tokens choose what
/// they choose over whole rows (every text token pinned, as an opaque filter makes them):
/// the same tokens, the same scores to rounding.
#[test]
fn searches_on_shortlists_equal_searches_on_whole_rows() {
    let tok = toy(&[], 99);
    let (n, eot) = (tok.n_vocab(), tok.eot());
    let sup = SuppressTokens::new(vec![3, 5, 40, 97]);
    let blank = SuppressBlank::new(&tok);
    let rules = ApplyTimestampRules::new(&tok, Some(50));
    let opaque = Opaque(u32::MAX - 10);
    let prompt = [tok.sot(), tok.no_timestamps()];
    let run = |search: &mut dyn Search, with_ts: bool, whole: bool, seed: u64| {
        let mut fs: Vec<&dyn LogitFilter> = vec![&sup, &blank];
        if with_ts {
            fs.push(&rules);
        }
        if whole {
            fs.push(&opaque);
        }
        let task = DecodeTask {
            prompt: &prompt,
            sot_index: 0,
            forced: &[],
            eot,
            no_speech: tok.no_speech(),
            max_steps: 12,
            filters: &fs,
        };
        let mut inf = random_model(n, eot, seed);
        let r = search.search(&mut inf, &task).unwrap();
        let need_is_all = matches!(inf.needs.last(), Some(LogitNeed::All));
        assert_eq!(need_is_all, whole);
        r
    };
    for seed in 0..12 {
        for with_ts in [false, true] {
            let mut searches: Vec<Box<dyn Search>> = vec![
                Box::new(Greedy),
                Box::new(BeamSearch {
                    beam_size: 5,
                    patience: 1.0,
                    length_penalty: 1.0,
                    entropy_threshold: None,
                }),
                Box::new(BeamSearch {
                    beam_size: 2,
                    patience: 2.0,
                    length_penalty: 0.5,
                    entropy_threshold: None,
                }),
            ];
            for s in &mut searches {
                let short = run(s.as_mut(), with_ts, false, seed);
                let whole = run(s.as_mut(), with_ts, true, seed);
                assert_eq!(short.tokens, whole.tokens, "seed {seed}");
                assert!((short.sum_logprob - whole.sum_logprob).abs() < 1e-4);
                assert!((short.no_speech_prob - whole.no_speech_prob).abs() < 1e-6);
                for (a, b) in short.logprobs.iter().zip(&whole.logprobs) {
                    assert!((a - b).abs() < 1e-4, "{a} vs {b}");
                }
            }
        }
    }
}

/// A model that writes records itself, as the GPU does, with garbage in the whole rows it
/// never shows: the searches read only the records.
#[test]
fn a_model_may_hand_its_own_records() {
    struct Own(MockInference);
    impl Inference for Own {
        fn n_vocab(&self) -> usize {
            self.0.n_vocab()
        }
        fn encode(&mut self, mel: &[f32]) -> Result<(), crate::BoxError> {
            self.0.encode(mel)
        }
        fn reset(&mut self) {
            self.0.reset()
        }
        fn decode(&mut self, _: &[u32], _: &[usize], _: &mut [f32]) -> Result<(), crate::BoxError> {
            Err("whole rows asked for".into())
        }
        fn decode_batch(
            &mut self,
            _: &[u32],
            _: usize,
            _: &mut [f32],
        ) -> Result<(), crate::BoxError> {
            Err("whole rows asked for".into())
        }
        fn decode_shortlists(
            &mut self,
            tokens: &[u32],
            rows: &[usize],
            out: &mut Shortlists,
        ) -> Result<(), crate::BoxError> {
            let mut full = vec![0.0; rows.len() * self.0.n_vocab()];
            self.0.decode(tokens, rows, &mut full)?;
            let mine = reduced(out.spec(), &full);
            out.records_mut(rows.len()).copy_from_slice(mine.records());
            Ok(())
        }
        fn decode_batch_shortlists(
            &mut self,
            tokens: &[u32],
            batch: usize,
            out: &mut Shortlists,
        ) -> Result<(), crate::BoxError> {
            let mut full = vec![0.0; batch * self.0.n_vocab()];
            self.0.decode_batch(tokens, batch, &mut full)?;
            let mine = reduced(out.spec(), &full);
            out.records_mut(batch).copy_from_slice(mine.records());
            Ok(())
        }
        fn reorder(&mut self, src: &[usize]) -> Result<(), crate::BoxError> {
            self.0.reorder(src)
        }
    }
    let tok = toy(&[], 99);
    let (n, eot) = (tok.n_vocab(), tok.eot());
    let sup = SuppressTokens::new(vec![3, 5]);
    let fs: [&dyn LogitFilter; 1] = [&sup];
    let prompt = [tok.sot(), tok.no_timestamps()];
    let task = DecodeTask {
        prompt: &prompt,
        sot_index: 0,
        forced: &[],
        eot,
        no_speech: eot + 1,
        max_steps: 10,
        filters: &fs,
    };
    let beam = BeamSearch {
        beam_size: 3,
        patience: 1.0,
        length_penalty: 1.0,
        entropy_threshold: None,
    };
    for seed in 0..4 {
        let want = beam
            .clone()
            .search(&mut random_model(n, eot, seed), &task)
            .unwrap();
        let got = beam
            .clone()
            .search(&mut Own(random_model(n, eot, seed)), &task)
            .unwrap();
        assert_eq!(got, want);
        let want = Greedy
            .search(&mut random_model(n, eot, seed), &task)
            .unwrap();
        let got = Greedy
            .search(&mut Own(random_model(n, eot, seed)), &task)
            .unwrap();
        assert_eq!(got, want);
    }
    assert!(matches!(
        crate::greedy::Sampling {
            temperature: 1.0,
            best_of: 1,
            length_penalty: 1.0,
            entropy_threshold: None,
            rng: &mut Rng::new(1),
        }
        .search(&mut Own(random_model(n, eot, 0)), &task),
        Err(crate::DecodeError::Inference(_))
    ));
}
