'use strict';
/**
 * sotto for Node.js, with whisper.rn's API: `initWhisper`, `WhisperContext.transcribe`
 * (returning `{ stop, promise }`), `transcribeData`, `release`, `releaseAllWhisper`.
 *
 * Each context is a worker thread holding one loaded model and its sessions, so
 * transcription never blocks the event loop. It calls sotto's C library
 * (`libsotto_capi`, found at `$SOTTO_LIB` or in the repository's `target/release`)
 * through Koffi.
 */
const path = require('node:path');
const fs = require('node:fs');
const { Worker } = require('node:worker_threads');
const { fileURLToPath } = require('node:url');

function libraryPath() {
  if (process.env.SOTTO_LIB) return process.env.SOTTO_LIB;
  const name = { darwin: 'libsotto_capi.dylib', win32: 'sotto_capi.dll' }[process.platform] || 'libsotto_capi.so';
  for (const dir of [__dirname, path.join(__dirname, '..', '..', 'target', 'release')]) {
    const p = path.join(dir, name);
    if (fs.existsSync(p)) return p;
  }
  throw new Error(`${name} not found: build it with \`cargo build --release\`, or set SOTTO_LIB`);
}

const contexts = new Map();
let nextContextId = 1;

class WhisperContext {
  constructor(id, worker, device) {
    this.id = id;
    /** Whether the model runs on a GPU. */
    this.gpu = device.startsWith('cuda');
    this.reasonNoGPU = this.gpu ? '' : 'the model runs on the CPU';
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
   * Transcribes an audio file (wav, flac, mp3, ogg; `file://` URLs too).
   * Options as whisper.rn's: language ('auto' by default), translate, maxThreads,
   * beamSize, bestOf, temperature, temperatureInc, prompt, offset and duration (ms),
   * tokenTimestamps, onProgress(percent), onNewSegments({ nNew, totalNNew, result,
   * segments }). Segment times t0 and t1 are in 10 ms units, as whisper.cpp's.
   */
  transcribe(filePath, options) {
    if (typeof filePath !== 'string') throw new TypeError('filePath must be a string');
    const file = filePath.startsWith('file://') ? fileURLToPath(filePath) : filePath;
    return this._start({ file }, options);
  }

  /**
   * Transcribes 16 kHz mono float samples: a Float32Array, an ArrayBuffer of them, or
   * their bytes in base64 (as whisper.rn's transcribeData takes them).
   */
  transcribeData(data, options) {
    let samples;
    if (data instanceof Float32Array) samples = Float32Array.from(data);
    else if (data instanceof ArrayBuffer) samples = new Float32Array(data.slice(0));
    else if (typeof data === 'string') {
      const bytes = Buffer.from(data, 'base64');
      if (bytes.length % 4 !== 0) throw new Error('base64 data is not a whole number of float32 samples');
      samples = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
    } else throw new TypeError('data must be a Float32Array, an ArrayBuffer or a base64 string');
    return this._start({ samples }, options);
  }

  /** Frees the model and its sessions; pending transcriptions are rejected. */
  async release() {
    if (this._released) return;
    this._released = true;
    contexts.delete(this.id);
    await new Promise((resolve) => {
      const done = (m) => {
        if (m.type === 'released') resolve();
      };
      this._worker.on('message', done);
      this._worker.postMessage({ type: 'release' });
    });
    await this._worker.terminate();
  }
}

/**
 * Loads a model: `filePath` is a model name (tiny.en, base, ...; fetched on first use),
 * a Hugging Face repo id, or a path to a ggml .bin, a CTranslate2 folder or a
 * transformers folder. `useGpu` (default true) lets it run on a CUDA GPU where the
 * library was built with one.
 */
async function initWhisper({ filePath, useGpu = true } = {}) {
  if (typeof filePath !== 'string') throw new TypeError('filePath must be a string');
  const model = filePath.startsWith('file://') ? fileURLToPath(filePath) : filePath;
  const device = useGpu ? 'auto' : 'cpu';
  const worker = new Worker(path.join(__dirname, 'worker.js'), {
    workerData: { library: libraryPath() },
  });
  await new Promise((resolve, reject) => {
    const onMessage = (m) => {
      worker.off('message', onMessage);
      if (m.type === 'loaded') resolve();
      else reject(new Error(m.message));
    };
    worker.on('message', onMessage);
    worker.once('error', reject);
    worker.postMessage({ type: 'load', model, device });
  }).catch(async (e) => {
    await worker.terminate();
    throw e;
  });
  const id = nextContextId++;
  const context = new WhisperContext(id, worker, device === 'cpu' ? 'cpu' : 'auto');
  contexts.set(id, context);
  return context;
}

/** Releases every context. */
async function releaseAllWhisper() {
  await Promise.all([...contexts.values()].map((c) => c.release()));
}

const libVersion = require('./package.json').version;

module.exports = { initWhisper, releaseAllWhisper, WhisperContext, libVersion };
