export type TranscribeOptions = {
  /** Spoken language code, or 'auto' (the default) to detect it. */
  language?: string;
  translate?: boolean;
  maxThreads?: number;
  beamSize?: number;
  bestOf?: number;
  temperature?: number;
  temperatureInc?: number;
  prompt?: string;
  /** Start and length of the audio to transcribe, in milliseconds. */
  offset?: number;
  duration?: number;
  tokenTimestamps?: boolean;
  /** Split segments longer than this many characters, between words. */
  maxLen?: number;
  /** Most tokens of earlier text (the prompt included) a window's prompt carries, as
   * whisper.cpp's max_context: 0 none; default half the context. */
  maxContext?: number;
  /** Encoder positions per window, 20 ms each, as whisper.cpp's audio_ctx: shorter
   * windows and a faster encoder, text perhaps worse; 0 (the default) whole 30 s windows. */
  audioCtx?: number;
};

export type Segment = { text: string; t0: number; t1: number };

export type AudioData = ArrayBuffer | SharedArrayBuffer | string | Float32Array | Int16Array | Uint8Array;

export type TranscribeResult = {
  result: string;
  language: string;
  segments: Segment[];
  isAborted: boolean;
};

export type TranscribeNewSegmentsResult = {
  nNew: number;
  totalNNew: number;
  result: string;
  segments: Segment[];
};

export type TranscribeFileOptions = TranscribeOptions & {
  onProgress?: (progress: number) => void;
  onNewSegments?: (result: TranscribeNewSegmentsResult) => void;
};

export class WhisperContext {
  id: number;
  gpu: boolean;
  reasonNoGPU: string;
  transcribe(
    filePath: string,
    options?: TranscribeFileOptions,
  ): { stop: () => Promise<void>; promise: Promise<TranscribeResult> };
  /** 16 kHz mono: an ArrayBuffer of 16-bit PCM or base64 of float32 samples, as
   * whisper.rn takes them; or a Float32Array, an Int16Array, or 16-bit PCM bytes. */
  transcribeData(
    data: AudioData,
    options?: TranscribeFileOptions,
  ): { stop: () => Promise<void>; promise: Promise<TranscribeResult> };
  bench(maxThreads?: number): Promise<BenchResult>;
  release(): Promise<void>;
}

export type BenchResult = {
  config: string;
  nThreads: number;
  encodeMs: number;
  decodeMs: number;
  batchMs: number;
  promptMs: number;
};

export type ContextOptions = { filePath: string; useGpu?: boolean };

export function initWhisper(options: ContextOptions): Promise<WhisperContext>;
export function releaseAllWhisper(): Promise<void>;

/** whisper.rn's VAD options, with its defaults (threshold 0.5, minSpeechDurationMs 250,
 * minSilenceDurationMs 100, maxSpeechDurationS 30, speechPadMs 30). */
export type VadOptions = {
  threshold?: number;
  minSpeechDurationMs?: number;
  minSilenceDurationMs?: number;
  maxSpeechDurationS?: number;
  speechPadMs?: number;
  /** Accepted for whisper.rn's sake; unused. */
  samplesOverlap?: number;
};

/** A stretch of speech; t0 and t1 in 10 ms units. */
export type VadSegment = { t0: number; t1: number };

export class WhisperVadContext {
  id: number;
  gpu: boolean;
  reasonNoGPU: string;
  detectSpeech(filePathOrBase64: string, options?: VadOptions): Promise<VadSegment[]>;
  detectSpeechData(
    audioData: AudioData,
    options?: VadOptions,
  ): Promise<VadSegment[]>;
  release(): Promise<void>;
}

/** filePath: a Silero VAD v6 ONNX file; omitted, the cached one. */
export type VadContextOptions = { filePath?: string; useGpu?: boolean; nThreads?: number };

export function initWhisperVad(options?: VadContextOptions): Promise<WhisperVadContext>;
export function releaseAllWhisperVad(): Promise<void>;
export const libVersion: string;

/** An audio file decoded to 16 kHz mono float samples. */
export function decodeAudioFile(filePath: string): Promise<Float32Array>;

export * from './realtime';
