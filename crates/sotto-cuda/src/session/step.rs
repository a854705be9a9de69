//! Decoder passes: prompts, steps of a batch of sequences, reorders and alignment, each
//! step's buffers and its graph.

use super::*;

impl CudaSession {
    /// Appends `tokens` at positions `text_len..` of the single sequence (a batch of one) and
    /// writes the logits of the requested rows (indices into `tokens`) into `logits`.
    ///
    /// `logits` Shape: [rows.len(), n_vocab]. Errors (the session unchanged) when the batch
    /// is not one, the sequence would pass n_text_ctx, a token or row is out of range, or
    /// [`CudaSession::encode`] was not called.
    pub fn decode(&mut self, tokens: &[u32], rows: &[usize], logits: &mut [f32]) -> Result<()> {
        self.decode_one(tokens, rows, Out::Full(logits))
    }

    /// [`CudaSession::decode`], each requested row reduced on the GPU to a shortlist record
    /// of `list` ([`ops::Dev::shortlist`]) and only the records downloaded: ~7 KB a row
    /// instead of the 207 KB of a whole one. `records` Shape: [rows.len(),
    /// [`launch::shortlist_record_len`]].
    pub fn decode_shortlists(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        list: ShortlistOf<'_>,
        records: &mut [f32],
    ) -> Result<()> {
        self.decode_one(tokens, rows, Out::Records(list, records))
    }

    /// Appends `tokens.len() / batch` tokens to each of the `batch` sequences in one pass and
    /// writes each sequence's last-row logits.
    ///
    /// `tokens` Shape: [batch, n_new]; `logits` Shape: [batch, n_vocab]. `batch` must be
    /// [`CudaSession::batch`]. Errors leave the session unchanged.
    pub fn decode_batch(&mut self, tokens: &[u32], batch: usize, logits: &mut [f32]) -> Result<()> {
        self.decode_many(tokens, batch, Out::Full(logits))
    }

    /// [`CudaSession::decode_batch`] into shortlist records, as
    /// [`CudaSession::decode_shortlists`]. `records` Shape: [batch, record length].
    pub fn decode_batch_shortlists(
        &mut self,
        tokens: &[u32],
        batch: usize,
        list: ShortlistOf<'_>,
        records: &mut [f32],
    ) -> Result<()> {
        self.decode_many(tokens, batch, Out::Records(list, records))
    }

    /// [`CudaSession::decode`] into `out`.
    fn decode_one(&mut self, tokens: &[u32], rows: &[usize], out: Out<'_>) -> Result<()> {
        if self.kv.batch != 1 {
            return Err(input_err(
                "decode",
                format!("needs a batch of one, not {}", self.kv.batch),
            ));
        }
        self.check_out("decode", tokens, tokens.len(), rows, &out)?;
        self.forward(tokens, 1, rows, out)
    }

    /// [`CudaSession::decode_batch`] into `out`.
    fn decode_many(&mut self, tokens: &[u32], batch: usize, out: Out<'_>) -> Result<()> {
        if batch != self.kv.batch || batch == 0 || !tokens.len().is_multiple_of(batch) {
            return Err(input_err(
                "decode_batch",
                format!(
                    "{} tokens for a batch of {batch}; the session holds {} sequences",
                    tokens.len(),
                    self.kv.batch
                ),
            ));
        }
        let n_new = tokens.len() / batch;
        let rows: Vec<usize> = (1..=batch).map(|b| b * n_new - 1).collect();
        self.check_out("decode_batch", tokens, n_new, &rows, &out)?;
        self.forward(tokens, batch, &rows, out)
    }

    /// Rebuilds the batch: new sequence `i` is current sequence `src[i]` (the cache grows
    /// when `src` is longer than any batch before). No cache row moves: sequence `i` reads
    /// its keys below the current length where `src[i]` did ([`DevKv`]).
    pub fn reorder(&mut self, src: &[usize]) -> Result<()> {
        let batch = self.kv.batch;
        if src.is_empty() || src.iter().any(|&s| s >= batch) {
            return Err(input_err(
                "reorder",
                format!("sources {src:?} for a batch of {batch}"),
            ));
        }
        guard("reorder", || {
            self.bind()?;
            self.reserve(src.len())
        })?;
        self.kv.slots = plan::reorder_slots(&self.kv.slots, src, self.kv.n_ctx, self.kv.len);
        self.kv.batch = src.len();
        self.seq_window = src.iter().map(|&s| self.seq_window[s]).collect();
        Ok(())
    }

    /// Word alignment, as `sotto_model::Session::align`: runs the decoder over the whole
    /// sequence `tokens` from position 0 against the current window in one causal pass,
    /// leaving the batch and its cache as they were; returns the cross-attention scores of
    /// the `(layer, head)` pairs before the softmax, Shape: [heads.len(), tokens.len(),
    /// audio_ctx], and writes the logits of `rows`, Shape: [rows.len(), n_vocab].
    pub fn align(
        &mut self,
        tokens: &[u32],
        heads: &[(usize, usize)],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<Vec<f32>> {
        let h = *self.model.hparams();
        check_align_input(&h, tokens, heads).map_err(|msg| input_err("align", msg))?;
        self.check_decode("align", tokens, 0, rows, logits.len())?;
        let m = tokens.len();
        let n_scores = heads.len() * m * self.audio_ctx;
        guard("align", || {
            self.bind()?;
            self.size_step(m, rows.len())?;
            let scores = Buf::<f32>::zeros(&self.stream, n_scores)?;
            let dev = self.dev();
            // The sequence's own keys from position 0: the cache is not read.
            let mut input = vec![0; 1 + m];
            write_step_input(&mut input, 0, tokens, &[]);
            dev.upload_to(self.dec.input.ptr(), &input)?;
            let pass = Pass::Align {
                heads,
                scores: scores.ptr(),
            };
            let mut off = Laps::start(&self.stream, false)?;
            self.decoder_body(&dev, m, rows, pass, &mut off)?;
            let mut out = vec![0f32; n_scores];
            dev.download(self.dec.logits.ptr(), logits)?;
            if n_scores > 0 {
                dev.download(scores.ptr(), &mut out)?;
            }
            Ok(out)
        })
    }

    /// Grows the cache to `batch` sequences, keeping every slot's rows (the slot table may
    /// name slots past the current batch).
    pub(super) fn reserve(&mut self, batch: usize) -> Result<()> {
        if batch <= self.kv.capacity {
            return Ok(());
        }
        let (stride, used) = (self.kv.stride(), self.kv.capacity * self.kv.stride());
        let dev = self.dev();
        let mut grow = |layer: &Buf<f32>| -> Result<Buf<f32>> {
            let grown = Buf::zeros(&self.stream, batch * stride)?;
            dev.copy_f32(grown.ptr(), layer.ptr(), used)?;
            Ok(grown)
        };
        let k = self
            .kv
            .k
            .iter()
            .map(&mut grow)
            .collect::<Result<Vec<_>>>()?;
        let v = self
            .kv
            .v
            .iter()
            .map(&mut grow)
            .collect::<Result<Vec<_>>>()?;
        self.kv.k = k;
        self.kv.v = v;
        self.kv.capacity = batch;
        Ok(())
    }

    /// Checks a step of `n_new` tokens per sequence, `tokens` for the whole batch.
    fn check_decode(
        &self,
        op: &'static str,
        tokens: &[u32],
        n_new: usize,
        rows: &[usize],
        logits_len: usize,
    ) -> Result<()> {
        check_decode_input(
            self.model.hparams(),
            self.encoded,
            self.kv.len,
            tokens,
            n_new,
            rows,
            logits_len,
        )
        .map_err(|msg| input_err(op, msg))
    }

    /// Checks a step and where its logits go (whole rows, or records) before anything runs.
    fn check_out(
        &self,
        op: &'static str,
        tokens: &[u32],
        n_new: usize,
        rows: &[usize],
        out: &Out<'_>,
    ) -> Result<()> {
        match out {
            Out::Full(logits) => self.check_decode(op, tokens, n_new, rows, logits.len()),
            Out::Records(list, records) => {
                let n = self.model.hparams().n_vocab;
                self.check_decode(op, tokens, n_new, rows, rows.len() * n)?;
                self.check_records(op, rows.len(), *list, records.len())
            }
        }
    }

    /// Checks a shortlist's parameters and its records' length before anything runs.
    fn check_records(
        &self,
        op: &'static str,
        rows: usize,
        list: ShortlistOf<'_>,
        len: usize,
    ) -> Result<()> {
        let n = self.model.hparams().n_vocab;
        launch::shortlist(op, rows, n, list.text_end, list.top, list.pinned.len())?;
        let sorted = list.pinned.windows(2).all(|w| w[0] < w[1]);
        if !sorted
            || list
                .pinned
                .last()
                .is_some_and(|&p| p as usize >= list.text_end)
        {
            return Err(input_err(
                op,
                format!(
                    "pinned ids must be sorted, distinct and below {}",
                    list.text_end
                ),
            ));
        }
        let want =
            rows * launch::shortlist_record_len(n, list.text_end, list.top, list.pinned.len());
        if len != want {
            return Err(input_err(
                op,
                format!("{len} record words for {rows} rows of {want} in all"),
            ));
        }
        Ok(())
    }

    /// Sizes the shortlist buffers for `rows` rows of `list`, and uploads its pinned ids
    /// where they differ from the last upload.
    fn size_shortlists(&mut self, rows: usize, list: ShortlistOf<'_>) -> Result<()> {
        let h = *self.model.hparams();
        let (s, l) = (&self.stream, &mut self.lists);
        let scratch = launch::shortlist_scratch_bytes(rows, list.text_end, list.top);
        l.scratch.ensure(s, scratch.div_ceil(4))?;
        let record =
            launch::shortlist_record_len(h.n_vocab, list.text_end, list.top, list.pinned.len());
        l.out.ensure(s, rows * record)?;
        let same =
            (l.uploaded.as_ref()).is_some_and(|(te, p)| *te == list.text_end && p == list.pinned);
        if !same {
            l.bitmap_host = plan::pinned_bitmap(list.text_end, list.pinned);
            l.pinned = Buf::upload(s, list.pinned)?;
            l.bitmap = Buf::upload(s, &l.bitmap_host)?;
            l.uploaded = Some((list.text_end, list.pinned.to_vec()));
        }
        Ok(())
    }

    /// Sizes the step's buffers for `m` token rows and `rows` logit rows.
    fn size_step(&mut self, m: usize, rows: usize) -> Result<()> {
        let h = *self.model.hparams();
        let d = h.n_text_state;
        let n_in = self.step_input_len(m);
        let (s, b) = (&self.stream, &mut self.dec);
        b.input.ensure(s, n_in)?;
        for buf in [&mut b.x, &mut b.h, &mut b.q, &mut b.k, &mut b.v, &mut b.att] {
            buf.ensure(s, m * d)?;
        }
        b.mlp.ensure(s, m * 4 * d)?;
        b.sel.ensure(s, rows * d)?;
        b.normed.ensure(s, rows * d)?;
        b.logits.ensure(s, rows * h.n_vocab)?;
        let dh = d / h.n_text_head;
        // A step's rows, or (windows decoded together) a run of them on one window.
        let split_rows = m.min(kernels::MMV_ROWS);
        if let Some(p) = plan::attention_split(split_rows, h.n_text_head, dh, h.n_audio_ctx) {
            b.part.ensure(s, p.part_len(dh))?;
        }
        if self.model.precision() == Precision::F16 {
            self.half.ensure(s, (m * 4 * d).max(rows * d))?;
        }
        Ok(())
    }

    /// The decoder over `batch` sequences of `tokens.len() / batch` new tokens each; `rows`
    /// index the flattened [batch · n_new] rows whose logits are written. Inputs checked.
    ///
    /// A step of one token per sequence with every row's logits (greedy and beam steps) at
    /// F16 precision runs as a graph captured on its first use for that batch size and
    /// output: the copy of its inputs (position, tokens) in from [`Staging::input`], the
    /// decoder, the rows' reduction to records if asked, and the copy out to
    /// [`Staging::out`], so one capture serves every step and a step is one launch and one
    /// synchronize. `SOTTO_CUDA_GRAPHS=0` turns graphs off; a capture that fails does too,
    /// for this session ([`CudaSession::step_graph_error`]).
    fn forward(
        &mut self,
        tokens: &[u32],
        batch: usize,
        rows: &[usize],
        out: Out<'_>,
    ) -> Result<()> {
        let n_new = tokens.len() / batch;
        guard("decode", || {
            self.bind()?;
            self.size_step(tokens.len(), rows.len())?;
            let (list, dst) = match out {
                Out::Full(logits) => (None, logits),
                Out::Records(list, records) => {
                    self.size_shortlists(rows.len(), list)?;
                    (Some(list), records)
                }
            };
            let n_in = self.step_input_len(tokens.len());
            let (st, slots) = (&mut self.staging, &self.kv.slots);
            st.input.ensure(&self.stream, n_in)?;
            st.out.ensure(&self.stream, dst.len())?;
            // Every step ends synchronized (an error too, below): no queued copy reads this.
            let pos = self.kv.len as u32;
            write_step_input(st.input.head_mut(n_in), pos, tokens, slots);
            let key = StepKey {
                batch,
                slots: !slots.is_empty(),
                list: list.map(|l| (l.text_end, l.top, l.pinned.len())),
            };
            let graphable = n_new == 1
                && batch <= kernels::MMV_ROWS
                && rows.iter().copied().eq(0..batch)
                && self.model.precision() == Precision::F16
                && !self.keep_step_laps
                && !matches!(self.step_graphs, StepGraphs::Off(_))
                && graphs_enabled();
            let mut graphs = std::mem::take(&mut self.graphs);
            let mut how = self.step_graphs.clone();
            let mut run = || {
                let mut laps = Laps::start(&self.stream, self.keep_step_laps)?;
                let dev = self.dev();
                if graphable {
                    how = self.capture_step(&mut graphs, key, rows.len(), list, how.clone());
                }
                match &how {
                    StepGraphs::Whole if graphable => self.launch_graph(&graphs[&key].graph)?,
                    StepGraphs::Kernels(_) if graphable => {
                        self.copy_in(&dev, n_in)?;
                        self.launch_graph(&graphs[&key].graph)?;
                        self.copy_out(&dev, rows.len(), list)?;
                    }
                    _ => {
                        self.copy_in(&dev, n_in)?;
                        let step = Pass::Step {
                            batch,
                            slots: key.slots,
                        };
                        self.step_kernels(&dev, tokens.len(), rows, step, list, &mut laps)?;
                        self.copy_out(&dev, rows.len(), list)?;
                        laps.lap("download")?;
                    }
                }
                self.stream.synchronize()?;
                laps.finish()
            };
            let r = run();
            if r.is_err() {
                // Whatever was queued finishes before the staging buffers are touched again.
                let _ = self.stream.synchronize();
            }
            self.graphs = graphs;
            self.step_graphs = how;
            self.step_laps = r?;
            dst.copy_from_slice(self.staging.out.head(dst.len()));
            Ok(())
        })?;
        self.kv.len += n_new;
        Ok(())
    }

    /// Words of a step's input for `m` tokens: the position, the tokens, the slot table.
    fn step_input_len(&self, m: usize) -> usize {
        1 + m + self.kv.slots.len()
    }

    /// Queues the copy of a step's input, its first `n` words, in from [`Staging::input`].
    fn copy_in(&self, dev: &Dev<'_>, n: usize) -> Result<()> {
        let (b, st) = (&self.dec, &self.staging);
        dev.copy_pinned::<u32>(Way::ToDevice, b.input.ptr(), st.input.addr(), n)
    }

    /// Queues the copy of a step's `rows` logit rows, or their records of `list`, out to
    /// [`Staging::out`].
    fn copy_out(&self, dev: &Dev<'_>, rows: usize, list: Option<ShortlistOf<'_>>) -> Result<()> {
        let (h, st) = (self.model.hparams(), &self.staging);
        let (src, n) = match list {
            None => (self.dec.logits.ptr(), rows * h.n_vocab),
            Some(l) => {
                let record =
                    launch::shortlist_record_len(h.n_vocab, l.text_end, l.top, l.pinned.len());
                (self.lists.out.ptr(), rows * record)
            }
        };
        dev.copy_pinned::<f32>(Way::ToHost, src, st.out.addr(), n)
    }

    /// A step's kernels, from the copied-in input to the logits of `rows` (`m` token rows
    /// of `step`), reduced to records of `list` if given.
    fn step_kernels(
        &self,
        dev: &Dev<'_>,
        m: usize,
        rows: &[usize],
        step: Pass<'_>,
        list: Option<ShortlistOf<'_>>,
        laps: &mut Laps<'_>,
    ) -> Result<()> {
        self.decoder_body(dev, m, rows, step, laps)?;
        let Some(list) = list else {
            return Ok(());
        };
        let (l, h) = (&self.lists, self.model.hparams());
        let bitmap = match list.pinned.is_empty() {
            true => 0,
            false => l.bitmap.ptr(),
        };
        let (n_vocab, te, top, n_pinned) = (h.n_vocab, list.text_end, list.top, list.pinned.len());
        let (logits, scratch, out) = (self.dec.logits.ptr(), l.scratch.ptr(), l.out.ptr());
        #[rustfmt::skip]
        dev.shortlist(logits, rows.len(), n_vocab, te, top, l.pinned.ptr(), n_pinned, bitmap,
            scratch, out)?;
        laps.lap("shortlist")
    }

    /// The decoder's launches for `m` token rows, from the uploaded tokens and position to
    /// the logits of `rows` in `dec.logits`; `pass` says which keys the self-attention sees.
    /// Each op group's end is marked in `laps`.
    fn decoder_body(
        &self,
        dev: &Dev<'_>,
        m: usize,
        rows: &[usize],
        pass: Pass<'_>,
        laps: &mut Laps<'_>,
    ) -> Result<()> {
        let h = *self.model.hparams();
        let (b, kv, dec) = (&self.dec, &self.kv, &self.model.decoder);
        let (d, nh, pos) = (h.n_text_state, h.n_text_head, self.dec.input.ptr());
        let (batch, slots) = match pass {
            // The slot table follows the tokens in the input.
            Pass::Step { batch, slots: true } => (batch, b.input.at(1 + m)),
            Pass::Step { batch, .. } => (batch, 0),
            Pass::Align { .. } => (1, 0),
        };
        let n_new = m / batch;
        let stride = kv.stride();
        dev.embed(
            &dec.token_embedding,
            b.input.at(1),
            dec.pos.ptr(),
            b.x.ptr(),
            m,
            d,
            n_new,
            pos,
        )?;
        laps.lap("embed")?;
        let (x, hb, q, att) = (b.x.ptr(), b.h.ptr(), b.q.ptr(), b.att.ptr());
        // Each layer norm goes into the launch of the product that reads it where it can.
        let normed = |norm| Normed { x, norm, h: hb };
        for (l, blk) in dec.blocks.iter().enumerate() {
            let a = &blk.attn;
            let ws = [&a.query, &a.key, &a.value];
            let (kc, vc) = (kv.k[l].ptr(), kv.v[l].ptr());
            // A step's q, k and v in one launch, k and v straight into the cache; else
            // the products (of the norm in `hb`), then the cache writes.
            let input = normed(&blk.attn_ln);
            let fused = match pass {
                Pass::Step { .. } => {
                    let cache = Some((pos, n_new, stride));
                    dev.qkv_mat_vec(ws, input, m, [q, kc, vc], cache)?
                }
                Pass::Align { .. } => {
                    dev.qkv_mat_vec(ws, input, m, [q, b.k.ptr(), b.v.ptr()], None)?
                }
            };
            if !fused {
                let qkv = [(&a.query, q), (&a.key, b.k.ptr()), (&a.value, b.v.ptr())];
                dev.linears(&qkv, hb, m)?;
            }
            laps.lap("self q/k/v")?;
            match pass {
                Pass::Step { .. } => {
                    if !fused {
                        dev.kv_write(b.k.ptr(), kc, batch, n_new, d, pos, stride)?;
                        dev.kv_write(b.v.ptr(), vc, batch, n_new, d, pos, stride)?;
                    }
                    // Keys up to the cache's length: each row's causal bound comes from `pos`.
                    let (keys, c) = (kv.n_ctx, Causal { q_pos0: pos, slots });
                    dev.attention(q, kc, vc, att, m, n_new, d, nh, stride, keys, Some(c))?;
                }
                // The sequence's own keys, not the cache (`pos` holds 0).
                Pass::Align { .. } => {
                    let (kb, vb, c) = (
                        b.k.ptr(),
                        b.v.ptr(),
                        Causal {
                            q_pos0: pos,
                            slots: 0,
                        },
                    );
                    dev.attention(q, kb, vb, att, m, m, d, nh, m * d, m, Some(c))?;
                }
            }
            laps.lap("self attention")?;
            dev.linear_residual(&a.out, att, m, x)?;
            laps.lap("self out")?;

            let (cross_ln, cross) = cross_of(blk)?;
            dev.norm_linear(&cross.query, normed(cross_ln), m, q, false)?;
            laps.lap("cross q")?;
            // Each run of sequences on one window attends to its audio (key stride 0).
            let ctx = self.audio_ctx;
            let (ck, cv) = (&self.cross_k[l], &self.cross_v[l]);
            if let Pass::Align { heads, scores } = pass {
                let ck = ck.at(self.seq_window[0] * ctx * d);
                for (slot, &(_, head)) in heads.iter().enumerate().filter(|(_, p)| p.0 == l) {
                    let out = scores + (slot * m * ctx * 4) as u64;
                    dev.attention_scores(q, ck, out, m, ctx, d, nh, head)?;
                }
            }
            for (w, seqs) in window_runs(&self.seq_window[..batch]) {
                let (r0, rows) = (seqs.start * n_new, seqs.len() * n_new);
                let (qr, out) = (q + (r0 * d * 4) as u64, att + (r0 * d * 4) as u64);
                let (kw, vw) = (ck.at(w * ctx * d), cv.at(w * ctx * d));
                dev.attention(qr, kw, vw, out, rows, 1, d, nh, 0, ctx, None)?;
            }
            laps.lap("cross attention")?;
            dev.linear_residual(&cross.out, att, m, x)?;
            laps.lap("cross out")?;

            mlp(dev, blk, m, x, hb, b.mlp.ptr())?;
            laps.lap("mlp")?;
        }
        // The rows whose logits are wanted: read in place where they are consecutive (a
        // step's every row, a prompt's last), else gathered. Their norm keeps its own
        // launch: the vocabulary's thousands of blocks would each compute it again.
        let consecutive = rows.windows(2).all(|p| p[1] == p[0] + 1);
        let sel = match rows.first() {
            Some(&r) if consecutive => b.x.at(r * d),
            _ => {
                for (i, &r) in rows.iter().enumerate() {
                    dev.copy_f32(b.sel.at(i * d), b.x.at(r * d), d)?;
                }
                b.sel.ptr()
            }
        };
        dev.layer_norm(sel, &dec.ln, b.normed.ptr(), rows.len())?;
        let out = b.logits.ptr();
        dev.linear(&dec.token_embedding, b.normed.ptr(), rows.len(), out, false)?;
        laps.lap("logits")
    }

    /// Every address the step of `key` reads or writes: a graph captured with other
    /// addresses is stale.
    fn layout(&self, key: StepKey) -> Vec<u64> {
        let b = &self.dec;
        let bufs = [
            &b.x, &b.h, &b.q, &b.k, &b.v, &b.att, &b.mlp, &b.sel, &b.normed, &b.logits,
        ];
        let kv =
            (self.kv.k.iter().chain(&self.kv.v)).chain(self.cross_k.iter().chain(&self.cross_v));
        let (l, st) = (&self.lists, &self.staging);
        // A graph of whole rows reads no shortlist buffer: their growth leaves it be.
        let lists =
            (key.list).map(|_| [l.scratch.ptr(), l.out.ptr(), l.pinned.ptr(), l.bitmap.ptr()]);
        (bufs.into_iter().chain(kv).map(|b| b.ptr()))
            .chain([b.input.ptr(), self.half.ptr(), self.wq.ptr()])
            .chain([st.input.addr(), st.out.addr()])
            .chain(lists.into_iter().flatten())
            .chain([
                b.part.ptr(),
                b.part.len() as u64,
                self.split as u64,
                self.q8 as u64,
                self.fuse as u64,
                self.pdl as u64,
            ])
            .chain([self.audio_ctx as u64])
            .chain(self.seq_window.iter().map(|&w| w as u64))
            .collect()
    }

    /// Captures the step graph of `key` (its logit rows are `0..rows`) into `graphs` as
    /// `how` says, unless one for the current buffers is there; returns what the session's
    /// step graphs hold after it: a failed capture goes one line down [`StepGraphs`] and
    /// tries again.
    fn capture_step(
        &self,
        graphs: &mut HashMap<StepKey, CapturedGraph>,
        key: StepKey,
        rows: usize,
        list: Option<ShortlistOf<'_>>,
        how: StepGraphs,
    ) -> StepGraphs {
        let layout = self.layout(key);
        if graphs.get(&key).is_some_and(|g| g.layout == layout) {
            return how;
        }
        graphs.remove(&key);
        let rows: Vec<usize> = (0..rows).collect();
        let copies = how == StepGraphs::Whole;
        let n_in = self.step_input_len(key.batch);
        let step = Pass::Step {
            batch: key.batch,
            slots: key.slots,
        };
        let captured = self.capture_with(|dev| {
            let mut off = Laps::start(&self.stream, false)?;
            if copies {
                self.copy_in(dev, n_in)?;
            }
            self.step_kernels(dev, key.batch, &rows, step, list, &mut off)?;
            if copies {
                self.copy_out(dev, rows.len(), list)?;
            }
            Ok(())
        });
        match (captured, how) {
            (Ok(graph), how) => {
                graphs.insert(key, CapturedGraph { layout, graph });
                how
            }
            (Err(e), StepGraphs::Whole) => {
                let why = format!("a graph with the copies failed to capture: {e}");
                graphs.clear();
                self.capture_step(
                    graphs,
                    key,
                    rows.len(),
                    list,
                    StepGraphs::Kernels(Some(why)),
                )
            }
            (Err(e), _) => {
                graphs.clear();
                StepGraphs::Off(e.to_string())
            }
        }
    }
}

/// What a decoder pass's self-attention sees, and what else it reports.
#[derive(Clone, Copy)]
enum Pass<'a> {
    /// `batch` sequences append their rows to the cache at `pos`, and read the keys below
    /// it through the slot table in the input (`slots`) or each in its own slot.
    Step { batch: usize, slots: bool },
    /// One sequence from position 0 over its own keys, the cache untouched; the
    /// cross-attention scores of `heads` go to `scores` ([heads.len(), m, audio_ctx] f32).
    Align {
        heads: &'a [(usize, usize)],
        scores: u64,
    },
}

/// Writes a step's input as [`DecBuffers::input`] holds it into `out` (`1 + tokens.len()
/// + slots.len()` long): the first position, the tokens, then the slot table.
fn write_step_input(out: &mut [u32], pos: u32, tokens: &[u32], slots: &[u32]) {
    out[0] = pos;
    let (head, table) = out[1..].split_at_mut(tokens.len());
    head.copy_from_slice(tokens);
    table.copy_from_slice(slots);
}

/// The runs of consecutive sequences on one window: (window, sequences).
fn window_runs(seq_window: &[usize]) -> Vec<(usize, std::ops::Range<usize>)> {
    let mut runs: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
    for (s, &w) in seq_window.iter().enumerate() {
        match runs.last_mut() {
            Some((last, seqs)) if *last == w => seqs.end = s + 1,
            _ => runs.push((w, s..s + 1)),
        }
    }
    runs
}

/// `x += mlp.2(gelu(mlp.0(ln(x))))`. `x`, `h` Shape: [m, d]; `buf` Shape: [m, 4·d].
fn mlp(dev: &Dev<'_>, blk: &DevBlock, m: usize, x: u64, h: u64, buf: u64) -> Result<()> {
    let (l0, l2): (&DevLinear, &DevLinear) = (&blk.mlp_0, &blk.mlp_2);
    let input = Normed {
        x,
        norm: &blk.mlp_ln,
        h,
    };
    dev.norm_linear(l0, input, m, buf, true)?;
    dev.linear_residual(l2, buf, m, x)
}

#[cfg(test)]
mod tests {
    #[test]
    fn window_runs_group_consecutive_sequences() {
        use super::window_runs;
        assert_eq!(window_runs(&[0]), vec![(0, 0..1)]);
        assert_eq!(window_runs(&[0, 0, 0]), vec![(0, 0..3)]);
        assert_eq!(
            window_runs(&[1, 1, 0, 2, 2, 0]),
            vec![(1, 0..2), (0, 2..3), (2, 3..5), (0, 5..6)]
        );
        assert!(window_runs(&[]).is_empty());
    }
}
