#!/usr/bin/env bash
# Build llama.cpp's llama-server from the source vendored in PyPI's llama-cpp-python sdist
# (the same build tests/support/llamacpp.py does for the test suite), and print its path.
#
#   scripts/llama_server.sh                      CPU build, cached and reused
#   scripts/llama_server.sh --cuda               CUDA build for Hopper (sm_90)
#   scripts/llama_server.sh --trim-source DIR    copy only what the build needs (~10 MB) to
#                                                DIR, to carry to a machine without network
#   scripts/llama_server.sh --source DIR --cuda  build from such a copy (no pip download)
#
# Cache: $GPU_GOODPUT_CACHE (default ~/.cache/gpu-goodput-exporter)/llama-<version>/; a
# finished build (marker .build-ok or .build-cuda-ok) is reused. Needs cmake and a C++
# compiler (Debian: apt-get install -y cmake g++), plus the CUDA toolkit for --cuda.
set -euo pipefail

VERSION=0.3.36  # keep in step with tests/support/llamacpp.py
CACHE="${GPU_GOODPUT_CACHE:-$HOME/.cache/gpu-goodput-exporter}"
PYTHON="${PYTHON:-python3}"
JOBS="$(nproc 2>/dev/null || echo 2)"
CUDA=0
TRIM=""
SOURCE=""

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) CUDA=1 ;;
    --trim-source) TRIM="${2:?--trim-source needs a folder}"; shift ;;
    --source) SOURCE="${2:?--source needs a folder}"; shift ;;
    --version) VERSION="${2:?}"; shift ;;
    --jobs|-j) JOBS="${2:?}"; shift ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage 2 ;;
  esac
  shift
done

ROOT="$CACHE/llama-$VERSION"

# The sdist's vendored llama.cpp, downloaded with pip and unpacked once.
source_tree() {
  local src="$ROOT/llama_cpp_python-$VERSION/vendor/llama.cpp"
  if [ ! -f "$src/CMakeLists.txt" ]; then
    local sdist="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
    if [ ! -f "$sdist" ]; then
      mkdir -p "$CACHE/sdist"
      "$PYTHON" -m pip download --no-deps --no-binary :all: -d "$CACHE/sdist" \
        "llama-cpp-python==$VERSION" >&2
    fi
    mkdir -p "$ROOT"
    tar xzf "$sdist" -C "$ROOT"
  fi
  echo "$src"
}

# Only what configuring and building llama-server reads: no docs, models, tests, examples,
# other GPU backends or the web UI's sources (the UI is not embedded).
trim() {
  local src="$1" dst="$2"
  mkdir -p "$dst"
  tar -C "$src" -cf - \
    --exclude=./docs --exclude=./models --exclude=./media --exclude=./examples \
    --exclude=./pocs --exclude=./tests --exclude=./benches --exclude=./conversion \
    --exclude=./ci --exclude=./skills --exclude=./app/tests \
    --exclude=./tools/ui/src --exclude=./tools/ui/tests --exclude=./tools/ui/static \
    --exclude=./tools/ui/package-lock.json --exclude=./tools/ui/package.json \
    --exclude=./tools/server/tests --exclude=./tools/server/public* \
    --exclude=./ggml/src/ggml-cann --exclude=./ggml/src/ggml-et \
    --exclude=./ggml/src/ggml-hexagon --exclude=./ggml/src/ggml-hip \
    --exclude=./ggml/src/ggml-metal --exclude=./ggml/src/ggml-musa \
    --exclude=./ggml/src/ggml-opencl --exclude=./ggml/src/ggml-openvino \
    --exclude=./ggml/src/ggml-sycl --exclude=./ggml/src/ggml-virtgpu \
    --exclude=./ggml/src/ggml-vulkan --exclude=./ggml/src/ggml-webgpu \
    --exclude=./ggml/src/ggml-zdnn --exclude=./ggml/src/ggml-zendnn \
    --exclude='*.py' --exclude=.git . | tar -C "$dst" -xf -
  # gguf-py writes the test suite's tiny model: keep it although it is Python.
  tar -C "$src" -cf - gguf-py | tar -C "$dst" -xf -
  du -sh "$dst" >&2
}

if [ -n "$TRIM" ]; then
  trim "$(source_tree)" "$TRIM"
  echo "$TRIM"
  exit 0
fi

if [ -n "$SOURCE" ]; then
  SRC="$(cd "$SOURCE" && pwd)"
  ROOT="$CACHE/llama-$VERSION-$(basename "$SRC")"
else
  SRC="$(source_tree)"
fi

FLAGS=(
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF
  -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF
)
BUILD="$ROOT/build" DONE="$ROOT/.build-ok"
if [ "$CUDA" = 1 ]; then
  FLAGS+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  BUILD="$ROOT/build-cuda" DONE="$ROOT/.build-cuda-ok"
fi
BIN="$BUILD/bin/llama-server"

if [ ! -f "$DONE" ] || [ ! -x "$BIN" ]; then
  for tool in cmake c++; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y cmake g++)" >&2; exit 1; }
  done
  mkdir -p "$ROOT"
  cmake -S "$SRC" -B "$BUILD" "${FLAGS[@]}" >&2
  cmake --build "$BUILD" --target llama-server -j "$JOBS" >&2
  echo "$VERSION" > "$DONE"
fi
echo "$BIN"
