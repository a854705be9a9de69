'use strict';
/**
 * Where sotto's C library is, and the one piece of it used on the main thread: the
 * resampler live audio goes through (transcription runs on worker threads, `worker.js`).
 */
const path = require('node:path');
const fs = require('node:fs');

function libraryPath() {
  if (process.env.SOTTO_LIB) return process.env.SOTTO_LIB;
  const name = { darwin: 'libsotto_capi.dylib', win32: 'sotto_capi.dll' }[process.platform] || 'libsotto_capi.so';
  for (const dir of [__dirname, path.join(__dirname, '..', '..', 'target', 'release')]) {
    const p = path.join(dir, name);
    if (fs.existsSync(p)) return p;
  }
  throw new Error(`${name} not found: build it with \`cargo build --release\`, or set SOTTO_LIB`);
}

let fns = null;
function resamplerFns() {
  if (!fns) {
    const koffi = require('koffi');
    const lib = koffi.load(libraryPath());
    fns = {
      koffi,
      create: lib.func('void *sotto_resampler_new(int)'),
      push: lib.func('float *sotto_resampler_push(void *, const float *, size_t, _Out_ size_t *n)'),
      finish: lib.func('float *sotto_resampler_finish(void *, _Out_ size_t *n)'),
      free: lib.func('void sotto_resampler_free(void *)'),
      audioFree: lib.func('void sotto_audio_free(float *, size_t)'),
      lastError: lib.func('const char *sotto_last_error(void)'),
    };
  }
  return fns;
}

/** 16-bit PCM at `rate` Hz to 16-bit PCM at 16 kHz, as it arrives, with the filter sotto's
 * decoders use (libswresample's). `push` gives what is ready; `finish` the rest. */
class Resampler {
  constructor(rate) {
    const f = resamplerFns();
    this._f = f;
    this._r = f.create(rate);
    if (!this._r) throw new Error(f.lastError());
  }

  push(pcm) {
    const x = new Float32Array(pcm.length);
    for (let i = 0; i < pcm.length; i++) x[i] = pcm[i] / 32768;
    const n = [0];
    return this._take(this._f.push(this._live(), x, x.length, n), n[0]);
  }

  finish() {
    const n = [0];
    const out = this._take(this._f.finish(this._live(), n), n[0]);
    this.free();
    return out;
  }

  free() {
    if (this._r) this._f.free(this._r);
    this._r = null;
  }

  _live() {
    if (!this._r) throw new Error('the resampler was finished');
    return this._r;
  }

  /** The library's floats as 16-bit PCM (rounded, clipped), its buffer freed. */
  _take(ptr, n) {
    if (!ptr) {
      if (n === 0 && this._r) return new Int16Array(0);
      throw new Error(this._f.lastError());
    }
    try {
      const y = new Float32Array(this._f.koffi.view(ptr, n * 4));
      const out = new Int16Array(n);
      for (let i = 0; i < n; i++) out[i] = Math.max(-32768, Math.min(32767, Math.round(y[i] * 32768)));
      return out;
    } finally {
      this._f.audioFree(ptr, n);
    }
  }
}

module.exports = { libraryPath, Resampler };
