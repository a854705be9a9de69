//! The backend boundary: one loaded model's weights on the device that runs them, and the
//! per-stream forward pass every device implements ([`Forward`]). Decoding above it never
//! knows which device it drives.

use std::sync::Arc;

use sotto_decode::BoxError;

/// A session's forward pass on one device: the encoder once per 30 s window, then the
/// decoder over a batched self-attention cache.
pub trait Forward: Send {
    /// Runs the encoder and every layer's cross-attention K/V on one window and starts a
    /// new text sequence. `mel` Shape: [n_mels, 3000].
    fn encode(&mut self, mel: &[f32]) -> Result<(), BoxError>;
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
    /// Makes sequence `i` a copy of sequence `src[i]`.
    fn reorder(&mut self, src: &[usize]) -> Result<(), BoxError>;
    /// Cross-attention scores of the alignment `heads` for `tokens` decoded from scratch;
    /// see `sotto_model::Session::align`.
    fn align(
        &mut self,
        tokens: &[u32],
        heads: &[(usize, usize)],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<Vec<f32>, BoxError>;
    /// Whether [`Forward::align`] is available (word timing needs it).
    fn can_align(&self) -> bool;
}

impl Forward for sotto_model::Session {
    fn encode(&mut self, mel: &[f32]) -> Result<(), BoxError> {
        Ok(sotto_model::Session::encode(self, mel)?)
    }

    fn reset_text(&mut self) {
        sotto_model::Session::reset_text(self)
    }

    fn decode(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), BoxError> {
        Ok(sotto_model::Session::decode(self, tokens, rows, logits)?)
    }

    fn decode_batch(
        &mut self,
        tokens: &[u32],
        batch: usize,
        logits: &mut [f32],
    ) -> Result<(), BoxError> {
        Ok(sotto_model::Session::decode_batch(
            self, tokens, batch, logits,
        )?)
    }

    fn reorder(&mut self, src: &[usize]) -> Result<(), BoxError> {
        Ok(sotto_model::Session::reorder(self, src)?)
    }

    fn align(
        &mut self,
        tokens: &[u32],
        heads: &[(usize, usize)],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<Vec<f32>, BoxError> {
        Ok(sotto_model::Session::align(
            self, tokens, heads, rows, logits,
        )?)
    }

    fn can_align(&self) -> bool {
        true
    }
}

#[cfg(feature = "cuda")]
impl Forward for sotto_cuda::CudaSession {
    fn encode(&mut self, mel: &[f32]) -> Result<(), BoxError> {
        Ok(sotto_cuda::CudaSession::encode(self, mel)?)
    }

    fn reset_text(&mut self) {
        sotto_cuda::CudaSession::reset_text(self)
    }

    fn decode(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), BoxError> {
        Ok(sotto_cuda::CudaSession::decode(self, tokens, rows, logits)?)
    }

    fn decode_batch(
        &mut self,
        tokens: &[u32],
        batch: usize,
        logits: &mut [f32],
    ) -> Result<(), BoxError> {
        Ok(sotto_cuda::CudaSession::decode_batch(
            self, tokens, batch, logits,
        )?)
    }

    fn reorder(&mut self, src: &[usize]) -> Result<(), BoxError> {
        Ok(sotto_cuda::CudaSession::reorder(self, src)?)
    }

    fn align(
        &mut self,
        _tokens: &[u32],
        _heads: &[(usize, usize)],
        _rows: &[usize],
        _logits: &mut [f32],
    ) -> Result<Vec<f32>, BoxError> {
        Err("word timing (cross-attention alignment) does not run on CUDA yet".into())
    }

    fn can_align(&self) -> bool {
        false
    }
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
            Weights::Cuda(_) => crate::Device::Cuda,
        }
    }
}
