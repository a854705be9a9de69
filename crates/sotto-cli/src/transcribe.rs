//! `sotto transcribe`: flags, the per-file loop, and where output goes.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use sotto::audio::diarize::Speaker;
use sotto::{Model, Task, TranscribeOptions, Transcript};

use crate::progress;
use crate::writers::{Extras, Format, RunInfo};

#[derive(clap::Args)]
pub struct Args {
    /// Audio files to transcribe (wav, flac, mp3, ogg, opus, m4a, ac3, dts, webm, mkv, avi, flv, ts,
    /// mpg, vob, mxf, dv, mp2, wma, wmv, amr, 3gp, spx, dss, g729, tco at any rate); `-` reads stdin.
    #[arg(required = true, value_name = "FILES")]
    files: Vec<String>,

    /// Model name (tiny.en, base, ...; fetched on first use) or path to a
    /// CTranslate2 folder or ggml .bin.
    #[arg(short, long, default_value = "tiny.en", value_name = "NAME|PATH")]
    model: String,

    /// Spoken language code (en, de, ...), or `auto` to detect it. English-only
    /// models always use `en`.
    #[arg(short, long, value_name = "LANG")]
    language: Option<String>,

    /// Translate to English instead of transcribing (same as `--task translate`).
    #[arg(long)]
    translate: bool,

    /// What to do with the speech [default: transcribe]
    #[arg(long, value_parser = ["transcribe", "translate"])]
    task: Option<String>,

    #[command(flatten)]
    engine: crate::engine::EngineArgs,

    /// Initial prompt: text that precedes the audio, to steer spelling and style.
    #[arg(long, value_name = "TEXT")]
    prompt: Option<String>,

    /// Keep the initial prompt at the head of every window's prompt.
    #[arg(long)]
    carry_initial_prompt: bool,

    /// Most tokens of earlier text (initial prompt included) a window's prompt carries,
    /// counting its `<|startofprev|>` (whisper-cli's -mc): 0 carries none. Default 224,
    /// half the context.
    #[arg(long, value_name = "N")]
    max_context: Option<usize>,

    /// Decode without timestamp tokens (one segment per 30 s window).
    #[arg(long)]
    no_timestamps: bool,

    /// Time each word (from the alignment heads' cross-attention, as faster-whisper);
    /// JSON output gains `words` per segment.
    #[arg(long)]
    word_timestamps: bool,

    /// With word timestamps: punctuation merged into the following word.
    #[arg(long, value_name = "CHARS", default_value = sotto::PREPEND_PUNCTUATIONS)]
    prepend_punctuations: String,

    /// With word timestamps: punctuation merged into the previous word.
    #[arg(long, value_name = "CHARS", default_value = sotto::APPEND_PUNCTUATIONS)]
    append_punctuations: String,

    /// Show each word's confidence on the console: coloured on a terminal, otherwise
    /// low-confidence words (p < 0.5) in brackets. Implies --word-timestamps.
    #[arg(long)]
    print_confidence: bool,

    /// Output format; repeat for several. Without it, timestamped lines go to stdout.
    #[arg(short = 'f', long = "format", value_enum, value_name = "FORMAT")]
    formats: Vec<Format>,

    /// Output file, or a folder for `<stem>.<ext>` files (needed for several inputs or formats).
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,

    /// Number SRT cues from N + 1 (whisper-cli's -on: subtitles of a part that follows
    /// others) [default: 0]
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    offset_n: usize,

    /// Transcribe only the speech the Silero VAD finds, as faster-whisper's `vad_filter`
    /// (its model comes from faster-whisper's PyPI wheel on first use); times stay the
    /// original audio's.
    #[arg(long)]
    vad: bool,

    #[command(flatten)]
    vad_args: crate::vad::VadArgs,

    /// Decode up to N chunks of speech together, as faster-whisper's
    /// BatchedInferencePipeline (`batch_size`): the VAD (implied, with that mode's defaults:
    /// 160 ms of silence ends speech, stretches of at most 30 s) cuts the audio, stretches
    /// are joined into chunks of up to 30 s, and each decoder pass reads the weights once
    /// for all N windows. No window sees another's text; the first --temperature (0)
    /// decodes them together, and a window that fails the thresholds alone tries the
    /// others (`--temperature 0`: none, as faster-whisper's batched mode); word timing
    /// works. With --clip-timestamps (or --offset/--duration) the clips are the chunks
    /// instead, without the VAD (longer ones cut into 30 s pieces).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    batch_size: Option<u32>,

    /// Label each segment with the louder channel of a stereo recording, as whisper.cpp's
    /// --diarize: `(speaker 0)`, `(speaker 1)` or `(speaker ?)` before the text, `speaker`
    /// in JSON (one voice per channel: calls, interviews)
    #[arg(long)]
    diarize: bool,

    /// Print where the time went to stderr.
    #[arg(long)]
    timings: bool,

    /// Do not draw progress bars.
    #[arg(long)]
    no_progress: bool,

    #[command(flatten)]
    decoding: Box<Decoding>,
}

/// Decoding options; each defaults to faster-whisper 1.2.1's `transcribe()` default.
#[derive(clap::Args)]
#[command(next_help_heading = "Decoding")]
pub struct Decoding {
    /// Beams at temperature 0; 1 decodes greedily [default: 5]
    #[arg(long, value_name = "N")]
    beam_size: Option<usize>,

    /// Candidates sampled at each temperature above 0 [default: 5]
    #[arg(long, value_name = "N")]
    best_of: Option<usize>,

    /// Beam search stops after beam-size × patience finished hypotheses [default: 1]
    #[arg(long, value_name = "X")]
    patience: Option<f64>,

    /// Rank hypotheses by sum log-prob / length^X [default: 1]
    #[arg(long, value_name = "X")]
    length_penalty: Option<f64>,

    /// Temperatures tried in turn when a decoding fails the thresholds
    /// [default: 0,0.2,0.4,0.6,0.8,1]
    #[arg(long, value_name = "T,..", value_delimiter = ',', num_args = 1..)]
    temperature: Option<Vec<f64>>,

    /// Retry above this compression ratio; `none` disables [default: 2.4]
    #[arg(long, value_name = "X|none", value_parser = parse_threshold)]
    compression_ratio_threshold: Option<Threshold>,

    /// Retry when the last 32 tokens of a longer result are spread below this entropy, in
    /// nats (whisper-cli's -et, 2.4 there); `none` disables [default: none]
    #[arg(long, value_name = "X|none", value_parser = parse_threshold)]
    entropy_threshold: Option<Threshold>,

    /// Retry below this average log-probability; `none` disables [default: -1]
    #[arg(long, value_name = "X|none", value_parser = parse_threshold, allow_hyphen_values = true)]
    logprob_threshold: Option<Threshold>,

    /// Skip windows whose no-speech probability is above this (with a low log-probability);
    /// `none` disables [default: 0.6]
    #[arg(long, value_name = "X|none", value_parser = parse_threshold)]
    no_speech_threshold: Option<Threshold>,

    /// Prompt each window with the text decoded so far [default: true]
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    condition_on_previous_text: Option<bool>,

    /// Drop the prompt after a window decoded above this temperature [default: 0.5]
    #[arg(long, value_name = "T")]
    prompt_reset_on_temperature: Option<f64>,

    /// Token ids never produced, comma-separated; -1 adds the non-speech symbols, an empty
    /// value suppresses nothing [default: -1]
    #[arg(long, value_name = "ID,..", value_delimiter = ',', allow_hyphen_values = true, num_args = 0..)]
    suppress_tokens: Option<Vec<String>>,

    /// Never produce a text token that this regular expression matches in whole, as
    /// whisper.cpp's --suppress-regex (`.*[0-9].*`: no token with a digit)
    #[arg(long, value_name = "REGEX")]
    suppress_regex: Option<String>,

    /// Steer each window's text to a GBNF grammar, as whisper.cpp's --grammar: the grammar
    /// itself, or a file holding it. Text tokens it cannot take next are lowered by
    /// --grammar-penalty (the text may still end early)
    #[arg(long, value_name = "GBNF|PATH")]
    grammar: Option<String>,

    /// The grammar's start rule [default: root]
    #[arg(long, value_name = "NAME", requires = "grammar")]
    grammar_rule: Option<String>,

    /// How much the scores (logits) of tokens outside the grammar are lowered [default: 100]
    #[arg(long, value_name = "X", requires = "grammar")]
    grammar_penalty: Option<f64>,

    /// Forbid a blank first token [default: true]
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    suppress_blank: Option<bool>,

    /// Lower the scores of tokens a window already produced: positive logits divided by
    /// X, negative ones multiplied; above 1 discourages repetition [default: 1, off]
    #[arg(long, value_name = "X")]
    repetition_penalty: Option<f64>,

    /// Never repeat an n-gram of this many tokens within a window [default: 0, off]
    #[arg(long, value_name = "N")]
    no_repeat_ngram_size: Option<usize>,

    /// Detect the language of every 30 s window and transcribe each in its own
    /// (multilingual models; faster-whisper's `multilingual`)
    #[arg(long)]
    multilingual: bool,

    /// Language detection: stop at the first window whose likeliest language is above this
    /// probability [default: 0.5]
    #[arg(long, value_name = "P")]
    language_detection_threshold: Option<f64>,

    /// Language detection: read up to this many 30 s windows; if none passes the
    /// threshold, the language most often on top wins [default: 1]
    #[arg(long, value_name = "N")]
    language_detection_segments: Option<usize>,

    /// Latest first timestamp of a window, seconds [default: 1]
    #[arg(long, value_name = "SECONDS")]
    max_initial_timestamp: Option<f64>,

    /// Most tokens decoded per window [default: half the context]
    #[arg(long, value_name = "N")]
    max_new_tokens: Option<usize>,

    /// Seed of the sampler at temperatures above 0 [default: 0]
    #[arg(long, value_name = "N")]
    seed: Option<u64>,

    /// Text the transcript must begin with (first window only; it is part of the output)
    #[arg(long, value_name = "TEXT")]
    prefix: Option<String>,

    /// Words or phrases to steer spelling, prompted before every window (not with --prefix)
    #[arg(long, value_name = "TEXT")]
    hotwords: Option<String>,

    /// Stretches to transcribe, in seconds: start,end,start,end,..; an odd count runs the
    /// last one to the end [default: all]
    #[arg(long, value_name = "S,..", value_delimiter = ',', num_args = 1.., conflicts_with_all = ["offset", "duration"])]
    clip_timestamps: Option<Vec<f64>>,

    /// Start transcribing this many seconds into the audio [default: 0]
    #[arg(long, value_name = "SECONDS")]
    offset: Option<f64>,

    /// Transcribe at most this many seconds (from --offset) [default: all]
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,

    /// Skip silences longer than this many seconds before a likely hallucination, and drop
    /// it; times words [default: off]
    #[arg(long, value_name = "SECONDS")]
    hallucination_silence_threshold: Option<f64>,

    /// Windows whose loudest log-mel value stays below this are silence and are not decoded
    /// (-1.5 is digital silence, -0.6 noise at about -80 dBFS); `none` decodes every window
    /// [default: -0.6]
    #[arg(long, value_name = "X|none", value_parser = parse_threshold, allow_hyphen_values = true)]
    silence_floor: Option<Threshold>,

    /// Skip a window as silence when every decoding attempt failed and its no-speech
    /// probability is above the threshold (a repetition loop over noise) [default: true]
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    silence_on_failed_fallback: Option<bool>,

    /// Split segments longer than this many characters between words; times words
    /// [default: no limit]
    #[arg(long, visible_alias = "max-len", value_name = "N")]
    max_segment_chars: Option<usize>,

    /// Split segments of more than this many text tokens between words; times words
    /// [default: no limit]
    #[arg(long, value_name = "N")]
    max_segment_tokens: Option<usize>,

    /// Seconds of audio per window, 1 to 30, zero-padded to 30 s for the encoder
    /// (faster-whisper's chunk_length; with --batch-size, the longest chunk) [default: 30]
    #[arg(long, value_name = "SECONDS")]
    chunk_length: Option<usize>,

    /// Encoder positions per window, 20 ms each (whisper-cli's -ac): shorter windows, a
    /// faster encoder (500: 10 s windows, the encoder 3–4× faster), text perhaps worse;
    /// one window at a time (not with --batch-size); 0: all [default: 0, 30 s]
    #[arg(long, value_name = "N")]
    audio_ctx: Option<usize>,
}

/// `[offset, offset + duration]` as clip timestamps (an open end without a duration).
fn offset_clip(offset: Option<f64>, duration: Option<f64>) -> anyhow::Result<Vec<f64>> {
    let start = offset.unwrap_or(0.0);
    if !(start.is_finite() && start >= 0.0) {
        bail!("--offset: {start} is not a time in seconds >= 0");
    }
    Ok(match duration {
        None if offset.is_none() => Vec::new(),
        None => vec![start],
        Some(d) if d.is_finite() && d > 0.0 => vec![start, start + d],
        Some(d) => bail!("--duration: {d} is not a positive number of seconds"),
    })
}

/// A threshold value, or disabled.
#[derive(Clone, Copy, Debug)]
struct Threshold(Option<f64>);

fn parse_threshold(s: &str) -> Result<Threshold, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(Threshold(None));
    }
    s.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .map(|x| Threshold(Some(x)))
        .ok_or_else(|| format!("{s:?} is neither a number nor `none`"))
}

impl Decoding {
    /// Sets every given option on `opts`.
    pub fn apply(&self, opts: &mut TranscribeOptions) -> anyhow::Result<()> {
        let set = |dst: &mut Option<f64>, src: Option<Threshold>| {
            if let Some(Threshold(t)) = src {
                *dst = t;
            }
        };
        opts.beam_size = self.beam_size.unwrap_or(opts.beam_size);
        opts.best_of = self.best_of.unwrap_or(opts.best_of);
        opts.patience = self.patience.unwrap_or(opts.patience);
        opts.length_penalty = self.length_penalty.unwrap_or(opts.length_penalty);
        if let Some(t) = &self.temperature {
            opts.temperatures = t.clone();
        }
        set(
            &mut opts.compression_ratio_threshold,
            self.compression_ratio_threshold,
        );
        set(&mut opts.entropy_threshold, self.entropy_threshold);
        set(&mut opts.log_prob_threshold, self.logprob_threshold);
        set(&mut opts.no_speech_threshold, self.no_speech_threshold);
        opts.condition_on_previous_text = self
            .condition_on_previous_text
            .unwrap_or(opts.condition_on_previous_text);
        opts.prompt_reset_on_temperature = self
            .prompt_reset_on_temperature
            .unwrap_or(opts.prompt_reset_on_temperature);
        if let Some(ids) = &self.suppress_tokens {
            opts.suppress_tokens = ids
                .iter()
                .filter(|s| !s.trim().is_empty())
                .map(|s| {
                    s.trim()
                        .parse::<i64>()
                        .with_context(|| format!("--suppress-tokens: {s:?} is not a token id"))
                })
                .collect::<anyhow::Result<_>>()?;
        }
        opts.suppress_regex = self.suppress_regex.clone().or(opts.suppress_regex.take());
        if let Some(g) = &self.grammar {
            // whisper.cpp's rule: a file if one is there, else the grammar itself.
            let path = std::path::Path::new(g);
            opts.grammar = Some(if path.is_file() {
                std::fs::read_to_string(path)
                    .with_context(|| format!("--grammar: reading {}", path.display()))?
            } else {
                g.clone()
            });
        }
        if let Some(rule) = &self.grammar_rule {
            opts.grammar_rule = rule.clone();
        }
        opts.grammar_penalty = self.grammar_penalty.unwrap_or(opts.grammar_penalty);
        opts.suppress_blank = self.suppress_blank.unwrap_or(opts.suppress_blank);
        opts.repetition_penalty = self.repetition_penalty.unwrap_or(opts.repetition_penalty);
        opts.no_repeat_ngram_size = self
            .no_repeat_ngram_size
            .unwrap_or(opts.no_repeat_ngram_size);
        opts.multilingual |= self.multilingual;
        opts.language_detection_threshold = self
            .language_detection_threshold
            .unwrap_or(opts.language_detection_threshold);
        opts.language_detection_segments = self
            .language_detection_segments
            .unwrap_or(opts.language_detection_segments);
        opts.max_initial_timestamp = self
            .max_initial_timestamp
            .unwrap_or(opts.max_initial_timestamp);
        opts.max_new_tokens = self.max_new_tokens.or(opts.max_new_tokens);
        opts.chunk_length = self.chunk_length.or(opts.chunk_length);
        if let Some(n) = self.audio_ctx {
            opts.audio_ctx = (n > 0).then_some(n);
        }
        opts.seed = self.seed.unwrap_or(opts.seed);
        opts.prefix = self.prefix.clone().or(opts.prefix.take());
        opts.hotwords = self.hotwords.clone().or(opts.hotwords.take());
        opts.clip_timestamps = match &self.clip_timestamps {
            Some(c) => c.clone(),
            None => offset_clip(self.offset, self.duration)?,
        };
        opts.hallucination_silence_threshold = self
            .hallucination_silence_threshold
            .or(opts.hallucination_silence_threshold);
        set(&mut opts.silence_floor, self.silence_floor);
        opts.silence_on_failed_fallback = self
            .silence_on_failed_fallback
            .unwrap_or(opts.silence_on_failed_fallback);
        opts.max_segment_chars = self.max_segment_chars.or(opts.max_segment_chars);
        opts.max_segment_tokens = self.max_segment_tokens.or(opts.max_segment_tokens);
        Ok(())
    }
}

/// Where one file's transcript goes.
enum Sink {
    /// Timestamped lines as segments complete.
    Console,
    /// The given formats, concatenated on stdout.
    Stdout(Vec<Format>),
    /// One file per format in a folder.
    Folder(PathBuf, Vec<Format>),
    /// A single file in one format.
    File(PathBuf, Format),
}

fn plan_output(args: &Args) -> anyhow::Result<Sink> {
    let Some(out) = &args.output else {
        return Ok(if args.formats.is_empty() {
            Sink::Console
        } else {
            Sink::Stdout(args.formats.clone())
        });
    };
    let several = args.files.len() > 1 || args.formats.len() > 1;
    if out.is_dir() || out.as_os_str().to_string_lossy().ends_with('/') || several {
        if out.is_file() {
            bail!(
                "{}: is a file, but several inputs or formats need a folder",
                out.display()
            );
        }
        let formats = if args.formats.is_empty() {
            vec![Format::Txt]
        } else {
            args.formats.clone()
        };
        // Each format writes `<input stem>.<extension>`: two with one extension would
        // overwrite each other.
        for (i, a) in formats.iter().enumerate() {
            if let Some(b) = formats[..i].iter().find(|b| b.extension() == a.extension()) {
                let name = |f: &Format| {
                    clap::ValueEnum::to_possible_value(f).map(|v| v.get_name().to_string())
                };
                bail!(
                    "formats {} and {} both write .{} files: pick one",
                    name(b).unwrap_or_default(),
                    name(a).unwrap_or_default(),
                    a.extension()
                );
            }
        }
        return Ok(Sink::Folder(out.clone(), formats));
    }
    let format = match args.formats.first() {
        Some(f) => *f,
        None => Format::from_extension(out).unwrap_or(Format::Txt),
    };
    Ok(Sink::File(out.clone(), format))
}

pub fn run(hub: &sotto::hub::Hub, args: Args) -> anyhow::Result<ExitCode> {
    let device = args.engine.device()?;
    let sink = plan_output(&args)?;
    let threads = args.engine.threads()?;
    let t_load = Instant::now();
    let model = Model::load_named_with(
        &args.model,
        hub,
        &mut progress::Download::new(),
        device,
        args.engine.load_options()?,
    )?;
    let load_time = t_load.elapsed();
    crate::engine::device_note(&args.engine, &model);
    let mut session = model.session(threads)?;

    let mut opts = TranscribeOptions {
        language: args.language.clone(),
        task: if args.translate || args.task.as_deref() == Some("translate") {
            Task::Translate
        } else {
            Task::Transcribe
        },
        initial_prompt: args.prompt.clone(),
        carry_initial_prompt: args.carry_initial_prompt,
        max_context: args.max_context,
        without_timestamps: args.no_timestamps,
        // whisper-cli's -ojf times every token; here each its word's times.
        word_timestamps: args.word_timestamps
            || args.print_confidence
            || args.formats.contains(&Format::CppJsonFull),
        prepend_punctuations: args.prepend_punctuations.clone(),
        append_punctuations: args.append_punctuations.clone(),
        ..TranscribeOptions::default()
    };
    args.decoding.apply(&mut opts)?;

    let batched = args.batch_size.is_some();
    if !(args.vad || batched) && args.vad_args.given() {
        bail!("the --vad-* options apply with --vad or --batch-size");
    }
    let clips = batched && !opts.clip_timestamps.is_empty();
    if clips && (args.vad || args.vad_args.given()) {
        bail!("--batch-size with --clip-timestamps (or --offset/--duration) takes the clips as its chunks: no VAD");
    }
    let vad = if (args.vad || batched) && !clips {
        if !opts.clip_timestamps.is_empty() {
            bail!(
                "--vad and --batch-size do not combine with --clip-timestamps, --offset or \
                 --duration"
            );
        }
        let base = if batched {
            sotto::VadOptions::batched()
        } else {
            sotto::VadOptions::default()
        };
        Some(args.vad_args.load_with(hub, base)?)
    } else {
        None
    };

    let language = match &args.language {
        Some(l) => l.as_str(),
        None if model.is_multilingual() => "auto",
        None => "en",
    };
    let run_info = RunInfo {
        model: &args.model,
        hparams: *model.hparams(),
        tokenizer: model.tokenizer(),
        weight_type: model.weight_type(),
        language,
        translate: opts.task == Task::Translate,
    };
    let out = Output {
        sink: &sink,
        run: &run_info,
        srt_offset: args.offset_n,
    };
    let mut failed = 0;
    for input in &args.files {
        if let Err(e) = transcribe_one(&mut session, vad.as_ref(), input, &opts, &out, &args) {
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", crate::dedup_chain(&msg));
            failed += 1;
        }
    }
    if args.timings {
        eprintln!("model load: {:.0} ms", load_time.as_secs_f64() * 1e3);
    }
    // The process ends here: the OS takes back the weights' hundreds of MB at once, where
    // dropping them frees and unmaps them piece by piece (~25 ms for base).
    std::mem::forget(session);
    std::mem::forget(model);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn transcribe_one(
    session: &mut sotto::Session,
    vad: Option<&sotto::Vad>,
    input: &str,
    opts: &TranscribeOptions,
    out: &Output,
    args: &Args,
) -> anyhow::Result<()> {
    let sink = out.sink;
    let t_audio = Instant::now();
    let sotto::audio::Audio16k {
        mono: samples,
        stereo,
    } = sotto::audio::load_16k(input, args.diarize)?;
    let audio_time = t_audio.elapsed();
    if args.diarize && stereo.is_none() {
        eprintln!("note: {input} has one channel; --diarize needs a stereo recording");
    }
    let speaker = |s: &sotto::Segment| {
        (stereo.as_ref()).map(|ch| sotto::audio::diarize::speaker(ch, s.start, s.end))
    };
    let duration = samples.len() as f64 / sotto::audio::SAMPLE_RATE as f64;

    let bar = (!args.no_progress && duration > 30.0).then(|| progress::audio_bar(duration, input));
    let stdout = io::stdout();
    let colour = io::IsTerminal::is_terminal(&stdout);
    let mut console_err: Option<io::Error> = None;
    let (transcript, timings) = {
        let mut on_segment = |s: &sotto::Segment| {
            if let Some(bar) = &bar {
                bar.set_position((s.end * 100.0) as u64);
            }
            if matches!(sink, Sink::Console) {
                let text = if args.print_confidence && !s.words.is_empty() {
                    confidence_text(&s.words, colour)
                } else {
                    s.text.trim().to_string()
                };
                let text = crate::writers::labelled_text(&text, speaker(s));
                let line = if args.no_timestamps {
                    text
                } else {
                    format!("[{} --> {}]  {}", clock(s.start), clock(s.end), text)
                };
                let r = match &bar {
                    Some(bar) => bar.suspend(|| writeln!(stdout.lock(), "{line}")),
                    None => writeln!(stdout.lock(), "{line}"),
                };
                if let Err(e) = r {
                    console_err = Some(e);
                    return false;
                }
            }
            true
        };
        match (vad, args.batch_size) {
            (None, Some(n)) => {
                session.transcribe_batched_clips(&samples, opts, n as usize, &mut on_segment)
            }
            (Some(vad), Some(n)) => {
                session.transcribe_batched(vad, &samples, opts, n as usize, &mut on_segment)
            }
            (Some(vad), None) => {
                session.transcribe_speech_timed(vad, &samples, opts, &mut on_segment)
            }
            (None, None) => session.transcribe_timed(&samples, opts, &mut on_segment),
        }
        .with_context(|| input.to_string())?
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(e) = console_err {
        if e.kind() != io::ErrorKind::BrokenPipe {
            return Err(e).context("writing to stdout");
        }
    }
    let speakers: Vec<_> = transcript.segments.iter().filter_map(speaker).collect();
    write_outputs(&transcript, &speakers, input, out)?;
    if args.timings {
        let rtf = timings.total.as_secs_f64() / duration.max(1e-9);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        // Steps (one token per sequence) apart from prompt passes and word alignment.
        let others = timings.decode_calls - timings.steps;
        let other = match others {
            0 => String::new(),
            n => format!(
                "; {:.0} ms in {n} prompt and other calls",
                ms(timings.decode.saturating_sub(timings.step_time))
            ),
        };
        eprintln!(
            "{input}: audio {:.1} s decoded in {:.0} ms |{} mel {:.0} ms | encode {:.0} ms ({} windows) | decode {:.0} ms ({} steps at {:.2} ms{other}) | total {:.0} ms | RTF {:.3}",
            duration,
            ms(audio_time),
            match vad {
                Some(_) => format!(" vad {:.0} ms |", ms(timings.vad)),
                None => String::new(),
            },
            ms(timings.mel),
            ms(timings.encode),
            timings.windows,
            ms(timings.decode),
            timings.steps,
            ms(timings.step_time) / timings.steps.max(1) as f64,
            ms(timings.total),
            rtf
        );
    }
    Ok(())
}

/// Below this probability a word counts as unsure.
const LOW_CONFIDENCE: f64 = 0.5;

/// A segment's words marked by probability: on a terminal red below 0.5, yellow below
/// 0.8, green above (whisper.cpp's `--print-colors` in three steps); elsewhere, unsure
/// words in brackets.
fn confidence_text(words: &[sotto::Word], colour: bool) -> String {
    let mut out = String::new();
    for w in words {
        let (space, word) = match w.word.strip_prefix(' ') {
            Some(rest) => (" ", rest),
            None => ("", w.word.as_str()),
        };
        out.push_str(space);
        if colour {
            let code = match w.probability {
                p if p < LOW_CONFIDENCE => 31,
                p if p < 0.8 => 33,
                _ => 32,
            };
            out.push_str(&format!("\x1b[{code}m{word}\x1b[0m"));
        } else if w.probability < LOW_CONFIDENCE {
            out.push_str(&format!("[{word}]"));
        } else {
            out.push_str(word);
        }
    }
    out.trim_start().to_string()
}

/// `HH:MM:SS.mmm`, as whisper.cpp prints segment times.
fn clock(seconds: f64) -> String {
    let ms = (seconds.max(0.0) * 1000.0).round() as u64;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// Where transcripts go, and what whisper.cpp's JSON says about the run.
struct Output<'a> {
    sink: &'a Sink,
    run: &'a RunInfo<'a>,
    srt_offset: usize,
}

fn write_outputs(
    t: &Transcript,
    speakers: &[Speaker],
    input: &str,
    out: &Output,
) -> anyhow::Result<()> {
    let extras = Extras {
        speakers,
        run: Some(out.run),
        srt_offset: out.srt_offset,
    };
    match out.sink {
        Sink::Console => Ok(()),
        Sink::Stdout(formats) => {
            let stdout = io::stdout();
            let mut out = stdout.lock();
            for f in formats {
                if let Err(e) = f.write(t, &extras, &mut out) {
                    if e.kind() == io::ErrorKind::BrokenPipe {
                        return Ok(());
                    }
                    return Err(e).context("writing to stdout");
                }
            }
            Ok(())
        }
        Sink::File(path, format) => write_file(path, *format, t, &extras),
        Sink::Folder(dir, formats) => {
            std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
            let stem = if input == "-" {
                "stdin".to_string()
            } else {
                Path::new(input)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "transcript".into())
            };
            for f in formats {
                let path = dir.join(format!("{stem}.{}", f.extension()));
                write_file(&path, *f, t, &extras)?;
            }
            Ok(())
        }
    }
}

fn write_file(path: &Path, format: Format, t: &Transcript, extras: &Extras) -> anyhow::Result<()> {
    let file = File::create(path).with_context(|| path.display().to_string())?;
    let mut w = BufWriter::new(file);
    format
        .write(t, extras, &mut w)
        .and_then(|_| w.flush())
        .with_context(|| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        decoding: Decoding,
    }

    fn opts(args: &[&str]) -> anyhow::Result<TranscribeOptions> {
        let flags = Flags::try_parse_from(std::iter::once("sotto").chain(args.iter().copied()))?;
        let mut o = TranscribeOptions::default();
        flags.decoding.apply(&mut o)?;
        Ok(o)
    }

    #[test]
    fn confidence_marks_unsure_words() {
        let w = |word: &str, probability| sotto::Word {
            start: 0.0,
            end: 0.1,
            word: word.into(),
            probability,
            tokens: Vec::new(),
            token_times: Vec::new(),
        };
        let words = [w(" Hello", 0.9), w(" wrld", 0.2), w(".", 0.6)];
        assert_eq!(confidence_text(&words, false), "Hello [wrld].");
        let coloured = confidence_text(&words, true);
        assert!(coloured.starts_with("\x1b[32mHello\x1b[0m \x1b[31mwrld"));
    }

    #[test]
    fn decoding_flags_set_options_and_default_to_faster_whisper() {
        assert_eq!(opts(&[]).unwrap(), TranscribeOptions::default());
        let o = opts(&[
            "--beam-size=1",
            "--best-of=2",
            "--patience=2",
            "--length-penalty=0",
            "--temperature=0,0.5",
            "--compression-ratio-threshold=none",
            "--logprob-threshold=-0.5",
            "--no-speech-threshold=0.3",
            "--condition-on-previous-text=false",
            "--prompt-reset-on-temperature=0.9",
            "--suppress-tokens=-1,7",
            "--suppress-blank=false",
            "--max-initial-timestamp=2",
            "--max-new-tokens=40",
            "--seed=9",
            "--repetition-penalty=1.2",
            "--no-repeat-ngram-size=3",
            "--multilingual",
            "--language-detection-threshold=0.8",
            "--language-detection-segments=2",
            "--suppress-regex=.*[0-9].*",
            "--grammar=cmd ::= \" go\"",
            "--grammar-rule=cmd",
            "--grammar-penalty=20",
        ])
        .unwrap();
        assert_eq!(o.grammar.as_deref(), Some("cmd ::= \" go\""));
        assert_eq!((o.grammar_rule.as_str(), o.grammar_penalty), ("cmd", 20.0));
        assert_eq!(o.suppress_regex.as_deref(), Some(".*[0-9].*"));
        assert_eq!((o.repetition_penalty, o.no_repeat_ngram_size), (1.2, 3));
        assert!(o.multilingual);
        assert_eq!(o.language_detection_threshold, 0.8);
        assert_eq!(o.language_detection_segments, 2);
        assert_eq!((o.beam_size, o.best_of), (1, 2));
        assert_eq!((o.patience, o.length_penalty), (2.0, 0.0));
        assert_eq!(o.temperatures, vec![0.0, 0.5]);
        assert_eq!(o.compression_ratio_threshold, None);
        assert_eq!(o.log_prob_threshold, Some(-0.5));
        assert_eq!(o.no_speech_threshold, Some(0.3));
        assert!(!o.condition_on_previous_text && !o.suppress_blank);
        assert_eq!(o.prompt_reset_on_temperature, 0.9);
        assert_eq!(o.suppress_tokens, vec![-1, 7]);
        assert_eq!(o.max_initial_timestamp, 2.0);
        assert_eq!((o.max_new_tokens, o.seed), (Some(40), 9));
        assert!(opts(&["--suppress-tokens="])
            .unwrap()
            .suppress_tokens
            .is_empty());
        assert!(opts(&["--suppress-tokens=x"]).is_err());
        assert!(opts(&["--no-speech-threshold=high"]).is_err());
    }

    #[test]
    fn prompting_range_and_shaping_flags() {
        let o = opts(&[
            "--prefix=And so",
            "--hotwords=Kennedy",
            "--clip-timestamps=1.5,4,10",
            "--hallucination-silence-threshold=2",
            "--silence-floor=-1",
            "--silence-on-failed-fallback=false",
            "--max-len=42",
            "--max-segment-tokens=20",
        ])
        .unwrap();
        assert_eq!(o.prefix.as_deref(), Some("And so"));
        assert_eq!(o.hotwords.as_deref(), Some("Kennedy"));
        assert_eq!(o.clip_timestamps, vec![1.5, 4.0, 10.0]);
        assert_eq!(o.hallucination_silence_threshold, Some(2.0));
        assert_eq!(o.silence_floor, Some(-1.0));
        assert!(!o.silence_on_failed_fallback);
        assert_eq!(
            (o.max_segment_chars, o.max_segment_tokens),
            (Some(42), Some(20))
        );
        assert_eq!(opts(&["--silence-floor=none"]).unwrap().silence_floor, None);
        // --offset and --duration make one clip; they exclude --clip-timestamps.
        assert_eq!(opts(&["--offset=3"]).unwrap().clip_timestamps, vec![3.0]);
        assert_eq!(
            opts(&["--offset=3", "--duration=2"])
                .unwrap()
                .clip_timestamps,
            vec![3.0, 5.0]
        );
        assert_eq!(
            opts(&["--duration=2"]).unwrap().clip_timestamps,
            vec![0.0, 2.0]
        );
        assert!(opts(&["--duration=-2"]).is_err());
        assert!(opts(&["--offset=-1"]).is_err());
        assert!(opts(&["--offset=1", "--clip-timestamps=1,2"]).is_err());
    }
}
