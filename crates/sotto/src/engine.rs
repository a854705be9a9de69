//! The backend boundary: one loaded model's weights on the device that runs them, and the
//! per-stream forward pass every device implements ([`Forward`]). Decoding above it never
//! knows which device it drives.

use std::sync::Arc;

use sotto_decode::{BoxError, Shortlists};

/// A session's forward pass on one device: the encoder once per 30 s window, then the
/// decoder over a batched self-attention cache.
pub trait Forward: Send {
    /// Runs the encoder and every layer's cross-attention K/V on one window and starts a
    /// new text sequence. `mel` Shape: [n_mels, 3000].
    fn encode(&mut self, mel: &[f32]) -> Result<(), BoxError>;
    /// Windows [`Forward::encode_windows`] takes at once (1: only [`Forward::encode`]).
    fn max_windows(&self) -> usize {
        1
    }
    /// Encodes several windows and starts one empty sequence per window, which attends to
    /// it (see `sotto_model::Session::encode_windows`); devices without it take one.
    fn encode_windows(&mut self, mels: &[&[f32]]) -> Result<(), BoxError> {
        match mels {
            [one] => self.encode(one),
            _ => Err(format!(
                "this device encodes one window at a time, not {}",
                mels.len()
            )
            .into()),
        }
    }
    /// Starts a new text sequence against window `w` of the last encode call.
    fn select_window(&mut self, w: usize) -> Result<(), BoxError> {
        if w == 0 {
            self.reset_text();
            return Ok(());
        }
        Err(format!("this device holds one window, not window {w}").into())
    }
    /// Later encodes run over the first `ctx` encoder positions of each window only
    /// (whisper.cpp's `audio_ctx`; see `sotto_model::Session::set_audio_ctx`); None: the
    /// whole window.
    fn set_audio_ctx(&mut self, ctx: Option<usize>) -> Result<(), BoxError>;
    /// Starts a new text sequence (a batch of one, empty); keeps the audio.
    fn reset_text(&mut self);
    /// Appends `tokens` to the single sequence and writes the logits of `rows` (indices
    /// into `tokens`). `logits` Shape: [rows.len(), n_vocab].
    fn decode(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), BoxError>;
    /// Appends `tokens.len() / batch` tokens to each of `batch` sequences and writes each
    /// sequence's last logits. `logits` Shape: [batch, n_vocab].
    fn decode_batch(
        &mut self,
        tokens: &[u32],
        batch: usize,
        logits: &mut [f32],
    ) -> Result<(), BoxError>;
    /// [`Forward::decode`] into shortlist records (what greedy and beam search read, see
    /// [`sotto_decode::Shortlists`]). The default reduces whole rows on the host; the GPU
    /// reduces them where they are and downloads the records alone.
    fn decode_shortlists(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        out: &mut Shortlists,
    ) -> Result<(), BoxError> {
        out.reduce_from(rows.len(), |full| self.decode(tokens, rows, full))
    }
    /// [`Forward::decode_batch`] into shortlist records, as [`Forward::decode_shortlists`].
    fn decode_batch_shortlists(
        &mut self,
        tokens: &[u32],
        batch: usize,
        out: &mut Shortlists,
    ) -> Result<(), BoxError> {
        out.reduce_from(batch, |full| self.decode_batch(tokens, batch, full))
    }
    /// Makes sequence `i` a copy of sequence `src[i]`.
    fn reorder(&mut self, src: &[usize]) -> Result<(), BoxError>;
    /// Which logits later decoder calls must give in full (see
    /// [`sotto_decode::Inference::set_logit_need`]); devices that always compute them all
    /// ignore it.
    fn set_logit_need(&mut self, _need: &sotto_decode::LogitNeed) {}
    /// Cross-attention scores of the alignment `heads` for `tokens` decoded from scratch;
    /// see `sotto_model::Session::align`. Devices without it say so.
    fn align(
        &mut self,
        _tokens: &[u32],
        _heads: &[(usize, usize)],
        _rows: &[usize],
        _logits: &mut [f32],
    ) -> Result<Vec<f32>, BoxError> {
        Err("word timing (cross-attention alignment) does not run on this device yet".into())
    }
    /// Whether [`Forward::align`] is available (word timing needs it).
    fn can_align(&self) -> bool {
        false
    }
    /// Where the last [`Forward::encode`] spent its time, by named op group (wall time),
    /// on devices that keep such laps.
    fn encoder_laps(&self) -> Option<Vec<(&'static str, std::time::Duration)>> {
        None
    }
    /// Asks for [`Forward::encoder_laps`] on devices where keeping them costs something
    /// (the GPU's events); the CPU keeps them always.
    fn keep_encoder_laps(&mut self, _on: bool) {}
    /// Where the last decoder pass spent its time, by named op group, on devices that can
    /// time them ([`Forward::keep_step_laps`]).
    fn step_laps(&self) -> Option<Vec<(&'static str, std::time::Duration)>> {
        None
    }
    /// Asks later decoder passes to time their op groups, where the device can (the GPU's
    /// events, at the price of its step graph).
    fn keep_step_laps(&mut self, _on: bool) {}
    /// How the last [`Forward::encode`] ran, where the device has more than one way (the
    /// GPU's captured graph or direct launches).
    fn encoder_note(&self) -> Option<String> {
        None
    }
    /// How decoder steps run, where the device has more than one way (the GPU's captured
    /// step graphs or direct launches).
    fn step_note(&self) -> Option<String> {
        None
    }
}

/// Implements [`Forward`]'s common part, alignment included, by calling the session's
/// inherent methods of the same names.
macro_rules! delegate_forward {
    ($session:ty) => {
        fn encode(&mut self, mel: &[f32]) -> Result<(), BoxError> {
            Ok(<$session>::encode(self, mel)?)
        }

        fn reset_text(&mut self) {
            <$session>::reset_text(self)
        }

        fn decode(
            &mut self,
            tokens: &[u32],
            rows: &[usize],
            logits: &mut [f32],
        ) -> Result<(), BoxError> {
            Ok(<$session>::decode(self, tokens, rows, logits)?)
        }

        fn decode_batch(
            &mut self,
            tokens: &[u32],
            batch: usize,
            logits: &mut [f32],
        ) -> Result<(), BoxError> {
            Ok(<$session>::decode_batch(self, tokens, batch, logits)?)
        }

        fn reorder(&mut self, src: &[usize]) -> Result<(), BoxError> {
            Ok(<$session>::reorder(self, src)?)
        }

        fn set_audio_ctx(&mut self, ctx: Option<usize>) -> Result<(), BoxError> {
            Ok(<$session>::set_audio_ctx(self, ctx)?)
        }

        fn align(
            &mut self,
            tokens: &[u32],
            heads: &[(usize, usize)],
            rows: &[usize],
            logits: &mut [f32],
        ) -> Result<Vec<f32>, BoxError> {
            Ok(<$session>::align(self, tokens, heads, rows, logits)?)
        }

        fn can_align(&self) -> bool {
            true
        }
    };
}

impl Forward for sotto_model::Session {
    delegate_forward!(sotto_model::Session);

    fn max_windows(&self) -> usize {
        // Memory, not speed, sets this: each window keeps its cross-attention K/V.
        64
    }

    fn encode_windows(&mut self, mels: &[&[f32]]) -> Result<(), BoxError> {
        Ok(sotto_model::Session::encode_windows(self, mels)?)
    }

    fn select_window(&mut self, w: usize) -> Result<(), BoxError> {
        Ok(sotto_model::Session::select_window(self, w)?)
    }

    fn encoder_laps(&self) -> Option<Vec<(&'static str, std::time::Duration)>> {
        Some(sotto_model::Session::encoder_laps(self).named().to_vec())
    }

    fn set_logit_need(&mut self, need: &sotto_decode::LogitNeed) {
        let top = match need {
            sotto_decode::LogitNeed::All => None,
            // The watched tokens rank among the best `top + watch.len()` of those not in
            // `never` whenever one of them could be chosen, so that many exact suffice.
            sotto_decode::LogitNeed::Top {
                top,
                text_end,
                never,
                watch,
            } => Some(sotto_model::VocabTop::new(
                top + watch.len(),
                *text_end as usize,
                never,
            )),
        };
        sotto_model::Session::set_logit_need(self, top);
    }
}

#[cfg(feature = "cuda")]
impl Forward for sotto_cuda::CudaSession {
    delegate_forward!(sotto_cuda::CudaSession);

    fn decode_shortlists(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        out: &mut Shortlists,
    ) -> Result<(), BoxError> {
        let reduces = self.reduces_rows();
        let (spec, records) = out.spec_and_records_mut(rows.len());
        match gpu_shortlist(reduces, spec) {
            Some(list) => Ok(sotto_cuda::CudaSession::decode_shortlists(
                self, tokens, rows, list, records,
            )?),
            None => out.reduce_from(rows.len(), |full| Forward::decode(self, tokens, rows, full)),
        }
    }

    fn decode_batch_shortlists(
        &mut self,
        tokens: &[u32],
        batch: usize,
        out: &mut Shortlists,
    ) -> Result<(), BoxError> {
        let reduces = self.reduces_rows();
        let (spec, records) = out.spec_and_records_mut(batch);
        match gpu_shortlist(reduces, spec) {
            Some(list) => Ok(sotto_cuda::CudaSession::decode_batch_shortlists(
                self, tokens, batch, list, records,
            )?),
            None => out.reduce_from(batch, |full| {
                Forward::decode_batch(self, tokens, batch, full)
            }),
        }
    }

    fn max_windows(&self) -> usize {
        // Memory sets this: each window keeps its cross-attention K/V on the GPU (f32;
        // ~18 MiB a window on tiny, ~490 MiB on large-v3).
        16
    }

    fn encode_windows(&mut self, mels: &[&[f32]]) -> Result<(), BoxError> {
        Ok(sotto_cuda::CudaSession::encode_windows(self, mels)?)
    }

    fn select_window(&mut self, w: usize) -> Result<(), BoxError> {
        Ok(sotto_cuda::CudaSession::select_window(self, w)?)
    }

    fn encoder_laps(&self) -> Option<Vec<(&'static str, std::time::Duration)>> {
        let laps = sotto_cuda::CudaSession::encoder_laps(self);
        (!laps.is_empty()).then(|| laps.to_vec())
    }

    fn keep_encoder_laps(&mut self, on: bool) {
        sotto_cuda::CudaSession::keep_encoder_laps(self, on)
    }

    fn step_laps(&self) -> Option<Vec<(&'static str, std::time::Duration)>> {
        let laps = sotto_cuda::CudaSession::step_laps(self);
        (!laps.is_empty()).then(|| laps.to_vec())
    }

    fn keep_step_laps(&mut self, on: bool) {
        sotto_cuda::CudaSession::keep_step_laps(self, on)
    }

    fn encoder_note(&self) -> Option<String> {
        let how = match (self.encoder_graphed(), self.encoder_graph_error()) {
            (true, _) => "replays a CUDA graph".into(),
            (false, Some(e)) => format!("direct launches (capturing a CUDA graph failed: {e})"),
            (false, None) => "direct launches".into(),
        };
        Some(match (self.pdl(), self.pdl_error()) {
            (true, _) => format!("{how}; kernels as programmatic dependent launches"),
            (false, Some(e)) => format!("{how}; programmatic dependent launch failed: {e}"),
            (false, None) => how,
        })
    }

    fn step_note(&self) -> Option<String> {
        let copies = match self.step_graph_copies() {
            true => "the copies in and out inside",
            false => "the copies in and out around them",
        };
        Some(match (self.step_graphs(), self.step_graph_error()) {
            (0, Some(e)) => format!("direct launches (capturing a step graph failed: {e})"),
            (0, None) => "direct launches".into(),
            (n, None) => format!("{n} captured step graphs, {copies}"),
            (n, Some(e)) => format!("{n} captured step graphs, {copies} ({e})"),
        })
    }
}

/// The GPU's reduction of a shortlist spec, where the session `reduces` its rows. None for
/// specs that keep more best ids than the GPU's merge does (beams past 32) and every spec
/// with `SOTTO_CUDA_SHORTLIST=0`: those rows are reduced on the host from whole rows, as
/// on the CPU.
#[cfg(feature = "cuda")]
fn gpu_shortlist(
    reduces: bool,
    spec: &sotto_decode::ShortlistSpec,
) -> Option<sotto_cuda::ShortlistOf<'_>> {
    (reduces && spec.top() <= sotto_cuda::kernels::SHORTLIST_MAX_TOP).then(|| {
        sotto_cuda::ShortlistOf {
            text_end: spec.text_end(),
            top: spec.top(),
            pinned: spec.pinned(),
        }
    })
}

/// A model's weights, uploaded to the device that runs them.
#[derive(Clone)]
pub(crate) enum Weights {
    Cpu(Arc<sotto_model::Whisper>),
    #[cfg(feature = "cuda")]
    Cuda(Arc<sotto_cuda::CudaWhisper>),
}

impl Weights {
    /// The device these weights live on.
    pub fn device(&self) -> crate::Device {
        match self {
            Weights::Cpu(_) => crate::Device::Cpu,
            #[cfg(feature = "cuda")]
            Weights::Cuda(w) => crate::Device::Cuda(w.device().ordinal),
        }
    }
}
