//! Per-stream state and the encoder / decoder passes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sotto_compute::{CpuBackend, DecodeShapes, Mask, PackedKv, ThreadGovernor, Threads};

use crate::kv::KvCache;
use crate::{Block, ModelError, Whisper};

/// Encoder activations, allocated once per session. Buffers whose lives do not overlap
/// share memory: ~20 MiB less per session for tiny, ~25 MiB for base.
struct EncBuffers {
    /// Shape: [n_audio_ctx, d]: the residual stream.
    x: Vec<f32>,
    /// Shape: [n_audio_ctx, d] (layer-norm output); first the transposed mel
    /// ([n_frames, n_mels], when that is larger).
    h: Vec<f32>,
    /// Shape: [n_audio_ctx, 4·d]. In turn: conv1's output [n_frames, d]; per block the
    /// attention's q, k, v and output ([n_audio_ctx, d] each), then the MLP's hidden
    /// layer; after the blocks, one decoder layer's cross-attention K and V in f32
    /// ([n_audio_ctx, n_text_state] each) before packing.
    work: Vec<f32>,
}

/// Decoder activations of one step, grown to the largest step seen.
#[derive(Debug, Default)]
struct DecBuffers {
    /// Shape: [m, d] each, m = batch · new tokens.
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    /// Shape: [m, 4·d]
    mlp: Vec<f32>,
    /// Shape: [rows, d] each: the rows whose logits are asked for.
    sel: Vec<f32>,
    normed: Vec<f32>,
    /// Runs of consecutive sequences on one window: (window, rows).
    runs: Vec<(usize, usize)>,
}

impl DecBuffers {
    fn size(&mut self, m: usize, rows: usize, d: usize) {
        for b in [
            &mut self.x,
            &mut self.h,
            &mut self.q,
            &mut self.k,
            &mut self.v,
            &mut self.att,
        ] {
            b.resize(m * d, 0.0);
        }
        self.mlp.resize(m * 4 * d, 0.0);
        self.sel.resize(rows * d, 0.0);
        self.normed.resize(rows * d, 0.0);
    }
}

/// One stream: thread pool, encoder output, cross-attention K/V and the self-attention
/// cache of a batch of text sequences (beams or sampled candidates).
pub struct Session {
    model: Arc<Whisper>,
    be: CpuBackend,
    enc: EncBuffers,
    /// Shape: [n_audio_ctx, n_audio_state]
    enc_out: Vec<f32>,
    encoded: bool,
    /// Per encoded window, per decoder layer: cross-attention keys and values (f16). One
    /// window after [`Session::encode`], shared by every sequence of the batch; several
    /// after [`Session::encode_windows`] (grown on demand, kept for later batches).
    cross: Vec<Vec<PackedKv>>,
    /// Windows encoded by the last encode call (the first `windows` of `cross`).
    windows: usize,
    /// The window each sequence of the batch attends to (its length is the batch).
    seq_window: Vec<usize>,
    /// [`Session::reorder`]'s next `seq_window`, kept (the decode loop allocates nothing).
    reordered: Vec<usize>,
    kv: KvCache,
    dec: DecBuffers,
    /// The logits the searches need in full (see [`Session::set_logit_need`]); None: all.
    top: Option<sotto_compute::VocabTop>,
    /// Picks all threads or one per decoder step (see [`Session::set_adaptive_threads`]);
    /// None: always all.
    governor: Option<ThreadGovernor>,
    /// [`Session::decode_batch`]'s logit rows, kept (the decode loop allocates nothing).
    last_rows: Vec<usize>,
    /// The step the workers' own scratch is sized for (grown with the batch).
    reserved: DecodeShapes,
    /// Where the last encoder pass spent its time.
    laps: EncoderLaps,
    /// Encoder positions a window runs over (whisper.cpp's `audio_ctx`): the model's
    /// n_audio_ctx unless [`Session::set_audio_ctx`] shortened it.
    audio_ctx: usize,
}

/// Where an encoder pass spent its time, by op group (wall time, summed over the blocks).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EncoderLaps {
    /// The mel's transpose, both convolutions and the positions.
    pub conv: Duration,
    /// Per block: the layer norm, the q, k, v products and the self-attention.
    pub attention: Duration,
    /// Per block: the attention's out-projection and its residual.
    pub out_projection: Duration,
    /// Per block: the MLP with its layer norm and residual.
    pub mlp: Duration,
    /// The final layer norm and every decoder layer's cross-attention K/V.
    pub cross_kv: Duration,
}

impl EncoderLaps {
    /// The groups with their names, in the pass's order.
    pub fn named(&self) -> [(&'static str, Duration); 5] {
        [
            ("conv", self.conv),
            ("self-attention", self.attention),
            ("out-projection", self.out_projection),
            ("mlp", self.mlp),
            ("cross K/V", self.cross_kv),
        ]
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("threads", &self.be.threads())
            .field("encoded", &self.encoded)
            .field("batch", &self.kv.batch())
            .field("text_len", &self.kv.len())
            .finish()
    }
}

/// Checks a word-alignment pass's own limits (the rest is [`check_decode_input`]'s): every
/// `(layer, head)` inside the decoder, and the sequence within the text context. Shared by
/// every device's session.
pub fn check_align_input(
    h: &crate::Hparams,
    tokens: &[u32],
    heads: &[(usize, usize)],
) -> Result<(), String> {
    if let Some(&(l, hd)) = heads
        .iter()
        .find(|&&(l, hd)| l >= h.n_text_layer || hd >= h.n_text_head)
    {
        return Err(format!(
            "head ({l}, {hd}) is outside {} layers × {} heads",
            h.n_text_layer, h.n_text_head
        ));
    }
    if tokens.len() > h.n_text_ctx {
        let n = tokens.len();
        return Err(format!("{n} tokens exceed n_text_ctx {}", h.n_text_ctx));
    }
    Ok(())
}

/// Checks one decoder step before any work: audio encoded, tokens within the vocabulary,
/// `len + n_new` within the text context, rows within `tokens`, and a logits buffer of
/// `rows.len() × n_vocab`. Shared by every device's session; the message names the problem.
pub fn check_decode_input(
    h: &crate::Hparams,
    encoded: bool,
    len: usize,
    tokens: &[u32],
    n_new: usize,
    rows: &[usize],
    logits_len: usize,
) -> Result<(), String> {
    if !encoded {
        return Err("no audio: call encode first".into());
    }
    if tokens.is_empty() {
        return Err("no tokens".into());
    }
    if len + n_new > h.n_text_ctx {
        return Err(format!(
            "{len} + {n_new} tokens exceed n_text_ctx {}",
            h.n_text_ctx
        ));
    }
    if let Some(t) = tokens.iter().find(|&&t| t as usize >= h.n_vocab) {
        return Err(format!("token {t} is not below n_vocab {}", h.n_vocab));
    }
    if let Some(r) = rows.iter().find(|&&r| r >= tokens.len()) {
        return Err(format!(
            "row {r} is not below the {} tokens given",
            tokens.len()
        ));
    }
    if logits_len != rows.len() * h.n_vocab {
        return Err(format!(
            "logits has {logits_len} values, expected {}×{}",
            rows.len(),
            h.n_vocab
        ));
    }
    Ok(())
}

fn input_err(op: &'static str, msg: impl Into<String>) -> ModelError {
    ModelError::Input {
        op,
        msg: msg.into(),
    }
}

impl Session {
    /// A session with `threads` worker threads (0: one per core). Allocates all buffers.
    pub fn new(model: Arc<Whisper>, threads: usize) -> Result<Self, ModelError> {
        let h = *model.hparams();
        let (ctx, da, dt) = (h.n_audio_ctx, h.n_audio_state, h.n_text_state);
        let n_frames = model.n_frames();
        let cross = (0..h.n_text_layer)
            .map(|_| PackedKv::new(ctx, h.n_text_head, dt))
            .collect::<Result<Vec<_>, _>>()?;
        // The fast level also takes the decoder's prompt pass through bf16 GEMMs.
        let be = CpuBackend::new(threads)?
            .with_bf16_tiles(model.encoder_precision == crate::EncoderPrecision::Bf16Fast);
        let governor =
            (adaptive_by_default() && be.max_threads() > 1).then(ThreadGovernor::default);
        // Every worker's scratch sized for one sequence now; `reorder` grows it with the
        // batch. Decoder steps then allocate nothing on any worker.
        let reserved = DecodeShapes {
            rows: 1,
            n_in: 4 * dt,
            d: dt,
            n_head: h.n_text_head,
            text_keys: h.n_text_ctx,
            audio_keys: ctx,
        };
        be.reserve_decode(&reserved);
        Ok(Self {
            be,
            enc: EncBuffers {
                x: vec![0.0; ctx * da],
                h: vec![0.0; (ctx * da).max(n_frames * h.n_mels)],
                work: vec![0.0; (4 * ctx * da).max(n_frames * da).max(2 * ctx * dt)],
            },
            enc_out: vec![0.0; ctx * da],
            encoded: false,
            cross: vec![cross],
            windows: 1,
            seq_window: vec![0],
            reordered: Vec::new(),
            kv: KvCache::new(h.n_text_layer, h.n_text_ctx, dt),
            dec: DecBuffers::default(),
            top: None,
            governor,
            last_rows: Vec::new(),
            reserved,
            laps: EncoderLaps::default(),
            audio_ctx: ctx,
            model,
        })
    }

    /// Whether decoder steps may drop to one thread while that is faster: when another
    /// process keeps a core busy, a step's many short fork/joins wait for workers the
    /// scheduler has paused, and one thread decodes faster (see
    /// `sotto_compute::ThreadGovernor`). On by default for sessions of several threads;
    /// `SOTTO_FIXED_THREADS=1` turns it off for new sessions. The results are the same
    /// bits either way; the encoder always uses every thread.
    pub fn set_adaptive_threads(&mut self, on: bool) {
        self.governor = (on && self.be.max_threads() > 1).then(ThreadGovernor::default);
        self.be.set_solo(false);
    }

    pub fn model(&self) -> &Arc<Whisper> {
        &self.model
    }

    /// Which logits later `decode`/`decode_batch` calls must give in full: with a
    /// [`sotto_compute::VocabTop`], the vocabulary projection is screened and only the k
    /// best text tokens (not counting the excluded ones), every token from its `text_end`
    /// on, and any that might rank among them are computed in full; the rest keep values
    /// that rank below those, within a small bound (see `sotto_compute::VocabWeights`).
    /// `None` (the default) computes every logit. Only models loaded with a screened
    /// vocabulary (f16 Whisper files on x86-64, `LoadOptions::exact_logits` off) screen.
    pub fn set_logit_need(&mut self, top: Option<sotto_compute::VocabTop>) {
        self.top = top;
    }

    /// Shows `probe` the input of every later linear product (calibration, see
    /// [`crate::Calibration`]); `None` stops it.
    pub fn set_probe(&mut self, probe: Option<Arc<dyn sotto_compute::LinearProbe>>) {
        self.be.set_probe(probe);
    }

    /// Runs later encoder passes over the first `ctx` positions only (`2·ctx` mel frames,
    /// `ctx · 20` ms), as whisper.cpp's `audio_ctx`: the encoder's work shrinks with it and
    /// the decoder attends to those positions alone. None, or the model's n_audio_ctx: the
    /// whole 30 s window. The model never saw shorter windows in training, so text may
    /// change. Drops the audio encoded so far when the length changes.
    pub fn set_audio_ctx(&mut self, ctx: Option<usize>) -> Result<(), ModelError> {
        let h = *self.model.hparams();
        let ctx = ctx.unwrap_or(h.n_audio_ctx);
        if ctx == 0 || ctx > h.n_audio_ctx {
            return Err(input_err(
                "set_audio_ctx",
                format!(
                    "{ctx} is not in 1..={} (the model's n_audio_ctx)",
                    h.n_audio_ctx
                ),
            ));
        }
        if ctx != self.audio_ctx {
            let layers = (0..h.n_text_layer)
                .map(|_| PackedKv::new(ctx, h.n_text_head, h.n_text_state))
                .collect::<Result<Vec<_>, _>>()?;
            self.cross = vec![layers];
            self.windows = 1;
            self.encoded = false;
            self.kv.clear();
            self.seq_window.clear();
            self.seq_window.push(0);
            self.audio_ctx = ctx;
        }
        Ok(())
    }

    /// Encoder positions a window runs over (see [`Session::set_audio_ctx`]).
    pub fn audio_ctx(&self) -> usize {
        self.audio_ctx
    }

    /// Runs the encoder on one window, computes every decoder layer's cross-attention K/V
    /// from it, and starts a new text sequence.
    ///
    /// `mel` Shape: [n_mels, 3000] row-major.
    pub fn encode(&mut self, mel: &[f32]) -> Result<(), ModelError> {
        let h = *self.model.hparams();
        let n_frames = self.model.n_frames();
        if mel.len() != h.n_mels * n_frames {
            return Err(input_err(
                "encode",
                format!(
                    "mel has {} values, expected {}×{n_frames}",
                    mel.len(),
                    h.n_mels
                ),
            ));
        }
        self.encode_windows(&[mel])
    }

    /// Runs the encoder on each of `mels` (one window each, Shape: [n_mels, 3000]) and
    /// starts a batch of one empty text sequence per window: sequence `i` attends to window
    /// `i`, and follows it through [`Session::reorder`]. The prompts are then decoded with
    /// [`Session::decode_batch`]: windows decoded together read every decoder weight once
    /// per step for all of them. [`Session::decode`], [`Session::align`] and
    /// [`Session::reset_text`] work on the first sequence's window.
    ///
    /// Keeps every window's cross-attention K/V (per window ~9 MiB on tiny, ~18 MiB on
    /// base); the memory stays with the session for later batches.
    pub fn encode_windows(&mut self, mels: &[&[f32]]) -> Result<(), ModelError> {
        let h = *self.model.hparams();
        let want = h.n_mels * self.model.n_frames();
        if let Some(bad) = mels.iter().find(|m| m.len() != want) {
            return Err(input_err(
                "encode",
                format!(
                    "mel has {} values, expected {}×{}",
                    bad.len(),
                    h.n_mels,
                    self.model.n_frames()
                ),
            ));
        }
        if mels.is_empty() {
            return Err(input_err("encode", "no windows to encode"));
        }
        self.encoded = false;
        self.kv.clear();
        self.be.set_solo(false);
        while self.cross.len() < mels.len() {
            let layers = self.cross[0].clone();
            self.cross.push(layers);
        }
        let ctx = self.audio_ctx;
        for (mel, cross) in mels.iter().zip(self.cross.iter_mut()) {
            let (model, be, b) = (&*self.model, &self.be, &mut self.enc);
            let (enc_out, laps) = (&mut self.enc_out[..], &mut self.laps);
            // On a worker of the pool, as the decoder step: each op's fork/join is then a
            // local one instead of a wake-up of the pool from outside.
            be.install(|| encoder_pass(model, be, b, ctx, enc_out, cross, mel, laps))?;
        }
        self.windows = mels.len();
        self.seq_window.clear();
        self.seq_window.extend(0..mels.len());
        if mels.len() > 1 {
            // One empty sequence per window; nothing is shared (`reorder` on an empty
            // cache copies no rows).
            self.kv.reorder(&vec![0; mels.len()]);
            self.reserve_rows(mels.len());
        }
        self.encoded = true;
        Ok(())
    }

    /// Starts a new text sequence (a batch of one, empty) against window `w` of the last
    /// [`Session::encode_windows`]: [`Session::decode`] and [`Session::align`] then work on
    /// that window (word timing of windows decoded together).
    pub fn select_window(&mut self, w: usize) -> Result<(), ModelError> {
        if w >= self.windows {
            return Err(input_err(
                "select_window",
                format!("window {w} of {} encoded", self.windows),
            ));
        }
        self.kv.clear();
        self.seq_window.clear();
        self.seq_window.push(w);
        Ok(())
    }

    /// Windows the last encode call encoded.
    pub fn windows(&self) -> usize {
        self.windows
    }

    /// Grows every worker's scratch for steps of `rows` sequences.
    fn reserve_rows(&mut self, rows: usize) {
        if rows > self.reserved.rows {
            self.reserved.rows = rows;
            self.be.reserve_decode(&self.reserved);
        }
    }

    /// Where the last [`Session::encode`] spent its time, by op group.
    pub fn encoder_laps(&self) -> EncoderLaps {
        self.laps
    }

    /// Shape: [audio_ctx, n_audio_state] (see [`Session::set_audio_ctx`]). Zeros before
    /// the first [`Session::encode`].
    pub fn encoder_output(&self) -> &[f32] {
        &self.enc_out[..self.audio_ctx * self.model.hparams().n_audio_state]
    }

    /// Starts a new text sequence (clears the self-attention cache; keeps audio and cross K/V):
    /// the batch is one empty sequence.
    pub fn reset_text(&mut self) {
        self.kv.clear();
        let w = self.seq_window[0];
        self.seq_window.clear();
        self.seq_window.push(w);
    }

    /// Tokens decoded so far in each sequence of the batch.
    pub fn text_len(&self) -> usize {
        self.kv.len()
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.kv.batch()
    }

    /// Appends `tokens` at positions `text_len..` of the single sequence (a batch of one) and
    /// writes the logits of the requested rows (indices into `tokens`) into `logits`.
    ///
    /// `logits` Shape: [rows.len(), n_vocab]. Errors when the batch is not one, the sequence
    /// would pass n_text_ctx, a token or row is out of range, or [`Session::encode`] was not
    /// called; the session is unchanged then.
    pub fn decode(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), ModelError> {
        if self.kv.batch() != 1 {
            return Err(input_err(
                "decode",
                format!("needs a batch of one, not {}", self.kv.batch()),
            ));
        }
        self.check_decode("decode", tokens, tokens.len(), rows, logits)?;
        self.forward(tokens, 1, rows, logits)
    }

    /// Appends `tokens.len() / batch` tokens to each of the `batch` sequences in one decoder
    /// pass (every weight read once for all rows) and writes each sequence's last-row logits.
    ///
    /// `tokens` Shape: [batch, n_new]; `logits` Shape: [batch, n_vocab]. `batch` must be
    /// [`Session::batch`]. Errors leave the session unchanged.
    pub fn decode_batch(
        &mut self,
        tokens: &[u32],
        batch: usize,
        logits: &mut [f32],
    ) -> Result<(), ModelError> {
        if batch != self.kv.batch() || batch == 0 || !tokens.len().is_multiple_of(batch) {
            return Err(input_err(
                "decode_batch",
                format!(
                    "{} tokens for a batch of {batch}; the session holds {} sequences",
                    tokens.len(),
                    self.kv.batch()
                ),
            ));
        }
        let n_new = tokens.len() / batch;
        let mut rows = std::mem::take(&mut self.last_rows);
        rows.clear();
        rows.extend((1..=batch).map(|b| b * n_new - 1));
        let done = self
            .check_decode("decode_batch", tokens, n_new, &rows, logits)
            .and_then(|()| self.forward(tokens, batch, &rows, logits));
        self.last_rows = rows;
        done
    }

    /// Rebuilds the batch: new sequence `i` is current sequence `src[i]` (its cache rows are
    /// copied; the cache grows when `src` is longer than any batch before). Broadcasts the
    /// prompt to the beams (`[0; beam_size]`), follows beam origins, drops finished samples.
    pub fn reorder(&mut self, src: &[usize]) -> Result<(), ModelError> {
        let batch = self.kv.batch();
        if src.is_empty() || src.iter().any(|&s| s >= batch) {
            return Err(input_err(
                "reorder",
                format!("sources {src:?} for a batch of {batch}"),
            ));
        }
        self.kv.reorder(src);
        let mut windows = std::mem::take(&mut self.reordered);
        windows.clear();
        windows.extend(src.iter().map(|&s| self.seq_window[s]));
        self.reordered = std::mem::replace(&mut self.seq_window, windows);
        self.reserve_rows(src.len());
        Ok(())
    }

    /// Word alignment: runs the decoder over the whole sequence `tokens` (start sequence,
    /// `<|notimestamps|>`, text, `<|endoftext|>`) from position 0 against the current window,
    /// as one causal pass with its own scratch keys and values: the batch and the
    /// self-attention cache of any decoding in progress are left as they were.
    ///
    /// Returns the cross-attention scores of the requested `(layer, head)` pairs before the
    /// softmax (`q·k / sqrt(d_head)`). Shape: [heads.len(), tokens.len(), n_audio_ctx].
    /// Writes the logits of `rows` (indices into `tokens`). `logits` Shape: [rows.len(), n_vocab].
    pub fn align(
        &mut self,
        tokens: &[u32],
        heads: &[(usize, usize)],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<Vec<f32>, ModelError> {
        let h = *self.model.hparams();
        check_align_input(&h, tokens, heads).map_err(|msg| input_err("align", msg))?;
        self.check_decode("align", tokens, 0, rows, logits)?;
        self.be.set_solo(false);
        let (model, be, b) = (&*self.model, &self.be, &mut self.dec);
        let cross_kv = &self.cross[self.seq_window[0]];
        let dec = &model.decoder;
        let (m, d, ctx) = (tokens.len(), h.n_text_state, self.audio_ctx);
        b.size(m, rows.len(), d);
        for (i, (&tok, row)) in tokens.iter().zip(b.x.chunks_exact_mut(d)).enumerate() {
            dec.token_embedding.weight.read_f32(tok as usize * d, row);
            row.iter_mut()
                .zip(&dec.pos[i * d..(i + 1) * d])
                .for_each(|(a, p)| *a += p);
        }
        let mut scores = vec![0f32; heads.len() * m * ctx];
        for (l, blk) in dec.blocks.iter().enumerate() {
            be.layer_norm(&b.x, &blk.attn_ln, &mut b.h)?;
            be.linear(&b.h, m, &blk.attn.query, &mut b.q)?;
            be.linear(&b.h, m, &blk.attn.key, &mut b.k)?;
            be.linear(&b.h, m, &blk.attn.value, &mut b.v)?;
            be.attention(
                &b.q,
                m,
                &b.k,
                &b.v,
                m,
                h.n_text_head,
                Mask::Causal { q_pos0: 0 },
                &mut b.att,
            )?;
            be.linear(&b.att, m, &blk.attn.out, &mut b.h)?;
            be.add(&mut b.x, &b.h)?;

            let (cross_ln, cross) = blk
                .cross
                .as_ref()
                .expect("decoder blocks have cross-attention");
            be.layer_norm(&b.x, cross_ln, &mut b.h)?;
            be.linear(&b.h, m, &cross.query, &mut b.q)?;
            for (slot, &(_, head)) in heads.iter().enumerate().filter(|(_, hh)| hh.0 == l) {
                let out = &mut scores[slot * m * ctx..(slot + 1) * m * ctx];
                be.attention_scores_packed(&b.q, m, &cross_kv[l], head, out)?;
            }
            be.attention_packed(&b.q, m, &cross_kv[l], &mut b.att)?;
            be.linear(&b.att, m, &cross.out, &mut b.h)?;
            be.add(&mut b.x, &b.h)?;

            mlp(be, blk, m, &mut b.x, &mut b.h, &mut b.mlp)?;
        }
        for (&r, out) in rows.iter().zip(b.sel.chunks_exact_mut(d)) {
            out.copy_from_slice(&b.x[r * d..(r + 1) * d]);
        }
        be.layer_norm(&b.sel, &dec.ln, &mut b.normed)?;
        be.linear(&b.normed, rows.len(), &dec.token_embedding, logits)?;
        Ok(scores)
    }

    /// Checks a step of `n_new` tokens per sequence, `tokens` for the whole batch.
    fn check_decode(
        &self,
        op: &'static str,
        tokens: &[u32],
        n_new: usize,
        rows: &[usize],
        logits: &[f32],
    ) -> Result<(), ModelError> {
        check_decode_input(
            self.model.hparams(),
            self.encoded,
            self.kv.len(),
            tokens,
            n_new,
            rows,
            logits.len(),
        )
        .map_err(|msg| input_err(op, msg))
    }

    /// The decoder over `batch` sequences of `tokens.len() / batch` new tokens each; `rows`
    /// index the flattened [batch · n_new] rows whose logits are written. Inputs checked.
    ///
    /// A prompt runs on a worker of the session's rayon pool, so each of its ops' fork/join
    /// is a local one instead of a wake-up of the pool from outside (~15 µs per op).
    fn forward(
        &mut self,
        tokens: &[u32],
        batch: usize,
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), ModelError> {
        let class = ThreadGovernor::class(tokens.len(), self.top.is_none());
        let mode = (self.governor.as_mut().zip(class)).map_or(Threads::All, |(g, c)| g.next(c));
        self.be.set_solo(mode == Threads::One);
        let start = std::time::Instant::now();
        let (model, be, b, kv) = (&*self.model, &self.be, &mut self.dec, &mut self.kv);
        let top = self.top.as_ref();
        let audio = Audio {
            windows: &self.cross,
            seq_window: &self.seq_window,
        };
        // A step's ops fork/join on the backend's team, the calling thread among its
        // threads; a prompt's longer ops still run on the rayon pool, entered once here.
        let done = if class.is_some() {
            decoder_step(model, be, b, kv, audio, top, tokens, batch, rows, logits)
        } else {
            be.install(|| decoder_step(model, be, b, kv, audio, top, tokens, batch, rows, logits))
        };
        if let Some((g, c)) = self.governor.as_mut().zip(class) {
            g.record(c, mode, start.elapsed().as_secs_f64());
        }
        done
    }
}

/// [`Session::encode`]'s work, on split borrows of the session: the encoder over the first
/// `ctx` positions of `mel`, then every decoder layer's cross-attention K/V packed into
/// `cross_kv`.
#[allow(clippy::too_many_arguments)]
fn encoder_pass(
    model: &Whisper,
    be: &CpuBackend,
    b: &mut EncBuffers,
    ctx: usize,
    enc_out: &mut [f32],
    cross_kv: &mut [PackedKv],
    mel: &[f32],
    laps: &mut EncoderLaps,
) -> Result<(), ModelError> {
    *laps = EncoderLaps::default();
    let mut t = Instant::now();
    // Adds the time since the last lap to `d`.
    let mut lap = |d: &mut Duration| {
        let now = Instant::now();
        *d += now - t;
        t = now;
    };
    let h = *model.hparams();
    let n_frames = model.n_frames();
    let enc = &model.encoder;
    let d = h.n_audio_state;
    // The first `2·ctx` frames of the window (all of it unless `audio_ctx` shortened it).
    let frames = 2 * ctx;
    let (x, hb, work) = (&mut b.x[..ctx * d], &mut b.h, &mut b.work[..]);
    let (mel_t, conv1) = (&mut hb[..frames * h.n_mels], &mut work[..frames * d]);
    sotto_compute::kernels::transpose(be.isa(), mel, n_frames, h.n_mels, frames, mel_t, h.n_mels);
    be.conv1d_gelu(mel_t, h.n_mels, &enc.conv1, 1, conv1)?;
    be.conv1d_gelu(conv1, d, &enc.conv2, 2, x)?;
    be.add(x, &enc.pos[..ctx * d])?;
    lap(&mut laps.conv);
    let hb = &mut hb[..ctx * d];
    for blk in &enc.blocks {
        let (q, rest) = work[..4 * ctx * d].split_at_mut(ctx * d);
        let (k, rest) = rest.split_at_mut(ctx * d);
        let (v, att) = rest.split_at_mut(ctx * d);
        let a = &blk.attn;
        let nh = h.n_audio_head;
        use crate::EncoderPrecision as P;
        if let P::Bf16 | P::Int8 | P::Auto = model.encoder_precision {
            // (Auto is resolved at load.) Q, K and V go from their GEMMs' blocks straight
            // where the attention reads them.
            let ws = (&a.query, &a.key, &a.value);
            be.layer_norm_attention_mixed(x, ctx, &blk.attn_ln, hb, ws, (q, k, v), nh, att)?;
        } else {
            let qkv = &mut [(&a.query, &mut *q), (&a.key, &mut *k), (&a.value, &mut *v)];
            be.layer_norm_linears(x, ctx, &blk.attn_ln, hb, qkv)?;
            match model.encoder_precision {
                P::Bf16Fast => be.attention_bf16(q, ctx, k, v, ctx, nh, att)?,
                P::Int16 => be.attention_int16(q, ctx, k, v, ctx, nh, att)?,
                _ => be.attention(q, ctx, k, v, ctx, nh, Mask::None, att)?,
            }
        }
        lap(&mut laps.attention);
        be.linear_residual(att, ctx, &blk.attn.out, x)?;
        lap(&mut laps.out_projection);
        mlp(be, blk, ctx, x, hb, &mut work[..4 * ctx * d])?;
        lap(&mut laps.mlp);
    }
    let enc_out = &mut enc_out[..ctx * d];
    be.layer_norm(x, &enc.ln_post, enc_out)?;
    let dt = h.n_text_state;
    let (cross_k, rest) = work.split_at_mut(ctx * dt);
    let cross_v = &mut rest[..ctx * dt];
    let weights: Vec<_> = (model.decoder.blocks.iter())
        .map(|blk| {
            let (_, cross) = blk
                .cross
                .as_ref()
                .expect("decoder blocks have cross-attention");
            (&cross.key, &cross.value)
        })
        .collect();
    PackedKv::project_all(cross_kv, be, enc_out, &weights, cross_k, cross_v)?;
    lap(&mut laps.cross_kv);
    Ok(())
}

/// Whether new sessions adapt their decoder's threads: unless `SOTTO_FIXED_THREADS` is set
/// (to anything but `0` or nothing).
fn adaptive_by_default() -> bool {
    std::env::var("SOTTO_FIXED_THREADS").map_or(true, |v| v.is_empty() || v == "0")
}

/// The audio a decoder step's sequences attend to: per window, per layer, the packed
/// cross-attention K/V, and each sequence's window.
#[derive(Clone, Copy)]
struct Audio<'a> {
    windows: &'a [Vec<PackedKv>],
    seq_window: &'a [usize],
}

/// [`Session::forward`]'s work, on split borrows of the session.
#[allow(clippy::too_many_arguments)]
fn decoder_step(
    model: &Whisper,
    be: &CpuBackend,
    b: &mut DecBuffers,
    kv: &mut KvCache,
    audio: Audio<'_>,
    top: Option<&sotto_compute::VocabTop>,
    tokens: &[u32],
    batch: usize,
    rows: &[usize],
    logits: &mut [f32],
) -> Result<(), ModelError> {
    let h = *model.hparams();
    let dec = &model.decoder;
    let (m, d, pos0) = (tokens.len(), h.n_text_state, kv.len());
    let n_new = m / batch;
    b.size(m, rows.len(), d);
    for (i, (&tok, row)) in tokens.iter().zip(b.x.chunks_exact_mut(d)).enumerate() {
        dec.token_embedding.weight.read_f32(tok as usize * d, row);
        let p = &dec.pos[(pos0 + i % n_new) * d..][..d];
        row.iter_mut().zip(p).for_each(|(a, b)| *a += b);
    }
    let (stride, end) = (kv.stride(), (pos0 + n_new) * d);
    let runs = &mut b.runs;
    runs.clear();
    for &w in &audio.seq_window[..batch] {
        match runs.last_mut() {
            Some((last, rows)) if *last == w => *rows += n_new,
            _ => runs.push((w, n_new)),
        }
    }
    let runs = std::mem::take(runs);
    for (l, blk) in dec.blocks.iter().enumerate() {
        be.layer_norm(&b.x, &blk.attn_ln, &mut b.h)?;
        be.linear(&b.h, m, &blk.attn.query, &mut b.q)?;
        be.linear(&b.h, m, &blk.attn.key, &mut b.k)?;
        be.linear(&b.h, m, &blk.attn.value, &mut b.v)?;
        for s in 0..batch {
            let (new, cache) = (s * n_new * d..(s + 1) * n_new * d, s * stride);
            kv.k[l][cache + pos0 * d..cache + end].copy_from_slice(&b.k[new.clone()]);
            kv.v[l][cache + pos0 * d..cache + end].copy_from_slice(&b.v[new]);
        }
        // Every sequence at once: one fork/join per layer instead of one per beam.
        let kv_len = (batch - 1) * stride + end;
        be.attention_batch(
            &b.q,
            batch,
            n_new,
            &kv.k[l][..kv_len],
            &kv.v[l][..kv_len],
            stride,
            pos0 + n_new,
            kv.shared(),
            h.n_text_head,
            Mask::Causal { q_pos0: pos0 },
            &mut b.att,
        )?;
        be.linear(&b.att, m, &blk.attn.out, &mut b.h)?;
        be.add(&mut b.x, &b.h)?;

        let (cross_ln, cross) = blk
            .cross
            .as_ref()
            .expect("decoder blocks have cross-attention");
        be.layer_norm(&b.x, cross_ln, &mut b.h)?;
        be.linear(&b.h, m, &cross.query, &mut b.q)?;
        // One call for the whole batch, each run of rows against its window's audio.
        be.attention_packed_groups(&b.q, &runs, &|w| &audio.windows[w][l], &mut b.att)?;
        be.linear(&b.att, m, &cross.out, &mut b.h)?;
        be.add(&mut b.x, &b.h)?;

        mlp(be, blk, m, &mut b.x, &mut b.h, &mut b.mlp)?;
    }
    b.runs = runs;
    kv.advance(n_new);
    for (&r, out) in rows.iter().zip(b.sel.chunks_exact_mut(d)) {
        out.copy_from_slice(&b.x[r * d..(r + 1) * d]);
    }
    be.layer_norm(&b.sel, &dec.ln, &mut b.normed)?;
    be.vocab_logits(&b.normed, rows.len(), &dec.token_embedding, top, logits)?;
    Ok(())
}

/// `x += mlp.2(gelu(mlp.0(ln(x))))` (on the encoder's bf16 GEMM, with ln(x) and the
/// hidden activations passed as bf16 pairs). `x`, `h` Shape: [m, d]; `buf` Shape: [m, 4·d].
fn mlp(
    be: &CpuBackend,
    blk: &Block,
    m: usize,
    x: &mut [f32],
    h: &mut [f32],
    buf: &mut [f32],
) -> Result<(), ModelError> {
    be.layer_norm_mlp(x, m, &blk.mlp_ln, &blk.mlp_0, &blk.mlp_2, h, buf)?;
    Ok(())
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
