//! A scripted stand-in for the model: logits come from a closure of the sequence so far.

use crate::inference::{BoxError, Inference, LogitNeed};

/// What the mock knows when asked for one row's logits.
#[derive(Default)]
pub struct Ctx<'a> {
    /// Windows encoded so far, minus one: 0 for the first window.
    pub window: usize,
    /// The window last encoded. Shape: [n_mels, 3000].
    pub mel: &'a [f32],
    /// The whole sequence up to and including the row.
    pub sequence: &'a [u32],
    /// Index of the row in the sequence.
    pub position: usize,
    /// Tokens after the prompt (the first decode call after a reset) up to the row.
    pub generated: &'a [u32],
}

type LogitFn = dyn FnMut(&Ctx) -> Vec<f32>;

pub struct MockInference {
    n_vocab: usize,
    f: Box<LogitFn>,
    /// The batch: one sequence per row, prompt included.
    seqs: Vec<Vec<u32>>,
    prompt_len: usize,
    mel: Vec<f32>,
    encodes: usize,
    /// Every window encoded.
    pub windows: Vec<Vec<f32>>,
    /// The prompt of every sequence decoded.
    pub prompts: Vec<Vec<u32>>,
    /// Fail the encode with this index (0-based).
    pub fail_encode: Option<usize>,
    /// Every `reorder` call's sources.
    pub reorders: Vec<Vec<usize>>,
    /// The batch size of every `decode_batch` call.
    pub batches: Vec<usize>,
    /// Every `set_logit_need` call.
    pub needs: Vec<LogitNeed>,
    /// The last `set_audio_ctx`.
    pub audio_ctx: Option<usize>,
}

impl MockInference {
    pub fn new(n_vocab: usize, f: impl FnMut(&Ctx) -> Vec<f32> + 'static) -> Self {
        MockInference {
            n_vocab,
            f: Box::new(f),
            seqs: vec![Vec::new()],
            prompt_len: 0,
            mel: Vec::new(),
            encodes: 0,
            windows: Vec::new(),
            prompts: Vec::new(),
            fail_encode: None,
            reorders: Vec::new(),
            batches: Vec::new(),
            needs: Vec::new(),
            audio_ctx: None,
        }
    }

    /// Window `w` emits `scripts[w]` (the last script for later windows) then `eot`:
    /// the wanted token gets logit 10, every other 0.
    pub fn scripted(n_vocab: usize, eot: u32, scripts: Vec<Vec<u32>>) -> Self {
        Self::new(n_vocab, move |ctx| {
            let script = scripts.get(ctx.window).or(scripts.last());
            let next = script
                .and_then(|s| s.get(ctx.generated.len()))
                .copied()
                .unwrap_or(eot);
            one_hot(n_vocab, next, 10.0)
        })
    }
}

/// Logit `value` at `token`, 0 elsewhere.
pub fn one_hot(n_vocab: usize, token: u32, value: f32) -> Vec<f32> {
    let mut l = vec![0.0; n_vocab];
    if let Some(x) = l.get_mut(token as usize) {
        *x = value;
    }
    l
}

impl MockInference {
    /// Appends `tokens` to sequence `b` and writes the logits of `rows` (indices into `tokens`).
    fn extend(
        &mut self,
        b: usize,
        tokens: &[u32],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), BoxError> {
        if logits.len() != rows.len() * self.n_vocab {
            return Err("logits buffer has the wrong size".into());
        }
        let seq = &mut self.seqs[b];
        let start = seq.len();
        seq.extend_from_slice(tokens);
        for (i, &r) in rows.iter().enumerate() {
            let position = start + r;
            let seq = &self.seqs[b];
            let ctx = Ctx {
                window: self.encodes.saturating_sub(1),
                mel: &self.mel,
                sequence: &seq[..=position],
                position,
                generated: &seq[self.prompt_len.min(position + 1)..=position],
            };
            let row = (self.f)(&ctx);
            logits[i * self.n_vocab..(i + 1) * self.n_vocab].copy_from_slice(&row);
        }
        Ok(())
    }
}

impl Inference for MockInference {
    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    fn encode(&mut self, mel: &[f32]) -> Result<(), BoxError> {
        if self.fail_encode == Some(self.encodes) {
            return Err("mock encoder failure".into());
        }
        self.encodes += 1;
        self.mel = mel.to_vec();
        self.windows.push(mel.to_vec());
        Ok(())
    }

    fn set_audio_ctx(&mut self, ctx: Option<usize>) -> Result<(), BoxError> {
        self.audio_ctx = ctx;
        Ok(())
    }

    fn reset(&mut self) {
        self.seqs = vec![Vec::new()];
    }

    fn set_logit_need(&mut self, need: &LogitNeed) {
        self.needs.push(need.clone());
    }

    fn decode(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), BoxError> {
        if self.seqs.len() != 1 {
            return Err("decode needs a batch of one".into());
        }
        if self.seqs[0].is_empty() {
            self.prompt_len = tokens.len();
            self.prompts.push(tokens.to_vec());
        }
        self.extend(0, tokens, rows, logits)
    }

    fn decode_batch(
        &mut self,
        tokens: &[u32],
        batch: usize,
        logits: &mut [f32],
    ) -> Result<(), BoxError> {
        if batch != self.seqs.len() || batch == 0 || !tokens.len().is_multiple_of(batch) {
            return Err(format!("batch {batch} but {} sequences", self.seqs.len()).into());
        }
        if logits.len() != batch * self.n_vocab {
            return Err("logits buffer has the wrong size".into());
        }
        self.batches.push(batch);
        let n_new = tokens.len() / batch;
        let n = self.n_vocab;
        for b in 0..batch {
            let out = &mut logits[b * n..(b + 1) * n];
            self.extend(b, &tokens[b * n_new..(b + 1) * n_new], &[n_new - 1], out)?;
        }
        Ok(())
    }

    fn reorder(&mut self, src: &[usize]) -> Result<(), BoxError> {
        if src.is_empty() || src.iter().any(|&s| s >= self.seqs.len()) {
            return Err(format!("reorder {src:?} of {} sequences", self.seqs.len()).into());
        }
        self.reorders.push(src.to_vec());
        self.seqs = src.iter().map(|&s| self.seqs[s].clone()).collect();
        Ok(())
    }
}
