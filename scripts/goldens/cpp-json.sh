#!/usr/bin/env bash
# whisper.cpp's JSON output (`whisper-cli -oj` and `-ojf`) of jfk, for
# tests/golden/wcpp_json_jfk.json: what `sotto transcribe -f cpp-json` / `cpp-json-full`
# must match in shape (keys, their order, the model block) and, greedy, in segments.
#
# Usage: scripts/goldens/cpp-json.sh   (needs ../shared, target/release/sotto and the cached
#        tiny.en; builds whisper-cli once, about 5 minutes on 2 cores)
set -euo pipefail
# shellcheck source=whisper-cli.sh
. "$(dirname "$0")/whisper-cli.sh"
for kind in oj ojf; do
  # Greedy (-bs 1 -bo 1): whisper-cli's default beam search samples its candidates.
  whisper.cpp/build/bin/whisper-cli -m ggml-tiny.en.bin -t 2 -bs 1 -bo 1 -np \
    -f "$SHARED/data/clips/real/jfk.wav" "-$kind" -of "$kind" > /dev/null 2>&1
done
python3 - "$ROOT/tests/golden/wcpp_json_jfk.json" <<'PY'
import json, sys
doc = {
    "engine": "whisper-cli 1.8.5 -m ggml-tiny.en.bin (f16, written by sotto convert) -t 2 -bs 1 -bo 1 -f jfk.wav",
    "oj": json.load(open("oj.json")),
    "ojf": json.load(open("ojf.json")),
}
json.dump(doc, open(sys.argv[1], "w"), indent=1, ensure_ascii=False)
open(sys.argv[1], "a").write("\n")
PY
echo "wrote tests/golden/wcpp_json_jfk.json"
