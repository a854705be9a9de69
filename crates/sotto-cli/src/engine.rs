//! How a model runs — threads, device, encoder arithmetic, logits — as the options that
//! `transcribe` and `bench` share, and their checks.

/// The options that choose how a loaded model runs (flattened into `transcribe` and
/// `bench`).
#[derive(clap::Args)]
pub struct EngineArgs {
    /// Worker threads [default: all cores]. While another process keeps cores busy,
    /// decoder steps drop to one thread when that is faster (same results);
    /// `SOTTO_FIXED_THREADS=1` keeps them on all.
    #[arg(short, long)]
    threads: Option<usize>,

    /// Where the model runs: `cpu`, `cuda` (the first GPU; CUDA builds), `cuda:N` (GPU N
    /// in CUDA's numbering, as `CUDA_VISIBLE_DEVICES` leaves it), or `auto`: the first GPU
    /// where a CUDA build finds one (the CPU if it cannot take the model), else the CPU
    #[arg(long, default_value = "auto", value_parser = device_name)]
    device: String,

    /// Encoder arithmetic: `bf16` (linear layers and attention's P·V in bf16 with f32 sums;
    /// needs AVX-512 BF16, and runs on AMX tiles where the CPU has them), `bf16-fast` (the
    /// attention scores and the decoder's prompt pass too: faster, less accurate), `int8`
    /// (linear layers as int8 products, per-channel weights and per-row activations as
    /// faster-whisper's int8; needs AVX2 or Arm's dot-product extension), `int16` (int8's
    /// AVX2 products with 11–12-bit weights and activations: as fast, close to f32), `f32`
    /// (the reference path), or `auto`: bf16 for f16/f32 files on AVX-512 BF16, int8 for
    /// ggml-quantized ones on AVX-512 VNNI or Arm with `sdot`, int16 on AVX2 CPUs, else f32.
    /// On a GPU, `f32` runs the whole model in f32, the quantized decoder products as the
    /// CPU computes them (transcripts closest to the CPU's); anything else runs f16
    #[arg(
        long,
        env = "SOTTO_ENCODER_PRECISION",
        default_value = "auto",
        value_parser = ["auto", "int8", "int16", "bf16", "bf16-fast", "f32"]
    )]
    encoder_precision: String,

    /// Compute every logit from the f16 vocabulary rows. By default an f16 model's
    /// vocabulary projection reads a q8_0 screen and recomputes only the tokens that could
    /// rank among the best (same choices, half the bytes per decoder step)
    #[arg(long, env = "SOTTO_EXACT_LOGITS")]
    exact_logits: bool,

    /// Quantize an f16 model's decoder layers to q8_0 as they load, as `sotto quantize
    /// q8_0` stores them (the CPU): half the bytes per decoder step, the decoder of a q8_0
    /// file; for medium and large models, whose tokens are bound by those bytes
    #[arg(long, env = "SOTTO_QUANTIZE_DECODER")]
    quantize_decoder: bool,
}

impl EngineArgs {
    /// `--threads`, or every core.
    pub fn threads(&self) -> anyhow::Result<usize> {
        threads(self.threads)
    }

    /// `--threads`, or the cores shared out among `sessions` running at once (at least 1).
    #[cfg(feature = "server")]
    pub fn threads_each(&self, sessions: usize) -> anyhow::Result<usize> {
        match self.threads {
            Some(_) => self.threads(),
            None => Ok((threads(None)? / sessions.max(1)).max(1)),
        }
    }

    /// `--device` resolved; see [`select_device`].
    pub fn device(&self) -> anyhow::Result<sotto::Device> {
        select_device(&self.device)
    }

    /// `--encoder-precision`, `--exact-logits` and `--quantize-decoder`. A level asked for
    /// by name on a CPU without its instructions is an error rather than a silent f32 run;
    /// `auto` picks per model file and CPU ([`sotto::EncoderPrecision::Auto`]).
    pub fn load_options(&self) -> anyhow::Result<sotto::LoadOptions> {
        let encoder = (self.encoder_precision.parse())
            .map_err(|e| anyhow::anyhow!("--encoder-precision {e}"))?;
        Ok(sotto::LoadOptions {
            encoder,
            exact_logits: self.exact_logits,
            quantize_decoder: self.quantize_decoder,
        })
    }
}

/// A `--device` value, checked as clap parses it (so `--help` and typos behave as for
/// any other option).
fn device_name(s: &str) -> Result<String, String> {
    s.parse::<sotto::Device>()
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// A `--threads` value: every core when not given; 0 is an error, not a silent default.
pub fn threads(asked: Option<usize>) -> anyhow::Result<usize> {
    match asked {
        Some(0) => anyhow::bail!("--threads must be at least 1"),
        Some(n) => Ok(n),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

/// Resolves `--device`, printing once on stderr what `auto` chose and why. `auto` stays
/// `auto` for the model's load, which leaves for the CPU if the chosen GPU cannot take the
/// model (see [`device_note`]).
pub fn select_device(name: &str) -> anyhow::Result<sotto::Device> {
    let requested = name.parse()?;
    let choice = sotto::select_device(requested)?;
    if let Some(note) = &choice.note {
        eprintln!("device: {note}");
    }
    Ok(match requested {
        sotto::Device::Auto => sotto::Device::Auto,
        _ => choice.device,
    })
}

/// Prints why a model loaded for `auto` runs on the CPU after all, when it does, that a
/// GPU takes no `--encoder-precision` but `f32` (it runs f16 otherwise), and what the load
/// changed of the file's weights (k-quants).
pub fn device_note(engine: &EngineArgs, model: &sotto::Model) {
    if let Some(note) = &model.config().weights_note {
        eprintln!("model: {note}");
    }
    if let Some(note) = model.device_note() {
        eprintln!("device: {note}");
    }
    if let Some(note) = gpu_precision_note(
        model.encoder_precision().is_none(),
        &engine.encoder_precision,
        model.device(),
    ) {
        eprintln!("device: {note}");
    }
}

/// What a GPU model (`on_gpu`) does with `--encoder-precision p`: `f32` runs the whole
/// model in f32 with the CPU's quantized products; `auto` is f16; others do not apply.
fn gpu_precision_note(on_gpu: bool, p: &str, device: sotto::Device) -> Option<String> {
    match (on_gpu, p) {
        (false, _) | (true, "auto") => None,
        (true, "f32") => Some(format!(
            "{device} runs in f32, with the CPU's arithmetic for quantized decoder weights"
        )),
        (true, p) => Some(format!(
            "--encoder-precision {p} is for the CPU; {device} runs the encoder in f16 (or f32)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_notes_which_encoder_precisions_it_takes() {
        let gpu = sotto::Device::Cuda(0);
        assert_eq!(gpu_precision_note(false, "int8", sotto::Device::Cpu), None);
        assert_eq!(gpu_precision_note(true, "auto", gpu), None);
        let f32 = gpu_precision_note(true, "f32", gpu).unwrap();
        assert!(f32.contains("runs in f32"), "{f32}");
        let int8 = gpu_precision_note(true, "int8", gpu).unwrap();
        assert!(int8.contains("is for the CPU"), "{int8}");
    }
}
