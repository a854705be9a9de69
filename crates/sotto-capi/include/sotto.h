/* sotto: Whisper speech-to-text. The C interface of libsotto_capi.
 *
 * A model is loaded once and may be shared by any number of threads. Each thread that
 * transcribes opens its own session (KV caches, buffers, worker threads), used by one
 * thread at a time. A transcript is an immutable result: its strings stay valid until it
 * is freed.
 *
 * Failure is a NULL (or negative, or NaN) return; sotto_last_error() then says why, until
 * the next failure on the same thread. No function aborts the process on bad input.
 * Strings passed in are NUL-terminated UTF-8.
 */
#ifndef SOTTO_H
#define SOTTO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sotto_model sotto_model;
typedef struct sotto_session sotto_session;
typedef struct sotto_transcript sotto_transcript;
typedef struct sotto_vad sotto_vad;
typedef struct sotto_speech sotto_speech;

/* Called as each segment is finished: its index, start and end in seconds, and text
 * (valid during the call). Return nonzero to go on, 0 to stop early (the transcript then
 * holds the segments so far). */
typedef int (*sotto_segment_callback)(int index, double start, double end, const char *text,
                                      void *user_data);

/* How the voice activity detector finds speech: faster-whisper's VadOptions. Get them
 * from sotto_vad_default_params(), then change fields. */
typedef struct sotto_vad_params {
    size_t struct_size;          /* sizeof(sotto_vad_params), set by the defaults */
    float threshold;             /* a 32 ms window is speech at or above this; default 0.5 */
    float neg_threshold;         /* speech ends below this; < 0: max(threshold - 0.15, 0.01) */
    int min_speech_duration_ms;  /* shorter speech is dropped; default 0 */
    float max_speech_duration_s; /* longer speech is split; <= 0: no limit (the default) */
    int min_silence_duration_ms; /* silence this long ends speech; default 2000 */
    int speech_pad_ms;           /* added to each side of a stretch; default 400 */
} sotto_vad_params;

/* Called as each segment is finished, with a transcript of that segment alone (its
 * segment 0, read with the sotto_transcript_* functions; valid during the call only; its
 * language and duration are not set). Return nonzero to go on, 0 to stop early. */
typedef int (*sotto_segment_transcript_callback)(const sotto_transcript *segment,
                                                 void *user_data);

/* Decoding options. Get them from sotto_default_params(), then change fields. Fields are
 * only ever appended: a program built against an older sotto.h keeps working, the fields
 * it does not know keeping their defaults. */
typedef struct sotto_params {
    size_t struct_size;          /* sizeof(sotto_params), set by sotto_default_params() */
    const char *language;        /* code ("en"), English name, or "auto"; NULL: auto
                                    (English-only models: en) */
    int translate;               /* nonzero: translate to English */
    int beam_size;               /* 1 decodes greedily; default 5 */
    int best_of;                 /* candidates sampled above temperature 0; default 5 */
    float temperature;           /* first temperature; default 0 */
    float temperature_inc;       /* fallback step up to 1; 0 turns the fallback off;
                                    default 0.2 */
    int no_timestamps;           /* nonzero: text only, one segment per 30 s window */
    int word_timestamps;         /* nonzero: time each word (sotto_transcript_word_*) */
    const char *initial_prompt;  /* text before the audio, or NULL */
    sotto_segment_callback on_segment; /* or NULL */
    void *user_data;             /* passed to on_segment */
    const sotto_vad *vad;        /* non-NULL: transcribe only the speech it finds (as
                                    faster-whisper's vad_filter); times stay the audio's */
    sotto_vad_params vad_params; /* how the VAD finds speech */
    int condition_on_previous_text; /* prompt each window with the text so far; default 1 */
    float patience;              /* beam search stops after beam_size x patience finished
                                    hypotheses; default 1 */
    float length_penalty;        /* rank by sum log-prob / length^x; default 1 */
    float compression_ratio_threshold; /* retry above it; NaN: never; default 2.4 */
    float log_prob_threshold;    /* retry below it; NaN: never; default -1 */
    float no_speech_threshold;   /* skip a silent window above it; NaN: never; default 0.6 */
    const char *hotwords;        /* words to steer spelling, or NULL */
    int max_len;                 /* split segments longer than this many characters between
                                    words (whisper.cpp's max_len); 0: no limit */
    sotto_segment_transcript_callback on_segment_transcript; /* or NULL; gets user_data */
    int batch_size;              /* > 0: faster-whisper's batched mode (needs vad): the VAD's
                                    stretches (max_speech_duration_s capped at 30) joined into
                                    chunks of up to 30 s, up to batch_size decoded together;
                                    no text carried between chunks; a chunk that fails the
                                    thresholds falls back to the next temperatures alone.
                                    0 (default): one window after another */
    const float *clip_timestamps; /* [start, end, start, end, ...] seconds (an odd count runs
                                     the last to the end): transcribe only these, as
                                     faster-whisper's clip_timestamps; with batch_size, each
                                     clip is a chunk (no vad). NULL: all */
    int n_clip_timestamps;        /* floats at clip_timestamps */
    float repetition_penalty;     /* > 0: logits of tokens a window already produced are
                                     divided by it (multiplied when negative); default 1,
                                     off (faster-whisper's repetition_penalty) */
    int no_repeat_ngram_size;     /* > 0: never repeat an n-gram of this many tokens in a
                                     window; default 0, off */
    int multilingual;             /* nonzero: detect each 30 s window's language and decode
                                     it in that language (multilingual models) */
    float language_detection_threshold; /* detection stops at a window whose likeliest
                                           language is above it; default 0.5 */
    int language_detection_segments;    /* detection reads up to this many 30 s windows
                                           (none above the threshold: the most frequent
                                           wins); default 1 */
    const char *suppress_regex;   /* never produce a text token this regular expression
                                     matches in whole (whisper.cpp's suppress_regex; Rust
                                     regex syntax), or NULL */
    const char *grammar;          /* a GBNF grammar each window's text should follow
                                     (whisper.cpp's grammar sampling): text tokens it cannot
                                     take next are lowered by grammar_penalty. NULL: none */
    const char *grammar_rule;     /* its start rule; NULL: "root" */
    float grammar_penalty;        /* how much those logits are lowered; default 100 */
    int max_context;              /* most tokens of earlier text (initial prompt included)
                                     a window's prompt carries, its <|startofprev|> counted
                                     (whisper.cpp's n_max_text_ctx): 0 none; default -1,
                                     half the context (224) */
    uint64_t seed;                /* seed of the sampler at fallback temperatures; default 0 */
    float entropy_threshold;      /* retry at the next temperature when the last 32 tokens
                                     of a longer result are spread below this entropy
                                     (nats; whisper.cpp's entropy_thold); default NaN, off */
    int audio_ctx;                /* encoder positions per window, 20 ms each (whisper.cpp's
                                     audio_ctx): shorter windows, a faster encoder, text
                                     perhaps worse; the CPU only, not with batch_size;
                                     default 0, whole 30 s windows */
    int chunk_length;             /* seconds of audio per window, 1 to 30, zero-padded to
                                     30 s for the encoder (faster-whisper's chunk_length;
                                     batched, the longest chunk); default 0, 30 s */
    /* faster-whisper's transcribe() options, with its defaults: */
    float prompt_reset_on_temperature; /* a window kept at a temperature above this
                                          carries no text to the next; default 0.5 */
    int suppress_blank;           /* no blank or end token first; default 1 */
    float max_initial_timestamp;  /* latest first timestamp of a window, s; default 1 */
    int max_new_tokens;           /* most tokens decoded per window; default 0, no limit */
    float hallucination_silence_threshold; /* with word timing (turned on), skip silences
                                     longer than this before a likely hallucination, s;
                                     default NaN, off */
    const char *prefix;           /* text the first window's transcript begins with, or
                                     NULL */
    const char *prepend_punctuations; /* merged into the following word; NULL: the
                                     default */
    const char *append_punctuations;  /* merged into the previous word; NULL: the
                                     default */
    const int *suppress_tokens;   /* n_suppress_tokens ids never produced, -1 for the
                                     non-speech symbols; NULL: the default, {-1} */
    int n_suppress_tokens;
} sotto_params;

/* The library's version, e.g. "0.1.0". */
const char *sotto_version(void);

/* Why the last failing call on this thread failed. Never NULL. */
const char *sotto_last_error(void);

/* The defaults: faster-whisper's transcribe() defaults. */
sotto_params sotto_default_params(void);

/* Loads a model: a name (tiny.en, base, ...: from the cache, fetched on first use) or a
 * path to a CTranslate2 folder or whisper.cpp ggml .bin. device: "cpu", "cuda", "cuda:N",
 * "auto" or NULL (auto). */
sotto_model *sotto_model_load(const char *name_or_path, const char *device);
/* sotto_model_load with the encoder's arithmetic on the CPU, as `sotto transcribe
 * --encoder-precision` takes it: "auto" or NULL, "f32" (the reference path), "bf16",
 * "bf16-fast", "int8", "int16"; a level this CPU cannot run is an error. */
sotto_model *sotto_model_load_ex(const char *name_or_path, const char *device,
                                 const char *encoder_precision);
/* sotto_model_load_ex with flags, an OR of SOTTO_LOAD_* (0: none; other bits are an
 * error): every logit from the f16 vocabulary rows (`--exact-logits`), and an f16 file's
 * decoder layers quantized to q8_0 as they load (`--quantize-decoder`, the CPU: half the
 * bytes a decoder step reads, what bounds medium and large models' tokens). */
#define SOTTO_LOAD_EXACT_LOGITS 1u
#define SOTTO_LOAD_QUANTIZE_DECODER 2u
sotto_model *sotto_model_load_with(const char *name_or_path, const char *device,
                                   const char *encoder_precision, unsigned flags);
void sotto_model_free(sotto_model *model);
/* 1 if the model knows languages other than English, 0 if not, -1 on a NULL model. */
int sotto_model_is_multilingual(const sotto_model *model);
/* Where the model runs: "cpu", "cuda" (GPU 0) or "cuda:N"; NULL on a NULL model. Valid
 * until the model is freed. */
const char *sotto_model_device(const sotto_model *model);
/* Why a model loaded for "auto" runs on the CPU although a GPU was found (the GPU could
 * not take it), else ""; NULL on a NULL model. Valid until the model is freed. */
const char *sotto_model_device_note(const sotto_model *model);
/* The i-th model name sotto can fetch (tiny.en, tiny, base.en, ...), NULL past the last. */
const char *sotto_known_model(int i);
/* The folder or file a name or path loads from, as sotto_model_load finds it: a path as it
 * is, else the model cache (cache_dir, or NULL for $SOTTO_CACHE_DIR and the default), else
 * fetched into it unless local_only is not 0. Writes the path and a NUL to buf when they
 * fit in cap bytes; returns the path's length in bytes (call again with more room when it
 * is cap or more), -1 on failure. */
int sotto_model_path(const char *name_or_path, const char *cache_dir, int local_only,
                     char *buf, size_t cap);

/* A new session of the model; n_threads <= 0 uses every core. The session keeps the
 * model alive: the model may be freed first. */
sotto_session *sotto_session_new(const sotto_model *model, int n_threads);
void sotto_session_free(sotto_session *session);

/* Decodes an audio file (wav, flac, mp3, ogg, opus, m4a, webm; any rate and channel count) to 16 kHz mono:
 * *n_samples floats, to be given back to sotto_audio_free. */
float *sotto_audio_load(const char *path, size_t *n_samples);
/* The same, from a whole audio file held in memory (len bytes at data). */
float *sotto_audio_decode(const void *data, size_t len, size_t *n_samples);
/* sotto_audio_decode keeping the first two channels apart: left and right interleaved at
 * 16 kHz (mono input in both), *n_samples floats (twice the frames). */
float *sotto_audio_decode_stereo(const void *data, size_t len, size_t *n_samples);
void sotto_audio_free(float *samples, size_t n_samples);

/* Live audio at another rate to 16 kHz, with the filter every decode uses (libswresample's).
 * sotto_resampler_new: NULL where the rate is not taken. sotto_resampler_push feeds n mono
 * samples and returns the 16 kHz samples now ready (*n_out of them, for sotto_audio_free;
 * NULL with *n_out 0 when none is: the filter needs some input ahead). sotto_resampler_finish
 * ends the stream with the rest; all of them are round(n * 16000 / rate) for the n fed. */
typedef struct sotto_resampler sotto_resampler;
sotto_resampler *sotto_resampler_new(int rate);
float *sotto_resampler_push(sotto_resampler *r, const float *samples, size_t n, size_t *n_out);
float *sotto_resampler_finish(sotto_resampler *r, size_t *n_out);
void sotto_resampler_free(sotto_resampler *r);

/* Transcribes 16 kHz mono samples (params NULL: the defaults). */
sotto_transcript *sotto_transcribe(sotto_session *session, const float *samples,
                                   size_t n_samples, const sotto_params *params);
/* Transcribes only the stretches of speech given: n_speech (start, end) pairs of seconds
   at speech, in order, as sotto_vad_detect found them (params->vad is not used; with
   params->batch_size > 0 each stretch is at most 30 s). Times stay the samples'. */
sotto_transcript *sotto_transcribe_speech(sotto_session *session, const float *samples,
                                          size_t n_samples, const double *speech,
                                          size_t n_speech, const sotto_params *params);
/* Transcribes an audio file (wav, flac, mp3, ogg, opus, m4a, webm; any rate and channel count). */
sotto_transcript *sotto_transcribe_file(sotto_session *session, const char *path,
                                        const sotto_params *params);
/* The spoken language of the first 30 s: a static code ("de"); its probability in
 * *probability when that is not NULL. Multilingual models only. */
const char *sotto_detect_language(sotto_session *session, const float *samples,
                                  size_t n_samples, float *probability);
/* sotto_detect_language over up to `segments` 30 s windows, until one's likeliest language
 * is above `threshold`; when none is, the language most often on top, with its best
 * probability (faster-whisper's language_detection_segments and _threshold: 1 and 0.5
 * give sotto_detect_language). */
const char *sotto_detect_language_ex(sotto_session *session, const float *samples,
                                     size_t n_samples, int segments, float threshold,
                                     float *probability);
/* sotto_detect_language_ex, also writing every language's probability (the last window
 * read's, as faster-whisper's all_language_probs) to lang_probs when that is not NULL:
 * sotto_lang_max_id() + 1 floats indexed by language id, as whisper.cpp's
 * whisper_lang_auto_detect. */
const char *sotto_detect_language_probs(sotto_session *session, const float *samples,
                                        size_t n_samples, int segments, float threshold,
                                        float *probability, float *lang_probs);
/* The language sotto_transcribe with `params` would decode in, without transcribing:
 * params->language when set (probability 1), else detected as transcribing detects it (one
 * window at a time: from the first clip's start, over chunk_length or audio_ctx windows,
 * up to language_detection_segments of them, the log-mel scaled over all the speech; with
 * params->batch_size: on the chunks' log-mels joined, as faster-whisper's batched mode), on
 * the speech params->vad finds when set. A static code, its probability in *probability
 * when that is not NULL; "en" for English-only models; "" and 0 when the VAD finds no
 * speech. lang_probs, when not NULL (sotto_lang_max_id() + 1 floats), gets every
 * language's probability by id when the language was detected, all 0 when it was given or
 * not detected. For callers that name the language before the segments come, as
 * faster-whisper's transcribe() does (its info.language_probability and
 * info.all_language_probs). */
const char *sotto_transcribe_language(sotto_session *session, const float *samples,
                                      size_t n_samples, const sotto_params *params,
                                      float *probability, float *lang_probs);
/* sotto_transcribe_language for sotto_transcribe_speech: the language its transcription of
 * the stretches `speech` (n_speech start, end pairs of seconds) would decode in. */
const char *sotto_transcribe_speech_language(sotto_session *session, const float *samples,
                                             size_t n_samples, const double *speech,
                                             size_t n_speech, const sotto_params *params,
                                             float *probability, float *lang_probs);
/* Language ids, as whisper.cpp's: 0 .. sotto_lang_max_id() in Whisper's token order ("en"
 * is 0). sotto_lang_str gives an id's static code (NULL out of range); sotto_lang_id a
 * code's or English name's id ("de", "german"), -1 when unknown. */
int sotto_lang_max_id(void);
const char *sotto_lang_str(int id);
int sotto_lang_id(const char *code);

/* Voice activity detection (Silero VAD v6). A VAD may be shared by threads and passed in
 * sotto_params.vad to any session. */
sotto_vad_params sotto_vad_default_params(void);
/* Loads the VAD from its ONNX file (faster-whisper's silero_vad_v6.onnx), or with path
 * NULL from the cache, fetched on first use. Its front end runs on n_threads threads of
 * its own (<= 0: one per core). */
sotto_vad *sotto_vad_load(const char *path, int n_threads);
void sotto_vad_free(sotto_vad *vad);
/* The stretches of speech in 16 kHz mono samples (params NULL: the defaults). */
sotto_speech *sotto_vad_detect(const sotto_vad *vad, const float *samples, size_t n_samples,
                               const sotto_vad_params *params);
int sotto_speech_n(const sotto_speech *speech);
/* Start and end of stretch i, in seconds. */
double sotto_speech_start(const sotto_speech *speech, int i);
double sotto_speech_end(const sotto_speech *speech, int i);
void sotto_speech_free(sotto_speech *speech);

/* Speed figures, as whisper.cpp's bench reports them (whisper.rn's bench()). */
typedef struct sotto_bench_result {
    size_t struct_size; /* sizeof(sotto_bench_result), set by the caller */
    int n_threads;      /* the session's */
    double encode_ms;   /* one 30 s encoder window */
    double decode_ms;   /* one decoder step of one sequence */
    double batch_ms;    /* one decoder step of five sequences (beams) */
    double prompt_ms;   /* a 256-token prompt in one call */
} sotto_bench_result;
/* Times the session's encoder and decoder (each figure the median of runs >= 1, after a
 * warm-up); 0, or -1 on failure. */
int sotto_bench(sotto_session *session, int runs, sotto_bench_result *out);
/* The library's version, SIMD path and whether CUDA is built in, in one line. */
const char *sotto_system_info(void);

void sotto_transcript_free(sotto_transcript *transcript);
/* The whole text, trimmed. */
const char *sotto_transcript_text(const sotto_transcript *t);
/* The language code used. */
const char *sotto_transcript_language(const sotto_transcript *t);
/* Seconds of audio. */
double sotto_transcript_duration(const sotto_transcript *t);
int sotto_transcript_n_segments(const sotto_transcript *t);
const char *sotto_transcript_segment_text(const sotto_transcript *t, int segment);
double sotto_transcript_segment_start(const sotto_transcript *t, int segment);
double sotto_transcript_segment_end(const sotto_transcript *t, int segment);
/* Probability that the segment's window holds no speech. */
double sotto_transcript_segment_no_speech_prob(const sotto_transcript *t, int segment);
/* The detected language's probability (1 when given or English-only). */
double sotto_transcript_language_probability(const sotto_transcript *t);
/* faster-whisper's per-segment figures: its window's average log-probability, text
 * compression ratio and the temperature of the decoding kept; the frame its window began
 * at; its tokens (timestamps included). */
double sotto_transcript_segment_avg_logprob(const sotto_transcript *t, int segment);
double sotto_transcript_segment_compression_ratio(const sotto_transcript *t, int segment);
double sotto_transcript_segment_temperature(const sotto_transcript *t, int segment);
int sotto_transcript_segment_seek(const sotto_transcript *t, int segment);
int sotto_transcript_segment_n_tokens(const sotto_transcript *t, int segment);
int sotto_transcript_segment_token(const sotto_transcript *t, int segment, int token);
/* Words of a segment: 0 unless params.word_timestamps was set. */
int sotto_transcript_n_words(const sotto_transcript *t, int segment);
const char *sotto_transcript_word_text(const sotto_transcript *t, int segment, int word);
double sotto_transcript_word_start(const sotto_transcript *t, int segment, int word);
double sotto_transcript_word_end(const sotto_transcript *t, int segment, int word);
double sotto_transcript_word_probability(const sotto_transcript *t, int segment, int word);

#ifdef __cplusplus
}
#endif

#endif /* SOTTO_H */
