//! whisper.cpp's JSON (`whisper-cli -oj` and `-ojf`), for scripts written against it: the
//! same keys in the same order, tab-indented as whisper-cli writes them.

use std::io::{self, Write};

use serde::Serialize;
use sotto::audio::diarize::Speaker;
use sotto::formats::{DType, Hparams};
use sotto::{Segment, Tokenizer};

use super::Labelled;

/// What whisper.cpp's JSON says besides the transcript: the build, the model and the run's
/// options.
pub struct RunInfo<'a> {
    /// The model as given (`-m`): a name or a path.
    pub model: &'a str,
    pub hparams: Hparams,
    pub tokenizer: &'a Tokenizer,
    /// How the file stores the decoder's matrices.
    pub weight_type: Option<DType>,
    /// The language asked for: a code, or `auto`.
    pub language: &'a str,
    pub translate: bool,
}

#[derive(Serialize)]
struct Doc<'a> {
    systeminfo: String,
    model: Model,
    params: Params<'a>,
    result: Lang<'a>,
    transcription: Vec<CppSegment<'a>>,
}

#[derive(Serialize)]
struct Model {
    #[serde(rename = "type")]
    kind: &'static str,
    multilingual: bool,
    vocab: usize,
    audio: Dims,
    text: Dims,
    mels: usize,
    ftype: i32,
}

#[derive(Serialize)]
struct Dims {
    ctx: usize,
    state: usize,
    head: usize,
    layer: usize,
}

#[derive(Serialize)]
struct Params<'a> {
    model: &'a str,
    language: &'a str,
    translate: bool,
}

#[derive(Serialize)]
struct Lang<'a> {
    language: &'a str,
}

#[derive(Serialize)]
struct Span<T> {
    from: T,
    to: T,
}

/// A span as whisper.cpp writes it: `HH:MM:SS,mmm` and milliseconds, both from times in
/// its 10 ms units.
#[derive(Serialize)]
struct Times {
    timestamps: Span<String>,
    offsets: Span<i64>,
}

/// Seconds in whisper.cpp's 10 ms units (its `t0`, `t1`, `t_dtw`).
fn centis(seconds: f64) -> i64 {
    (seconds.max(0.0) * 100.0).round() as i64
}

impl Times {
    fn new(start: f64, end: f64) -> Times {
        let (t0, t1) = (centis(start), centis(end));
        let stamp = |t: i64| super::timestamp(t as f64 / 100.0, ',');
        Times {
            timestamps: Span {
                from: stamp(t0),
                to: stamp(t1),
            },
            offsets: Span {
                from: t0 * 10,
                to: t1 * 10,
            },
        }
    }
}

#[derive(Serialize)]
struct CppSegment<'a> {
    #[serde(flatten)]
    times: Times,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<Vec<CppToken>>,
    /// With `--diarize` on stereo audio: `0`, `1` or `?`.
    #[serde(skip_serializing_if = "Option::is_none")]
    speaker: Option<&'static str>,
}

#[derive(Serialize)]
struct CppToken {
    text: String,
    #[serde(flatten)]
    times: Option<Times>,
    id: u32,
    p: f32,
    /// Where the alignment has the token begin, in 10 ms units (whisper.cpp's `-dtw`
    /// time); -1 where there is none (timestamp tokens), as whisper-cli writes without
    /// `-dtw`.
    t_dtw: i64,
}

/// whisper.cpp's model type: by encoder depth, as `whisper_model_type_readable`.
fn model_type(h: &Hparams) -> &'static str {
    match h.n_audio_layer {
        4 => "tiny",
        6 => "base",
        12 => "small",
        24 => "medium",
        32 => "large",
        _ => "unknown",
    }
}

/// ggml's file type for weights of `t` (`GGML_FTYPE_*`); -1 for a type ggml files do not
/// use (CTranslate2's int8).
fn ftype(t: Option<DType>) -> i32 {
    match t {
        Some(DType::F32) => 0,
        Some(DType::F16) => 1,
        Some(DType::Q4_0) => 2,
        Some(DType::Q4_1) => 3,
        Some(DType::Q8_0) => 7,
        Some(DType::Q5_0) => 8,
        Some(DType::Q5_1) => 9,
        Some(DType::BF16) => 24,
        _ => -1,
    }
}

/// A token's text as whisper.cpp's vocabulary names it: the ordinary tokens' bytes, the
/// special ones in brackets (`[_BEG_]`, `[_TT_150]`, `[_LANG_en]`, ...).
fn token_text(tok: &Tokenizer, id: u32) -> Vec<u8> {
    let beg = tok.timestamp_begin();
    let name = if id > beg {
        format!("[_TT_{}]", id - beg)
    } else if id == beg {
        "[_BEG_]".into()
    } else if id < tok.eot() {
        return tok.decode_bytes(&[id]);
    } else if id == tok.eot() {
        "[_EOT_]".into()
    } else if id == tok.sot() {
        "[_SOT_]".into()
    } else if id == tok.translate() {
        "[_TRANSLATE_]".into()
    } else if id == tok.transcribe() {
        "[_TRANSCRIBE_]".into()
    } else if id == tok.sot_lm() {
        "[_SOLM_]".into()
    } else if id == tok.sot_prev() {
        "[_PREV_]".into()
    } else if id == tok.no_speech() {
        "[_NOSP_]".into()
    } else if id == tok.no_timestamps() {
        "[_NOT_]".into()
    } else if let Some(code) = tok.language_code(id) {
        format!("[_LANG_{code}]")
    } else {
        format!("[_extra_token_{id}]")
    };
    name.into_bytes()
}

/// A token's times where word timing gave them: its word's span (a timestamp token opening
/// or closing the segment, that point) and where the alignment has it begin.
#[derive(Clone, Copy, Default)]
struct TokenTimes {
    span: Option<(f64, f64)>,
    dtw: Option<f64>,
}

/// [`TokenTimes`] of each of the segment's tokens; all None without word timing.
fn token_times(s: &Segment, beg: u32) -> Vec<TokenTimes> {
    let mut times = vec![TokenTimes::default(); s.tokens.len()];
    if s.words.is_empty() {
        return times;
    }
    let mut words = (s.words.iter())
        .flat_map(|w| {
            let dtw = |k: usize| w.token_times.get(k).copied();
            (w.tokens.iter().enumerate()).map(move |(k, &t)| (t, w.start, w.end, dtw(k)))
        })
        .peekable();
    let last = s.tokens.len() - 1;
    for (i, (&id, t)) in s.tokens.iter().zip(&mut times).enumerate() {
        if id >= beg {
            t.span = match i {
                0 => Some((s.start, s.start)),
                _ if i == last => Some((s.end, s.end)),
                _ => None,
            };
        } else if let Some((_, start, end, dtw)) = words.next_if(|&(w, ..)| w == id) {
            *t = TokenTimes {
                span: Some((start, end)),
                dtw,
            };
        }
    }
    times
}

/// The segment's tokens as `-ojf` lists them: tokens that split one character are merged
/// into one entry (the first's id, probability and alignment time, the last span's end), so
/// each `text` is whole UTF-8.
fn tokens(s: &Segment, tok: &Tokenizer) -> Vec<CppToken> {
    let times = token_times(s, tok.timestamp_begin());
    let mut out = Vec::new();
    let mut j = 0;
    while j < s.tokens.len() {
        let (id, first) = (s.tokens[j], times[j]);
        let mut text = token_text(tok, id);
        let mut span = first.span;
        let logprob = s
            .token_logprobs
            .get(j)
            .copied()
            .unwrap_or(f32::NEG_INFINITY);
        j += 1;
        while j < s.tokens.len() && unfinished_char(&text) {
            text.extend(token_text(tok, s.tokens[j]));
            if let (Some(a), Some(b)) = (span, times[j].span) {
                span = Some((a.0, b.1));
            }
            j += 1;
        }
        out.push(CppToken {
            text: String::from_utf8_lossy(&text).into_owned(),
            times: span.map(|(a, b)| Times::new(a, b)),
            id,
            p: logprob.exp(),
            t_dtw: first.dtw.map_or(-1, centis),
        });
    }
    out
}

/// Whether `bytes` end inside a UTF-8 character.
fn unfinished_char(bytes: &[u8]) -> bool {
    matches!(std::str::from_utf8(bytes), Err(e) if e.error_len().is_none())
}

pub(super) fn write(
    doc: &Labelled,
    run: &RunInfo,
    full: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    let h = &run.hparams;
    let transcription = (doc.t.segments.iter().enumerate())
        .map(|(i, s)| CppSegment {
            times: Times::new(s.start, s.end),
            text: &s.text,
            tokens: full.then(|| tokens(s, run.tokenizer)),
            speaker: doc.speakers.get(i).map(|&sp| Speaker::id(sp)),
        })
        .collect();
    let d = Doc {
        systeminfo: sotto::system_info(),
        model: Model {
            kind: model_type(h),
            multilingual: run.tokenizer.is_multilingual(),
            vocab: h.n_vocab,
            audio: Dims {
                ctx: h.n_audio_ctx,
                state: h.n_audio_state,
                head: h.n_audio_head,
                layer: h.n_audio_layer,
            },
            text: Dims {
                ctx: h.n_text_ctx,
                state: h.n_text_state,
                head: h.n_text_head,
                layer: h.n_text_layer,
            },
            mels: h.n_mels,
            ftype: ftype(run.weight_type),
        },
        params: Params {
            model: run.model,
            language: run.language,
            translate: run.translate,
        },
        result: Lang {
            language: &doc.t.language,
        },
        transcription,
    };
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"\t");
    let mut ser = serde_json::Serializer::with_formatter(&mut *out, fmt);
    d.serialize(&mut ser)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sotto::Word;

    /// A toy multilingual vocabulary: the 256 bytes, ` caf` (256), then fillers to 50257
    /// ordinary tokens; 99 languages.
    fn tokenizer() -> Tokenizer {
        let mut vocab: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        vocab.push(b" caf".to_vec());
        vocab.extend((257..50257).map(|i| format!("<t{i}>").into_bytes()));
        Tokenizer::new(vocab, 51865).unwrap()
    }

    fn hparams() -> Hparams {
        Hparams {
            n_vocab: 51865,
            n_audio_ctx: 1500,
            n_audio_state: 512,
            n_audio_head: 8,
            n_audio_layer: 6,
            n_text_ctx: 448,
            n_text_state: 512,
            n_text_head: 8,
            n_text_layer: 6,
            n_mels: 80,
        }
    }

    /// ` café` as ` caf`, then `é` split over its two bytes, between timestamps 0.00 and 1.50.
    fn segment(tok: &Tokenizer, words: bool) -> Segment {
        let beg = tok.timestamp_begin();
        let tokens = vec![beg, 256, 0xC3, 0xA9, beg + 75];
        Segment {
            id: 0,
            seek: 0,
            start: 0.0,
            end: 1.5,
            text: " café".into(),
            token_logprobs: vec![-0.1, -0.2, -0.3, -0.4, -0.5],
            tokens,
            avg_logprob: -0.3,
            compression_ratio: 1.0,
            no_speech_prob: 0.0,
            temperature: 0.0,
            words: if words {
                vec![Word {
                    start: 0.24,
                    end: 1.126,
                    word: " café".into(),
                    probability: 0.7,
                    tokens: vec![256, 0xC3, 0xA9],
                    token_times: vec![0.24, 0.5, 0.62],
                }]
            } else {
                vec![]
            },
        }
    }

    fn render(full: bool, words: bool, speakers: &[Speaker]) -> serde_json::Value {
        let tok = tokenizer();
        let t = sotto::Transcript {
            language: "fr".into(),
            language_probability: 0.9,
            duration: 1.5,
            segments: vec![segment(&tok, words)],
        };
        let run = RunInfo {
            model: "base",
            hparams: hparams(),
            tokenizer: &tok,
            weight_type: Some(DType::Q5_1),
            language: "auto",
            translate: false,
        };
        let mut out = Vec::new();
        let doc = Labelled { t: &t, speakers };
        write(&doc, &run, full, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        // whisper-cli's layout: tab indents, keys in its order.
        assert!(text.starts_with("{\n\t\"systeminfo\": \"sotto "));
        assert!(text.find("\"model\"") < text.find("\"params\""));
        assert!(text.ends_with("}\n"));
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn segments_carry_whisper_cpp_times_and_the_run() {
        let v = render(false, false, &[]);
        assert_eq!(v["model"]["type"], "base");
        assert_eq!(v["model"]["multilingual"], true);
        assert_eq!(v["model"]["vocab"], 51865);
        assert_eq!(v["model"]["audio"]["state"], 512);
        assert_eq!(v["model"]["ftype"], 9);
        assert_eq!(v["params"]["language"], "auto");
        assert_eq!(v["result"]["language"], "fr");
        let s = &v["transcription"][0];
        assert_eq!(s["timestamps"]["to"], "00:00:01,500");
        assert_eq!(s["offsets"]["to"], 1500);
        assert_eq!(s["text"], " café");
        assert!(s.get("tokens").is_none() && s.get("speaker").is_none());
    }

    #[test]
    fn full_tokens_merge_split_characters_and_name_specials() {
        let v = render(true, false, &[]);
        let toks = v["transcription"][0]["tokens"].as_array().unwrap();
        let texts: Vec<&str> = toks.iter().map(|t| t["text"].as_str().unwrap()).collect();
        assert_eq!(texts, ["[_BEG_]", " caf", "é", "[_TT_75]"]);
        // The merged entry keeps its first token's id and probability.
        assert_eq!(toks[2]["id"], 0xC3);
        assert!((toks[2]["p"].as_f64().unwrap() - (-0.3f64).exp()).abs() < 1e-6);
        assert_eq!(toks[2]["t_dtw"], -1);
        assert!(toks.iter().all(|t| t.get("offsets").is_none()));
    }

    #[test]
    fn word_timing_times_each_token_by_its_word() {
        let v = render(true, true, &[Speaker::Right]);
        let s = &v["transcription"][0];
        assert_eq!(s["speaker"], "1");
        let offsets: Vec<(i64, i64)> = (s["tokens"].as_array().unwrap().iter())
            .map(|t| {
                let o = &t["offsets"];
                (o["from"].as_i64().unwrap(), o["to"].as_i64().unwrap())
            })
            .collect();
        // 1.126 s is 113 of whisper.cpp's 10 ms units.
        assert_eq!(offsets, [(0, 0), (240, 1130), (240, 1130), (1500, 1500)]);
        assert_eq!(s["tokens"][1]["timestamps"]["from"], "00:00:00,240");
        let dtw: Vec<i64> = (s["tokens"].as_array().unwrap().iter())
            .map(|t| t["t_dtw"].as_i64().unwrap())
            .collect();
        // The merged character keeps its first byte's time.
        assert_eq!(dtw, [-1, 24, 50, -1]);
    }

    #[test]
    fn special_tokens_are_named_as_whisper_cpp_names_them() {
        let tok = tokenizer();
        let name = |id| String::from_utf8(token_text(&tok, id)).unwrap();
        assert_eq!(name(tok.eot()), "[_EOT_]");
        assert_eq!(name(tok.sot()), "[_SOT_]");
        assert_eq!(name(tok.sot() + 1), "[_LANG_en]");
        assert_eq!(name(tok.translate()), "[_TRANSLATE_]");
        assert_eq!(name(tok.transcribe()), "[_TRANSCRIBE_]");
        assert_eq!(name(tok.sot_lm()), "[_SOLM_]");
        assert_eq!(name(tok.sot_prev()), "[_PREV_]");
        assert_eq!(name(tok.no_speech()), "[_NOSP_]");
        assert_eq!(name(tok.no_timestamps()), "[_NOT_]");
        assert_eq!(name(tok.timestamp_begin() + 1500), "[_TT_1500]");
        assert_eq!(name(65), "A");
        assert_eq!(ftype(Some(DType::I8)), -1);
        assert_eq!(
            model_type(&Hparams {
                n_audio_layer: 5,
                ..hparams()
            }),
            "unknown"
        );
    }
}
