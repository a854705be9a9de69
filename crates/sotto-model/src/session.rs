//! Per-stream state and the encoder / decoder passes.

use std::sync::Arc;

use sotto_compute::{CpuBackend, Linear, Mask};

use crate::{Block, ModelError, Whisper};

/// Encoder activations, allocated once per session.
struct EncBuffers {
    /// Shape: [n_frames, n_mels]
    mel_t: Vec<f32>,
    /// Shape: [n_frames, d]
    conv1: Vec<f32>,
    /// Shape: [n_audio_ctx, d] each.
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    /// Shape: [n_audio_ctx, 4·d]
    mlp: Vec<f32>,
}

/// One stream: thread pool, encoder output, cross-attention K/V and self-attention cache.
pub struct Session {
    model: Arc<Whisper>,
    be: CpuBackend,
    enc: EncBuffers,
    /// Shape: [n_audio_ctx, n_audio_state]
    enc_out: Vec<f32>,
    encoded: bool,
    /// Per decoder layer, Shape: [n_audio_ctx, n_text_state].
    cross_k: Vec<Vec<f32>>,
    cross_v: Vec<Vec<f32>>,
    /// Per decoder layer, Shape: [n_text_ctx, n_text_state]; rows `..text_len` are valid.
    self_k: Vec<Vec<f32>>,
    self_v: Vec<Vec<f32>>,
    text_len: usize,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("threads", &self.be.threads())
            .field("encoded", &self.encoded)
            .field("text_len", &self.text_len)
            .finish()
    }
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
        let layer = |n: usize| {
            (0..h.n_text_layer)
                .map(|_| vec![0.0f32; n])
                .collect::<Vec<_>>()
        };
        Ok(Self {
            be: CpuBackend::new(threads)?,
            enc: EncBuffers {
                mel_t: vec![0.0; n_frames * h.n_mels],
                conv1: vec![0.0; n_frames * da],
                x: vec![0.0; ctx * da],
                h: vec![0.0; ctx * da],
                q: vec![0.0; ctx * da],
                k: vec![0.0; ctx * da],
                v: vec![0.0; ctx * da],
                att: vec![0.0; ctx * da],
                mlp: vec![0.0; ctx * 4 * da],
            },
            enc_out: vec![0.0; ctx * da],
            encoded: false,
            cross_k: layer(ctx * dt),
            cross_v: layer(ctx * dt),
            self_k: layer(h.n_text_ctx * dt),
            self_v: layer(h.n_text_ctx * dt),
            text_len: 0,
            model,
        })
    }

    pub fn model(&self) -> &Arc<Whisper> {
        &self.model
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
        self.encoded = false;
        self.text_len = 0;
        let (model, be, b) = (&*self.model, &self.be, &mut self.enc);
        let enc = &model.encoder;
        let (ctx, d) = (h.n_audio_ctx, h.n_audio_state);
        for (m, row) in mel.chunks_exact(n_frames).enumerate() {
            for (t, &v) in row.iter().enumerate() {
                b.mel_t[t * h.n_mels + m] = v;
            }
        }
        be.conv1d(&b.mel_t, h.n_mels, &enc.conv1, 1, &mut b.conv1)?;
        be.gelu(&mut b.conv1);
        be.conv1d(&b.conv1, d, &enc.conv2, 2, &mut b.x)?;
        be.gelu(&mut b.x);
        be.add(&mut b.x, &enc.pos)?;
        for blk in &enc.blocks {
            be.layer_norm(&b.x, &blk.attn_ln, &mut b.h)?;
            be.linear(&b.h, ctx, &blk.attn.query, &mut b.q)?;
            be.linear(&b.h, ctx, &blk.attn.key, &mut b.k)?;
            be.linear(&b.h, ctx, &blk.attn.value, &mut b.v)?;
            be.attention(
                &b.q,
                ctx,
                &b.k,
                &b.v,
                ctx,
                h.n_audio_head,
                Mask::None,
                &mut b.att,
            )?;
            be.linear(&b.att, ctx, &blk.attn.out, &mut b.h)?;
            be.add(&mut b.x, &b.h)?;
            mlp(be, blk, ctx, &mut b.x, &mut b.h, &mut b.mlp)?;
        }
        be.layer_norm(&b.x, &enc.ln_post, &mut self.enc_out)?;
        for (l, blk) in model.decoder.blocks.iter().enumerate() {
            let (_, cross) = blk
                .cross
                .as_ref()
                .expect("decoder blocks have cross-attention");
            be.linear(&self.enc_out, ctx, &cross.key, &mut self.cross_k[l])?;
            be.linear(&self.enc_out, ctx, &cross.value, &mut self.cross_v[l])?;
        }
        self.encoded = true;
        Ok(())
    }

    /// Shape: [n_audio_ctx, n_audio_state]. Zeros before the first [`Session::encode`].
    pub fn encoder_output(&self) -> &[f32] {
        &self.enc_out
    }

    /// Starts a new text sequence (clears the self-attention cache; keeps audio and cross K/V).
    pub fn reset_text(&mut self) {
        self.text_len = 0;
    }

    /// Tokens decoded so far in the current text sequence.
    pub fn text_len(&self) -> usize {
        self.text_len
    }

    /// Appends `tokens` at positions `text_len..` and writes the logits of the requested
    /// rows (indices into `tokens`) into `logits`.
    ///
    /// `logits` Shape: [rows.len(), n_vocab]. Errors when the sequence would pass
    /// n_text_ctx, a token or row is out of range, or [`Session::encode`] was not called;
    /// the session is unchanged then.
    pub fn decode(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), ModelError> {
        let h = *self.model.hparams();
        self.check_decode(tokens, rows, logits)?;
        let (model, be) = (&*self.model, &self.be);
        let dec = &model.decoder;
        let (n, d, pos0) = (tokens.len(), h.n_text_state, self.text_len);
        let mut x = vec![0.0f32; n * d];
        for (i, (&tok, row)) in tokens.iter().zip(x.chunks_exact_mut(d)).enumerate() {
            dec.token_embedding.weight.read_f32(tok as usize * d, row);
            let p = &dec.pos[(pos0 + i) * d..(pos0 + i + 1) * d];
            row.iter_mut().zip(p).for_each(|(a, b)| *a += b);
        }
        let (mut hb, mut q, mut att) = (
            vec![0.0f32; n * d],
            vec![0.0f32; n * d],
            vec![0.0f32; n * d],
        );
        let mut mlp_buf = vec![0.0f32; n * 4 * d];
        let end = (pos0 + n) * d;
        for (l, blk) in dec.blocks.iter().enumerate() {
            be.layer_norm(&x, &blk.attn_ln, &mut hb)?;
            be.linear(&hb, n, &blk.attn.query, &mut q)?;
            be.linear(&hb, n, &blk.attn.key, &mut self.self_k[l][pos0 * d..end])?;
            be.linear(&hb, n, &blk.attn.value, &mut self.self_v[l][pos0 * d..end])?;
            let (k, v) = (&self.self_k[l][..end], &self.self_v[l][..end]);
            be.attention(
                &q,
                n,
                k,
                v,
                pos0 + n,
                h.n_text_head,
                Mask::Causal { q_pos0: pos0 },
                &mut att,
            )?;
            be.linear(&att, n, &blk.attn.out, &mut hb)?;
            be.add(&mut x, &hb)?;

            let (cross_ln, cross) = blk
                .cross
                .as_ref()
                .expect("decoder blocks have cross-attention");
            be.layer_norm(&x, cross_ln, &mut hb)?;
            be.linear(&hb, n, &cross.query, &mut q)?;
            let (k, v) = (&self.cross_k[l], &self.cross_v[l]);
            be.attention(
                &q,
                n,
                k,
                v,
                h.n_audio_ctx,
                h.n_text_head,
                Mask::None,
                &mut att,
            )?;
            be.linear(&att, n, &cross.out, &mut hb)?;
            be.add(&mut x, &hb)?;

            mlp(be, blk, n, &mut x, &mut hb, &mut mlp_buf)?;
        }
        self.text_len = pos0 + n;
        let sel: Vec<f32> = rows
            .iter()
            .flat_map(|&r| x[r * d..(r + 1) * d].iter().copied())
            .collect();
        let mut normed = vec![0.0f32; sel.len()];
        be.layer_norm(&sel, &dec.ln, &mut normed)?;
        be.linear(&normed, rows.len(), &dec.token_embedding, logits)?;
        Ok(())
    }

    fn check_decode(
        &self,
        tokens: &[u32],
        rows: &[usize],
        logits: &[f32],
    ) -> Result<(), ModelError> {
        let h = self.model.hparams();
        if !self.encoded {
            return Err(input_err("decode", "no audio: call encode first"));
        }
        if tokens.is_empty() {
            return Err(input_err("decode", "no tokens"));
        }
        if self.text_len + tokens.len() > h.n_text_ctx {
            return Err(input_err(
                "decode",
                format!(
                    "{} + {} tokens exceed n_text_ctx {}",
                    self.text_len,
                    tokens.len(),
                    h.n_text_ctx
                ),
            ));
        }
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= h.n_vocab) {
            return Err(input_err(
                "decode",
                format!("token {t} is not below n_vocab {}", h.n_vocab),
            ));
        }
        if let Some(r) = rows.iter().find(|&&r| r >= tokens.len()) {
            return Err(input_err(
                "decode",
                format!("row {r} is not below the {} tokens given", tokens.len()),
            ));
        }
        if logits.len() != rows.len() * h.n_vocab {
            return Err(input_err(
                "decode",
                format!(
                    "logits has {} values, expected {}×{}",
                    logits.len(),
                    rows.len(),
                    h.n_vocab
                ),
            ));
        }
        Ok(())
    }
}

/// `x += mlp.2(gelu(mlp.0(ln(x))))`. `x`, `h` Shape: [m, d]; `buf` Shape: [m, 4·d].
fn mlp(
    be: &CpuBackend,
    blk: &Block,
    m: usize,
    x: &mut [f32],
    h: &mut [f32],
    buf: &mut [f32],
) -> Result<(), ModelError> {
    be.layer_norm(x, &blk.mlp_ln, h)?;
    linear_gelu(be, h, m, &blk.mlp_0, buf)?;
    be.linear(buf, m, &blk.mlp_2, h)?;
    be.add(x, h)?;
    Ok(())
}

fn linear_gelu(
    be: &CpuBackend,
    x: &[f32],
    m: usize,
    w: &Linear,
    out: &mut [f32],
) -> Result<(), ModelError> {
    be.linear(x, m, w, out)?;
    be.gelu(out);
    Ok(())
}
