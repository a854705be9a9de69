//! The Silero VAD's flags, shared by `transcribe --vad` and `sotto vad`, and `sotto vad`:
//! the stretches of speech in audio files, as whisper.cpp's `vad-speech-segments` lists
//! them.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};

use crate::progress;

/// Which VAD, and how it finds speech (faster-whisper's `VadOptions`; whisper.cpp's long
/// names as aliases).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct VadArgs {
    /// A Silero VAD file to use instead of the cached one: ONNX (faster-whisper's
    /// silero_vad_v6.onnx) or whisper.cpp's ggml (ggml-silero-v5.1.2.bin, -v6.2.0.bin).
    #[arg(long, value_name = "PATH")]
    vad_model: Option<PathBuf>,

    /// VAD: speech probability threshold [default: 0.5]
    #[arg(long, value_name = "P")]
    vad_threshold: Option<f32>,

    /// VAD: silence that ends a stretch of speech, ms [default: 2000]
    #[arg(long, visible_alias = "vad-min-silence-duration-ms", value_name = "MS")]
    vad_min_silence_ms: Option<f64>,

    /// VAD: shorter stretches of speech are dropped, ms [default: 0]
    #[arg(long, visible_alias = "vad-min-speech-duration-ms", value_name = "MS")]
    vad_min_speech_ms: Option<f64>,

    /// VAD: longer stretches of speech are split, at a silence where there is one, seconds
    /// [default: no limit]
    #[arg(
        long,
        visible_alias = "vad-max-speech-duration-s",
        value_name = "SECONDS"
    )]
    vad_max_speech_s: Option<f64>,

    /// VAD: padding added to each side of a stretch of speech, ms [default: 400]
    #[arg(long, value_name = "MS")]
    vad_speech_pad_ms: Option<f64>,
}

impl VadArgs {
    /// Whether any flag was given.
    pub fn given(&self) -> bool {
        self.vad_model.is_some()
            || self.vad_threshold.is_some()
            || self.vad_min_silence_ms.is_some()
            || self.vad_min_speech_ms.is_some()
            || self.vad_max_speech_s.is_some()
            || self.vad_speech_pad_ms.is_some()
    }

    /// The VAD these flags ask for, its options checked.
    pub fn load(&self, hub: &sotto::hub::Hub) -> anyhow::Result<sotto::Vad> {
        self.load_with(hub, sotto::VadOptions::default())
    }

    /// [`VadArgs::load`] with the options the flags change starting from `base`.
    pub fn load_with(
        &self,
        hub: &sotto::hub::Hub,
        base: sotto::VadOptions,
    ) -> anyhow::Result<sotto::Vad> {
        let mut vad = match &self.vad_model {
            Some(path) => sotto::Vad::load(path)?,
            None => sotto::Vad::load_cached(hub, &mut progress::Download::new())?,
        };
        vad.options = base;
        let o = &mut vad.options;
        o.threshold = self.vad_threshold.unwrap_or(o.threshold);
        o.min_silence_duration_ms = self.vad_min_silence_ms.unwrap_or(o.min_silence_duration_ms);
        o.speech_pad_ms = self.vad_speech_pad_ms.unwrap_or(o.speech_pad_ms);
        o.min_speech_duration_ms = self.vad_min_speech_ms.unwrap_or(o.min_speech_duration_ms);
        o.max_speech_duration_s = self.vad_max_speech_s.unwrap_or(o.max_speech_duration_s);
        let valid = (0.0..=1.0).contains(&o.threshold)
            && o.min_silence_duration_ms >= 0.0
            && o.min_speech_duration_ms >= 0.0
            && o.speech_pad_ms >= 0.0
            && o.max_speech_duration_s > 0.0;
        if !valid {
            bail!(
                "--vad-threshold is a probability, the --vad-*-ms options are >= 0 and \
                 --vad-max-speech-s is > 0"
            );
        }
        Ok(vad)
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Audio files (wav, flac, mp3, ogg, opus, m4a, webm at any rate); `-` reads stdin.
    #[arg(required = true, value_name = "FILES")]
    files: Vec<String>,

    #[command(flatten)]
    vad: VadArgs,

    /// Print JSON: per file, its duration and `[start, end]` seconds of each stretch.
    #[arg(long)]
    json: bool,

    /// Threads for the network's front end [default: all cores].
    #[arg(short, long)]
    threads: Option<usize>,
}

/// `sotto vad`: each file's stretches of speech, one `start<TAB>end` line (seconds) each,
/// after a `# file` line when there are several files; or JSON.
pub fn run(hub: &sotto::hub::Hub, args: Args) -> anyhow::Result<ExitCode> {
    let vad = args.vad.load(hub)?;
    let threads = crate::engine::threads(args.threads)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("starting the VAD's threads")?;
    let rate = f64::from(sotto::audio::SAMPLE_RATE);
    let mut out = std::io::stdout().lock();
    let mut docs = Vec::new();
    let mut failed = 0;
    for file in &args.files {
        // Audio errors name the file themselves.
        let found = match sotto::audio::load_16k_mono(file) {
            Ok(samples) => pool
                .install(|| vad.speech(&samples))
                .map(|speech| (samples.len(), speech))
                .map_err(|e| format!("{file}: {e}")),
            Err(e) => Err(e.to_string()),
        };
        let (n, speech) = match found {
            Ok(v) => v,
            Err(e) => {
                eprintln!("error: {e}");
                failed += 1;
                continue;
            }
        };
        let secs = |s: usize| s as f64 / rate;
        if args.json {
            docs.push(serde_json::json!({
                "file": file,
                "duration": secs(n),
                "speech": speech.iter().map(|&(s, e)| [secs(s), secs(e)]).collect::<Vec<_>>(),
            }));
            continue;
        }
        if args.files.len() > 1 {
            writeln!(out, "# {file}")?;
        }
        for (s, e) in speech {
            writeln!(out, "{:.3}\t{:.3}", secs(s), secs(e))?;
        }
    }
    if args.json {
        serde_json::to_writer(&mut out, &docs)?;
        writeln!(out)?;
    }
    Ok(if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
