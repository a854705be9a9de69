//! The `sotto` command line: transcribe audio, fetch and convert models.
//!
//! This crate only parses flags, draws progress and writes files; everything else is
//! the `sotto` library.

mod bench;
mod engine;
mod gptq;
mod progress;
#[cfg(feature = "server")]
mod serve;
mod stream;
mod transcribe;
mod vad;
mod writers;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// Whisper speech-to-text, fast on a laptop, a server or a GPU.
#[derive(Parser)]
#[command(name = "sotto", version, about, long_about = None)]
struct Cli {
    /// Model cache folder [env: SOTTO_CACHE_DIR; default: $XDG_CACHE_HOME/sotto or ~/.cache/sotto].
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Transcribe audio and video files (wav, flac, mp3, ogg, opus, m4a, ac3, dts, webm, mkv, avi,
    /// flv, ts, mpg, vob, mxf, dv, mp2, wma, wmv, amr, 3gp, spx, dss, g729, tco; `-` reads stdin).
    Transcribe(Box<transcribe::Args>),
    /// Detect the spoken language of audio files (their first 30 s), with probabilities.
    DetectLanguage {
        /// Audio files (wav, flac, mp3, ogg, opus, m4a, ac3, dts, webm, mkv, avi, flv, ts, mpg, wma,
        /// amr, 3gp, mxf, dv, mp2, spx, dss, g729, tco); `-` reads stdin.
        #[arg(required = true, value_name = "FILES")]
        files: Vec<String>,
        /// A multilingual model name or path.
        #[arg(short, long, default_value = "base", value_name = "NAME|PATH")]
        model: String,
        /// Languages to print per file, most likely first.
        #[arg(short = 'n', long, default_value_t = 5)]
        top: usize,
        /// Print every language.
        #[arg(long)]
        all: bool,
        /// Read up to this many 30 s windows, until one's likeliest language is above
        /// --language-detection-threshold; if none is, the language most often on top wins
        /// (printed first, the others from the last window).
        #[arg(long, default_value_t = 1, value_name = "N")]
        language_detection_segments: usize,
        /// See --language-detection-segments.
        #[arg(long, default_value_t = 0.5, value_name = "P")]
        language_detection_threshold: f64,
        /// Worker threads [default: all cores].
        #[arg(short, long)]
        threads: Option<usize>,
    },
    /// Transcribe a live stream of raw 16 kHz mono PCM (stdin or a pipe) as it arrives, as
    /// whisper.cpp's `whisper-stream`: every --step, the last --length of audio.
    Stream(Box<stream::Args>),
    /// List the stretches of speech in audio files (Silero VAD, as `transcribe --vad` finds
    /// them): `start<TAB>end` seconds per line, or JSON.
    Vad(vad::Args),
    /// List, fetch and locate models.
    #[command(subcommand)]
    Models(ModelsCommand),
    /// Convert a model (CTranslate2 or Hugging Face folder, or ggml .bin) to a whisper.cpp
    /// ggml .bin (f16), a Hugging Face folder (safetensors) or a CTranslate2 folder
    /// (faster-whisper); or a Silero VAD `.onnx` (faster-whisper's) to whisper.cpp's ggml
    /// VAD file (`whisper-cli --vad-model`).
    Convert {
        /// Model name or path to convert; `random:SIZE` (tiny … large-v3-turbo) writes a
        /// model of that published size with random weights, to time a peer on sizes whose
        /// weights are not at hand (its transcripts mean nothing).
        input: String,
        /// Output: a .bin file (ggml) or a folder (hf, ct2).
        output: PathBuf,
        /// Output format: `ggml` (whisper.cpp, f16), `hf` (`transformers`' layout:
        /// config.json, model.safetensors, vocab.json, generation_config.json) or `ct2`
        /// (CTranslate2's: model.bin, vocabulary.txt, config.json, as its converter writes
        /// them). hf and ct2 keep each tensor's float type; not from block-quantized files.
        #[arg(long, default_value = "ggml", value_parser = ["ggml", "hf", "ct2"])]
        to: String,
        /// With `--to ct2`: store the weights as CTranslate2's converter does with this
        /// `--quantization` (byte for byte): int8 (one scale per row), int8_float16,
        /// int8_float32, int16, float16 or float32. faster-whisper runs int8 folders with
        /// its int8 kernels; sotto reads them as q8_0. A q8_0 source is read as its values.
        #[arg(long, value_parser = sotto::formats::ct2::Quantization::NAMES)]
        quantization: Option<String>,
    },
    /// Serve transcription over HTTP: whisper.cpp's `/inference` and `/load`, OpenAI's
    /// `/v1/audio/transcriptions` and `/translations`, from one model shared by workers.
    #[cfg(feature = "server")]
    Serve(Box<serve::Args>),
    /// Measure mel, encoder and decoder speed, end-to-end real-time factor and peak RSS.
    Bench(bench::Args),
    /// Quantize a model to a whisper.cpp ggml .bin, as whisper.cpp's `whisper-quantize` does.
    Quantize {
        /// Model name or path (CTranslate2 folder, Hugging Face folder, or ggml .bin in f16
        /// or f32). A CTranslate2 int8 folder (or a q8_0 file) becomes a q8_0 file with
        /// the very same 8-bit codes; it is not quantized again to another type.
        input: String,
        /// Output .bin file.
        output: PathBuf,
        /// Block type of the 2-D weights.
        #[arg(value_parser = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"])]
        r#type: String,
        /// Choose each block's scale (and minimum) by weighted least squares instead of
        /// ggml's rule (largest value at the end of the code range): same format, whisper.cpp
        /// loads it, lower error for the 4- and 5-bit types; not byte-identical to
        /// `whisper-quantize`'s output.
        #[arg(long)]
        refine: bool,
        /// GPTQ: transcribe these audio files first (on the CPU, greedy) and record every
        /// layer's inputs, then quantize each weight matrix column by column, passing each
        /// rounding error on to the columns not yet rounded so the layer's outputs on those
        /// inputs stay close. Same format; whisper.cpp loads it. A few minutes of speech
        /// like the audio the model will hear is enough.
        #[arg(long, value_name = "AUDIO", num_args = 1..)]
        calibrate: Vec<PathBuf>,
        /// Worker threads for --calibrate [default: all cores].
        #[arg(short, long)]
        threads: Option<usize>,
    },
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Download a model into the cache (no-op when it is already there).
    Fetch {
        /// Model names, e.g. tiny.en, base.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// List known model names and whether each is cached.
    List,
    /// Print the local path of a model, fetching it first if needed.
    Path { name: String },
}

/// glibc raises its mmap threshold to the size of each large block freed, up to 32 MiB, so
/// after the first encoder window most multi-MiB buffers (KV caches, logits, scratch) come
/// from the heap, where `calloc` must write its zeros and every page counts as resident.
/// A fixed threshold keeps them as fresh mappings whose untouched pages cost nothing:
/// 15–30 MiB less peak memory on tiny.en and base (sotto keeps its hot buffers between
/// calls, so this adds no page faults to the loop).
fn allocator_policy() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes the allocator; it is called before any other thread
    // exists, with a documented parameter and value.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

fn main() -> ExitCode {
    allocator_policy();
    let cli = Cli::parse();
    if let Some(dir) = &cli.cache_dir {
        // The CUDA backend keeps its compiled kernels in the model cache too, and reads
        // where it is from the environment. Still one thread here, so the write is safe.
        std::env::set_var("SOTTO_CACHE_DIR", dir);
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // One line: the chain of causes, outermost first.
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", dedup_chain(&msg));
            ExitCode::FAILURE
        }
    }
}

/// Joins an error chain, dropping causes already quoted by the message above them.
fn dedup_chain(msgs: &[String]) -> String {
    let mut out = String::new();
    for m in msgs {
        if !out.contains(m.as_str()) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(m);
        }
    }
    out
}

fn hub(cli_cache: &Option<PathBuf>) -> sotto::hub::Hub {
    let hub = sotto::hub::Hub::from_env();
    match cli_cache {
        Some(dir) => hub.with_cache_dir(dir.clone()),
        None => hub,
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let hub = hub(&cli.cache_dir);
    match cli.command {
        Command::Transcribe(args) => transcribe::run(&hub, *args),
        Command::Bench(args) => bench::run(&hub, args),
        Command::Vad(args) => vad::run(&hub, args),
        Command::Stream(args) => stream::run(&hub, *args),
        #[cfg(feature = "server")]
        Command::Serve(args) => serve::run(&hub, *args),
        Command::DetectLanguage {
            files,
            model,
            top,
            all,
            language_detection_segments,
            language_detection_threshold,
            threads,
        } => detect_language(
            &hub,
            &files,
            &model,
            if all { usize::MAX } else { top },
            (language_detection_segments, language_detection_threshold),
            engine::threads(threads)?,
        ),
        Command::Models(ModelsCommand::Fetch { names }) => {
            for name in names {
                let path = hub.fetch(&name, &mut progress::Download::new())?;
                println!("{name}\t{}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Models(ModelsCommand::List) => {
            for name in sotto::hub::known_models() {
                match hub.cached(name) {
                    Some(p) => println!("{name}\t{}", p.display()),
                    None => println!("{name}\t(not downloaded)"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Models(ModelsCommand::Path { name }) => {
            let path = hub.resolve(&name, &mut progress::Download::new())?;
            println!("{}", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Convert {
            input,
            output,
            to,
            quantization,
        } => {
            if quantization.is_some() && to != "ct2" {
                anyhow::bail!("--quantization is for --to ct2 (for ggml files: sotto quantize)");
            }
            if input.ends_with(".onnx") {
                // A Silero VAD: whisper.cpp's ggml VAD file of its weights.
                if to != "ggml" {
                    anyhow::bail!("{input}: a VAD converts to ggml only (--to ggml)");
                }
                let bytes = std::fs::read(&input).with_context(|| input.clone())?;
                let ggml = sotto::ggml_vad_from_onnx(&bytes, std::path::Path::new(&input))?;
                std::fs::write(&output, ggml).with_context(|| output.display().to_string())?;
                eprintln!("wrote {}", output.display());
                return Ok(ExitCode::SUCCESS);
            }
            let (file, path) = match input.strip_prefix("random:") {
                Some(size) => {
                    let h = sotto::formats::random::hparams(size).with_context(|| {
                        let sizes = sotto::formats::random::SIZES.join(", ");
                        format!("no model size {size:?} (sizes: {sizes})")
                    })?;
                    (sotto::formats::random::whisper(h, 1), PathBuf::from(&input))
                }
                None => {
                    let path = hub.resolve(&input, &mut progress::Download::new())?;
                    (sotto::formats::load(&path)?, path)
                }
            };
            if let Some(note) = &file.config.weights_note {
                eprintln!("model: {note}");
            }
            if to == "hf" {
                sotto::formats::hf::write(&file, &output)?;
            } else if to == "ct2" {
                let specials = sotto::special_token_texts(file.hparams.n_vocab, file.vocab.len())
                    .with_context(|| {
                    format!(
                        "{}: {} embeddings for {} ordinary tokens leave no whole set of \
                                 Whisper's special tokens",
                        path.display(),
                        file.hparams.n_vocab,
                        file.vocab.len()
                    )
                })?;
                match quantization.as_deref() {
                    Some(q) => {
                        let q = sotto::formats::ct2::Quantization::from_name(q)
                            .expect("clap checked the name");
                        sotto::formats::ct2::write_quantized(&file, &specials, &output, q)?
                    }
                    None => sotto::formats::ct2::write(&file, &specials, &output)?,
                }
            } else {
                let filters = sotto::audio::mel_filters(file.hparams.n_mels);
                sotto::formats::ggml::write(&file, &filters, &output)?;
            }
            eprintln!("wrote {}", output.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Quantize {
            input,
            output,
            r#type,
            refine,
            calibrate,
            threads,
        } => quantize(
            &hub,
            &input,
            &output,
            &r#type,
            refine,
            &calibrate,
            engine::threads(threads)?,
        ),
    }
}

/// `sotto detect-language`: per file, its top `top` languages as `file<TAB>code<TAB>p`;
/// `(segments, threshold)`: faster-whisper's `language_detection_*`.
fn detect_language(
    hub: &sotto::hub::Hub,
    files: &[String],
    model: &str,
    top: usize,
    (segments, threshold): (usize, f64),
    threads: usize,
) -> anyhow::Result<ExitCode> {
    let model = sotto::Model::load_named(model, hub, &mut progress::Download::new())?;
    let mut session = model.session(threads)?;
    let mut failed = false;
    for file in files {
        let detected = sotto::audio::load_16k_mono(file)
            .map_err(anyhow::Error::from)
            .and_then(|samples| Ok(session.detect_language_with(&samples, segments, threshold)?));
        match detected {
            Ok(d) if d.all.first().map(|a| a.0) != Some(d.language) => {
                // Decided by a vote over windows: the winner with its best probability,
                // then the others of the last window.
                println!("{file}\t{}\t{:.4}", d.language, d.probability);
                let others = d.all.iter().filter(|a| a.0 != d.language);
                for (code, p) in others.take(top.saturating_sub(1)) {
                    println!("{file}\t{code}\t{p:.4}");
                }
            }
            Ok(d) => {
                for (code, p) in d.all.iter().take(top) {
                    println!("{file}\t{code}\t{p:.4}");
                }
            }
            Err(e) => {
                let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
                let msg = dedup_chain(&msg);
                // Audio errors already begin with the file's name.
                match msg.starts_with(&format!("{file}: ")) {
                    true => eprintln!("error: {msg}"),
                    false => eprintln!("error: {file}: {msg}"),
                }
                failed = true;
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `sotto quantize`: load any model, write its 2-D weights as `kind` blocks. A ggml
/// input keeps its own mel filters (as whisper-quantize copies them). With `calibrate`
/// clips, GPTQ from the inputs the model's layers see while transcribing them.
fn quantize(
    hub: &sotto::hub::Hub,
    input: &str,
    output: &std::path::Path,
    kind: &str,
    refine: bool,
    calibrate: &[PathBuf],
    threads: usize,
) -> anyhow::Result<ExitCode> {
    use sotto_quant::QuantType;
    let t = QuantType::parse(kind).ok_or_else(|| anyhow::anyhow!("unknown type {kind}"))?;
    let dtype = match t {
        QuantType::Q8_1 => anyhow::bail!("q8_1 is an activation type, not a weight type"),
        t => sotto::formats::ggml::dtype_from_ggml(t.ggml_type_id())
            .expect("every ggml weight type has a dtype"),
    };
    let path = hub.resolve(input, &mut progress::Download::new())?;
    let file = sotto::formats::load(&path)?;
    if let Some(note) = &file.config.weights_note {
        eprintln!("model: {note}");
    }
    let filters = match &file.mel_filters {
        Some(f) => f.clone(),
        None => sotto::audio::mel_filters(file.hparams.n_mels),
    };
    let copied = file.tensors.values().any(|t| t.dtype == dtype);
    if copied && (refine || !calibrate.is_empty()) {
        // Its matrices are copied as they are: there is nothing to refine or calibrate.
        anyhow::bail!("{input} is already {kind}: --refine and --calibrate need a float model");
    }
    let stats = if calibrate.is_empty() {
        Default::default()
    } else {
        calibration_stats(&path, calibrate, threads)?
    };
    let gptq = gptq::Factors::new(stats);
    let quantize = |name: &str, x: &[f32], n: usize, out: &mut [u8]| {
        if gptq.quantize(name, t, x, n, out) {
            return;
        }
        let row_bytes = t.row_bytes(n);
        for (xr, qr) in x.chunks_exact(n).zip(out.chunks_exact_mut(row_bytes)) {
            if refine {
                sotto_quant::quantize_row_refined(t, xr, qr)
            } else {
                sotto_quant::quantize_row(t, xr, qr)
            }
        }
    };
    sotto::formats::ggml::write_quantized_matrices(&file, &filters, output, dtype, &quantize)?;
    if let Some(e) = gptq.error() {
        // Not the file asked for: some matrices missed their GPTQ step.
        let _ = std::fs::remove_file(output);
        anyhow::bail!("GPTQ: {e}");
    }
    let how = match (gptq.used(), refine) {
        (0, false) => String::new(),
        (0, true) => ", refined scales".into(),
        (k, _) => format!(", GPTQ on {k} matrices"),
    };
    eprintln!("wrote {} ({t}{how})", output.display());
    Ok(ExitCode::SUCCESS)
}

/// Transcribes the calibration clips with the f32 encoder and returns every linear
/// layer's input statistics.
fn calibration_stats(
    path: &std::path::Path,
    clips: &[PathBuf],
    threads: usize,
) -> anyhow::Result<std::collections::BTreeMap<String, sotto::model::InputStats>> {
    let opts = sotto::LoadOptions {
        encoder: sotto::EncoderPrecision::F32,
        exact_logits: true,
        quantize_decoder: false,
    };
    let model = sotto::Model::load_with(path, sotto::Device::Cpu, opts)?;
    let audio = clips
        .iter()
        .map(|p| {
            sotto::audio::load_16k_mono(&p.to_string_lossy())
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let seconds: f64 = audio.iter().map(|a| a.len() as f64 / 16_000.0).sum();
    eprintln!(
        "calibrating on {} clips ({seconds:.0} s of audio)",
        audio.len()
    );
    let decode = sotto::TranscribeOptions {
        beam_size: 1,
        ..Default::default()
    };
    let stats = model.calibrate(&audio, threads, &decode, &mut |i, t| {
        eprintln!(
            "  {}: {} words",
            clips[i].display(),
            t.text().split_whitespace().count()
        );
    })?;
    Ok(stats)
}
