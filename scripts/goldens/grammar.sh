#!/usr/bin/env bash
# whisper.cpp's own transcripts under GBNF grammars, for tests/golden/wcpp_grammar.json.
#
# Builds whisper-cli 1.8.5 from the pywhispercpp 1.5.1 source package (PyPI; cmake and ninja
# from PyPI too) and runs it on tiny.en written as ggml by `sotto convert`, with each
# grammar and `-nt` (text only) or with timestamps. whisper-cli decodes with a grammar by
# beam search (5 beams; 1.8.5 draws each beam's candidates from the distribution).
#
# Usage: scripts/goldens/grammar.sh   (needs ../shared, target/release/sotto and the cached
#        tiny.en: sotto models fetch tiny.en; about 5 minutes on 2 cores)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SOTTO_SHARED_DIR:-$ROOT/../shared}
CACHE=${SOTTO_CACHE_DIR:-$HOME/.cache/sotto}
WORK=${WORK:-$ROOT/target/wcpp-grammar}
SOTTO=$ROOT/target/release/sotto
mkdir -p "$WORK"
cd "$WORK"
if [ ! -x whisper.cpp/build/bin/whisper-cli ]; then
  python3 -m venv tools
  tools/bin/pip install --quiet cmake ninja
  # The source package from PyPI's simple index (pip would try to build it).
  url=$(curl -fsS https://pypi.org/simple/pywhispercpp/ |
    grep -o 'https://[^"#]*pywhispercpp-1\.5\.1\.tar\.gz' | head -1)
  curl -fsS -o pywhispercpp-1.5.1.tar.gz "$url"
  echo "5df897e5dd9d9f16804fc937bd85b9f5880a0b29a55f8843585e0e03d76195e5  pywhispercpp-1.5.1.tar.gz" |
    sha256sum -c --quiet
  tar xzf pywhispercpp-1.5.1.tar.gz
  rm -rf whisper.cpp && mv pywhispercpp-1.5.1/whisper.cpp whisper.cpp
  PATH=$WORK/tools/bin:$PATH cmake -S whisper.cpp -B whisper.cpp/build -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DWHISPER_SDL2=OFF -DBUILD_SHARED_LIBS=OFF
  PATH=$WORK/tools/bin:$PATH cmake --build whisper.cpp/build --target whisper-cli -j2
fi
[ -f ggml-tiny.en.bin ] || "$SOTTO" convert "$CACHE/models/tiny.en" ggml-tiny.en.bin
declare -A GRAMMARS=(
  [lower]='root ::= [^A-Z]*'
  [nopunct]='root ::= [^,.?!]*'
  [colors]='root ::= " " ("Red" | "Green" | "Blue") "."'
)
cases=()
for name in lower nopunct colors; do
  printf '%s\n' "${GRAMMARS[$name]}" > "$name.gbnf"
  for clip in jfk lj050_0131 ldc93s1 new_home_in_the_stars; do
    for ts in false true; do
      flags=(-nt)
      [ "$ts" = true ] && flags=(-np -ojf -of out)
      [ "$ts" = true ] && [ "$name" != colors ] && continue
      text=$(whisper.cpp/build/bin/whisper-cli -m ggml-tiny.en.bin -t 2 -f "$SHARED/data/clips/real/$clip.wav" \
        --grammar "$name.gbnf" --grammar-rule root "${flags[@]}" 2>/dev/null | tr -d '\n')
      if [ "$ts" = true ]; then
        text=$(python3 -c 'import json; print("".join(s["text"] for s in json.load(open("out.json"))["transcription"]))')
      fi
      cases+=("$(python3 -c 'import json,sys; print(json.dumps({"name": sys.argv[1], "clip": sys.argv[2], "grammar": sys.argv[3], "timestamps": sys.argv[4] == "true", "text": sys.argv[5]}))' \
        "$name" "$clip" "${GRAMMARS[$name]}" "$ts" "$text")")
    done
  done
done
printf '%s\n' "${cases[@]}" | python3 -c '
import json, sys
cases = [json.loads(l) for l in sys.stdin]
doc = {"engine": "whisper-cli 1.8.5, beam 5 (its grammar default), tiny.en f16 ggml, 2 threads",
       "cases": cases}
json.dump(doc, open(sys.argv[1], "w"), indent=1, ensure_ascii=False)
open(sys.argv[1], "a").write("\n")
' "$ROOT/tests/golden/wcpp_grammar.json"
echo "wrote tests/golden/wcpp_grammar.json"
