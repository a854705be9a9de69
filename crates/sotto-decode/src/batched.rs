//! Many windows decoded together, as faster-whisper 1.2.1's `BatchedInferencePipeline`: the
//! audio is cut into chunks of at most 30 s beforehand (by the VAD), every chunk is one
//! window with the same prompt, and the windows of a batch share each decoder pass, so the
//! decoder's weights are read once per step for all of them instead of once per window.
//!
//! What changes against [`crate::transcribe`], as in faster-whisper's batched mode: no
//! window sees the text of another (no `condition_on_previous_text`), the windows are
//! decoded together at the first temperature (which must be 0), and no window is skipped
//! for its no-speech probability. Each window's search (greedy or beam) is the same code as
//! the sequential one's, stepped from outside ([`GreedyState`], [`BeamState`]).
//!
//! One thing faster-whisper's batched mode does not do: a window whose result fails the
//! thresholds (too repetitive, too unlikely) goes through the temperature fallback on its
//! own, as the sequential loop's windows do, when more temperatures are given. With one
//! temperature (faster-whisper's batched mode uses only the first), nothing is retried.

use crate::align::{get_end, Aligner};
use crate::beam::{BeamSearch, BeamState};
use crate::fallback::{compression_ratio, generate_with_fallback, Fallback};
use crate::greedy::{DecodeTask, DecodingResult, GreedyState, Rng, Search};
use crate::inference::{Inference, LogitNeed};
use crate::segments::{split_by_timestamps, split_cut};
use crate::shortlist::{ShortlistRows, ShortlistSpec, Shortlists};
use crate::tokenizer::Tokenizer;
use crate::transcribe::{
    check_vocab, detect_language_over, encode_hint, filters, given_language, language_of,
    max_steps, prompt, LanguageDetection, MelView, Segment, TranscribeOptions, Transcript,
    N_FRAMES,
};
use crate::{DecodeError, Result};

/// One window's search at temperature 0, stepped by [`decode_windows`].
enum State {
    Greedy(GreedyState),
    Beam(BeamState),
}

impl State {
    /// Chooses from the window's rows; the next sequences' origins (among its live rows)
    /// and tokens, or None when its search is over.
    fn step(
        &mut self,
        task: &DecodeTask,
        rows: &mut ShortlistRows<'_>,
        step: usize,
    ) -> Option<(Vec<usize>, Vec<u32>)> {
        match self {
            State::Greedy(g) => (g.step(task, rows.row(0), step)).map(|t| (vec![0], vec![t])),
            State::Beam(b) => b.step(task, rows, step),
        }
    }

    fn finish(self, no_speech_prob: f64) -> DecodingResult {
        match self {
            State::Greedy(g) => g.finish(no_speech_prob),
            State::Beam(b) => b.finish(no_speech_prob),
        }
    }
}

/// Decodes window `i` of `mels` (each Shape: [n_mels, 3000]) with `tasks[i]` at temperature
/// 0, greedily (`beam` None) or by beam search, all windows in shared decoder passes: the
/// prompts in two passes (up to `<|startoftranscript|>`, whose row gives the no-speech
/// probability, then the rest with the forced tokens), then one pass per step over every
/// live sequence of every window. Each result is what the window decoded alone gives, up
/// to the rounding of a batched product.
///
/// The tasks must have prompts of one length, the same `<|startoftranscript|>` index,
/// forced tokens of one length and the same filters and step limit; at most
/// [`Inference::max_windows`] windows.
pub fn decode_windows(
    inf: &mut dyn Inference,
    mels: &[&[f32]],
    tasks: &[DecodeTask],
    beam: Option<BeamSearch>,
) -> Result<Vec<DecodingResult>> {
    let invalid = |reason: String| DecodeError::InvalidOption {
        name: "batch",
        reason,
    };
    let Some(first) = tasks.first() else {
        return Ok(Vec::new());
    };
    let shape = |t: &DecodeTask| (t.prompt.len(), t.sot_index, t.forced.len(), t.max_steps);
    if mels.len() != tasks.len() || tasks.iter().any(|t| shape(t) != shape(first)) {
        return Err(invalid(format!(
            "{} windows for {} tasks; every task needs the same prompt, forced and step lengths",
            mels.len(),
            tasks.len()
        )));
    }
    if first.sot_index >= first.prompt.len() {
        return Err(invalid(format!(
            "sot index {} outside a prompt of {}",
            first.sot_index,
            first.prompt.len()
        )));
    }
    let w = tasks.len();
    if w > inf.max_windows() {
        return Err(invalid(format!(
            "{w} windows, but the model takes {} at once",
            inf.max_windows()
        )));
    }
    let need = first.logit_need(beam.map_or(1, |b| 2 * b.beam_size));
    inf.set_logit_need(&need);
    let spec = ShortlistSpec::from_need(inf.n_vocab(), first.eot as usize, &need);
    let mut lists = Shortlists::new(spec);
    inf.encode_windows(mels).map_err(DecodeError::Inference)?;
    let head: Vec<u32> = (tasks.iter())
        .flat_map(|t| &t.prompt[..=t.sot_index])
        .copied()
        .collect();
    inf.decode_batch_shortlists(&head, w, &mut lists)
        .map_err(DecodeError::Inference)?;
    let no_speech: Vec<f64> = (tasks.iter().enumerate())
        .map(|(i, t)| lists.row(i).softmax_at(t.no_speech))
        .collect();
    let rest: Vec<u32> = (tasks.iter())
        .flat_map(|t| t.prompt[t.sot_index + 1..].iter().chain(t.forced))
        .copied()
        .collect();
    if !rest.is_empty() {
        inf.decode_batch_shortlists(&rest, w, &mut lists)
            .map_err(DecodeError::Inference)?;
    }
    let mut states: Vec<State> = tasks
        .iter()
        .map(|t| match beam {
            Some(b) => BeamState::new(b, t).map(State::Beam),
            None => Ok(State::Greedy(GreedyState::new(t))),
        })
        .collect::<Result<_>>()?;
    // Live rows of each window, in batch order.
    let mut live = vec![1usize; w];
    let (mut origins, mut tokens) = (Vec::new(), Vec::new());
    for step in first.forced.len()..first.max_steps {
        origins.clear();
        tokens.clear();
        let mut row0 = 0;
        for ((state, task), rows) in states.iter_mut().zip(tasks).zip(live.iter_mut()) {
            if *rows == 0 {
                continue;
            }
            let base = row0;
            row0 += *rows;
            *rows = match state.step(task, &mut lists.range(base, row0), step) {
                Some((o, t)) => {
                    origins.extend(o.iter().map(|&o| base + o));
                    tokens.extend_from_slice(&t);
                    t.len()
                }
                None => 0,
            };
        }
        if tokens.is_empty() {
            break;
        }
        if origins.len() != row0 || origins.iter().enumerate().any(|(i, &o)| i != o) {
            inf.reorder(&origins).map_err(DecodeError::Inference)?;
        }
        inf.decode_batch_shortlists(&tokens, tokens.len(), &mut lists)
            .map_err(DecodeError::Inference)?;
    }
    Ok(states
        .into_iter()
        .zip(no_speech)
        .map(|(s, ns)| s.finish(ns))
        .collect())
}

/// One chunk of a batched transcription: a stretch of at most 30 s decoded as one window.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    /// Its log-mel, as [`crate::transcribe`] takes the whole audio's (the last frame
    /// covers the padding).
    pub mel: MelView<'a>,
    /// Seconds from the start of the audio the segments' times count from.
    pub offset: f64,
    /// Seconds of audio in it.
    pub duration: f64,
}

/// Transcribes `chunks` in batches of up to `batch_size` windows (fewer where the model
/// takes fewer at once), as faster-whisper's `BatchedInferencePipeline.transcribe` does with
/// the chunks its VAD made; `on_segment` sees each segment as its batch is done, and
/// returning false stops after it.
///
/// From `opts`: language (detected, when None on a multilingual model, from the first 30 s
/// of the chunks joined), task, beam size, patience, length penalty, the temperatures (the
/// first must be 0; the others, with the thresholds and `best_of`, are a failing window's
/// fallback), initial prompt (every window's, encoded as faster-whisper's batched
/// mode does, without a leading space), hotwords, suppression, timestamps, maximum new
/// tokens, word timing and segment limits. Not prefixes or clip timestamps: errors.
pub fn transcribe_batched(
    inf: &mut dyn Inference,
    tok: &Tokenizer,
    chunks: &[Chunk],
    opts: &TranscribeOptions,
    batch_size: usize,
    on_segment: &mut dyn FnMut(&Segment) -> bool,
) -> Result<Transcript> {
    let invalid = |name, reason: &str| DecodeError::InvalidOption {
        name,
        reason: reason.into(),
    };
    check_vocab(inf, tok)?;
    if batch_size == 0 {
        return Err(invalid("batch_size", "must be at least 1"));
    }
    if opts.temperatures.first().is_some_and(|&t| t != 0.0) {
        return Err(invalid(
            "temperature",
            "batched transcription decodes at temperature 0 first (the others are the fallback)",
        ));
    }
    if opts.prefix.is_some() {
        return Err(invalid(
            "prefix",
            "batched transcription has no prefix: every window gets the same prompt",
        ));
    }
    if !opts.clip_timestamps.is_empty() {
        return Err(invalid(
            "clip_timestamps",
            "batched transcription takes its chunks instead",
        ));
    }
    if opts.audio_ctx.is_some() {
        return Err(invalid(
            "audio_ctx",
            "batched transcription decodes chunks of up to 30 s; a shorter encoder context \
             works one window at a time",
        ));
    }
    opts.check_chunk_length()?;
    inf.set_audio_ctx(None).map_err(DecodeError::Inference)?;
    let beam = opts.zero_search_kind()?;
    for c in chunks {
        c.mel.check()?;
    }
    let language = batched_language(inf, tok, chunks, opts)?;
    let mut out = Transcript {
        language: language.language.into(),
        language_probability: language.probability,
        duration: chunks.iter().map(|c| c.duration).sum(),
        segments: Vec::new(),
    };
    let sot_sequence = tok.sot_sequence(&out.language, opts.task)?;
    let filters = filters(tok, opts)?;
    let filter_refs: Vec<&dyn crate::LogitFilter> = filters.iter().map(|f| f.as_ref()).collect();
    let mut previous = opts
        .initial_prompt
        .as_deref()
        .map(|p| tok.encode(p))
        .unwrap_or_default();
    previous.drain(..previous.len().saturating_sub(opts.context_room()));
    let hotwords = encode_hint(tok, opts.hotwords.as_deref());
    let p = prompt(
        tok,
        &previous,
        hotwords.as_deref(),
        &sot_sequence,
        opts.without_timestamps,
    );
    let task = DecodeTask {
        prompt: &p,
        sot_index: p.iter().position(|&t| t == tok.sot()).unwrap_or(0),
        forced: &[],
        eot: tok.eot(),
        no_speech: tok.no_speech(),
        max_steps: max_steps(p.len(), 0, opts.max_new_tokens)?,
        filters: &filter_refs,
    };
    let heads = opts.word_heads()?;
    let aligner = Aligner {
        tok,
        language: &out.language,
        sot_sequence: &sot_sequence,
        heads: &heads,
        prepend: &opts.prepend_punctuations,
        append: &opts.append_punctuations,
    };
    let fallback = opts.fallback();
    let mut rng = Rng::new(opts.seed);
    let mut last_speech_timestamp = 0.0;
    let multilingual = opts.multilingual && tok.is_multilingual();
    for batch in chunks.chunks(batch_size.min(inf.max_windows().max(1))) {
        let windows: Vec<Vec<f32>> = (batch.iter())
            .map(|c| c.mel.window(0, c.mel.content_frames()))
            .collect();
        let refs: Vec<&[f32]> = windows.iter().map(|w| &w[..]).collect();
        // faster-whisper's `multilingual`: each window's prompt in its own language.
        let mut prompts = vec![p.clone(); batch.len()];
        if multilingual {
            for (q, lang) in prompts.iter_mut().zip(window_languages(inf, tok, &refs)?) {
                q[task.sot_index + 1] = lang;
            }
        }
        let tasks: Vec<DecodeTask> = (prompts.iter())
            .map(|q| DecodeTask { prompt: q, ..task })
            .collect();
        let results = decode_windows(inf, &refs, &tasks, beam)?;
        for (i, ((chunk, result), task)) in batch.iter().zip(results).zip(&tasks).enumerate() {
            // The batched result is the first attempt; a failing one is retried hotter on
            // its window alone.
            let fb = if fallback.temperatures.len() > 1 {
                inf.select_window(i).map_err(DecodeError::Inference)?;
                let mut first = Decoded(result);
                generate_with_fallback(inf, tok, task, &fallback, &mut first, &mut rng)?
            } else {
                Fallback {
                    compression_ratio: compression_ratio(tok.decode(&result.tokens).trim()),
                    result,
                    temperature: 0.0,
                    exhausted: false,
                }
            };
            let result = fb.result;
            // faster-whisper: `int(ceil(duration) * frames_per_second)`, seek `int(offset · 100)`.
            let segment_size = (chunk.duration.ceil() * 100.0) as usize;
            let seek = (chunk.offset * 100.0) as usize;
            let (mut cuts, _, _) = split_by_timestamps(
                tok,
                &result.tokens,
                &result.logprobs,
                chunk.offset,
                segment_size,
                chunk.duration,
                0,
            );
            if opts.needs_word_timing() {
                inf.select_window(i).map_err(DecodeError::Inference)?;
                last_speech_timestamp = aligner.add_word_timestamps(
                    inf,
                    &mut cuts,
                    seek,
                    segment_size.min(N_FRAMES),
                    last_speech_timestamp,
                )?;
                if let Some(end) = get_end(&cuts) {
                    last_speech_timestamp = end;
                }
            }
            for cut in cuts {
                let text = tok.decode(&cut.tokens);
                if cut.start == cut.end || text.trim().is_empty() {
                    continue;
                }
                let pieces = split_cut(tok, &cut, opts.limits()).unwrap_or_else(|| vec![cut]);
                for piece in pieces {
                    let text = tok.decode(&piece.tokens);
                    out.segments.push(Segment {
                        id: out.segments.len() + 1,
                        seek,
                        start: piece.start,
                        end: piece.end,
                        compression_ratio: compression_ratio(&text),
                        text,
                        tokens: piece.tokens,
                        token_logprobs: piece.logprobs,
                        avg_logprob: result.avg_logprob,
                        no_speech_prob: result.no_speech_prob,
                        temperature: fb.temperature,
                        words: if opts.word_timestamps {
                            piece.words
                        } else {
                            Vec::new()
                        },
                    });
                    if !on_segment(out.segments.last().expect("just pushed")) {
                        return Ok(out);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The language token of each window (faster-whisper's batched `multilingual`): the
/// likeliest after `<|startoftranscript|>` decoded against that window alone. The windows
/// are encoded for it, and again by the batch that decodes them.
fn window_languages(inf: &mut dyn Inference, tok: &Tokenizer, mels: &[&[f32]]) -> Result<Vec<u32>> {
    inf.encode_windows(mels).map_err(DecodeError::Inference)?;
    inf.set_logit_need(&LogitNeed::All);
    let spec = ShortlistSpec::from_need(inf.n_vocab(), tok.eot() as usize, &LogitNeed::All);
    let mut lists = Shortlists::new(spec);
    let w = mels.len();
    inf.decode_batch_shortlists(&vec![tok.sot(); w], w, &mut lists)
        .map_err(DecodeError::Inference)?;
    let first = tok.sot() as usize + 1;
    (0..w)
        .map(|i| {
            let row = lists.row(i);
            let langs = row.held_in(first, first + tok.n_languages()).1;
            let code = language_of(tok, langs).language;
            tok.language_token(code)
                .ok_or_else(|| DecodeError::UnknownLanguage {
                    code: code.into(),
                    known: tok.n_languages(),
                })
        })
        .collect()
}

/// The "search" of a window already decoded in a batch: its result, for the fallback's
/// first attempt.
struct Decoded(DecodingResult);

impl Search for Decoded {
    fn search(&mut self, _: &mut dyn Inference, _: &DecodeTask) -> Result<DecodingResult> {
        Ok(self.0.clone())
    }
}

/// The language [`transcribe_batched`] with `opts` decodes `chunks` in, its probability
/// and (when detected) every language's, without decoding (faster-whisper's batched `transcribe()` returns it before
/// its segments): as given, "en" on English-only models, else detected from the chunks'
/// log-mel joined, as transcribing detects it.
pub fn batched_transcribe_language(
    inf: &mut dyn Inference,
    tok: &Tokenizer,
    chunks: &[Chunk],
    opts: &TranscribeOptions,
) -> Result<LanguageDetection> {
    check_vocab(inf, tok)?;
    inf.set_audio_ctx(None).map_err(DecodeError::Inference)?;
    for c in chunks {
        c.mel.check()?;
    }
    batched_language(inf, tok, chunks, opts)
}

/// The language of a batched transcription and its probability: as given, "en" on
/// English-only models, else detected as faster-whisper's batched mode does, on the
/// chunks' log-mel joined, with one frame of -1.5 after them (the first
/// `language_detection_segments` windows of it).
fn batched_language(
    inf: &mut dyn Inference,
    tok: &Tokenizer,
    chunks: &[Chunk],
    opts: &TranscribeOptions,
) -> Result<LanguageDetection> {
    if !tok.is_multilingual() {
        return Ok(LanguageDetection::given("en"));
    }
    if let Some(code) = opts.language.as_deref() {
        return given_language(tok, code);
    }
    let n_mels = chunks.first().map_or(80, |c| c.mel.n_mels);
    if chunks.iter().any(|c| c.mel.n_mels != n_mels) {
        return Err(DecodeError::Mel("chunks of different mel bins".into()));
    }
    // Only the first windows' frames are read: join no more than those.
    let limit = opts.language_detection_segments.saturating_mul(N_FRAMES);
    let mut rows = vec![Vec::with_capacity(limit.min(4 * N_FRAMES) + 1); n_mels];
    for c in chunks {
        let have = rows[0].len();
        if have >= limit {
            break;
        }
        let take = c.mel.content_frames().min(limit - have);
        for (m, row) in rows.iter_mut().enumerate() {
            row.extend_from_slice(&c.mel.data[m * c.mel.n_frames..][..take]);
        }
    }
    let frames = rows[0].len() + 1;
    let data: Vec<f32> = rows
        .into_iter()
        .flat_map(|mut r| {
            r.push(-1.5);
            r
        })
        .collect();
    let joined = MelView {
        data: &data,
        n_mels,
        n_frames: frames,
    };
    // The joined mel's last frame is the -1.5 one: all of it is "content" here.
    let (d, _) = detect_language_over(
        inf,
        tok,
        &joined,
        0,
        N_FRAMES,
        opts.language_detection_segments,
        opts.language_detection_threshold,
    )?;
    Ok(d)
}
