'use strict';
// The Node binding against the real library and model:
//   SOTTO_TEST_MODEL=~/.cache/sotto/models/tiny.en SOTTO_LIB=../../target/release/libsotto_capi.so npm test
// crates/sotto-capi/tests/c_api.rs runs it as part of `cargo test`.
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const fs = require('node:fs');
const { initWhisper, releaseAllWhisper } = require('..');

const MODEL = process.env.SOTTO_TEST_MODEL || 'tiny.en';
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
  await ctx.release();
  assert.throws(() => ctx.transcribe(AUDIO), /released/);
  await assert.rejects(initWhisper({ filePath: '/no/such/model' }), /unknown model/);
});
