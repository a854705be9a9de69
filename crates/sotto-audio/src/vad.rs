//! Voice activity detection as faster-whisper's `vad_filter` does it, after the network:
//! the Silero VAD (`sotto_model::silero`) gives each 32 ms window of 16 kHz audio a speech
//! probability, `speech_timestamps` turns them into padded speech stretches,
//! `collect_speech` joins them, and [`SpeechMap`] maps times in the speech-only audio back
//! to the original.

/// Samples per VAD window at 16 kHz.
pub const WINDOW: usize = 512;

/// faster-whisper's `VadOptions`, same defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct VadOptions {
    /// Probability at or above which a window is speech. Default 0.5.
    pub threshold: f32,
    /// Below this a window is silence; None: `max(threshold - 0.15, 0.01)`.
    pub neg_threshold: Option<f32>,
    /// Shorter speech is dropped. Default 0 ms.
    pub min_speech_duration_ms: f64,
    /// Longer speech is split (at a silence where one was seen). Default unlimited.
    pub max_speech_duration_s: f64,
    /// Silence at least this long ends a stretch of speech. Default 2000 ms.
    pub min_silence_duration_ms: f64,
    /// Each stretch is widened by this on both sides. Default 400 ms.
    pub speech_pad_ms: f64,
}

impl Default for VadOptions {
    fn default() -> Self {
        VadOptions {
            threshold: 0.5,
            neg_threshold: None,
            min_speech_duration_ms: 0.0,
            max_speech_duration_s: f64::INFINITY,
            min_silence_duration_ms: 2000.0,
            speech_pad_ms: 400.0,
        }
    }
}

impl VadOptions {
    /// faster-whisper's batched mode's defaults (`BatchedInferencePipeline.transcribe`):
    /// stretches of at most 30 s (a window each), ended by 160 ms of silence.
    pub fn batched() -> Self {
        VadOptions {
            max_speech_duration_s: 30.0,
            min_silence_duration_ms: 160.0,
            ..VadOptions::default()
        }
    }
}

/// Groups consecutive stretches of speech into chunks of at most `max_samples` joined
/// samples (faster-whisper's `collect_chunks` with `max_duration`): ranges of indices into
/// `stretches`, in order. A stretch longer than `max_samples` is a chunk of its own (its
/// window then keeps the first 30 s).
pub fn group_speech(
    stretches: &[(usize, usize)],
    max_samples: usize,
) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let (mut first, mut joined) = (0, 0);
    for (i, &(s, e)) in stretches.iter().enumerate() {
        let len = e.saturating_sub(s);
        if joined + len > max_samples && i > first {
            groups.push(first..i);
            (first, joined) = (i, 0);
        }
        joined += len;
    }
    if first < stretches.len() {
        groups.push(first..stretches.len());
    }
    groups
}

/// Stretches of speech `[start, end)` in samples of 16 kHz audio of `n_samples`, from the
/// windows' probabilities: faster-whisper's `get_speech_timestamps`, step for step.
pub fn speech_timestamps(probs: &[f32], n_samples: usize, o: &VadOptions) -> Vec<(usize, usize)> {
    let sr = 16_000f64;
    let win = WINDOW as f64;
    let min_speech = sr * o.min_speech_duration_ms / 1000.0;
    let pad = sr * o.speech_pad_ms / 1000.0;
    let max_speech = sr * o.max_speech_duration_s - win - 2.0 * pad;
    let min_silence = sr * o.min_silence_duration_ms / 1000.0;
    let min_silence_at_max = sr * 98.0 / 1000.0;
    let neg = o.neg_threshold.unwrap_or((o.threshold - 0.15).max(0.01));

    let mut triggered = false;
    let mut speeches: Vec<(f64, f64)> = Vec::new();
    let mut current: Option<f64> = None; // start of the stretch being built
    let (mut temp_end, mut prev_end, mut next_start) = (0f64, 0f64, 0f64);
    for (i, &p) in probs.iter().enumerate() {
        let at = win * i as f64;
        if p >= o.threshold && temp_end != 0.0 {
            temp_end = 0.0;
            if next_start < prev_end {
                next_start = at;
            }
        }
        if p >= o.threshold && !triggered {
            triggered = true;
            current = Some(at);
            continue;
        }
        if let Some(start) = current.filter(|&s| triggered && at - s > max_speech) {
            if prev_end != 0.0 {
                speeches.push((start, prev_end));
                current = None;
                if next_start < prev_end {
                    triggered = false;
                } else {
                    current = Some(next_start);
                }
                (prev_end, next_start, temp_end) = (0.0, 0.0, 0.0);
            } else {
                speeches.push((start, at));
                current = None;
                (prev_end, next_start, temp_end) = (0.0, 0.0, 0.0);
                triggered = false;
                continue;
            }
        }
        if p < neg && triggered {
            if temp_end == 0.0 {
                temp_end = at;
            }
            if at - temp_end > min_silence_at_max {
                prev_end = temp_end;
            }
            if at - temp_end < min_silence {
                continue;
            }
            if let Some(start) = current {
                if temp_end - start > min_speech {
                    speeches.push((start, temp_end));
                }
            }
            current = None;
            (prev_end, next_start, temp_end) = (0.0, 0.0, 0.0);
            triggered = false;
            continue;
        }
    }
    let len = n_samples as f64;
    if let Some(start) = current {
        if len - start > min_speech {
            speeches.push((start, len));
        }
    }
    let k = speeches.len();
    for i in 0..k {
        if i == 0 {
            speeches[0].0 = (speeches[0].0 - pad).max(0.0).trunc();
        }
        if i + 1 < k {
            let silence = speeches[i + 1].0 - speeches[i].1;
            if silence < 2.0 * pad {
                let half = (silence / 2.0).floor();
                speeches[i].1 = (speeches[i].1 + half).trunc();
                speeches[i + 1].0 = (speeches[i + 1].0 - half).max(0.0).trunc();
            } else {
                speeches[i].1 = (speeches[i].1 + pad).min(len).trunc();
                speeches[i + 1].0 = (speeches[i + 1].0 - pad).max(0.0).trunc();
            }
        } else {
            speeches[i].1 = (speeches[i].1 + pad).min(len).trunc();
        }
    }
    speeches
        .into_iter()
        .map(|(s, e)| (s as usize, e as usize))
        .collect()
}

/// The speech stretches of `audio` joined end to end (faster-whisper's `collect_chunks`).
pub fn collect_speech(audio: &[f32], chunks: &[(usize, usize)]) -> Vec<f32> {
    chunks
        .iter()
        .flat_map(|&(s, e)| &audio[s.min(audio.len())..e.min(audio.len())])
        .copied()
        .collect()
}

/// Times in the joined speech back to times in the original audio (faster-whisper's
/// `SpeechTimestampsMap`).
pub struct SpeechMap {
    chunk_end_sample: Vec<usize>,
    silence_before: Vec<f64>,
}

impl SpeechMap {
    pub fn new(chunks: &[(usize, usize)]) -> SpeechMap {
        let (mut previous_end, mut silent) = (0usize, 0usize);
        let mut chunk_end_sample = Vec::with_capacity(chunks.len());
        let mut silence_before = Vec::with_capacity(chunks.len());
        for &(s, e) in chunks {
            silent += s.saturating_sub(previous_end);
            previous_end = e;
            chunk_end_sample.push(e - silent);
            silence_before.push(silent as f64 / 16_000.0);
        }
        SpeechMap {
            chunk_end_sample,
            silence_before,
        }
    }

    /// The stretch a time in the joined audio falls in (`is_end`: a time exactly at a
    /// stretch's end belongs to that stretch).
    pub fn chunk_index(&self, time: f64, is_end: bool) -> usize {
        let sample = (time * 16_000.0) as usize;
        if is_end {
            if let Some(i) = self.chunk_end_sample.iter().position(|&e| e == sample) {
                return i;
            }
        }
        let after = self.chunk_end_sample.partition_point(|&e| e <= sample);
        after.min(self.chunk_end_sample.len().saturating_sub(1))
    }

    /// `time` in the original audio, rounded to 10 ms; `chunk` when known.
    pub fn original_time(&self, time: f64, chunk: Option<usize>, is_end: bool) -> f64 {
        if self.silence_before.is_empty() {
            return time;
        }
        let i = chunk.unwrap_or_else(|| self.chunk_index(time, is_end));
        ((self.silence_before[i] + time) * 100.0).round() / 100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Groups cover every stretch once, in order; a group holds at most `max` samples
        /// unless it is one stretch; and a group closes only when the next stretch would
        /// not fit.
        #[test]
        fn groups_cover_the_stretches_within_the_limit(
            lens in proptest::collection::vec(0usize..500, 0..40),
            max in 0usize..1200,
        ) {
            let mut at = 0;
            let stretches: Vec<(usize, usize)> = lens
                .iter()
                .map(|&l| {
                    at += 7;
                    at += l;
                    (at - l, at)
                })
                .collect();
            let groups = group_speech(&stretches, max);
            let flat: Vec<usize> = groups.iter().flat_map(|g| g.clone()).collect();
            proptest::prop_assert_eq!(flat, (0..stretches.len()).collect::<Vec<_>>());
            let size = |g: &std::ops::Range<usize>| -> usize { lens[g.clone()].iter().sum() };
            for (i, g) in groups.iter().enumerate() {
                proptest::prop_assert!(!g.is_empty());
                proptest::prop_assert!(size(g) <= max || g.len() == 1);
                if let Some(next) = groups.get(i + 1) {
                    proptest::prop_assert!(size(g) + lens[next.start] > max);
                }
            }
        }
    }

    #[test]
    fn speech_is_grouped_into_chunks_as_collect_chunks_does() {
        let st = [(0, 10), (20, 25), (30, 40), (50, 51), (60, 100), (100, 101)];
        // 10 + 5 fit in 16; 10 more do not; 10 + 1 do; 40 is alone and too long; then 1.
        assert_eq!(group_speech(&st, 16), vec![0..2, 2..4, 4..5, 5..6]);
        assert_eq!(group_speech(&st, 1000), vec![0..6]);
        assert_eq!(
            group_speech(&st, 0),
            vec![0..1, 1..2, 2..3, 3..4, 4..5, 5..6]
        );
        assert!(group_speech(&[], 16).is_empty());
    }

    #[test]
    fn stretches_are_padded_and_merged_as_faster_whisper_does() {
        // 0.5 s silence, 1 s speech, 3 s silence, 1 s speech, 1 s silence (in windows).
        let w = |s: f64| (s * 16_000.0 / WINDOW as f64) as usize;
        let mut p = vec![0.0f32; w(6.5)];
        p[w(0.5)..w(1.5)].fill(0.9);
        p[w(4.5)..w(5.5)].fill(0.9);
        let n = 6 * 16_000 + 8000;
        let s = speech_timestamps(&p, n, &VadOptions::default());
        assert_eq!(s.len(), 2, "{s:?}");
        // The first starts 400 ms early, clamped at 0; the gap (over 2 s of silence) keeps
        // them apart, each padded by 400 ms.
        assert_eq!(s[0].0, (w(0.5) * WINDOW).saturating_sub(6400));
        assert_eq!(s[0].1, w(1.5) * WINDOW + 6400);
        assert_eq!(s[1].0, w(4.5) * WINDOW - 6400);
        let audio: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let joined = collect_speech(&audio, &s);
        assert_eq!(joined.len(), s.iter().map(|(a, b)| b - a).sum::<usize>());
        let map = SpeechMap::new(&s);
        // 0.1 s into the second stretch of the joined audio.
        let first = (s[0].1 - s[0].0) as f64 / 16_000.0;
        let t = map.original_time(first + 0.1, None, false);
        assert!((t - (s[1].0 as f64 / 16_000.0 + 0.1)).abs() < 0.011, "{t}");
        assert_eq!(
            map.original_time(0.0, None, false),
            (s[0].0 as f64 / 16_000.0 * 100.0).round() / 100.0
        );
    }

    #[test]
    fn silence_gives_no_speech() {
        assert!(speech_timestamps(&[0.01; 100], 51_200, &VadOptions::default()).is_empty());
        assert!(collect_speech(&[0.0; 10], &[]).is_empty());
        assert_eq!(SpeechMap::new(&[]).original_time(1.25, None, false), 1.25);
    }
}
