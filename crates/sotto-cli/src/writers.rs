//! Output formats: one [`Format`] per file type, each writing a whole transcript.

mod cpp_json;

use std::io::{self, Write};

use clap::ValueEnum;
use serde::Serialize;
use sotto::audio::diarize::Speaker;
use sotto::{Segment, Transcript};

pub use cpp_json::RunInfo;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Plain text, one segment per line.
    Txt,
    /// SubRip subtitles.
    Srt,
    /// WebVTT subtitles.
    Vtt,
    /// JSON: language and per-segment times, text, tokens and scores.
    Json,
    /// CSV as whisper.cpp writes it: start,end in milliseconds, quoted text.
    Csv,
    /// TSV as openai-whisper writes it: start, end (ms), text.
    Tsv,
    /// LRC lyrics: `[mm:ss.xx]` lines.
    Lrc,
    /// whisper.cpp's JSON (`whisper-cli -oj`): model, params, and `transcription` segments
    /// with `timestamps`, `offsets` (ms) and `text`.
    #[value(name = "cpp-json")]
    CppJson,
    /// whisper.cpp's full JSON (`-ojf`): `cpp-json` plus each segment's tokens (`text`,
    /// `id`, `p`, and from word timing, which it turns on, each its word's times and as
    /// `t_dtw` where the alignment has it begin).
    #[value(name = "cpp-json-full")]
    CppJsonFull,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Txt => "txt",
            Format::Srt => "srt",
            Format::Vtt => "vtt",
            Format::Json => "json",
            Format::Csv => "csv",
            Format::Tsv => "tsv",
            Format::Lrc => "lrc",
            Format::CppJson | Format::CppJsonFull => "json",
        }
    }

    /// The format a file name's extension names, if any.
    pub fn from_extension(path: &std::path::Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Format::value_variants()
            .iter()
            .copied()
            .find(|f| f.extension() == ext)
    }

    /// Writes `t`, with what `extras` adds.
    pub fn write(self, t: &Transcript, extras: &Extras, out: &mut dyn Write) -> io::Result<()> {
        let speakers = extras.speakers;
        let t = &Labelled { t, speakers };
        match self {
            Format::CppJson | Format::CppJsonFull => {
                let run = extras.run.ok_or_else(|| {
                    io::Error::other("whisper.cpp's JSON needs the model's details")
                })?;
                cpp_json::write(t, run, self == Format::CppJsonFull, out)
            }
            Format::Txt => write_txt(t, out),
            Format::Srt => write_srt(t, extras.srt_offset, out),
            Format::Vtt => write_vtt(t, out),
            Format::Json => write_json(t, out),
            Format::Csv => write_csv(t, out),
            Format::Tsv => write_tsv(t, out),
            Format::Lrc => write_lrc(t, out),
        }
    }
}

/// What a transcript is written with besides its segments.
#[derive(Clone, Copy, Default)]
pub struct Extras<'a> {
    /// Empty, or each segment's speaker (`--diarize`): the text labelled as whisper.cpp
    /// labels it, `(speaker 0) text`, and JSON's `speaker` field.
    pub speakers: &'a [Speaker],
    /// The model and run: whisper.cpp's JSON needs them and errs without.
    pub run: Option<&'a RunInfo<'a>>,
    /// Added to SRT's cue numbers, which then start at this + 1 (whisper.cpp's `offset_n`:
    /// subtitles of a part that follows others).
    pub srt_offset: usize,
}

/// A transcript and, where diarized, each segment's speaker.
struct Labelled<'a> {
    t: &'a Transcript,
    speakers: &'a [Speaker],
}

impl Labelled<'_> {
    /// Each segment with its text as written: trimmed, after its speaker's label.
    fn segments(&self) -> impl Iterator<Item = (&Segment, String)> + '_ {
        (self.t.segments.iter().enumerate())
            .map(|(i, s)| (s, labelled_text(&s.text, self.speakers.get(i).copied())))
    }
}

/// A segment's line as whisper.cpp labels it with `--diarize`: `(speaker 0)` before the text.
pub fn labelled_text(text: &str, speaker: Option<Speaker>) -> String {
    let text = text.trim();
    match speaker {
        Some(sp) => format!("{} {text}", sp.label()),
        None => text.to_string(),
    }
}

fn write_txt(t: &Labelled, out: &mut dyn Write) -> io::Result<()> {
    for (_, text) in t.segments() {
        writeln!(out, "{text}")?;
    }
    Ok(())
}

/// `HH:MM:SS<sep>mmm`, rounding to the millisecond.
fn timestamp(seconds: f64, sep: char) -> String {
    let ms = (seconds.max(0.0) * 1000.0).round() as u64;
    let (h, rem) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rem) = (rem / 60_000, rem % 60_000);
    let (s, ms) = (rem / 1000, rem % 1000);
    format!("{h:02}:{m:02}:{s:02}{sep}{ms:03}")
}

fn write_srt(t: &Labelled, offset: usize, out: &mut dyn Write) -> io::Result<()> {
    for (i, (s, text)) in t.segments().enumerate() {
        writeln!(
            out,
            "{}\n{} --> {}\n{text}\n",
            offset + i + 1,
            timestamp(s.start, ','),
            timestamp(s.end, ','),
        )?;
    }
    Ok(())
}

fn write_vtt(t: &Labelled, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "WEBVTT\n")?;
    for (s, text) in t.segments() {
        writeln!(
            out,
            "{} --> {}\n{text}\n",
            timestamp(s.start, '.'),
            timestamp(s.end, '.'),
        )?;
    }
    Ok(())
}

fn millis(seconds: f64) -> u64 {
    (seconds.max(0.0) * 1000.0).round() as u64
}

fn write_csv(t: &Labelled, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "start,end,text")?;
    for (s, text) in t.segments() {
        let text = text.replace('"', "\"\"");
        writeln!(out, "{},{},\"{text}\"", millis(s.start), millis(s.end))?;
    }
    Ok(())
}

fn write_tsv(t: &Labelled, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "start\tend\ttext")?;
    for (s, text) in t.segments() {
        // Tabs and newlines inside the text would break the columns.
        let text = text.replace(['\t', '\n'], " ");
        writeln!(out, "{}\t{}\t{text}", millis(s.start), millis(s.end))?;
    }
    Ok(())
}

fn write_lrc(t: &Labelled, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "[by:sotto]")?;
    for (s, text) in t.segments() {
        let cs = (s.start * 100.0).round().max(0.0) as u64;
        writeln!(
            out,
            "[{:02}:{:02}.{:02}]{text}",
            cs / 6000,
            cs / 100 % 60,
            cs % 100,
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct JsonTranscript<'a> {
    language: &'a str,
    language_probability: f64,
    duration: f64,
    text: String,
    segments: Vec<JsonSegment<'a>>,
}

#[derive(Serialize)]
struct JsonSegment<'a> {
    id: usize,
    start: f64,
    end: f64,
    text: &'a str,
    tokens: &'a [u32],
    /// Probability of each of `tokens` as decoded (after the logit filters).
    token_probs: Vec<f64>,
    temperature: f64,
    avg_logprob: f64,
    compression_ratio: f64,
    no_speech_prob: f64,
    /// With `--diarize` on stereo audio: `0`, `1` or `?` (whisper.cpp's).
    #[serde(skip_serializing_if = "Option::is_none")]
    speaker: Option<&'static str>,
    /// Present with word timestamps only.
    #[serde(skip_serializing_if = "Option::is_none")]
    words: Option<Vec<JsonWord<'a>>>,
}

#[derive(Serialize)]
struct JsonWord<'a> {
    start: f64,
    end: f64,
    word: &'a str,
    probability: f64,
}

fn json_segment(id: usize, s: &Segment, speaker: Option<Speaker>) -> JsonSegment<'_> {
    // Times are rounded to the centisecond the timestamp tokens carry.
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    JsonSegment {
        id,
        start: round(s.start),
        end: round(s.end),
        text: &s.text,
        tokens: &s.tokens,
        token_probs: s
            .token_logprobs
            .iter()
            .map(|&l| (f64::from(l).exp() * 1e4).round() / 1e4)
            .collect(),
        temperature: s.temperature,
        avg_logprob: s.avg_logprob,
        compression_ratio: s.compression_ratio,
        no_speech_prob: s.no_speech_prob,
        speaker: speaker.map(Speaker::id),
        words: (!s.words.is_empty()).then(|| {
            s.words
                .iter()
                .map(|w| JsonWord {
                    start: round(w.start),
                    end: round(w.end),
                    word: &w.word,
                    probability: w.probability,
                })
                .collect()
        }),
    }
}

fn write_json(labelled: &Labelled, out: &mut dyn Write) -> io::Result<()> {
    let t = labelled.t;
    let doc = JsonTranscript {
        language: &t.language,
        language_probability: t.language_probability,
        duration: t.duration,
        text: t.text(),
        segments: t
            .segments
            .iter()
            .enumerate()
            .map(|(i, s)| json_segment(i, s, labelled.speakers.get(i).copied()))
            .collect(),
    };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Transcript {
        let seg = |start: f64, end: f64, text: &str| sotto::Segment {
            id: 1,
            seek: 0,
            start,
            end,
            text: text.to_string(),
            tokens: vec![50364, 2425],
            token_logprobs: vec![0.0, -std::f32::consts::LN_2],
            avg_logprob: -0.1,
            compression_ratio: 1.0,
            no_speech_prob: 0.0,
            temperature: 0.0,
            words: if start == 0.0 {
                vec![sotto::Word {
                    start: 0.1,
                    end: 0.6,
                    word: " Hello,".into(),
                    probability: 0.9,
                    tokens: vec![2425],
                    token_times: vec![0.1],
                }]
            } else {
                vec![]
            },
        };
        Transcript {
            language: "en".into(),
            language_probability: 1.0,
            duration: 70.0,
            segments: vec![
                seg(0.0, 1.5, " Hello, \"world\"."),
                seg(61.25, 69.999, " Tab\there."),
            ],
        }
    }

    fn render(f: Format) -> String {
        let mut out = Vec::new();
        f.write(&sample(), &Extras::default(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn table_and_lyrics_formats() {
        assert_eq!(
            render(Format::Csv),
            "start,end,text\n0,1500,\"Hello, \"\"world\"\".\"\n61250,69999,\"Tab\there.\"\n"
        );
        assert_eq!(
            render(Format::Tsv),
            "start\tend\ttext\n0\t1500\tHello, \"world\".\n61250\t69999\tTab here.\n"
        );
        assert_eq!(
            render(Format::Lrc),
            "[by:sotto]\n[00:00.00]Hello, \"world\".\n[01:01.25]Tab\there.\n"
        );
        assert!(render(Format::Srt).contains("2\n00:01:01,250 --> 00:01:09,999\n"));
        // whisper.cpp's offset_n: cues numbered on from an earlier part's.
        let mut later = Vec::new();
        let extras = Extras {
            srt_offset: 40,
            ..Extras::default()
        };
        Format::Srt.write(&sample(), &extras, &mut later).unwrap();
        let later = String::from_utf8(later).unwrap();
        assert!(later.starts_with("41\n00:00:00,000 --> "), "{later}");
        assert!(later.contains("\n42\n00:01:01,250 --> "), "{later}");
        assert!(render(Format::Vtt).starts_with("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n"));
        let json: serde_json::Value = serde_json::from_str(&render(Format::Json)).unwrap();
        assert_eq!(json["segments"][1]["start"], 61.25);
        assert_eq!(json["segments"][0]["words"][0]["word"], " Hello,");
        assert_eq!(json["segments"][0]["words"][0]["end"], 0.6);
        assert!(json["segments"][1].get("words").is_none());
        assert_eq!(json["segments"][0]["token_probs"][1], 0.5);
        assert_eq!(
            Format::from_extension(std::path::Path::new("a/b.SRT")),
            Some(Format::Srt)
        );
    }

    #[test]
    fn timestamps_round_and_carry() {
        assert_eq!(timestamp(0.0, ','), "00:00:00,000");
        assert_eq!(timestamp(61.2345, '.'), "00:01:01.235");
        assert_eq!(timestamp(3725.9996, ','), "01:02:06,000");
        assert_eq!(timestamp(-1.0, ','), "00:00:00,000");
    }
}
