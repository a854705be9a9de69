//! `sotto stream`: live transcription of raw PCM as it arrives, as whisper.cpp's
//! `whisper-stream` does in its sliding-window mode: every `--step` of new audio, the last
//! `--length` (with `--keep` of the window before) is transcribed; on a terminal the current
//! line is rewritten each step, and every `length / step - 1` steps it is finished and a new
//! window begins. Piped, only the finished lines are printed. With `--vad` (whisper-stream's
//! VAD mode, with the Silero VAD) each stretch of speech is transcribed once it has ended.

use std::io::{self, IsTerminal, Read, Write};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{bail, Context};
use sotto::{Model, Task, TranscribeOptions};

use crate::progress;

/// Samples per second of the raw input.
const RATE: usize = 16_000;

#[derive(clap::Args)]
pub struct Args {
    /// Raw PCM (16 kHz mono unless --rate and --channels say otherwise): `-` (stdin) or a
    /// file or named pipe. Make it with e.g. `arecord -q -t raw -f S16_LE -r 16000 -c 1`
    /// or `ffmpeg -i SRC -f s16le -ar 16000 -ac 1 -`.
    #[arg(default_value = "-", value_name = "INPUT")]
    input: String,

    /// Sample format of the input.
    #[arg(long, default_value = "s16le", value_parser = ["s16le", "f32le"])]
    pcm: String,

    /// Sample rate of the input, Hz: other rates than 16 000 are resampled as they arrive,
    /// with the filter file decodes use (a microphone's 44 100 or 48 000 as it gives them).
    #[arg(long, default_value_t = 16_000, value_name = "HZ")]
    rate: u32,

    /// Interleaved channels of the input, mixed to one (their mean).
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=64))]
    channels: u16,

    /// Model name (tiny.en, base, ...; fetched on first use) or path.
    #[arg(short, long, default_value = "tiny.en", value_name = "NAME|PATH")]
    model: String,

    /// Spoken language code (en, de, ...); multilingual models detect it per window
    /// without it.
    #[arg(short, long, value_name = "LANG")]
    language: Option<String>,

    /// Translate to English.
    #[arg(long)]
    translate: bool,

    #[command(flatten)]
    engine: crate::engine::EngineArgs,

    /// Transcribe every this many ms of new audio.
    #[arg(long, default_value_t = 3000, value_name = "MS")]
    step: u64,

    /// Audio each transcription sees, ms (at most 30 000).
    #[arg(long, default_value_t = 10000, value_name = "MS")]
    length: u64,

    /// Audio kept from the finished line's window for the next one, ms.
    #[arg(long, default_value_t = 200, value_name = "MS")]
    keep: u64,

    /// Beams (1: greedy, whisper-stream's choice, fastest).
    #[arg(long, default_value_t = 1)]
    beam_size: usize,

    /// Encoder positions per window, 20 ms each (whisper-stream's -ac): the encoder's work
    /// shrinks with it; 500 covers the default 10 s --length with an encoder 3–4× faster, text
    /// perhaps worse. 0: all (30 s).
    #[arg(long, default_value_t = 0, value_name = "N")]
    audio_ctx: usize,

    /// Prompt each window with the last finished line (whisper-stream's `--keep-context`).
    #[arg(long)]
    keep_context: bool,

    /// Prefix each finished line with its window's times in the stream, seconds.
    #[arg(long)]
    timestamps: bool,

    /// Transcribe each stretch of speech once it has ended instead of sliding windows
    /// (the Silero VAD, checked every --step; 500 ms of silence ends speech unless
    /// --vad-min-silence-ms says otherwise); lines have the speech's own times.
    #[arg(long)]
    vad: bool,

    #[command(flatten)]
    vad_args: crate::vad::VadArgs,
}

/// The sliding window's sizes in samples.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Window {
    step: usize,
    length: usize,
    keep: usize,
    /// Steps per finished line.
    per_line: usize,
}

impl Window {
    fn new(step_ms: u64, length_ms: u64, keep_ms: u64) -> anyhow::Result<Window> {
        if step_ms == 0 || length_ms > 30_000 || step_ms > length_ms || keep_ms > step_ms {
            bail!(
                "--step must be > 0 and at most --length, --length at most 30000 ms, and \
                 --keep at most --step"
            );
        }
        let ms = |m: u64| (m as usize) * RATE / 1000;
        Ok(Window {
            step: ms(step_ms),
            length: ms(length_ms),
            keep: ms(keep_ms),
            per_line: ((length_ms / step_ms) as usize).saturating_sub(1).max(1),
        })
    }

    /// New samples the next transcription takes of `pending`: whole steps, as many as
    /// have come (a machine that fell behind catches up) up to a window's length; the rest
    /// at the end of the input.
    fn take(&self, pending: usize) -> usize {
        let steps = (pending / self.step).clamp(1, (self.length / self.step).max(1));
        (steps * self.step).min(pending)
    }

    /// The audio of the next transcription: the end of the window so far (at most
    /// `keep + length - new` of it, whisper-stream's rule), then the new samples.
    fn next(&self, old: &[f32], new: &[f32]) -> Vec<f32> {
        let take = old
            .len()
            .min((self.keep + self.length).saturating_sub(new.len()));
        [&old[old.len() - take..], new].concat()
    }
}

/// What the input's bytes are.
struct Format {
    f32le: bool,
    rate: u32,
    channels: u16,
}

/// Reads the input on a thread of its own, sending its 16 kHz mono samples as they come
/// (so transcription and reading overlap, and nothing read is dropped).
fn reader(input: &str, format: Format) -> anyhow::Result<mpsc::Receiver<io::Result<Vec<f32>>>> {
    let mut src: Box<dyn Read + Send> = if input == "-" {
        Box::new(io::stdin())
    } else {
        Box::new(std::fs::File::open(input).with_context(|| input.to_string())?)
    };
    let mut resampler = sotto::audio::Resampler16k::new(format.rate).context("--rate")?;
    let channels = usize::from(format.channels);
    let (tx, rx) = mpsc::sync_channel(64);
    let width = if format.f32le { 4 } else { 2 } * channels;
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 8192];
        let mut carry: Vec<u8> = Vec::new();
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) => {
                    if !carry.is_empty() {
                        eprintln!(
                            "warning: the input ended {} byte(s) into a sample; they were left out",
                            carry.len()
                        );
                    }
                    if let Ok(rest) = resampler.finish() {
                        let _ = tx.send(Ok(rest));
                    }
                    return;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            carry.extend_from_slice(&buf[..n]);
            let whole = carry.len() / width * width;
            let value = |b: &[u8]| match b {
                [a, b] => f32::from(i16::from_le_bytes([*a, *b])) / 32768.0,
                [a, b, c, d] => f32::from_le_bytes([*a, *b, *c, *d]),
                _ => unreachable!("chunks of the sample width"),
            };
            let samples: Vec<f32> = carry[..whole]
                .chunks_exact(width)
                .map(|frame| {
                    let sum: f32 = frame.chunks_exact(width / channels).map(value).sum();
                    sum / channels as f32
                })
                .collect();
            carry.drain(..whole);
            // At 16 kHz this hands the samples straight back.
            let _ = resampler.push(&samples);
            if tx.send(Ok(resampler.take_ready())).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

pub fn run(hub: &sotto::hub::Hub, args: Args) -> anyhow::Result<ExitCode> {
    let window = Window::new(args.step, args.length, args.keep)?;
    if args.beam_size == 0 {
        bail!("--beam-size must be at least 1");
    }
    let device = args.engine.device()?;
    let model = Model::load_named_with(
        &args.model,
        hub,
        &mut progress::Download::new(),
        device,
        args.engine.load_options()?,
    )?;
    crate::engine::device_note(&args.engine, &model);
    let mut session = model.session(args.engine.threads()?)?;
    let mut opts = TranscribeOptions {
        language: args.language.clone(),
        task: if args.translate {
            Task::Translate
        } else {
            Task::Transcribe
        },
        beam_size: args.beam_size,
        // One window, one line: no timestamps to cut it, and no fallback to delay it.
        without_timestamps: true,
        temperatures: vec![0.0],
        audio_ctx: (args.audio_ctx > 0).then_some(args.audio_ctx),
        ..TranscribeOptions::default()
    };
    let format = Format {
        f32le: args.pcm == "f32le",
        rate: args.rate,
        channels: args.channels,
    };
    let rx = reader(&args.input, format)?;
    if !args.vad && args.vad_args.given() {
        bail!("the --vad-* options apply with --vad");
    }
    if args.vad {
        let base = sotto::VadOptions {
            min_silence_duration_ms: 500.0,
            max_speech_duration_s: 30.0,
            ..sotto::VadOptions::default()
        };
        let mut vad = args.vad_args.load_with(hub, base)?;
        vad.options.max_speech_duration_s = vad.options.max_speech_duration_s.min(30.0);
        opts.without_timestamps = false;
        return by_speech(&mut session, &vad, &opts, &rx, window.step, args.timestamps);
    }
    let live = io::stdout().is_terminal();
    let mut out = io::stdout().lock();
    // Samples of the stream before `old` begins, for --timestamps.
    let (mut old, mut old_start) = (Vec::<f32>::new(), 0usize);
    let (mut pending, mut eof, mut steps) = (Vec::<f32>::new(), false, 0usize);
    let mut unfinished = false;
    while !eof || !pending.is_empty() {
        // Wait for a step of new audio (or the end); take at most a window's worth, so a
        // slow machine falls behind instead of losing audio.
        while pending.len() < window.step && !eof {
            match rx.recv() {
                Ok(chunk) => pending.extend(chunk.context("reading the input")?),
                Err(_) => eof = true,
            }
        }
        if pending.is_empty() {
            break;
        }
        let n_new = window.take(pending.len());
        let new: Vec<f32> = pending.drain(..n_new).collect();
        let audio = window.next(&old, &new);
        old_start += old.len() + new.len() - audio.len();
        old = audio;
        let t = Instant::now();
        let text = session
            .transcribe(&old, &opts, &mut |_| true)
            .context("transcribing the stream")?
            .text();
        let took = t.elapsed();
        steps += 1;
        let finished = steps.is_multiple_of(window.per_line) || (eof && pending.is_empty());
        let line = if args.timestamps {
            let s = |n: usize| n as f64 / RATE as f64;
            format!(
                "[{:.2} --> {:.2}]  {text}",
                s(old_start),
                s(old_start + old.len())
            )
        } else {
            text.clone()
        };
        let written = if live {
            // Rewrite the current line; finish it with a newline.
            write!(out, "\r\x1b[2K{line}")
                .and_then(|()| if finished { writeln!(out) } else { Ok(()) })
                .and_then(|()| out.flush())
        } else if finished && !text.is_empty() {
            writeln!(out, "{line}").and_then(|()| out.flush())
        } else {
            Ok(())
        };
        match written {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
            r => r.context("writing to stdout")?,
        }
        unfinished = !finished;
        if took.as_secs_f64() * RATE as f64 > n_new as f64 && live {
            eprint!("\r\x1b[2K(transcription is slower than the stream: it falls behind)\r");
        }
        if finished {
            // A new line: keep the window's end for context, and its text as the prompt.
            let from = old.len() - window.keep.min(old.len());
            old_start += from;
            old.drain(..from);
            if args.keep_context && !text.is_empty() {
                opts.initial_prompt = Some(text);
            }
        }
    }
    if unfinished && live {
        writeln!(out).ok();
    }
    Ok(ExitCode::SUCCESS)
}

/// `--vad`: every `check` samples, the VAD runs over the audio not yet transcribed; the
/// stretches of speech it has seen end (all of them at the end of the input) are
/// transcribed, their segments printed with the stream's times, and the audio up to the
/// last one's end dropped. Long silence is dropped too, keeping the last second.
fn by_speech(
    session: &mut sotto::Session,
    vad: &sotto::Vad,
    opts: &TranscribeOptions,
    rx: &mpsc::Receiver<io::Result<Vec<f32>>>,
    check: usize,
    timestamps: bool,
) -> anyhow::Result<ExitCode> {
    let mut out = io::stdout().lock();
    // The audio not yet transcribed, and the stream's samples before it.
    let (mut buf, mut start, mut eof) = (Vec::<f32>::new(), 0usize, false);
    while !eof {
        let target = buf.len() + check;
        while buf.len() < target && !eof {
            match rx.recv() {
                Ok(chunk) => buf.extend(chunk.context("reading the input")?),
                Err(_) => eof = true,
            }
        }
        if buf.is_empty() {
            break;
        }
        let stretches = vad.speech(&buf).context("voice activity detection")?;
        // A stretch still going on reaches the end of what has come.
        let done = if eof {
            stretches.len()
        } else {
            stretches.iter().take_while(|s| s.1 < buf.len()).count()
        };
        let upto = match stretches[..done].last() {
            Some(&(_, end)) => end,
            None if stretches.is_empty() => buf.len().saturating_sub(RATE),
            None => 0,
        };
        if done > 0 {
            let (t, _) = session
                .transcribe_chunks_timed(&buf[..upto], &stretches[..done], opts, &mut |_| true)
                .context("transcribing the stream")?;
            let at = |t: f64| t + start as f64 / RATE as f64;
            for seg in &t.segments {
                let text = seg.text.trim();
                let line = if timestamps {
                    format!("[{:.2} --> {:.2}]  {text}", at(seg.start), at(seg.end))
                } else {
                    text.to_string()
                };
                match writeln!(out, "{line}").and_then(|()| out.flush()) {
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                        return Ok(ExitCode::SUCCESS)
                    }
                    r => r.context("writing to stdout")?,
                }
            }
        }
        buf.drain(..upto);
        start += upto;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_slide_as_whisper_stream_s_do() {
        let w = Window::new(3000, 10000, 200).unwrap();
        assert_eq!(
            (w.step, w.length, w.keep, w.per_line),
            (48_000, 160_000, 3_200, 2)
        );
        let s = |n: usize, v: f32| vec![v; n];
        // First step: the new audio only; then old audio up to keep + length - new.
        assert_eq!(w.next(&[], &s(48_000, 1.0)).len(), 48_000);
        let a = w.next(&s(150_000, 0.0), &s(48_000, 1.0));
        assert_eq!(a.len(), 3_200 + 160_000);
        assert_eq!(
            (a[0], a[a.len() - 48_000 - 1], a[a.len() - 1]),
            (0.0, 0.0, 1.0)
        );
        // Whole steps of what has come, up to the length; the rest at the end.
        assert_eq!(
            [49_000, 100_000, 500_000, 1_000].map(|n| w.take(n)),
            [48_000, 96_000, 144_000, 1_000]
        );
        assert_eq!(Window::new(1000, 1000, 0).unwrap().per_line, 1);
        for (step, length, keep) in [
            (0, 1000, 0),
            (2000, 1000, 0),
            (1000, 31_000, 0),
            (1000, 5000, 2000),
        ] {
            assert!(
                Window::new(step, length, keep).is_err(),
                "{step} {length} {keep}"
            );
        }
    }
}
