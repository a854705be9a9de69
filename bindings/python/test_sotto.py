"""Tests of the Python binding against a real model and clip.

    SOTTO_TEST_MODEL=~/.cache/sotto/models/tiny.en SOTTO_TEST_AUDIO=samples/jfk.wav \
        SOTTO_TEST_VAD=~/.cache/sotto/models/silero-vad-v6/silero_vad_v6.onnx \
        python3 -m unittest -v test_sotto        # from bindings/python

crates/sotto-capi/tests/python.rs runs it as part of `cargo test`.
"""
import array
import contextlib
import io
import os
import re
import tempfile
import threading
import unittest
import wave

import sotto

MODEL = os.environ.get("SOTTO_TEST_MODEL", "tiny.en")
AUDIO = os.environ.get("SOTTO_TEST_AUDIO", os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "samples", "jfk.wav"))
VAD = os.environ.get("SOTTO_TEST_VAD")  # None: the cached VAD, fetched on first use
# A multilingual model and the shared clips folder, for detection checked against
# faster-whisper's own numbers; the tests that need them skip, saying so, without.
BASE = os.environ.get("SOTTO_TEST_BASE")
CLIPS = os.environ.get("SOTTO_TEST_CLIPS")
JFK = ("and so my fellow americans ask not what your country can do for you "
       "ask what you can do for your country")


def normalise(s):
    return " ".join(re.sub(r"[^\w\s]", "", s).lower().split())


class TestSotto(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = sotto.Model(MODEL, device="cpu")
        cls.session = cls.model.session(threads=2)

    def test_says_where_the_model_runs(self):
        self.assertEqual((self.model.device, self.model.device_note), ("cpu", ""))
        auto = sotto.Model(MODEL)  # a GPU where the build and the machine have one
        self.assertIn(auto.device.split(":")[0], ("cpu", "cuda"))

    def test_transcribes_a_file_with_words(self):
        t = self.session.transcribe(AUDIO, word_timestamps=True)
        self.assertEqual(normalise(t.text), JFK)
        self.assertEqual(t.language, "en")
        self.assertAlmostEqual(t.duration, 11.0, delta=0.1)
        words = [w for s in t.segments for w in s.words]
        self.assertEqual(len(words), len(JFK.split()))
        for s in t.segments:
            self.assertLess(s.start, s.end)
        for w in words:
            self.assertLessEqual(w.start, w.end)
            self.assertTrue(0.0 <= w.probability <= 1.0)

    def test_samples_in_and_a_callback_that_stops(self):
        samples = sotto.load_audio(AUDIO)
        self.assertIsInstance(samples, array.array)
        self.assertEqual(len(samples), 176000)
        seen = []

        def first_only(index, start, end, text):
            seen.append((index, text))
            return False

        t = self.session.transcribe(samples, beam_size=1, on_segment=first_only)
        self.assertEqual(len(seen), 1)
        self.assertEqual([s.text for s in t.segments], [seen[0][1]])
        t = self.session.transcribe(list(samples), beam_size=1)
        self.assertEqual(normalise(t.text), JFK)

    def test_int16_pcm_is_scaled_and_other_integers_refused(self):
        floats = sotto.load_audio(AUDIO)
        pcm = array.array("h", (max(-32768, min(32767, round(v * 32768))) for v in floats))
        want = self.session.transcribe(floats, beam_size=1).text
        self.assertEqual(self.session.transcribe(pcm, beam_size=1).text, want)
        with self.assertRaisesRegex(TypeError, r"array\('i'\) samples: give floats"):
            self.session.transcribe(array.array("i", [0] * 16000))
        try:
            import numpy
        except ImportError:
            return
        self.assertEqual(self.session.transcribe(numpy.array(pcm, dtype=numpy.int16), beam_size=1).text, want)
        with self.assertRaisesRegex(TypeError, "uint8 samples"):
            self.session.transcribe(numpy.zeros(16000, dtype=numpy.uint8))

    def test_a_resampler_gives_live_audio_what_a_file_decodes_to(self):
        # jfk at 48 kHz (each step cut in three) as a WAV file, and the same PCM in pieces.
        x = sotto.load_audio(AUDIO)
        high = array.array("h", (
            max(-32768, min(32767, round((x[i // 3] + (x[min(i // 3 + 1, len(x) - 1)] - x[i // 3])
                                          * (i % 3) / 3) * 32767)))
            for i in range(3 * len(x))))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "jfk48.wav")
            with wave.open(path, "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(48000)
                w.writeframes(high.tobytes())
            want = sotto.load_audio(path)
        with sotto.Resampler(48000) as r:
            got = array.array("f")
            for at in range(0, len(high), 4410):
                got.extend(r.push(high[at:at + 4410]))
                self.assertLessEqual(min(at + 4410, len(high)) // 3 - len(got), 40)
            got.extend(r.finish())
            with self.assertRaisesRegex(sotto.SottoError, "finished"):
                r.push(high[:10])
        self.assertEqual(got, want)
        self.assertEqual(len(got), len(x))
        with self.assertRaisesRegex(sotto.SottoError, "rate"):
            sotto.Resampler(10)

    def test_suppress_regex_changes_what_comes_out(self):
        # whisper.cpp's suppress_regex: no token holding "country".
        plain = self.session.transcribe(AUDIO, beam_size=1).text
        other = self.session.transcribe(AUDIO, beam_size=1, suppress_regex=".*[Cc]ountry.*").text
        self.assertNotEqual(plain, other)
        with self.assertRaisesRegex(sotto.SottoError, "suppress_regex"):
            self.session.transcribe(AUDIO, suppress_regex="(")

    def test_a_grammar_steers_the_text(self):
        # whisper.cpp's grammar sampling: lower case only; a grammar that does not parse.
        text = self.session.transcribe(AUDIO, beam_size=1, grammar="root ::= [^A-Z]*").text
        self.assertIn("fellow americans", text)
        self.assertEqual(text, text.lower())
        with self.assertRaisesRegex(sotto.SottoError, "never defined"):
            self.session.transcribe(AUDIO, grammar="root ::= colour")

    def test_max_context_and_seed(self):
        # whisper.cpp's max_context bounds the earlier text a prompt carries; the seed picks
        # what the sampler draws (temperature 1, no fallback).
        text = self.session.transcribe(AUDIO, beam_size=1, initial_prompt="Zed.",
                                       max_context=0).text
        self.assertIn("fellow Americans", text)
        with self.assertRaisesRegex(sotto.SottoError, "max_context"):
            self.session.transcribe(AUDIO, max_context=-3)
        with self.assertRaisesRegex(sotto.SottoError, "entropy_threshold"):
            self.session.transcribe(AUDIO, entropy_threshold=float("inf"))
        draw = lambda seed: self.session.transcribe(  # noqa: E731
            AUDIO, beam_size=1, temperature=1.0, temperature_increment=0.0, seed=seed).text
        self.assertEqual(draw(7), draw(7))
        self.assertNotEqual(draw(7), draw(8))

    def test_audio_ctx(self):
        # whisper.cpp's audio_ctx: 15 s windows hear all of jfk's 11 s.
        text = self.session.transcribe(AUDIO, beam_size=1, audio_ctx=750).text
        self.assertIn("fellow Americans", text)
        for bad in (-1, 1501):
            with self.assertRaisesRegex(sotto.SottoError, "audio_ctx"):
                self.session.transcribe(AUDIO, audio_ctx=bad)

    def test_chunk_length(self):
        # faster-whisper's chunk_length: 5 s windows; each segment within its window.
        model = sotto.WhisperModel(MODEL, device="cpu", cpu_threads=2)
        segments, info = model.transcribe(AUDIO, beam_size=1, chunk_length=5)
        segments = list(segments)
        self.assertEqual(info.transcription_options["chunk_length"], 5)
        self.assertIn("fellow Americans", "".join(s.text for s in segments))
        self.assertGreaterEqual(len(segments), 3)
        with self.assertRaisesRegex(sotto.SottoError, "chunk_length"):
            list(model.transcribe(AUDIO, chunk_length=31)[0])

    def test_errors_raise_with_the_reason(self):
        with self.assertRaisesRegex(sotto.SottoError, "unknown model"):
            sotto.Model("/no/such/model")
        with self.assertRaisesRegex(sotto.SottoError, "beam_size"):
            self.session.transcribe(AUDIO, beam_size=0)
        with self.assertRaisesRegex(sotto.SottoError, "English-only"):
            self.session.detect_language(AUDIO)
        with self.assertRaisesRegex(sotto.SottoError, "no samples"):
            self.session.transcribe(array.array("f"))
        with self.assertRaises(sotto.SottoError):
            self.session.transcribe("/no/such.wav")

    def test_callback_exceptions_propagate(self):
        def boom(*_):
            raise ValueError("from the callback")

        with self.assertRaisesRegex(ValueError, "from the callback"):
            self.session.transcribe(AUDIO, beam_size=1, on_segment=boom)

    def test_sessions_on_threads_share_the_model(self):
        results = []

        def run():
            with self.model.session(threads=1) as s:
                results.append(normalise(s.transcribe(AUDIO, beam_size=1).text))

        threads = [threading.Thread(target=run) for _ in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(results, [JFK, JFK])

    def test_bench(self):
        b = self.session.bench(runs=1)
        self.assertTrue(b["system"].startswith("sotto "), b)
        self.assertEqual(b["threads"], 2)
        for k in ("encode_ms", "decode_ms", "batch_ms", "prompt_ms"):
            self.assertTrue(0 < b[k] < 60000, b)
        with self.assertRaisesRegex(sotto.SottoError, "runs"):
            self.session.bench(runs=0)

    def test_closed_handles_are_errors(self):
        s = self.model.session(threads=1)
        s.close()
        with self.assertRaisesRegex(sotto.SottoError, "closed"):
            s.transcribe(AUDIO)


    def test_audio_decodes_from_bytes(self):
        with open(AUDIO, "rb") as f:
            data = f.read()
        self.assertEqual(sotto.decode_audio(data), sotto.load_audio(AUDIO))
        with self.assertRaises(sotto.SottoError):
            sotto.decode_audio(data[:10])

    def test_audio_decodes_as_faster_whispers_decode_audio(self):
        # A path, a binary file object or bytes; the channels apart (mono: in both).
        want = sotto.load_audio(AUDIO)
        with open(AUDIO, "rb") as f:
            self.assertEqual(sotto.decode_audio(f), want)
            f.seek(0)
            data = f.read()
        self.assertEqual(sotto.decode_audio(AUDIO, sampling_rate=16000), want)
        self.assertEqual(sotto.decode_audio(memoryview(data)), want)
        self.assertEqual(sotto.decode_audio(io.BytesIO(data), split_stereo=True), (want, want))
        self.assertEqual(sotto.decode_audio(AUDIO, split_stereo=True), (want, want))
        with self.assertRaisesRegex(ValueError, "16000"):
            sotto.decode_audio(AUDIO, sampling_rate=8000)
        # A file object is audio to transcribe too, as faster-whisper's BinaryIO.
        t = self.session.transcribe(io.BytesIO(data), beam_size=1)
        self.assertEqual(normalise(t.text), JFK)

    def test_faster_whispers_helpers(self):
        names = sotto.available_models()
        self.assertIn("tiny.en", names)
        self.assertIn("large-v3", names)
        self.assertEqual(sotto.format_timestamp(3725.5), "01:02:05.500")
        self.assertEqual(sotto.format_timestamp(5.25, True, ","), "00:00:05,250")
        self.assertEqual(sotto.format_timestamp(59.9996), "01:00.000")
        with self.assertRaises(ValueError):
            sotto.format_timestamp(-1)
        # A path stays as it is; a copy goes to output_dir; nothing is fetched when local.
        self.assertEqual(sotto.download_model(MODEL, local_files_only=True), MODEL)
        import tempfile
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as empty:
            self.assertEqual(sotto.download_model(MODEL, output_dir=out), out)
            self.assertEqual(sorted(os.listdir(out)), sorted(os.listdir(MODEL)))
            with self.assertRaisesRegex(sotto.SottoError, "local only"):
                sotto.download_model("tiny.en", cache_dir=empty, local_files_only=True)
            with self.assertRaisesRegex(sotto.SottoError, "local only"):
                sotto.WhisperModel("tiny.en", download_root=empty, local_files_only=True)
            self.assertEqual(os.listdir(empty), [])


class TestWhisperModel(unittest.TestCase):
    """faster-whisper's interface."""

    @classmethod
    def setUpClass(cls):
        cls.model = sotto.WhisperModel(MODEL, device="cpu", cpu_threads=2, num_workers=2)

    def test_segments_and_info_as_faster_whisper_gives_them(self):
        segments, info = self.model.transcribe(AUDIO, beam_size=5, word_timestamps=True)
        segments = list(segments)
        self.assertEqual(normalise("".join(s.text for s in segments)), JFK)
        self.assertEqual((info.language, info.language_probability), ("en", 1.0))
        self.assertIsNone(info.all_language_probs)  # English-only: nothing detected
        self.assertEqual(self.model.supported_languages, ["en"])
        self.assertAlmostEqual(info.duration, 11.0, delta=0.1)
        self.assertEqual(info.duration_after_vad, info.duration)
        self.assertEqual([s.id for s in segments], list(range(1, len(segments) + 1)))
        for s in segments:
            self.assertGreater(len(s.tokens), 2)
            self.assertTrue(all(0 <= t < 51864 for t in s.tokens), s.tokens)
            self.assertLess(s.avg_logprob, 0.0)
            self.assertGreater(s.compression_ratio, 0.0)
            self.assertEqual(s.temperature, 0.0)
            self.assertTrue(s.words)
        with self.assertWarns(DeprecationWarning):
            self.assertEqual(segments[0].words[0]._asdict()["word"], segments[0].words[0].word)
        # Greedy, one temperature, no thresholds: the same words.
        segments, _ = self.model.transcribe(
            sotto.load_audio(AUDIO), beam_size=1, temperature=0.0,
            compression_ratio_threshold=None, log_prob_threshold=None,
            no_speech_threshold=None, condition_on_previous_text=False, patience=2.0)
        segments = list(segments)
        self.assertEqual(normalise("".join(s.text for s in segments)), JFK)
        # Without word timestamps no words, None as faster-whisper's.
        self.assertTrue(all(s.words is None for s in segments))
        with self.assertWarns(DeprecationWarning):
            self.assertIsNone(segments[0]._asdict()["words"])

    def test_compute_type_picks_the_encoder_precision(self):
        with self.assertRaisesRegex(ValueError, "compute_type 'float64'"):
            sotto.WhisperModel(MODEL, device="cpu", compute_type="float64")
        # int8 on the CPU quantizes the decoder too, as CTranslate2's int8: the same words.
        int8 = sotto.WhisperModel(MODEL, device="cpu", cpu_threads=2, compute_type="int8")
        segments, _ = int8.transcribe(AUDIO, beam_size=1)
        self.assertEqual(normalise("".join(s.text for s in segments)), JFK)
        plain = sotto.Model(MODEL, device="cpu", quantize_decoder=True, exact_logits=True)
        self.assertEqual(normalise(plain.session(2).transcribe(AUDIO, beam_size=1).text), JFK)
        with self.assertRaisesRegex(sotto.SottoError, "expected auto, int8"):
            sotto.Model(MODEL, device="cpu", encoder_precision="int4")
        f32 = sotto.WhisperModel(MODEL, device="cpu", cpu_threads=2, compute_type="float32")
        segments, _ = f32.transcribe(AUDIO, beam_size=1)
        self.assertEqual(normalise("".join(s.text for s in segments)), JFK)

    def test_speech_only_reports_the_duration_after_vad(self):
        jfk = sotto.load_audio(AUDIO)
        audio = array.array("f", bytes(4 * 16000 * 5)) + jfk
        segments, info = self.model.transcribe(audio, beam_size=1, vad_filter=True,
                                               vad_parameters=dict(min_silence_duration_ms=500))
        self.assertEqual(normalise("".join(s.text for s in segments)), JFK)
        self.assertAlmostEqual(info.duration, 16.0, delta=0.1)
        self.assertLess(info.duration_after_vad, 12.0)
        self.assertGreaterEqual(next(iter(self.model.transcribe(
            audio, beam_size=1, vad_filter=True)[0])).start, 4.5)

    def test_segments_come_as_they_are_read_and_closing_stops(self):
        segments, info = self.model.transcribe(AUDIO, beam_size=1)
        self.assertEqual(info.language, "en")  # known before any segment is read
        first = next(segments)
        self.assertEqual(first.id, 1)
        self.assertTrue(first.text.strip().lower().startswith("and so"), first)
        segments.close()  # stops the transcription; its session goes back to the pool
        for _ in range(3):  # more runs than the two sessions: each came back
            segs, _ = self.model.transcribe(AUDIO, beam_size=1)
            self.assertEqual(normalise("".join(s.text for s in segs)), JFK)
        # An error in the transcription surfaces while reading.
        segs, _ = self.model.transcribe(AUDIO, best_of=0, temperature=0.0)
        with self.assertRaisesRegex(sotto.SottoError, "best_of"):
            list(segs)

    def test_batched_pipeline_decodes_the_chunks_together(self):
        jfk = sotto.load_audio(AUDIO)
        silence = lambda s: array.array("f", bytes(4 * 16000 * s))  # noqa: E731
        gap = silence(1) + jfk + silence(3) + jfk + silence(1)
        batched = sotto.BatchedInferencePipeline(self.model)
        segments, info = batched.transcribe(gap, beam_size=1, batch_size=4,
                                            condition_on_previous_text=False)
        segments = list(segments)
        # faster-whisper's batched mode: no timestamps, so one segment per chunk.
        self.assertEqual(len(segments), 1, segments)
        self.assertEqual(normalise(segments[0].text), f"{JFK} {JFK}")
        self.assertAlmostEqual(segments[0].start, 0.94, delta=0.05)
        self.assertAlmostEqual(info.duration, 27.0, delta=0.1)
        self.assertLess(info.duration_after_vad, 26.0)
        self.assertEqual(info.transcription_options["batch_size"], 4)
        # With timestamps, and words; times stay the audio's.
        segments, _ = batched.transcribe(gap, beam_size=5, without_timestamps=False,
                                         word_timestamps=True)
        starts = [w.start for s in segments for w in s.words if w.word.strip() == "And"]
        self.assertEqual(len(starts), 2, starts)
        self.assertGreater(starts[1], 14.9)
        # Clips, as faster-whisper's: the second jfk only, without the VAD.
        for segments, info in (
                batched.transcribe(gap, beam_size=1, vad_filter=False,
                                   clip_timestamps=[{"start": 14.0, "end": 27.0}]),
                self.model.transcribe(gap, beam_size=1, clip_timestamps="14",
                                      vad_filter=True)):
            segments = list(segments)
            self.assertEqual(normalise("".join(s.text for s in segments)), JFK)
            self.assertGreaterEqual(segments[0].start, 14.0)
            self.assertAlmostEqual(info.duration_after_vad, 13.0, delta=0.1)
        with self.assertRaisesRegex(TypeError, "vad_filter"):
            batched.transcribe(gap, vad_filter=False)
        with self.assertRaisesRegex(TypeError, "flash"):
            batched.transcribe(gap, flash=True)
        with self.assertRaisesRegex(sotto.SottoError, "temperature"):
            list(batched.transcribe(gap, temperature=0.5)[0])

    def test_repetition_options_reach_the_decoder(self):
        # No token twice in the window: "Ask, What You Can Do For Your Country" in capitals.
        segments, _ = self.model.transcribe(AUDIO, beam_size=1, no_repeat_ngram_size=1)
        tokens = [t for s in segments for t in s.tokens]
        self.assertEqual(len(tokens), len(set(tokens)), tokens)
        plain = [t for s in self.model.transcribe(AUDIO, beam_size=1)[0] for t in s.tokens]
        self.assertGreater(len(plain), len(set(plain)))
        with self.assertRaisesRegex(sotto.SottoError, "repetition_penalty"):
            list(self.model.transcribe(AUDIO, repetition_penalty=0)[0])


    def test_faster_whisper_decoding_options_reach_the_decoder(self):
        run = lambda **o: list(self.model.transcribe(AUDIO, beam_size=1, **o)[0])  # noqa: E731
        self.assertTrue(run(prefix="And so my")[0].text.startswith(" And so my"))
        self.assertEqual(run(max_initial_timestamp=0.0)[0].start, 0.0)
        self.assertEqual(normalise("".join(
            s.text for s in run(suppress_tokens=[], suppress_blank=False,
                                prompt_reset_on_temperature=0.1))), JFK)
        self.assertLessEqual(len(run(max_new_tokens=3)[0].tokens), 4)
        # Words are timed for the threshold, and reported only when asked, as faster-whisper.
        timed = run(hallucination_silence_threshold=2.0)
        self.assertEqual(normalise("".join(s.text for s in timed)), JFK)
        self.assertTrue(all(s.words is None for s in timed))
        # Beam 5 reads "And so, my ...": the comma a word of its own when not appended.
        apart = [w.word.strip() for s in self.model.transcribe(
            AUDIO, word_timestamps=True, append_punctuations="")[0] for w in s.words]
        self.assertIn(",", apart)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            run(log_progress=True)
        self.assertIn("100.0% of 11.0 s", err.getvalue())
        with self.assertRaisesRegex(sotto.SottoError, "max_initial_timestamp"):
            run(max_initial_timestamp=-1.0)

    def test_what_sotto_does_not_take_is_refused(self):
        with self.assertRaisesRegex(TypeError, "made_up_option"):
            self.model.transcribe(AUDIO, made_up_option=0.4)
        with self.assertRaisesRegex(ValueError, "temperature"):
            self.model.transcribe(AUDIO, temperature=[0.0, 0.5, 0.7])
        with self.assertRaisesRegex(sotto.SottoError, "patience"):
            list(self.model.transcribe(AUDIO, patience=0)[0])
        with self.assertRaisesRegex(TypeError, "flash_attention"):
            sotto.WhisperModel(MODEL, flash_attention=True)


@unittest.skipUnless(BASE and CLIPS, "needs SOTTO_TEST_BASE (a multilingual model) and "
                     "SOTTO_TEST_CLIPS (the shared clips folder)")
class TestMultilingual(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The f32 reference encoder, as the goldens were made (faster-whisper's float32).
        cls.model = sotto.WhisperModel(BASE, device="cpu", cpu_threads=2,
                                       compute_type="float32")

    def clip(self, name, seconds):
        a = sotto.load_audio(os.path.join(CLIPS, "real", name))
        return a + array.array("f", bytes(4 * max(0, round(seconds * 16000) - len(a))))

    def test_detection_reads_the_windows_faster_whisper_transcribe_reads(self):
        # tests/golden/fw_options.json: faster-whisper 1.2.1 on Spanish then French, 20 s
        # windows, neither likelier than the threshold: Spanish by the first vote.
        audio = self.clip("cheetah_es.wav", 20) + self.clip("cheetah_fr.wav", 20)
        opts = dict(chunk_length=20, language_detection_threshold=1.01,
                    language_detection_segments=2, beam_size=1)
        segments, info = self.model.transcribe(audio, **opts)
        self.assertEqual(info.language, "es")
        self.assertAlmostEqual(info.language_probability, 0.4381, delta=2e-3)
        # The last window's list, as faster-whisper's (its own numbers, 1.2.1, float32).
        self.assert_probs(info.all_language_probs, [("fr", 0.9941), ("nn", 0.0018)])
        self.assertEqual(len(info.all_language_probs), 99)  # base has no "yue"
        first = next(segments)
        segments.close()
        self.assertEqual(first.tokens[0], 50364)  # the first timestamp, after the prompt
        session = self.model.model.session(threads=2)
        self.assertEqual(session.transcribe_language(audio, chunk_length=20,
                                                     language_detection_threshold=1.01,
                                                     language_detection_segments=2)[0], "es")
        # With no options, the language transcribing picks.
        self.assertEqual(session.transcribe_language(audio)[0],
                         session.transcribe(audio, beam_size=1).language)

    def assert_probs(self, got, want):
        self.assertEqual([c for c, _ in got[:len(want)]], [c for c, _ in want])
        for (_, p), (_, q) in zip(got, want):
            self.assertAlmostEqual(p, q, delta=2e-3)

    def test_detect_language_as_faster_whisper(self):
        # faster-whisper 1.2.1's WhisperModel.detect_language (float32) on the same audio:
        # (language, probability, all_language_probs).
        de = os.path.join(CLIPS, "real", "cheetah_de.wav")
        with open(de, "rb") as f:
            language, p, probs = self.model.detect_language(f)
        self.assertEqual(language, "de")
        self.assertAlmostEqual(p, 0.9989, delta=2e-3)
        self.assert_probs(probs, [("de", 0.9989), ("nn", 0.0006)])
        self.assertAlmostEqual(sum(q for _, q in probs), 1.0, delta=1e-4)
        audio = self.clip("cheetah_es.wav", 20) + self.clip("cheetah_fr.wav", 20)
        # Two 30 s windows, neither above the threshold: French by the first vote, the
        # list the second window's.
        language, p, probs = self.model.detect_language(
            audio, language_detection_segments=2, language_detection_threshold=1.01)
        self.assertEqual(language, "fr")
        self.assertAlmostEqual(p, 0.99, delta=2e-3)
        self.assert_probs(probs, [("en", 0.3884), ("cy", 0.2373), ("nn", 0.1386)])
        # The speech only, joined.
        language, p, probs = self.model.detect_language(audio, vad_filter=True)
        self.assertEqual(language, "fr")
        self.assertAlmostEqual(p, 0.9549, delta=2e-3)
        self.assert_probs(probs, [("fr", 0.9549), ("en", 0.0073), ("br", 0.0064)])
        self.assertEqual(len(self.model.supported_languages), 100)
        with self.assertRaisesRegex(TypeError, "features"):
            self.model.detect_language(features=[[0.0]])

    def test_info_names_the_language_the_transcription_detects(self):
        # Each mode's info.language_probability is the transcript's own: the VAD's speech
        # one window at a time, and the batched pipeline's chunks joined.
        audio = self.clip("cheetah_de.wav", 0) + self.clip("cheetah_fr.wav", 0)
        session = self.model.model.session(threads=2)
        for batch in (0, 4):
            vad = dict(min_silence_duration_ms=160) if batch else None
            t = session.transcribe(audio, beam_size=1, vad_filter=True, vad_parameters=vad,
                                   batch_size=batch, temperature=0.0,
                                   without_timestamps=bool(batch))
            if batch:
                _, info = sotto.BatchedInferencePipeline(self.model).transcribe(
                    audio, beam_size=1, batch_size=batch)
            else:
                _, info = self.model.transcribe(audio, beam_size=1, vad_filter=True)
            self.assertEqual(info.language, t.language, batch)
            self.assertAlmostEqual(info.language_probability, t.language_probability,
                                   delta=1e-6, msg=batch)


class TestVad(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.vad = sotto.Vad(VAD, threads=1)
        jfk = sotto.load_audio(AUDIO)
        silence = lambda s: array.array("f", bytes(4 * 16000 * s))  # noqa: E731
        cls.gap = silence(1) + jfk + silence(3) + jfk + silence(1)

    def test_finds_the_two_stretches_of_speech(self):
        stretches = self.vad.speech(self.gap)
        self.assertEqual(len(stretches), 2, stretches)
        (a, b), (c, d) = stretches
        self.assertTrue(0.4 <= a < 1.0 and a < b < c < d <= 27.0, stretches)
        self.assertTrue(14.5 < c < 15.5, stretches)
        # A short silence no longer splits them; options as faster-whisper names them.
        self.assertEqual(len(self.vad.speech(self.gap, min_silence_duration_ms=5000)), 1)
        self.assertEqual(len(self.vad.speech(self.gap, {"min_silence_duration_ms": 5000})), 1)
        self.assertEqual(self.vad.speech(array.array("f", bytes(4 * 16000))), [])
        with self.assertRaisesRegex(sotto.SottoError, "threshold"):
            self.vad.speech(self.gap, threshold=2.0)
        with self.assertRaises(TypeError):
            self.vad.speech(self.gap, no_such_option=1)

    def test_transcribes_speech_only_with_the_audios_times(self):
        with sotto.Model(MODEL, device="cpu") as model, model.session(threads=2) as session:
            # Temperature 0 only: JFK twice passes the compression threshold, and the
            # fallback's samples (so their segments) differ with each CPU's arithmetic.
            t = session.transcribe(self.gap, beam_size=1, temperature_increment=0,
                                   vad_filter=self.vad)
            self.assertEqual(normalise(t.text), JFK + " " + JFK)
            self.assertAlmostEqual(t.duration, 27.0, delta=0.05)
            self.assertGreaterEqual(t.segments[0].start, 0.9)
            # The audio's times: the last segment ends past the ~23 s of joined speech.
            self.assertTrue(24.5 < t.segments[-1].end < 28.0, t.segments)
            with self.assertRaisesRegex(sotto.SottoError, "speech_pad_ms"):
                session.transcribe(self.gap, vad_filter=self.vad,
                                   vad_parameters={"speech_pad_ms": -1})


if __name__ == "__main__":
    unittest.main()
