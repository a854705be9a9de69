import type { Readable } from 'node:stream';
import type { TranscribeOptions, TranscribeResult, VadOptions, VadSegment } from './index';

/** 16-bit PCM as an audio stream delivers it. */
export type AudioStreamData = { data: Uint8Array; sampleRate: number; channels: number; timestamp: number };

export type AudioStreamConfig = {
  /** 16000 by default; other rates are resampled to 16 kHz as they arrive (more channels
   * are mixed to one). */
  sampleRate?: number;
  channels?: number;
  bitsPerSample?: number;
  bufferSize?: number;
  audioSource?: number;
};

/** whisper.rn's audio stream: what RealtimeTranscriber listens to. */
export interface AudioStreamInterface {
  initialize(config: AudioStreamConfig): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
  isRecording(): boolean;
  onData(callback: (data: AudioStreamData) => void): void;
  onError(callback: (error: string) => void): void;
  onStatusChange(callback: (isRecording: boolean) => void): void;
  release(): Promise<void>;
}

export type VadPreset =
  | 'default'
  | 'sensitive'
  | 'very-sensitive'
  | 'conservative'
  | 'very-conservative'
  | 'continuous'
  | 'meeting'
  | 'noisy';

export const VAD_PRESETS: Readonly<Record<VadPreset, Required<VadOptions>>>;

export type RealtimeVadEvent = {
  type: 'speech_start' | 'speech_end' | 'speech_continue' | 'silence';
  timestamp: number;
  /** Where the last speech in the slice ends, in 10 ms units (-1: none). */
  lastSpeechDetectedTime: number;
  /** The share of the slice's audio that is speech. */
  confidence: number;
  /** Seconds of audio looked at. */
  duration: number;
  sliceIndex: number;
  currentThreshold?: number;
};

export type MemoryUsage = { slicesInMemory: number; totalSamples: number; estimatedMB: number };

export type RealtimeTranscribeEvent = {
  /** `start`: a new slice begins; `transcribe`: a slice's text (again, as it grows);
   * `error`: a transcription failed; `end`: stop() has transcribed everything. */
  type: 'start' | 'transcribe' | 'end' | 'error';
  sliceIndex: number;
  /** Segment times are in 10 ms units from the slice's start. */
  data?: TranscribeResult;
  isCapturing: boolean;
  processTime: number;
  /** Milliseconds of audio transcribed. */
  recordingTime: number;
  memoryUsage?: MemoryUsage;
  vadEvent?: RealtimeVadEvent;
  /** The slice's last transcription: the whole slice, once cut. */
  isFinal?: boolean;
};

export type RealtimeStatsEvent = {
  timestamp: number;
  type: 'slice_processed' | 'vad_change' | 'queue_change' | 'memory_change' | 'status_change';
  data: ReturnType<RealtimeTranscriber['getStatistics']>;
};

/** A slice of the recording; times in milliseconds of audio from the start. */
export type AudioSliceNoData = {
  index: number;
  sampleCount: number;
  startTime: number;
  endTime: number;
  isProcessed: boolean;
  isReleased: boolean;
};

export type RealtimeOptions = {
  /** Longest slice, seconds (default 30). */
  audioSliceSec?: number;
  /** Shortest audio transcribed, seconds (default 1). */
  audioMinSec?: number;
  /** Audio between two transcriptions of the slice being filled, seconds (default 1). */
  audioStepSec?: number;
  /** Processed slices whose audio is kept (default 3). */
  maxSlicesInMemory?: number;
  vadOptions?: VadOptions;
  vadPreset?: VadPreset;
  /** Cut where speech ends once a slice is autoSliceThreshold × audioSliceSec long (default true, 0.5). */
  autoSliceOnSpeechEnd?: boolean;
  autoSliceThreshold?: number;
  transcribeOptions?: TranscribeOptions;
  initialPrompt?: string;
  /** Prompt each slice with the text of the slice before it (true, the default), of none
   * (false), or of that many slices before it (a number; Infinity: all, as whisper.rn). */
  promptPreviousSlices?: boolean | number;
  /** A 16 kHz mono WAV of everything heard. */
  audioOutputPath?: string;
  audioStreamConfig?: AudioStreamConfig;
  logger?: (message: string) => void;
  debug?: boolean;
  /** Accepted for whisper.rn's sake; unused (the VAD runs only before a transcription). */
  vadThrottleMs?: number;
  vadSkipRatio?: number;
};

export type RealtimeTranscriberCallbacks = {
  onTranscribe?: (event: RealtimeTranscribeEvent) => void;
  onVad?: (event: RealtimeVadEvent) => void;
  onError?: (error: string) => void;
  onStatusChange?: (isActive: boolean) => void;
  onStatsUpdate?: (event: RealtimeStatsEvent) => void;
  /** Return false to skip this transcription. */
  onBeginTranscribe?: (info: {
    sliceIndex: number;
    audioData: Uint8Array;
    duration: number;
    vadEvent?: RealtimeVadEvent;
  }) => boolean | void | Promise<boolean | void>;
  /** Return false to skip this VAD run (and the transcription it would lead to). */
  onBeginVad?: (info: {
    sliceIndex: number;
    audioData: Uint8Array;
    duration: number;
  }) => boolean | void | Promise<boolean | void>;
};

export type WhisperContextLike = {
  transcribeData(
    data: ArrayBuffer,
    options: TranscribeOptions
  ): { stop: () => Promise<void>; promise: Promise<TranscribeResult> };
};

export type WhisperVadContextLike = {
  detectSpeechData(data: ArrayBuffer, options: VadOptions): Promise<VadSegment[]>;
};

export type RealtimeTranscriberDependencies = {
  whisperContext: WhisperContextLike;
  vadContext?: WhisperVadContextLike;
  audioStream: AudioStreamInterface;
  /** whisper.rn's file system; not needed here. */
  fs?: unknown;
};

export class RealtimeTranscriber {
  constructor(
    dependencies: RealtimeTranscriberDependencies,
    options?: RealtimeOptions,
    callbacks?: RealtimeTranscriberCallbacks
  );
  start(): Promise<void>;
  /** Resolves once every slice has its final transcription. */
  stop(): Promise<void>;
  nextSlice(): Promise<void>;
  release(): Promise<void>;
  reset(): void;
  updateCallbacks(callbacks: Partial<RealtimeTranscriberCallbacks>): void;
  updateVadOptions(options: Partial<VadOptions>): void;
  updateAutoSliceOptions(options: { autoSliceOnSpeechEnd?: boolean; autoSliceThreshold?: number }): void;
  updateVadThrottleOptions(options: { vadThrottleMs?: number; vadSkipRatio?: number }): void;
  getStatistics(): {
    isActive: boolean;
    isTranscribing: boolean;
    vadEnabled: boolean;
    audioStats: { isRecording: boolean; accumulatedSamples: number };
    vadStats: { enabled: boolean; contextAvailable: boolean; lastSpeechDetectedTime: number } | null;
    sliceStats: {
      currentSliceIndex: number;
      currentSliceSamples: number;
      pendingSlices: number;
      totalSlices: number;
      memoryUsage: MemoryUsage;
    };
    autoSliceConfig: { enabled: boolean; threshold: number; targetDuration: number; minDuration: number };
  };
  getTranscriptionResults(): Array<{ slice: AudioSliceNoData; transcribeEvent: RealtimeTranscribeEvent }>;
}

/** A file (any format sotto reads) played as if recorded. */
export interface SimulateFileAudioStreamAdapter extends AudioStreamInterface {}
export class SimulateFileAudioStreamAdapter {
  constructor(options: {
    filePath: string;
    playbackSpeed?: number;
    chunkDurationMs?: number;
    loop?: boolean;
    onEndOfFile?: () => void;
    logger?: (message: string) => void;
    /** whisper.rn's file system; not needed here. */
    fs?: unknown;
  });
  seekToTime(seconds: number): void;
  setPlaybackSpeed(speed: number): void;
  resetBuffer(): void;
  getStatistics(): {
    filePath: string;
    isRecording: boolean;
    currentTime: number;
    totalDuration: number;
    progress: number;
    playbackSpeed: number;
    hasReachedEnd: boolean;
  };
}

/** 16-bit little-endian PCM from a Readable, or from a command's standard output. */
export interface ReadableStreamAdapter extends AudioStreamInterface {}
export class ReadableStreamAdapter {
  constructor(options: {
    stream?: Readable;
    /** The program and its arguments, e.g. ['arecord', '-q', '-t', 'raw', '-f', 'S16_LE', '-r', '16000', '-c', '1']. */
    command?: string[];
    sampleRate?: number;
    channels?: number;
    onEnd?: () => void;
    logger?: (message: string) => void;
  });
}
