//! The searches' own work per decoder step, with a model that costs nothing: the logit
//! filters, log-softmax and choice over Whisper's 51 865 logits a row, on one thread, while
//! the model (the CPU's workers, or the GPU) waits for the next token.
//!
//! Two models: `FixedRow` writes whole rows, which the host reduces to shortlist records
//! before the search reads them (the CPU's path); `FixedRecords` hands the records, as the
//! GPU does after reducing its rows on the device, so the search alone is left.
//!
//! `cargo bench -p sotto-decode --bench search` (on a quiet machine). Each figure is one
//! search of `STEPS` tokens; divide by `STEPS` for a step.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sotto_decode::{
    suppressed_tokens, ApplyTimestampRules, BeamSearch, BoxError, DecodeTask, Greedy, Inference,
    LogitFilter, Search, Shortlists, SuppressBlank, SuppressTokens, Tokenizer,
};

/// Tokens each search decodes (the row never favours `<|endoftext|>`).
const STEPS: usize = 100;

/// A multilingual vocabulary (base's layout: 50 257 ordinary tokens, 51 865 in all) of
/// made-up ordinary tokens: the searches never read their text.
fn tokenizer() -> Tokenizer {
    let mut vocab: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    vocab.extend((vocab.len()..50_257).map(|i| format!("t{i}").into_bytes()));
    Tokenizer::new(vocab, 51_865).expect("base's layout")
}

/// Gives every row the same logits: a spread of text logits with one clear best, the
/// special tokens below them.
struct FixedRow {
    row: Vec<f32>,
}

impl FixedRow {
    fn new(tok: &Tokenizer) -> Self {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut row: Vec<f32> = (0..tok.n_vocab())
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 20.0 - 10.0
            })
            .collect();
        row[1000] = 25.0;
        for l in &mut row[tok.eot() as usize..] {
            *l -= 30.0;
        }
        FixedRow { row }
    }

    fn fill(&self, logits: &mut [f32]) {
        for out in logits.chunks_exact_mut(self.row.len()) {
            out.copy_from_slice(&self.row);
        }
    }
}

impl Inference for FixedRow {
    fn n_vocab(&self) -> usize {
        self.row.len()
    }

    fn encode(&mut self, _mel: &[f32]) -> Result<(), BoxError> {
        Ok(())
    }

    fn reset(&mut self) {}

    fn decode(&mut self, _: &[u32], _: &[usize], logits: &mut [f32]) -> Result<(), BoxError> {
        self.fill(logits);
        Ok(())
    }

    fn decode_batch(&mut self, _: &[u32], _: usize, logits: &mut [f32]) -> Result<(), BoxError> {
        self.fill(logits);
        Ok(())
    }

    fn reorder(&mut self, _src: &[usize]) -> Result<(), BoxError> {
        Ok(())
    }
}

/// Hands every row's shortlist record of [`FixedRow`]'s row, made once per spec: what the
/// GPU's searches receive.
struct FixedRecords {
    whole: FixedRow,
    /// The last spec's record.
    made: Option<Shortlists>,
}

impl FixedRecords {
    fn fill(&mut self, rows: usize, out: &mut Shortlists) {
        if self.made.as_ref().is_none_or(|m| m.spec() != out.spec()) {
            let mut one = Shortlists::new(out.spec().clone());
            self.whole.fill(one.full_rows(1));
            one.reduce();
            self.made = Some(one);
        }
        let one = self.made.as_ref().map(|m| m.records()).unwrap_or_default();
        for rec in out.records_mut(rows).chunks_exact_mut(one.len()) {
            rec.copy_from_slice(one);
        }
    }
}

impl Inference for FixedRecords {
    fn n_vocab(&self) -> usize {
        self.whole.n_vocab()
    }

    fn encode(&mut self, _mel: &[f32]) -> Result<(), BoxError> {
        Ok(())
    }

    fn reset(&mut self) {}

    fn decode(&mut self, t: &[u32], r: &[usize], logits: &mut [f32]) -> Result<(), BoxError> {
        self.whole.decode(t, r, logits)
    }

    fn decode_batch(&mut self, t: &[u32], b: usize, logits: &mut [f32]) -> Result<(), BoxError> {
        self.whole.decode_batch(t, b, logits)
    }

    fn decode_shortlists(
        &mut self,
        _: &[u32],
        rows: &[usize],
        out: &mut Shortlists,
    ) -> Result<(), BoxError> {
        self.fill(rows.len(), out);
        Ok(())
    }

    fn decode_batch_shortlists(
        &mut self,
        _: &[u32],
        batch: usize,
        out: &mut Shortlists,
    ) -> Result<(), BoxError> {
        self.fill(batch, out);
        Ok(())
    }

    fn reorder(&mut self, _src: &[usize]) -> Result<(), BoxError> {
        Ok(())
    }
}

fn searches(c: &mut Criterion) {
    let tok = tokenizer();
    let mut model = FixedRow::new(&tok);
    let mut records = FixedRecords {
        whole: FixedRow::new(&tok),
        made: None,
    };
    // faster-whisper's defaults: suppress_tokens=[-1], suppress_blank, timestamps.
    let suppress = SuppressTokens::new(suppressed_tokens(&tok, &[-1]));
    let blank = SuppressBlank::new(&tok);
    let stamps = ApplyTimestampRules::new(&tok, Some(50));
    let filters: [&dyn LogitFilter; 3] = [&suppress, &blank, &stamps];
    let prompt = [tok.sot(), tok.sot() + 1, tok.transcribe()];
    let task = DecodeTask {
        prompt: &prompt,
        sot_index: 0,
        forced: &[],
        eot: tok.eot(),
        no_speech: tok.no_speech(),
        max_steps: STEPS,
        filters: &filters,
    };
    let mut g = c.benchmark_group("search");
    g.sample_size(20);
    g.throughput(Throughput::Elements(STEPS as u64));
    g.bench_function(BenchmarkId::new("greedy", STEPS), |b| {
        b.iter(|| Greedy.search(&mut model, &task).unwrap())
    });
    let mut beam = BeamSearch {
        beam_size: 5,
        patience: 1.0,
        length_penalty: 1.0,
        entropy_threshold: None,
    };
    g.bench_function(BenchmarkId::new("beam5", STEPS), |b| {
        b.iter(|| beam.search(&mut model, &task).unwrap())
    });
    g.bench_function(BenchmarkId::new("greedy-records", STEPS), |b| {
        b.iter(|| Greedy.search(&mut records, &task).unwrap())
    });
    g.bench_function(BenchmarkId::new("beam5-records", STEPS), |b| {
        b.iter(|| beam.search(&mut records, &task).unwrap())
    });
    g.finish();
}

criterion_group!(benches, searches);
criterion_main!(benches);
