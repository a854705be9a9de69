//! Building [`Whisper`] from a [`WhisperFile`]'s canonical (whisper.cpp-named) tensors.

use half::f16;
use rayon::prelude::*;
use sotto_compute::{F32Packed, I8Layout, I8Packed, Linear, Norm, QuantType, Weight};
use sotto_formats::{DType, Hparams, TensorData, WhisperFile};

use crate::{Attention, Block, Decoder, Encoder, EncoderPrecision, ModelError, Whisper};

const LN_EPS: f32 = 1e-5;

/// Widen f16 encoder weights to f32 at load while the encoder has at most this many
/// parameters (tiny … small): its products are all 1500-row gemms, which then skip a
/// per-call conversion, at twice the memory for those weights.
const WIDEN_MAX_PARAMS: usize = 100_000_000;

struct Loader<'a> {
    f: &'a WhisperFile,
    /// Whether encoder-only weights (encoder blocks, convs, cross-attention K/V) go to f32.
    widen: bool,
    /// How encoder-only weights are packed for the many-row GEMMs (the encoder precision
    /// this CPU runs, [`crate::LoadOptions::encoder`]).
    precision: EncoderPrecision,
    /// [`crate::LoadOptions::exact_logits`].
    exact_logits: bool,
    /// [`crate::LoadOptions::quantize_decoder`].
    quantize_decoder: bool,
}

fn quant_type(d: DType) -> Option<QuantType> {
    Some(match d {
        DType::Q4_0 => QuantType::Q4_0,
        DType::Q4_1 => QuantType::Q4_1,
        DType::Q5_0 => QuantType::Q5_0,
        DType::Q5_1 => QuantType::Q5_1,
        DType::Q8_0 => QuantType::Q8_0,
        _ => return None,
    })
}

impl<'a> Loader<'a> {
    /// Whether the weights under `prefix` go to f32 (see [`WIDEN_MAX_PARAMS`]).
    fn widen_prefix(&self, prefix: &str) -> bool {
        self.widen && encoder_only(prefix)
    }

    fn err(&self, name: &str, msg: impl Into<String>) -> ModelError {
        ModelError::Tensor {
            path: self.f.path.clone(),
            name: name.to_string(),
            msg: msg.into(),
        }
    }

    fn get(&self, name: &str, shape: &[usize]) -> Result<&'a TensorData, ModelError> {
        let t = self
            .f
            .tensors
            .get(name)
            .ok_or_else(|| self.err(name, "missing"))?;
        if t.shape != shape {
            return Err(self.err(name, format!("shape {:?}, expected {shape:?}", t.shape)));
        }
        Ok(t)
    }

    /// A 1-D parameter as f32. Only the element count is checked: ggml files store conv
    /// biases as [d, 1].
    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        let t = self
            .f
            .tensors
            .get(name)
            .ok_or_else(|| self.err(name, "missing"))?;
        if t.numel() != n {
            return Err(self.err(name, format!("shape {:?}, expected {n} elements", t.shape)));
        }
        t.to_f32().map_err(|e| self.err(name, e))
    }

    /// A 2-D (or conv) weight, kept f16 when stored f16 (widened to f32 when `widen`, for
    /// weights only ever used in large matrix products); bf16 is widened to f32; ggml block
    /// types stay quantized.
    fn weight(&self, name: &str, shape: &[usize], widen: bool) -> Result<Weight, ModelError> {
        let w = self.weight_copy(name, shape, widen);
        // Converted (or failed): the file's copy need not stay resident.
        if let Some(t) = self.f.tensors.get(name) {
            t.data.release();
        }
        w
    }

    fn weight_copy(&self, name: &str, shape: &[usize], widen: bool) -> Result<Weight, ModelError> {
        let t = self.get(name, shape)?;
        let bytes = t.data.as_bytes();
        let (n_out, n_in) = (shape[0], shape[1..].iter().product::<usize>());
        let size = match t.dtype {
            DType::F32 => 4,
            DType::F16 => 2,
            DType::BF16 => return Ok(Weight::F32(t.to_f32().map_err(|e| self.err(name, e))?)),
            other => match quant_type(other) {
                Some(qt) => {
                    let w = self.quant(name, qt, bytes, n_out, n_in)?;
                    // Encoder-only weights meet only many-row products, which have no
                    // quantized kernel: dequantized once here, not on every window.
                    return Ok(if widen {
                        let mut f = vec![0.0f32; w.len()];
                        w.read_f32(0, &mut f);
                        Weight::F32(f)
                    } else {
                        w
                    });
                }
                None => return Err(self.err(name, format!("unsupported type {other:?}"))),
            },
        };
        if bytes.len() != t.numel() * size {
            return Err(self.err(
                name,
                format!("{} bytes for {} elements", bytes.len(), t.numel()),
            ));
        }
        Ok(match t.dtype {
            DType::F16 if widen => Weight::F32(
                bytes
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
            ),
            DType::F16 => Weight::F16(
                bytes
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            _ => Weight::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
        })
    }

    /// A block-quantized weight: rows must be whole blocks and the byte count exact.
    fn quant(
        &self,
        name: &str,
        t: QuantType,
        bytes: &[u8],
        n_out: usize,
        n_in: usize,
    ) -> Result<Weight, ModelError> {
        if !n_in.is_multiple_of(QuantType::BLOCK) {
            return Err(self.err(
                name,
                format!("{t} rows of {n_in} values are not whole blocks of 32"),
            ));
        }
        let want = n_out * t.row_bytes(n_in);
        if bytes.len() != want {
            return Err(self.err(
                name,
                format!(
                    "{} bytes for a {t} [{n_out}, {n_in}] tensor, expected {want}",
                    bytes.len()
                ),
            ));
        }
        Ok(Weight::Quant {
            t,
            data: bytes.to_vec(),
            n_out,
            n_in,
        })
    }

    fn linear(
        &self,
        prefix: &str,
        n_out: usize,
        n_in: usize,
        bias: bool,
    ) -> Result<Linear, ModelError> {
        let wname = format!("{prefix}.weight");
        // The f32 GEMM packs f16 values itself (kept f16 for AVX2): no widened copy first.
        let packs_f16 =
            self.precision == EncoderPrecision::F32 && sotto_compute::f32_gemm_supported();
        let weight = match self.f16_direct(&wname, prefix, n_out, n_in, packs_f16)? {
            Some(w) => w,
            None => {
                let widen = self.widen_prefix(prefix) && !packs_f16;
                let mut weight = self.weight(&wname, &[n_out, n_in], widen)?;
                if encoder_only(prefix) {
                    weight = self.for_gemm(&wname, weight, n_out, n_in)?;
                }
                if decodes(prefix) {
                    weight = weight
                        .for_decoding(n_out, n_in)
                        .map_err(|e| self.err(&wname, e.to_string()))?;
                }
                weight
            }
        };
        let bias = if bias {
            Some(self.vector(&format!("{prefix}.bias"), n_out)?)
        } else {
            None
        };
        Linear::new(weight, bias, n_out, n_in).map_err(|e| self.err(&wname, e.to_string()))
    }

    /// An f16 linear weight laid out straight from the file's bytes, where its layout takes
    /// f16 values (the AVX2 f32 GEMM's panels, the decoder's tiles) or quantizes them row
    /// by row (the integer GEMMs): no f16 or f32 copy of the tensor first. None where the
    /// usual path applies (other types, precisions or CPUs).
    fn f16_direct(
        &self,
        name: &str,
        prefix: &str,
        n_out: usize,
        n_in: usize,
        packs_f16: bool,
    ) -> Result<Option<Weight>, ModelError> {
        let t = self.get(name, &[n_out, n_in])?;
        if t.dtype != DType::F16 || t.data.len() != 2 * n_out * n_in {
            return Ok(None);
        }
        let bytes = t.data.as_bytes();
        let int_layout = match self.precision {
            EncoderPrecision::Int8 => I8Layout::this_cpu(false),
            EncoderPrecision::Int16 => I8Layout::this_cpu(true),
            _ => None,
        };
        let w = if encoder_only(prefix) && packs_f16 {
            F32Packed::from_f16_le_bytes(bytes, n_out, n_in).map(Weight::F32Packed)
        } else if let (true, Some(layout)) = (encoder_only(prefix), int_layout) {
            I8Packed::from_f16_le_bytes(bytes, n_out, n_in, layout).map(Weight::Int8)
        } else if decodes(prefix) && self.quantize_decoder && n_in.is_multiple_of(QuantType::BLOCK)
        {
            // (Rows that are not whole q8_0 blocks, which no Whisper size has, stay f16.)
            q8_0_from_f16_bytes(bytes, n_out, n_in).for_decoding(n_out, n_in)
        } else if decodes(prefix) {
            match Weight::f16_bytes_for_decoding(bytes, n_out, n_in) {
                Some(w) => w,
                None => return Ok(None),
            }
        } else {
            return Ok(None);
        };
        let w = w.map_err(|e| self.err(name, e.to_string()))?;
        // Converted: the file's copy need not stay resident.
        t.data.release();
        Ok(Some(w))
    }

    /// The token embedding, which is also the vocabulary projection: screened (see
    /// `sotto_compute::VocabWeights`) for a Whisper vocabulary unless `exact_logits`.
    fn vocab(&self, prefix: &str, n_out: usize, n_in: usize) -> Result<Linear, ModelError> {
        let wname = format!("{prefix}.weight");
        let t = self.get(&wname, &[n_out, n_in])?;
        if let (Some(n_text), DType::F16, false) = (text_tokens(n_out), t.dtype, self.exact_logits)
        {
            // Straight from the file's bytes: no f16 copy of the 51 864 rows.
            if let Some(w) = Weight::vocab_from_f16_bytes(t.data.as_bytes(), n_out, n_in, n_text) {
                let w = w.map_err(|e| self.err(&wname, e.to_string()));
                t.data.release();
                return Linear::new(w?, None, n_out, n_in)
                    .map_err(|e| self.err(&wname, e.to_string()));
            }
        }
        let weight = self
            .weight(&wname, &[n_out, n_in], false)?
            .for_decoding(n_out, n_in)
            .map_err(|e| self.err(&wname, e.to_string()))?;
        Linear::new(weight, None, n_out, n_in).map_err(|e| self.err(&wname, e.to_string()))
    }

    /// An encoder-only weight packed for the GEMM of this load's precision.
    fn for_gemm(
        &self,
        name: &str,
        w: Weight,
        n_out: usize,
        n_in: usize,
    ) -> Result<Weight, ModelError> {
        match self.precision {
            EncoderPrecision::F32 => w.for_f32_gemm(n_out, n_in, true),
            EncoderPrecision::Auto | EncoderPrecision::Bf16 | EncoderPrecision::Bf16Fast => {
                w.for_bf16_gemm(n_out, n_in, true)
            }
            EncoderPrecision::Int8 => w.for_int8_gemm(n_out, n_in, true),
            EncoderPrecision::Int16 => w.for_int16_gemm(n_out, n_in),
        }
        .map_err(|e| self.err(name, e.to_string()))
    }

    fn norm(&self, prefix: &str, d: usize) -> Result<Norm, ModelError> {
        Ok(Norm {
            gamma: self.vector(&format!("{prefix}.weight"), d)?,
            beta: self.vector(&format!("{prefix}.bias"), d)?,
            eps: LN_EPS,
        })
    }

    /// `prefix` is e.g. `encoder.blocks.0.attn`; keys and values read `d_kv`-wide inputs.
    fn attention(&self, prefix: &str, d: usize, d_kv: usize) -> Result<Attention, ModelError> {
        Ok(Attention {
            query: self.linear(&format!("{prefix}.query"), d, d, true)?,
            key: self.linear(&format!("{prefix}.key"), d, d_kv, false)?,
            value: self.linear(&format!("{prefix}.value"), d, d_kv, true)?,
            out: self.linear(&format!("{prefix}.out"), d, d, true)?,
        })
    }

    fn block(&self, prefix: &str, d: usize, d_cross: Option<usize>) -> Result<Block, ModelError> {
        let cross = match d_cross {
            Some(d_kv) => Some((
                self.norm(&format!("{prefix}.cross_attn_ln"), d)?,
                self.attention(&format!("{prefix}.cross_attn"), d, d_kv)?,
            )),
            None => None,
        };
        Ok(Block {
            attn_ln: self.norm(&format!("{prefix}.attn_ln"), d)?,
            attn: self.attention(&format!("{prefix}.attn"), d, d)?,
            cross,
            mlp_ln: self.norm(&format!("{prefix}.mlp_ln"), d)?,
            mlp_0: self.linear(&format!("{prefix}.mlp.0"), 4 * d, d, true)?,
            mlp_2: self.linear(&format!("{prefix}.mlp.2"), d, 4 * d, true)?,
        })
    }

    fn conv(&self, prefix: &str, d: usize, c_in: usize) -> Result<Linear, ModelError> {
        let wname = format!("{prefix}.weight");
        let weight = self.weight(&wname, &[d, c_in, 3], self.widen)?;
        let weight = weight
            .taps_first(d, c_in, 3)
            .map_err(|e| self.err(&wname, e.to_string()))?;
        let weight = self.for_gemm(&wname, weight, d, c_in * 3)?;
        let bias = self.vector(&format!("{prefix}.bias"), d)?;
        Linear::new(weight, Some(bias), d, c_in * 3).map_err(|e| self.err(&wname, e.to_string()))
    }
}

/// An f16 weight's rows (little-endian bytes) as q8_0 blocks, as a q8_0 file stores them.
fn q8_0_from_f16_bytes(bytes: &[u8], n_out: usize, n_in: usize) -> Weight {
    let t = QuantType::Q8_0;
    let rb = t.row_bytes(n_in);
    let mut data = vec![0u8; n_out * rb];
    data.par_chunks_mut(rb)
        .zip(bytes.par_chunks(2 * n_in))
        .for_each_init(
            || vec![0f32; n_in],
            |row, (q, src)| {
                for (x, c) in row.iter_mut().zip(src.chunks_exact(2)) {
                    *x = f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
                sotto_compute::quantize_row(t, row, q);
            },
        );
    Weight::Quant {
        t,
        data,
        n_out,
        n_in,
    }
}

/// Weights under `prefix` that only ever multiply the 1500 encoder rows.
fn encoder_only(prefix: &str) -> bool {
    prefix.starts_with("encoder.")
        || prefix.ends_with("cross_attn.key")
        || prefix.ends_with("cross_attn.value")
}

/// The ordinary (text) tokens of a Whisper vocabulary of `n_vocab` tokens, which come
/// first: all but the 1 608 special and timestamp ones of English-only models, one more
/// of those (a language) in every multilingual one. None for other vocabularies.
fn text_tokens(n_vocab: usize) -> Option<usize> {
    match n_vocab {
        51864 => Some(50256),
        n if n > 51864 => Some(50257),
        _ => None,
    }
}

/// Weights under `prefix` that multiply the few rows of a decoder step (everything in the
/// decoder but the cross-attention keys and values, which see the 1500 encoder rows).
fn decodes(prefix: &str) -> bool {
    prefix.starts_with("decoder.")
        && !prefix.ends_with("cross_attn.key")
        && !prefix.ends_with("cross_attn.value")
}

/// The precision `asked` runs as on this CPU, for a file whose encoder weights are
/// ggml-quantized (`quantized`) or not: `Auto` chosen, then each level stepped down to the
/// best the CPU has.
fn resolve_precision(asked: EncoderPrecision, quantized: bool) -> EncoderPrecision {
    use EncoderPrecision as P;
    let p = match asked {
        P::Auto if quantized && sotto_compute::int8_quad_tile_active() => P::Int8,
        P::Auto if quantized && crate::int16_encoder_supported() => P::Int16,
        P::Auto if crate::bf16_encoder_supported() => P::Bf16,
        P::Auto if sotto_compute::int16_gemm_preferred() => P::Int16,
        P::Auto => P::F32,
        p => p,
    };
    match p {
        P::Int8 if crate::int8_encoder_supported() => P::Int8,
        P::Int16 if crate::int16_encoder_supported() => P::Int16,
        _ if !crate::bf16_encoder_supported() => P::F32,
        P::Int8 | P::Int16 => P::Bf16,
        p => p,
    }
}

fn check_hparams(f: &WhisperFile) -> Result<(), ModelError> {
    let h = &f.hparams;
    let msg = if [
        h.n_vocab,
        h.n_audio_ctx,
        h.n_audio_state,
        h.n_audio_head,
        h.n_text_ctx,
    ]
    .iter()
    .chain(&[h.n_text_state, h.n_text_head, h.n_mels])
    .any(|&v| v == 0)
    {
        Some(format!("a dimension is zero: {h:?}"))
    } else if !h.n_audio_state.is_multiple_of(h.n_audio_head)
        || !h.n_text_state.is_multiple_of(h.n_text_head)
    {
        Some(format!("state is not a multiple of the head count: {h:?}"))
    } else {
        None
    };
    match msg {
        Some(msg) => Err(ModelError::Hparams {
            path: f.path.clone(),
            msg,
        }),
        None => Ok(()),
    }
}

pub(crate) fn build(f: &WhisperFile, opts: crate::LoadOptions) -> Result<Whisper, ModelError> {
    check_hparams(f)?;
    let quantized = f
        .tensors
        .get("encoder.blocks.0.mlp.0.weight")
        .is_some_and(|t| quant_type(t.dtype).is_some());
    let precision = resolve_precision(opts.encoder, quantized);
    let h: Hparams = f.hparams;
    let enc_params = h.n_audio_layer * 12 * h.n_audio_state * h.n_audio_state;
    let l = Loader {
        f,
        widen: enc_params <= WIDEN_MAX_PARAMS,
        precision,
        exact_logits: opts.exact_logits,
        quantize_decoder: opts.quantize_decoder,
    };
    let (da, dt) = (h.n_audio_state, h.n_text_state);
    // Converting and re-laying out the weights is most of a load: layers in parallel.
    let blocks = |part: &str, n: usize, d: usize, cross: Option<usize>| {
        (0..n)
            .into_par_iter()
            .map(|i| l.block(&format!("{part}.blocks.{i}"), d, cross))
            .collect::<Result<Vec<_>, _>>()
    };
    let (encoder, decoder) = rayon::join(
        || -> Result<Encoder, ModelError> {
            Ok(Encoder {
                conv1: l.conv("encoder.conv1", da, h.n_mels)?,
                conv2: l.conv("encoder.conv2", da, da)?,
                pos: l.vector("encoder.positional_embedding", h.n_audio_ctx * da)?,
                blocks: blocks("encoder", h.n_audio_layer, da, None)?,
                ln_post: l.norm("encoder.ln_post", da)?,
            })
        },
        || -> Result<Decoder, ModelError> {
            Ok(Decoder {
                token_embedding: l.vocab("decoder.token_embedding", h.n_vocab, dt)?,
                pos: l.vector("decoder.positional_embedding", h.n_text_ctx * dt)?,
                blocks: blocks("decoder", h.n_text_layer, dt, Some(da))?,
                ln: l.norm("decoder.ln", dt)?,
            })
        },
    );
    let (encoder, decoder) = (encoder?, decoder?);
    Ok(Whisper {
        hparams: h,
        encoder,
        decoder,
        encoder_precision: precision,
    })
}
