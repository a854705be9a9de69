//! Output formats: one [`Format`] per file type, each writing a whole transcript.

use std::io::{self, Write};

use clap::ValueEnum;
use serde::Serialize;
use sotto::{Segment, Transcript};

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
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Txt => "txt",
            Format::Srt => "srt",
            Format::Vtt => "vtt",
            Format::Json => "json",
        }
    }

    pub fn write(self, t: &Transcript, out: &mut dyn Write) -> io::Result<()> {
        match self {
            Format::Txt => write_txt(t, out),
            Format::Srt => write_srt(t, out),
            Format::Vtt => write_vtt(t, out),
            Format::Json => write_json(t, out),
        }
    }
}

fn write_txt(t: &Transcript, out: &mut dyn Write) -> io::Result<()> {
    for s in &t.segments {
        writeln!(out, "{}", s.text.trim())?;
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

fn write_srt(t: &Transcript, out: &mut dyn Write) -> io::Result<()> {
    for (i, s) in t.segments.iter().enumerate() {
        writeln!(
            out,
            "{}\n{} --> {}\n{}\n",
            i + 1,
            timestamp(s.start as f64, ','),
            timestamp(s.end as f64, ','),
            s.text.trim()
        )?;
    }
    Ok(())
}

fn write_vtt(t: &Transcript, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "WEBVTT\n")?;
    for s in &t.segments {
        writeln!(
            out,
            "{} --> {}\n{}\n",
            timestamp(s.start as f64, '.'),
            timestamp(s.end as f64, '.'),
            s.text.trim()
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
    temperature: f64,
    avg_logprob: f64,
    compression_ratio: f64,
    no_speech_prob: f64,
}

fn json_segment(id: usize, s: &Segment) -> JsonSegment<'_> {
    // Times are rounded to the centisecond the timestamp tokens carry.
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    JsonSegment {
        id,
        start: round(s.start as f64),
        end: round(s.end as f64),
        text: &s.text,
        tokens: &s.tokens,
        temperature: s.temperature as f64,
        avg_logprob: s.avg_logprob as f64,
        compression_ratio: s.compression_ratio as f64,
        no_speech_prob: s.no_speech_prob as f64,
    }
}

fn write_json(t: &Transcript, out: &mut dyn Write) -> io::Result<()> {
    let doc = JsonTranscript {
        language: &t.language,
        language_probability: t.language_probability as f64,
        duration: t.duration as f64,
        text: t.text(),
        segments: t
            .segments
            .iter()
            .enumerate()
            .map(|(i, s)| json_segment(i, s))
            .collect(),
    };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_and_carry() {
        assert_eq!(timestamp(0.0, ','), "00:00:00,000");
        assert_eq!(timestamp(61.2345, '.'), "00:01:01.235");
        assert_eq!(timestamp(3725.9996, ','), "01:02:06,000");
        assert_eq!(timestamp(-1.0, ','), "00:00:00,000");
    }
}
