'use strict';
// whisper.rn's RealtimeTranscriber and its adapters, against the real library, model and
// VAD (environment as in sotto.test.js), and against stand-ins where only the slicing
// and the adapters are under test.
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const { PassThrough } = require('node:stream');
const {
  initWhisper,
  initWhisperVad,
  releaseAllWhisper,
  releaseAllWhisperVad,
  RealtimeTranscriber,
  SimulateFileAudioStreamAdapter,
  ReadableStreamAdapter,
  VAD_PRESETS,
  decodeAudioFile,
} = require('..');
const subpath = require('sotto/realtime-transcription');

const MODEL = process.env.SOTTO_TEST_MODEL || 'tiny.en';
const VAD = process.env.SOTTO_TEST_VAD;
const AUDIO = process.env.SOTTO_TEST_AUDIO || path.join(__dirname, '..', '..', '..', 'samples', 'jfk.wav');
const JFK = 'and so my fellow americans ask not what your country can do for you ask what you can do for your country';
const normalise = (s) =>
  s
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s]/gu, '')
    .split(/\s+/)
    .filter(Boolean)
    .join(' ');
const TRANSCRIBE = { language: 'en', beamSize: 1, maxThreads: 2 };

/** jfk.wav's 16-bit PCM bytes (a plain 44-byte-header WAV). */
const jfkPcm = () => fs.readFileSync(AUDIO).subarray(44);

function wav(pcm, rate = 16000) {
  const h = Buffer.alloc(44);
  h.write('RIFF', 0);
  h.writeUInt32LE(36 + pcm.length, 4);
  h.write('WAVEfmt ', 8);
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20);
  h.writeUInt16LE(1, 22);
  h.writeUInt32LE(rate, 24);
  h.writeUInt32LE(2 * rate, 28);
  h.writeUInt16LE(2, 32);
  h.writeUInt16LE(16, 34);
  h.write('data', 36);
  h.writeUInt32LE(pcm.length, 40);
  return Buffer.concat([h, pcm]);
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sotto-realtime-'));
// A failed test leaves no context behind to keep the process alive.
test.after(async () => {
  await releaseAllWhisper();
  await releaseAllWhisperVad();
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** An audio stream that the test feeds by hand. */
function handStream() {
  return {
    recording: false,
    async initialize(config) {
      this.config = config;
    },
    async start() {
      this.recording = true;
    },
    async stop() {
      this.recording = false;
    },
    isRecording() {
      return this.recording;
    },
    onData(cb) {
      this.push = cb;
    },
    onError() {},
    onStatusChange() {},
    async release() {},
  };
}

test('with a VAD, slices are cut where speech ends and each is transcribed whole, in order', async (t) => {
  // 1 s of silence, the speech, 3 s of silence, the speech again, 1 s of silence: 27 s,
  // played at 5 times real time (the pause between, 0.6 s, gives the VAD time to find it
  // on a busy machine).
  const silence = (s) => Buffer.alloc(32000 * s);
  const pcm = Buffer.concat([silence(1), jfkPcm(), silence(3), jfkPcm(), silence(1)]);
  const file = path.join(tmp, 'twice.wav');
  fs.writeFileSync(file, wav(pcm));
  const recorded = path.join(tmp, 'recorded.wav');

  const ctx = await initWhisper({ filePath: MODEL, useGpu: false });
  const vad = await initWhisperVad({ filePath: VAD, nThreads: 1 });
  // The context as the transcriber sees it, with the prompts it is given.
  const prompts = new Map();
  const whisperContext = {
    transcribeData(data, options) {
      assert.ok(data instanceof ArrayBuffer);
      prompts.set(data.byteLength, options.prompt);
      return ctx.transcribeData(data, options);
    },
  };
  let ended;
  const eof = new Promise((resolve) => {
    ended = resolve;
  });
  const audioStream = new SimulateFileAudioStreamAdapter({
    filePath: file,
    playbackSpeed: 5,
    onEndOfFile: () => ended(),
  });
  const events = [];
  const vadEvents = [];
  const errors = [];
  const status = [];
  const rt = new RealtimeTranscriber(
    { whisperContext, vadContext: vad, audioStream },
    // Each slice's prompt would be the one before's text, here the very same words, which
    // Whisper then takes as said already: prompts chain in the next test.
    {
      audioSliceSec: 20,
      transcribeOptions: TRANSCRIBE,
      audioOutputPath: recorded,
      initialPrompt: 'JFK.',
      promptPreviousSlices: false,
    },
    {
      onTranscribe: (e) => events.push(e),
      onVad: (e) => vadEvents.push(e),
      onError: (e) => errors.push(e),
      onStatusChange: (on) => status.push(on),
    }
  );
  t.after(() => rt.release());
  await rt.start();
  await assert.rejects(rt.start(), /already active/);
  await eof;
  await rt.stop();
  assert.deepStrictEqual(errors, []);
  assert.deepStrictEqual(status, [true, false]);

  // The first cut is in the pause between the two; any later one (the second's pauses,
  // or the silence at the end, as the VAD came upon them) is between words too, so the
  // slices' text, each transcribed whole, is the speech twice.
  const results = rt.getTranscriptionResults();
  const shape = JSON.stringify(results.map((r) => [r.slice, r.transcribeEvent.data.result]));
  assert.ok(results.length >= 2, shape);
  assert.ok(results[0].slice.endTime > 11000 && results[0].slice.endTime < 13500, shape);
  assert.strictEqual(normalise(results[0].transcribeEvent.data.result), JFK, shape);
  for (let i = 1; i < results.length; i++)
    assert.strictEqual(results[i].slice.startTime, results[i - 1].slice.endTime, shape);
  assert.strictEqual(results.at(-1).slice.endTime, 27000);
  assert.ok(
    results.every((r) => r.transcribeEvent.isFinal && r.slice.isProcessed),
    shape
  );
  const text = results.map((r) => r.transcribeEvent.data.result).join(' ');
  assert.strictEqual(normalise(text), `${JFK} ${JFK}`, shape);
  assert.deepStrictEqual(new Set(prompts.values()), new Set(['JFK.']));

  // Partial transcriptions came as the slices filled, and whisper.rn's VAD events.
  const partial = events.filter((e) => e.type === 'transcribe' && !e.isFinal);
  assert.ok(partial.length >= 1, `${partial.length} partial transcriptions`);
  assert.ok(partial.every((e) => e.recordingTime < 20000));
  const types = new Set(vadEvents.map((e) => e.type));
  for (const t of ['speech_start', 'speech_end']) assert.ok(types.has(t), [...types].join());
  assert.ok(vadEvents.every((e) => e.confidence >= 0 && e.confidence <= 1 && e.currentThreshold === 0.5));
  assert.strictEqual(events.filter((e) => e.type === 'start').length, results.length);
  assert.strictEqual(events.at(-1).type, 'end');
  assert.strictEqual(events.at(-1).isCapturing, false);
  assert.strictEqual(events.at(-1).recordingTime, 27000);

  // Every sample heard was written to audioOutputPath, as it came.
  assert.ok(fs.readFileSync(recorded).equals(wav(pcm)));
  // Memory: the audio of old processed slices is freed (maxSlicesInMemory 3 keeps these).
  assert.strictEqual(rt.getStatistics().sliceStats.memoryUsage.totalSamples, 27 * 16000);

  await rt.release();
  await ctx.release();
  await vad.release();
});

test('without a VAD, slices are cut at audioSliceSec; stop() transcribes the rest', async (t) => {
  const ctx = await initWhisper({ filePath: MODEL, useGpu: false });
  const pcm = jfkPcm();
  // Stereo (each sample twice), in chunks of odd byte counts: mixed back to the same mono.
  const stereo = Buffer.alloc(pcm.length * 2);
  for (let i = 0; i < pcm.length / 2; i++) {
    const v = pcm.readInt16LE(2 * i);
    stereo.writeInt16LE(v, 4 * i);
    stereo.writeInt16LE(v, 4 * i + 2);
  }
  const source = new PassThrough();
  let ended;
  const eos = new Promise((resolve) => {
    ended = resolve;
  });
  const audioStream = new ReadableStreamAdapter({ stream: source, channels: 2, onEnd: () => ended() });
  const recorded = path.join(tmp, 'stereo-in.wav');
  const events = [];
  const rt = new RealtimeTranscriber(
    { whisperContext: ctx, audioStream },
    { audioSliceSec: 8, transcribeOptions: TRANSCRIBE, audioOutputPath: recorded, promptPreviousSlices: false },
    { onTranscribe: (e) => events.push(e), onError: (e) => assert.fail(e) }
  );
  t.after(() => rt.release());
  await rt.start();
  for (let at = 0; at < stereo.length; at += 12345) source.write(stereo.subarray(at, at + 12345));
  source.end();
  await eos;
  await rt.stop();
  const results = rt.getTranscriptionResults();
  assert.deepStrictEqual(
    results.map((r) => r.slice.sampleCount),
    [128000, 48000]
  );
  assert.ok(results.every((r) => r.transcribeEvent.isFinal && r.transcribeEvent.data.result.length > 0));
  assert.match(normalise(results[0].transcribeEvent.data.result), /fellow americans/);
  assert.match(normalise(results[1].transcribeEvent.data.result), /your country/);
  assert.ok(fs.readFileSync(recorded).equals(wav(pcm)));
  assert.ok(events.some((e) => e.type === 'transcribe' && !e.isFinal));
  await rt.release();
  await ctx.release();
});

test('a 48 kHz stream is resampled as a 48 kHz file decodes, and transcribed', async (t) => {
  const ctx = await initWhisper({ filePath: MODEL, useGpu: false });
  // jfk at 48 kHz (each 16 kHz step cut in three, linearly), as a WAV file and as a stream.
  const pcm = jfkPcm();
  const n = pcm.length / 2;
  const high = Buffer.alloc(6 * n);
  for (let i = 0; i < n; i++) {
    const a = pcm.readInt16LE(2 * i);
    const b = i + 1 < n ? pcm.readInt16LE(2 * i + 2) : a;
    for (let k = 0; k < 3; k++) high.writeInt16LE(Math.round(a + ((b - a) * k) / 3), 6 * i + 2 * k);
  }
  const file = path.join(tmp, 'jfk48.wav');
  fs.writeFileSync(file, wav(high, 48000));
  const source = new PassThrough();
  let ended;
  const eos = new Promise((resolve) => {
    ended = resolve;
  });
  const audioStream = new ReadableStreamAdapter({ stream: source, sampleRate: 48000, onEnd: () => ended() });
  const recorded = path.join(tmp, 'from48.wav');
  const rt = new RealtimeTranscriber(
    { whisperContext: ctx, audioStream },
    { audioSliceSec: 30, transcribeOptions: TRANSCRIBE, audioOutputPath: recorded },
    { onError: (e) => assert.fail(e) }
  );
  t.after(() => rt.release());
  await rt.start();
  for (let at = 0; at < high.length; at += 9601) source.write(high.subarray(at, at + 9601));
  source.end();
  await eos;
  await rt.stop();
  const decoded = await decodeAudioFile(file);
  assert.strictEqual(decoded.length, n);
  const heard = new Int16Array(Uint8Array.from(fs.readFileSync(recorded).subarray(44)).buffer);
  const want = Int16Array.from(decoded, (v) => Math.max(-32768, Math.min(32767, Math.round(v * 32768))));
  assert.deepStrictEqual(heard, want);
  const [only] = rt.getTranscriptionResults();
  assert.strictEqual(only.slice.sampleCount, n);
  assert.match(normalise(only.transcribeEvent.data.result), /fellow americans ask not what your country/);
  await rt.release();
  await ctx.release();
});

test('int16 ArrayBuffers, as whisper.rn passes them, transcribe as floats do', async () => {
  const ctx = await initWhisper({ filePath: MODEL, useGpu: false });
  const pcm = jfkPcm();
  const bytes = pcm.buffer.slice(pcm.byteOffset, pcm.byteOffset + pcm.length);
  const floats = Float32Array.from(new Int16Array(bytes.slice(0)), (v) => v / 32768);
  const a = await ctx.transcribeData(bytes, TRANSCRIBE).promise;
  const b = await ctx.transcribeData(floats, TRANSCRIBE).promise;
  const c = await ctx.transcribeData(new Int16Array(bytes.slice(0)), TRANSCRIBE).promise;
  const d = await ctx.transcribeData(pcm, TRANSCRIBE).promise; // a Buffer: its bytes
  assert.strictEqual(normalise(a.result), JFK);
  for (const r of [b, c, d]) assert.strictEqual(r.result, a.result);
  assert.throws(() => ctx.transcribeData(new ArrayBuffer(5)), /16-bit PCM/);
  assert.throws(() => ctx.transcribeData(123), /ArrayBuffer of 16-bit PCM/);
  await ctx.release();
});

test("each slice's prompt is the initial prompt and the slices before; nextSlice cuts", async () => {
  const prompts = [];
  const whisperContext = {
    transcribeData(data, options) {
      prompts.push([data.byteLength / 32000, options.prompt]);
      const result = ` ${data.byteLength / 32000} s.`;
      return {
        stop: async () => {},
        promise: Promise.resolve({ result, segments: [{ text: result, t0: 0, t1: 100 }] }),
      };
    },
  };
  const audioStream = handStream();
  const rt = new RealtimeTranscriber({ whisperContext, audioStream }, { initialPrompt: 'Hi.', audioStepSec: 2 });
  await rt.start();
  const second = () => ({ data: new Uint8Array(32000), sampleRate: 16000, channels: 1 });
  for (let i = 0; i < 3; i++) audioStream.push(second());
  await rt.nextSlice();
  for (let i = 0; i < 2; i++) audioStream.push(second());
  await rt.stop();
  // Slice 0: a partial at 2 s, whole at 3 s; slice 1: a partial at 2 s, and whole, after
  // slice 0's text.
  assert.deepStrictEqual(prompts, [
    [2, 'Hi.'],
    [3, 'Hi.'],
    [2, 'Hi. 3 s.'],
    [2, 'Hi. 3 s.'],
  ]);
  assert.deepStrictEqual(
    rt.getTranscriptionResults().map((r) => [r.slice.startTime, r.slice.endTime, r.transcribeEvent.data.result]),
    [
      [0, 3000, '3 s.'],
      [3000, 5000, '2 s.'],
    ]
  );

  // Slices of 3, 2 and 1 s: the last one's prompt has the slice before it, or, asked, all.
  for (const [promptPreviousSlices, last] of [
    [true, 'Hi. 2 s.'],
    [Infinity, 'Hi. 3 s. 2 s.'],
    [false, 'Hi.'],
  ]) {
    prompts.length = 0;
    const three = new RealtimeTranscriber(
      { whisperContext, audioStream },
      { initialPrompt: 'Hi.', audioStepSec: 5, promptPreviousSlices }
    );
    await three.start();
    const ends = [];
    three.updateCallbacks({ onTranscribe: (e) => e.type === 'end' && ends.push(e) });
    for (const seconds of [3, 2, 1]) {
      for (let i = 0; i < seconds; i++) audioStream.push(second());
      await three.nextSlice();
    }
    await Promise.all([three.stop(), three.stop()]); // one stop, one end
    assert.strictEqual(ends.length, 1);
    assert.deepStrictEqual(prompts.at(-1), [1, last]);
  }
  assert.throws(
    () => new RealtimeTranscriber({ whisperContext, audioStream }, { promptPreviousSlices: -1 }),
    /promptPreviousSlices/
  );
});

/** A stand-in VAD: speech wherever the 16-bit samples are not zero (10 ms frames). */
const loudVad = {
  async detectSpeechData(data) {
    const pcm = new Int16Array(data);
    const segs = [];
    for (let f = 0; f * 160 < pcm.length; f++) {
      const loud = pcm.subarray(f * 160, (f + 1) * 160).some((v) => v !== 0);
      if (loud && segs.length && segs.at(-1).t1 === f) segs.at(-1).t1 = f + 1;
      else if (loud) segs.push({ t0: f, t1: f + 1 });
    }
    return segs;
  },
};

test('the VAD events, a cut in the pause after speech, and a full slice cut in its last pause', async () => {
  const transcribed = [];
  const whisperContext = {
    transcribeData(data) {
      const result = `${data.byteLength / 32000} s.`;
      transcribed.push(result);
      return { stop: async () => {}, promise: Promise.resolve({ result, segments: [] }) };
    },
  };
  const audioStream = handStream();
  const vadEvents = [];
  const rt = new RealtimeTranscriber(
    { whisperContext, vadContext: loudVad, audioStream },
    { audioSliceSec: 5, autoSliceThreshold: 0.5, promptPreviousSlices: false },
    { onVad: (e) => vadEvents.push([e.sliceIndex, e.type, e.duration]) }
  );
  await rt.start();
  // Half seconds: silence, 2.5 s of "speech", 1 s of silence, 4 s of speech, 0.5 s of silence.
  const halves = [0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0];
  for (const loud of halves) {
    audioStream.push({ data: new Uint8Array(new Int16Array(8000).fill(loud * 1000).buffer), sampleRate: 16000 });
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  await rt.stop();
  assert.deepStrictEqual(vadEvents, [
    [0, 'speech_start', 1],
    [0, 'speech_continue', 2],
    [0, 'speech_continue', 3],
    // 1 s after the speech: it has ended, and the slice is past 0.5 × 5 s: cut 0.5 s in.
    [0, 'speech_end', 4],
    [1, 'speech_start', 1],
    [1, 'speech_continue', 2],
    [1, 'speech_continue', 3],
    [1, 'speech_continue', 4],
  ]);
  // Slice 1 filled its 5 s with speech to 4.5 s: cut in the quarter second after it.
  assert.deepStrictEqual(
    rt.getTranscriptionResults().map((r) => [r.slice.startTime, r.slice.endTime, r.transcribeEvent.data.result]),
    [
      [0, 3500, '3.5 s.'],
      [3500, 8250, '4.75 s.'],
      [8250, 8500, ''],
    ]
  );
  // Partials every second of each; the last slice, silent, is not transcribed.
  assert.deepStrictEqual(transcribed, ['1 s.', '2 s.', '3 s.', '3.5 s.', '1 s.', '2 s.', '3 s.', '4 s.', '4.75 s.']);
});

test('onBeginTranscribe and onBeginVad may decline', async () => {
  const calls = [];
  const whisperContext = {
    transcribeData(data) {
      calls.push(data.byteLength / 32000);
      return { stop: async () => {}, promise: Promise.resolve({ result: 'x', segments: [] }) };
    },
  };
  const audioStream = handStream();
  const rt = new RealtimeTranscriber(
    { whisperContext, vadContext: loudVad, audioStream },
    {},
    {
      onBeginVad: ({ duration }) => duration !== 2000, // no VAD, so no transcription, at 2 s
      onBeginTranscribe: ({ duration }) => duration !== 3000,
    }
  );
  await rt.start();
  for (let i = 0; i < 4; i++) {
    audioStream.push({ data: new Uint8Array(new Int16Array(16000).fill(500).buffer), sampleRate: 16000 });
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  await rt.stop();
  assert.deepStrictEqual(calls, [1, 4, 4]);
});

test('bad options, streams and rates are refused clearly', async () => {
  const whisperContext = {
    transcribeData: () => ({ stop: async () => {}, promise: Promise.resolve({ result: '', segments: [] }) }),
  };
  const audioStream = handStream();
  assert.throws(() => new RealtimeTranscriber({ audioStream }), /whisperContext/);
  assert.throws(() => new RealtimeTranscriber({ whisperContext, audioStream: {} }), /AudioStreamInterface/);
  assert.throws(() => new RealtimeTranscriber({ whisperContext, audioStream }, { vadPreset: 'loud' }), /meeting/);
  assert.throws(() => new RealtimeTranscriber({ whisperContext, audioStream }, { audioSliceSec: -1 }), /audioSliceSec/);
  assert.throws(() => new RealtimeTranscriber({ whisperContext, audioStream }, { audioMinSec: 40 }), /audioMinSec/);
  assert.throws(() => new ReadableStreamAdapter({}), /stream/);
  assert.throws(() => new SimulateFileAudioStreamAdapter({}), /filePath/);
  // A preset is merged under the options given.
  const rt = new RealtimeTranscriber(
    { whisperContext, audioStream },
    { vadPreset: 'meeting', vadOptions: { threshold: 0.6 } }
  );
  assert.deepStrictEqual(rt.options.vadOptions, { ...VAD_PRESETS.meeting, threshold: 0.6 });
  assert.strictEqual(subpath.RealtimeTranscriber, RealtimeTranscriber);

  // A rate sotto does not take is named, once, and its audio not taken for 16 kHz.
  const errors = [];
  rt.updateCallbacks({ onError: (e) => errors.push(e) });
  await rt.start();
  assert.strictEqual(audioStream.config.sampleRate, 16000);
  audioStream.push({ data: new Uint8Array(8820), sampleRate: 500, channels: 1 });
  audioStream.push({ data: new Uint8Array(8820), sampleRate: 500, channels: 1 });
  assert.strictEqual(errors.length, 1);
  assert.match(errors[0], /500 Hz/);
  assert.strictEqual(rt.getStatistics().audioStats.accumulatedSamples, 0);
  // 44.1 kHz is resampled as it comes; switching back to 16 kHz ends its resampling whole.
  audioStream.push({ data: new Uint8Array(8820), sampleRate: 44100, channels: 1 });
  audioStream.push({ data: new Uint8Array(8820), sampleRate: 44100, channels: 1 });
  assert.ok(rt.getStatistics().audioStats.accumulatedSamples > 3000);
  // An ArrayBuffer is taken too, and a sample's bytes may be split between chunks.
  audioStream.push({ data: new ArrayBuffer(3), sampleRate: 16000, channels: 1 });
  audioStream.push({ data: new Uint8Array(1), sampleRate: 16000, channels: 1 });
  assert.strictEqual(rt.getStatistics().audioStats.accumulatedSamples, 3200 + 2);
  assert.strictEqual(errors.length, 1);
  audioStream.push({ data: [1, 2], sampleRate: 16000, channels: 1 });
  assert.match(errors[1], /Uint8Array/);
  await rt.stop();

  // A command's output is the stream; one that fails says how.
  const file = path.join(tmp, 'raw.pcm');
  fs.writeFileSync(file, jfkPcm());
  let got = 0;
  let done;
  const finished = new Promise((resolve) => {
    done = resolve;
  });
  const cat = new ReadableStreamAdapter({ command: ['cat', file], onEnd: () => done() });
  cat.onData((d) => {
    got += d.data.length;
  });
  await cat.start();
  await finished;
  assert.strictEqual(got, jfkPcm().length);
  assert.strictEqual(cat.isRecording(), false);
  const failing = new ReadableStreamAdapter({ command: ['sh', '-c', 'echo no device >&2; exit 3'] });
  const failed = new Promise((resolve) => failing.onError(resolve));
  await failing.start();
  assert.match(await failed, /exited with 3: no device/);
  await failing.release();
});
