#!/usr/bin/env bash
# Checks that sotto-formats' ggml writer reproduces the reference md5s of
# ../shared/notes/model-formats.md (tiny.en and base f16, openai-whisper's mel filters).
# Fetches the openai-whisper==20250625 source package (for whisper/assets/mel_filters.npz)
# with pip into $WORK (default: a temp folder).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${WORK:-$(mktemp -d)}"
npz="$work/openai_whisper-20250625/whisper/assets/mel_filters.npz"
if [ ! -f "$npz" ]; then
  pip download --no-deps --no-binary :all: openai-whisper==20250625 -d "$work"
  tar xzf "$work/openai_whisper-20250625.tar.gz" -C "$work" openai_whisper-20250625/whisper/assets/mel_filters.npz
fi
cd "$root"
SOTTO_MEL_FILTERS_NPZ="$npz" cargo test --release -p sotto-formats --test roundtrip \
  openai_filters_reproduce_reference_md5 -- --nocapture
