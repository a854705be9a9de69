//! The searches' own work per decoder step, with a model that costs nothing: the logit
//! filters, log-softmax and choice over Whisper's 51 865 logits a row, on one thread, while
//! the model (the CPU's workers, or the GPU) waits for the next token.
//!
//! `cargo bench -p sotto-decode --bench search` (on a quiet machine). Each figure is one
//! search of `STEPS` tokens; divide by `STEPS` for a step.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sotto_decode::{
    suppressed_tokens, ApplyTimestampRules, BeamSearch, BoxError, DecodeTask, Greedy, Inference,
    LogitFilter, Search, SuppressBlank, SuppressTokens, Tokenizer,
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

fn searches(c: &mut Criterion) {
    let tok = tokenizer();
    let mut model = FixedRow::new(&tok);
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
    };
    g.bench_function(BenchmarkId::new("beam5", STEPS), |b| {
        b.iter(|| beam.search(&mut model, &task).unwrap())
    });
    g.finish();
}

criterion_group!(benches, searches);
criterion_main!(benches);
