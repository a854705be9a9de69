#!/usr/bin/env bash
# The one check to run on a GPU machine. That machine has no Rust toolchain, so the
# binaries are built here and carried over.
#
# On the build machine (needs cargo; CUDA is not needed, libcuda/libnvrtc load at run time):
#     scripts/gpu-check.sh build            # writes target/gpu-check/ (stripped binaries, sotto xz-packed)
# then carry `target/gpu-check` to the GPU machine (it is under the ignored /target; with the
# device tool: carry ["target/gpu-check"]) and run there, from the repo root:
#     scripts/gpu-check.sh                  # results under $OUT (default ./gpu-check-out)
#
# base: the issue's second real model, in a call of its own (the transfer holds one model):
#     scripts/gpu-check.sh build base       # writes target/gpu-check-base/ (sotto, base q4_0, both xz)
#     scripts/gpu-check.sh base             # carry ["target/gpu-check-base"]; about 2 minutes
# Run it right after the first call, while the machine is still warm (30 s), or on its own.
#
# What comes back: summary.txt (every check's verdict, the clips' WER table, the benches as
# one table) and logs.tar.gz (every log), since the device tool returns at most 8 files.
#
# libnvrtc is part of the CUDA toolkit, not the driver. If the GPU machine lacks it, put
# libnvrtc.so.* (and libnvrtc-builtins.so.*) of the driver's CUDA major version (a newer
# minor version works: the kernels are compiled to machine code, not PTX) in
# target/gpu-check/nvrtc/ (e.g. from the nvidia-cuda-nvrtc wheel); this script adds that
# folder to LD_LIBRARY_PATH.
#
# What it checks: the driver and libraries it finds, every sotto-cuda test with
# SOTTO_REQUIRE_CUDA=1 (so a skip is a failure: each kernel of the conformance table must run
# on the GPU and match the CPU by normalised MSE; CudaSession must match
# sotto_model::Session's encoder output and logits on synthetic models of tiny.en's shapes,
# in f32, f16 and ggml block types, with decoder steps as CUDA graphs), and the `sotto`
# binary's --device handling with a GPU present: jfk transcribed with --device cuda must
# equal the CPU's transcript, `sotto serve --device cuda` with two GPU sessions of one model
# must answer four concurrent clients with the CPU's text (scripts/serve-smoke), and
# `sotto bench --device cuda` is recorded with a decoder step's op groups (also with graphs
# off, the encoder's fusions or split attention off, and cuBLAS's, the flash and the
# one-row attention in place of the tensor-core kernel, and for small, medium and large-v3
# with random weights), the shared clips (below), and compute-sanitizer's memcheck and racecheck
# where the toolkit has it. The host emulation of the kernels (SOTTO_SKIP_EMULATION) is not run
# there: it runs on every build machine. Exit status 0 only when everything passed. The
# steps run most important first and all within GPU_CHECK_SECONDS (480; base: 200): a step that would
# not fit is skipped and noted, and counts as a failure.
#
# Real weights: the device transfer holds 64 MiB in all, and tiny.en's f16 model.bin is
# 75 MB, so the build mode carries tiny.en quantized to q4_0 (about 23 MB) as
# cache/models/ggml-tiny.en.bin when it fits, and the check points SOTTO_CACHE_DIR there.
# Without it the tiny.en test says "skipped" (logged in the summary), nothing fails.
#
# The shared clips (../shared, or $SOTTO_SHARED_DIR) travel as clips.tar.xz: each is
# transcribed on the CPU (the f32 reference encoder) and on the GPU by scripts/wer, which
# reports both WERs and how many clips read exactly alike (the issue's "transcripts of the
# shared clips equal the CPU's"); English clips only for tiny.en, all with base.
set -uo pipefail

mode=full
[[ "${1:-}" == base || "${2:-}" == base ]] && mode=base
BIN=target/gpu-check
[[ $mode == base ]] && BIN=target/gpu-check-base
SHARED="${SOTTO_SHARED_DIR:-$(cd "$(dirname "$0")/.." && pwd)/../shared}"

# The whole transfer (tracked files + the carried folder) must stay under the device
# tool's 64 MiB; 63 MiB leaves room (base's bundle came to 63.1 MB, and travelled).
fits() {
    local tracked total
    tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
    total=$((tracked + $(du -sb "$BIN" | cut -f1)))
    echo "transfer: $total bytes"
    ((total <= 63 * 1024 * 1024))
}

pack_clips() {
    if [[ -f "$SHARED/data/clips/real/manifest.tsv" ]]; then
        tar -C "$SHARED" -cJf "$BIN/clips.tar.xz" data/clips/real data/clips/synth
    else
        echo "note: no shared clips at $SHARED; the clips check will fail there"
    fi
}

if [[ "${1:-}" == build && $mode == base ]]; then
    set -e
    rm -rf "$BIN" && mkdir -p "$BIN/cache/models"
    cargo build --release --features cuda -p sotto-cli
    # Compressed: with base q4_0 (about 45 MB) the plain binary would not fit.
    strip --strip-debug -o "$BIN/sotto" "${CARGO_TARGET_DIR:-target}/release/sotto"
    xz -9 "$BIN/sotto"
    "${CARGO_TARGET_DIR:-target}/release/sotto" quantize base "$BIN/cache/models/ggml-base.bin" q4_0 >/dev/null
    # xz-packed too (46 MB to 38: the transfer had grown past 63 MiB); unpacked there.
    xz -6 -T2 "$BIN/cache/models/ggml-base.bin"
    pack_clips
    ls -lR "$BIN"
    fits || { echo "error: target/gpu-check-base is too big to carry" >&2; exit 1; }
    exit 0
fi

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
' | while read -r name exe; do
        # The host emulation of the kernels (and tiny.en through it) is for machines
        # without a GPU.
        [[ "$name" == emulated || "$name" == golden ]] || cp "$exe" "$BIN/test-$name"
    done
    strip --strip-debug "$BIN"/* 2>/dev/null || true
    # Compressed, as base's (16 MB to ~4.5): room for the q4_0 tiny.en and the VAD.
    xz -9 "$BIN/sotto"
    host_sotto="${CARGO_TARGET_DIR:-target}/release/sotto"
    pack_clips
    # tiny.en as q4_0 when the whole transfer (tracked files + this folder) stays < 63 MiB.
    models="$BIN/cache/models"
    mkdir -p "$models"
    if "$host_sotto" quantize tiny.en "$models/ggml-tiny.en.bin" q4_0 >/dev/null; then
        if ! fits; then
            echo "note: without the q4_0 tiny.en the transfer is too big; dropped it"
            rm -rf "$BIN/cache"
        fi
        # The VAD's weights too (1.2 MB; a VAD run fetches them), for the batched check,
        # where they still fit.
        vad="${SOTTO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sotto}/models/silero-vad-v6"
        [[ -d "$vad" ]] || "$host_sotto" transcribe --vad --no-progress samples/jfk.wav >/dev/null 2>&1 || true
        if [[ -d "$models" && -d "$vad" ]]; then
            cp -r "$vad" "$models/"
            fits || { echo "note: no room for the VAD; the batched check will fail"; rm -rf "$models/silero-vad-v6"; }
        fi
    else
        echo "note: could not quantize tiny.en; the tiny.en test will skip"
        rm -rf "$BIN/cache"
    fi
    ls -lR "$BIN"
    du -sh "$BIN"
    exit 0
fi

OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
[[ -d "$BIN/nvrtc" ]] && export LD_LIBRARY_PATH="$PWD/$BIN/nvrtc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# cuBLAS and NVRTC ship with the toolkit, not the driver: where the loader does not know
# them, add the toolkit's and the Python wheels' (PyTorch's nvidia-*) folders.
for lib in libcublas.so libnvrtc.so; do
    ldconfig -p | grep -q "$lib" && continue
    for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
        $(python3 -c 'import nvidia; print(*[p + "/cu13/lib" for p in nvidia.__path__])' 2>/dev/null); do
        if compgen -G "$dir/$lib.*" >/dev/null; then
            export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir"
            break
        fi
    done
done
[[ -d "$BIN/cache" ]] && export SOTTO_CACHE_DIR="$PWD/$BIN/cache"
export SOTTO_REQUIRE_CUDA=1
# The conformance table's emulated half runs on every build machine; here the GPU half counts.
export SOTTO_SKIP_EMULATION=1
failed=0
pass() { echo "PASS $*" | tee -a "$OUT/summary.txt"; }
fail() { echo "FAIL $*" | tee -a "$OUT/summary.txt"; failed=1; }
: >"$OUT/summary.txt"
# The device tool returns at most 8 files from $OUT: on exit, every file but the summary
# goes into one archive.
pack() {
    (
        cd "$OUT" || exit
        files=()
        for f in *; do [[ $f == summary.txt || $f == logs.tar.gz ]] || files+=("$f"); done
        ((${#files[@]})) && tar -czf logs.tar.gz "${files[@]}" && rm -rf "${files[@]}"
    )
}
trap pack EXIT
# The whole check fits in GPU_CHECK_SECONDS (default 480, base 200: the device tool's calls
# end at 600 s, and a session's 15 device minutes must hold both calls and a machine's
# start), most important first. `within N` prints the timeout for a step that may take N
# seconds, cut to what is left; with under 30 s left it notes the skip and fails, and
# the step is not run (a hung kernel costs its own timeout, not the rest of the check).
budget=${GPU_CHECK_SECONDS:-$([[ $mode == base ]] && echo 200 || echo 480)}
deadline=$((SECONDS + budget))
within() {
    local left=$((deadline - SECONDS))
    if ((left < 30)); then
        echo "NOTE out of time ($budget s): skipped $2" >>"$OUT/summary.txt"
        return 1
    fi
    echo $((left < $1 ? left : $1))
}

# The benches as one table (size and switch × encoder, decoder token), for the README.
bench_table() {
    command -v python3 >/dev/null || return
    python3 - "$OUT" >>"$OUT/summary.txt" <<'PY' || echo "NOTE no bench table" >>"$OUT/summary.txt"
import pathlib, re, sys
rows = []
for f in sorted(pathlib.Path(sys.argv[1]).glob("bench-cuda*.txt")):
    t = f.read_text(errors="replace")
    enc = re.search(r"^encoder / window\s+([\d.]+) ms\s+\(best run ([\d.]+) ms", t, re.M)
    tok = re.search(r"^decoder / token\s+([\d.]+) ms", t, re.M)
    beam = re.search(r"^decoder / step\s+([\d.]+) ms\s+\(batch 5:", t, re.M)
    moved = re.search(r"^decoder / step\s+([\d.]+) ms\s+\(batch 5, the cache reordered", t, re.M)
    how = re.search(r"^  encoder: (.*)$", t, re.M)
    steps = re.search(r"^  decoder: (.*)$", t, re.M)
    name = f.stem.removeprefix("bench-cuda").removeprefix("-random-").removeprefix("-") or "tiny.en q4_0 (carried)"
    cell = lambda m, i=1: m.group(i) if m else "-"
    rows.append(f"| {name} | {cell(enc)} | {cell(enc, 2)} | {cell(tok)} | {cell(beam)} | {cell(moved)} | {cell(how)} | {cell(steps)} |")
print("--- benches (ms)\n| run | encoder / window | best | decoder / token | beam-5 step | beam-5 step after a reorder | encoder ran | decoder ran |\n|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
# The issue's bar: whisper.cpp's encoder per window on an RTX 5090 with flash attention
# (large-v2's shapes are large-v3's but for 80 mels), and 0.3 ms per greedy token for tiny
# and base; each size's best run among its variants.
bars = {"tiny": (1.29, 0.3), "base": (2.15, 0.3), "large-v3": (24.7, None)}
print("--- the bar (best encoder run, median decoder token; ms)")
for size, (enc_bar, tok_bar) in bars.items():
    best = []
    for f in pathlib.Path(sys.argv[1]).glob(f"bench-cuda-random-{size}*.txt"):
        t = f.read_text(errors="replace")
        enc = re.search(r"^encoder / window\s+[\d.]+ ms\s+\(best run ([\d.]+) ms", t, re.M)
        tok = re.search(r"^decoder / token\s+([\d.]+) ms", t, re.M)
        tag = f.stem.removeprefix(f"bench-cuda-random-{size}").removeprefix("-") or "default"
        if enc:
            best.append((float(enc.group(1)), float(tok.group(1)) if tok else None, tag))
    if not best:
        print(f"{size}: no bench")
        continue
    enc, _, tag = min(best)
    toks = [(t, g) for _, t, g in best if t is not None]
    line = f"{size}: encoder {enc} ms ({tag}) vs {enc_bar}: {'met' if enc <= enc_bar else 'NOT met'}"
    if tok_bar is not None and toks:
        tok, g = min(toks)
        line += f"; decoder token {tok} ms ({g}) vs {tok_bar}: {'met' if tok <= tok_bar else 'NOT met'}"
    print(line)
PY
}

finish() {
    grep -q "^NOTE out of time" "$OUT/summary.txt" && failed=1
    echo "--- summary in $OUT/summary.txt (logs in logs.tar.gz)"
    exit $failed
}

{
    nvidia-smi || echo "nvidia-smi not available"
    echo "--- libraries"
    ldconfig -p | grep -E 'libcuda\.so|libnvrtc|libcublas' || echo "(none in ldconfig)"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
} >"$OUT/env.txt" 2>&1

# The shared clips on the CPU and on the GPU (scripts/wer), for the model file $1 named $2,
# with beam size $3, the GPU at --encoder-precision $4: f32 (the whole model in f32, the
# quantized decoder products as the CPU's, bit for bit) must read every clip exactly as the
# CPU with its reference (f32) encoder; auto (f16, tensor cores) is reported, not judged.
CLIPS=""
# Unpacks the carried clips into $CLIPS once; false (after saying so) without them.
unpack_clips() {
    if [[ ! -f "$BIN/clips.tar.xz" ]]; then
        fail "$1: no clips.tar.xz under $BIN"
        return 1
    fi
    if [[ -z "$CLIPS" ]]; then
        CLIPS=$(mktemp -d)
        tar -C "$CLIPS" -xJf "$BIN/clips.tar.xz" 2>/dev/null ||
            python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
                "$BIN/clips.tar.xz" "$CLIPS"
    fi
}

# Batched transcription (faster-whisper's batch_size) of the longest shared clip with the
# model file $1: 8 windows decoded together on the GPU against the CPU's batched run, both
# at f32 (reported: an 8-bit code flip may part them), and the GPU's wall time batched
# against one window at a time.
batched_check() {
    local model=$1 tag=batched-$2 clip limit t0 t1 t2
    unpack_clips "$tag" || return
    clip=$(ls -S "$CLIPS"/data/clips/*/*.wav 2>/dev/null | head -1)
    limit=$(within 150 "$tag") || return
    local run=(timeout "$limit" "$SOTTO" transcribe -m "$model" --no-progress -f txt)
    if "${run[@]}" --batch-size 8 --encoder-precision f32 "$clip" >"$OUT/$tag-cpu.txt" 2>&1 &&
        "${run[@]}" --device cuda --batch-size 8 --encoder-precision f32 "$clip" \
            >"$OUT/$tag-cuda-f32.txt" 2>"$OUT/$tag-cuda-f32.err" &&
        t0=$(date +%s.%N) &&
        "${run[@]}" --device cuda --batch-size 8 "$clip" >"$OUT/$tag-cuda.txt" 2>&1 &&
        t1=$(date +%s.%N) &&
        "${run[@]}" --device cuda --vad "$clip" >"$OUT/$tag-cuda-seq.txt" 2>&1 &&
        t2=$(date +%s.%N); then
        local same="differs from"
        cmp -s "$OUT/$tag-cpu.txt" "$OUT/$tag-cuda-f32.txt" && same="equals"
        pass "$tag: $(basename "$clip"), the GPU's f32 batch of 8 $same the CPU's;" \
            "wall $(python3 -c "import sys; a, b, c = map(float, sys.argv[1:]); print(f'{b - a:.2f} s batched, {c - b:.2f} s one window at a time')" "$t0" "$t1" "$t2")"
    else
        fail "$tag: $(tail -3 "$OUT/$tag-cuda-f32.err" 2>/dev/null)"
    fi
}

clips_check() {
    local model=$1 name=$2 beam=$3 gpu=$4 tag="clips-$2-b$3-$4" limit same n m
    unpack_clips "$tag" || return
    limit=$(within 240 "$tag") || return
    if SOTTO_BIN="$SOTTO" SOTTO_SHARED_DIR="$CLIPS" timeout "$limit" python3 scripts/wer \
        -m "$name" --model-file "$model" --devices cpu,cuda --cpu-encoder f32 --gpu-encoder "$gpu" \
        --beam-size "$beam" --threads "$(nproc)" --show-diffs --tsv "$OUT/$tag.tsv" \
        >"$OUT/$tag.txt" 2>&1 && same=$(grep -o '[0-9]*/[0-9]* clips identical' "$OUT/$tag.txt"); then
        n=${same%%/*} m=${same#*/}
        if [[ $n == "${m%% *}" ]]; then
            pass "$tag: every clip reads on the GPU as on the CPU ($same)"
        elif [[ $gpu != f32 ]]; then
            pass "$tag: reported, f16 is not the CPU's arithmetic ($same)"
        else
            fail "$tag: not every clip reads on the GPU as on the CPU ($same)"
        fi
    else
        fail "$tag (see $tag.txt): $(tail -3 "$OUT/$tag.txt")"
    fi
    sed 's/^/    /' "$OUT/$tag.txt" >>"$OUT/summary.txt"
}

# The carried binary (and base's model) is xz-compressed (the transfer's 64 MiB); unpacked
# once, by Python's lzma, since the GPU machine may lack xz.
unpack() {
    [[ ! -f "$1" && -f "$1.xz" ]] || return 0
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$1.xz" "$1"
}
SOTTO="$BIN/sotto"
unpack "$SOTTO" && [[ -f "$SOTTO" ]] && chmod +x "$SOTTO"
unpack "$BIN/cache/models/ggml-base.bin"

if [[ $mode == base ]]; then
    MODEL="$BIN/cache/models/ggml-base.bin"
    if [[ -x "$SOTTO" && -f "$MODEL" ]]; then
        clips_check "$MODEL" base 5 f32
        limit=$(within 120 "bench base on cuda") &&
            timeout "$limit" "$SOTTO" bench --device cuda -m "$MODEL" --runs 3 \
                >"$OUT/bench-cuda-base-q4_0.txt" 2>&1 &&
            pass "sotto bench --device cuda -m base q4_0: $(tr '\n' ';' <"$OUT/bench-cuda-base-q4_0.txt")" ||
            fail "sotto bench --device cuda -m base q4_0: $(tail -3 "$OUT/bench-cuda-base-q4_0.txt")"
        limit=$(within 60 "bench base on cuda, SOTTO_CUDA_Q8=0") &&
            SOTTO_CUDA_Q8=0 timeout "$limit" "$SOTTO" bench --device cuda -m "$MODEL" --runs 3 \
                >"$OUT/bench-cuda-base-q4_0-q8-off.txt" 2>&1 &&
            pass "SOTTO_CUDA_Q8=0 sotto bench --device cuda -m base q4_0: $(tr '\n' ';' <"$OUT/bench-cuda-base-q4_0-q8-off.txt")" ||
            fail "SOTTO_CUDA_Q8=0 sotto bench --device cuda -m base q4_0: $(tail -3 "$OUT/bench-cuda-base-q4_0-q8-off.txt")"
        clips_check "$MODEL" base 1 f32
    else
        fail "no sotto or base model under $BIN (run 'scripts/gpu-check.sh build base' first)"
    fi
    bench_table
    finish
fi

shopt -s nullglob
tests=("$BIN"/test-*)
[[ ${#tests[@]} -gt 0 ]] || fail "no test binaries under $BIN (run 'scripts/gpu-check.sh build' first)"
for t in "${tests[@]}"; do
    name=$(basename "$t")
    limit=$(within 150 "$name") || continue
    if timeout "$limit" "$t" --test-threads=1 --nocapture >"$OUT/$name.log" 2>&1; then
        pass "$name: $(grep -E '^test result' "$OUT/$name.log" | tail -1)"
        grep -E '^skipped' "$OUT/$name.log" | sort | uniq -c | sed "s/^/    $name: /" |
            tee -a "$OUT/summary.txt"
    else
        fail "$name (see $name.log)"
    fi
done

if [[ -x "$SOTTO" ]]; then
    # The whole pipeline on the GPU: jfk with the carried model must read as on the CPU.
    MODEL="$BIN/cache/models/ggml-tiny.en.bin"
    if [[ -f "$MODEL" ]]; then
        "$SOTTO" transcribe --device cpu -m "$MODEL" --no-progress samples/jfk.wav \
            >"$OUT/jfk-cpu.txt" 2>"$OUT/jfk-cpu.err"
        rc=124
        limit=$(within 120 "jfk on cuda") &&
            timeout "$limit" "$SOTTO" transcribe --device cuda -m "$MODEL" --no-progress \
                --timings samples/jfk.wav >"$OUT/jfk-cuda.txt" 2>"$OUT/jfk-cuda.err"
        rc=$?
        if [[ $rc -eq 0 ]] && [[ -s "$OUT/jfk-cuda.txt" ]] && cmp -s "$OUT/jfk-cpu.txt" "$OUT/jfk-cuda.txt"; then
            pass "sotto --device cuda transcribes jfk as the CPU does: $(cat "$OUT/jfk-cuda.txt")"
        else
            fail "sotto --device cuda jfk (rc $rc): $(head -c 300 "$OUT/jfk-cuda.txt") | $(head -3 "$OUT/jfk-cuda.err")"
        fi
        # Word timing: the alignment pass on the GPU; words and times land beside the CPU's.
        "$SOTTO" transcribe --device cpu -m "$MODEL" --no-progress --word-timestamps -f json \
            samples/jfk.wav >"$OUT/jfk-words-cpu.json" 2>"$OUT/jfk-words-cpu.err"
        if limit=$(within 120 "word timestamps on cuda") &&
            timeout "$limit" "$SOTTO" transcribe --device cuda -m "$MODEL" --no-progress \
            --word-timestamps -f json samples/jfk.wav >"$OUT/jfk-words-cuda.json" \
            2>"$OUT/jfk-words-cuda.err" && grep -q '"words"' "$OUT/jfk-words-cuda.json"; then
            words() { python3 -c 'import json,sys; print(" ".join("%s@%.2f" % (w["word"].strip(), w["start"]) for s in json.load(open(sys.argv[1]))["segments"] for w in s["words"]))' "$1" 2>&1; }
            pass "word timestamps on cuda: $(words "$OUT/jfk-words-cuda.json") | cpu: $(words "$OUT/jfk-words-cpu.json")"
        else
            fail "word timestamps on cuda: $(head -3 "$OUT/jfk-words-cuda.err")"
        fi
        # Shorter windows (whisper.cpp's audio_ctx): jfk (11 s) fits one of 750 positions
        # (15 s), and must read as on the CPU with the same windows, both in f32 (the GPU's
        # closest to the CPU: a short window's text is less sure, so f16 may flip a word).
        "$SOTTO" transcribe --device cpu -m "$MODEL" --no-progress --audio-ctx 750 \
            --encoder-precision f32 samples/jfk.wav >"$OUT/jfk-ac-cpu.txt" 2>"$OUT/jfk-ac-cpu.err"
        if limit=$(within 60 "audio_ctx on cuda") &&
            timeout "$limit" "$SOTTO" transcribe --device cuda -m "$MODEL" --no-progress \
                --audio-ctx 750 --encoder-precision f32 samples/jfk.wav \
                >"$OUT/jfk-ac-cuda.txt" 2>"$OUT/jfk-ac-cuda.err" &&
            [[ -s "$OUT/jfk-ac-cuda.txt" ]] && cmp -s "$OUT/jfk-ac-cpu.txt" "$OUT/jfk-ac-cuda.txt"; then
            pass "--audio-ctx 750 on cuda reads jfk as the CPU does: $(cat "$OUT/jfk-ac-cuda.txt")"
        else
            fail "--audio-ctx 750 on cuda: $(head -c 300 "$OUT/jfk-ac-cuda.txt" 2>/dev/null) | cpu: $(head -c 300 "$OUT/jfk-ac-cpu.txt") | $(head -3 "$OUT/jfk-ac-cuda.err" 2>/dev/null)"
        fi
        # One model, several GPU sessions at once, through the HTTP server: concurrent
        # clients must each get the CPU's text.
        if limit=$(within 90 "serve on cuda") &&
            timeout "$limit" python3 scripts/serve-smoke "$SOTTO" "$MODEL" samples/jfk.wav \
                --device cuda --workers 2 --clients 4 >"$OUT/serve-cuda.txt" 2>&1; then
            pass "sotto serve --device cuda: $(tail -1 "$OUT/serve-cuda.txt")"
        else
            fail "sotto serve --device cuda: $(tail -3 "$OUT/serve-cuda.txt" 2>/dev/null)"
        fi
        # The shared clips, beam 5 (the default), on the CPU and the GPU.
        clips_check "$MODEL" tiny.en 5 f32
        limit=$(within 120 "bench on cuda") &&
            timeout "$limit" "$SOTTO" bench --device cuda -m "$MODEL" --runs 3 --encoder-ops \
                >"$OUT/bench-cuda.txt" 2>&1 &&
            pass "sotto bench --device cuda: $(tr '\n' ';' <"$OUT/bench-cuda.txt")" ||
            fail "sotto bench --device cuda: $(tail -3 "$OUT/bench-cuda.txt")"
        # The decoder's quantized products with f32 inputs, as before SOTTO_MMV_Q8.
        limit=$(within 60 "bench on cuda, SOTTO_CUDA_Q8=0") &&
            SOTTO_CUDA_Q8=0 timeout "$limit" "$SOTTO" bench --device cuda -m "$MODEL" --runs 3 \
                >"$OUT/bench-cuda-q8-off.txt" 2>&1 &&
            pass "SOTTO_CUDA_Q8=0 sotto bench --device cuda: $(tr '\n' ';' <"$OUT/bench-cuda-q8-off.txt")" ||
            fail "SOTTO_CUDA_Q8=0 sotto bench --device cuda: $(tail -3 "$OUT/bench-cuda-q8-off.txt")"
    else
        fail "no carried model at $MODEL"
    fi
    # Sizes we have no weights for, with random weights of their shapes (the encoder's
    # and a decoder step's cost do not depend on the values): the issue's bar per size.
    # tiny and base too: the carried tiny.en is q4_0 (its encoder dequantizes every weight
    # per call), while the bar is for the f16 models these stand in for.
    bench_random() {  # SIZE [VAR=VALUE]: one size, in the environment given
        local size=$1 var=${2:-} tag=$1${2:+-$2} limit
        limit=$(within 150 "bench --random-weights $tag") || return
        env $var timeout "$limit" "$SOTTO" bench --device cuda --random-weights "$size" --runs 3 \
            --tokens 32 --encoder-ops >"$OUT/bench-cuda-random-$tag.txt" 2>&1 &&
            pass "sotto bench --device cuda --random-weights $tag: $(tr '\n' ';' <"$OUT/bench-cuda-random-$tag.txt")" ||
            fail "sotto bench --device cuda --random-weights $tag: $(tail -3 "$OUT/bench-cuda-random-$tag.txt")"
    }
    bench_random tiny
    bench_random base
    # whisper-stream's 10 s windows (500 positions): the encoder's and a step's times.
    if limit=$(within 90 "bench --audio-ctx 500"); then
        timeout "$limit" "$SOTTO" bench --device cuda --random-weights tiny --runs 3 --tokens 32 \
            --audio-ctx 500 >"$OUT/bench-cuda-random-tiny-ac500.txt" 2>&1 &&
            pass "sotto bench --device cuda --random-weights tiny --audio-ctx 500: $(tr '\n' ';' <"$OUT/bench-cuda-random-tiny-ac500.txt")" ||
            fail "sotto bench --device cuda --random-weights tiny --audio-ctx 500: $(tail -3 "$OUT/bench-cuda-random-tiny-ac500.txt")"
    fi
    # Without the rows reduced on the GPU (greedy and beam steps download whole rows for
    # the host to reduce), with a step's copies in and out queued around its graph instead
    # of inside it, without the fused launches (the encoder's, and a decoder step's norms in its
    # products and merges in its split attention), without programmatic dependent launch,
    # without split attention (decoder steps), without CUDA graphs, and with cuBLAS's
    # products or the other kernels in place of the tensor-core attention (encoder; the
    # default where the GPU has it): what each gains, at the bar's sizes, the decoder's
    # first. The other attention paths must still read jfk as the CPU does.
    for var in SOTTO_CUDA_SHORTLIST=0 SOTTO_CUDA_GRAPH_COPIES=0 SOTTO_CUDA_FUSE=0 SOTTO_CUDA_PDL=0 SOTTO_CUDA_SPLIT=0 \
        SOTTO_CUDA_GRAPHS=0 SOTTO_CUDA_ATTENTION=blas SOTTO_CUDA_ATTENTION=flash SOTTO_CUDA_ATTENTION=rows; do
        bench_random tiny "$var"
        bench_random base "$var"
    done
    for kind in blas flash; do
        if [[ -f "$MODEL" ]] && limit=$(within 120 "$kind jfk") &&
            SOTTO_CUDA_ATTENTION=$kind timeout "$limit" "$SOTTO" transcribe --device cuda \
                -m "$MODEL" --no-progress samples/jfk.wav >"$OUT/jfk-cuda-$kind.txt" 2>&1 &&
            cmp -s "$OUT/jfk-cpu.txt" "$OUT/jfk-cuda-$kind.txt"; then
            pass "SOTTO_CUDA_ATTENTION=$kind transcribes jfk as the CPU does"
        else
            fail "SOTTO_CUDA_ATTENTION=$kind jfk: $(head -c 300 "$OUT/jfk-cuda-$kind.txt" 2>/dev/null)"
        fi
    done
    # The large sizes, and large-v3 on cuBLAS's attention: there the scores that the cuBLAS
    # path writes, softmaxes and reads back (20 heads × 1500² f32 per layer, 32 layers)
    # weigh most, so that is where the choice of default matters most.
    for size in small medium large-v3; do
        bench_random "$size"
    done
    bench_random large-v3 SOTTO_CUDA_ATTENTION=blas
    # Greedy decoding (one row per decoder step) over the clips too.
    [[ -f "$MODEL" ]] && clips_check "$MODEL" tiny.en 1 f32
    [[ -f "$MODEL" ]] && clips_check "$MODEL" tiny.en 1 auto
    [[ -f "$MODEL" ]] && batched_check "$MODEL" tiny.en
    # Where the GPU's time goes, by kernel, where the toolkit has Nsight Systems: what the
    # next speed change should aim at. Only the CSV summaries are kept (the report is big).
    # The decoder's steps run as CUDA graphs: --cuda-graph-trace=node times each kernel in
    # them (by default a graph is one opaque launch).
    # The kernels and copies that take most of the profiled time, from nsys's CSVs (their
    # column names vary by version: matched by what they start with).
    nsys_top() {
        python3 - "$1" <<'PY' || echo "    (no nsys table)"
import csv, glob, sys
for path in sorted(glob.glob(sys.argv[1] + "_cuda_gpu_*.csv")):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        continue
    col = lambda r, *names: next((v for k, v in r.items() if k and k.startswith(names)), "")
    print(f"    {path.rsplit('/', 1)[-1]}: share, count, mean µs, name")
    for r in rows[:12]:
        try:
            mean = float(col(r, "Avg")) / 1000
        except ValueError:
            mean = float("nan")
        print(f"      {col(r, 'Time'):>6}%  {col(r, 'Instances', 'Count'):>7}  {mean:9.2f}  {col(r, 'Name', 'Operation')[:90]}")
PY
    }
    nsys=$(command -v nsys || compgen -G "/usr/local/cuda*/bin/nsys" || compgen -G "/opt/nvidia/nsight-systems/*/bin/nsys" | head -1)
    nsys=${nsys%%$'\n'*}
    if [[ -n "$nsys" ]]; then
        for size in tiny base; do
            rep="$OUT/nsys-$size"
            limit=$(within 150 "nsys $size") || break
            if timeout "$limit" "$nsys" profile --force-overwrite true --cuda-graph-trace=node -o "$rep" "$SOTTO" bench \
                --device cuda --random-weights "$size" --runs 3 --tokens 32 >"$rep.log" 2>&1 &&
                timeout 60 "$nsys" stats --force-export true --format csv -o "$rep" \
                    --report cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,cuda_api_sum "$rep.nsys-rep" >>"$rep.log" 2>&1; then
                pass "nsys $size: $(ls "$rep"_*.csv 2>/dev/null | xargs -n1 basename | tr '\n' ' ')"
                nsys_top "$rep" >>"$OUT/summary.txt"
            else
                # A diagnostic, not a check: noted, the run does not fail for it.
                echo "NOTE nsys $size failed: $(tail -3 "$rep.log")" | tee -a "$OUT/summary.txt"
            fi
            rm -f "$rep.nsys-rep" "$rep.sqlite"
        done
    else
        echo "NOTE nsys not found: no per-kernel profile" | tee -a "$OUT/summary.txt"
    fi
    # compute-sanitizer, where the toolkit has it: out-of-bounds or misaligned accesses
    # (memcheck: the encoder direct and as a graph, decoder steps, the q4_0 mat-vec kernels)
    # and shared-memory races (racecheck: the tensor-core and f32 flash kernels, and the
    # decoder's split attention), which a run can survive while reading wrong bytes. Any
    # error it reports fails the check. racecheck instruments sotto's kernels alone:
    # through cuBLAS's it ran past 120 s (and flagged its internals, not ours).
    sanitizer=$(command -v compute-sanitizer || compgen -G "/usr/local/cuda*/bin/compute-sanitizer" | head -1)
    sanitize() {  # TAG TOOL [VAR=VALUE] -- sotto args
        local tag=$1 tool=$2 var=${3:-} limit only=()
        shift 4
        [[ $tool == racecheck ]] && only=(--kernel-name kns=sotto_)
        limit=$(within 120 "compute-sanitizer $tag") || return
        env $var timeout "$limit" "$sanitizer" --tool "$tool" "${only[@]}" --error-exitcode 86 \
            "$SOTTO" "$@" >"$OUT/sanitize-$tag.log" 2>&1
        local rc=$? found
        found=$(grep -m1 'ERROR SUMMARY' "$OUT/sanitize-$tag.log" || tail -2 "$OUT/sanitize-$tag.log")
        case $rc in
            0) pass "compute-sanitizer $tag: $found" ;;
            # Instrumented kernels run many times slower: a timeout says nothing of the code.
            124) echo "NOTE compute-sanitizer $tag ran past ${limit} s: $found" | tee -a "$OUT/summary.txt" ;;
            *) fail "compute-sanitizer $tag (rc $rc, see sanitize-$tag.log): $found" ;;
        esac
    }
    if [[ -n "$sanitizer" ]]; then
        small=(bench --device cuda --random-weights tiny --runs 2 --tokens 4)
        sanitize memcheck-tiny memcheck "" -- "${small[@]}"
        [[ -f "$MODEL" ]] && sanitize memcheck-jfk memcheck "" -- transcribe --device cuda \
            -m "$MODEL" --no-progress samples/jfk.wav
        sanitize racecheck-mma racecheck SOTTO_CUDA_ATTENTION=mma -- "${small[@]}"
        sanitize racecheck-flash racecheck SOTTO_CUDA_ATTENTION=flash -- "${small[@]}"
    else
        echo "NOTE compute-sanitizer not found: no memory or race check" | tee -a "$OUT/summary.txt"
    fi
    # A GPU the driver does not have is a one-line error that lists the ones it has.
    if "$SOTTO" transcribe --device cuda:99 --no-progress samples/jfk.wav >"$OUT/device-99.log" 2>&1; then
        fail "sotto --device cuda:99 ran"
    elif grep -q "^error: --device cuda:99: the CUDA driver sees" "$OUT/device-99.log"; then
        pass "sotto --device cuda:99: $(head -1 "$OUT/device-99.log")"
    else
        fail "sotto --device cuda:99: $(head -3 "$OUT/device-99.log")"
    fi
    # auto names the GPU it takes, then goes on (and fails on the missing model).
    "$SOTTO" bench --device auto -m /nonexistent-model >"$OUT/device-auto.log" 2>&1
    if grep -q "^device: using GPU 0: " "$OUT/device-auto.log"; then
        pass "sotto --device auto: $(head -1 "$OUT/device-auto.log")"
    else
        fail "sotto --device auto: $(head -3 "$OUT/device-auto.log")"
    fi
else
    fail "no sotto binary at $SOTTO"
fi

bench_table
finish
