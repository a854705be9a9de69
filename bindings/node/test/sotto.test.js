'use strict';
// The Node binding against the real library and model:
//   SOTTO_TEST_MODEL=~/.cache/sotto/models/tiny.en SOTTO_LIB=../../target/release/libsotto_capi.so npm test
// crates/sotto-capi/tests/c_api.rs runs it as part of `cargo test`.
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const fs = require('node:fs');
const { initWhisper, releaseAllWhisper, initWhisperVad, releaseAllWhisperVad } = require('..');

const MODEL = process.env.SOTTO_TEST_MODEL || 'tiny.en';
const VAD = process.env.SOTTO_TEST_VAD; // undefined: the cached VAD, fetched on first use
const AUDIO = process.env.SOTTO_TEST_AUDIO || path.join(__dirname, '..', '..', '..', 'samples', 'jfk.wav');
const JFK = 'and so my fellow americans ask not what your country can do for you ask what you can do for your country';
const normalise = (s) => s.toLowerCase().replace(/[^\p{L}\p{N}\s]/gu, '').split(/\s+/).filter(Boolean).join(' ');

/** jfk.wav's 16-bit PCM as floats (a plain 44-byte-header WAV). */
function jfkSamples() {
  const b = fs.readFileSync(AUDIO);
  const pcm = new Int16Array(b.buffer.slice(b.byteOffset + 44, b.byteOffset + b.length));
  return Float32Array.from(pcm, (v) => v / 32768);
}

test('whisper.rn-style transcription of a file, with segments and progress', async () => {
  const ctx = await initWhisper({ filePath: MODEL, useGpu: false });
  assert.strictEqual(ctx.gpu, false);
  assert.strictEqual(ctx.reasonNoGPU, 'useGpu is false');
  const seen = [];
  const progress = [];
  const { promise } = ctx.transcribe(AUDIO, {
    language: 'en',
    maxThreads: 2,
    onNewSegments: (r) => seen.push(r),
    onProgress: (p) => progress.push(p),
  });
  const r = await promise;
  assert.strictEqual(normalise(r.result), JFK);
  assert.strictEqual(r.isAborted, false);
  assert.strictEqual(r.language, 'en');
  assert.ok(r.segments.length >= 1);
  assert.strictEqual(r.segments[0].t0, 0);
  assert.ok(r.segments.at(-1).t1 >= 1000 && r.segments.at(-1).t1 <= 1100, `${r.segments.at(-1).t1}`);
  assert.strictEqual(seen.length, r.segments.length);
  assert.strictEqual(seen.at(-1).totalNNew, r.segments.length);
  assert.strictEqual(progress.at(-1), 100);
  await ctx.release();
});

test('samples in, several contexts at once, and the offset', async () => {
  const [a, b] = await Promise.all([
    initWhisper({ filePath: MODEL, useGpu: false }),
    initWhisper({ filePath: MODEL, useGpu: false }),
  ]);
  const samples = jfkSamples();
  const base64 = Buffer.from(samples.buffer).toString('base64');
  const [x, y] = await Promise.all([
    a.transcribeData(samples, { beamSize: 1, maxThreads: 1 }).promise,
    b.transcribeData(base64, { beamSize: 1, maxThreads: 1 }).promise,
  ]);
  assert.strictEqual(normalise(x.result), JFK);
  assert.strictEqual(x.result, y.result);
  // From 8 s on: "ask what you can do for your country", timed in the whole file.
  const tail = await a.transcribe(AUDIO, { offset: 8000, beamSize: 1 }).promise;
  assert.match(normalise(tail.result), /ask what you can do for your country/);
  assert.ok(tail.segments[0].t0 >= 800, `${tail.segments[0].t0}`);
  await releaseAllWhisper();
});

test('useGpu (the default) says where the model runs, and why not on a GPU', async () => {
  const ctx = await initWhisper({ filePath: MODEL });
  if (ctx.gpu) assert.strictEqual(ctx.reasonNoGPU, '');
  else assert.match(ctx.reasonNoGPU, /GPU/);
  await ctx.release();
});

test('stop aborts, and errors reject with the reason', async () => {
  const ctx = await initWhisper({ filePath: MODEL, useGpu: false });
  const { stop, promise } = ctx.transcribe(AUDIO, { beamSize: 1 });
  await stop();
  const r = await promise;
  assert.strictEqual(r.isAborted, true);
  assert.ok(r.segments.length <= 1);
  await assert.rejects(ctx.transcribe('/no/such.wav').promise, /no\/such\.wav/);
  await assert.rejects(ctx.transcribe(AUDIO, { language: 'de' }).promise, /English-only/);
  await assert.rejects(ctx.transcribe(AUDIO, { beamSize: 0 }).promise, /beam_size/);
  const b = await ctx.bench(1);
  assert.match(b.config, /^sotto /);
  assert.strictEqual(b.nThreads, 1);
  for (const k of ['encodeMs', 'decodeMs', 'batchMs', 'promptMs']) assert.ok(b[k] > 0 && b[k] < 60000, `${k} ${b[k]}`);
  assert.ok(b.batchMs >= b.decodeMs * 0.5, JSON.stringify(b));
  await ctx.release();
  assert.throws(() => ctx.transcribe(AUDIO), /released/);
  await assert.rejects(ctx.bench(), /released/);
  await assert.rejects(initWhisper({ filePath: '/no/such/model' }), /unknown model/);
});

/** A 16 kHz mono 16-bit WAV of float samples, as a data URL. */
function wavDataUrl(samples) {
  const b = Buffer.alloc(44 + samples.length * 2);
  b.write('RIFF', 0);
  b.writeUInt32LE(36 + samples.length * 2, 4);
  b.write('WAVEfmt ', 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20); // PCM
  b.writeUInt16LE(1, 22); // mono
  b.writeUInt32LE(16000, 24);
  b.writeUInt32LE(32000, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36);
  b.writeUInt32LE(samples.length * 2, 40);
  samples.forEach((v, i) => b.writeInt16LE(Math.max(-32768, Math.min(32767, Math.round(v * 32768))), 44 + 2 * i));
  return 'data:audio/wav;base64,' + b.toString('base64');
}

test('whisper.rn-style voice activity detection', async () => {
  const jfk = jfkSamples();
  const silence = (s) => new Float32Array(16000 * s);
  const gap = Float32Array.from([...silence(1), ...jfk, ...silence(3), ...jfk, ...silence(1)]);
  const vad = await initWhisperVad({ filePath: VAD, useGpu: false, nThreads: 1 });
  assert.strictEqual(vad.gpu, false);
  // faster-whisper's gaps: two stretches, t0/t1 in 10 ms units.
  const opts = { minSilenceDurationMs: 2000, speechPadMs: 400, minSpeechDurationMs: 0 };
  const fromData = await vad.detectSpeechData(gap, opts);
  assert.strictEqual(fromData.length, 2, JSON.stringify(fromData));
  assert.ok(fromData[0].t0 >= 40 && fromData[0].t0 < 100, JSON.stringify(fromData));
  assert.ok(fromData[1].t0 > 1450 && fromData[1].t0 < 1550, JSON.stringify(fromData));
  assert.ok(fromData[1].t1 <= 2700, JSON.stringify(fromData));
  // The same from a WAV data URL and from base64 float bytes; whisper.cpp's defaults
  // (100 ms of silence ends speech) split at the pauses inside each sentence too.
  const fromWav = await vad.detectSpeech(wavDataUrl(gap), opts);
  assert.strictEqual(fromWav.length, 2, JSON.stringify(fromWav));
  const base64 = Buffer.from(gap.buffer).toString('base64');
  const fine = await vad.detectSpeechData(base64);
  assert.ok(fine.length > 2, JSON.stringify(fine));
  assert.deepStrictEqual(await vad.detectSpeechData(silence(1)), []);
  await assert.rejects(vad.detectSpeechData(gap, { threshold: 2 }), /threshold/);
  await assert.rejects(vad.detectSpeech('/no/such.wav'), /no\/such\.wav/);
  await assert.rejects(vad.detectSpeechData(new ArrayBuffer(3)), /16-bit PCM/);
  await releaseAllWhisperVad();
  await assert.rejects(vad.detectSpeechData(gap), /released/);
  await assert.rejects(initWhisperVad({ filePath: '/no/such.onnx' }), /no\/such\.onnx/);
});

test('maxLen splits segments between words; maxContext is accepted', async () => {
  const ctx = await initWhisper({ filePath: MODEL, useGpu: false });
  const r = await ctx.transcribe(AUDIO, { beamSize: 1, maxThreads: 2, maxLen: 20, maxContext: 0 }).promise;
  const bounded = await ctx.transcribe(AUDIO, { beamSize: 1, maxThreads: 2, prompt: 'Zed.', maxContext: 8 }).promise;
  assert.strictEqual(normalise(bounded.result), JFK);
  assert.strictEqual(normalise(r.result), JFK);
  assert.ok(r.segments.length >= 5, JSON.stringify(r.segments));
  for (const s of r.segments) assert.ok(s.text.trim().length <= 20, JSON.stringify(s));
  await ctx.release();
});

test("audioCtx shortens the encoder's windows, as whisper.cpp's audio_ctx", async () => {
  const ctx = await initWhisper({ filePath: MODEL, useGpu: false });
  const r = await ctx.transcribe(AUDIO, { beamSize: 1, maxThreads: 2, audioCtx: 750 }).promise;
  assert.strictEqual(normalise(r.result), JFK);
  await assert.rejects(ctx.transcribe(AUDIO, { audioCtx: 1501 }).promise, /audio_ctx/);
  await ctx.release();
});

test('a WAV data URL transcribes as the file does', async () => {
  const ctx = await initWhisper({ filePath: MODEL, useGpu: false });
  const r = await ctx.transcribe(wavDataUrl(jfkSamples()), { beamSize: 1, maxThreads: 2 }).promise;
  assert.strictEqual(normalise(r.result), JFK);
  await assert.rejects(ctx.transcribe('data:audio/wav;base64,AAAA').promise, /data/);
  await ctx.release();
});
