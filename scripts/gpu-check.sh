#!/usr/bin/env bash
# The one check to run on a GPU machine. That machine has no Rust toolchain, so the
# binaries are built here and carried over.
#
# On the build machine (needs cargo; CUDA is not needed, libcuda/libnvrtc load at run time):
#     scripts/gpu-check.sh build            # writes target/gpu-check/ (stripped binaries)
# then carry `target/gpu-check` to the GPU machine (it is under the ignored /target; with the
# device tool: carry ["target/gpu-check"]) and run there, from the repo root:
#     scripts/gpu-check.sh                  # results under $OUT (default ./gpu-check-out)
#
# libnvrtc is part of the CUDA toolkit, not the driver. If the GPU machine lacks it, put
# libnvrtc.so.* (and libnvrtc-builtins.so.*) of a version no newer than the driver's CUDA
# version in target/gpu-check/nvrtc/ (e.g. from the nvidia-cuda-nvrtc wheel); this script
# adds that folder to LD_LIBRARY_PATH.
#
# What it checks: the driver and libraries it finds, every sotto-cuda test with
# SOTTO_REQUIRE_CUDA=1 (so a skip is a failure: each kernel must run on the GPU and match the
# CPU by normalised MSE), and the `sotto` binary's --device handling with a GPU present.
# Exit status 0 only when everything passed.
set -uo pipefail

BIN=target/gpu-check

if [[ "${1:-}" == build ]]; then
    set -e
    rm -rf "$BIN" && mkdir -p "$BIN"
    cargo build --release --features cuda -p sotto-cli
    cp "${CARGO_TARGET_DIR:-target}/release/sotto" "$BIN/sotto"
    # Test executables of sotto-cuda (unit tests and conformance), by cargo's own report.
    cargo test --release -p sotto-cuda --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])
' | while read -r name exe; do cp "$exe" "$BIN/test-$name"; done
    strip --strip-debug "$BIN"/* 2>/dev/null || true
    ls -l "$BIN"
    du -sh "$BIN"
    exit 0
fi

OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
[[ -d "$BIN/nvrtc" ]] && export LD_LIBRARY_PATH="$PWD/$BIN/nvrtc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SOTTO_REQUIRE_CUDA=1
failed=0
pass() { echo "PASS $*" | tee -a "$OUT/summary.txt"; }
fail() { echo "FAIL $*" | tee -a "$OUT/summary.txt"; failed=1; }
: >"$OUT/summary.txt"

{
    nvidia-smi || echo "nvidia-smi not available"
    echo "--- libraries"
    ldconfig -p | grep -E 'libcuda\.so|libnvrtc' || echo "(none in ldconfig)"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
} >"$OUT/env.txt" 2>&1

shopt -s nullglob
tests=("$BIN"/test-*)
[[ ${#tests[@]} -gt 0 ]] || fail "no test binaries under $BIN (run 'scripts/gpu-check.sh build' first)"
for t in "${tests[@]}"; do
    name=$(basename "$t")
    if timeout 300 "$t" --test-threads=1 --nocapture >"$OUT/$name.log" 2>&1; then
        pass "$name: $(grep -E '^test result' "$OUT/$name.log" | tail -1)"
    else
        fail "$name (see $name.log)"
    fi
done

SOTTO="$BIN/sotto"
if [[ -x "$SOTTO" ]]; then
    # With a GPU present, --device cuda must refuse clearly (the model does not run on CUDA yet).
    "$SOTTO" transcribe --device cuda -m none x.wav >"$OUT/device-cuda.log" 2>&1
    rc=$?
    if [[ $rc -ne 0 ]] && grep -q "not implemented yet" "$OUT/device-cuda.log" &&
        [[ $(wc -l <"$OUT/device-cuda.log") -eq 1 ]]; then
        pass "sotto --device cuda: $(cat "$OUT/device-cuda.log")"
    else
        fail "sotto --device cuda (rc $rc): $(head -3 "$OUT/device-cuda.log")"
    fi
    # auto names the GPU, says it uses the CPU, then goes on (and fails on the missing model).
    "$SOTTO" bench --device auto -m /nonexistent-model >"$OUT/device-auto.log" 2>&1
    if grep -q "^device: found GPU .*using the CPU" "$OUT/device-auto.log"; then
        pass "sotto --device auto: $(head -1 "$OUT/device-auto.log")"
    else
        fail "sotto --device auto: $(head -3 "$OUT/device-auto.log")"
    fi
else
    fail "no sotto binary at $SOTTO"
fi

echo "--- summary in $OUT/summary.txt"
exit $failed
