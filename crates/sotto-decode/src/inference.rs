//! The boundary to the model: decoding sees nothing else.

/// Any error a model implementation raises.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A Whisper model: an encoder run once per 30 s window, and a decoder that extends one text
/// sequence at a time while caching its self-attention.
pub trait Inference {
    /// Logits per decoded row (the vocabulary size).
    fn n_vocab(&self) -> usize;

    /// Encodes one 30 s window of log-mel. Shape: [n_mels, 3000], row-major.
    fn encode(&mut self, mel: &[f32]) -> Result<(), BoxError>;

    /// Starts a new text sequence: drops the self-attention cache, keeps the audio.
    fn reset(&mut self);

    /// Appends `tokens` to the sequence and writes the logits of the rows `rows`
    /// (indices into `tokens`) one after another into `logits` (rows.len() * n_vocab).
    fn decode(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), BoxError>;
}
