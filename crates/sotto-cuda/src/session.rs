//! [`CudaSession`]: one stream's state on the GPU, with `sotto_model::Session`'s methods
//! and semantics.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cudarc::cublas::CudaBlas;
use sotto_model::{check_align_input, check_decode_input};

use crate::ops::{
    self, Buf, Causal, Dev, DevLinear, HostOp, Mark, Normed, Pinned, Precision, Stream, Way,
};
use crate::whisper::{DevBlock, CROSS_GROUP};
use crate::{driver, guard, kernels, CudaError, CudaWhisper, Result};
use crate::{launch, plan};

/// Encoder activations, allocated once per session.
struct EncBuffers {
    /// Shape: [n_mels, n_frames] as given.
    mel: Buf<f32>,
    /// im2col of either convolution. Shape: [t_out, c_in·3]
    cols: Buf<f32>,
    /// Shape: [n_frames, d]
    conv1: Buf<f32>,
    /// Shape: [n_audio_ctx, d] each.
    x: Buf<f32>,
    h: Buf<f32>,
    q: Buf<f32>,
    k: Buf<f32>,
    v: Buf<f32>,
    att: Buf<f32>,
    /// Shape: [n_audio_ctx, 4·d]
    mlp: Buf<f32>,
}

/// Decoder activations of one step, grown to the largest step seen.
struct DecBuffers {
    /// The step's inputs, copied in from [`Staging::input`] at once: the first position (the
    /// cache length), as the kernels read it, then m token ids (m = batch · new tokens),
    /// then, after a reorder, [`DevKv::slots`]. Shape: [1 + m (+ batch · n_ctx)]
    input: Buf<u32>,
    /// Shape: [m, d] each.
    x: Buf<f32>,
    h: Buf<f32>,
    q: Buf<f32>,
    k: Buf<f32>,
    v: Buf<f32>,
    att: Buf<f32>,
    /// Shape: [m, 4·d]
    mlp: Buf<f32>,
    /// Shape: [rows, d] each.
    sel: Buf<f32>,
    normed: Buf<f32>,
    /// Shape: [rows, n_vocab]
    logits: Buf<f32>,
    /// Partial results of split cross-attention (`plan::SplitAttention::part_len`).
    part: Buf<f32>,
    /// A counter per (row, head) of a step's split attention, zero between launches
    /// ([`ops::Dev::done`]). Shape: [MMV_ROWS, n_text_head]
    done: Buf<u32>,
}

/// What each row of a step is reduced to on the device instead of being downloaded whole
/// (see [`CudaSession::decode_shortlists`]; the record layout is [`ops::Dev::shortlist`]'s).
#[derive(Clone, Copy, Debug)]
pub struct ShortlistOf<'a> {
    /// The first special token: text ids lie below it.
    pub text_end: usize,
    /// Best unpinned text ids kept, at most [`kernels::SHORTLIST_MAX_TOP`].
    pub top: usize,
    /// Text ids kept in full: sorted, distinct, below `text_end`.
    pub pinned: &'a [u32],
}

/// The device side of shortlists: the pinned ids (and their bitmap) as last uploaded, the
/// chunks' partial records, and the records to download.
struct DevShortlists {
    /// (text_end, pinned) of the uploads, so that a search's steps upload them once.
    uploaded: Option<(usize, Vec<u32>)>,
    bitmap_host: Vec<u32>,
    pinned: Buf<u32>,
    bitmap: Buf<u32>,
    scratch: Buf<f32>,
    out: Buf<f32>,
}

/// A step's page-locked host side: its input ([`DecBuffers::input`]'s) staged for the copy
/// in, and its output (whole rows or records) as the copy out leaves it. Copies from and to
/// page-locked memory are queued without a staging copy, and a step graph captures them,
/// so a graphed step is one launch and one synchronize.
struct Staging {
    input: Pinned<u32>,
    out: Pinned<f32>,
}

/// What a session's step graphs hold. A capture that fails goes one line down, for the
/// session's life, with the reason: a driver that refuses the copies in a graph still gets
/// the kernels in one.
#[derive(Clone, Debug, PartialEq, Eq)]
enum StepGraphs {
    /// The copy in, the kernels and the copy out.
    Whole,
    /// The kernels, the copies queued around the launch (why, if a capture failed).
    Kernels(Option<String>),
    /// None: steps launch directly (why).
    Off(String),
}

/// Which step a captured graph runs: one token for each of `batch` sequences, reading
/// their keys through the slot table or not (`slots`), every row's logits downloaded whole
/// (`list` None) or reduced to records of (text_end, top, pinned ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct StepKey {
    batch: usize,
    slots: bool,
    list: Option<(usize, usize, usize)>,
}

/// Where a decoder pass's logits go: whole to the host, or reduced to shortlist records.
enum Out<'a> {
    Full(&'a mut [f32]),
    Records(ShortlistOf<'a>, &'a mut [f32]),
}

/// The self-attention cache of a batch of sequences, on the device.
///
/// Sequence b writes its keys and values at row `len` of slot b. A reorder moves no row:
/// it rewrites `slots`, which says for each sequence and position the slot whose row holds
/// it (the kernels' `sotto_kv_row`). Rows below `len` are never written again, so every
/// row a table names stays as its sequence wrote it.
struct DevKv {
    /// Per layer, Shape: [capacity, n_ctx, d]; slot b's rows `..len` are in use.
    k: Vec<Buf<f32>>,
    v: Vec<Buf<f32>>,
    /// Empty while every sequence reads its own slot (no reorder since the reset), else
    /// Shape: [batch, n_ctx]: sequence b's key at position t is in slot `slots[b·n_ctx + t]`
    /// (b itself from `len` on).
    slots: Vec<u32>,
    n_ctx: usize,
    d: usize,
    capacity: usize,
    batch: usize,
    len: usize,
}

impl DevKv {
    fn stride(&self) -> usize {
        self.n_ctx * self.d
    }
}

/// One stream of work on the GPU: its own CUDA stream and cuBLAS handle, the encoder
/// output of the current window, every decoder layer's cross-attention K/V computed from it
/// once, and the self-attention cache of a batch of text sequences (beams or samples).
/// Everything it allocated is freed on its stream when it is dropped.
pub struct CudaSession {
    enc: EncBuffers,
    /// f16 inputs of the matrix products (F16 precision).
    half: Buf<u16>,
    /// f16 copy of one quantized weight for a cuBLAS product (quantized models only).
    wq: Buf<u16>,
    /// Every head's attention scores of the encoder's self-attention (the largest
    /// attention through cuBLAS; empty on the kernel paths: `SOTTO_CUDA_ATTENTION`).
    /// Shape: [n_audio_head, n_audio_ctx, n_audio_ctx]
    scores: Buf<f32>,
    /// `SOTTO_CUDA_ATTENTION`, read when the session opened.
    attention: ops::AttentionPath,
    /// Whether launches are fused, the encoder's and the decoder's (`SOTTO_CUDA_FUSE=0`
    /// turns it off; [`CudaSession::fuse_launches`]).
    fuse: bool,
    /// Whether a step's cross-attention is split over blocks by keys (`SOTTO_CUDA_SPLIT=0`
    /// turns it off).
    split: bool,
    /// Whether products with quantized weights quantize their inputs to q8 as the CPU does
    /// (`SOTTO_CUDA_Q8=0` turns it off; [`ops::Dev::q8`]).
    q8: bool,
    /// Whether greedy and beam steps reduce their rows on the GPU
    /// (`SOTTO_CUDA_SHORTLIST=0` turns it off; [`CudaSession::reduces_rows`]).
    shortlists: bool,
    /// Whether kernels launch as programmatic dependent launches ([`ops::Dev::pdl`]), and
    /// why not where the GPU should take them but the probe launch failed.
    pdl: bool,
    pdl_error: Option<String>,
    /// Shape: [n_audio_ctx, n_audio_state]; rows `..audio_ctx` in use.
    enc_out: Buf<f32>,
    encoded: bool,
    /// Encoder positions a window runs over (whisper.cpp's `audio_ctx`): the model's
    /// n_audio_ctx unless [`CudaSession::set_audio_ctx`] shortened it. The buffers keep
    /// the whole window's size.
    audio_ctx: usize,
    /// Per decoder layer, Shape: [windows held, audio_ctx, n_text_state]: window 0 is
    /// where the encoder writes; [`CudaSession::encode_windows`] copies the others out.
    cross_k: Vec<Buf<f32>>,
    cross_v: Vec<Buf<f32>>,
    /// Windows the last encode call encoded, and the window each sequence of the batch
    /// attends to (its length is the batch).
    windows: usize,
    seq_window: Vec<usize>,
    kv: DevKv,
    dec: DecBuffers,
    lists: DevShortlists,
    staging: Staging,
    /// Captured one-token steps by batch size and output (see [`CudaSession::decode_batch`]),
    /// and what they hold.
    graphs: HashMap<StepKey, CapturedGraph>,
    step_graphs: StepGraphs,
    /// The encoder as a captured graph, the encodes so far, whether the last one replayed
    /// the graph, and why capturing failed, if it did ([`CudaSession::encoder_graphed`]).
    enc_graph: Option<CapturedGraph>,
    encodes: usize,
    graphed_encode: bool,
    enc_graph_off: Option<String>,
    /// Whether encodes time their op groups ([`CudaSession::keep_encoder_laps`]), and the
    /// last one's times, on the stream's clock.
    keep_laps: bool,
    encoder_laps: Vec<(&'static str, Duration)>,
    /// Whether decoder steps time their op groups (and so run without a graph), and the
    /// last step's groups.
    keep_step_laps: bool,
    step_laps: Vec<(&'static str, Duration)>,
    blas: Option<CudaBlas>,
    stream: Stream,
    model: Arc<CudaWhisper>,
}

impl std::fmt::Debug for CudaSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaSession")
            .field("device", &self.model.device().to_string())
            .field("encoded", &self.encoded)
            .field("batch", &self.kv.batch)
            .field("text_len", &self.kv.len)
            .finish()
    }
}

fn input_err(op: &'static str, msg: impl Into<String>) -> CudaError {
    CudaError::Input {
        op,
        msg: msg.into(),
    }
}

impl CudaSession {
    /// A session on the model's GPU: a new stream and cuBLAS handle, and every encoder
    /// buffer, the cross K/V and a one-sequence cache allocated up front.
    pub fn new(model: Arc<CudaWhisper>) -> Result<Self> {
        guard("opening a CUDA session", || {
            model.bind()?;
            let (stream, blas) = model.new_stream()?;
            let h = *model.hparams();
            let (ctx, da, dt) = (h.n_audio_ctx, h.n_audio_state, h.n_text_state);
            let n_frames = model.n_frames();
            let z = |n: usize| Buf::<f32>::zeros(&stream, n);
            let layers = |n: usize| {
                (0..h.n_text_layer)
                    .map(|_| z(n))
                    .collect::<Result<Vec<_>>>()
            };
            let half_len = match model.precision() {
                Precision::F16 => plan::encoder_half_scratch(h.n_mels, n_frames, ctx, da),
                Precision::F32 => 0,
            };
            let enc = EncBuffers {
                mel: z(h.n_mels * n_frames)?,
                cols: z(plan::encoder_cols(h.n_mels, n_frames, ctx, da))?,
                conv1: z(n_frames * da)?,
                x: z(ctx * da)?,
                h: z(ctx * da)?,
                q: z(ctx * da)?,
                k: z(ctx * da)?,
                v: z(ctx * da)?,
                att: z(ctx * da)?,
                mlp: z(ctx * 4 * da)?,
            };
            let dec = DecBuffers {
                input: Buf::zeros(&stream, 1)?,
                x: z(0)?,
                h: z(0)?,
                q: z(0)?,
                k: z(0)?,
                v: z(0)?,
                att: z(0)?,
                mlp: z(0)?,
                sel: z(0)?,
                normed: z(0)?,
                logits: z(0)?,
                part: z(0)?,
                done: Buf::zeros(&stream, kernels::MMV_ROWS * h.n_text_head)?,
            };
            let kv = DevKv {
                k: layers(h.n_text_ctx * dt)?,
                v: layers(h.n_text_ctx * dt)?,
                slots: Vec::new(),
                n_ctx: h.n_text_ctx,
                d: dt,
                capacity: 1,
                batch: 1,
                len: 0,
            };
            let attention = match ops::AttentionPath::from_env()? {
                Some(path) => path,
                None => default_attention(&model, &stream),
            };
            check_attention(&model, &stream, attention)?;
            let scores = match attention {
                ops::AttentionPath::Blas => plan::attention_scores_len(ctx, ctx, h.n_audio_head),
                _ => 0,
            };
            let mut session = CudaSession {
                enc,
                half: Buf::zeros(&stream, half_len)?,
                wq: Buf::zeros(&stream, model.max_quantized)?,
                scores: z(scores)?,
                attention,
                fuse: switch_from_env("SOTTO_CUDA_FUSE")?,
                split: switch_from_env("SOTTO_CUDA_SPLIT")?,
                q8: switch_from_env("SOTTO_CUDA_Q8")?,
                shortlists: switch_from_env("SOTTO_CUDA_SHORTLIST")?,
                pdl: false,
                pdl_error: None,
                enc_out: z(ctx * da)?,
                encoded: false,
                audio_ctx: ctx,
                keep_laps: false,
                encoder_laps: Vec::new(),
                keep_step_laps: false,
                step_laps: Vec::new(),
                cross_k: layers(ctx * dt)?,
                cross_v: layers(ctx * dt)?,
                windows: 1,
                seq_window: vec![0],
                kv,
                dec,
                lists: DevShortlists {
                    uploaded: None,
                    bitmap_host: Vec::new(),
                    pinned: Buf::zeros(&stream, 0)?,
                    bitmap: Buf::zeros(&stream, 0)?,
                    scratch: z(0)?,
                    out: z(0)?,
                },
                staging: Staging {
                    input: Pinned::zeros(&stream, 0)?,
                    out: Pinned::zeros(&stream, 0)?,
                },
                graphs: HashMap::new(),
                step_graphs: match switch_from_env("SOTTO_CUDA_GRAPH_COPIES")? {
                    true => StepGraphs::Whole,
                    false => StepGraphs::Kernels(None),
                },
                enc_graph: None,
                encodes: 0,
                graphed_encode: false,
                enc_graph_off: None,
                blas,
                stream,
                model,
            };
            if switch_from_env("SOTTO_CUDA_PDL")? {
                match session.pdl_probe() {
                    Ok(on) => session.pdl = on,
                    Err(e) => session.pdl_error = Some(e.to_string()),
                }
            }
            Ok(session)
        })
    }

    pub fn model(&self) -> &Arc<CudaWhisper> {
        &self.model
    }

    fn dev(&self) -> Dev<'_> {
        Dev {
            stream: &self.stream,
            blas: self.blas.as_ref(),
            k: &self.model.kernels,
            precision: self.model.precision(),
            half: self.half.ptr(),
            half_len: self.half.len(),
            wq: self.wq.ptr(),
            wq_len: self.wq.len(),
            attention: self.attention,
            scores: self.scores.ptr(),
            scores_len: self.scores.len(),
            record: None,
            fuse: self.fuse,
            split: self.split,
            part: self.dec.part.ptr(),
            part_len: self.dec.part.len(),
            done: self.dec.done.ptr(),
            done_len: self.dec.done.len(),
            q8: self.q8,
            pdl: self.pdl,
        }
    }

    fn bind(&self) -> Result<()> {
        self.model.bind()
    }

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
    /// window. Drops the audio encoded so far when the length changes; graphs captured
    /// for the old length are captured again on their next use.
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

    /// Whether the last [`CudaSession::encode`] replayed a captured CUDA graph (every encode
    /// after the first, unless `SOTTO_CUDA_GRAPHS=0`, op-group timing, or a failed
    /// capture, whose reason [`CudaSession::encoder_graph_error`] gives).
    pub fn encoder_graphed(&self) -> bool {
        self.graphed_encode
    }

    /// Why the encoder runs without a graph, when capturing one failed.
    pub fn encoder_graph_error(&self) -> Option<&str> {
        self.enc_graph_off.as_deref()
    }

    /// Where the last [`CudaSession::encode`] spent its time, by op group in order (the
    /// GPU's time between CUDA events, or the host's in emulation), when
    /// [`CudaSession::keep_encoder_laps`] asked for it; empty otherwise. The groups are the
    /// CPU session's, with its self-attention split into the q/k/v products (layer norm
    /// included) and the attention itself.
    pub fn encoder_laps(&self) -> &[(&'static str, Duration)] {
        &self.encoder_laps
    }

    /// Whether later encodes time their op groups (`sotto bench --encoder-ops`): off by
    /// default, since each group costs an event recorded on the stream.
    pub fn keep_encoder_laps(&mut self, on: bool) {
        self.keep_laps = on;
    }

    /// Where the last decoder pass spent its time, by op group in order (as
    /// [`CudaSession::encoder_laps`]), when [`CudaSession::keep_step_laps`] asked for it;
    /// empty otherwise. `logits` is the final norm and vocabulary product, `download` the
    /// copy of the logits to the host.
    pub fn step_laps(&self) -> &[(&'static str, Duration)] {
        &self.step_laps
    }

    /// Whether later decoder passes time their op groups (`sotto bench`): off by default,
    /// since each group costs an event and a timed step runs without its graph.
    pub fn keep_step_laps(&mut self, on: bool) {
        self.keep_step_laps = on;
    }

    /// How later encodes run the attention over shared keys (`SOTTO_CUDA_ATTENTION` set
    /// it when the session opened). Errors, the session unchanged, where the GPU lacks
    /// what the path needs.
    pub fn set_attention(&mut self, path: ops::AttentionPath) -> Result<()> {
        check_attention(&self.model, &self.stream, path)?;
        if path == ops::AttentionPath::Blas {
            let h = self.model.hparams();
            let n = plan::attention_scores_len(h.n_audio_ctx, h.n_audio_ctx, h.n_audio_head);
            guard("set_attention", || {
                self.bind()?;
                self.scores.ensure(&self.stream, n)
            })?;
        }
        self.attention = path;
        Ok(())
    }

    /// Whether greedy and beam steps should hand their rows as shortlist records reduced
    /// on the GPU ([`CudaSession::decode_shortlists`]) rather than whole, for the host to
    /// reduce: yes unless `SOTTO_CUDA_SHORTLIST=0` (to time what the reduction gains).
    pub fn reduces_rows(&self) -> bool {
        self.shortlists
    }

    /// Whether kernels launch as programmatic dependent launches: on GPUs of compute
    /// capability 9.0 and later that take them, unless `SOTTO_CUDA_PDL=0`.
    pub fn pdl(&self) -> bool {
        self.pdl
    }

    /// Whether this GPU takes programmatic dependent launches: compute capability 9.0 or
    /// later (else false), and a launch with the attribute goes through (one kernel with
    /// nothing to do; else its error). Never on the host emulation, whose launches run in
    /// order anyway.
    fn pdl_probe(&self) -> Result<bool> {
        let cc = self.model.device().compute_capability;
        if cc < PDL_MIN_CC || !matches!(self.stream, Stream::Cuda(_)) {
            return Ok(false);
        }
        let dev = Dev {
            pdl: true,
            ..self.dev()
        };
        dev.probe_launch()?;
        self.stream.synchronize()?;
        Ok(true)
    }

    /// Why kernels launch plainly on a GPU that should take programmatic dependent
    /// launches: the probe launch's error.
    pub fn pdl_error(&self) -> Option<&str> {
        self.pdl_error.as_deref()
    }

    /// Whether launches are fused (on by default; `SOTTO_CUDA_FUSE=0` turns it off): later
    /// encodes fold the residual stream's adds into the next layer norm and write the f16
    /// inputs of the products from the launches that make them; decoder steps' products
    /// compute their layer norms themselves, and split attention merges in its own launch.
    /// The same values bit for bit, in fewer launches.
    pub fn fuse_launches(&mut self, on: bool) {
        self.fuse = on;
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

    /// Starts a new text sequence (keeps audio and cross K/V): the batch is one empty sequence.
    pub fn reset_text(&mut self) {
        self.kv.batch = 1;
        self.kv.len = 0;
        self.kv.slots.clear();
        self.seq_window.truncate(1);
    }

    /// Tokens decoded so far in each sequence of the batch.
    pub fn text_len(&self) -> usize {
        self.kv.len
    }

    /// Why decoder steps' graphs leave out their copies, or why steps launch directly, when
    /// capturing a step graph failed.
    pub fn step_graph_error(&self) -> Option<&str> {
        match &self.step_graphs {
            StepGraphs::Whole | StepGraphs::Kernels(None) => None,
            StepGraphs::Kernels(Some(e)) | StepGraphs::Off(e) => Some(e),
        }
    }

    /// Whether step graphs hold the copies of the step's input and output (the default;
    /// `SOTTO_CUDA_GRAPH_COPIES=0`, or `false` here, queues them around the graph's launch).
    pub fn step_graph_copies(&self) -> bool {
        self.step_graphs == StepGraphs::Whole
    }

    /// Sets [`CudaSession::step_graph_copies`]; the step graphs are captured again.
    pub fn set_step_graph_copies(&mut self, on: bool) {
        self.graphs.clear();
        self.step_graphs = match on {
            true => StepGraphs::Whole,
            false => StepGraphs::Kernels(None),
        };
    }

    /// Decoder-step graphs this session holds (one per batch size and output in use; see
    /// [`CudaSession::decode_batch`]).
    pub fn step_graphs(&self) -> usize {
        self.graphs.len()
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.kv.batch
    }

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
    fn reserve(&mut self, batch: usize) -> Result<()> {
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

    fn launch_graph(&self, graph: &Graph) -> Result<()> {
        match graph {
            Graph::Cuda(g) => g.0.launch().map_err(driver("cuGraphLaunch")),
            Graph::Host(ops) => match &self.stream {
                Stream::Host(d) => ops::replay(d.as_ref(), ops),
                Stream::Cuda(_) => unreachable!("host graphs are captured on host streams"),
            },
        }
    }

    /// Captures what `body` queues on the stream as a graph (on a host stream, records it).
    fn capture_with(&self, body: impl FnOnce(&Dev<'_>) -> Result<()>) -> Result<Graph> {
        match &self.stream {
            Stream::Cuda(s) => {
                use cudarc::driver::sys;
                let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
                s.begin_capture(mode)
                    .map_err(driver("cuStreamBeginCapture"))?;
                let body = body(&self.dev());
                // Capture ends whatever the body did, or the stream stays unusable.
                let flags = sys::CUgraphInstantiate_flags(0);
                let graph = s.end_capture(flags).map_err(driver("cuStreamEndCapture"));
                body?;
                let graph = graph?.ok_or_else(|| CudaError::Library {
                    op: "cuStreamEndCapture",
                    msg: "the capture recorded no graph".into(),
                })?;
                Ok(Graph::Cuda(SendGraph(graph)))
            }
            Stream::Host(_) => {
                let rec = RefCell::new(Vec::new());
                let dev = Dev {
                    record: Some(&rec),
                    ..self.dev()
                };
                body(&dev)?;
                Ok(Graph::Host(rec.into_inner()))
            }
        }
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

/// Whether decoder steps and the encoder may run as CUDA graphs (`SOTTO_CUDA_GRAPHS=0`
/// says no).
fn graphs_enabled() -> bool {
    std::env::var_os("SOTTO_CUDA_GRAPHS").is_none_or(|v| v != "0")
}

/// Marks on a stream between named groups of ops, when timing is on; a name may recur (one
/// per encoder block), its times then add up.
struct Laps<'a> {
    stream: &'a Stream,
    start: Option<Mark>,
    ends: Vec<(&'static str, Mark)>,
}

impl<'a> Laps<'a> {
    fn start(stream: &'a Stream, on: bool) -> Result<Self> {
        Ok(Laps {
            stream,
            start: on.then(|| stream.mark()).transpose()?,
            ends: Vec::new(),
        })
    }

    /// Ends a group `name` with the work queued so far.
    fn lap(&mut self, name: &'static str) -> Result<()> {
        if self.start.is_some() {
            self.ends.push((name, self.stream.mark()?));
        }
        Ok(())
    }

    /// Each name's total, in the order of first appearance (after the stream synchronized);
    /// empty when timing is off.
    fn finish(self) -> Result<Vec<(&'static str, Duration)>> {
        let mut out: Vec<(&'static str, Duration)> = Vec::new();
        let Some(mut from) = self.start.as_ref() else {
            return Ok(out);
        };
        for (name, end) in &self.ends {
            let d = from.until(end)?;
            match out.iter_mut().find(|(n, _)| n == name) {
                Some((_, t)) => *t += d,
                None => out.push((name, d)),
            }
            from = end;
        }
        Ok(out)
    }
}

/// A captured graph (a decoder step, or the encoder) and the buffer addresses (and
/// switches) it was captured with.
struct CapturedGraph {
    layout: Vec<u64>,
    graph: Graph,
}

enum Graph {
    Cuda(SendGraph),
    Host(Vec<HostOp>),
}

/// A CUDA graph owned by one session.
struct SendGraph(cudarc::driver::CudaGraph);

// SAFETY: cudarc's CudaGraph holds raw driver handles, which CUDA allows any thread to use
// but not two at once; the graph lives in one session, and every use needs `&mut` of it.
unsafe impl Send for SendGraph {}

fn cross_of(blk: &DevBlock) -> Result<(&crate::ops::DevNorm, &crate::whisper::DevAttention)> {
    blk.cross
        .as_ref()
        .map(|(n, a)| (n, a))
        .ok_or_else(|| input_err("decoder", "a decoder block has no cross-attention"))
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

// Sessions move between threads.
const _: () = {
    const fn movable<T: Send>() {}
    movable::<CudaSession>();
};

/// An optimization's switch (`SOTTO_CUDA_FUSE`, `SOTTO_CUDA_SPLIT`, `SOTTO_CUDA_Q8`): unset
/// or 1 on, 0 off (to compare the two on a GPU); anything else is an error, not a silent
/// default.
fn switch_from_env(name: &'static str) -> Result<bool> {
    parse_switch(name, std::env::var(name).ok().as_deref())
}

fn parse_switch(name: &'static str, value: Option<&str>) -> Result<bool> {
    match value {
        None | Some("") | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(other) => Err(input_err(name, format!("{other:?}: expected 0 or 1"))),
    }
}

/// Programmatic dependent launch (`griddepcontrol`) needs compute capability 9.0.
pub const PDL_MIN_CC: (i32, i32) = (9, 0);

/// The tensor-core attention needs compute capability 8.0 (its `mma.sync` shape); an
/// older GPU gets a clear error instead of a kernel compiled to nothing.
/// The tensor-core kernel where the GPU has it and the model runs at f16 (f32 precision is
/// for checking against the CPU closely); cuBLAS elsewhere, and in the host emulation,
/// whose tests choose their path themselves.
fn default_attention(model: &CudaWhisper, stream: &Stream) -> ops::AttentionPath {
    let cc = model.device().compute_capability;
    match stream {
        Stream::Cuda(_) if cc >= kernels::MMA_MIN_CC && model.precision() == Precision::F16 => {
            ops::AttentionPath::Mma
        }
        _ => ops::AttentionPath::Blas,
    }
}

fn check_attention(model: &CudaWhisper, stream: &Stream, path: ops::AttentionPath) -> Result<()> {
    let cc = model.device().compute_capability;
    if path == ops::AttentionPath::Mma
        && matches!(stream, Stream::Cuda(_))
        && cc < kernels::MMA_MIN_CC
    {
        let (major, minor) = kernels::MMA_MIN_CC;
        return Err(input_err(
            "SOTTO_CUDA_ATTENTION",
            format!(
                "mma needs compute capability {major}.{minor} or newer; {} has {}.{}",
                model.device().name,
                cc.0,
                cc.1
            ),
        ));
    }
    Ok(())
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

    #[test]
    fn switches_are_set_by_name_and_never_guessed() {
        let parse = |v| super::parse_switch("SOTTO_CUDA_FUSE", v);
        assert!(parse(None).unwrap() && parse(Some("")).unwrap());
        assert!(parse(Some("1")).unwrap() && !parse(Some("0")).unwrap());
        let e = parse(Some("off")).unwrap_err().to_string();
        assert!(e.contains("SOTTO_CUDA_FUSE") && e.contains("off"), "{e}");
    }
}
