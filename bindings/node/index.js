'use strict';
/**
 * sotto for Node.js, with whisper.rn's API: `initWhisper`, `WhisperContext.transcribe`
 * (returning `{ stop, promise }`), `transcribeData`, `release`, `releaseAllWhisper`; and
 * voice activity detection: `initWhisperVad`, `WhisperVadContext.detectSpeech`,
 * `detectSpeechData`, `release`, `releaseAllWhisperVad`; and live transcription:
 * `RealtimeTranscriber` with its adapters (realtime.js, also as
 * `sotto/realtime-transcription`).
 *
 * Each context is a worker thread holding one loaded model and its sessions (or one VAD),
 * so transcription never blocks the event loop. It calls sotto's C library
 * (`libsotto_capi`, found at `$SOTTO_LIB` or in the repository's `target/release`)
 * through Koffi.
 */
const path = require('node:path');
const fs = require('node:fs');
const { Worker } = require('node:worker_threads');
const { fileURLToPath } = require('node:url');
const { libraryPath } = require('./library');

/** Frees what a worker loaded (native memory outlives the thread), then ends it. */
async function stopWorker(worker) {
  await new Promise((resolve) => {
    worker.on('message', (m) => {
      if (m.type === 'released') resolve();
    });
    worker.once('exit', resolve);
    worker.postMessage({ type: 'release' });
  });
  await worker.terminate();
}

const contexts = new Map();
const vadContexts = new Map();
let nextContextId = 1;

/** 16-bit PCM in any view of bytes as float samples (whisper.rn's ArrayBuffer form: int16 / 32768). */
function pcm16(bytes, what) {
  if (bytes.byteLength % 2 !== 0) throw new Error(`${what} is not a whole number of 16-bit PCM samples`);
  // A copy, aligned for Int16Array whatever the view's offset.
  const pcm = new Int16Array(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength).slice().buffer);
  return Float32Array.from(pcm, (v) => v / 32768);
}

/**
 * 16 kHz mono samples, a copy the worker may own, from what whisper.rn's *Data methods
 * take: an ArrayBuffer of 16-bit PCM (its JSI path) or base64 of float32 bytes; and, as
 * their typed forms, a Float32Array (floats), an Int16Array, or a Uint8Array/Buffer of
 * 16-bit PCM bytes.
 */
function samplesOf(data) {
  if (data instanceof Float32Array) return Float32Array.from(data);
  if (data instanceof Int16Array || data instanceof Uint8Array) return pcm16(data, 'the byte array');
  if (data instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && data instanceof SharedArrayBuffer)) {
    return pcm16(new Uint8Array(data), 'the ArrayBuffer');
  }
  if (typeof data === 'string') {
    const bytes = Buffer.from(data, 'base64');
    if (bytes.length % 4 !== 0) throw new Error('base64 data is not a whole number of float32 samples');
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  }
  throw new TypeError(
    'data must be an ArrayBuffer of 16-bit PCM, base64 of float32 samples, a Float32Array, an Int16Array or a Uint8Array'
  );
}

/** A file path, a `file://` URL, or a WAV as a `data:audio/wav;base64,` URL. */
function fileOf(filePath) {
  if (typeof filePath !== 'string') throw new TypeError('filePath must be a string');
  return filePath.startsWith('file://') ? fileURLToPath(filePath) : filePath;
}

/** A worker thread of worker.js, once it has answered `message` with 'loaded'. */
async function startWorker(message) {
  const worker = new Worker(path.join(__dirname, 'worker.js'), {
    workerData: { library: libraryPath() },
  });
  const loaded = await new Promise((resolve, reject) => {
    const onMessage = (m) => {
      worker.off('message', onMessage);
      if (m.type === 'loaded') resolve(m);
      else reject(new Error(m.message));
    };
    worker.on('message', onMessage);
    worker.once('error', reject);
    worker.postMessage(message);
  }).catch(async (e) => {
    await worker.terminate();
    throw e;
  });
  return { worker, loaded };
}

class WhisperContext {
  constructor(id, worker, device, reasonNoGPU) {
    this.id = id;
    /** Whether the model runs on a GPU (where it was loaded: "cpu", "cuda", "cuda:N"). */
    this.gpu = device.startsWith('cuda');
    this.reasonNoGPU = this.gpu ? '' : reasonNoGPU;
    this._worker = worker;
    this._jobs = new Map();
    this._nextJob = 1;
    this._released = false;
    worker.on('message', (m) => this._message(m));
    worker.on('error', (e) => this._failAll(e));
    worker.on('exit', () => this._failAll(new Error('the context was released')));
  }

  _message(m) {
    const job = this._jobs.get(m.jobId);
    if (!job) return;
    if (m.type === 'segments' && job.options.onNewSegments) {
      const { nNew, totalNNew, result, segments } = m;
      job.options.onNewSegments({ nNew, totalNNew, result, segments });
    } else if (m.type === 'progress' && job.options.onProgress) {
      job.options.onProgress(m.progress);
    } else if (m.type === 'done') {
      this._jobs.delete(m.jobId);
      job.resolve(m.result);
    } else if (m.type === 'error') {
      this._jobs.delete(m.jobId);
      job.reject(new Error(m.message));
    }
  }

  _failAll(e) {
    for (const job of this._jobs.values()) job.reject(e);
    this._jobs.clear();
  }

  _start(input, options = {}) {
    if (this._released) throw new Error(`whisper context ${this.id} has been released`);
    const jobId = this._nextJob++;
    const abort = new SharedArrayBuffer(4);
    const promise = new Promise((resolve, reject) => {
      this._jobs.set(jobId, { resolve, reject, options });
    });
    const { onNewSegments, onProgress, ...plain } = options;
    this._worker.postMessage({ type: 'transcribe', jobId, abort, options: plain, ...input });
    const stop = async () => {
      Atomics.store(new Int32Array(abort), 0, 1);
      await promise.catch(() => {});
    };
    return { stop, promise };
  }

  /**
   * Transcribes an audio file (wav, flac, mp3, ogg, opus, m4a, webm; `file://` URLs, and a WAV as a
   * `data:audio/wav;base64,` URL, too).
   * Options as whisper.rn's: language ('auto' by default), translate, maxThreads,
   * beamSize, bestOf, temperature, temperatureInc, prompt, offset and duration (ms),
   * tokenTimestamps, maxLen, maxContext (most tokens of earlier text a prompt carries; 0:
   * none), audioCtx (whisper.cpp's audio_ctx: encoder positions per window, 20 ms each;
   * 0: whole 30 s windows), onProgress(percent),
   * onNewSegments({ nNew, totalNNew, result, segments }). Segment times t0 and t1 are in
   * 10 ms units, as whisper.cpp's.
   */
  transcribe(filePath, options) {
    return this._start({ file: fileOf(filePath) }, options);
  }

  /**
   * Transcribes 16 kHz mono audio given as whisper.rn's transcribeData takes it: an
   * ArrayBuffer of 16-bit PCM, or base64 of float32 samples; or a Float32Array, an
   * Int16Array, or a Uint8Array/Buffer of 16-bit PCM bytes.
   */
  transcribeData(data, options) {
    return this._start({ samples: samplesOf(data) }, options);
  }

  /**
   * Times the model as whisper.rn's bench() does: `{ config, nThreads, encodeMs, decodeMs,
   * batchMs, promptMs }` (an encoder window, a decoder step of one sequence and of five,
   * a 256-token prompt; medians of three runs).
   */
  bench(maxThreads) {
    if (this._released) return Promise.reject(new Error(`whisper context ${this.id} has been released`));
    const jobId = this._nextJob++;
    return new Promise((resolve, reject) => {
      this._jobs.set(jobId, { resolve, reject, options: {} });
      this._worker.postMessage({ type: 'bench', jobId, maxThreads });
    });
  }

  /** Frees the model and its sessions; pending transcriptions are rejected. */
  async release() {
    if (this._released) return;
    this._released = true;
    contexts.delete(this.id);
    await stopWorker(this._worker);
  }
}

/**
 * Loads a model: `filePath` is a model name (tiny.en, base, ...; fetched on first use),
 * a Hugging Face repo id, or a path to a ggml .bin, a CTranslate2 folder or a
 * transformers folder. `useGpu` (default true) lets it run on a CUDA GPU where the
 * library was built with one.
 */
async function initWhisper({ filePath, useGpu = true } = {}) {
  const model = fileOf(filePath);
  const { worker, loaded } = await startWorker({
    type: 'load',
    model,
    device: useGpu ? 'auto' : 'cpu',
  });
  const id = nextContextId++;
  const why = !useGpu ? 'useGpu is false' : loaded.note || 'no usable CUDA GPU was found';
  const context = new WhisperContext(id, worker, loaded.device, why);
  contexts.set(id, context);
  return context;
}

/** Releases every context. */
async function releaseAllWhisper() {
  await Promise.all([...contexts.values()].map((c) => c.release()));
}

/** A loaded voice activity detector (Silero VAD v6), on a worker thread of its own. */
class WhisperVadContext {
  constructor(id, worker) {
    this.id = id;
    this.gpu = false;
    this.reasonNoGPU = 'the VAD runs on the CPU';
    this._worker = worker;
    this._jobs = new Map();
    this._nextJob = 1;
    this._released = false;
    worker.on('message', (m) => {
      const job = this._jobs.get(m.jobId);
      if (!job || (m.type !== 'done' && m.type !== 'error')) return;
      this._jobs.delete(m.jobId);
      if (m.type === 'done') job.resolve(m.result);
      else job.reject(new Error(m.message));
    });
    const failAll = (e) => {
      for (const job of this._jobs.values()) job.reject(e);
      this._jobs.clear();
    };
    worker.on('error', failAll);
    worker.on('exit', () => failAll(new Error('the VAD context was released')));
  }

  _detect(input, options = {}) {
    if (this._released) return Promise.reject(new Error(`VAD context ${this.id} has been released`));
    const jobId = this._nextJob++;
    return new Promise((resolve, reject) => {
      this._jobs.set(jobId, { resolve, reject });
      this._worker.postMessage({ type: 'detect', jobId, options, ...input });
    });
  }

  /**
   * The stretches of speech in an audio file (or a WAV as a `data:audio/wav;base64,` URL):
   * `[{ t0, t1 }]` in 10 ms units, as whisper.rn gives them. Options as whisper.rn's, with
   * its defaults: threshold (0.5), minSpeechDurationMs (250),
   * minSilenceDurationMs (100), maxSpeechDurationS (30), speechPadMs (30);
   * samplesOverlap is accepted and unused (it concerns how whisper.cpp joins speech for
   * transcription, not the stretches found).
   */
  detectSpeech(filePathOrBase64, options) {
    try {
      return this._detect({ file: fileOf(filePathOrBase64) }, options);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** As detectSpeech, on 16 kHz mono audio in any form transcribeData takes. */
  detectSpeechData(audioData, options) {
    try {
      return this._detect({ samples: samplesOf(audioData) }, options);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Frees the VAD; pending detections are rejected. */
  async release() {
    if (this._released) return;
    this._released = true;
    vadContexts.delete(this.id);
    await stopWorker(this._worker);
  }
}

/**
 * Loads a VAD: `filePath` is a Silero VAD v6 ONNX file (faster-whisper's
 * `silero_vad_v6.onnx`); without it, the cached one (fetched on first use). `nThreads`
 * (default: one per core) runs its front end.
 */
async function initWhisperVad({ filePath, nThreads = 0 } = {}) {
  const file = filePath === undefined || filePath === null ? null : fileOf(filePath);
  const threads = Number.isInteger(nThreads) && nThreads > 0 ? nThreads : 0;
  const { worker } = await startWorker({ type: 'loadVad', path: file, threads });
  const id = nextContextId++;
  const context = new WhisperVadContext(id, worker);
  vadContexts.set(id, context);
  return context;
}

/** Releases every VAD context. */
async function releaseAllWhisperVad() {
  await Promise.all([...vadContexts.values()].map((c) => c.release()));
}

/**
 * An audio file (any format sotto reads; or a WAV as a `data:audio/wav;base64,` URL)
 * decoded to 16 kHz mono float samples, on a worker thread of its own.
 */
async function decodeAudioFile(filePath) {
  const file = fileOf(filePath);
  const worker = new Worker(path.join(__dirname, 'worker.js'), { workerData: { library: libraryPath() } });
  try {
    return await new Promise((resolve, reject) => {
      worker.on('message', (m) => (m.type === 'decoded' ? resolve(m.samples) : reject(new Error(m.message))));
      worker.once('error', reject);
      worker.once('exit', () => reject(new Error('the decoding thread ended early')));
      worker.postMessage({ type: 'decode', path: file });
    });
  } finally {
    await worker.terminate();
  }
}

const libVersion = require('./package.json').version;

module.exports = {
  ...require('./realtime'),
  initWhisper,
  releaseAllWhisper,
  WhisperContext,
  initWhisperVad,
  releaseAllWhisperVad,
  WhisperVadContext,
  decodeAudioFile,
  libVersion,
};
