//! [`CudaSession`]: one stream's state on the GPU, with `sotto_model::Session`'s methods
//! and semantics.
//!
//! Here: the session's buffers, opening it and its switches. `encoder.rs`: windows, their
//! cross-attention K/V and the encoder's graph; `step.rs`: decoder passes (prompts, steps,
//! reorders, alignment) and the step graphs; `graph.rs`: capturing and replaying a graph.

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

mod encoder;
mod graph;
mod step;

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
    fn switches_are_set_by_name_and_never_guessed() {
        let parse = |v| super::parse_switch("SOTTO_CUDA_FUSE", v);
        assert!(parse(None).unwrap() && parse(Some("")).unwrap());
        assert!(parse(Some("1")).unwrap() && !parse(Some("0")).unwrap());
        let e = parse(Some("off")).unwrap_err().to_string();
        assert!(e.contains("SOTTO_CUDA_FUSE") && e.contains("off"), "{e}");
    }
}
