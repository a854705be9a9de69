//! Whisper model files, read and written. No compute.
//!
//! Brief overview: [`WhisperFile`] is the one in-memory representation of a Whisper
//! checkpoint, whatever file it came from. [`load`] opens a CTranslate2 folder
//! (faster-whisper), a Hugging Face `transformers` folder (safetensors, [`hf`]) or a
//! whisper.cpp ggml `.bin` and yields canonical tensors named as
//! whisper.cpp names them (`encoder.blocks.0.attn.query.weight`, see [`names`]), each a
//! [`TensorData`] view over the memory-mapped file. [`ggml::write`] writes a file that
//! whisper.cpp loads.
//!
//! Every parser treats its input as hostile: counts, shapes and offsets are checked
//! against the file size before anything is allocated, and errors name the file and
//! the problem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod ct2;
pub mod ggml;
pub mod ggml_vad;
pub mod hf;
pub mod names;
pub mod onnx;
pub mod random;
mod storage;
pub mod tiktoken;
pub mod torch;

pub use storage::Storage;

/// Element type of a stored tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    I8,
    I16,
    I32,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
}

/// One tensor: element type, shape (numpy/PyTorch order, outermost first) and bytes.
#[derive(Clone, Debug)]
pub struct TensorData {
    pub dtype: DType,
    /// Shape, outermost first. Linear weights are `[out, in]` as in PyTorch.
    pub shape: Vec<usize>,
    pub data: Storage,
}

/// Whisper hyper-parameters (openai-whisper `ModelDimensions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hparams {
    pub n_vocab: usize,
    pub n_audio_ctx: usize,
    pub n_audio_state: usize,
    pub n_audio_head: usize,
    pub n_audio_layer: usize,
    pub n_text_ctx: usize,
    pub n_text_state: usize,
    pub n_text_head: usize,
    pub n_text_layer: usize,
    pub n_mels: usize,
}

/// Which kind of file a [`WhisperFile`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    Ct2,
    Ggml,
    /// A Hugging Face `transformers` folder (safetensors or PyTorch's format).
    Hf,
    /// openai-whisper's `.pt` checkpoint.
    Torch,
}

/// Extra metadata that only some files carry (CTranslate2's `config.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelConfig {
    /// (layer, head) pairs of the decoder cross-attention heads used for word alignment.
    pub alignment_heads: Option<Vec<(usize, usize)>>,
    pub lang_ids: Option<Vec<u32>>,
    pub suppress_ids: Option<Vec<u32>>,
    pub suppress_ids_begin: Option<Vec<u32>>,
    /// Byte-level BPE merges from `tokenizer.json`. The multilingual tokenizers that
    /// faster-whisper ships lack some of tiktoken's merges (`"Ġ t"`), so matching its
    /// prompt encoding needs this list.
    pub bpe_merges: Option<BpeMerges>,
    /// The special tokens' texts from `<|endoftext|>` on, as the file's vocabulary spells
    /// them (conversions differ: `<|iw|>` or `<|he|>`), where it lists them.
    pub special_tokens: Option<Vec<String>>,
    /// What loading changed of the file's weights, for the user to see: ggml k-quants
    /// (which sotto has no kernels for) read as the nearest block type that has them.
    pub weights_note: Option<String>,
}

/// A `tokenizer.json` read with its model, its BPE merges parsed when asked
/// ([`BpeMerges::parse`]): ~50 000 merges take ~35 ms, which a model load spends beside
/// the weights' conversion instead of before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BpeMerges {
    json: String,
    path: PathBuf,
}

impl BpeMerges {
    /// The text of `path`, a `tokenizer.json`, unparsed.
    pub fn new(json: String, path: PathBuf) -> Self {
        Self { json, path }
    }

    /// The `tokenizer.json` text.
    pub fn text(&self) -> &str {
        &self.json
    }

    /// The merges in rank order, as raw byte pairs; an error names the file.
    pub fn parse(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        ct2::parse_merges(&self.json, &self.path)
    }
}

/// A loaded Whisper checkpoint: hyper-parameters, canonical tensors and vocabulary.
#[derive(Debug)]
pub struct WhisperFile {
    pub path: PathBuf,
    pub format: SourceFormat,
    pub hparams: Hparams,
    /// Canonical (whisper.cpp) names → tensors. Shapes are canonical too: conv biases
    /// are `[d]`, CTranslate2's fused q/k/v are split, there is no key bias and no
    /// separate output projection (the token embedding is tied).
    pub tensors: BTreeMap<String, TensorData>,
    /// Raw bytes of the ordinary BPE tokens, ids `0..vocab.len()` (everything below
    /// `<|endoftext|>`); special tokens are implied by `hparams.n_vocab`.
    pub vocab: Vec<Vec<u8>>,
    /// Mel filter bank stored in the file (`[n_mels, n_fft/2+1]`), ggml files only.
    pub mel_filters: Option<Vec<f32>>,
    pub config: ModelConfig,
}

/// Errors from reading or writing model files. Messages name the file and the problem.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
    #[error("{path}: unsupported: {msg}")]
    Unsupported { path: PathBuf, msg: String },
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;

/// Opens a model: a CTranslate2 folder (or its `model.bin`), a Hugging Face folder (or its
/// `.safetensors` or `pytorch_model.bin` file), openai-whisper's `.pt` checkpoint or a
/// whisper.cpp ggml `.bin`.
///
/// A folder with `model.safetensors` or `pytorch_model.bin` (or their shard indexes) is
/// read as Hugging Face, any other folder as CTranslate2. A `.safetensors` file is read
/// as Hugging Face, a file starting with the ggml magic as ggml, a zip (PyTorch's format)
/// as Hugging Face when a `config.json` lies beside it and else as openai-whisper's, any
/// other file as CTranslate2 when a `config.json` lies beside it.
pub fn load(path: &Path) -> Result<WhisperFile> {
    let io = |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        if hf::is_hf_dir(path) {
            return hf::load(path);
        }
        return ct2::load(path);
    }
    if path.extension().is_some_and(|e| e == "safetensors") {
        return hf::load(path);
    }
    let mut magic = [0u8; 4];
    let n = {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(io)?;
        let mut n = 0;
        while n < 4 {
            match f.read(&mut magic[n..]).map_err(io)? {
                0 => break,
                k => n += k,
            }
        }
        n
    };
    if n == 4 && u32::from_le_bytes(magic) == ggml::MAGIC {
        return ggml::load(path);
    }
    if torch::is_zip(&magic[..n]) {
        // PyTorch's format: a Hugging Face checkpoint's `pytorch_model.bin` (its
        // config.json beside it), else openai-whisper's `.pt`.
        if path
            .parent()
            .is_some_and(|d| d.join("config.json").is_file())
        {
            return hf::load(path);
        }
        return torch::load_openai(path);
    }
    if path
        .parent()
        .is_some_and(|d| d.join("config.json").is_file())
    {
        return ct2::load(path);
    }
    let msg = if n < 4 {
        format!("not a model file: {n} bytes, too short for a format magic")
    } else {
        format!(
            "not a model file: unknown magic 0x{:08x} (expected a CTranslate2 folder or a ggml file, magic 0x{:08x})",
            u32::from_le_bytes(magic),
            ggml::MAGIC
        )
    };
    Err(FormatError::Invalid {
        path: path.to_path_buf(),
        msg,
    })
}

impl DType {
    /// Elements per block and bytes per block (1 element for the plain types).
    pub fn block(self) -> (usize, usize) {
        match self {
            DType::F32 | DType::I32 => (1, 4),
            DType::F16 | DType::BF16 | DType::I16 => (1, 2),
            DType::I8 => (1, 1),
            DType::Q4_0 => (32, 18),
            DType::Q4_1 => (32, 20),
            DType::Q5_0 => (32, 22),
            DType::Q5_1 => (32, 24),
            DType::Q8_0 => (32, 34),
        }
    }

    /// Bytes of `numel` elements; `None` if that is not a whole number of blocks or overflows.
    pub fn nbytes(self, numel: usize) -> Option<usize> {
        let (per_block, bytes) = self.block();
        if !numel.is_multiple_of(per_block) {
            return None;
        }
        (numel / per_block).checked_mul(bytes)
    }

    pub fn is_quantized(self) -> bool {
        self.block().0 > 1
    }

    pub fn is_integer(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32)
    }
}

impl TensorData {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The values as f32: f32, f16 and bf16, and q8_0 blocks (`d · q`); the other
    /// block types are an error.
    pub fn to_f32(&self) -> std::result::Result<Vec<f32>, String> {
        let bytes = self.data.as_bytes();
        if self.dtype.nbytes(self.numel()) != Some(bytes.len()) {
            return Err(format!(
                "{:?} tensor of shape {:?} holds {} bytes",
                self.dtype,
                self.shape,
                bytes.len()
            ));
        }
        values_f32(self.dtype, bytes)
    }
}

/// `bytes`, whole elements or blocks of `dtype`, as f32 values (see [`TensorData::to_f32`]).
pub(crate) fn values_f32(dtype: DType, bytes: &[u8]) -> std::result::Result<Vec<f32>, String> {
    let out = match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::Q8_0 => bytes
            .chunks_exact(34)
            .flat_map(|b| {
                let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
                b[2..].iter().map(move |&q| d * f32::from(q as i8))
            })
            .collect(),
        other => return Err(format!("cannot convert a {other:?} tensor to f32")),
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(dtype: DType, shape: Vec<usize>, bytes: Vec<u8>) -> TensorData {
        TensorData {
            dtype,
            shape,
            data: Storage::from_vec(bytes),
        }
    }

    #[test]
    fn to_f32_reads_little_endian_floats() {
        let f16 = tensor(
            DType::F16,
            vec![2],
            [0x3c00u16, 0xc000]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        );
        assert_eq!(f16.to_f32().unwrap(), [1.0, -2.0]);
        let bf16 = tensor(DType::BF16, vec![1], 0x3fc0u16.to_le_bytes().to_vec());
        assert_eq!(bf16.to_f32().unwrap(), [1.5]);
        let f32 = tensor(DType::F32, vec![1], 0.25f32.to_le_bytes().to_vec());
        assert_eq!(f32.to_f32().unwrap(), [0.25]);
        assert!(
            tensor(DType::F32, vec![2], vec![0; 4]).to_f32().is_err(),
            "too few bytes"
        );
        assert!(tensor(DType::I8, vec![1], vec![0]).to_f32().is_err());
    }

    #[test]
    fn block_sizes() {
        assert_eq!(DType::Q8_0.nbytes(64), Some(68));
        assert_eq!(DType::Q4_0.nbytes(33), None);
        assert_eq!(DType::F32.nbytes(usize::MAX), None);
        assert_eq!(DType::F16.nbytes(3), Some(6));
    }
}
