#!/usr/bin/env bash
# Checks that `sotto quantize` writes exactly what whisper.cpp's `whisper-quantize` writes:
# the md5s of ../shared/notes/model-formats.md, for tiny.en (and base with MODELS="tiny.en base").
# The f16 input is made by the independent converter shared/tools/ct2_to_ggml.py with
# openai-whisper==20250625's mel filters (fetched with pip into $WORK, default a temp folder).
# Then runs the sotto-quant md5 test (tiny.en and base, all types, our own f16 writer).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${WORK:-$(mktemp -d)}"
models="${MODELS:-tiny.en}"
shared="${SOTTO_SHARED_DIR:-$root/../shared}"
npz="$work/openai_whisper-20250625/whisper/assets/mel_filters.npz"
if [ ! -f "$npz" ]; then
  pip download --no-deps --no-binary :all: openai-whisper==20250625 -d "$work"
  tar xzf "$work/openai_whisper-20250625.tar.gz" -C "$work" openai_whisper-20250625/whisper/assets/mel_filters.npz
fi
cd "$root"
cargo build --release -p sotto-cli
sotto="${CARGO_TARGET_DIR:-$root/target}/release/sotto"

want() { # model type -> md5 from the table
  case "$1/$2" in
    tiny.en/f16) echo ca560bc86226e05111bdc20e9e9a8ce4 ;;
    tiny.en/q8_0) echo 79071f2d4ae8fc79c86b3719d234d223 ;;
    tiny.en/q5_1) echo 7cc772e50a7f859910e85c01dc47bbaf ;;
    tiny.en/q5_0) echo a89262b71258c566c79ba698a49f2934 ;;
    tiny.en/q4_1) echo 55faf0d37fd83cb796396df1f48aad95 ;;
    tiny.en/q4_0) echo a2ffe3e2aa214117f26f51d5d0e35c84 ;;
    base/f16) echo 9c2854244c087d6e25d43668fcfcf759 ;;
    base/q8_0) echo d487da1116d1b54c9d1f8c0a59c46106 ;;
    base/q5_1) echo 28d7a5368afc4f40dac98fecda651990 ;;
    base/q5_0) echo b15daed26a29759c0f93866aaf039573 ;;
    base/q4_1) echo af4839c571746a1e824b82c9298a3252 ;;
    base/q4_0) echo 4269b2fcf176254dff15e8f9edc97693 ;;
  esac
}

status=0
check() { # file model type
  local got; got="$(md5sum "$1" | cut -d' ' -f1)"
  if [ "$got" = "$(want "$2" "$3")" ]; then echo "ok   $2 $3 $got"; else echo "FAIL $2 $3 $got (want $(want "$2" "$3"))"; status=1; fi
}

for m in $models; do
  f16="$work/$m-f16.bin"
  python3 "$shared/tools/ct2_to_ggml.py" "$HOME/.cache/sotto/models/$m" "$npz" "$f16" >/dev/null
  check "$f16" "$m" f16
  for t in q8_0 q5_1 q5_0 q4_1 q4_0; do
    "$sotto" quantize "$f16" "$work/$m-$t.bin" "$t" 2>/dev/null
    check "$work/$m-$t.bin" "$m" "$t"
    rm -f "$work/$m-$t.bin"
  done
  rm -f "$f16"
done

SOTTO_MEL_FILTERS_NPZ="$npz" cargo test --release -p sotto-quant --test ggml_files \
  matches_whisper_cpp_quantizer_md5 -- --nocapture
exit $status
