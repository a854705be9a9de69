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
# shellcheck source=whisper-cli.sh
. "$(dirname "$0")/whisper-cli.sh"
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
