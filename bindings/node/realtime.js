'use strict';
/**
 * Live transcription with whisper.rn's `RealtimeTranscriber` API
 * (`whisper.rn/realtime-transcription`): audio from a stream is gathered into slices of
 * up to `audioSliceSec`; the slice being filled is transcribed again as audio arrives (the
 * newest audio wins when transcription lags), and each slice, once cut, is transcribed
 * whole, in order, with the earlier slices' text as its prompt. With a VAD context, only
 * audio with speech is transcribed, and a slice is cut where speech ends, so that words
 * are not split between slices.
 *
 * The audio stream is any object with whisper.rn's `AudioStreamInterface`; two come with
 * it: `SimulateFileAudioStreamAdapter` (a file played as if recorded) and
 * `ReadableStreamAdapter` (16-bit PCM from a Node stream or a command such as `arecord`).
 */
const fs = require('node:fs');
const { spawn } = require('node:child_process');
const { Resampler } = require('./library');

const RATE = 16000;

/** whisper.rn's VAD presets, by name. */
const VAD_PRESETS = Object.freeze({
  default: {
    threshold: 0.5,
    minSpeechDurationMs: 250,
    minSilenceDurationMs: 100,
    maxSpeechDurationS: 30,
    speechPadMs: 30,
    samplesOverlap: 0.1,
  },
  sensitive: {
    threshold: 0.3,
    minSpeechDurationMs: 100,
    minSilenceDurationMs: 50,
    maxSpeechDurationS: 15,
    speechPadMs: 50,
    samplesOverlap: 0.2,
  },
  'very-sensitive': {
    threshold: 0.2,
    minSpeechDurationMs: 100,
    minSilenceDurationMs: 50,
    maxSpeechDurationS: 15,
    speechPadMs: 100,
    samplesOverlap: 0.3,
  },
  conservative: {
    threshold: 0.7,
    minSpeechDurationMs: 500,
    minSilenceDurationMs: 200,
    maxSpeechDurationS: 25,
    speechPadMs: 20,
    samplesOverlap: 0.05,
  },
  'very-conservative': {
    threshold: 0.8,
    minSpeechDurationMs: 750,
    minSilenceDurationMs: 300,
    maxSpeechDurationS: 20,
    speechPadMs: 10,
    samplesOverlap: 0.05,
  },
  continuous: {
    threshold: 0.4,
    minSpeechDurationMs: 200,
    minSilenceDurationMs: 300,
    maxSpeechDurationS: 60,
    speechPadMs: 50,
    samplesOverlap: 0.15,
  },
  meeting: {
    threshold: 0.45,
    minSpeechDurationMs: 300,
    minSilenceDurationMs: 150,
    maxSpeechDurationS: 45,
    speechPadMs: 75,
    samplesOverlap: 0.2,
  },
  noisy: {
    threshold: 0.75,
    minSpeechDurationMs: 400,
    minSilenceDurationMs: 100,
    maxSpeechDurationS: 25,
    speechPadMs: 40,
    samplesOverlap: 0.1,
  },
});

// Whisper's marks for audio without speech ("[BLANK_AUDIO]", "[ silence ]").
const NON_SPEECH = /\[\s*[\w ]+\s*\]/g;
// A cut after speech ends leaves at most this much of the pause with the slice.
const MAX_TAIL = RATE / 2;
// The VAD decides in 32 ms frames: speech that ends this close to the end may go on.
const VAD_SLACK_MS = 64;

const positive = (v, name, fallback) => {
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v))
    throw new RangeError(`${name} must be a positive number, not ${v}`);
  return v;
};

/**
 * How many slices before a slice its prompt carries the text of: `true` is 1, where
 * whisper.rn takes them all (`Infinity` here). A long prompt of plain text leads Whisper
 * astray: on base, over five live runs of the 150 s en10_longform clip
 * (scripts/realtime-wer), every earlier slice made 46–76 errors, the slice before 35–47,
 * none 28–43 (tiny.en: 52–65, 53–71, 56–65).
 */
function previousSlices(v) {
  if (v === undefined || v === null || v === true) return 1;
  if (v === false) return 0;
  if (typeof v === 'number' && v >= 0) return v;
  throw new RangeError(`promptPreviousSlices must be true, false or a number of slices, not ${v}`);
}

/** The slices of a recording: the one being filled and those cut before it. */
class Slices {
  constructor(sliceSec, maxInMemory) {
    this.sliceSamples = Math.round(sliceSec * RATE);
    this.maxInMemory = maxInMemory;
    this.reset();
  }

  reset() {
    this.all = [];
    this.total = 0; // samples since the start, over all slices
    this._open(0, 0);
  }

  _open(index, startSample) {
    this.current = {
      index,
      startSample,
      buf: new Int16Array(Math.max(RATE, this.sliceSamples)),
      n: 0,
      analysed: 0, // samples looked at by the last partial transcription's check
      heardTo: 0, // samples the last partial transcription took
      isProcessed: false,
      isReleased: false,
    };
    this.all.push(this.current);
  }

  append(pcm) {
    const c = this.current;
    if (c.n + pcm.length > c.buf.length) {
      const grown = new Int16Array(Math.max(c.buf.length * 2, c.n + pcm.length));
      grown.set(c.buf.subarray(0, c.n));
      c.buf = grown;
    }
    c.buf.set(pcm, c.n);
    c.n += pcm.length;
    this.total += pcm.length;
  }

  /** Ends the current slice after `at` samples; the rest opens the next one. */
  cut(at) {
    const c = this.current;
    const keep = Math.max(0, Math.min(at, c.n));
    const rest = c.buf.slice(keep, c.n);
    c.buf = c.buf.slice(0, keep);
    c.n = keep;
    this._open(c.index + 1, c.startSample + keep);
    const next = this.current;
    // `rest` is a copy of its own: it can become the buffer when it does not fit.
    if (rest.length > next.buf.length) next.buf = rest;
    else next.buf.set(rest);
    next.n = rest.length;
    return c;
  }

  /** Frees the audio of processed slices beyond the newest `maxInMemory`. */
  release() {
    const done = this.all.filter((s) => s !== this.current && s.isProcessed && !s.isReleased);
    for (const s of done.slice(0, Math.max(0, done.length - this.maxInMemory))) {
      s.buf = null;
      s.isReleased = true;
    }
  }

  meta(s) {
    return {
      index: s.index,
      sampleCount: s.n,
      startTime: (s.startSample / RATE) * 1000,
      endTime: ((s.startSample + s.n) / RATE) * 1000,
      isProcessed: s.isProcessed,
      isReleased: s.isReleased,
    };
  }

  memoryUsage() {
    const held = this.all.filter((s) => s.buf);
    const totalSamples = held.reduce((sum, s) => sum + s.n, 0);
    return { slicesInMemory: held.length, totalSamples, estimatedMB: (totalSamples * 2) / (1024 * 1024) };
  }
}

/** 16 kHz mono 16-bit WAV written as audio arrives; the sizes are filled in at the end. */
class WavWriter {
  constructor(file) {
    this.fd = fs.openSync(file, 'w');
    this.bytes = 0;
    const h = Buffer.alloc(44);
    h.write('RIFF', 0);
    h.write('WAVEfmt ', 8);
    h.writeUInt32LE(16, 16);
    h.writeUInt16LE(1, 20); // PCM
    h.writeUInt16LE(1, 22); // mono
    h.writeUInt32LE(RATE, 24);
    h.writeUInt32LE(RATE * 2, 28);
    h.writeUInt16LE(2, 32);
    h.writeUInt16LE(16, 34);
    h.write('data', 36);
    fs.writeSync(this.fd, h);
  }

  append(pcm) {
    fs.writeSync(this.fd, new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength));
    this.bytes += pcm.byteLength;
  }

  close() {
    // Past 4 GiB (37 hours) the sizes stay at their largest, as recorders write them.
    const sizes = Buffer.alloc(4);
    sizes.writeUInt32LE(Math.min(0xffffffff, 36 + this.bytes));
    fs.writeSync(this.fd, sizes, 0, 4, 4);
    sizes.writeUInt32LE(Math.min(0xffffffff, this.bytes));
    fs.writeSync(this.fd, sizes, 0, 4, 40);
    fs.closeSync(this.fd);
  }
}

/** An exact ArrayBuffer of 16-bit PCM, as whisper.rn's *Data methods take one. */
const pcmBuffer = (pcm) => pcm.slice().buffer;

class RealtimeTranscriber {
  /**
   * @param dependencies `{ whisperContext, vadContext?, audioStream }`: a context of
   *   `initWhisper` (or anything with whisper.rn's `transcribeData`), a VAD context of
   *   `initWhisperVad` (or anything with `detectSpeechData`), and an audio stream.
   * @param options whisper.rn's `RealtimeOptions` (see index.d.ts).
   * @param callbacks `{ onTranscribe, onVad, onError, onStatusChange, onStatsUpdate,
   *   onBeginTranscribe, onBeginVad }`.
   */
  constructor(dependencies = {}, options = {}, callbacks = {}) {
    const { whisperContext, vadContext, audioStream } = dependencies;
    if (!whisperContext || typeof whisperContext.transcribeData !== 'function') {
      throw new TypeError('dependencies.whisperContext must have transcribeData (a context of initWhisper)');
    }
    if (vadContext && typeof vadContext.detectSpeechData !== 'function') {
      throw new TypeError('dependencies.vadContext must have detectSpeechData (a context of initWhisperVad)');
    }
    for (const m of ['initialize', 'start', 'stop', 'isRecording', 'onData', 'onError', 'onStatusChange', 'release']) {
      if (!audioStream || typeof audioStream[m] !== 'function') {
        throw new TypeError(`dependencies.audioStream must be an AudioStreamInterface (it has no ${m}())`);
      }
    }
    this.whisperContext = whisperContext;
    this.vadContext = vadContext;
    this.audioStream = audioStream;
    this.callbacks = { ...callbacks };
    if (options.vadPreset !== undefined && !VAD_PRESETS[options.vadPreset]) {
      throw new RangeError(`unknown vadPreset ${options.vadPreset}: one of ${Object.keys(VAD_PRESETS).join(', ')}`);
    }
    const debugLog = options.debug ? (m) => console.log(m) : () => {};
    this.options = {
      audioSliceSec: positive(options.audioSliceSec, 'audioSliceSec', 30),
      audioMinSec: positive(options.audioMinSec, 'audioMinSec', 1),
      audioStepSec: positive(options.audioStepSec, 'audioStepSec', 1),
      maxSlicesInMemory: Math.max(1, Math.round(positive(options.maxSlicesInMemory, 'maxSlicesInMemory', 3))),
      vadOptions: { ...VAD_PRESETS.default, ...VAD_PRESETS[options.vadPreset], ...options.vadOptions },
      vadPreset: options.vadPreset,
      autoSliceOnSpeechEnd: options.autoSliceOnSpeechEnd ?? true,
      autoSliceThreshold: positive(options.autoSliceThreshold, 'autoSliceThreshold', 0.5),
      transcribeOptions: { ...options.transcribeOptions },
      initialPrompt: options.initialPrompt,
      promptPreviousSlices: previousSlices(options.promptPreviousSlices),
      audioOutputPath: options.audioOutputPath,
      audioStreamConfig: { sampleRate: RATE, channels: 1, bitsPerSample: 16, ...options.audioStreamConfig },
      logger: options.logger || debugLog,
      // Accepted for whisper.rn's sake: here the VAD runs only before a transcription,
      // so at most once per audioStepSec of audio, and never falls behind.
      vadThrottleMs: options.vadThrottleMs ?? 1500,
      vadSkipRatio: options.vadSkipRatio ?? 0,
    };
    if (this.options.audioMinSec > this.options.audioSliceSec) {
      throw new RangeError(
        `audioMinSec (${this.options.audioMinSec}) is longer than audioSliceSec (${this.options.audioSliceSec})`
      );
    }
    this.vadEnabled = !!vadContext;
    this.slices = new Slices(this.options.audioSliceSec, this.options.maxSlicesInMemory);
    this.isActive = false;
    this.isTranscribing = false;
    this._pumping = null; // the running pump's promise
    this._stopping = null; // stop()'s, while it runs
    this._finals = []; // slices cut and not yet transcribed whole
    this._forceCut = false;
    this._results = new Map();
    this._vadState = 'silence';
    this._lastSpeech = -1;
    this._odd = null; // a byte of a sample split between chunks
    this._frame = []; // samples of a frame split between chunks, with several channels
    this._resampler = null; // { rate, r }: a stream at another rate than 16 kHz
    this._rateError = false;
    this._wav = null;
    audioStream.onData((d) => this._onData(d));
    audioStream.onError((e) => this._error(`audio stream: ${e}`));
    audioStream.onStatusChange((rec) => this._log(`audio stream ${rec ? 'started' : 'stopped'}`));
  }

  /** Starts the audio stream and transcription; earlier results are cleared. */
  async start() {
    if (this.isActive) throw new Error('Realtime transcription is already active');
    this.reset();
    this.isActive = true;
    try {
      if (this.options.audioOutputPath) this._wav = new WavWriter(this.options.audioOutputPath);
      const cfg = this.options.audioStreamConfig;
      await this.audioStream.initialize({ audioSource: 6, bufferSize: 16 * 1024, ...cfg });
      await this.audioStream.start();
    } catch (e) {
      this.isActive = false;
      this._closeWav();
      throw e;
    }
    this.callbacks.onStatusChange?.(true);
    this._stats('status_change');
    this._log('started');
  }

  /**
   * Stops the stream and transcribes what it gave: resolves once every slice has its
   * final transcription (then an `end` event is sent). Results stay until the next start.
   */
  stop() {
    if (this._stopping) return this._stopping;
    if (!this.isActive) return Promise.resolve();
    this._stopping = this._stop().finally(() => {
      this._stopping = null;
    });
    return this._stopping;
  }

  async _stop() {
    try {
      await this.audioStream.stop();
    } catch (e) {
      this._error(`audio stream stop: ${e.message || e}`);
    }
    this._endResampler();
    this.isActive = false;
    if (this.slices.current.n > 0) this._forceCut = true;
    await this._pump();
    this._closeWav();
    const heard = this.slices.all.filter((sl) => sl.n > 0);
    this.callbacks.onTranscribe?.({
      type: 'end',
      sliceIndex: heard.length ? heard.at(-1).index : 0,
      isCapturing: false,
      processTime: 0,
      recordingTime: (this.slices.total / RATE) * 1000,
      memoryUsage: this.slices.memoryUsage(),
    });
    this.callbacks.onStatusChange?.(false);
    this._stats('status_change');
    this._log('stopped');
  }

  /** Cuts the slice being filled now (it is then transcribed whole) and starts the next. */
  async nextSlice() {
    if (!this.isActive) {
      this._log('nextSlice: not active');
      return;
    }
    if (this.slices.current.n === 0) return;
    this._forceCut = true;
    await this._pump();
  }

  /** Frees the audio stream; stops first if active. */
  async release() {
    if (this.isActive) await this.stop();
    await this.audioStream.release();
    this.vadContext = undefined;
    this.vadEnabled = false;
  }

  /** Forgets slices and results (start does this). */
  reset() {
    this.slices.reset();
    this._finals = [];
    this._forceCut = false;
    this._results.clear();
    this._vadState = 'silence';
    this._lastSpeech = -1;
    this._odd = null;
    this._frame = [];
    this._resampler?.r.free();
    this._resampler = null;
    this._rateError = false;
  }

  updateCallbacks(callbacks) {
    this.callbacks = { ...this.callbacks, ...callbacks };
  }

  updateVadOptions(options) {
    this.options.vadOptions = { ...this.options.vadOptions, ...options };
  }

  updateAutoSliceOptions({ autoSliceOnSpeechEnd, autoSliceThreshold } = {}) {
    if (autoSliceOnSpeechEnd !== undefined) this.options.autoSliceOnSpeechEnd = !!autoSliceOnSpeechEnd;
    if (autoSliceThreshold !== undefined)
      this.options.autoSliceThreshold = positive(autoSliceThreshold, 'autoSliceThreshold');
  }

  updateVadThrottleOptions({ vadThrottleMs, vadSkipRatio } = {}) {
    if (vadThrottleMs !== undefined) this.options.vadThrottleMs = vadThrottleMs;
    if (vadSkipRatio !== undefined) this.options.vadSkipRatio = vadSkipRatio;
  }

  getStatistics() {
    const c = this.slices.current;
    return {
      isActive: this.isActive,
      isTranscribing: this.isTranscribing,
      vadEnabled: this.vadEnabled,
      audioStats: { isRecording: this.audioStream.isRecording(), accumulatedSamples: this.slices.total },
      vadStats: this.vadEnabled
        ? { enabled: true, contextAvailable: !!this.vadContext, lastSpeechDetectedTime: this._lastSpeech }
        : null,
      sliceStats: {
        currentSliceIndex: c.index,
        currentSliceSamples: c.n,
        pendingSlices: this._finals.length,
        totalSlices: this.slices.all.length,
        memoryUsage: this.slices.memoryUsage(),
      },
      autoSliceConfig: {
        enabled: this.options.autoSliceOnSpeechEnd,
        threshold: this.options.autoSliceThreshold,
        targetDuration: this.options.audioSliceSec,
        minDuration: this.options.audioMinSec,
      },
    };
  }

  /** Each slice's latest transcription, in slice order: `[{ slice, transcribeEvent }]`. */
  getTranscriptionResults() {
    return [...this._results.entries()].sort(([a], [b]) => a - b).map(([, r]) => r);
  }

  // --- audio in ---

  _onData({ data, sampleRate = RATE, channels = 1 } = {}) {
    if (!this.isActive) return;
    if (!(data instanceof Uint8Array) && !(data instanceof ArrayBuffer)) {
      this._error('audio stream data must be a Uint8Array (or an ArrayBuffer) of 16-bit PCM');
      return;
    }
    let bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : data;
    if (this._odd !== null) {
      const joined = new Uint8Array(bytes.length + 1);
      joined[0] = this._odd;
      joined.set(bytes, 1);
      bytes = joined;
      this._odd = null;
    }
    if (bytes.length % 2 === 1) {
      this._odd = bytes[bytes.length - 1];
      bytes = bytes.subarray(0, bytes.length - 1);
    }
    let pcm = new Int16Array(bytes.slice().buffer);
    if (channels > 1) pcm = this._mix(pcm, channels);
    if (sampleRate !== RATE) {
      pcm = this._resample(pcm, sampleRate);
      if (!pcm) return;
    } else if (this._resampler) {
      this._endResampler();
    }
    this._append(pcm);
    this._pump();
  }

  /** 16 kHz audio heard: to the recording and the slices. */
  _append(pcm) {
    if (pcm.length === 0) return;
    this._wav?.append(pcm);
    this.slices.append(pcm);
  }

  /** `pcm` at `rate` Hz to 16 kHz, as it arrives (sotto's resampler, as files get); null
   * where sotto does not take the rate (said once through onError). */
  _resample(pcm, rate) {
    if (this._resampler?.rate !== rate) {
      this._endResampler();
      try {
        if (!Number.isInteger(rate)) throw new Error('not a whole number of Hz');
        this._resampler = { rate, r: new Resampler(rate) };
      } catch (e) {
        if (!this._rateError) {
          this._rateError = true;
          this._error(`the audio stream gives ${rate} Hz: ${e.message}`);
        }
        return null;
      }
    }
    return this._resampler.r.push(pcm);
  }

  /** The resampler's last samples (a stream's end, or its rate changing). */
  _endResampler() {
    if (!this._resampler) return;
    const { r } = this._resampler;
    this._resampler = null;
    this._append(r.finish());
  }

  /** Interleaved frames to mono (the mean), keeping a frame split between chunks. */
  _mix(pcm, channels) {
    const all = this._frame.length ? Int16Array.from([...this._frame, ...pcm]) : pcm;
    const frames = Math.floor(all.length / channels);
    this._frame = Array.from(all.subarray(frames * channels));
    const out = new Int16Array(frames);
    for (let f = 0; f < frames; f++) {
      let sum = 0;
      for (let ch = 0; ch < channels; ch++) sum += all[f * channels + ch];
      out[f] = Math.round(sum / channels);
    }
    return out;
  }

  // --- the work, one step at a time ---

  /** Runs steps until none is due; one pump at a time (a second call joins it). */
  _pump() {
    if (this._pumping) return this._pumping;
    const first = this._next();
    if (!first) return Promise.resolve();
    const run = async () => {
      try {
        for (let step = first; step; step = this._next()) {
          // eslint-disable-next-line no-await-in-loop
          await step();
        }
      } catch (e) {
        this._error(e.message || String(e));
      } finally {
        this._pumping = null;
      }
    };
    this._pumping = run();
    return this._pumping;
  }

  /** The next step: slices cut wait for their whole transcription first, in order. */
  _next() {
    if (this._finals.length) return () => this._final(this._finals.shift());
    const c = this.slices.current;
    if (c.n >= this.slices.sliceSamples) return () => this._cutFull();
    if (this._forceCut) {
      this._forceCut = false;
      if (c.n > 0) return async () => this._cut(c.n, this.isActive ? 'nextSlice' : 'stop');
    }
    if (!this.isActive) return null;
    const step = Math.round(this.options.audioStepSec * RATE);
    if (c.n - c.analysed >= step && c.n >= this.options.audioMinSec * RATE) return () => this._partial();
    return null;
  }

  _cut(at, why) {
    const done = this.slices.cut(at);
    this._finals.push(done);
    this._log(`slice ${done.index} cut at ${(done.n / RATE).toFixed(2)} s (${why})`);
    this.callbacks.onTranscribe?.({
      type: 'start',
      sliceIndex: this.slices.current.index,
      isCapturing: this.audioStream.isRecording(),
      processTime: 0,
      recordingTime: 0,
      memoryUsage: this.slices.memoryUsage(),
    });
    this._stats('memory_change');
  }

  /** A full slice is cut in the last pause the VAD finds, else at its length. */
  async _cutFull() {
    const c = this.slices.current;
    const full = this.slices.sliceSamples;
    let at = full;
    if (this.vadEnabled) {
      const segs = await this._detect(c.buf.subarray(0, full));
      at = segs ? this._pauseBefore(segs, full) : full;
    }
    this._cut(at, 'full');
  }

  /** Where to cut audio of `n` samples with speech `segs`: after the last speech that has
   * a pause behind it, inside the pause; `n` when there is none far enough in. */
  _pauseBefore(segs, n) {
    const min = this.options.audioMinSec * RATE;
    for (let i = segs.length - 1; i >= 0; i--) {
      const end = segs[i].t1 * 160;
      const next = i + 1 < segs.length ? segs[i + 1].t0 * 160 : n;
      if (end >= min && next > end) return Math.min(n, end + Math.min(MAX_TAIL, Math.floor((next - end) / 2)));
    }
    return n;
  }

  /** The speech in `pcm`, or null where onBeginVad declined or the VAD failed. */
  async _detect(pcm, sliceIndex) {
    if (this.callbacks.onBeginVad) {
      const go = await this.callbacks.onBeginVad({
        sliceIndex,
        audioData: new Uint8Array(pcmBuffer(pcm)),
        duration: (pcm.length / RATE) * 1000,
      });
      if (go === false) return null;
    }
    try {
      return await this.vadContext.detectSpeechData(pcmBuffer(pcm), this.options.vadOptions);
    } catch (e) {
      this._error(`VAD: ${e.message || e}`);
      return null;
    }
  }

  /** whisper.rn's VAD event for speech `segs` in `n` samples of a slice. */
  _vadEvent(segs, n, sliceIndex) {
    const o = this.options.vadOptions;
    const spoken = segs.reduce((sum, s) => sum + (s.t1 - s.t0), 0) * 160;
    const lastEnd = segs.length ? segs.at(-1).t1 * 160 : -1;
    const gapMs = ((n - lastEnd) / RATE) * 1000;
    const speaking = segs.length > 0 && gapMs <= (o.minSilenceDurationMs || 0) + (o.speechPadMs || 0) + VAD_SLACK_MS;
    let type;
    if (speaking) type = this._vadState === 'speech' ? 'speech_continue' : 'speech_start';
    else type = this._vadState === 'speech' ? 'speech_end' : 'silence';
    this._vadState = speaking ? 'speech' : 'silence';
    this._lastSpeech = segs.length ? segs.at(-1).t1 : -1;
    return {
      type,
      timestamp: Date.now(),
      lastSpeechDetectedTime: this._lastSpeech,
      confidence: n > 0 ? Math.min(1, spoken / n) : 0,
      duration: n / RATE,
      sliceIndex,
      currentThreshold: o.threshold,
    };
  }

  /** The slice being filled: VAD, perhaps a cut where speech ended, perhaps a transcription. */
  async _partial() {
    const c = this.slices.current;
    const n = c.n;
    c.analysed = n;
    const pcm = c.buf.slice(0, n);
    let vadEvent;
    if (this.vadEnabled) {
      const segs = await this._detect(pcm, c.index);
      if (!segs) return;
      vadEvent = this._vadEvent(segs, n, c.index);
      this.callbacks.onVad?.(vadEvent);
      const ended = vadEvent.type === 'speech_end' || vadEvent.type === 'silence';
      const due =
        Math.max(this.options.audioMinSec, this.options.audioSliceSec * this.options.autoSliceThreshold) * RATE;
      if (ended && this.options.autoSliceOnSpeechEnd && n >= due) {
        this._cut(segs.length ? this._pauseBefore(segs, n) : n, vadEvent.type);
        return;
      }
      // Nothing to do unless there is speech the last transcription did not hear.
      if (!segs.length || segs.at(-1).t1 * 160 <= c.heardTo) return;
    }
    c.heardTo = n;
    await this._transcribe(c, pcm, false, vadEvent);
  }

  /** A cut slice, transcribed whole (where it has speech). */
  async _final(slice) {
    slice.isProcessed = true;
    let vadEvent;
    let skip = slice.n < this.options.audioMinSec * RATE;
    if (this.vadEnabled && slice.n > 0) {
      const segs = await this._detect(slice.buf.subarray(0, slice.n), slice.index);
      if (segs) {
        skip = segs.length === 0;
        vadEvent = this._vadEvent(segs, slice.n, slice.index);
        this._vadState = 'silence'; // the next slice starts after a cut
      }
    }
    if (skip) {
      const empty = { result: '', language: '', segments: [], isAborted: false };
      this._record(slice, {
        type: 'transcribe',
        sliceIndex: slice.index,
        data: empty,
        isCapturing: this.audioStream.isRecording(),
        processTime: 0,
        recordingTime: (slice.n / RATE) * 1000,
        memoryUsage: this.slices.memoryUsage(),
        vadEvent,
        isFinal: true,
      });
    } else {
      await this._transcribe(slice, slice.buf.slice(0, slice.n), true, vadEvent);
    }
    this.slices.release();
    this._stats('slice_processed');
  }

  /** initialPrompt, then the text of the slices before this one. */
  _prompt(index) {
    const parts = [];
    const first = this.options.initialPrompt ?? this.options.transcribeOptions.prompt;
    if (first) parts.push(first);
    const keep = this.options.promptPreviousSlices;
    if (keep > 0) {
      const before = this.getTranscriptionResults()
        .filter(({ slice, transcribeEvent }) => slice.index < index && transcribeEvent.data?.result?.trim())
        .map(({ transcribeEvent }) => transcribeEvent.data.result.trim());
      parts.push(...before.slice(-keep));
    }
    return parts.join(' ') || undefined;
  }

  async _transcribe(slice, pcm, isFinal, vadEvent) {
    const audioData = new Uint8Array(pcmBuffer(pcm));
    if (this.callbacks.onBeginTranscribe) {
      const go = await this.callbacks.onBeginTranscribe({
        sliceIndex: slice.index,
        audioData,
        duration: (pcm.length / RATE) * 1000,
        vadEvent,
      });
      if (go === false) return;
    }
    const started = Date.now();
    this.isTranscribing = true;
    this._stats('status_change');
    const base = () => ({
      sliceIndex: slice.index,
      isCapturing: this.audioStream.isRecording(),
      processTime: Date.now() - started,
      recordingTime: (pcm.length / RATE) * 1000,
      memoryUsage: this.slices.memoryUsage(),
      vadEvent,
      isFinal,
    });
    try {
      const { promise } = this.whisperContext.transcribeData(audioData.buffer, {
        ...this.options.transcribeOptions,
        prompt: this._prompt(slice.index),
        onProgress: undefined,
        onNewSegments: undefined,
      });
      const result = await promise;
      const data = {
        ...result,
        result: (result.result || '').replace(NON_SPEECH, '').trim(),
        segments: (result.segments || []).filter((s) => s.text.replace(NON_SPEECH, '').trim() !== ''),
      };
      this._record(slice, { type: 'transcribe', data, ...base() });
    } catch (e) {
      const message = e.message || String(e);
      this.callbacks.onTranscribe?.({ type: 'error', data: undefined, ...base() });
      this._error(`transcription of slice ${slice.index}: ${message}`);
    } finally {
      this.isTranscribing = false;
      this._stats('status_change');
    }
  }

  _record(slice, event) {
    this._results.set(slice.index, { slice: this.slices.meta(slice), transcribeEvent: event });
    this.callbacks.onTranscribe?.(event);
    this._log(`slice ${slice.index}${event.isFinal ? ' (final)' : ''}: "${event.data.result}"`);
  }

  _stats(type) {
    this.callbacks.onStatsUpdate?.({ timestamp: Date.now(), type, data: this.getStatistics() });
  }

  _closeWav() {
    if (!this._wav) return;
    try {
      this._wav.close();
    } catch (e) {
      this._error(`audio output: ${e.message}`);
    }
    this._wav = null;
  }

  _error(message) {
    this._log(`error: ${message}`);
    this.callbacks.onError?.(message);
  }

  _log(message) {
    this.options.logger(`[RealtimeTranscriber] ${message}`);
  }
}

/** The status, data and error callbacks every adapter keeps. */
class StreamBase {
  constructor(logger) {
    this._log = logger || (() => {});
    this._recording = false;
    this._data = () => {};
    this._errorCb = () => {};
    this._status = () => {};
  }

  isRecording() {
    return this._recording;
  }

  onData(cb) {
    this._data = cb;
  }

  onError(cb) {
    this._errorCb = cb;
  }

  onStatusChange(cb) {
    this._status = cb;
  }

  _setRecording(on) {
    if (this._recording === on) return;
    this._recording = on;
    this._status(on);
  }
}

/**
 * whisper.rn's SimulateFileAudioStreamAdapter: a file played as if it were being
 * recorded, `chunkDurationMs` of 16-bit PCM at a time, `playbackSpeed` times real time.
 * Any format sotto reads (decoded to 16 kHz mono); whisper.rn's `fs` is not needed.
 */
class SimulateFileAudioStreamAdapter extends StreamBase {
  constructor({ filePath, playbackSpeed = 1, chunkDurationMs = 100, loop = false, onEndOfFile, logger } = {}) {
    super(logger);
    if (typeof filePath !== 'string') throw new TypeError('filePath must be a string');
    this.options = {
      filePath,
      playbackSpeed: positive(playbackSpeed, 'playbackSpeed'),
      chunkDurationMs: positive(chunkDurationMs, 'chunkDurationMs'),
      loop,
      onEndOfFile,
    };
    this._pcm = null;
    this._pos = 0;
    this._timer = null;
    this._ended = false;
  }

  async initialize() {
    const { decodeAudioFile } = require('./index.js');
    const samples = await decodeAudioFile(this.options.filePath);
    this._pcm = Int16Array.from(samples, (v) => Math.max(-32768, Math.min(32767, Math.round(v * 32768))));
    this._pos = 0;
    this._log(`${this.options.filePath}: ${(this._pcm.length / RATE).toFixed(2)} s at ${this.options.playbackSpeed}x`);
  }

  async start() {
    if (!this._pcm) throw new Error('SimulateFileAudioStreamAdapter: initialize() first');
    if (this._recording) return;
    this._ended = false;
    this._setRecording(true);
    const chunk = Math.max(1, Math.round((this.options.chunkDurationMs / 1000) * RATE));
    this._timer = setInterval(() => this._tick(chunk), this.options.chunkDurationMs / this.options.playbackSpeed);
  }

  _tick(chunk) {
    if (this._pos >= this._pcm.length) {
      if (this.options.loop && this._pcm.length > 0) {
        this._pos = 0;
      } else {
        this._ended = true;
        this.stop();
        this.options.onEndOfFile?.();
        return;
      }
    }
    const part = this._pcm.slice(this._pos, this._pos + chunk);
    this._pos += part.length;
    this._data({ data: new Uint8Array(part.buffer), sampleRate: RATE, channels: 1, timestamp: Date.now() });
  }

  async stop() {
    if (this._timer) clearInterval(this._timer);
    this._timer = null;
    this._setRecording(false);
  }

  async release() {
    await this.stop();
    this._pcm = null;
    this._pos = 0;
  }

  seekToTime(seconds) {
    if (!this._pcm) return;
    this._pos = Math.max(0, Math.min(this._pcm.length, Math.round(seconds * RATE)));
  }

  setPlaybackSpeed(speed) {
    this.options.playbackSpeed = positive(speed, 'playbackSpeed');
    if (this._timer) {
      this.stop();
      this.start();
    }
  }

  resetBuffer() {
    this._pos = 0;
    this._ended = false;
  }

  getStatistics() {
    const total = this._pcm ? this._pcm.length / RATE : 0;
    const currentTime = this._pos / RATE;
    return {
      filePath: this.options.filePath,
      isRecording: this._recording,
      currentTime,
      totalDuration: total,
      progress: total > 0 ? currentTime / total : 0,
      playbackSpeed: this.options.playbackSpeed,
      hasReachedEnd: this._ended,
    };
  }
}

/**
 * 16-bit little-endian PCM from a Node Readable (`stream`), or from the standard output of
 * a command it starts (`command: ['arecord', '-q', '-t', 'raw', '-f', 'S16_LE', '-r',
 * '16000', '-c', '1']`, or ffmpeg with `-f s16le -ar 16000 -ac 1 -`) and stops.
 * `sampleRate` and `channels` say what the PCM is (16000 and 1 by default); `onEnd` is
 * called when the stream ends.
 */
class ReadableStreamAdapter extends StreamBase {
  constructor({ stream, command, sampleRate = RATE, channels = 1, onEnd, logger } = {}) {
    super(logger);
    if (!stream === !command)
      throw new TypeError('give one of stream (a Readable) and command (an array: program and arguments)');
    if (command && (!Array.isArray(command) || command.length === 0))
      throw new TypeError('command must be an array: the program, then its arguments');
    this.options = { stream, command, sampleRate, channels: Math.round(positive(channels, 'channels')), onEnd };
    this._child = null;
    this._source = null;
    this._onChunk = (b) =>
      this._data({
        data: new Uint8Array(b.buffer, b.byteOffset, b.length),
        sampleRate: this.options.sampleRate,
        channels: this.options.channels,
        timestamp: Date.now(),
      });
    this._onEnd = () => {
      this._setRecording(false);
      this.options.onEnd?.();
    };
    this._onErr = (e) => this._errorCb(e.message || String(e));
  }

  async initialize() {}

  async start() {
    if (this._recording) return;
    if (this.options.command) {
      const [program, ...args] = this.options.command;
      const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d) => {
        stderr = (stderr + d).slice(-2000);
      });
      child.on('error', this._onErr);
      // 'close', not 'exit': by then stderr has been read to its end.
      child.on('close', (code, signal) => {
        if (code && this._child === child) this._errorCb(`${program} exited with ${code}: ${stderr.trim()}`);
        else if (signal && this._child === child) this._errorCb(`${program} was killed by ${signal}`);
      });
      this._child = child;
      this._source = child.stdout;
    } else {
      this._source = this.options.stream;
    }
    this._source.on('data', this._onChunk);
    this._source.once('end', this._onEnd);
    this._source.on('error', this._onErr);
    this._setRecording(true);
    this._source.resume();
  }

  async stop() {
    if (this._source) {
      this._source.off('data', this._onChunk);
      this._source.off('end', this._onEnd);
      this._source.off('error', this._onErr);
      if (!this._child) this._source.pause();
    }
    if (this._child) {
      const child = this._child;
      this._child = null;
      child.kill();
    }
    this._source = null;
    this._setRecording(false);
  }

  async release() {
    await this.stop();
  }
}

module.exports = {
  RealtimeTranscriber,
  VAD_PRESETS,
  SimulateFileAudioStreamAdapter,
  ReadableStreamAdapter,
};
