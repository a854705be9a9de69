'use strict';
// One WhisperContext's thread (its model and sessions), one WhisperVadContext's (its
// VAD), or a file's decoding (decodeAudioFile), driven by messages from index.js.
// sotto's C calls block, so they run here, off the main event loop; a transcription's
// segment callback runs on this same thread, inside the call, as Koffi requires.
const { parentPort, workerData } = require('node:worker_threads');
const koffi = require('koffi');

const lib = koffi.load(workerData.library);
const SegmentCallback = koffi.proto(
  'int sotto_segment_callback(int index, double start, double end, const char *text, void *user_data)'
);
// sotto_vad_params and sotto_params of sotto.h, field for field.
koffi.struct('sotto_vad_params', {
  struct_size: 'size_t',
  threshold: 'float',
  neg_threshold: 'float',
  min_speech_duration_ms: 'int',
  max_speech_duration_s: 'float',
  min_silence_duration_ms: 'int',
  speech_pad_ms: 'int',
});
koffi.struct('sotto_params', {
  struct_size: 'size_t',
  language: 'const char *',
  translate: 'int',
  beam_size: 'int',
  best_of: 'int',
  temperature: 'float',
  temperature_inc: 'float',
  no_timestamps: 'int',
  word_timestamps: 'int',
  initial_prompt: 'const char *',
  on_segment: koffi.pointer(SegmentCallback),
  user_data: 'void *',
  vad: 'void *',
  vad_params: 'sotto_vad_params',
  condition_on_previous_text: 'int',
  patience: 'float',
  length_penalty: 'float',
  compression_ratio_threshold: 'float',
  log_prob_threshold: 'float',
  no_speech_threshold: 'float',
  hotwords: 'const char *',
  max_len: 'int',
  on_segment_transcript: 'void *',
  batch_size: 'int',
  clip_timestamps: 'void *',
  n_clip_timestamps: 'int',
  repetition_penalty: 'float',
  no_repeat_ngram_size: 'int',
  multilingual: 'int',
  language_detection_threshold: 'float',
  language_detection_segments: 'int',
  suppress_regex: 'const char *',
  grammar: 'const char *',
  grammar_rule: 'const char *',
  grammar_penalty: 'float',
  max_context: 'int',
  seed: 'uint64_t',
  entropy_threshold: 'float',
  audio_ctx: 'int',
  chunk_length: 'int',
  prompt_reset_on_temperature: 'float',
  suppress_blank: 'int',
  max_initial_timestamp: 'float',
  max_new_tokens: 'int',
  hallucination_silence_threshold: 'float',
  prefix: 'const char *',
  prepend_punctuations: 'const char *',
  append_punctuations: 'const char *',
  suppress_tokens: 'const int *',
  n_suppress_tokens: 'int',
});
koffi.struct('sotto_bench_result', {
  struct_size: 'size_t',
  n_threads: 'int',
  encode_ms: 'double',
  decode_ms: 'double',
  batch_ms: 'double',
  prompt_ms: 'double',
});
const c = {
  lastError: lib.func('const char *sotto_last_error(void)'),
  defaults: lib.func('sotto_params sotto_default_params(void)'),
  modelLoad: lib.func('void *sotto_model_load(const char *, const char *)'),
  modelFree: lib.func('void sotto_model_free(void *)'),
  modelDevice: lib.func('const char *sotto_model_device(void *)'),
  modelDeviceNote: lib.func('const char *sotto_model_device_note(void *)'),
  sessionNew: lib.func('void *sotto_session_new(void *, int)'),
  sessionFree: lib.func('void sotto_session_free(void *)'),
  audioLoad: lib.func('float *sotto_audio_load(const char *, _Out_ size_t *n)'),
  audioDecode: lib.func('float *sotto_audio_decode(const void *, size_t, _Out_ size_t *n)'),
  audioFree: lib.func('void sotto_audio_free(float *, size_t)'),
  vadDefaults: lib.func('sotto_vad_params sotto_vad_default_params(void)'),
  vadLoad: lib.func('void *sotto_vad_load(const char *, int)'),
  vadFree: lib.func('void sotto_vad_free(void *)'),
  vadDetect: lib.func('void *sotto_vad_detect(void *, const float *, size_t, const sotto_vad_params *)'),
  speechN: lib.func('int sotto_speech_n(void *)'),
  speechStart: lib.func('double sotto_speech_start(void *, int)'),
  speechEnd: lib.func('double sotto_speech_end(void *, int)'),
  speechFree: lib.func('void sotto_speech_free(void *)'),
  bench: lib.func('int sotto_bench(void *, int, _Inout_ sotto_bench_result *out)'),
  systemInfo: lib.func('const char *sotto_system_info(void)'),
  transcribe: lib.func('void *sotto_transcribe(void *, const float *, size_t, const sotto_params *)'),
  free: lib.func('void sotto_transcript_free(void *)'),
  text: lib.func('const char *sotto_transcript_text(void *)'),
  language: lib.func('const char *sotto_transcript_language(void *)'),
  nSegments: lib.func('int sotto_transcript_n_segments(void *)'),
  segText: lib.func('const char *sotto_transcript_segment_text(void *, int)'),
  segStart: lib.func('double sotto_transcript_segment_start(void *, int)'),
  segEnd: lib.func('double sotto_transcript_segment_end(void *, int)'),
};

if (
  c.defaults().struct_size !== koffi.sizeof('sotto_params') ||
  c.vadDefaults().struct_size !== koffi.sizeof('sotto_vad_params')
) {
  throw new Error('sotto_params differs between sotto.h and this binding: rebuild both');
}

let model = null;
let vad = null;
const sessions = new Map(); // threads -> session

function fail() {
  throw new Error(c.lastError());
}

function session(threads) {
  const n = Number.isInteger(threads) && threads > 0 ? threads : 0;
  if (!sessions.has(n)) {
    const s = c.sessionNew(model, n);
    if (!s) fail();
    sessions.set(n, s);
  }
  return sessions.get(n);
}

const WAV_DATA_URL = 'data:audio/wav;base64,';

/** 16 kHz mono samples of a file, or of a WAV in a data URL (as whisper.rn takes them),
 * copied out of the library's buffer. */
function loadAudio(path) {
  const n = [0];
  let ptr;
  if (path.startsWith(WAV_DATA_URL)) {
    const bytes = Buffer.from(path.slice(WAV_DATA_URL.length), 'base64');
    ptr = c.audioDecode(bytes, bytes.length, n);
  } else {
    ptr = c.audioLoad(path, n);
  }
  if (!ptr) fail();
  try {
    // A copy of the native buffer, which is freed below.
    return new Float32Array(koffi.view(ptr, n[0] * 4).slice(0));
  } finally {
    c.audioFree(ptr, n[0]);
  }
}

const cs = (seconds) => Math.round(seconds * 100); // whisper.cpp's 10 ms units

function transcribe(job) {
  const o = job.options || {};
  let samples = job.samples || loadAudio(job.file);
  // offset and duration (ms) cut the audio; times stay those of the whole file.
  const offset = Math.max(0, Math.round(((o.offset || 0) / 1000) * 16000));
  const end = o.duration > 0 ? offset + Math.round((o.duration / 1000) * 16000) : samples.length;
  samples = samples.subarray(Math.min(offset, samples.length), Math.min(end, samples.length));
  const shift = offset / 16000;
  const abort = new Int32Array(job.abort);
  const seconds = samples.length / 16000;
  const segments = [];
  if (Atomics.load(abort, 0) !== 0) {
    return { result: '', language: '', segments, isAborted: true };
  }
  const p = c.defaults();
  p.language = o.language === undefined ? 'auto' : o.language;
  p.translate = o.translate ? 1 : 0;
  if (o.beamSize !== undefined) p.beam_size = o.beamSize;
  if (o.bestOf !== undefined) p.best_of = o.bestOf;
  if (o.temperature !== undefined) p.temperature = o.temperature;
  if (o.temperatureInc !== undefined) p.temperature_inc = o.temperatureInc;
  p.word_timestamps = o.tokenTimestamps ? 1 : 0;
  // whisper.cpp's maxLen splits segments between words; maxContext bounds the tokens of
  // earlier text a window's prompt carries (0: none, not even the prompt), as its
  // n_max_text_ctx does.
  if (o.maxLen > 0) p.max_len = Math.round(o.maxLen);
  if (o.maxContext >= 0) p.max_context = Math.round(o.maxContext);
  // whisper.cpp's audio_ctx: encoder positions per window (0: whole 30 s windows).
  if (o.audioCtx > 0) p.audio_ctx = Math.round(o.audioCtx);
  p.initial_prompt = o.prompt || null;
  p.on_segment = (index, start, segEnd, text) => {
    const seg = { text, t0: cs(start + shift), t1: cs(segEnd + shift) };
    segments.push(seg);
    parentPort.postMessage({
      type: 'segments',
      jobId: job.jobId,
      nNew: 1,
      totalNNew: segments.length,
      result: segments.map((s) => s.text).join(''),
      segments: [seg],
    });
    if (seconds > 0) {
      const progress = Math.min(99, Math.floor((100 * segEnd) / seconds));
      parentPort.postMessage({ type: 'progress', jobId: job.jobId, progress });
    }
    return Atomics.load(abort, 0) === 0 ? 1 : 0;
  };
  const t = c.transcribe(session(o.maxThreads), samples, samples.length, p);
  if (!t) fail();
  try {
    const out = [];
    for (let i = 0; i < c.nSegments(t); i++) {
      out.push({ text: c.segText(t, i), t0: cs(c.segStart(t, i) + shift), t1: cs(c.segEnd(t, i) + shift) });
    }
    parentPort.postMessage({ type: 'progress', jobId: job.jobId, progress: 100 });
    return {
      result: c.text(t),
      language: c.language(t),
      segments: out,
      isAborted: Atomics.load(abort, 0) !== 0,
    };
  } finally {
    c.free(t);
  }
}

// whisper.rn's VAD defaults (whisper.cpp's, with speech split at 30 s).
const VAD_DEFAULTS = {
  threshold: 0.5,
  minSpeechDurationMs: 250,
  minSilenceDurationMs: 100,
  maxSpeechDurationS: 30,
  speechPadMs: 30,
};

/** The stretches of speech, t0 and t1 in 10 ms units as whisper.cpp gives them. */
function detect(job) {
  const samples = job.samples || loadAudio(job.file);
  const o = { ...VAD_DEFAULTS, ...job.options };
  const p = c.vadDefaults();
  p.threshold = o.threshold;
  p.min_speech_duration_ms = Math.round(o.minSpeechDurationMs);
  p.min_silence_duration_ms = Math.round(o.minSilenceDurationMs);
  p.max_speech_duration_s = o.maxSpeechDurationS > 0 && Number.isFinite(o.maxSpeechDurationS) ? o.maxSpeechDurationS : 0;
  p.speech_pad_ms = Math.round(o.speechPadMs);
  const found = c.vadDetect(vad, samples, samples.length, p);
  if (!found) fail();
  try {
    const out = [];
    for (let i = 0; i < c.speechN(found); i++) {
      out.push({ t0: cs(c.speechStart(found, i)), t1: cs(c.speechEnd(found, i)) });
    }
    return out;
  } finally {
    c.speechFree(found);
  }
}

/** whisper.rn's BenchResult for a session of `threads` threads. */
function bench(threads) {
  const out = { struct_size: koffi.sizeof('sotto_bench_result'), n_threads: 0, encode_ms: 0, decode_ms: 0, batch_ms: 0, prompt_ms: 0 };
  if (c.bench(session(threads), 3, out) !== 0) fail();
  return {
    config: c.systemInfo(),
    nThreads: out.n_threads,
    encodeMs: out.encode_ms,
    decodeMs: out.decode_ms,
    batchMs: out.batch_ms,
    promptMs: out.prompt_ms,
  };
}

function release() {
  for (const s of sessions.values()) c.sessionFree(s);
  sessions.clear();
  if (model) c.modelFree(model);
  model = null;
  if (vad) c.vadFree(vad);
  vad = null;
}

parentPort.on('message', (msg) => {
  try {
    if (msg.type === 'load') {
      model = c.modelLoad(msg.model, msg.device);
      if (!model) fail();
      session(0); // fail here rather than on the first transcription
      // Where it runs: auto may have taken a GPU, or left one that could not take it.
      const device = c.modelDevice(model);
      parentPort.postMessage({ type: 'loaded', device, note: c.modelDeviceNote(model) });
    } else if (msg.type === 'loadVad') {
      vad = c.vadLoad(msg.path, msg.threads);
      if (!vad) fail();
      parentPort.postMessage({ type: 'loaded' });
    } else if (msg.type === 'detect') {
      parentPort.postMessage({ type: 'done', jobId: msg.jobId, result: detect(msg) });
    } else if (msg.type === 'bench') {
      parentPort.postMessage({ type: 'done', jobId: msg.jobId, result: bench(msg.maxThreads) });
    } else if (msg.type === 'transcribe') {
      parentPort.postMessage({ type: 'done', jobId: msg.jobId, result: transcribe(msg) });
    } else if (msg.type === 'decode') {
      const samples = loadAudio(msg.path);
      parentPort.postMessage({ type: 'decoded', samples }, [samples.buffer]);
    } else if (msg.type === 'release') {
      release();
      parentPort.postMessage({ type: 'released' });
    }
  } catch (e) {
    parentPort.postMessage({ type: 'error', jobId: msg.jobId, message: e.message });
  }
});
