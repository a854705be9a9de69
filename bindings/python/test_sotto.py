"""Tests of the Python binding against a real model and clip.

    SOTTO_TEST_MODEL=~/.cache/sotto/models/tiny.en SOTTO_TEST_AUDIO=samples/jfk.wav \
        SOTTO_TEST_VAD=~/.cache/sotto/models/silero-vad-v6/silero_vad_v6.onnx \
        python3 -m unittest -v test_sotto        # from bindings/python

crates/sotto-capi/tests/python.rs runs it as part of `cargo test`.
"""
import array
import os
import re
import threading
import unittest

import sotto

MODEL = os.environ.get("SOTTO_TEST_MODEL", "tiny.en")
AUDIO = os.environ.get("SOTTO_TEST_AUDIO", os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "samples", "jfk.wav"))
VAD = os.environ.get("SOTTO_TEST_VAD")  # None: the cached VAD, fetched on first use
JFK = ("and so my fellow americans ask not what your country can do for you "
       "ask what you can do for your country")


def normalise(s):
    return " ".join(re.sub(r"[^\w\s]", "", s).lower().split())


class TestSotto(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = sotto.Model(MODEL, device="cpu")
        cls.session = cls.model.session(threads=2)

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
            t = session.transcribe(self.gap, beam_size=1, vad_filter=self.vad)
            self.assertEqual(normalise(t.text), JFK + " " + JFK)
            self.assertAlmostEqual(t.duration, 27.0, delta=0.05)
            self.assertGreaterEqual(t.segments[0].start, 0.9)
            self.assertTrue(any(14.5 < s.start < 15.5 for s in t.segments), t.segments)
            with self.assertRaisesRegex(sotto.SottoError, "speech_pad_ms"):
                session.transcribe(self.gap, vad_filter=self.vad,
                                   vad_parameters={"speech_pad_ms": -1})


if __name__ == "__main__":
    unittest.main()
