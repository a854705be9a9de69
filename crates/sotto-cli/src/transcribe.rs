//! `sotto transcribe`: flags, the per-file loop, and where output goes.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use sotto::{Model, Task, TranscribeOptions, Transcript};

use crate::progress;
use crate::writers::Format;

#[derive(clap::Args)]
pub struct Args {
    /// Audio files to transcribe (wav, flac, mp3, ogg at any rate); `-` reads stdin.
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

    /// Translate to English instead of transcribing.
    #[arg(long)]
    translate: bool,

    /// Worker threads [default: all cores].
    #[arg(short, long)]
    threads: Option<usize>,

    /// Initial prompt: text that precedes the audio, to steer spelling and style.
    #[arg(long, value_name = "TEXT")]
    prompt: Option<String>,

    /// Decode without timestamp tokens (one segment per 30 s window).
    #[arg(long)]
    no_timestamps: bool,

    /// Output format; repeat for several. Without it, timestamped lines go to stdout.
    #[arg(short = 'f', long = "format", value_enum, value_name = "FORMAT")]
    formats: Vec<Format>,

    /// Output file, or a folder for `<stem>.<ext>` files (needed for several inputs or formats).
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,

    /// Print where the time went to stderr.
    #[arg(long)]
    timings: bool,

    /// Do not draw progress bars.
    #[arg(long)]
    no_progress: bool,
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
        return Ok(Sink::Folder(out.clone(), formats));
    }
    let format = match args.formats.first() {
        Some(f) => *f,
        None => Format::from_extension(out).unwrap_or(Format::Txt),
    };
    Ok(Sink::File(out.clone(), format))
}

pub fn run(hub: &sotto::hub::Hub, args: Args) -> anyhow::Result<ExitCode> {
    let sink = plan_output(&args)?;
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    let t_load = Instant::now();
    let model = Model::load_named(&args.model, hub, &mut progress::Download::new())?;
    let load_time = t_load.elapsed();
    let mut session = model.session(threads)?;

    let opts = TranscribeOptions {
        language: args.language.clone(),
        task: if args.translate {
            Task::Translate
        } else {
            Task::Transcribe
        },
        initial_prompt: args.prompt.clone(),
        without_timestamps: args.no_timestamps,
        ..TranscribeOptions::default()
    };

    let mut failed = 0;
    for input in &args.files {
        if let Err(e) = transcribe_one(&mut session, input, &opts, &sink, &args) {
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", crate::dedup_chain(&msg));
            failed += 1;
        }
    }
    if args.timings {
        eprintln!("model load: {:.0} ms", load_time.as_secs_f64() * 1e3);
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn transcribe_one(
    session: &mut sotto::Session,
    input: &str,
    opts: &TranscribeOptions,
    sink: &Sink,
    args: &Args,
) -> anyhow::Result<()> {
    let t_audio = Instant::now();
    let samples = sotto::audio::load_16k_mono(input)?;
    let audio_time = t_audio.elapsed();
    let duration = samples.len() as f64 / sotto::audio::SAMPLE_RATE as f64;

    let bar = (!args.no_progress && duration > 30.0).then(|| progress::audio_bar(duration, input));
    let stdout = io::stdout();
    let mut console_err: Option<io::Error> = None;
    let (transcript, timings) = {
        let mut on_segment = |s: &sotto::Segment| {
            if let Some(bar) = &bar {
                bar.set_position((s.end * 100.0) as u64);
            }
            if matches!(sink, Sink::Console) {
                let line = if args.no_timestamps {
                    s.text.trim().to_string()
                } else {
                    format!(
                        "[{} --> {}]  {}",
                        clock(s.start),
                        clock(s.end),
                        s.text.trim()
                    )
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
        session
            .transcribe_timed(&samples, opts, &mut on_segment)
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
    write_outputs(&transcript, input, sink)?;
    if args.timings {
        let rtf = timings.total.as_secs_f64() / duration.max(1e-9);
        eprintln!(
            "{input}: audio {:.1} s decoded in {:.0} ms | mel {:.0} ms | encode {:.0} ms ({} windows) | decode {:.0} ms ({} calls, {:.2} ms/call) | total {:.0} ms | RTF {:.3}",
            duration,
            audio_time.as_secs_f64() * 1e3,
            timings.mel.as_secs_f64() * 1e3,
            timings.encode.as_secs_f64() * 1e3,
            timings.windows,
            timings.decode.as_secs_f64() * 1e3,
            timings.decode_calls,
            timings.decode.as_secs_f64() * 1e3 / timings.decode_calls.max(1) as f64,
            timings.total.as_secs_f64() * 1e3,
            rtf
        );
    }
    Ok(())
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

fn write_outputs(t: &Transcript, input: &str, sink: &Sink) -> anyhow::Result<()> {
    match sink {
        Sink::Console => Ok(()),
        Sink::Stdout(formats) => {
            let stdout = io::stdout();
            let mut out = stdout.lock();
            for f in formats {
                if let Err(e) = f.write(t, &mut out) {
                    if e.kind() == io::ErrorKind::BrokenPipe {
                        return Ok(());
                    }
                    return Err(e).context("writing to stdout");
                }
            }
            Ok(())
        }
        Sink::File(path, format) => write_file(path, *format, t),
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
                write_file(&dir.join(format!("{stem}.{}", f.extension())), *f, t)?;
            }
            Ok(())
        }
    }
}

fn write_file(path: &Path, format: Format, t: &Transcript) -> anyhow::Result<()> {
    let file = File::create(path).with_context(|| path.display().to_string())?;
    let mut w = BufWriter::new(file);
    format
        .write(t, &mut w)
        .and_then(|_| w.flush())
        .with_context(|| path.display().to_string())
}
