#!/usr/bin/env bash
# Makes tests/golden/quant_rows_*: tiny.en f16 by shared/tools/ct2_to_ggml.py (openai-whisper's
# mel filters, fetched with pip), quantized by `sotto quantize`; quant_rows.py checks every
# file's md5 against whisper.cpp's before taking rows from it.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${WORK:-$(mktemp -d)}"
shared="${SOTTO_SHARED_DIR:-$root/../shared}"
npz="$work/openai_whisper-20250625/whisper/assets/mel_filters.npz"
if [ ! -f "$npz" ]; then
  pip download --no-deps --no-binary :all: openai-whisper==20250625 -d "$work"
  tar xzf "$work/openai_whisper-20250625.tar.gz" -C "$work" openai_whisper-20250625/whisper/assets/mel_filters.npz
fi
cd "$root"
cargo build --release -p sotto-cli
sotto="${CARGO_TARGET_DIR:-$root/target}/release/sotto"
python3 "$shared/tools/ct2_to_ggml.py" "$HOME/.cache/sotto/models/tiny.en" "$npz" "$work/tiny.en-f16.bin" >/dev/null
for t in q4_0 q4_1 q5_0 q5_1 q8_0; do
  "$sotto" quantize "$work/tiny.en-f16.bin" "$work/tiny.en-$t.bin" "$t"
done
python3 scripts/goldens/quant_rows.py "$work/tiny.en-f16.bin" "$work"
rm -f "$work"/tiny.en-*.bin
