# Sourced by the goldens scripts: builds whisper-cli 1.8.5 from the pywhispercpp 1.5.1 source
# package (PyPI, sha256-checked; cmake and ninja from PyPI) into $WORK once, writes tiny.en as
# ggml there (`sotto convert`), and leaves the shell in $WORK with ROOT, SHARED, CACHE and
# SOTTO set.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SOTTO_SHARED_DIR:-$ROOT/../shared}
CACHE=${SOTTO_CACHE_DIR:-$HOME/.cache/sotto}
WORK=${WORK:-$ROOT/target/whisper-cli}
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
