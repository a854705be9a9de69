//! The encoder on the GPU: a session's windows, their cross-attention K/V, and the
//! encoder's graph.

use super::*;

impl CudaSession {
    /// Runs the encoder on one window, computes every decoder layer's cross-attention K/V
    /// from it, and starts a new text sequence.
    ///
    /// `mel` Shape: [n_mels, n_frames] row-major.
    pub fn encode(&mut self, mel: &[f32]) -> Result<()> {
        self.encode_windows(&[mel])
    }

    /// Runs the encoder on each of `mels` (one window each, Shape: [n_mels, n_frames]) and
    /// starts a batch of one empty text sequence per window, as
    /// `sotto_model::Session::encode_windows`: sequence `i` attends to window `i` and
    /// follows it through [`CudaSession::reorder`], so windows decoded together
    /// ([`CudaSession::decode_batch`]) read every decoder weight once per step for all of
    /// them. [`CudaSession::decode`], [`CudaSession::align`] and
    /// [`CudaSession::reset_text`] work on the first sequence's window. The cross K/V of
    /// every window stay on the device (per window ~18 MiB on tiny at f32), kept for later
    /// batches.
    pub fn encode_windows(&mut self, mels: &[&[f32]]) -> Result<()> {
        let h = *self.model.hparams();
        let n_frames = self.model.n_frames();
        if let Some(bad) = mels.iter().find(|m| m.len() != h.n_mels * n_frames) {
            return Err(input_err(
                "encode",
                format!(
                    "mel has {} values, expected {}×{n_frames}",
                    bad.len(),
                    h.n_mels
                ),
            ));
        }
        let Some((first, rest)) = mels.split_first() else {
            return Err(input_err("encode", "no windows to encode"));
        };
        self.encoded = false;
        self.windows = 1;
        self.seq_window = vec![0];
        self.reset_text();
        self.hold_windows(mels.len())?;
        // The encoder writes window 0's slot: the others first, each copied out after.
        let slot = self.cross_slot();
        for (w, mel) in rest.iter().enumerate().rev() {
            self.encode_one(mel)?;
            guard("encode", || {
                let dev = self.dev();
                for layer in self.cross_k.iter().chain(&self.cross_v) {
                    dev.copy_f32(layer.at((w + 1) * slot), layer.ptr(), slot)?;
                }
                Ok(())
            })?;
        }
        self.encode_one(first)?;
        self.windows = mels.len();
        self.seq_window = (0..mels.len()).collect();
        if mels.len() > 1 {
            // One empty sequence per window.
            guard("encode", || {
                self.bind()?;
                self.reserve(mels.len())
            })?;
            self.kv.batch = mels.len();
        }
        self.encoded = true;
        Ok(())
    }

    /// Windows the last encode call encoded.
    pub fn windows(&self) -> usize {
        self.windows
    }

    /// Starts a new text sequence (a batch of one, empty) against window `w` of the last
    /// [`CudaSession::encode_windows`], for [`CudaSession::decode`] and
    /// [`CudaSession::align`] on that window.
    pub fn select_window(&mut self, w: usize) -> Result<()> {
        if w >= self.windows {
            return Err(input_err(
                "select_window",
                format!("window {w} of {} encoded", self.windows),
            ));
        }
        self.reset_text();
        self.seq_window = vec![w];
        Ok(())
    }

    /// Runs later encodes over the first `ctx` encoder positions of each window only
    /// (`2·ctx` mel frames, `ctx · 20` ms), as `sotto_model::Session::set_audio_ctx` and
    /// whisper.cpp's `audio_ctx`: the encoder's work shrinks with it and the decoder
    /// attends to those positions alone. None, or the model's n_audio_ctx: the whole
    /// window. Drops the audio encoded so far when the length changes; the encoder's graph
    /// is captured again from the second encode at the new length, the steps' on their
    /// next use.
    pub fn set_audio_ctx(&mut self, ctx: Option<usize>) -> Result<()> {
        let n_audio_ctx = self.model.hparams().n_audio_ctx;
        let ctx = ctx.unwrap_or(n_audio_ctx);
        if ctx == 0 || ctx > n_audio_ctx {
            return Err(input_err(
                "set_audio_ctx",
                format!("{ctx} is not in 1..={n_audio_ctx} (the model's n_audio_ctx)"),
            ));
        }
        if ctx != self.audio_ctx {
            self.encoded = false;
            self.windows = 1;
            self.seq_window = vec![0];
            self.reset_text();
            self.audio_ctx = ctx;
            // New shapes: the first encode of them runs directly, as a session's first does,
            // so that cuBLAS meets them outside a capture; the next captures the graph.
            self.encodes = 0;
        }
        Ok(())
    }

    /// Encoder positions a window runs over (see [`CudaSession::set_audio_ctx`]).
    pub fn audio_ctx(&self) -> usize {
        self.audio_ctx
    }

    /// Values of one window's cross K (or V) in one decoder layer.
    fn cross_slot(&self) -> usize {
        self.audio_ctx * self.model.hparams().n_text_state
    }

    /// Room for the cross K/V of `n` windows (their contents are written next).
    fn hold_windows(&mut self, n: usize) -> Result<()> {
        let h = *self.model.hparams();
        let slot = self.cross_slot();
        if self.cross_k.first().is_none_or(|b| b.len() >= n * slot) {
            return Ok(());
        }
        guard("encode", || {
            self.bind()?;
            let grown = |_| Buf::<f32>::zeros(&self.stream, n * slot);
            let k = (0..h.n_text_layer).map(grown).collect::<Result<Vec<_>>>()?;
            let v = (0..h.n_text_layer).map(grown).collect::<Result<Vec<_>>>()?;
            Ok((k, v))
        })
        .map(|(k, v)| (self.cross_k, self.cross_v) = (k, v))
    }

    /// The encoder on one window, into window 0's cross K/V.
    fn encode_one(&mut self, mel: &[f32]) -> Result<()> {
        self.encoder_laps.clear();
        // The first encode runs directly (it also warms cuBLAS up, which a capture should
        // not be the first to call); later ones replay one captured graph, unless timing
        // the op groups, or graphs are off or failed to capture.
        let graphed =
            self.encodes > 0 && !self.keep_laps && self.enc_graph_off.is_none() && graphs_enabled();
        let (mut slot, mut off) = (self.enc_graph.take(), self.enc_graph_off.take());
        let laps = guard("encode", || {
            self.bind()?;
            if !graphed {
                return self.run_encoder(mel);
            }
            self.dev().upload_to(self.enc.mel.ptr(), mel)?;
            self.run_encoder_graph(&mut slot, &mut off)?;
            self.stream.synchronize()?;
            Ok(Vec::new())
        });
        self.graphed_encode = graphed && off.is_none();
        (self.enc_graph, self.enc_graph_off) = (slot, off);
        self.encoder_laps = laps?;
        self.encodes += 1;
        Ok(())
    }

    /// The encoder and cross K/V; returns the time of each op group.
    fn run_encoder(&self, mel: &[f32]) -> Result<Vec<(&'static str, Duration)>> {
        let mut laps = Laps::start(&self.stream, self.keep_laps)?;
        self.dev().upload_to(self.enc.mel.ptr(), mel)?;
        self.encoder_body(&self.dev(), &mut laps)?;
        // Surfaces launch failures here rather than at the first decode.
        self.stream.synchronize()?;
        laps.finish()
    }

    /// The encoder's launches, from the uploaded mel to the cross K/V (what a graph
    /// captures), marking each op group's end in `laps`.
    fn encoder_body(&self, dev: &Dev<'_>, laps: &mut Laps<'_>) -> Result<()> {
        let h = *self.model.hparams();
        let (b, enc) = (&self.enc, &self.model.encoder);
        let (ctx, d, n_frames) = (self.audio_ctx, h.n_audio_state, self.model.n_frames());
        // The mel is channel-major: x(t, c) at c·n_frames + t. The first `2·ctx` frames
        // (all of them unless `audio_ctx` shortened the window), zero-padded after.
        let (mel, cols, frames) = (b.mel.ptr(), b.cols.ptr(), 2 * ctx);
        let (t1, c1) = dev.im2col_in(mel, cols, frames, h.n_mels, 1, 1, n_frames, &enc.conv1)?;
        dev.linear_in(&enc.conv1, c1, t1, b.conv1.ptr(), true)?;
        let (t2, c2) = dev.im2col_in(b.conv1.ptr(), cols, frames, d, 2, d, 1, &enc.conv2)?;
        debug_assert_eq!(t2, ctx);
        dev.linear_in(&enc.conv2, c2, t2, b.x.ptr(), true)?;
        // Adds onto the residual stream (the positions, then each block's last bias) wait
        // for the layer norm that next reads it, which adds them in its own launch.
        let mut pending = dev.add_or_defer(b.x.ptr(), enc.pos.ptr(), ctx, d)?;
        laps.lap("conv")?;
        let (x, h_buf) = (b.x.ptr(), b.h.ptr());
        // The MLP's buffer holds a stacked product's output until it is split.
        let tmp = (b.mlp.ptr(), b.mlp.len());
        for (blk, stacked) in enc.blocks.iter().zip(&enc.qkv) {
            let a = &blk.attn;
            let first = stacked.as_ref().filter(|_| dev.fuse).unwrap_or(&a.query);
            let h_in = dev.norm_in(x, pending, &blk.attn_ln, ctx, h_buf, false, Some(first))?;
            let qkv = [
                (&a.query, b.q.ptr()),
                (&a.key, b.k.ptr()),
                (&a.value, b.v.ptr()),
            ];
            dev.linears_stacked(stacked.as_ref(), &qkv, h_in, ctx, tmp)?;
            laps.lap("q/k/v")?;
            let (q, k, v, att) = (b.q.ptr(), b.k.ptr(), b.v.ptr(), b.att.ptr());
            let att_in = dev.attention_in((q, k, v), att, ctx, d, h.n_audio_head, &a.out)?;
            laps.lap("attention")?;
            pending = dev.linear_residual_in(&a.out, att_in, ctx, x)?;
            laps.lap("out-projection")?;
            // x += mlp.2(gelu(mlp.0(ln(x)))), as the decoder's `mlp`.
            let (l0, l2) = (&blk.mlp_0, &blk.mlp_2);
            let h_in = dev.norm_in(x, pending, &blk.mlp_ln, ctx, h_buf, false, Some(l0))?;
            let g_in = dev.linear_gelu_in(l0, h_in, ctx, b.mlp.ptr(), l2)?;
            pending = dev.linear_residual_in(l2, g_in, ctx, x)?;
            laps.lap("mlp")?;
        }
        // Every decoder layer's cross-attention K and V from the one encoder output, which
        // stays in f32 as well for `encoder_output`; CROSS_GROUP layers per product.
        let mut kv = Vec::with_capacity(2 * self.model.decoder.blocks.len());
        for (l, blk) in self.model.decoder.blocks.iter().enumerate() {
            let (_, cross) = cross_of(blk)?;
            kv.push((&cross.key, self.cross_k[l].ptr()));
            kv.push((&cross.value, self.cross_v[l].ptr()));
        }
        let stacks = &self.model.decoder.cross_kv;
        let first = match stacks.first() {
            Some(Some(w)) if dev.fuse => Some(w),
            _ => kv.first().map(|&(w, _)| w),
        };
        let out = self.enc_out.ptr();
        let e_in = dev.norm_in(x, pending, &enc.ln_post, ctx, out, true, first)?;
        if !dev.fuse {
            // One narrowing of the input for all of them, as before the stacks.
            dev.linears_in(&kv, e_in, ctx)?;
        }
        for (group, stacked) in kv.chunks(2 * CROSS_GROUP).zip(stacks).filter(|_| dev.fuse) {
            dev.linears_stacked(stacked.as_ref(), group, e_in, ctx, tmp)?;
        }
        if dev.precision == Precision::F32 {
            // As the CPU keeps them (f16, packed once per window), so that f32 runs read
            // the same keys and values.
            for &(w, out) in &kv {
                dev.round_f16(out, ctx * w.n_out)?;
            }
        }
        laps.lap("cross K/V")
    }

    /// Every device address and switch the encoder's launches depend on: a graph captured
    /// under others is stale.
    fn encoder_layout(&self) -> Vec<u64> {
        let b = &self.enc;
        let bufs = [
            &b.mel, &b.cols, &b.conv1, &b.x, &b.h, &b.q, &b.k, &b.v, &b.att, &b.mlp,
        ];
        let cross = self.cross_k.iter().chain(&self.cross_v);
        (bufs.into_iter().chain(cross).map(|b| b.ptr()))
            .chain([
                self.enc_out.ptr(),
                self.scores.ptr(),
                self.scores.len() as u64,
            ])
            .chain([self.half.ptr(), self.half.len() as u64, self.wq.ptr()])
            .chain([self.attention as u64, self.fuse as u64])
            .chain([self.audio_ctx as u64])
            .collect()
    }

    /// Runs the encoder from the uploaded mel as a graph in `slot`, capturing it first
    /// where there is none for the current layout. A capture that fails leaves the reason
    /// in `off` (later encodes run without a graph) and runs the launches directly.
    fn run_encoder_graph(
        &self,
        slot: &mut Option<CapturedGraph>,
        off: &mut Option<String>,
    ) -> Result<()> {
        let layout = self.encoder_layout();
        if slot.as_ref().is_none_or(|g| g.layout != layout) {
            *slot = None;
            match self
                .capture_with(|dev| self.encoder_body(dev, &mut Laps::start(&self.stream, false)?))
            {
                Ok(graph) => *slot = Some(CapturedGraph { layout, graph }),
                Err(e) => {
                    *off = Some(e.to_string());
                    let dev = self.dev();
                    return self.encoder_body(&dev, &mut Laps::start(&self.stream, false)?);
                }
            }
        }
        match slot {
            Some(g) => self.launch_graph(&g.graph),
            None => unreachable!("captured above"),
        }
    }

    /// The encoder output, copied to the host. Shape: [audio_ctx, n_audio_state]
    pub fn encoder_output(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.audio_ctx * self.model.hparams().n_audio_state];
        guard("encoder_output", || {
            self.bind()?;
            self.dev().download(self.enc_out.ptr(), &mut out)
        })?;
        Ok(out)
    }
}
