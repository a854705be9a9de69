//! Shared test helpers.
#![allow(dead_code)]

use sotto_quant::QuantType;

/// Per element: the reconstruction is within one quantization step (half a step where
/// ggml rounds to nearest without clamping) plus the f16 rounding of the scale and
/// offset. `step` is the block's `d`, `m` its minimum (offset types).
pub fn element_bound(t: QuantType, block: &[f32]) -> f32 {
    let amax = block.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let (min, max) = block
        .iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let f16_rel = 1.0 / 2048.0;
    let f16_abs = 6.0e-8; // f16's subnormal spacing
    let (step, steps_err, qmax, m) = match t {
        QuantType::Q4_0 => (amax / 8.0, 1.0, 8.0, 0.0),
        QuantType::Q5_0 => (amax / 16.0, 1.0, 16.0, 0.0),
        QuantType::Q8_0 | QuantType::Q8_1 => (amax / 127.0, 0.5, 127.0, 0.0),
        QuantType::Q4_1 => ((max - min) / 15.0, 0.5, 15.0, min.abs()),
        QuantType::Q5_1 => ((max - min) / 31.0, 0.5, 31.0, min.abs()),
    };
    let d_err = qmax * (step * f16_rel + f16_abs);
    let m_err = m * f16_rel + f16_abs;
    (steps_err * step + d_err + m_err) * 1.0001 + 1e-12
}

/// The sotto-formats dtype of a weight type.
pub fn dtype(t: QuantType) -> sotto_formats::DType {
    use sotto_formats::DType;
    match t {
        QuantType::Q4_0 => DType::Q4_0,
        QuantType::Q4_1 => DType::Q4_1,
        QuantType::Q5_0 => DType::Q5_0,
        QuantType::Q5_1 => DType::Q5_1,
        QuantType::Q8_0 => DType::Q8_0,
        QuantType::Q8_1 => panic!("q8_1 is not a file type"),
    }
}

/// Writes `file` quantized to `t` with sotto-quant's reference quantizer.
pub fn write_quantized(
    file: &sotto_formats::WhisperFile,
    mel: &[f32],
    out: &std::path::Path,
    t: QuantType,
) -> sotto_formats::Result<()> {
    let q = |x: &[f32], o: &mut [u8]| sotto_quant::quantize_row(t, x, o);
    sotto_formats::ggml::write_quantized(file, mel, out, dtype(t), &q)
}

/// A fresh scratch folder under the target dir.
pub fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sotto-quant-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
