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
};

export type Segment = { text: string; t0: number; t1: number };

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
  transcribeData(
    data: Float32Array | ArrayBuffer | string,
    options?: TranscribeFileOptions,
  ): { stop: () => Promise<void>; promise: Promise<TranscribeResult> };
  release(): Promise<void>;
}

export type ContextOptions = { filePath: string; useGpu?: boolean };

export function initWhisper(options: ContextOptions): Promise<WhisperContext>;
export function releaseAllWhisper(): Promise<void>;
export const libVersion: string;
