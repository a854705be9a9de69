"""sotto for Python: Whisper speech-to-text through sotto's C library (ctypes; no compiler).

    import sotto
    model = sotto.Model("tiny.en")                 # a name (fetched on first use) or a path
    session = model.session(threads=2)             # one per thread that transcribes
    t = session.transcribe("talk.mp3", language="auto", word_timestamps=True)
    print(t.language, t.text)
    for s in t.segments:
        print(f"[{s.start:.2f} -> {s.end:.2f}] {s.text}", [w.word for w in s.words])
    t = session.transcribe("meeting.wav", vad_filter=True)   # speech only (Silero VAD)
    print(sotto.Vad().speech("meeting.wav"))                 # [(start, end), ...] in seconds

`transcribe` takes a path, a binary file object (read whole), or 16 kHz mono samples (a
NumPy float32 array, an `array.array('f')` or any sequence of floats). The library is `$SOTTO_LIB`, else
the one installed with this package (`pip install bindings/python` builds it), else the
repository's `target/release` one.
"""

import array
import ctypes
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, List, Optional

__all__ = ["Model", "Session", "Transcript", "Segment", "Word", "Vad", "VadOptions",
           "WhisperModel", "BatchedInferencePipeline", "TranscriptionInfo", "SottoError",
           "load_audio", "decode_audio", "Resampler", "available_models", "download_model",
           "format_timestamp"]


class SottoError(RuntimeError):
    """A call the library refused: the message says why."""


_SEGMENT_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_double, ctypes.c_char_p, ctypes.c_void_p
)


_TRANSCRIPT_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class _VadParams(ctypes.Structure):
    # sotto_vad_params of sotto.h, field for field.
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("threshold", ctypes.c_float),
        ("neg_threshold", ctypes.c_float),
        ("min_speech_duration_ms", ctypes.c_int),
        ("max_speech_duration_s", ctypes.c_float),
        ("min_silence_duration_ms", ctypes.c_int),
        ("speech_pad_ms", ctypes.c_int),
    ]


class _Bench(ctypes.Structure):
    # sotto_bench_result of sotto.h, field for field.
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("n_threads", ctypes.c_int),
        ("encode_ms", ctypes.c_double),
        ("decode_ms", ctypes.c_double),
        ("batch_ms", ctypes.c_double),
        ("prompt_ms", ctypes.c_double),
    ]


class _Params(ctypes.Structure):
    # sotto_params of sotto.h, field for field.
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("language", ctypes.c_char_p),
        ("translate", ctypes.c_int),
        ("beam_size", ctypes.c_int),
        ("best_of", ctypes.c_int),
        ("temperature", ctypes.c_float),
        ("temperature_inc", ctypes.c_float),
        ("no_timestamps", ctypes.c_int),
        ("word_timestamps", ctypes.c_int),
        ("initial_prompt", ctypes.c_char_p),
        ("on_segment", _SEGMENT_CALLBACK),
        ("user_data", ctypes.c_void_p),
        ("vad", ctypes.c_void_p),
        ("vad_params", _VadParams),
        ("condition_on_previous_text", ctypes.c_int),
        ("patience", ctypes.c_float),
        ("length_penalty", ctypes.c_float),
        ("compression_ratio_threshold", ctypes.c_float),
        ("log_prob_threshold", ctypes.c_float),
        ("no_speech_threshold", ctypes.c_float),
        ("hotwords", ctypes.c_char_p),
        ("max_len", ctypes.c_int),
        ("on_segment_transcript", _TRANSCRIPT_CALLBACK),
        ("batch_size", ctypes.c_int),
        ("clip_timestamps", ctypes.POINTER(ctypes.c_float)),
        ("n_clip_timestamps", ctypes.c_int),
        ("repetition_penalty", ctypes.c_float),
        ("no_repeat_ngram_size", ctypes.c_int),
        ("multilingual", ctypes.c_int),
        ("language_detection_threshold", ctypes.c_float),
        ("language_detection_segments", ctypes.c_int),
        ("suppress_regex", ctypes.c_char_p),
        ("grammar", ctypes.c_char_p),
        ("grammar_rule", ctypes.c_char_p),
        ("grammar_penalty", ctypes.c_float),
        ("max_context", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("entropy_threshold", ctypes.c_float),
        ("audio_ctx", ctypes.c_int),
        ("chunk_length", ctypes.c_int),
        ("prompt_reset_on_temperature", ctypes.c_float),
        ("suppress_blank", ctypes.c_int),
        ("max_initial_timestamp", ctypes.c_float),
        ("max_new_tokens", ctypes.c_int),
        ("hallucination_silence_threshold", ctypes.c_float),
        ("prefix", ctypes.c_char_p),
        ("prepend_punctuations", ctypes.c_char_p),
        ("append_punctuations", ctypes.c_char_p),
        ("suppress_tokens", ctypes.POINTER(ctypes.c_int)),
        ("n_suppress_tokens", ctypes.c_int),
    ]


def _library_path():
    if os.environ.get("SOTTO_LIB"):
        return os.environ["SOTTO_LIB"]
    name = {"darwin": "libsotto_capi.dylib", "win32": "sotto_capi.dll"}.get(
        sys.platform, "libsotto_capi.so"
    )
    here = os.path.dirname(os.path.abspath(__file__))
    # Installed (`pip install bindings/python`): the library the wheel carries; in a
    # checkout: the repository's build.
    for candidate in (os.path.join(here, name),
                      os.path.join(here, "..", "..", "..", "target", "release", name)):
        if os.path.exists(candidate):
            return candidate
    raise SottoError(f"{name} not found: install the package (`pip install bindings/python`), "
                     "build the library (`cargo build --release`), or set SOTTO_LIB")


def _load():
    lib = ctypes.CDLL(_library_path())
    P, c = ctypes.c_void_p, ctypes
    sigs = {
        "sotto_version": ([], c.c_char_p),
        "sotto_last_error": ([], c.c_char_p),
        "sotto_default_params": ([], _Params),
        "sotto_model_load": ([c.c_char_p, c.c_char_p], P),
        "sotto_model_load_ex": ([c.c_char_p, c.c_char_p, c.c_char_p], P),
        "sotto_model_load_with": ([c.c_char_p, c.c_char_p, c.c_char_p, c.c_uint], P),
        "sotto_model_free": ([P], None),
        "sotto_model_is_multilingual": ([P], c.c_int),
        "sotto_model_device": ([P], c.c_char_p),
        "sotto_model_device_note": ([P], c.c_char_p),
        "sotto_session_new": ([P, c.c_int], P),
        "sotto_session_free": ([P], None),
        "sotto_audio_load": ([c.c_char_p, c.POINTER(c.c_size_t)], c.POINTER(c.c_float)),
        "sotto_audio_decode": ([c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)],
                               c.POINTER(c.c_float)),
        "sotto_audio_free": ([c.POINTER(c.c_float), c.c_size_t], None),
        "sotto_resampler_new": ([c.c_int], P),
        "sotto_resampler_push": ([P, c.POINTER(c.c_float), c.c_size_t, c.POINTER(c.c_size_t)],
                                 c.POINTER(c.c_float)),
        "sotto_resampler_finish": ([P, c.POINTER(c.c_size_t)], c.POINTER(c.c_float)),
        "sotto_resampler_free": ([P], None),
        "sotto_vad_default_params": ([], _VadParams),
        "sotto_vad_load": ([c.c_char_p, c.c_int], P),
        "sotto_vad_free": ([P], None),
        "sotto_vad_detect": ([P, c.POINTER(c.c_float), c.c_size_t, c.POINTER(_VadParams)], P),
        "sotto_speech_n": ([P], c.c_int),
        "sotto_speech_start": ([P, c.c_int], c.c_double),
        "sotto_speech_end": ([P, c.c_int], c.c_double),
        "sotto_speech_free": ([P], None),
        "sotto_transcribe": ([P, c.POINTER(c.c_float), c.c_size_t, c.POINTER(_Params)], P),
        "sotto_transcribe_file": ([P, c.c_char_p, c.POINTER(_Params)], P),
        "sotto_transcribe_speech": ([P, c.POINTER(c.c_float), c.c_size_t,
                                     c.POINTER(c.c_double), c.c_size_t, c.POINTER(_Params)], P),
        "sotto_detect_language": ([P, c.POINTER(c.c_float), c.c_size_t, c.POINTER(c.c_float)],
                                  c.c_char_p),
        "sotto_detect_language_ex": ([P, c.POINTER(c.c_float), c.c_size_t, c.c_int, c.c_float,
                                      c.POINTER(c.c_float)], c.c_char_p),
        "sotto_detect_language_probs": ([P, c.POINTER(c.c_float), c.c_size_t, c.c_int,
                                         c.c_float, c.POINTER(c.c_float),
                                         c.POINTER(c.c_float)], c.c_char_p),
        "sotto_transcribe_language": ([P, c.POINTER(c.c_float), c.c_size_t, c.POINTER(_Params),
                                       c.POINTER(c.c_float), c.POINTER(c.c_float)],
                                      c.c_char_p),
        "sotto_transcribe_speech_language": ([P, c.POINTER(c.c_float), c.c_size_t,
                                              c.POINTER(c.c_double), c.c_size_t,
                                              c.POINTER(_Params), c.POINTER(c.c_float),
                                              c.POINTER(c.c_float)], c.c_char_p),
        "sotto_lang_max_id": ([], c.c_int),
        "sotto_lang_str": ([c.c_int], c.c_char_p),
        "sotto_lang_id": ([c.c_char_p], c.c_int),
        "sotto_known_model": ([c.c_int], c.c_char_p),
        "sotto_model_path": ([c.c_char_p, c.c_char_p, c.c_int, c.c_char_p, c.c_size_t],
                             c.c_int),
        "sotto_audio_decode_stereo": ([c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)],
                                      c.POINTER(c.c_float)),
        "sotto_bench": ([P, c.c_int, c.POINTER(_Bench)], c.c_int),
        "sotto_system_info": ([], c.c_char_p),
        "sotto_transcript_free": ([P], None),
        "sotto_transcript_text": ([P], c.c_char_p),
        "sotto_transcript_language": ([P], c.c_char_p),
        "sotto_transcript_duration": ([P], c.c_double),
        "sotto_transcript_n_segments": ([P], c.c_int),
        "sotto_transcript_segment_text": ([P, c.c_int], c.c_char_p),
        "sotto_transcript_segment_start": ([P, c.c_int], c.c_double),
        "sotto_transcript_segment_end": ([P, c.c_int], c.c_double),
        "sotto_transcript_segment_no_speech_prob": ([P, c.c_int], c.c_double),
        "sotto_transcript_language_probability": ([P], c.c_double),
        "sotto_transcript_segment_avg_logprob": ([P, c.c_int], c.c_double),
        "sotto_transcript_segment_compression_ratio": ([P, c.c_int], c.c_double),
        "sotto_transcript_segment_temperature": ([P, c.c_int], c.c_double),
        "sotto_transcript_segment_seek": ([P, c.c_int], c.c_int),
        "sotto_transcript_segment_n_tokens": ([P, c.c_int], c.c_int),
        "sotto_transcript_segment_token": ([P, c.c_int, c.c_int], c.c_int),
        "sotto_transcript_n_words": ([P, c.c_int], c.c_int),
        "sotto_transcript_word_text": ([P, c.c_int, c.c_int], c.c_char_p),
        "sotto_transcript_word_start": ([P, c.c_int, c.c_int], c.c_double),
        "sotto_transcript_word_end": ([P, c.c_int, c.c_int], c.c_double),
        "sotto_transcript_word_probability": ([P, c.c_int, c.c_int], c.c_double),
    }
    for name, (args, ret) in sigs.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, ret
    size = lib.sotto_default_params().struct_size
    if size != ctypes.sizeof(_Params):
        raise SottoError(f"{_library_path()} has sotto_params of {size} bytes, this module "
                         f"{ctypes.sizeof(_Params)}: they come from different versions")
    return lib


_lib = _load()
__version__ = _lib.sotto_version().decode()
# Every language code, by Whisper's token order (the ids the library's lists use).
_LANGUAGES = tuple(_lib.sotto_lang_str(i).decode() for i in range(_lib.sotto_lang_max_id() + 1))


class _LanguageProbs:
    """A buffer the library writes every language's probability to, by id."""

    def __init__(self):
        self.buf = (ctypes.c_float * len(_LANGUAGES))()

    def list(self):
        """faster-whisper's `all_language_probs`: (code, probability), likeliest first; None
        when nothing was detected (the library leaves every probability 0)."""
        pairs = [(code, p) for code, p in zip(_LANGUAGES, self.buf) if p > 0]
        return sorted(pairs, key=lambda cp: -cp[1]) or None


def _set_clips(p, clip_timestamps):
    """Points `p` at `clip_timestamps` (seconds) as C floats; returns the array, which must
    stay alive while the library reads `p`."""
    clips = [float(t) for t in clip_timestamps or []]
    keep = (ctypes.c_float * len(clips))(*clips)
    p.clip_timestamps = ctypes.cast(keep, ctypes.POINTER(ctypes.c_float)) if clips else None
    p.n_clip_timestamps = len(clips)
    return keep


def _fail():
    raise SottoError(_lib.sotto_last_error().decode("utf-8", "replace"))


def _c(s):
    return None if s is None else s.encode()


class _AsDict:
    def _asdict(self):
        """A dict of the fields: faster-whisper keeps this from its named-tuple days
        (deprecated there, as here, for `dataclasses.asdict`)."""
        import dataclasses
        import warnings

        warnings.warn(f"{type(self).__name__}._asdict() is deprecated, use "
                      "dataclasses.asdict()", DeprecationWarning, stacklevel=2)
        return dataclasses.asdict(self)


@dataclass
class Word(_AsDict):
    word: str
    start: float
    end: float
    probability: float


@dataclass
class Segment(_AsDict):
    start: float
    end: float
    text: str
    no_speech_prob: float
    # A list of words; in `WhisperModel`'s segments None without word timestamps, as
    # faster-whisper's.
    words: Optional[List[Word]] = field(default_factory=list)
    id: int = 0
    seek: int = 0
    tokens: List[int] = field(default_factory=list)
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    temperature: float = 0.0


@dataclass
class Transcript:
    text: str
    language: str
    duration: float
    segments: List[Segment]
    language_probability: float = 1.0


def _not_pcm(kind):
    return TypeError(f"{kind} samples: give floats in [-1, 1] or 16-bit PCM (int16), 16 kHz mono")


class _Samples:
    """16 kHz mono samples as a float pointer and a count, kept alive with their owner.
    Floats are taken as they are; 16-bit PCM (an int16 array) is scaled by 1/32768, as
    whisper.cpp's tools read it; other integer arrays are refused, not taken as floats."""

    def __init__(self, audio):
        if hasattr(audio, "__array_interface__"):  # NumPy, without importing it here
            import numpy

            a = numpy.asarray(audio)
            if a.dtype == numpy.int16:
                a = a.astype(numpy.float32) / numpy.float32(32768)
            elif a.dtype.kind in "biu":
                raise _not_pcm(str(a.dtype))
            self._owner = numpy.ascontiguousarray(a, dtype=numpy.float32).reshape(-1)
            self.n = self._owner.size
            self.ptr = self._owner.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        else:
            if isinstance(audio, array.array) and audio.typecode == "h":
                audio = array.array("f", (v / 32768 for v in audio))
            elif isinstance(audio, array.array) and audio.typecode not in "fd":
                raise _not_pcm(f"array('{audio.typecode}')")
            self._owner = audio if isinstance(audio, array.array) and audio.typecode == "f" \
                else array.array("f", audio)
            self.n = len(self._owner)
            address = self._owner.buffer_info()[0] if self.n else 0
            self.ptr = ctypes.cast(address, ctypes.POINTER(ctypes.c_float))


def _take_samples(ptr, n) -> array.array:
    """A copy of the library's sample buffer, which is then freed."""
    if not ptr:
        _fail()
    try:
        return array.array("f", ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float * n.value))[0])
    finally:
        _lib.sotto_audio_free(ptr, n)


def load_audio(path) -> array.array:
    """Decodes an audio file (wav, flac, mp3, ogg, opus, m4a, webm) to 16 kHz mono samples."""
    n = ctypes.c_size_t()
    return _take_samples(_lib.sotto_audio_load(os.fsencode(path), ctypes.byref(n)), n)


def decode_audio(input_file, sampling_rate: int = 16000, split_stereo: bool = False):
    """Decodes audio to 16 kHz samples, as faster-whisper's `decode_audio`: `input_file` is
    a path, a binary file object (read whole) or a whole file's bytes (bytes, bytearray,
    memoryview). Mono, or with `split_stereo` the first two channels apart as (left, right)
    (mono input in both). `array.array('f')`s; sotto resamples to 16 kHz only."""
    if sampling_rate != 16000:
        raise ValueError(f"sampling_rate {sampling_rate}: sotto decodes to 16000 Hz only")
    if isinstance(input_file, (str, os.PathLike)):
        if not split_stereo:
            return load_audio(input_file)
        with open(input_file, "rb") as f:
            data = f.read()
    elif hasattr(input_file, "read"):
        data = input_file.read()
    else:
        data = input_file
    data = bytes(data)
    n = ctypes.c_size_t()
    if not split_stereo:
        return _take_samples(_lib.sotto_audio_decode(data, len(data), ctypes.byref(n)), n)
    both = _take_samples(_lib.sotto_audio_decode_stereo(data, len(data), ctypes.byref(n)), n)
    return both[0::2], both[1::2]


def _samples_of(audio):
    """A path's or a binary file object's decoded samples, or the samples given."""
    if isinstance(audio, (str, bytes, os.PathLike)):
        return load_audio(audio)
    if hasattr(audio, "read"):
        return decode_audio(audio)
    return audio


class _Handle:
    """A library object, freed by close(), on leaving a `with` block, or when collected."""

    _h = None

    def _free(self, h):
        raise NotImplementedError

    def close(self):
        if self._h:
            self._free(self._h)
            self._h = None

    def __del__(self):
        # At interpreter exit the module's globals may already be gone.
        if _lib is not None:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Resampler(_Handle):
    """Live audio at `rate` Hz to 16 kHz as it arrives, with the filter every decode uses
    (libswresample's): `push(samples)` (mono at `rate`: floats, or 16-bit PCM as int16)
    returns the 16 kHz samples now ready, `finish()` the rest; joined, they are the samples
    a file at that rate decodes to. `array.array('f')`s."""

    def __init__(self, rate: int):
        self._h = _lib.sotto_resampler_new(int(rate))
        if not self._h:
            _fail()
        self._finished = False

    def push(self, samples) -> array.array:
        s = _Samples(samples)
        n = ctypes.c_size_t()
        return self._take(_lib.sotto_resampler_push(self._live(), s.ptr, s.n, ctypes.byref(n)), n)

    def finish(self) -> array.array:
        n = ctypes.c_size_t()
        out = self._take(_lib.sotto_resampler_finish(self._live(), ctypes.byref(n)), n)
        self._finished = True
        return out

    def _live(self):
        if not self._h or self._finished:
            raise SottoError("the resampler was finished or closed")
        return self._h

    @staticmethod
    def _take(ptr, n) -> array.array:
        # NULL with nothing counted is nothing ready yet (a live handle cannot fail).
        return _take_samples(ptr, n) if ptr or n.value else array.array("f")

    def _free(self, h):
        _lib.sotto_resampler_free(h)


@dataclass
class VadOptions:
    """How the VAD finds speech: faster-whisper's `VadOptions`, same names and defaults."""

    threshold: float = 0.5
    neg_threshold: Optional[float] = None
    min_speech_duration_ms: int = 0
    max_speech_duration_s: float = float("inf")
    min_silence_duration_ms: int = 2000
    speech_pad_ms: int = 400

    def _c(self) -> _VadParams:
        p = _lib.sotto_vad_default_params()
        p.threshold = self.threshold
        p.neg_threshold = -1.0 if self.neg_threshold is None else self.neg_threshold
        p.min_speech_duration_ms = int(self.min_speech_duration_ms)
        p.max_speech_duration_s = 0.0 if self.max_speech_duration_s == float("inf") \
            else self.max_speech_duration_s
        p.min_silence_duration_ms = int(self.min_silence_duration_ms)
        p.speech_pad_ms = int(self.speech_pad_ms)
        return p


def _vad_options(options, overrides) -> VadOptions:
    if isinstance(options, dict):
        options = VadOptions(**options)
    options = options or VadOptions()
    return VadOptions(**{**options.__dict__, **overrides}) if overrides else options


class Vad(_Handle):
    """The Silero VAD v6 (faster-whisper's `silero_vad_v6.onnx`): from `path`, or the cached
    copy (fetched on first use). Its front end runs on `threads` threads of its own (0: one
    per core). Shareable between sessions and threads."""

    def __init__(self, path=None, threads: int = 0):
        self._h = _lib.sotto_vad_load(None if path is None else os.fsencode(path), threads)
        if not self._h:
            _fail()

    def speech(self, audio, options=None, **overrides):
        """The stretches of speech in a file or 16 kHz mono samples: [(start, end), ...] in
        seconds. `options` is a VadOptions or a dict of its fields; keywords override them."""
        if not self._h:
            raise SottoError("the VAD is closed")
        s = _Samples(_samples_of(audio))
        p = _vad_options(options, overrides)._c()
        found = _lib.sotto_vad_detect(self._h, s.ptr, s.n, ctypes.byref(p))
        if not found:
            _fail()
        try:
            return [(_lib.sotto_speech_start(found, i), _lib.sotto_speech_end(found, i))
                    for i in range(_lib.sotto_speech_n(found))]
        finally:
            _lib.sotto_speech_free(found)

    def _free(self, h):
        _lib.sotto_vad_free(h)


_default_vad = None


def _shared_vad() -> Vad:
    """The cached VAD, loaded once for `vad_filter=True`."""
    global _default_vad
    if _default_vad is None:
        _default_vad = Vad()
    return _default_vad


class Model(_Handle):
    """A Whisper model, loaded once: a name (tiny.en, base, ...) or a path to a CTranslate2
    or Hugging Face folder or a whisper.cpp ggml .bin. `device` is "cpu", "cuda", "cuda:N"
    or "auto". `encoder_precision` is the encoder's arithmetic on the CPU, as `sotto
    transcribe --encoder-precision` takes it: "auto", "f32" (the reference path), "bf16",
    "bf16-fast", "int8" or "int16" (a level this CPU cannot run raises SottoError); on a
    GPU "f32" runs the whole model in f32 and anything else f16. `exact_logits` computes
    every logit from the f16 vocabulary rows; `quantize_decoder` quantizes an f16 file's
    decoder layers to q8_0 as they load (the CPU; `sotto transcribe --quantize-decoder`)."""

    def __init__(self, name_or_path, device: str = "auto", encoder_precision: str = "auto",
                 exact_logits: bool = False, quantize_decoder: bool = False):
        flags = (1 if exact_logits else 0) | (2 if quantize_decoder else 0)
        self._h = _lib.sotto_model_load_with(os.fsencode(name_or_path), device.encode(),
                                             encoder_precision.encode(), flags)
        if not self._h:
            _fail()

    @property
    def is_multilingual(self) -> bool:
        return _lib.sotto_model_is_multilingual(self._h) == 1

    @property
    def device(self) -> str:
        """Where it runs: "cpu", "cuda" (GPU 0) or "cuda:N" ("auto" resolved)."""
        return _lib.sotto_model_device(self._h).decode()

    @property
    def device_note(self) -> str:
        """Why a model loaded for "auto" runs on the CPU although a GPU was found, else ""."""
        return _lib.sotto_model_device_note(self._h).decode()

    def session(self, threads: int = 0) -> "Session":
        """A new transcription session (0 threads: every core)."""
        return Session(self, threads)

    def _free(self, h):
        _lib.sotto_model_free(h)


class Session(_Handle):
    """One transcription stream: its own caches and threads. Use it from one thread at a time."""

    def __init__(self, model: Model, threads: int = 0):
        if not model._h:
            raise SottoError("the model is closed")
        self._h = _lib.sotto_session_new(model._h, threads)
        if not self._h:
            _fail()

    def transcribe(self, audio, *, language: Optional[str] = None, translate: bool = False,
                   beam_size: int = 5, best_of: int = 5, temperature: float = 0.0,
                   temperature_increment: float = 0.2, without_timestamps: bool = False,
                   word_timestamps: bool = False, initial_prompt: Optional[str] = None,
                   on_segment: Optional[Callable[[int, float, float, str], Optional[bool]]] = None,
                   vad_filter=False, vad_parameters=None, patience: float = 1.0,
                   length_penalty: float = 1.0,
                   compression_ratio_threshold: Optional[float] = 2.4,
                   log_prob_threshold: Optional[float] = -1.0,
                   no_speech_threshold: Optional[float] = 0.6,
                   condition_on_previous_text: bool = True,
                   hotwords: Optional[str] = None,
                   on_full_segment: Optional[Callable[[Segment], Optional[bool]]] = None,
                   batch_size: int = 0, speech=None, clip_timestamps=None,
                   repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0,
                   multilingual: bool = False, language_detection_threshold: float = 0.5,
                   language_detection_segments: int = 1,
                   suppress_regex: Optional[str] = None, grammar: Optional[str] = None,
                   grammar_rule: str = "root", grammar_penalty: float = 100.0,
                   max_context: Optional[int] = None, seed: int = 0,
                   entropy_threshold: Optional[float] = None,
                   audio_ctx: int = 0, chunk_length: Optional[int] = None,
                   prompt_reset_on_temperature: float = 0.5, prefix: Optional[str] = None,
                   suppress_blank: bool = True, suppress_tokens=(-1,),
                   max_initial_timestamp: float = 1.0, max_new_tokens: Optional[int] = None,
                   hallucination_silence_threshold: Optional[float] = None,
                   prepend_punctuations: Optional[str] = None,
                   append_punctuations: Optional[str] = None) -> Transcript:
        """Transcribes a file path or 16 kHz mono samples. `on_segment(index, start, end, text)`
        sees each segment as it is finished, and `on_full_segment(segment)` sees it as a
        whole `Segment` (tokens, words, ...); returning False stops early. `vad_filter` (True,
        or a Vad) transcribes only the speech the VAD finds, as faster-whisper's does, with
        `vad_parameters` (a VadOptions or a dict); times stay the audio's. `batch_size` > 0
        (with `vad_filter`) is faster-whisper's batched mode: the speech in chunks of up to
        30 s, that many decoded together, no text carried between them, no fallback.
        `speech` ([(start, end), ...] seconds, as `Vad.speech` gives them) transcribes those
        stretches only, without running the VAD again. `clip_timestamps` ([start, end, ...]
        seconds, an odd count running the last to the end) transcribes only those clips
        (with `batch_size`, each clip a chunk). `repetition_penalty`, `no_repeat_ngram_size`,
        `multilingual` (each window in its own language) and `language_detection_threshold`
        / `_segments` (detection over several windows) are faster-whisper's;
        `suppress_regex` whisper.cpp's (text tokens it matches in whole are never produced),
        as are `grammar` (GBNF text each window should follow), `grammar_rule` (its start
        rule), `grammar_penalty` (how much tokens outside it are lowered) and `max_context`
        (most tokens of earlier text a window's prompt carries, its <|startofprev|> counted;
        0 none; None half the context). `seed` seeds the sampler at fallback temperatures;
        `entropy_threshold` is whisper.cpp's `entropy_thold` (retry when the last 32 tokens
        of a longer result are spread below it; None, the default, off). `audio_ctx` is
        whisper.cpp's too: encoder positions per window, 20 ms each (500: 10 s windows and
        an encoder 3-4x faster, text perhaps worse; 0, the default, 30 s). `chunk_length` is
        faster-whisper's: seconds of audio per window, 1 to 30 (batched: the longest chunk);
        None, 30. So are `prompt_reset_on_temperature`, `prefix`, `suppress_blank`,
        `suppress_tokens` (ids, -1 for the non-speech symbols; None or [] for none),
        `max_initial_timestamp`, `max_new_tokens`, `hallucination_silence_threshold` (turns
        word timing on) and `prepend_`/`append_punctuations` (None: faster-whisper's)."""
        self._check()
        p = _lib.sotto_default_params()
        p.language = _c(language)
        p.translate = int(translate)
        p.beam_size, p.best_of = beam_size, best_of
        p.temperature, p.temperature_inc = temperature, temperature_increment
        p.no_timestamps, p.word_timestamps = int(without_timestamps), int(word_timestamps)
        p.initial_prompt = _c(initial_prompt)
        p.patience, p.length_penalty = patience, length_penalty
        none_is_nan = lambda v: float("nan") if v is None else v  # noqa: E731
        p.compression_ratio_threshold = none_is_nan(compression_ratio_threshold)
        p.log_prob_threshold = none_is_nan(log_prob_threshold)
        p.no_speech_threshold = none_is_nan(no_speech_threshold)
        p.condition_on_previous_text = int(condition_on_previous_text)
        p.hotwords = _c(hotwords)
        p.repetition_penalty, p.no_repeat_ngram_size = repetition_penalty, no_repeat_ngram_size
        p.multilingual = int(multilingual)
        p.language_detection_threshold = language_detection_threshold
        p.language_detection_segments = language_detection_segments
        p.suppress_regex = _c(suppress_regex)
        p.grammar, p.grammar_rule = _c(grammar), _c(grammar_rule)
        p.grammar_penalty = grammar_penalty
        p.max_context = -1 if max_context is None else max_context
        p.seed = seed
        p.entropy_threshold = none_is_nan(entropy_threshold)
        p.audio_ctx = audio_ctx
        p.chunk_length = chunk_length or 0
        p.prompt_reset_on_temperature = prompt_reset_on_temperature
        p.prefix = _c(prefix)
        p.suppress_blank = int(suppress_blank)
        p.max_initial_timestamp = max_initial_timestamp
        p.max_new_tokens = max_new_tokens or 0
        p.hallucination_silence_threshold = none_is_nan(hallucination_silence_threshold)
        p.prepend_punctuations = _c(prepend_punctuations)
        p.append_punctuations = _c(append_punctuations)
        ids = [int(t) for t in suppress_tokens or []]
        keep_ids = (ctypes.c_int * max(1, len(ids)))(*ids)
        p.suppress_tokens = ctypes.cast(keep_ids, ctypes.POINTER(ctypes.c_int))
        p.n_suppress_tokens = len(ids)
        p.batch_size = batch_size
        keep_clips = _set_clips(p, clip_timestamps)  # noqa: F841 - alive for the call
        vad = vad_filter if isinstance(vad_filter, Vad) else _shared_vad() if vad_filter else None
        if vad is not None:
            if not vad._h:
                raise SottoError("the VAD is closed")
            p.vad = vad._h
            p.vad_params = _vad_options(vad_parameters, None)._c()
        raised = []

        def callback(index, start, end, text, _user):
            try:
                return 0 if on_segment(index, start, end, text.decode("utf-8", "replace")) is False \
                    else 1
            except BaseException as e:  # noqa: BLE001 - re-raised below, after the C call
                raised.append(e)
                return 0

        def full(one, _user):
            try:
                seg = _read(one).segments[0]
                seg.id = full.count = full.count + 1
                return 0 if on_full_segment(seg) is False else 1
            except BaseException as e:  # noqa: BLE001 - re-raised below, after the C call
                raised.append(e)
                return 0

        full.count = 0
        keep = _SEGMENT_CALLBACK(callback) if on_segment else _SEGMENT_CALLBACK()
        keep_full = _TRANSCRIPT_CALLBACK(full) if on_full_segment else _TRANSCRIPT_CALLBACK()
        p.on_segment, p.on_segment_transcript = keep, keep_full
        if speech is not None:
            s = _Samples(_samples_of(audio))
            pairs = (ctypes.c_double * (2 * len(speech)))(*[t for se in speech for t in se])
            t = _lib.sotto_transcribe_speech(self._h, s.ptr, s.n, pairs, len(speech),
                                             ctypes.byref(p))
        elif isinstance(audio, (str, bytes, os.PathLike)):
            t = _lib.sotto_transcribe_file(self._h, os.fsencode(audio), ctypes.byref(p))
        else:
            s = _Samples(_samples_of(audio))
            t = _lib.sotto_transcribe(self._h, s.ptr, s.n, ctypes.byref(p))
        if raised:
            if t:
                _lib.sotto_transcript_free(t)
            raise raised[0]
        if not t:
            _fail()
        try:
            return _read(t)
        finally:
            _lib.sotto_transcript_free(t)

    def detect_language(self, audio, segments: int = 1, threshold: float = 0.5):
        """The spoken language of the first 30 s: (code, probability). Multilingual models only.
        With `segments` > 1, up to that many 30 s windows until one's likeliest language is
        above `threshold` (faster-whisper's language_detection_segments and _threshold)."""
        return self.language_probabilities(audio, segments, threshold)[:2]

    def language_probabilities(self, audio, segments: int = 1, threshold: float = 0.5):
        """`detect_language` with every language's probability: (code, probability,
        [(code, probability), ...] likeliest first, of the last window read), as
        faster-whisper's `WhisperModel.detect_language` returns them."""
        self._check()
        s = _Samples(_samples_of(audio))
        prob, probs = ctypes.c_float(), _LanguageProbs()
        code = _lib.sotto_detect_language_probs(self._h, s.ptr, s.n, segments, threshold,
                                                ctypes.byref(prob), probs.buf)
        if not code:
            _fail()
        return code.decode(), prob.value, probs.list()

    def transcribe_language(self, audio, chunk_length: Optional[int] = None,
                            audio_ctx: int = 0, clip_timestamps=None,
                            language_detection_segments: int = 1,
                            language_detection_threshold: float = 0.5, speech=None,
                            batch_size: int = 0):
        """The language `transcribe` with these options decodes in, without transcribing:
        (code, probability, every language's (code, probability) likeliest first, or None
        when the language was not detected), detected from the same windows as transcribing
        detects it
        (from the first clip's start, `chunk_length` seconds or `audio_ctx` positions long,
        the log-mel scaled over all the speech, as faster-whisper's `transcribe()`; with
        `batch_size`, on the chunks' log-mels joined, as its batched pipeline). `speech` and
        `clip_timestamps` as `transcribe` takes them. English-only models give ("en", 1.0);
        no speech ("", 0.0)."""
        self._check()
        s = _Samples(_samples_of(audio))
        p = _lib.sotto_default_params()
        p.audio_ctx = audio_ctx
        p.batch_size = batch_size
        p.chunk_length = chunk_length or 0
        p.language_detection_segments = language_detection_segments
        p.language_detection_threshold = language_detection_threshold
        keep_clips = _set_clips(p, clip_timestamps)  # noqa: F841 - alive for the call
        prob, probs = ctypes.c_float(), _LanguageProbs()
        if speech is not None:
            pairs = (ctypes.c_double * (2 * len(speech)))(*[t for se in speech for t in se])
            code = _lib.sotto_transcribe_speech_language(self._h, s.ptr, s.n, pairs,
                                                         len(speech), ctypes.byref(p),
                                                         ctypes.byref(prob), probs.buf)
        else:
            code = _lib.sotto_transcribe_language(self._h, s.ptr, s.n, ctypes.byref(p),
                                                  ctypes.byref(prob), probs.buf)
        if code is None:
            _fail()
        return code.decode(), prob.value, probs.list()

    def bench(self, runs: int = 3) -> dict:
        """Milliseconds per encoder window, per decoder step (one sequence, and five beams)
        and per 256-token prompt: medians of `runs` after a warm-up."""
        self._check()
        out = _Bench(struct_size=ctypes.sizeof(_Bench))
        if _lib.sotto_bench(self._h, runs, ctypes.byref(out)) != 0:
            _fail()
        return {"system": _lib.sotto_system_info().decode(), "threads": out.n_threads,
                "encode_ms": out.encode_ms, "decode_ms": out.decode_ms,
                "batch_ms": out.batch_ms, "prompt_ms": out.prompt_ms}

    def _check(self):
        if not self._h:
            raise SottoError("the session is closed")

    def _free(self, h):
        _lib.sotto_session_free(h)


def _read(t) -> Transcript:
    L = _lib
    segments = []
    for i in range(L.sotto_transcript_n_segments(t)):
        words = [Word(L.sotto_transcript_word_text(t, i, w).decode("utf-8", "replace"),
                      L.sotto_transcript_word_start(t, i, w), L.sotto_transcript_word_end(t, i, w),
                      L.sotto_transcript_word_probability(t, i, w))
                 for w in range(L.sotto_transcript_n_words(t, i))]
        segments.append(Segment(
            L.sotto_transcript_segment_start(t, i), L.sotto_transcript_segment_end(t, i),
            L.sotto_transcript_segment_text(t, i).decode("utf-8", "replace"),
            L.sotto_transcript_segment_no_speech_prob(t, i), words, id=i + 1,
            seek=L.sotto_transcript_segment_seek(t, i),
            tokens=[L.sotto_transcript_segment_token(t, i, k)
                    for k in range(L.sotto_transcript_segment_n_tokens(t, i))],
            avg_logprob=L.sotto_transcript_segment_avg_logprob(t, i),
            compression_ratio=L.sotto_transcript_segment_compression_ratio(t, i),
            temperature=L.sotto_transcript_segment_temperature(t, i)))
    return Transcript(L.sotto_transcript_text(t).decode("utf-8", "replace"),
                      L.sotto_transcript_language(t).decode(), L.sotto_transcript_duration(t),
                      segments, L.sotto_transcript_language_probability(t))


@dataclass
class TranscriptionInfo:
    """faster-whisper's `TranscriptionInfo` (the fields sotto knows)."""

    language: str
    language_probability: float
    duration: float
    duration_after_vad: float
    all_language_probs: Optional[list] = None
    transcription_options: Optional[dict] = None
    vad_options: Optional[VadOptions] = None


_FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def available_models() -> List[str]:
    """The model names sotto fetches by name (faster-whisper's `available_models`)."""
    names, i = [], 0
    while (name := _lib.sotto_known_model(i)) is not None:
        names.append(name.decode())
        i += 1
    return names


def _model_path(name_or_path, cache_dir=None, local_only=False) -> str:
    """Where a model name or path loads from: a path as it is, else the cache (`cache_dir`
    or sotto's), else fetched into it unless `local_only`."""
    name = os.fsencode(name_or_path)
    cache = None if cache_dir is None else os.fsencode(cache_dir)
    cap = 1024
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = _lib.sotto_model_path(name, cache, int(bool(local_only)), buf, cap)
        if n < 0:
            _fail()
        if n < cap:
            return buf.value.decode()
        cap = n + 1


def download_model(size_or_id: str, output_dir=None, local_files_only: bool = False,
                   cache_dir=None, revision=None, use_auth_token=None) -> str:
    """As faster-whisper's `download_model`: the model's folder, fetched into sotto's cache
    (or `cache_dir`) when it is not there, unless `local_files_only`; with `output_dir`, its
    files are copied there and that folder returned. `revision` and `use_auth_token` are
    not taken (sotto fetches the released files, without a token)."""
    if revision is not None or use_auth_token:
        raise TypeError("download_model: sotto takes no revision or use_auth_token")
    path = _model_path(size_or_id, cache_dir, local_files_only)
    if output_dir is None:
        return path
    import shutil

    os.makedirs(output_dir, exist_ok=True)
    if os.path.isdir(path):
        shutil.copytree(path, output_dir, dirs_exist_ok=True)
    else:
        shutil.copy2(path, output_dir)
    return os.fspath(output_dir)


def format_timestamp(seconds: float, always_include_hours: bool = False,
                     decimal_marker: str = ".") -> str:
    """`[HH:]MM:SS.mmm` of a time in seconds, as faster-whisper's `format_timestamp` (hours
    when there are any or when asked for)."""
    if seconds < 0:
        raise ValueError(f"timestamp {seconds} is negative")
    ms = round(seconds * 1000.0)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    head = f"{hours:02d}:" if always_include_hours or hours else ""
    return f"{head}{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"


def _temperatures(temperature):
    """faster-whisper's `temperature` (a number, or the fallback sequence) as sotto's first
    temperature and step: evenly spaced and ending at 1, or a single value."""
    ts = [float(temperature)] if isinstance(temperature, (int, float)) else list(temperature)
    if len(ts) == 1:
        return ts[0], 0.0
    step = ts[1] - ts[0]
    # The sequence sotto makes from (first, step): every step up to 1.
    made = [ts[0]]
    while step > 0 and round(made[0] + len(made) * step, 6) <= 1.0 + 1e-9:
        made.append(round(made[0] + len(made) * step, 6))
    if len(made) != len(ts) or any(abs(a - b) > 1e-6 for a, b in zip(made, ts)):
        raise ValueError(f"temperature {temperature!r}: sotto takes one value, or values "
                         "evenly spaced up to 1 (as faster-whisper's default)")
    return ts[0], step


def _clip_list(clips):
    """faster-whisper's clip timestamps as a flat list of seconds: a "start,end,..." string
    ("0" is all of it), a list of numbers, or (its batched pipeline's) dicts of start and
    end; [] for all of the audio."""
    if clips is None:
        return []
    if isinstance(clips, str):
        clips = [float(t) for t in clips.split(",") if t.strip()]
    out = []
    for c in clips:
        out.extend([c["start"], c["end"]] if isinstance(c, dict) else [c])
    return [] if out in ([], [0], [0.0]) else [float(t) for t in out]


class WhisperModel:
    """faster-whisper's `WhisperModel`, on sotto: `from sotto import WhisperModel` in place
    of `from faster_whisper import WhisperModel`, the same calls.

    `model_size_or_path` is a name (tiny.en, base, ...; fetched on first use), a Hugging
    Face repo id or a path (CTranslate2 folder, transformers folder or whisper.cpp ggml
    .bin). `device` is "auto", "cpu" or "cuda" (`device_index` picks the GPU).
    `compute_type` picks the encoder's arithmetic: "float32" the f32 reference path,
    "bfloat16" bf16, the "int8" types int8, "int16" int16, "default", "auto" and "float16"
    what sotto picks for the file and CPU (the decoder keeps the file's, except that with
    device="cpu" the "int8" types quantize an f16 file's decoder to q8_0 too, as
    CTranslate2's int8 does); a type this CPU cannot run falls back to that, with a
    warning, as CTranslate2 falls back.
    `num_workers` sessions let as many threads transcribe at once. `download_root` is the
    cache folder a name is fetched into (sotto's own otherwise); `local_files_only` never
    fetches."""

    # faster-whisper's (CTranslate2's) compute types, as sotto's encoder precisions.
    _PRECISION = {"default": "auto", "auto": "auto", "float16": "auto", "float32": "f32",
                  "bfloat16": "bf16", "int8": "int8", "int8_float32": "int8",
                  "int8_float16": "int8", "int8_bfloat16": "int8", "int16": "int16"}

    def __init__(self, model_size_or_path, device: str = "auto", device_index=0,
                 compute_type: str = "default", cpu_threads: int = 0, num_workers: int = 1,
                 download_root=None, local_files_only: bool = False, **kwargs):
        if kwargs:
            raise TypeError(f"WhisperModel: unsupported arguments {sorted(kwargs)}")
        if device == "cuda":
            index = device_index[0] if isinstance(device_index, (list, tuple)) else device_index
            device = f"cuda:{index}"
        if download_root is not None or local_files_only:
            model_size_or_path = _model_path(model_size_or_path, download_root,
                                             local_files_only)
        if compute_type not in self._PRECISION:
            raise ValueError(f"compute_type {compute_type!r} is not one of "
                             f"{', '.join(self._PRECISION)}")
        precision = self._PRECISION[compute_type]
        # CTranslate2's int8 quantizes the decoder too: on the CPU, so does sotto.
        quantize = compute_type.startswith("int8") and device == "cpu"
        try:
            self.model = Model(model_size_or_path, device=device, encoder_precision=precision,
                               quantize_decoder=quantize)
        except SottoError as e:
            if "lacks" not in str(e):
                raise
            import warnings
            warnings.warn(f"compute_type {compute_type}: {e}; using what sotto picks",
                          stacklevel=2)
            self.model = Model(model_size_or_path, device=device, quantize_decoder=quantize)
        import queue
        self._sessions = queue.Queue()
        for _ in range(max(1, num_workers)):
            self._sessions.put(self.model.session(cpu_threads))

    def transcribe(self, audio, language: Optional[str] = None, task: str = "transcribe",
                   beam_size: int = 5, best_of: int = 5, patience: float = 1,
                   length_penalty: float = 1, temperature=_FALLBACK,
                   compression_ratio_threshold: Optional[float] = 2.4,
                   log_prob_threshold: Optional[float] = -1.0,
                   no_speech_threshold: Optional[float] = 0.6,
                   condition_on_previous_text: bool = True,
                   initial_prompt: Optional[str] = None, word_timestamps: bool = False,
                   vad_filter: bool = False, vad_parameters=None,
                   without_timestamps: bool = False, hotwords: Optional[str] = None,
                   clip_timestamps="0", repetition_penalty: float = 1,
                   no_repeat_ngram_size: int = 0, multilingual: bool = False,
                   language_detection_threshold: float = 0.5,
                   language_detection_segments: int = 1, chunk_length: Optional[int] = None,
                   log_progress: bool = False, prompt_reset_on_temperature: float = 0.5,
                   prefix: Optional[str] = None, suppress_blank: bool = True,
                   suppress_tokens=(-1,), max_initial_timestamp: float = 1.0,
                   prepend_punctuations: Optional[str] = None,
                   append_punctuations: Optional[str] = None,
                   max_new_tokens: Optional[int] = None,
                   hallucination_silence_threshold: Optional[float] = None, **kwargs):
        """As faster-whisper's: returns `(segments, info)` at once, `segments` a generator
        that transcribes as it is read (each segment as soon as it is finished; closing it
        early stops the transcription). Options sotto does not take raise TypeError rather
        than being ignored."""
        if kwargs:
            raise TypeError(f"transcribe: unsupported arguments {sorted(kwargs)}")
        if task not in ("transcribe", "translate"):
            raise ValueError(f"task {task!r} is not transcribe or translate")
        t0, step = _temperatures(temperature)
        samples = _samples_of(audio)
        duration = len(samples) / 16000
        clips = _clip_list(clip_timestamps)
        # As faster-whisper: clips, when given, replace the VAD.
        options = _vad_options(vad_parameters, None) if vad_filter and not clips else None
        stretches, after_vad, language, probability, all_probs = self._speech(
            samples, options, language, clips,
            (language_detection_segments, language_detection_threshold),
            dict(chunk_length=chunk_length))
        info = TranscriptionInfo(
            language=language, language_probability=probability, duration=duration,
            duration_after_vad=after_vad, all_language_probs=all_probs,
            transcription_options=dict(beam_size=beam_size, best_of=best_of,
                                       patience=patience, length_penalty=length_penalty,
                                       temperatures=temperature,
                                       word_timestamps=word_timestamps,
                                       chunk_length=chunk_length),
            vad_options=options)
        run = dict(
            language=language, translate=task == "translate", beam_size=beam_size,
            best_of=best_of, temperature=t0, temperature_increment=step,
            without_timestamps=without_timestamps, word_timestamps=word_timestamps,
            initial_prompt=initial_prompt, speech=stretches,
            patience=patience, length_penalty=length_penalty,
            compression_ratio_threshold=compression_ratio_threshold,
            log_prob_threshold=log_prob_threshold, no_speech_threshold=no_speech_threshold,
            condition_on_previous_text=condition_on_previous_text, hotwords=hotwords,
            clip_timestamps=clips, repetition_penalty=repetition_penalty,
            no_repeat_ngram_size=no_repeat_ngram_size,
            multilingual=multilingual and self.model.is_multilingual,
            chunk_length=chunk_length, prompt_reset_on_temperature=prompt_reset_on_temperature,
            prefix=prefix, suppress_blank=suppress_blank, suppress_tokens=suppress_tokens,
            max_initial_timestamp=max_initial_timestamp, max_new_tokens=max_new_tokens,
            hallucination_silence_threshold=hallucination_silence_threshold,
            prepend_punctuations=prepend_punctuations, append_punctuations=append_punctuations)
        return self._segments(samples, run, duration if log_progress else None), info

    @property
    def supported_languages(self) -> List[str]:
        """The languages the model knows: every code for a multilingual model, else ["en"]."""
        return list(_LANGUAGES) if self.model.is_multilingual else ["en"]

    def detect_language(self, audio=None, features=None, vad_filter: bool = False,
                        vad_parameters=None, language_detection_segments: int = 1,
                        language_detection_threshold: float = 0.5):
        """As faster-whisper's: the language of the first `language_detection_segments` 30 s
        windows of `audio` (of its speech with `vad_filter`), until one's likeliest is above
        `language_detection_threshold`: (language, probability, all_language_probs).
        sotto makes the log-mel itself, so `features` (a log-mel) is not taken."""
        if audio is None:
            raise TypeError("detect_language: pass audio; sotto computes the log-mel itself "
                            "(features are not taken)" if features is not None else
                            "detect_language: either audio or features must be provided")
        samples = _samples_of(audio)
        if vad_filter:
            options = _vad_options(vad_parameters, None)
            speech = array.array("f")
            for s, e in _shared_vad().speech(samples, options):
                speech.extend(samples[round(s * 16000):round(e * 16000)])
            samples = speech
        session = self._sessions.get()
        try:
            return session.language_probabilities(samples, language_detection_segments,
                                                   language_detection_threshold)
        finally:
            self._sessions.put(session)

    def _speech(self, samples, options, language, clips=(), detection=(1, 0.5),
                windows=None):
        """The stretches of speech the VAD finds with `options` (None: no VAD, all of it, or
        the `clips`), their seconds, and the language with its probability and every
        language's (None unless detected): as given, or
        detected as the transcription with `windows` (`chunk_length` and `batch_size` for
        `Session.transcribe_language`) detects it, as faster-whisper's `transcribe()` does
        before its first segment (`detection`: up to that many windows, until one passes
        that threshold)."""
        stretches, speech, pieces = None, samples, None
        if options is not None:
            pieces = stretches = _shared_vad().speech(samples, options)
        elif clips:
            pieces = list(zip(clips[::2], list(clips[1::2]) + [len(samples) / 16000]))
        if pieces is not None:
            speech = array.array("f")
            for s, e in pieces:
                speech.extend(samples[round(s * 16000):round(e * 16000)])
        probability, all_probs = 1.0, None
        if language is None:
            if not self.model.is_multilingual:
                language = "en"
            elif len(speech) == 0:
                language, probability = "en", 0.0
            else:
                session = self._sessions.get()
                try:
                    language, probability, all_probs = session.transcribe_language(
                        samples, speech=stretches, clip_timestamps=clips or None,
                        language_detection_segments=detection[0],
                        language_detection_threshold=detection[1], **(windows or {}))
                finally:
                    self._sessions.put(session)
        return stretches, len(speech) / 16000, language, probability, all_probs

    def _segments(self, samples, run, progress=None):
        """Transcribes on a thread of its own, handing each finished segment over; with
        `progress` (the audio's seconds), the share done so far on stderr, as
        faster-whisper's `log_progress`."""
        import queue
        import threading

        handed = queue.Queue()
        stop = threading.Event()

        def hand(seg):
            if not run.get("word_timestamps"):
                seg.words = None
            handed.put(("segment", seg))
            return not stop.is_set()

        def work(session):
            try:
                session.transcribe(samples, on_full_segment=hand, **run)
                handed.put(("done", None))
            except BaseException as e:  # noqa: BLE001 - raised in the reading thread
                handed.put(("error", e))
            finally:
                self._sessions.put(session)

        threading.Thread(target=work, args=(self._sessions.get(),), daemon=True).start()
        try:
            while True:
                kind, value = handed.get()
                if kind == "segment":
                    if progress:
                        done = min(100.0, 100.0 * value.end / progress)
                        print(f"\rsotto: {done:5.1f}% of {progress:.1f} s", end="",
                              file=sys.stderr, flush=True)
                    yield value
                elif kind == "error":
                    raise value
                else:
                    if progress:
                        print(f"\rsotto: 100.0% of {progress:.1f} s", file=sys.stderr)
                    return
        finally:
            stop.set()


class BatchedInferencePipeline:
    """faster-whisper's `BatchedInferencePipeline`, on sotto: the VAD cuts the speech into
    chunks of up to 30 s and `batch_size` of them are decoded together, each decoder pass
    reading the weights once for all. As faster-whisper's: its VAD defaults
    (`min_silence_duration_ms=160`, `max_speech_duration_s=30`), no timestamps by default,
    only the first temperature (it must be 0 here), and the same arguments it lists as
    unused (accepted, ignored: the thresholds, `condition_on_previous_text`, `prefix`, ...).
    `clip_timestamps` (dicts of `start` and `end` seconds, as faster-whisper's) makes each
    clip a chunk, without the VAD; `vad_filter=False` without them is not supported
    (TypeError)."""

    _UNUSED = ("log_progress", "compression_ratio_threshold", "log_prob_threshold",
               "no_speech_threshold", "condition_on_previous_text",
               "prompt_reset_on_temperature", "prefix", "max_initial_timestamp",
               "hallucination_silence_threshold", "suppress_blank")

    def __init__(self, model: WhisperModel):
        self.model = model

    def transcribe(self, audio, language: Optional[str] = None, task: str = "transcribe",
                   beam_size: int = 5, best_of: int = 5, patience: float = 1,
                   length_penalty: float = 1, temperature=_FALLBACK,
                   initial_prompt: Optional[str] = None, word_timestamps: bool = False,
                   vad_filter: bool = True, vad_parameters=None,
                   without_timestamps: bool = True, hotwords: Optional[str] = None,
                   batch_size: int = 8, clip_timestamps=None, repetition_penalty: float = 1,
                   no_repeat_ngram_size: int = 0, multilingual: bool = False,
                   language_detection_threshold: float = 0.5,
                   language_detection_segments: int = 1, chunk_length: Optional[int] = None,
                   suppress_tokens=(-1,), prepend_punctuations: Optional[str] = None,
                   append_punctuations: Optional[str] = None,
                   max_new_tokens: Optional[int] = None, **kwargs):
        """As faster-whisper's: `(segments, info)`, `segments` a generator; `chunk_length`
        (seconds, default 30) caps the VAD's stretches and the chunks."""
        unknown = sorted(k for k in kwargs if k not in self._UNUSED)
        if unknown:
            raise TypeError(f"transcribe: unsupported arguments {unknown}")
        clips = _clip_list(clip_timestamps)
        if not vad_filter and not clips:
            raise TypeError("sotto's batched mode finds its chunks with the VAD (vad_filter=True) "
                            "or takes them as clip_timestamps")
        if batch_size < 1:
            raise ValueError(f"batch_size {batch_size} must be at least 1")
        if task not in ("transcribe", "translate"):
            raise ValueError(f"task {task!r} is not transcribe or translate")
        t0, _ = _temperatures(temperature)
        # faster-whisper: its own defaults, or the given ones, capped at the chunk length.
        chunk = chunk_length or 30
        options = None if clips else \
            VadOptions(max_speech_duration_s=chunk, min_silence_duration_ms=160) \
            if vad_parameters is None else _vad_options(vad_parameters,
                                                        {"max_speech_duration_s": chunk})
        samples = _samples_of(audio)
        duration = len(samples) / 16000
        stretches, after_vad, language, probability, all_probs = self.model._speech(
            samples, options, language, clips,
            (language_detection_segments, language_detection_threshold),
            dict(chunk_length=chunk_length, batch_size=batch_size))
        info = TranscriptionInfo(
            language=language, language_probability=probability, duration=duration,
            duration_after_vad=after_vad, all_language_probs=all_probs,
            transcription_options=dict(beam_size=beam_size, best_of=best_of,
                                       patience=patience, length_penalty=length_penalty,
                                       temperatures=[t0], word_timestamps=word_timestamps,
                                       batch_size=batch_size),
            vad_options=options)
        run = dict(
            language=language, translate=task == "translate", beam_size=beam_size,
            best_of=best_of, temperature=t0, temperature_increment=0.0,
            without_timestamps=without_timestamps, word_timestamps=word_timestamps,
            initial_prompt=initial_prompt, speech=stretches, patience=patience,
            length_penalty=length_penalty, hotwords=hotwords, batch_size=batch_size,
            clip_timestamps=clips, repetition_penalty=repetition_penalty,
            no_repeat_ngram_size=no_repeat_ngram_size,
            multilingual=multilingual and self.model.model.is_multilingual,
            chunk_length=chunk_length, suppress_tokens=suppress_tokens,
            prepend_punctuations=prepend_punctuations, append_punctuations=append_punctuations,
            max_new_tokens=max_new_tokens)
        return self.model._segments(samples, run), info
