//! The boundary to the model: decoding sees nothing else.

use crate::shortlist::Shortlists;

/// Any error a model implementation raises.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A Whisper model: an encoder run once per 30 s window, and a decoder that extends a batch
/// of text sequences (beams, or sampled candidates) while caching their self-attention.
///
/// The batch: after [`Inference::reset`] there is one sequence, which [`Inference::decode`]
/// extends (the prompt). [`Inference::reorder`] then makes a new batch out of the current
/// sequences (broadcast the prompt to the beams, follow the beams' origins, drop finished
/// candidates), and [`Inference::decode_batch`] extends every sequence of the batch in one
/// decoder pass. All sequences of a batch have the same length.
/// Which logits a search needs in full (see [`Inference::set_logit_need`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogitNeed {
    /// Every logit (sampling reads the whole distribution).
    All,
    /// The `top` highest logits among the text tokens (those below `text_end`, the first
    /// special token) that are in neither `never` (masked at every step) nor `watch`
    /// (masked at some), those of `watch`, and every logit from `text_end` on. Any other
    /// may be an approximation that ranks below the `top + watch.len()` best text tokens
    /// not in `never`, within a small bound of the model's value.
    Top {
        top: usize,
        text_end: u32,
        never: Vec<u32>,
        watch: Vec<u32>,
    },
}

pub trait Inference {
    /// Logits per decoded row (the vocabulary size).
    fn n_vocab(&self) -> usize;

    /// Tells the model which logits later `decode`/`decode_batch` calls must give in full,
    /// so that it may compute the others more cheaply. The default computes them all.
    fn set_logit_need(&mut self, need: &LogitNeed) {
        let _ = need;
    }

    /// Runs later encodes over the first `ctx` encoder positions of each window only
    /// (`2·ctx` mel frames; whisper.cpp's `audio_ctx`); None: the whole window. Models
    /// that always encode the whole window keep this default, which refuses a length.
    fn set_audio_ctx(&mut self, ctx: Option<usize>) -> Result<(), BoxError> {
        match ctx {
            None => Ok(()),
            Some(n) => Err(format!(
                "{n}: this model encodes whole 30 s windows; it cannot shorten them"
            )
            .into()),
        }
    }

    /// Encodes one 30 s window of log-mel. Shape: [n_mels, 3000], row-major.
    fn encode(&mut self, mel: &[f32]) -> Result<(), BoxError>;

    /// Windows [`Inference::encode_windows`] takes at once: 1 where the model decodes one
    /// window at a time.
    fn max_windows(&self) -> usize {
        1
    }

    /// Encodes several windows (each Shape: [n_mels, 3000]) and starts a batch of one empty
    /// sequence per window: sequence `i` attends to window `i`, and keeps its window
    /// through [`Inference::reorder`]. At most [`Inference::max_windows`] windows.
    fn encode_windows(&mut self, mels: &[&[f32]]) -> Result<(), BoxError> {
        match mels {
            [one] => self.encode(one),
            _ => Err(format!(
                "this model encodes one window at a time, not {}",
                mels.len()
            )
            .into()),
        }
    }

    /// Starts a new text sequence against window `w` of the last
    /// [`Inference::encode_windows`] (a batch of one, empty), for [`Inference::align`] and
    /// [`Inference::decode`] on that window.
    fn select_window(&mut self, w: usize) -> Result<(), BoxError> {
        if w == 0 {
            self.reset();
            return Ok(());
        }
        Err(format!("this model holds one window, not window {w}").into())
    }

    /// Starts a new text sequence: drops the self-attention cache, keeps the audio; the
    /// batch is one (empty) sequence again.
    fn reset(&mut self);

    /// Appends `tokens` to the single sequence of a batch of one and writes the logits of
    /// the rows `rows` (indices into `tokens`) one after another into `logits`
    /// (rows.len() * n_vocab).
    fn decode(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), BoxError>;

    /// [`Inference::decode`], handing each row as a record of `out`'s
    /// [`ShortlistSpec`](crate::ShortlistSpec) (what greedy and beam search read) instead
    /// of whole. The default reduces whole rows on the host; a model may compute the
    /// records where its logits are (the GPU's, so that only they are downloaded).
    fn decode_shortlists(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        out: &mut Shortlists,
    ) -> Result<(), BoxError> {
        out.reduce_from(rows.len(), |full| self.decode(tokens, rows, full))
    }

    /// [`Inference::decode_batch`] into records, as [`Inference::decode_shortlists`].
    fn decode_batch_shortlists(
        &mut self,
        tokens: &[u32],
        batch: usize,
        out: &mut Shortlists,
    ) -> Result<(), BoxError> {
        out.reduce_from(batch, |full| self.decode_batch(tokens, batch, full))
    }

    /// Appends `tokens.len() / batch` tokens to each of the `batch` sequences in one decoder
    /// pass and writes each sequence's next-token logits (its last row).
    ///
    /// `tokens` Shape: [batch, n_new]; `logits` Shape: [batch, n_vocab]. `batch` must be the
    /// current batch size.
    fn decode_batch(
        &mut self,
        tokens: &[u32],
        batch: usize,
        logits: &mut [f32],
    ) -> Result<(), BoxError>;

    /// Rebuilds the batch: new sequence `i` is a copy of current sequence `src[i]` (its
    /// self-attention cache is copied, not recomputed). `src` may repeat, drop or permute
    /// sequences; its length is the new batch size.
    fn reorder(&mut self, src: &[usize]) -> Result<(), BoxError>;

    /// Word alignment against the current window: runs the decoder over the whole of
    /// `tokens` (start sequence, `<|notimestamps|>`, text, `<|endoftext|>`) from position 0,
    /// leaving the batch and its cache as they were, and returns the cross-attention scores
    /// of the `(layer, head)` pairs in `heads` before the softmax (`q·k / sqrt(d_head)`).
    ///
    /// Returns Shape: [heads.len(), tokens.len(), n_audio_ctx]; writes the logits of `rows`
    /// (indices into `tokens`) into `logits` (Shape: [rows.len(), n_vocab]). Models that
    /// cannot expose their attention keep this default, an error.
    fn align(
        &mut self,
        tokens: &[u32],
        heads: &[(usize, usize)],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<Vec<f32>, BoxError> {
        let _ = (tokens, heads, rows, logits);
        Err("this model does not expose cross-attention for word alignment".into())
    }
}
