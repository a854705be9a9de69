//! Calibration statistics for GPTQ quantization (`sotto quantize --calibrate`): while a
//! session transcribes real audio, [`Calibration`] sums `x xᵀ` over the inputs of every
//! linear layer, and hands them out under the layer's weight tensor name.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use sotto_compute::{accumulate_gram, Linear, LinearProbe};

use crate::{Attention, Block, Whisper};

/// Input second moments per linear layer, gathered through [`crate::Session::set_probe`].
#[derive(Debug)]
pub struct Calibration {
    /// The layers worth summing: the model's 2-D weights (the convolutions, which no
    /// quantizer touches, would cost base a 1536-wide `x xᵀ` of 1500 rows per window).
    wanted: HashSet<usize>,
    /// Keyed by the address of the layer's [`Linear`] inside the model (stable: the model
    /// is behind an `Arc` and never moves). Value: (H Shape: [n_in, n_in], rows seen).
    stats: Mutex<Stats>,
}

#[derive(Debug, Default)]
struct Stats {
    by_layer: HashMap<usize, (Vec<f64>, u64)>,
    /// One call's `x xᵀ`, kept between calls (a decoder step makes ~50 of them).
    scratch: Vec<f64>,
}

/// One layer's statistics.
#[derive(Debug, Clone)]
pub struct InputStats {
    /// `Σ x xᵀ`. Shape: [n_in, n_in].
    pub h: Vec<f64>,
    pub n_in: usize,
    /// Input rows summed.
    pub rows: u64,
}

fn key(lin: &Linear) -> usize {
    lin as *const Linear as usize
}

impl LinearProbe for Calibration {
    fn observe(&self, weights: &[&Linear], x: &[f32], m: usize) {
        let weights: Vec<&Linear> = weights
            .iter()
            .copied()
            .filter(|w| self.wanted.contains(&key(w)))
            .collect();
        let Some(n) = weights.first().map(|w| w.n_in) else {
            return;
        };
        let mut guard = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let Stats { by_layer, scratch } = &mut *guard;
        scratch.clear();
        scratch.resize(n * n, 0.0);
        accumulate_gram(x, m, n, scratch);
        for w in weights {
            let (h, rows) = by_layer
                .entry(key(w))
                .or_insert_with(|| (vec![0.0; n * n], 0));
            h.iter_mut().zip(scratch.iter()).for_each(|(a, b)| *a += b);
            *rows += m as u64;
        }
    }
}

impl Calibration {
    /// Statistics for `model`'s 2-D weights (see [`Whisper::named_linears`]), empty.
    pub fn new(model: &Whisper) -> Self {
        Self {
            wanted: model
                .named_linears()
                .into_iter()
                .map(|(_, l)| key(l))
                .collect(),
            stats: Mutex::default(),
        }
    }

    /// The statistics of `model`'s 2-D weights (those whisper.cpp quantizes), by tensor
    /// name; layers that never ran are left out.
    pub fn stats(&self, model: &Whisper) -> BTreeMap<String, InputStats> {
        let stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        model
            .named_linears()
            .into_iter()
            .filter_map(|(name, lin)| {
                let (h, rows) = stats.by_layer.get(&key(lin))?;
                Some((
                    name,
                    InputStats {
                        h: h.clone(),
                        n_in: lin.n_in,
                        rows: *rows,
                    },
                ))
            })
            .collect()
    }
}

impl Whisper {
    /// Every 2-D linear weight with its canonical (whisper.cpp) tensor name: the
    /// attention and MLP projections of both stacks and the token embedding (the tied
    /// output projection). The convolutions are 3-D and not listed.
    pub fn named_linears(&self) -> Vec<(String, &Linear)> {
        fn attention<'a>(out: &mut Vec<(String, &'a Linear)>, prefix: &str, a: &'a Attention) {
            for (part, lin) in [
                ("query", &a.query),
                ("key", &a.key),
                ("value", &a.value),
                ("out", &a.out),
            ] {
                out.push((format!("{prefix}.{part}.weight"), lin));
            }
        }
        fn blocks<'a>(out: &mut Vec<(String, &'a Linear)>, stack: &str, bs: &'a [Block]) {
            for (i, b) in bs.iter().enumerate() {
                let p = format!("{stack}.blocks.{i}");
                attention(out, &format!("{p}.attn"), &b.attn);
                if let Some((_, cross)) = &b.cross {
                    attention(out, &format!("{p}.cross_attn"), cross);
                }
                out.push((format!("{p}.mlp.0.weight"), &b.mlp_0));
                out.push((format!("{p}.mlp.2.weight"), &b.mlp_2));
            }
        }
        let mut out = Vec::new();
        blocks(&mut out, "encoder", &self.encoder.blocks);
        blocks(&mut out, "decoder", &self.decoder.blocks);
        out.push((
            "decoder.token_embedding.weight".to_string(),
            &self.decoder.token_embedding,
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testmodel::{file, HP};
    use crate::Session;

    #[test]
    fn every_linear_is_seen_with_its_own_inputs() {
        let model = Arc::new(Whisper::from_file(&file()).unwrap());
        let cal = Arc::new(Calibration::new(&model));
        let mut s = Session::new(model.clone(), 2).unwrap();
        s.set_probe(Some(cal.clone()));
        let mel: Vec<f32> = (0..HP.n_mels * 2 * HP.n_audio_ctx)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) / 5.0)
            .collect();
        s.encode(&mel).unwrap();
        let mut logits = vec![0.0; HP.n_vocab];
        s.decode(&[1, 7, 3], &[2], &mut logits).unwrap();
        s.decode(&[4], &[0], &mut logits).unwrap();
        let stats = cal.stats(&model);
        let names: Vec<String> = model.named_linears().into_iter().map(|(n, _)| n).collect();
        // 4 per attention, 2 per MLP: 2 encoder blocks (6 each), 2 decoder blocks (10
        // each), the token embedding.
        assert_eq!(names.len(), 2 * 6 + 2 * 10 + 1);
        assert_eq!(stats.keys().cloned().collect::<Vec<_>>(), {
            let mut n = names.clone();
            n.sort();
            n
        });
        let (da, dt) = (HP.n_audio_state, HP.n_text_state);
        let enc = &stats["encoder.blocks.0.attn.query.weight"];
        assert_eq!((enc.n_in, enc.rows), (da, HP.n_audio_ctx as u64));
        // q, k and v meet the same input; the MLP's second layer meets 4·d-wide inputs.
        assert_eq!(enc.h, stats["encoder.blocks.0.attn.value.weight"].h);
        assert_eq!(stats["encoder.blocks.1.mlp.2.weight"].n_in, 4 * da);
        // The decoder saw the 3 prompt rows and then 1; cross k/v the encoder output.
        let dec = &stats["decoder.blocks.1.mlp.0.weight"];
        assert_eq!((dec.n_in, dec.rows), (dt, 4));
        assert_eq!(
            stats["decoder.blocks.0.cross_attn.key.weight"].rows,
            HP.n_audio_ctx as u64
        );
        // The logits only for the rows asked: one per decode call.
        assert_eq!(stats["decoder.token_embedding.weight"].rows, 2);
        for s in stats.values() {
            let n = s.n_in;
            for i in 0..n {
                assert!(s.h[i * n + i] >= 0.0);
                for j in 0..n {
                    let (a, b) = (s.h[i * n + j], s.h[j * n + i]);
                    assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0));
                }
            }
        }
        // Without the probe nothing more is counted.
        s.set_probe(None);
        s.decode(&[5], &[0], &mut logits).unwrap();
        assert_eq!(cal.stats(&model)["decoder.token_embedding.weight"].rows, 2);
    }
}
