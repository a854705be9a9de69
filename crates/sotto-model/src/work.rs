//! The arithmetic of an encoder pass, split by the precision it runs in, and the time it
//! cannot beat at a machine's measured peaks ([`sotto_compute::Peaks`]).

use std::time::Duration;

use sotto_compute::Peaks;

use crate::{EncoderPrecision, Hparams};

/// Operations (a multiply-add counts two) of one [`crate::Session::encode`]: the convs,
/// every block's linear layers and attention products, and the decoder's cross-attention
/// K/V projections. Layer norms, GELU, the softmax and packing are not counted: the
/// limit is the products' alone.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EncoderWork {
    pub f32_flops: f64,
    pub bf16_flops: f64,
    pub int8_ops: f64,
    /// Products on pairs of i16 with i32 sums by AVX-512 VNNI's `vpdpwssd` (the bf16 and
    /// int8 levels' attention scores): half the rate of its byte products, `int8_ops`'.
    pub i16_pair_ops: f64,
}

impl EncoderWork {
    /// The work of one window of a model with `h` at `precision` (`Auto` counts as
    /// [`EncoderPrecision::Bf16`]).
    pub fn new(h: &Hparams, precision: EncoderPrecision) -> EncoderWork {
        let (ctx, d, mels) = (
            h.n_audio_ctx as f64,
            h.n_audio_state as f64,
            h.n_mels as f64,
        );
        let frames = 2.0 * ctx;
        // conv1 (stride 1, 3 taps) and conv2 (stride 2); per block q, k, v, out (d × d
        // each) and the MLP (d × 4d twice); two d-wide K/V projections per decoder layer.
        let linear = 2.0 * frames * d * 3.0 * mels
            + 2.0 * ctx * d * 3.0 * d
            + h.n_audio_layer as f64 * 2.0 * ctx * d * 12.0 * d
            + h.n_text_layer as f64 * 2.0 * 2.0 * ctx * d * h.n_text_state as f64;
        // Per block: the scores Q·Kᵀ and P·V, each ctx × ctx × d multiply-adds.
        let product = h.n_audio_layer as f64 * 2.0 * ctx * ctx * d;
        let (scores, values) = (product, product);
        let mut w = EncoderWork::default();
        match precision {
            EncoderPrecision::F32 => w.f32_flops = linear + scores + values,
            EncoderPrecision::Bf16 | EncoderPrecision::Auto => {
                (w.bf16_flops, w.i16_pair_ops) = (linear + values, scores)
            }
            EncoderPrecision::Bf16Fast => w.bf16_flops = linear + scores + values,
            EncoderPrecision::Int8 => {
                (w.int8_ops, w.bf16_flops, w.i16_pair_ops) = (linear, values, scores)
            }
            // The attention's products on the same integer pairs as the linear layers.
            EncoderPrecision::Int16 => w.int8_ops = linear + scores + values,
        }
        w
    }

    /// All operations, whatever their precision.
    pub fn total(&self) -> f64 {
        self.f32_flops + self.bf16_flops + self.int8_ops + self.i16_pair_ops
    }

    /// The time this work takes at `peaks`' rates, each part at its own (bf16 at AMX's where
    /// it was measured: the bf16 products run on tiles there); `None` when a part needs a
    /// rate `peaks` lacks (the CPU has no such instruction).
    pub fn limit(&self, peaks: &Peaks) -> Option<Duration> {
        let part = |ops: f64, giga_per_s: Option<f64>| match (ops, giga_per_s) {
            (0.0, _) => Some(0.0),
            (o, Some(r)) if r > 0.0 => Some(o / (r * 1e9)),
            _ => None,
        };
        let secs = part(self.f32_flops, Some(peaks.f32_gflops))?
            + part(self.bf16_flops, peaks.amx_bf16_gflops.or(peaks.bf16_gflops))?
            + part(self.int8_ops, peaks.int8_gops)?
            + part(self.i16_pair_ops, peaks.int8_gops.map(|r| r / 2.0))?;
        Some(Duration::from_secs_f64(secs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Hparams {
        Hparams {
            n_vocab: 51864,
            n_audio_ctx: 1500,
            n_audio_state: 384,
            n_audio_head: 6,
            n_audio_layer: 4,
            n_text_ctx: 448,
            n_text_state: 384,
            n_text_head: 6,
            n_text_layer: 4,
            n_mels: 80,
        }
    }

    #[test]
    fn tiny_counts_by_hand() {
        let w = EncoderWork::new(&tiny(), EncoderPrecision::F32);
        // conv1 3000·384·240·2 + conv2 1500·384·1152·2 + 4 blocks of 1500·384·4608·2
        // + 4 layers of 2·1500·384·384·2 + 4 blocks of 2·1500²·384·2.
        let expect = 552_960_000.0
            + 1_327_104_000.0
            + 4.0 * 5_308_416_000.0
            + 4.0 * 884_736_000.0
            + 4.0 * 3_456_000_000.0;
        assert_eq!(w.total(), expect);
        for p in [
            EncoderPrecision::Bf16,
            EncoderPrecision::Bf16Fast,
            EncoderPrecision::Int8,
            EncoderPrecision::Int16,
        ] {
            assert_eq!(EncoderWork::new(&tiny(), p).total(), expect, "{p:?}");
        }
        let b = EncoderWork::new(&tiny(), EncoderPrecision::Bf16);
        assert_eq!((b.f32_flops, b.i16_pair_ops), (0.0, 4.0 * 1_728_000_000.0));
        assert_eq!(
            EncoderWork::new(&tiny(), EncoderPrecision::Bf16Fast).f32_flops,
            0.0
        );
    }

    #[test]
    fn limit_adds_each_part_at_its_rate() {
        let peaks = Peaks {
            threads: 2,
            f32_gflops: 100.0,
            bf16_gflops: Some(200.0),
            amx_bf16_gflops: None,
            int8_gops: None,
            read_gbs: 30.0,
        };
        let w = EncoderWork {
            f32_flops: 1e9,
            bf16_flops: 4e9,
            int8_ops: 0.0,
            i16_pair_ops: 0.0,
        };
        assert_eq!(w.limit(&peaks), Some(Duration::from_millis(30)));
        let int8 = EncoderWork { int8_ops: 1.0, ..w };
        assert_eq!(int8.limit(&peaks), None);
        // i16 pairs at half the int8 dot rate: 2e9 at 100 GOP/s, 40 ms.
        let vnni = Peaks {
            int8_gops: Some(100.0),
            ..peaks
        };
        let pairs = EncoderWork {
            i16_pair_ops: 2e9,
            ..w
        };
        assert_eq!(pairs.limit(&vnni), Some(Duration::from_millis(70)));
        // Where bf16 products run on AMX tiles, their rate is the tiles'.
        let amx = Peaks {
            amx_bf16_gflops: Some(4000.0),
            ..peaks
        };
        assert_eq!(w.limit(&amx), Some(Duration::from_millis(11)));
    }
}
